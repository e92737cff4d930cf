"""Step resolution through the fake CUPTI: every GPU row is tagged by the call that launched it."""
from __future__ import annotations

import threading
import time

import duckdb
import pytest

import cuptiprof
from cuptiprof.collect.fake import FakeCupti
from cuptiprof.collect.session import Session


@pytest.fixture
def run(tmp_path):
    """run(body, **session_kw) -> (read-only connection, fake): profile `body(fake)`."""
    def _run(body, fake=None, **kw):
        fake = fake or FakeCupti()
        path = tmp_path / "r.duckdb"
        with Session(path, source=fake, quiet=True, **kw):
            body(fake)
        return duckdb.connect(str(path), read_only=True), fake
    return _run


def q(con, sql):
    return con.execute(sql).fetchall()


def test_async_launch_running_after_its_range_closed_keeps_the_launching_step(run):
    def body(f):
        f.gpu_delay_ns = 50_000_000  # the GPU runs it 50 ms after the step range closed
        for i in range(2):
            with cuptiprof.range("step", step=i):
                f.launch_kernel("late_kernel")
    con, _ = run(body)
    rows = q(con, "SELECT k.step, k.start_ns > r.end_ns FROM kernels k "
                  "JOIN ranges r ON r.range_id = k.range_id ORDER BY k.step")
    assert rows == [(0, True), (1, True)]


def test_nested_ranges_claim_innermost_range_and_outer_step(run):
    ids = {}

    def body(f):
        with cuptiprof.range("step", step=7):
            f.launch_kernel("outer_k")
            with cuptiprof.range("attention", layer=1):
                with cuptiprof.range("softmax"):
                    f.launch_kernel("inner_k")
    con, _ = run(body)
    rows = dict(q(con, "SELECT k.name, r.name || ':' || k.step FROM kernels k "
                       "JOIN ranges r USING (range_id)"))
    assert rows == {"outer_k": "step:7", "inner_k": "softmax:7"}
    depth = dict(q(con, "SELECT name, depth FROM ranges"))
    assert depth == {"step": 0, "attention": 1, "softmax": 2}
    parent = q(con, "SELECT p.name FROM ranges c JOIN ranges p ON p.range_id = c.parent_id "
                    "WHERE c.name = 'softmax'")
    assert parent == [("attention",)]
    assert q(con, "SELECT attrs FROM ranges WHERE name = 'attention'") == [('{"layer": 1}',)]


def test_two_threads_each_keep_their_own_ranges(run):
    def body(f):
        def worker():
            with cuptiprof.range("prefetch"):
                f.memcpy(4096, "HtoD")
            f.launch_kernel("no_range_on_worker")

        with cuptiprof.range("step", step=0):
            t = threading.Thread(target=worker)
            t.start()
            with cuptiprof.range("main_work"):
                f.launch_kernel("main_k")
            t.join()
    con, _ = run(body)
    assert q(con, "SELECT r.name, m.step FROM memcpys m JOIN ranges r USING (range_id)") == [
        ("prefetch", 0)]
    assert q(con, "SELECT r.name, k.step FROM kernels k JOIN ranges r USING (range_id)") == [
        ("main_work", 0)]
    # the worker's launch in no range takes the step open at its launch, with no range
    assert q(con, "SELECT step, range_id FROM kernels WHERE name = 'no_range_on_worker'") == [
        (0, None)]
    assert q(con, "SELECT count(*) FROM data_quality WHERE check_name = 'unclaimed_records'"
             ) == [(0,)]
    threads = q(con, "SELECT count(DISTINCT thread_id) FROM ranges")
    assert threads == [(2,)]


def _in_thread(fn):
    t = threading.Thread(target=fn)
    t.start()
    t.join()


@pytest.mark.parametrize("nvtx", [False, True])
def test_a_launch_in_no_range_takes_the_step_open_at_its_launch(run, nvtx):
    """As the Kineto importer and the run without a GPU do: work another thread launches in no
    range while a recorded step is open is that step's (by its call's start), not unclaimed;
    work launched in no range while no step is open stays unclaimed."""
    def body(f):
        _in_thread(lambda: f.launch_kernel("before_steps"))
        for i in range(2):
            with cuptiprof.range("step", step=i):
                if nvtx:   # an NVTX range of another domain: the resolver projects markers too
                    f.nvtx_push("aten::mm", domain="torch")
                    f.nvtx_pop()
                f.launch_kernel(f"main_{i}")
                _in_thread(lambda: (f.launch_kernel(f"worker_{i}"), f.memcpy(64, "HtoD")))
            _in_thread(lambda: f.launch_kernel(f"between_{i}"))
    con, _ = run(body)
    assert q(con, "SELECT name, step, range_id IS NULL FROM kernels ORDER BY start_ns") == [
        ("before_steps", None, True), ("main_0", 0, False), ("worker_0", 0, True),
        ("between_0", None, True), ("main_1", 1, False), ("worker_1", 1, True),
        ("between_1", None, True)]
    assert q(con, "SELECT step FROM memcpys ORDER BY start_ns") == [(0,), (1,)]
    # the launching calls carry the same step
    assert q(con, "SELECT k.name, a.step FROM kernels k JOIN api_calls a USING (correlation_id) "
                  "WHERE k.name LIKE 'worker%' ORDER BY k.name") == [("worker_0", 0),
                                                                     ("worker_1", 1)]
    assert q(con, "SELECT subject, count FROM data_quality WHERE check_name = 'unclaimed_records'"
             ) == [("kernel", 3)]
    assert q(con, "SELECT count(*) FROM data_quality WHERE check_name = 'empty_step'") == [(0,)]


def test_a_launch_in_no_range_never_takes_a_warm_up_step(run):
    """Thread A holds the warm-up step while thread B's recorded step turns collection on. A
    launch in no range from A (inside its own warm-up) has no step; one from a third thread
    takes B's step while it is open (the latest-started recorded step, as steps_at), and none
    once only the warm-up is open."""
    a_in, b_done, a_go, a_launched, a_done = (threading.Event() for _ in range(5))

    def body(f):
        def a():
            with cuptiprof.range("step", step=0):   # the warm-up
                a_in.set()
                a_go.wait(10)
                f.launch_kernel("from_warmup_thread")
                a_launched.set()
                b_done.wait(10)
                _in_thread(lambda: f.launch_kernel("third_in_warmup_only"))
            a_done.set()

        ta = threading.Thread(target=a)
        ta.start()
        a_in.wait(10)
        with cuptiprof.range("step", step=1):
            f.launch_kernel("b_k")
            a_go.set()
            _in_thread(lambda: f.launch_kernel("third_in_both"))
            a_launched.wait(10)
        b_done.set()
        a_done.wait(10)
        ta.join()
        with cuptiprof.range("step", step=2):
            f.launch_kernel("c_k")
    con, _ = run(body, warmup=1, steps=2)
    assert dict(q(con, "SELECT name, step FROM kernels")) == {
        "b_k": 1, "third_in_both": 1, "from_warmup_thread": None, "third_in_warmup_only": None,
        "c_k": 2}
    assert q(con, "SELECT subject, count FROM data_quality WHERE check_name = 'unclaimed_records'"
             ) == [("kernel", 2)]


def test_a_launch_in_no_range_takes_the_latest_started_of_two_open_steps(run):
    """Steps two threads run at once: a launch in no range from a third thread takes the one
    that started last (interop.nesting.steps_at)."""
    first_in, second_done = threading.Event(), threading.Event()

    def body(f):
        def first():
            with cuptiprof.range("step", step=0):
                f.launch_kernel("k0")
                first_in.set()
                second_done.wait(10)

        t = threading.Thread(target=first)
        t.start()
        first_in.wait(10)
        with cuptiprof.range("step", step=1):
            f.launch_kernel("k1")
            _in_thread(lambda: f.launch_kernel("third"))
        second_done.set()
        t.join()
    con, _ = run(body)
    assert dict(q(con, "SELECT name, step FROM kernels")) == {"k0": 0, "k1": 1, "third": 1}


def test_graph_replay_kernels_resolve_through_graph_launch(run):
    def body(f):
        for i in range(2):
            with cuptiprof.range("step", step=i):
                f.graph_launch(["g_a", "g_b", "g_c"], graph_id=9)
    con, _ = run(body)
    rows = q(con, "SELECT step, count(*), count(DISTINCT correlation_id), min(graph_id) "
                  "FROM kernels GROUP BY step ORDER BY step")
    assert rows == [(0, 3, 1, 9), (1, 3, 1, 9)]
    api = q(con, "SELECT DISTINCT a.name FROM api_calls a JOIN kernels k USING (correlation_id)")
    assert api == [("cudaGraphLaunch",)]


def test_records_no_range_claims_are_kept_with_null_step(run):
    def body(f):
        f.launch_kernel("before_any_step")
        with cuptiprof.range("step", step=0):
            f.launch_kernel("in_step")
        f.memset(64)
    con, _ = run(body)
    assert q(con, "SELECT name, step FROM kernels ORDER BY name") == [
        ("before_any_step", None), ("in_step", 0)]
    assert q(con, "SELECT step FROM memsets") == [(None,)]
    dq = q(con, "SELECT subject, count FROM data_quality WHERE check_name = 'unclaimed_records' "
                "ORDER BY subject")
    assert dq == [("kernel", 1), ("memset", 1)]


def test_framework_nvtx_ranges_project_onto_launches(run):
    def body(f):
        with cuptiprof.range("step", step=3):
            f.nvtx_push("aten::mm", domain="torch")
            f.launch_kernel("mm_kernel")
            f.nvtx_pop()
            f.launch_kernel("plain_kernel")

        def worker():  # no cuptiprof range on this thread: projection by thread and time
            f.nvtx_push("nccl_allreduce")
            f.launch_kernel("nccl_kernel")
            f.nvtx_pop()
        with cuptiprof.range("step", step=4):
            t = threading.Thread(target=worker)
            t.start()
            t.join()
    con, _ = run(body)
    rows = dict((n, (r, s)) for n, r, s in q(
        con, "SELECT k.name, r.name, k.step FROM kernels k LEFT JOIN ranges r USING (range_id)"))
    assert rows == {"mm_kernel": ("aten::mm", 3), "plain_kernel": ("step", 3),
                    "nccl_kernel": ("nccl_allreduce", 4)}
    doms = dict(q(con, "SELECT name, domain FROM ranges WHERE kind = 'user'"))
    assert doms == {"aten::mm": "torch", "nccl_allreduce": None}
    assert q(con, "SELECT step FROM ranges WHERE name = 'aten::mm'") == [(3,)]


def test_foreign_step_range_numbers_steps(run):
    """Only a range named exactly as step_range is a step: 'denoise_vae' is a user range."""
    def body(f):
        for i in range(3):
            f.nvtx_push("denoise")
            f.launch_kernel(f"k{i}")
            f.nvtx_pop()
        f.nvtx_push("denoise_vae")
        f.nvtx_pop()
    con, _ = run(body, step_range="denoise")
    assert q(con, "SELECT name, step FROM kernels ORDER BY name") == [("k0", 0), ("k1", 1),
                                                                       ("k2", 2)]
    assert q(con, "SELECT step FROM ranges WHERE kind = 'step' ORDER BY step") == [(0,), (1,),
                                                                                   (2,)]
    assert q(con, "SELECT kind FROM ranges WHERE name = 'denoise_vae'") == [("user",)]


def test_copies_memsets_syncs_and_memory_are_tagged(run):
    def body(f):
        with cuptiprof.range("step", step=1):
            f.memcpy(1 << 20, "HtoD")
            f.memcpy(2048, "DtoH", is_async=False)
            f.memset(512, value=7)
            f.malloc(1 << 21, 0x7000, pool=True)
            f.malloc(1 << 21, 0x7000, free=True, pool=True)
            f.stream_synchronize()
    con, _ = run(body)
    assert q(con, "SELECT copy_kind, src_kind, dst_kind, bytes, is_async, step FROM memcpys "
                  "ORDER BY bytes") == [("DtoH", "device", "pinned", 2048, False, 1),
                                        ("HtoD", "pinned", "device", 1 << 20, True, 1)]
    assert q(con, "SELECT bytes, value, memory_kind, step FROM memsets") == [(512, 7, "device", 1)]
    assert q(con, "SELECT sync_type, stream_id, device_id, step FROM syncs") == [
        ("stream_synchronize", 7, 0, 1)]
    assert q(con, "SELECT operation, bytes, address, pool, step FROM memory_events "
                  "ORDER BY time_ns") == [("alloc", 1 << 21, 0x7000, True, 1),
                                          ("free", 1 << 21, 0x7000, True, 1)]


def test_nvtx_and_cuptiprof_ranges_nest_in_one_tree(run, tmp_path):
    """An NVTX range (another domain) opened inside a cuptiprof.range has it as parent, and a
    cuptiprof.range opened inside an NVTX range has that as parent: the ranges report's
    inclusive time of each range then holds the work of the other kind nested inside."""
    def body(f):
        with cuptiprof.range("step", step=0):
            with cuptiprof.range("transformer"):
                f.launch_kernel("proj_kernel")
                f.nvtx_push("attn", domain="torch")
                f.launch_kernel("attn_kernel")
                f.nvtx_push("softmax", domain="torch")
                f.launch_kernel("softmax_kernel")
                f.nvtx_pop()
                f.nvtx_pop()
            f.nvtx_push("vae")
            with cuptiprof.range("decode"):
                f.launch_kernel("conv_kernel")
            f.nvtx_pop()
    con, _ = run(body)
    parent = dict(q(con, "SELECT r.name, p.name FROM ranges r LEFT JOIN ranges p "
                         "ON p.range_id = r.parent_id"))
    assert parent == {"step": None, "transformer": "step", "attn": "transformer",
                      "softmax": "attn", "vae": "step", "decode": "vae"}
    depth = dict(q(con, "SELECT name, depth FROM ranges"))
    assert depth["attn"] == 2 and depth["softmax"] == 3 and depth["vae"] == 1
    con.close()
    with cuptiprof.open(tmp_path / "r.duckdb") as prof:
        rel = prof.report("ranges")
        got = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    assert got["transformer"]["gpu_calls"] == 3 and got["attn"]["gpu_calls"] == 2
    assert got["vae"]["gpu_calls"] == 1 and got["decode"]["self_gpu_ms"] == got["decode"]["gpu_ms"]
    assert got["transformer"]["self_gpu_ms"] < got["transformer"]["gpu_ms"]


def _untimed(f, table, start, end, api="cudaLaunchKernel_v7000", **fields):
    """A GPU record CUPTI could not time (CUPTI_TIMESTAMP_UNKNOWN = 0, or an unfinished record
    of a forced flush), launched by a call on this thread."""
    kinds = {"kernel": "CONCURRENT_KERNEL", "memcpy": "MEMCPY", "memset": "MEMSET",
             "sync": "SYNCHRONIZATION"}
    corr = f.api_call(api)
    if table != "sync":
        fields["device_id"] = 0
    f._emit(table, kind=int(getattr(f.ActivityKind, kinds[table])), start=start, end=end,
            context_id=1, stream_id=7, correlation_id=corr, **fields)


def test_untimed_records_are_counted_not_written(run, tmp_path):
    def body(f):
        for i in range(3):
            with cuptiprof.range("step", step=i):
                f.launch_kernel("gemm", duration_ns=50_000)
                if i == 1:
                    _untimed(f, "kernel", 0, 0, name="untimed_kernel")
                    _untimed(f, "kernel", 0, 0, name="untimed_kernel")
                    _untimed(f, "memcpy", 5_000, 1_000, "cudaMemcpyAsync_v3020", copy_kind=1,
                             bytes=64)
                    _untimed(f, "memset", 0, 9_000, "cudaMemsetAsync_v3020", bytes=64)
                    _untimed(f, "sync", 123, 0, "cudaStreamSynchronize_v3020", type=3)
                    f.overhead()
                    f._emit("overhead", kind=int(f.ActivityKind.OVERHEAD),
                            overhead_kind=0x10000, start=0, end=10_000)
        _untimed(f, "kernel", 0, 0, name="untimed_outside")
    con, _ = run(body)
    assert q(con, "SELECT step, name FROM kernels ORDER BY step") == [
        (0, "gemm"), (1, "gemm"), (2, "gemm")]
    for table in ("kernels", "memcpys", "memsets", "syncs"):
        assert q(con, f"SELECT count(*) FROM {table} WHERE start_ns = 0 OR end_ns = 0 "
                      "OR end_ns < start_ns") == [(0,)], table
    dq = q(con, "SELECT subject, count, detail FROM data_quality "
                "WHERE check_name = 'untimed_records' ORDER BY subject, count DESC")
    assert [(s, n) for s, n, _ in dq] == [("kernel", 2), ("kernel", 1), ("memcpy", 1),
                                          ("memset", 1), ("overhead", 1), ("sync", 1)]
    assert "in step 1" in dq[0][2] and "outside any step" in dq[1][2]
    assert "could not time" in dq[0][2] and "left out of every time" in dq[0][2]
    # the one timed overhead span only, not one reaching back to 1970
    assert q(con, "SELECT count, value_ns FROM data_quality "
                  "WHERE check_name = 'cupti_overhead'") == [(1, 10_000)]
    assert q(con, "SELECT count(*) FROM data_quality WHERE check_name = 'unclaimed_records'"
             ) == [(0,)]
    # the writer's busy summary and the step report see step 1's timed kernel only
    assert q(con, "SELECT step, busy_ns, end_ns - start_ns FROM step_busy ORDER BY step") == [
        (0, 50_000, 50_000), (1, 50_000, 50_000), (2, 50_000, 50_000)]
    con.close()
    with cuptiprof.open(tmp_path / "r.duckdb") as prof:
        rel = prof.steps_report()
        got = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert [(r["step"], r["gpu_window_ms"], r["idle_pct"]) for r in got] == [
        (0, 0.05, 0), (1, 0.05, 0), (2, 0.05, 0)]


def test_a_launch_in_a_range_begun_before_the_steps_takes_the_step_open_at_its_launch(run):
    """A worker's NVTX range (or cuptiprof range) pushed before the first step and still open
    while a step runs: its launches were claimed by a range of no step and kept a NULL step;
    they take the step open at their launch, as launches in no range do. The range keeps its
    own (no) step, and work launched in it outside every step stays unclaimed."""
    before, go, done = threading.Event(), threading.Event(), threading.Event()

    def body(f):
        def worker(kind):
            if kind == "nvtx":
                f.nvtx_push("serve")
            r = cuptiprof.range("serve") if kind == "range" else None
            if r:
                r.__enter__()
            f.launch_kernel(f"{kind}_before")
            before.set()
            go.wait()
            f.launch_kernel(f"{kind}_in_step")
            done.set()
            if r:
                r.__exit__(None, None, None)
            else:
                f.nvtx_pop()

        for kind in ("nvtx", "range"):
            before.clear(), go.clear(), done.clear()
            t = threading.Thread(target=worker, args=(kind,))
            t.start()
            before.wait()   # the range and its first launch come before the step
            with cuptiprof.range("step", step=7 if kind == "nvtx" else 8):
                go.set()
                done.wait()
            t.join()
    con, _ = run(body)
    assert q(con, "SELECT k.name, r.name, k.step FROM kernels k LEFT JOIN ranges r USING (range_id) "
                  "ORDER BY k.start_ns") == [
        ("nvtx_before", "serve", None), ("nvtx_in_step", "serve", 7),
        ("range_before", "serve", None), ("range_in_step", "serve", 8)]
    assert q(con, "SELECT name, step FROM ranges WHERE name = 'serve'") == [("serve", None)] * 2


# each launching call's step and range beside those of the GPU row it launched
_CALL_VS_ROW = ("SELECT k.name, k.step, c.step, kr.name, cr.name FROM kernels k "
                "JOIN api_calls c USING (run_id, pid, correlation_id) "
                "LEFT JOIN ranges kr ON kr.range_id = k.range_id "
                "LEFT JOIN ranges cr ON cr.range_id = c.range_id ORDER BY k.start_ns")


def test_a_call_has_the_innermost_range_its_work_has(run):
    """A launch inside a framework's NVTX range (opened inside a cuptiprof range): the call, as
    its kernel, has that NVTX range as its innermost."""
    def body(f):
        with cuptiprof.range("step", step=0), cuptiprof.range("fwd"):
            f.launch_kernel("gemm")
            f.nvtx_push("attn", domain="torch")
            f.launch_kernel("softmax")
            f.nvtx_pop()
    con, _ = run(body)
    assert q(con, _CALL_VS_ROW) == [("gemm", 0, 0, "fwd", "fwd"), ("softmax", 0, 0, "attn", "attn")]


def test_a_launch_in_a_range_begun_outside_every_step_takes_the_step_at_its_time(run):
    """A worker's range opened before the first step: its launch during step 0, the call as
    the kernel, takes the step open at its time (whatever else the flush holds)."""
    opened, stepping = threading.Event(), threading.Event()

    def body(f):
        def worker():
            with cuptiprof.range("prefetch"):
                opened.set()
                stepping.wait(10)
                f.launch_kernel("worker_k")

        t = threading.Thread(target=worker)
        t.start()
        opened.wait(10)
        with cuptiprof.range("step", step=0):
            stepping.set()
            t.join()
    con, _ = run(body)
    assert q(con, "SELECT step FROM ranges WHERE name = 'prefetch'") == [(None,)]
    assert q(con, _CALL_VS_ROW) == [("worker_k", 0, 0, "prefetch", "prefetch")]


def test_peer_copies_keep_their_devices_and_count_as_memcpys(run):
    """MEMCPY2 (peer-to-peer) records are memcpys rows with their source and destination
    devices; the ones left out or unclaimed are counted under 'memcpy' with the others."""
    def body(f):
        f.memcpy_peer(4096, 1, 0)          # before every step: unclaimed
        f.memcpy(64, "HtoD")               # unclaimed too
        with cuptiprof.range("step", step=1):
            f.memcpy_peer(1 << 20, 0, 1)
            corr = f.api_call("cudaMemcpyPeerAsync_v4000")
            f._emit("memcpy_p2p", kind=int(f.ActivityKind.MEMCPY2), start=0, end=0,
                    device_id=0, context_id=1, stream_id=7, correlation_id=corr, copy_kind=10,
                    bytes=8, src_device_id=0, dst_device_id=1)
            _untimed(f, "memcpy", 0, 0, "cudaMemcpyAsync_v3020", copy_kind=1, bytes=8)
    con, _ = run(body)
    assert q(con, "SELECT copy_kind, bytes, device_id, src_device_id, dst_device_id, step "
                  "FROM memcpys ORDER BY start_ns") == [
        ("PtoP", 4096, 1, 1, 0, None), ("HtoD", 64, 0, None, None, None),
        ("PtoP", 1 << 20, 0, 0, 1, 1)]
    assert q(con, "SELECT check_name, subject, count FROM data_quality "
                  "WHERE check_name IN ('unclaimed_records', 'untimed_records') ORDER BY 1") == [
        ("unclaimed_records", "memcpy", 2), ("untimed_records", "memcpy", 2)]


def _enum(e):
    return [m for m in e if m.name != "FORCE_INT"]


def test_copy_memory_and_sync_kinds_are_named_as_cuptis_enums(run):
    """Each ActivityMemcpyKind / ActivityMemoryKind / ActivitySynchronizationType value gets its
    own name (HTOD -> 'HtoD', PINNED -> 'pinned'); a value CUPTI may add later is 'unknown'."""
    from cupti import cupti
    copy = _enum(cupti.ActivityMemcpyKind) + [11]
    mem = _enum(cupti.ActivityMemoryKind) + [8]
    sync = _enum(cupti.ActivitySynchronizationType) + [5]
    K = FakeCupti.ActivityKind

    def copy_name(m):
        return "unknown" if not hasattr(m, "name") or m.name == "UNKNOWN" else (
            m.name[0] + "to" + m.name[3])

    def mem_name(m):
        return m.name.lower() if hasattr(m, "name") else "unknown"

    def body(f):
        with cuptiprof.range("step", step=0):
            t = time.time_ns()
            for i, ck in enumerate(copy):
                f._emit("memcpy", kind=int(K.MEMCPY), start=t + i, end=t + i + 1, device_id=0,
                        context_id=1, stream_id=7, correlation_id=f.api_call("cudaMemcpy_v3020"),
                        copy_kind=int(ck), src_kind=int(mem[i % len(mem)]),
                        dst_kind=int(mem[(i + 3) % len(mem)]), bytes=i + 1)
            for i, mk in enumerate(mem):
                f._emit("memset", kind=int(K.MEMSET), start=t + i, end=t + i + 1, device_id=0,
                        context_id=1, stream_id=7, correlation_id=f.api_call("cudaMemset_v3020"),
                        bytes=i + 1, memory_kind=int(mk))
                f._emit("memory", kind=int(K.MEMORY2), memory_operation_type=1,
                        memory_kind=int(mk), correlation_id=f.api_call("cudaMalloc_v3020"),
                        address=0x1000 * (i + 1), bytes=i + 1, timestamp=t + i, device_id=0)
            for i, st in enumerate(sync):
                f._emit("sync", kind=int(K.SYNCHRONIZATION), type=int(st), start=t + i,
                        end=t + i + 1, context_id=1, stream_id=7, cuda_event_id=i,
                        correlation_id=f.api_call("cudaStreamSynchronize_v3020"))
    con, _ = run(body)
    assert q(con, "SELECT copy_kind, src_kind, dst_kind FROM memcpys ORDER BY bytes") == [
        (copy_name(ck), mem_name(mem[i % len(mem)]), mem_name(mem[(i + 3) % len(mem)]))
        for i, ck in enumerate(copy)]
    assert q(con, "SELECT copy_kind FROM memcpys ORDER BY bytes")[1:3] == [("HtoD",), ("DtoH",)]
    assert q(con, "SELECT memory_kind FROM memsets ORDER BY bytes") == [
        (mem_name(m),) for m in mem]
    assert q(con, "SELECT memory_kind FROM memory_events ORDER BY bytes") == [
        (mem_name(m),) for m in mem]
    assert q(con, "SELECT sync_type FROM syncs ORDER BY cuda_event_id") == [
        (m.name.lower() if hasattr(m, "name") else "unknown",) for m in sync]


def test_not_applicable_ids_are_null_and_memory_pools_of_either_type_are_pools(run):
    """CUPTI's 0xFFFFFFFF ('not applicable') stream and event ids are NULL, other ids kept; a
    memory operation in a local or an imported pool is a pool operation."""
    K = FakeCupti.ActivityKind

    def body(f):
        with cuptiprof.range("step", step=0):
            t = time.time_ns()
            for i, (stream, event, kind) in enumerate([(0xFFFFFFFF, 0xFFFFFFFF, 4),
                                                       (7, 12, 2), (0, 0xFFFFFFFE, 1)]):
                f._emit("sync", kind=int(K.SYNCHRONIZATION), type=kind, start=t + i,
                        end=t + i + 10, context_id=1, stream_id=stream, cuda_event_id=event,
                        correlation_id=f.api_call("cudaStreamSynchronize_v3020"))
            f._emit("kernel", kind=int(K.CONCURRENT_KERNEL), start=t, end=t + 5, device_id=0,
                    context_id=1, stream_id=0xFFFFFFFF, name="k",
                    correlation_id=f.api_call("cudaLaunchKernel_v7000"))
            for i, (op, pool) in enumerate([(1, 0), (1, 1), (2, 2), (2, 0)]):
                f._emit("memory", kind=int(K.MEMORY2), memory_operation_type=op, memory_kind=3,
                        correlation_id=f.api_call("cudaMalloc_v3020"), address=0x1000,
                        bytes=64 * (i + 1), timestamp=t + i, device_id=0,
                        **{"memory_pool_config.memory_pool_type": pool})
    con, _ = run(body)
    assert q(con, "SELECT sync_type, stream_id, cuda_event_id FROM syncs ORDER BY start_ns") == [
        ("context_synchronize", None, None), ("stream_wait_event", 7, 12),
        ("event_synchronize", 0, 0xFFFFFFFE)]
    assert q(con, "SELECT stream_id FROM kernels") == [(None,)]
    assert q(con, "SELECT operation, pool FROM memory_events ORDER BY bytes") == [
        ("alloc", False), ("alloc", True), ("free", True), ("free", False)]


def test_driver_api_launches_are_joined_and_named_like_runtime_ones(run):
    """A kernel launched through the driver API (cuLaunchKernel, as Triton does): its call is a
    'driver' api_calls row under its own name, and a launch in no range takes the step open
    at that call's start, as a runtime launch does."""
    def body(f):
        with cuptiprof.range("step", step=4):
            f.launch_kernel("in_range", corr=f.api_call("cuLaunchKernel", driver=True))
            f.launch_kernel("runtime_k")

            def worker():
                f.launch_kernel("no_range", corr=f.api_call("cuLaunchKernel", driver=True))
            _in_thread(worker)
    con, _ = run(body)
    assert q(con, "SELECT k.name, k.step, r.name, a.api_kind, a.name, a.step FROM kernels k "
                  "JOIN api_calls a USING (correlation_id) LEFT JOIN ranges r "
                  "ON r.range_id = k.range_id ORDER BY k.start_ns") == [
        ("in_range", 4, "step", "driver", "cuLaunchKernel", 4),
        ("runtime_k", 4, "step", "runtime", "cudaLaunchKernel", 4),
        ("no_range", 4, None, "driver", "cuLaunchKernel", 4)]
    assert q(con, "SELECT count(*) FROM data_quality WHERE check_name = 'unclaimed_records'"
             ) == [(0,)]


def test_work_outside_a_graph_has_null_graph_ids(run):
    def body(f):
        with cuptiprof.range("step", step=0):
            f.launch_kernel("plain")
            f.graph_launch(["g_a", "g_b"], graph_id=9)
            f.memcpy(64)
            f.memset(64)
    con, _ = run(body)
    assert q(con, "SELECT name, graph_id, graph_node_id FROM kernels ORDER BY start_ns") == [
        ("plain", None, None), ("g_a", 9, 100), ("g_b", 9, 101)]
    assert q(con, "SELECT graph_id, graph_node_id FROM memcpys") == [(None, None)]
    assert q(con, "SELECT graph_id, graph_node_id FROM memsets") == [(None, None)]


def test_peer_copies_captured_in_a_graph_keep_their_graph_ids(run):
    """A MEMCPY2 record of a graph node says its graph and node as a kernel's does; a peer
    copy outside any graph (ids 0) has NULL ones."""
    def body(f):
        with cuptiprof.range("step", step=0):
            f.memcpy_peer(1 << 20, 0, 1, graph_id=5, graph_node_id=42)
            f.memcpy_peer(4096, 1, 0)
    con, _ = run(body)
    assert q(con, "SELECT bytes, graph_id, graph_node_id FROM memcpys ORDER BY start_ns") == [
        (1 << 20, 5, 42), (4096, None, None)]


def test_a_record_that_ends_as_it_starts_is_timed(run):
    """start == end is a valid (zero-length) time, not CUPTI's 'unknown': the row is written."""
    def body(f):
        with cuptiprof.range("step", step=0):
            t = time.time_ns()
            _untimed(f, "memset", t, t, "cudaMemsetAsync_v3020", bytes=4)
            _untimed(f, "kernel", t + 10, t + 10, name="empty_kernel")
    con, _ = run(body)
    assert q(con, "SELECT end_ns - start_ns, step FROM memsets") == [(0, 0)]
    assert q(con, "SELECT name, end_ns - start_ns FROM kernels") == [("empty_kernel", 0)]
    assert q(con, "SELECT count(*) FROM data_quality WHERE check_name = 'untimed_records'"
             ) == [(0,)]


def test_kernel_launch_configuration_is_written_field_by_field(run):
    def body(f):
        with cuptiprof.range("step", step=0):
            t = time.time_ns()
            f._emit("kernel", kind=int(f.ActivityKind.CONCURRENT_KERNEL), start=t, end=t + 9,
                    device_id=0, context_id=1, stream_id=7, name="conf",
                    correlation_id=f.api_call("cudaLaunchKernel_v7000"), grid_x=2, grid_y=3,
                    grid_z=5, block_x=7, block_y=11, block_z=13, registers_per_thread=17,
                    static_shared_memory=19, dynamic_shared_memory=23)
    con, _ = run(body)
    assert q(con, "SELECT grid_x, grid_y, grid_z, block_x, block_y, block_z, registers, "
                  "static_smem, dynamic_smem, device_id, context_id FROM kernels") == [
        (2, 3, 5, 7, 11, 13, 17, 19, 23, 0, 1)]


def test_external_ids_another_tool_pushes_are_not_ranges(run):
    """Another tool's external correlation ids (Kineto pushes CUSTOM0/CUSTOM1) on the same
    calls leave the join to cuptiprof's own (CUSTOM2) ids."""
    kinds = FakeCupti.ExternalCorrelationKind

    def body(f):
        with cuptiprof.range("step", step=2):
            with cuptiprof.range("attn"):
                f.activity_push_external_correlation_id(int(kinds.CUSTOM0), 424242)
                f.activity_push_external_correlation_id(int(kinds.CUSTOM1), 7)
                f.launch_kernel("k")
                f.activity_pop_external_correlation_id(int(kinds.CUSTOM1))
                f.activity_pop_external_correlation_id(int(kinds.CUSTOM0))
    con, _ = run(body)
    assert q(con, "SELECT k.step, r.name FROM kernels k JOIN ranges r USING (range_id)") == [
        (2, "attn")]
    assert q(con, "SELECT a.step, r.name FROM api_calls a JOIN ranges r USING (range_id)") == [
        (2, "attn")]


def test_a_gpu_record_delivered_a_flush_after_its_call_keeps_its_range_and_step(run):
    """CUPTI may hand a GPU record over in the flush after the one holding the API and
    external-correlation records of its launching call: the row still gets that call's range,
    or, launched in no range, the step open at the call."""
    calls = {}

    def body(f):
        with cuptiprof.range("step", step=0):
            with cuptiprof.range("attn"):
                calls["ranged"] = f.api_call("cudaLaunchKernel_v7000")
            _in_thread(lambda: calls.update(bare=f.api_call("cudaLaunchKernel_v7000")))
        with cuptiprof.range("step", step=1):   # the kernels come with this step's records
            f.launch_kernel("ranged", corr=calls["ranged"])
            f.launch_kernel("bare", corr=calls["bare"])
            f.launch_kernel("own")
    con, f = run(body, flush_every_s=0)
    assert [c for c in f.calls if c[0] == "flush"][:2] == [("flush", 0), ("flush", 0)]
    assert q(con, "SELECT k.name, k.step, r.name FROM kernels k LEFT JOIN ranges r "
                  "USING (range_id) ORDER BY k.start_ns") == [
        ("ranged", 0, "attn"), ("bare", 0, None), ("own", 1, "step")]
    assert q(con, "SELECT count(*) FROM data_quality WHERE check_name = 'unclaimed_records'"
             ) == [(0,)]


def test_foreign_step_ranges_take_their_number_from_the_payload(run):
    """A step range of another domain pushed with an int64 payload is the step of that number
    (the payload is kept in its attrs)."""
    def body(f):
        for i, payload in enumerate((40, 41, 45)):
            f.nvtx_push("denoise", payload=payload)
            f.launch_kernel(f"k{i}")
            f.nvtx_pop()
    con, _ = run(body, step_range="denoise")
    assert q(con, "SELECT name, step FROM kernels ORDER BY start_ns") == [
        ("k0", 40), ("k1", 41), ("k2", 45)]
    assert q(con, "SELECT step, attrs FROM ranges WHERE kind = 'step' ORDER BY start_ns") == [
        (40, '{"payload": 40}'), (41, '{"payload": 41}'), (45, '{"payload": 45}')]



def test_a_call_keeps_its_cbid_and_return_code(run):
    """api_calls.cbid is CUPTI's id of the function, and return_code the CUDA error the call
    returned (0 for success), what a query for failed launches and copies reads."""
    cbid = FakeCupti.runtime_api_trace_cbid

    def body(f):
        with cuptiprof.range("step", step=0):
            f.launch_kernel("ok")
            f.api_call("cudaMemcpyAsync_v3020", return_value=1)
    con, _ = run(body)
    assert q(con, "SELECT name, cbid, return_code FROM api_calls ORDER BY start_ns") == [
        ("cudaLaunchKernel", int(cbid.cudaLaunchKernel_v7000), 0),
        ("cudaMemcpyAsync", int(cbid.cudaMemcpyAsync_v3020), 1)]


def test_markers_of_cuptiprofs_own_domain_add_no_second_range(run):
    """cuptiprof.range also pushes an NVTX range in the 'cuptiprof' domain (for nsys), which
    CUPTI hands back as MARKER records: the session writes those ranges itself, so its own
    domain's markers add no 'user' range, and the work inside keeps the cuptiprof range."""
    def body(f):
        with cuptiprof.range("step", step=0):
            f.nvtx_push("step", domain="cuptiprof")
            f.launch_kernel("k")
            f.nvtx_pop()
    con, _ = run(body)
    assert q(con, "SELECT name, kind FROM ranges") == [("step", "step")]
    assert q(con, "SELECT k.step, r.kind FROM kernels k JOIN ranges r USING (range_id)") == [
        (0, "step")]


def test_foreign_step_ranges_with_a_payload_that_is_no_step_number_are_numbered_by_position(run):
    """CUPTI keeps a MARKER_DATA payload of every kind in the same 8 bytes: the nvtx package's
    float (DOUBLE) read as an int64 was a step such as 4651998512748167168, and a step number
    beyond the INTEGER step columns failed the flush and lost every row of the run. A payload
    that is no INTEGER step number (a float, 2**40, a C library's UINT64) numbers its step by
    position, as cuptiprof's own steps do, and is kept in attrs as it was sent."""
    def body(f):
        for i, payload in enumerate((40, -3, 999.0, 2 ** 40, 2 ** 64 - 1, float("nan"))):
            f.nvtx_push("denoise", payload=payload)
            f.launch_kernel(f"k{i}")
            f.nvtx_pop()
    con, _ = run(body, step_range="denoise")
    assert q(con, "SELECT name, step FROM kernels ORDER BY start_ns") == [
        ("k0", 40), ("k1", -3), ("k2", 2), ("k3", 3), ("k4", 4), ("k5", 5)]
    assert q(con, "SELECT step, attrs FROM ranges WHERE kind = 'step' ORDER BY start_ns") == [
        (40, '{"payload": 40}'), (-3, '{"payload": -3}'), (2, '{"payload": 999.0}'),
        (3, '{"payload": 1099511627776}'), (4, '{"payload": 18446744073709551615}'),
        (5, '{"payload": null}')]
    assert q(con, "SELECT check_name FROM data_quality") == []


def test_a_gpu_record_delivered_a_flush_before_its_call_waits_for_it(run):
    """CUPTI's per-thread buffers may hand a GPU record over a flush before the API and
    external-correlation records of its launching call: the row waits one flush for them and
    takes that call's range and step, once, instead of being written unclaimed or lost."""
    def body(f):
        with cuptiprof.range("step", step=0):
            f.launch_kernel("early", corr=f._corr + 1)   # the next call's id: its records follow
        with cuptiprof.range("step", step=1):
            with cuptiprof.range("attn"):
                f.api_call("cudaLaunchKernel_v7000")
    con, _ = run(body, flush_every_s=0)
    assert q(con, "SELECT k.name, k.step, r.name FROM kernels k LEFT JOIN ranges r "
                  "USING (range_id)") == [("early", 1, "attn")]
    assert q(con, "SELECT count(*) FROM data_quality WHERE check_name = 'unclaimed_records'"
             ) == [(0,)]
