"""Session behaviour with the fake CUPTI: sampling, flush/stop ordering, failures, the no-GPU path."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import cuptiprof
from cuptiprof import markers
from cuptiprof.collect.cupti_source import CuptiSource
from cuptiprof.collect.fake import FakeCupti
from cuptiprof.collect.resolve import SELF_ID
from cuptiprof.collect.session import Session
from cuptiprof.errors import UsageError
from cuptiprof.collect.libcuda import gpu_count as libcuda_gpu_count
from _run_helpers import no_leftover_session, q  # noqa: F401 - the fixture is used by name

ROOT = Path(__file__).resolve().parents[1]
K = FakeCupti.ActivityKind


@pytest.fixture(autouse=True)
def _clean(no_leftover_session):
    yield



def loop(fake, n, kernels=1):
    for i in range(n):
        with cuptiprof.range("step", step=i):
            for _ in range(kernels):
                fake.launch_kernel(f"k_step{i}")


def test_warmup_then_steps_then_collection_off(tmp_path):
    f = FakeCupti()
    p = tmp_path / "w.duckdb"
    with Session(p, warmup=2, steps=3, source=f, quiet=True):
        loop(f, 8)
    assert q(p, "SELECT DISTINCT step FROM kernels ORDER BY step") == [(2,), (3,), (4,)]
    assert q(p, "SELECT kind, count(*) FROM ranges GROUP BY kind ORDER BY kind") == [
        ("step", 3), ("warmup", 2)]
    names = [c[0] for c in f.calls]
    first_enable = names.index("enable")
    # nothing enabled or pushed during warm-up; everything off after the last recorded step
    assert names[:first_enable].count("push") == 0
    assert ("enable", int(K.CONCURRENT_KERNEL)) in f.calls
    assert ("enable", int(K.KERNEL)) not in f.calls
    assert not any(c[0] == "enable" and c[1] == int(K.GRAPH_TRACE) for c in f.calls)
    last_disable = max(i for i, c in enumerate(f.calls) if c[0] == "disable")
    assert names[last_disable:].count("push") == 0
    assert f.enabled == set()
    assert q(p, "SELECT count(*) FROM data_quality WHERE check_name = 'steps_short'") == [(0,)]


def test_fewer_steps_than_asked_is_said(tmp_path):
    f = FakeCupti()
    p = tmp_path / "s.duckdb"
    with Session(p, warmup=1, steps=5, source=f, quiet=True):
        loop(f, 3)
    assert q(p, "SELECT count FROM data_quality WHERE check_name = 'steps_short'") == [(2,)]


@pytest.mark.parametrize("marked", [0, 2])
def test_a_run_that_never_gets_past_the_warm_up_says_so(tmp_path, marked):
    """profile(warmup=3) without steps=: a program that marked fewer steps than the warm-up
    left a file without steps or GPU work, and nothing said why."""
    f = FakeCupti()
    p = tmp_path / "w.duckdb"
    with Session(p, warmup=3, source=f, quiet=True):
        loop(f, marked)
        f.launch_kernel("k_after")
    assert q(p, "SELECT count(*) FROM kernels") == [(0,)]
    assert q(p, "SELECT check_name, count, detail FROM data_quality") == [
        ("steps_short", 0, f"{marked} steps were marked, all within the 3 warm-up steps: no step "
                           "and no GPU work were recorded")]


def test_steps_shorter_than_the_flush_interval_share_one_flush(tmp_path, monkeypatch):
    """Each flush synchronizes the GPU and commits (milliseconds however little it holds): at
    every step's end it doubled a loop of 5 ms steps. A step's end flushes only once
    flush_every_s has passed since the last flush; stop() still writes every step."""
    f = FakeCupti()
    p = tmp_path / "o.duckdb"
    monkeypatch.setenv("CUPTIPROF_FLUSH_EVERY_S", "3600")
    s = Session(p, steps=None, source=f, quiet=True).start()
    assert s.flush_every_s == 3600
    for i in range(5):
        with cuptiprof.step(i):
            f.launch_kernel("k")
    assert s.flushes == 0 and s.writer.rows_written.get("kernel_rows", 0) == 0
    assert [c for c in f.calls if c[0] == "synchronize"] == []   # the GPU was left to run ahead
    s.stop()
    assert q(p, "SELECT step, count(*) FROM kernels GROUP BY step ORDER BY step") == [(i, 1) for i in range(5)]
    # with no interval, every step's end flushes
    s2 = Session(tmp_path / "t.duckdb", steps=None, source=FakeCupti(), quiet=True,
                 flush_every_s=0).start()
    with cuptiprof.step(0):
        pass
    assert s2.flushes == 1
    s2.stop()


@pytest.mark.parametrize("value,seconds", [("junk", 1.0), ("-2", 1.0), ("0.25", 0.25), (None, 1.0)])
def test_the_flush_interval_comes_from_the_environment(tmp_path, monkeypatch, value, seconds):
    if value is None:
        monkeypatch.delenv("CUPTIPROF_FLUSH_EVERY_S", raising=False)
    else:
        monkeypatch.setenv("CUPTIPROF_FLUSH_EVERY_S", value)
    assert Session(tmp_path / "e.duckdb", source=FakeCupti(), quiet=True).flush_every_s == seconds
    with pytest.raises(UsageError, match="flush_every_s must be a number of seconds"):
        Session(tmp_path / "e.duckdb", source=FakeCupti(), quiet=True, flush_every_s=-1)


def test_flush_after_synchronize_at_each_step_and_ordered_stop(tmp_path):
    f = FakeCupti()
    p = tmp_path / "o.duckdb"
    s = Session(p, steps=None, source=f, quiet=True).start()
    written = []
    for i in range(3):
        with cuptiprof.step(i):
            f.launch_kernel("k")
        written.append(s.writer.rows_written.get("kernel_rows", 0))
    assert written == [1, 2, 3]  # rows stream to the file at every step
    s.stop()
    names = [c[0] for c in f.calls]
    flushes = [i for i, n in enumerate(names) if n == "flush"]
    assert len(flushes) == 4
    for i in flushes[:3]:  # the session's own synchronize is tagged so its rows are dropped
        assert f.calls[i - 3:i] == [("push", 5, SELF_ID), ("synchronize",), ("pop", 5)]
    # stop: synchronize, disable every kind, forced flush, then give CUPTI back
    tail = names[names.index("synchronize", flushes[2] + 1):]
    assert tail[0] == "synchronize" and tail[-1] == "unsubscribe"
    assert f.calls[flushes[-1]] == ("flush", 1)
    assert tail[1] == "pop" and all(n == "disable" for n in tail[2:tail.index("flush")])
    assert f.calls[flushes[0]] == ("flush", 0)
    assert ("set_thread_id_type", int(FakeCupti.ActivityThreadIdType.SYSTEM)) in f.calls
    assert names.index("subscribe_v2") < names.index("register_callbacks") < names.index("enable")
    assert ("enable_and_dump", int(K.DEVICE)) in f.calls
    assert ("enable_and_dump", int(K.CONTEXT)) in f.calls
    assert q(p, "SELECT status FROM runs") == [("complete",)]
    assert q(p, "SELECT ended_early, end_ns IS NOT NULL FROM processes") == [(False, True)]


def test_push_pop_balanced_with_custom2_even_on_exceptions(tmp_path):
    f = FakeCupti()
    with Session(tmp_path / "e.duckdb", source=f, quiet=True):
        with pytest.raises(ZeroDivisionError):
            with cuptiprof.step(0):
                with cuptiprof.range("inner"):
                    1 / 0
    pushes = [c for c in f.calls if c[0] == "push" and c[2] != SELF_ID]
    pops = [c for c in f.calls if c[0] == "pop"]
    assert len(pushes) == 2 and len(pops) == len(pushes) + f.calls.count(("push", 5, SELF_ID))
    assert {c[1] for c in pushes + pops} == {int(FakeCupti.ExternalCorrelationKind.CUSTOM2)}
    assert not any(f._stacks.values())


def test_dropped_records_are_counted(tmp_path):
    f = FakeCupti()
    p = tmp_path / "d.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            f.launch_kernel("k")
            f.dropped = 7
        with cuptiprof.step(1):
            f.dropped = 5
        f.dropped = 3   # after the last step: read by stop()'s final flush
    assert q(p, "SELECT count FROM data_quality WHERE check_name = 'dropped_records'") == [(15,)]


def test_the_adapter_asks_cupti_for_what_its_docs_require():
    """CUPTI fills a buffer as full as it can only when the request callback's record cap is 0
    (any other cap makes it ask for buffer after buffer); KERNEL would serialize every kernel
    on the GPU, so kernels come from CONCURRENT_KERNEL; MARKER_DATA needs MARKER enabled before
    it; the noisy API calls are turned off (0), not on; every kind turned on is turned off at
    close, DEVICE and CONTEXT (dumped at enable) included."""
    f = FakeCupti()
    src = CuptiSource(f, nvtx_capture=True)
    src.open(lambda records: None)
    assert f._callbacks[0]() == (16 << 20, 0)
    src.enable(["kernel", "nvtx"])
    enabled = [c[1] for c in f.calls if c[0] == "enable"]
    assert int(K.CONCURRENT_KERNEL) in enabled and int(K.KERNEL) not in enabled
    assert enabled.index(int(K.MARKER)) < enabled.index(int(K.MARKER_DATA))
    quiet = [c for c in f.calls if c[0] in ("enable_runtime_api", "enable_driver_api")]
    assert quiet and {c[2] for c in quiet} == {0}
    src.close()
    assert {c[1] for c in f.calls if c[0] == "disable"} == set(enabled) | {int(K.DEVICE),
                                                                         int(K.CONTEXT)}


def test_a_failed_callback_registration_gives_cupti_back(tmp_path, capsys):
    """Subscribed, but the buffer callbacks could not be registered: the run goes on without GPU
    records, and CUPTI is not left held (torch.profiler or nsys later in the program would be
    refused it)."""
    class NoCallbacks(FakeCupti):
        def activity_register_callbacks(self, requested, completed):
            raise RuntimeError("CUPTI_ERROR_UNKNOWN")

    f = NoCallbacks()
    p = tmp_path / "cb.duckdb"
    with Session(p, source=f):
        with cuptiprof.step(0):
            pass
    assert ("subscribe_v2",) in f.calls and not f.subscribed
    assert "CUPTI register callbacks failed: CUPTI_ERROR_UNKNOWN" in capsys.readouterr().err
    assert q(p, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]


def test_cupti_is_finalized_once_at_exit(monkeypatch):
    """CUPTI 13.0-13.1 can crash the process at exit unless finalize() ran: opening the adapter
    registers it with atexit, once however many sessions open it."""
    from cuptiprof.collect import cupti_source

    at_exit = []
    monkeypatch.setattr(cupti_source, "_finalize_registered", False)
    monkeypatch.setattr(cupti_source.atexit, "register", at_exit.append)
    f = FakeCupti()
    for _ in range(2):
        src = CuptiSource(f)
        src.open(lambda records: None)
        src.close()
    assert len(at_exit) == 1 and not f.finalized
    at_exit[0]()
    assert f.finalized


def test_a_failed_external_correlation_pop_is_said_and_ranges_go_on(tmp_path):
    """A pop CUPTI refuses only costs which range launched what: the ranges are still written,
    and data_quality says why the launches lost their range."""
    class NoPop(FakeCupti):   # refuses to pop a range's id (the collector's own id it pops)
        def activity_pop_external_correlation_id(self, kind):
            if self._stacks[(threading.get_native_id(), int(kind))][-1] != SELF_ID:
                raise self.cuptiError(int(self.Result.ERROR_INVALID_OPERATION))
            return super().activity_pop_external_correlation_id(kind)

    f = NoPop()
    p = tmp_path / "pop.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            with cuptiprof.range("attn"):
                f.launch_kernel("k")
    assert q(p, "SELECT name FROM ranges ORDER BY start_ns") == [("step",), ("attn",)]
    details = q(p, "SELECT detail FROM data_quality WHERE check_name = 'cupti_error'")
    assert details and all(d.startswith("external correlation stack:") for d, in details), details


def test_cupti_refusing_to_start_collection_leaves_the_program_going(tmp_path):
    """Turning collection on fails: the program is not stopped by it, its steps are written,
    and data_quality says GPU records are missing from that point."""
    class NoEnable(CuptiSource):
        def enable(self, kinds):
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    f = FakeCupti()
    src = NoEnable(f)
    src.name = "fake"
    p = tmp_path / "en.duckdb"
    with Session(p, source=src, quiet=True):
        with cuptiprof.step(0):
            f.launch_kernel("k")
    assert not f.subscribed
    assert q(p, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]
    assert q(p, "SELECT detail FROM data_quality WHERE check_name = 'cupti_error'") == [
        ("CUPTI failed mid-run (CUPTI_ERROR_NOT_INITIALIZED); GPU records after this point were "
         "not captured",)]


def test_api_names_drop_only_a_version_suffix():
    """cudaLaunchKernel_v7000 is written as cudaLaunchKernel, but a per-thread-stream variant
    keeps its name whole (cuMemcpyHtoD_v2_ptds, not cuMemcpyHtoD); a cbid the bindings do not
    know is named after its API (cuApi#N for the driver, cudaApi#N for the runtime)."""
    src = CuptiSource(FakeCupti())
    cbid = FakeCupti.driver_api_trace_cbid
    assert src.api_name(False, int(FakeCupti.runtime_api_trace_cbid.cudaLaunchKernel_v7000)
                        ) == "cudaLaunchKernel"
    assert src.api_name(True, int(cbid.cuMemcpyHtoD_v2_ptds)) == "cuMemcpyHtoD_v2_ptds"
    assert src.api_name(True, int(cbid.cuMemcpyHtoD_v2)) == "cuMemcpyHtoD"
    assert (src.api_name(True, 99999), src.api_name(False, 99999)) == ("cuApi#99999",
                                                                       "cudaApi#99999")


def test_subscriber_conflict_one_line_and_program_continues(tmp_path, capsys):
    f = FakeCupti(conflict="Nsight Systems")
    p = tmp_path / "c.duckdb"
    with Session(p, steps=2, source=f):
        loop(f, 2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Nsight Systems" in err[0] and "no GPU activity" in err[0]
    # the subject names what was not captured, as `cuptiprof run` and the importers do
    assert q(p, "SELECT check_name, subject FROM data_quality") == [("subscriber_conflict", "gpu")]
    assert q(p, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(2,)]
    assert q(p, "SELECT count(*) FROM kernels") == [(0,)]
    assert not any(c[0] in ("enable", "push") for c in f.calls)


def test_no_driver_through_the_adapter(tmp_path, capsys):
    p = tmp_path / "n.duckdb"
    with Session(p, source=FakeCupti(no_driver=True)):
        with cuptiprof.step(0):
            pass
    assert "no CUDA driver" in capsys.readouterr().err
    assert q(p, "SELECT check_name FROM data_quality") == [("no_gpu",)]
    assert q(p, "SELECT device_id, kind FROM devices") == [(-1, "cpu")]


@pytest.mark.skipif(libcuda_gpu_count() > 0, reason="this machine has a GPU")
def test_no_gpu_default_source_writes_a_valid_file(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CUPTIPROF_FAKE_CUPTI", raising=False)
    p = tmp_path / "cpu.duckdb"
    with cuptiprof.profile(p, warmup=1, steps=2):
        for i in range(4):
            with cuptiprof.range("step", step=i):
                with cuptiprof.range("work"):
                    pass
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cuptiprof: notice: no GPU activity captured")
    assert q(p, "SELECT source, status FROM runs") == [("cpu", "complete")]
    assert q(p, "SELECT check_name FROM data_quality") == [("no_gpu",)]
    assert q(p, "SELECT kind, step FROM ranges WHERE depth = 0 ORDER BY start_ns") == [
        ("warmup", 0), ("step", 1), ("step", 2)]
    prof = cuptiprof.open(p)
    assert [r[0] for r in prof.report("quality").fetchall()] == [1]


def test_cupti_failure_mid_run_keeps_program_going(tmp_path, capsys):
    f = FakeCupti()
    p = tmp_path / "f.duckdb"

    def broken(flag):
        raise f.cuptiError(int(f.Result.ERROR_UNKNOWN))
    with Session(p, source=f):
        with cuptiprof.step(0):
            f.launch_kernel("k")
        f.activity_flush_all = broken
        with cuptiprof.step(1):
            f.launch_kernel("k")
        with cuptiprof.step(2):
            pass
    assert "CUPTI failed" in capsys.readouterr().err
    # given back all the same: torch.profiler or nsys later in the program can have it
    assert not f.subscribed and not f.enabled
    assert q(p, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(3,)]
    assert q(p, "SELECT check_name FROM data_quality WHERE check_name = 'cupti_error'") == [
        ("cupti_error",)]


def test_missing_kind_empty_step_and_overhead_in_data_quality(tmp_path):
    f = FakeCupti(fail_enable=("MEMORY2",))
    p = tmp_path / "m.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            f.launch_kernel("k")
            f.overhead(duration_ns=30_000)
        with cuptiprof.step(1):
            pass
    dq = q(p, "SELECT check_name, subject, count, value_ns FROM data_quality ORDER BY 1")
    assert ("empty_step", "1", 0, None) in dq
    assert ("missing_kind", "memory2", None, None) in dq
    assert ("cupti_overhead", "cupti_buffer_flush", 1, 30_000) in dq


def test_a_kind_this_cupti_python_does_not_name_is_a_missing_kind(tmp_path, monkeypatch):
    """A cupti-python whose ActivityKind lacks one kind's name (older or newer than cuptiprof)
    misses that kind only: it used to end all GPU collection."""
    import enum

    f = FakeCupti()
    monkeypatch.setattr(f, "ActivityKind", enum.IntEnum(
        "ActivityKind", {k.name: int(k) for k in K if k.name != "MEMSET"}))
    p = tmp_path / "k.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            f.launch_kernel("k")
            f.memset(64)
    assert q(p, "SELECT name, step FROM kernels") == [("k", 0)]
    assert q(p, "SELECT check_name, subject FROM data_quality") == [("missing_kind", "memset")]


def test_nvtx_asked_for_without_injection_is_a_missing_kind_saying_why(tmp_path):
    """Where NVTX injection is not live, CUPTI sees no NVTX range: MARKER is left off and the
    file says why there are no NVTX rows, rather than an empty table that reads as no NVTX."""
    f = FakeCupti()
    src = CuptiSource(f, nvtx_capture=False)
    src.name = "fake"
    p = tmp_path / "nvtx.duckdb"
    with Session(p, source=src, quiet=True):
        with cuptiprof.step(0):
            f.nvtx_push("attn")
            f.launch_kernel("k")
            f.nvtx_pop()
    assert int(K.MARKER) not in {c[1] for c in f.calls if c[0] == "enable"}
    assert q(p, "SELECT subject, detail FROM data_quality WHERE check_name = 'missing_kind'") == [
        ("nvtx", "nvtx records were not captured: NVTX injection is not active in this process")]


def test_devices_row_from_device_records(tmp_path):
    f = FakeCupti(devices=2)
    p = tmp_path / "dev.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            f.launch_kernel("k")
    assert q(p, "SELECT device_id, name, sm_count, core_clock_mhz, peak_memory_bw_gbps, source, "
                "compute_capability, memory_bytes, l2_bytes FROM devices ORDER BY device_id") == [
        (d, "Fake GPU", 132, 1980.0, 4800.0, "cupti", "9.0", 141 << 30, 60 << 20) for d in (0, 1)]


def test_a_device_record_cupti_left_unfilled_has_null_values(tmp_path):
    """A DEVICE record without a name, sizes or rates (zeros in the struct) writes NULLs, not an
    empty name and 0 bytes of memory that a report would take as real."""
    f = FakeCupti()
    p = tmp_path / "dev0.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            f._emit("device", kind=int(K.DEVICE), id=1)
            f.launch_kernel("k")
    assert q(p, "SELECT name, core_clock_mhz, peak_memory_bw_gbps, memory_bytes, l2_bytes "
                "FROM devices WHERE device_id = 1") == [(None, None, None, None, None)]


def test_range_filter_and_light(tmp_path):
    f = FakeCupti()
    p = tmp_path / "rf.duckdb"
    with Session(p, source=f, quiet=True, range_filter="attn*", light=True):
        with cuptiprof.step(0):
            with cuptiprof.range("attn.0"):
                f.launch_kernel("a")
            with cuptiprof.range("mlp.0"):
                f.launch_kernel("m")
            f.malloc(64, 0x10)
    assert q(p, "SELECT name FROM ranges ORDER BY name") == [("attn.0",), ("step",)]
    assert q(p, "SELECT k.name, r.name FROM kernels k JOIN ranges r USING (range_id) "
                "ORDER BY 1") == [("a", "attn.0"), ("m", "step")]
    assert q(p, "SELECT count(*) FROM api_calls") == [(0,)]
    assert q(p, "SELECT count(*) FROM memory_events") == [(0,)]
    assert int(K.MEMORY2) not in {c[1] for c in f.calls if c[0] == "enable"}


def test_disable_env_turns_ranges_off(tmp_path, monkeypatch, capsys):
    """And says so: a profile() under CUPTIPROF_DISABLE=1 left a file without steps and
    nothing said why."""
    monkeypatch.setenv("CUPTIPROF_DISABLE", "1")
    markers.reload_env()
    try:
        f = FakeCupti()
        p = tmp_path / "off.duckdb"
        with Session(p, source=f, quiet=True):
            with cuptiprof.step(0):
                f.launch_kernel("k")
        assert not any(c[0] == "push" and c[2] != SELF_ID for c in f.calls)
        assert q(p, "SELECT count(*) FROM ranges") == [(0,)]
        off = "CUPTIPROF_DISABLE is set, so cuptiprof.range does nothing"
        assert q(p, "SELECT detail FROM data_quality WHERE check_name = 'ranges_disabled'") == [
            (f"{off}: no step or range of the program was recorded",)]
        assert capsys.readouterr().err == ""   # quiet
        Session(tmp_path / "said.duckdb", source="none").start().stop()
        assert capsys.readouterr().err == (f"cuptiprof: notice: {off}; {tmp_path / 'said.duckdb'} gets no "
                                           "step and no range of the program\n")
        assert q(tmp_path / "said.duckdb", "SELECT subject FROM data_quality WHERE check_name = "
                 "'no_gpu'") == [("gpu",)]
    finally:
        monkeypatch.delenv("CUPTIPROF_DISABLE")
        markers.reload_env()


def test_bad_arguments_and_second_session(tmp_path):
    with pytest.raises(UsageError, match="unknown kind"):
        Session(tmp_path / "x.duckdb", kinds=["kernels"])
    with pytest.raises(UsageError):
        Session(tmp_path / "x.duckdb", warmup=-1)
    with Session(tmp_path / "a.duckdb", source=FakeCupti(), quiet=True):
        with pytest.raises(UsageError, match="already active"):
            Session(tmp_path / "b.duckdb", source=FakeCupti()).start()
    assert not (tmp_path / "b.duckdb").exists() or q(tmp_path / "b.duckdb",
                                                     "SELECT status FROM runs") != []


def test_fake_env_and_exit_without_stop(tmp_path):
    """CUPTIPROF_FAKE_CUPTI=1: synthetic records per range; atexit closes the file."""
    p = tmp_path / "env.duckdb"
    code = ("import cuptiprof\n"
            f"cuptiprof.profile({str(p)!r}, warmup=1, steps=2).start()\n"
            "for i in range(4):\n"
            "    with cuptiprof.range('step', step=i):\n"
            "        pass\n")
    env = dict(os.environ, CUPTIPROF_FAKE_CUPTI="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert q(p, "SELECT source, status FROM runs") == [("synthetic", "complete")]
    assert q(p, "SELECT step, count(*) FROM kernels GROUP BY step ORDER BY step") == [(1, 2),
                                                                                      (2, 2)]
    assert q(p, "SELECT step, copy_kind FROM memcpys ORDER BY step") == [(1, "HtoD"), (2, "HtoD")]
    assert q(p, "SELECT ended_early FROM processes") == [(False,)]


def test_the_sessions_own_synchronize_leaves_no_rows(tmp_path):
    f = FakeCupti()
    f.synchronize = lambda: f.stream_synchronize()  # a synchronize that CUPTI records
    p = tmp_path / "self.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            f.launch_kernel("k")
    assert q(p, "SELECT count(*) FROM syncs") == [(0,)]
    assert q(p, "SELECT name FROM api_calls") == [("cudaLaunchKernel",)]
    assert q(p, "SELECT count(*) FROM data_quality WHERE check_name = 'unclaimed_records'") == [
        (0,)]


def test_a_step_inside_a_step_is_a_range_of_it(tmp_path):
    """Steps do not nest: the program marks its steps and a helper it calls marks one too
    (or --step-fn wraps a function called inside a marked step)."""
    f = FakeCupti()
    p = tmp_path / "n.duckdb"
    with Session(p, warmup=1, steps=2, source=f, quiet=True):
        for i in range(4):
            with cuptiprof.range("step", step=i):
                with cuptiprof.range("step"):
                    f.launch_kernel(f"k{i}")
    assert q(p, "SELECT kind, step FROM ranges WHERE depth = 0 ORDER BY start_ns") == [
        ("warmup", 0), ("step", 1), ("step", 2)]
    # the warm-up step's is recorded too (with its number, as without CUPTI), its work not
    assert q(p, "SELECT kind, step FROM ranges WHERE depth = 1 ORDER BY start_ns") == [
        ("user", 0), ("user", 1), ("user", 2)]
    assert q(p, "SELECT step, name FROM kernels ORDER BY step") == [(1, "k1"), (2, "k2")]


def test_a_step_ended_by_an_exception_is_marked_incomplete(tmp_path):
    f = FakeCupti()
    p = tmp_path / "x.duckdb"
    with Session(p, source=f, quiet=True):
        for i in range(4):
            try:
                with cuptiprof.range("step", step=i * 10):   # the step's number, not its ordinal
                    f.launch_kernel(f"k{i}")
                    if i == 2:
                        raise RuntimeError("out of memory")
            except RuntimeError:
                pass
    assert q(p, "SELECT subject, detail FROM data_quality WHERE check_name = 'step_incomplete'") == [
        ("20", "step 20 was ended early by RuntimeError: its numbers cover only the part of the step "
              "that ran")]
    assert q(p, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(4,)]


def test_work_of_a_range_inside_a_warm_up_step_is_no_step(tmp_path):
    """A warm-up step still open on one thread while another thread's first recorded step has
    turned collection on: what a range inside the warm-up launches has no step (it is warm-up
    work, out of every report's steps), not the warm-up's number as a step of its own."""
    import threading

    f = FakeCupti()
    p = tmp_path / "w.duckdb"
    with Session(p, warmup=1, steps=2, source=f, quiet=True):
        started, recording = threading.Event(), threading.Event()

        def warm_thread():
            with cuptiprof.range("step", step=100):   # ordinal 0: the warm-up step
                started.set()
                recording.wait()
                with cuptiprof.range("attn"):
                    f.launch_kernel("k_warm")

        t = threading.Thread(target=warm_thread)
        t.start()
        started.wait()
        for i in (1, 2):
            with cuptiprof.range("step", step=i):
                if i == 1:
                    recording.set()
                    t.join()
                f.launch_kernel(f"k{i}")
    assert q(p, "SELECT name, step FROM kernels ORDER BY name") == [("k1", 1), ("k2", 2), ("k_warm", None)]
    # the range keeps the warm-up's number, as every range inside a warm-up step does
    assert q(p, "SELECT kind, step FROM ranges WHERE name = 'attn'") == [("user", 100)]
    with cuptiprof.open(p) as prof:
        assert sorted(r[3] for r in prof.steps_report().fetchall()) == [1, 2]


def test_a_step_number_beyond_the_step_columns_loses_nothing(tmp_path):
    """The step columns are INTEGER: a step numbered 2**40 (an id, a timestamp) failed the
    commit it was in, and every row of it was lost (at stop(): the whole run). Such a step is
    numbered by its position, as a step without a number is."""
    f = FakeCupti()
    p = tmp_path / "big.duckdb"
    with Session(p, source=f, quiet=True):
        for i in (5, 2 ** 40, -2 ** 31 - 1):
            with cuptiprof.range("step", step=i):
                f.launch_kernel(f"k{i}")
    assert q(p, "SELECT name, step FROM kernels ORDER BY start_ns") == [
        ("k5", 5), (f"k{2 ** 40}", 1), (f"k{-2 ** 31 - 1}", 2)]
    assert q(p, "SELECT check_name FROM data_quality") == []
    with cuptiprof.open(p, steps=(0, 2 ** 40)) as prof:   # a scope may still name any number
        assert prof.step_range == (0, 2 ** 40)


def test_a_with_of_a_running_profile_inside_another_leaves_it_running(tmp_path):
    """The inner `with` ended the profile: the steps after it were not recorded."""
    p = tmp_path / "r.duckdb"
    prof = cuptiprof.profile(p, source=FakeCupti(auto=True), quiet=True)
    with prof:
        with prof:
            with cuptiprof.step(0):
                pass
        assert prof.active
        with cuptiprof.step(1):
            pass
    assert not prof.active
    assert q(p, "SELECT step FROM ranges ORDER BY step") == [(0,), (1,)]
    assert q(p, "SELECT DISTINCT step FROM gpu_activities ORDER BY step") == [(0,), (1,)]
    assert q(p, "SELECT status FROM runs") == [("complete",)]


def test_a_stopped_profile_cannot_start_again(tmp_path):
    """Started again, it kept the first run's step count and recorded no step of the second,
    while data_quality called each of its steps empty."""
    p = tmp_path / "again.duckdb"
    prof = cuptiprof.profile(p, warmup=1, steps=1, source=FakeCupti(auto=True), mode="append",
                             quiet=True)
    with prof:
        for i in range(2):
            with cuptiprof.step(i):
                pass
    with pytest.raises(UsageError, match="was stopped and records only once; start a new "
                                         r"cuptiprof.profile\(...\)"):
        prof.start()
    with pytest.raises(UsageError):
        with prof:
            pass
    assert q(p, "SELECT run_id, kind, step FROM ranges ORDER BY step") == [
        (1, "warmup", 0), (1, "step", 1)]
    assert q(p, "SELECT count(*) FROM data_quality") == [(0,)]


@pytest.mark.parametrize("beyond", [False, True], ids=["last-ends-first", "then-one-beyond"])
def test_the_last_step_ending_first_leaves_earlier_steps_recording(tmp_path, beyond):
    """Steps of two threads: the last of steps=2 ended while step 0 still ran on the other
    thread. Collection stopped there and step 0's later work was lost without a word; now it
    stops once step 0 ends too, or, when a step beyond the last begins first (its work must
    stay out), data_quality says step 0 is incomplete."""
    import threading

    f = FakeCupti()
    p = tmp_path / "l.duckdb"
    first_in, second_done = threading.Event(), threading.Event()

    def first():
        with cuptiprof.step(0):
            f.launch_kernel("k0_before")
            first_in.set()
            second_done.wait()
            f.launch_kernel("k0_after")

    def second():
        first_in.wait()
        with cuptiprof.step(1):
            f.launch_kernel("k1")
        if beyond:
            with cuptiprof.step(2):
                f.launch_kernel("k2")
        second_done.set()

    with Session(p, steps=2, source=f, quiet=True):
        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        f.launch_kernel("k_after")
    incomplete = q(p, "SELECT subject, detail FROM data_quality WHERE check_name = 'step_incomplete'")
    if beyond:
        assert q(p, "SELECT name, step FROM kernels ORDER BY start_ns") == [("k0_before", 0), ("k1", 1)]
        assert incomplete == [("0", "step 0 was ended early by a step beyond steps=2 that another "
                                    "thread or task began (recording stopped): its numbers cover "
                                    "only the part of the step that ran")]
    else:
        assert q(p, "SELECT name, step FROM kernels ORDER BY start_ns") == [
            ("k0_before", 0), ("k1", 1), ("k0_after", 0)]
        assert incomplete == []


def _held_session(read, until, attr="phase", when="record"):
    """A Session whose `attr` is read through a property: thread X, having read `when` (any
    value when None), sets `read` and waits for `until` (or, when the other side cannot get past
    X, 2 s) before it acts on what it read."""
    import threading

    armed = [True]

    def get(self):
        v = self.__dict__[attr]
        if armed[0] and (when is None or v == when) and threading.current_thread().name == "X":
            armed[0] = False
            read.set()
            until.wait(2)
        return v

    def put(self, v):
        self.__dict__[attr] = v

    return type("Held", (Session,), {attr: property(get, put)})


def test_two_threads_beginning_steps_beyond_the_last_end_recording_once(tmp_path):
    """Two threads begin a step beyond steps=1 while step 0 still runs: each ends the recording
    outside the flush lock. The first is held between reading the phase and acting on it until
    the second has finished: step 0 must still be marked incomplete once, not twice."""
    import threading

    f = FakeCupti()
    p = tmp_path / "r.duckdb"
    x_read, y_done = threading.Event(), threading.Event()

    def beyond(i, after=None):
        if after is not None:
            after.wait()
        with cuptiprof.step(i):
            f.launch_kernel(f"k{i}")
        if i == 2:
            y_done.set()

    with _held_session(x_read, y_done)(p, steps=1, source=f, quiet=True):
        with cuptiprof.step(0):
            f.launch_kernel("k0")
            threads = [threading.Thread(target=beyond, args=(1,), name="X"),
                       threading.Thread(target=beyond, args=(2, x_read), name="Y")]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert q(p, "SELECT subject, count(*) FROM data_quality WHERE check_name = 'step_incomplete' "
                "GROUP BY ALL") == [("0", 1)]
    assert q(p, "SELECT name, step FROM kernels") == [("k0", 0)]
    assert [c for c in f.calls if c[0] == "enable"] and f.enabled == set()


def test_a_step_beyond_the_last_begun_while_stop_runs_leaves_the_run_stopped(tmp_path):
    """stop() while another thread, beginning a step beyond the last, ends the recording: that
    thread must not turn the stopped session back into one that records no more but may start."""
    import threading

    f = FakeCupti()
    p = tmp_path / "s.duckdb"
    x_read, stopped, release = threading.Event(), threading.Event(), threading.Event()
    sess = _held_session(x_read, stopped)(p, steps=1, source=f, quiet=True).start()

    def first():
        with cuptiprof.step(0):
            f.launch_kernel("k0")
            release.wait()

    def beyond():
        with cuptiprof.step(1):
            f.launch_kernel("k1")

    threads = [threading.Thread(target=first), threading.Thread(target=beyond, name="X")]
    threads[0].start()
    while not sess._open:
        time.sleep(0.001)
    threads[1].start()
    x_read.wait()
    sess.stop()
    stopped.set()
    release.set()
    for t in threads:
        t.join()
    assert sess.__dict__["phase"] == "stopped"
    with pytest.raises(UsageError, match="was stopped"):
        sess.start()


def test_two_threads_beginning_steps_at_once_get_two_step_numbers(tmp_path):
    """Two threads begin an unnumbered step at once: the first is held between reading the
    count of steps and raising it until the second's step has begun. Each step must still get
    its own number, and each kernel the step that launched it."""
    import threading

    f = FakeCupti()
    p = tmp_path / "n.duckdb"
    x_read, y_begun = threading.Event(), threading.Event()

    def x():
        with cuptiprof.range("step"):
            f.launch_kernel("kx")

    def y():
        x_read.wait()
        with cuptiprof.range("step"):
            y_begun.set()
            f.launch_kernel("ky")

    with _held_session(x_read, y_begun, "steps_seen", None)(p, source=f, quiet=True):
        threads = [threading.Thread(target=x, name="X"), threading.Thread(target=y, name="Y")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert q(p, "SELECT step FROM ranges WHERE kind = 'step' ORDER BY step") == [(0,), (1,)]
    assert q(p, "SELECT name, step FROM kernels ORDER BY name") == [("kx", 0), ("ky", 1)]


def test_a_step_beyond_the_last_begun_while_recording_starts_ends_it(tmp_path):
    """warmup=1, steps=1: thread X begins the one recorded step and is held between reading
    the phase ("warmup") and switching to recording while thread Y begins a step beyond the
    last. Y's step must still end the recording (X's step incomplete, Y's kernel not counted),
    not find it not yet started and leave it on for Y's work to land in X's step."""
    import threading

    f = FakeCupti()
    p = tmp_path / "b.duckdb"
    x_read, y_in = threading.Event(), threading.Event()
    x_launched, y_launched = threading.Event(), threading.Event()

    def x():
        with cuptiprof.range("step"):
            f.launch_kernel("kx")
            x_launched.set()
            y_launched.wait(5)

    def y():
        x_read.wait()
        with cuptiprof.range("step"):
            y_in.set()
            x_launched.wait(5)
            f.launch_kernel("ky")
        y_launched.set()

    with _held_session(x_read, y_in, when="warmup")(p, warmup=1, steps=1, source=f, quiet=True):
        with cuptiprof.range("step"):   # the warm-up step
            pass
        threads = [threading.Thread(target=x, name="X"), threading.Thread(target=y, name="Y")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert q(p, "SELECT count(*) FROM kernels WHERE name = 'ky'") == [(0,)]
    assert q(p, "SELECT subject, count(*) FROM data_quality WHERE check_name = 'step_incomplete' "
                "GROUP BY ALL") == [("1", 1)]
    assert f.enabled == set()


def test_a_range_outside_steps_takes_the_step_still_open_on_another_thread(tmp_path):
    """A range a thread opened outside its own steps while another thread's step ran got no
    step once any step had ended (the step begun last was cleared then), and the work launched
    in it lost its step too: the ranges report counted none of it."""
    from _run_helpers import STEP_OPEN_ELSEWHERE

    f = FakeCupti()
    p = tmp_path / "o.duckdb"
    with Session(p, source=f, quiet=True):
        exec(STEP_OPEN_ELSEWHERE, {"launch": f.launch_kernel})
    assert q(p, "SELECT name, step FROM kernels ORDER BY start_ns") == [("k1", 1), ("k_io", 0)]
    assert q(p, "SELECT name, step FROM ranges WHERE kind = 'user' ORDER BY start_ns") == [
        ("io", 0), ("after", None)]
    with cuptiprof.open(p) as prof:
        assert [(r[0], r[2], r[4]) for r in prof.report("ranges").fetchall()] == [("io", 1, 1)]


def test_a_range_filter_that_raises_keeps_the_ranges_going(tmp_path, capsys):
    """The program's range_filter raising on one name stopped the recording of every range
    after it (the steps after it were lost); the range it failed on is now recorded, and the
    failure said once, on stderr and in data_quality."""
    def keep(name):
        if name == "odd":
            raise ValueError("no such layer")
        return name != "skipped"

    f = FakeCupti()
    p = tmp_path / "f.duckdb"
    with Session(p, source=f, range_filter=keep):
        for i in range(3):
            with cuptiprof.step(i):
                for name in ("odd", "skipped", "kept"):
                    with cuptiprof.range(name):
                        f.launch_kernel(f"k_{name}{i}")
    assert q(p, "SELECT step, name FROM ranges WHERE kind = 'user' ORDER BY start_ns") == [
        (i, n) for i in range(3) for n in ("odd", "kept")]
    assert q(p, "SELECT count(*) FROM kernels WHERE step IS NOT NULL") == [(9,)]
    why = ("range_filter raised ValueError (no such layer) for the range 'odd': ranges it fails "
           "on are recorded")
    assert q(p, "SELECT check_name, detail FROM data_quality") == [("range_filter_failed", why)]
    assert capsys.readouterr().err == f"cuptiprof: warning: {why}\n"


def test_the_last_step_begun_while_the_one_before_ends_keeps_recording(tmp_path):
    """steps=2 on two threads: X begins the last step, and is held after its number was taken
    but before its step was open, while step 0 ends on the main thread. Step 0's end must not
    take every step for ended and stop collecting: X's step is still to run, and its kernel
    was lost (the step recorded without GPU work)."""
    import threading

    f = FakeCupti()
    p = tmp_path / "t.duckdb"
    x_read, zero_ended = threading.Event(), threading.Event()

    def x():
        with cuptiprof.range("step"):
            f.launch_kernel("k1")

    with _held_session(x_read, zero_ended, "_step_of", None)(p, steps=2, source=f, quiet=True):
        with cuptiprof.range("step"):
            f.launch_kernel("k0")
            t = threading.Thread(target=x, name="X")
            t.start()
            x_read.wait(5)
        zero_ended.set()
        t.join()
    assert q(p, "SELECT name, step FROM kernels ORDER BY start_ns") == [("k0", 0), ("k1", 1)]
    assert q(p, "SELECT count(*) FROM data_quality") == [(0,)]


def test_a_range_ended_on_another_thread_during_a_flush_is_written(tmp_path):
    """Thread X ends a range and is held after reading the list of closed ranges, while a step's
    end on the main thread flushes (and takes that list). X's range went into the list the
    flush had already written, and was never written at all."""
    import threading

    f = FakeCupti()
    p = tmp_path / "c.duckdb"
    x_read, flushed = threading.Event(), threading.Event()

    def x():
        with cuptiprof.range("io"):
            pass

    with _held_session(x_read, flushed, "_closed", None)(p, source=f, quiet=True,
                                                          flush_every_s=0) as s:
        t = threading.Thread(target=x, name="X")
        t.start()
        x_read.wait(5)
        with cuptiprof.step(0):
            f.launch_kernel("k0")
        assert s.flushes == 1
        flushed.set()
        t.join()
    assert q(p, "SELECT name FROM ranges ORDER BY start_ns") == [("io",), ("step",)]


def test_a_record_kind_first_delivered_during_a_flush_stops_nothing(tmp_path, capsys):
    """CUPTI's thread delivers the first record of a kind the collector does not read (NAME)
    while a flush copies the counts of such kinds: the flush failed ("dictionary changed size
    during iteration"), its rows were lost and no range was recorded after it."""
    import threading
    from types import SimpleNamespace

    f = FakeCupti()
    p = tmp_path / "k.duckdb"
    with Session(p, source=f, quiet=True, flush_every_s=0) as s:
        s._sink.add([SimpleNamespace(kind=int(K.NAME))])

        class Delivering(dict):
            def __setitem__(self, k, v):
                super().__setitem__(k, v)
                if len(self) == 1:   # CUPTI's thread, between two kinds of the copy
                    t = threading.Thread(target=s._sink.add,
                                         args=([SimpleNamespace(kind=int(K.GRAPH_TRACE))],))
                    t.start()
                    t.join()

        s.resolver.other_kinds = Delivering()
        for i in range(2):
            with cuptiprof.step(i):
                f.launch_kernel(f"k{i}")
    assert capsys.readouterr().err == ""
    assert q(p, "SELECT name, step FROM kernels ORDER BY step") == [("k0", 0), ("k1", 1)]
    assert q(p, "SELECT step FROM ranges ORDER BY step") == [(0,), (1,)]


def test_a_problem_noted_on_one_thread_while_another_flushes_is_kept(tmp_path, monkeypatch):
    """Thread X notes a problem (a failed CUPTI call) while the main thread's flush is inside
    its transaction: the file's one connection takes one transaction at a time, so X's row
    was refused ("cannot start a transaction within a transaction") and lost without a word."""
    import threading

    from cuptiprof.store import writer as writer_mod

    f = FakeCupti()
    p = tmp_path / "n.duckdb"
    insert, done = writer_mod._insert, []

    def insert_then_note(con, table, tbl, *order):
        insert(con, table, tbl, *order)
        if not done and threading.current_thread() is threading.main_thread():
            done.append(True)
            t = threading.Thread(target=s._note_problem, args=("cupti_error", "noted by X"))
            t.start()
            t.join(5)

    with Session(p, source=f, quiet=True, flush_every_s=0) as s:
        monkeypatch.setattr(writer_mod, "_insert", insert_then_note)
        with cuptiprof.step(0):
            f.launch_kernel("k0")
        assert done
    assert q(p, "SELECT check_name, detail FROM data_quality") == [("cupti_error", "noted by X")]
    assert q(p, "SELECT name, step FROM kernels") == [("k0", 0)]


def test_a_time_at_a_step_s_end_is_of_the_step_begun_then_or_of_none(tmp_path):
    """step_at (an NVTX range's step, by its start) holds a step as [start, end), as
    steps_at and the importers do: a range begun as a step ended is not of that step, but
    of the one begun at that time."""
    f = FakeCupti()
    with Session(tmp_path / "w.duckdb", source=f, quiet=True) as s:
        for i in range(2):
            with cuptiprof.step(i):
                pass
        (s0, e0, n0), (s1, e1, n1) = list(s._windows)[-2:]
        assert s.step_at(s1) == n1 and s.step_at(e1 - 1) == n1
        assert s.step_at(e1) is None
        s._windows.append((e1, e1 + 1_000, 7))   # a step begun as step 1 ended
        assert s.step_at(e1) == 7


def test_a_step_ending_while_a_flush_looks_up_steps_by_time(tmp_path):
    """A flush looks up the step of an NVTX range of another domain by its start (step_at)
    while another thread's step ends: the recent steps it walked through changed under it
    ("deque mutated during iteration"), and the flush failed."""
    import threading

    f = FakeCupti()
    with Session(tmp_path / "w.duckdb", source=f, quiet=True) as s:
        for i in range(3):
            with cuptiprof.step(i):
                pass
        first = s._windows[0]

        class Start(int):   # the lookup compares it with each step's window
            def __ge__(self, other):
                if len(s._windows) == 3:   # another thread's step ends meanwhile
                    t = threading.Thread(target=s._windows.append, args=((0, 0, 99),))
                    t.start()
                    t.join()
                return int(self) >= other

        assert s.step_at(Start(first[0])) == 0


@pytest.mark.parametrize("still_open", [False, True])
def test_a_range_ended_on_another_thread_while_stop_finishes_is_written(tmp_path, still_open):
    """Thread X is ending its range (held after reading the list of closed ranges) as stop()
    begins, and adds it after stop()'s last flush, as stop() writes the ranges still open (one
    of the main thread's here, or none): X's range is written, ended, not lost (a new list of
    the open ranges put in place of the closed ones dropped it, and without open ranges
    nothing wrote it)."""
    import threading

    f = FakeCupti()
    p = tmp_path / "c.duckdb"
    x_read, go = threading.Event(), threading.Event()
    Held = _held_session(x_read, go, "_closed", None)

    class Late(Held):
        def flush(self, final=False):
            super().flush(final)
            if final:   # X adds its range now, after the last flush
                go.set()
                t.join(5)

    def x():
        with cuptiprof.range("io"):
            pass

    s = Late(p, source=f, quiet=True)
    s.start()
    outer = cuptiprof.range("outer")
    if still_open:
        outer.__enter__()
    try:
        t = threading.Thread(target=x, name="X")
        t.start()
        assert x_read.wait(5)
        s.stop()
        assert not t.is_alive()
    finally:   # the range the stop found open leaves this thread's ranges as they were
        if still_open:
            outer.__exit__(None, None, None)
    want = [("io", False)] + ([("outer", True)] if still_open else [])
    assert q(p, "SELECT name, end_ns IS NULL FROM ranges ORDER BY name") == want


def test_a_problem_noted_on_another_thread_while_stop_finishes_is_written(tmp_path):
    """Thread X notes a problem while stop() holds the flush lock, after stop() wrote the notes
    queued until then: X only queues its note (it never waits for that lock), and the note was
    lost. It is written before the file closes; a note after the close is not taken."""
    import threading

    f = FakeCupti()
    p = tmp_path / "q.duckdb"

    class Late(Session):
        def _write_quality(self, phase):
            t = threading.Thread(target=self._note_problem, args=("cupti_error", "noted by X"))
            t.start()
            t.join(5)
            super()._write_quality(phase)

    s = Late(p, source=f, quiet=True).start()
    with cuptiprof.step(0):
        f.launch_kernel("k0")
    s.stop()
    assert q(p, "SELECT check_name, detail FROM data_quality") == [("cupti_error", "noted by X")]
    s._note_problem("cupti_error", "after the close")
    assert s._notes == []


def test_a_step_begun_on_another_thread_is_found_by_time_only_from_its_start(tmp_path):
    """Thread X begins a step and is held once the step is open (in the open ranges), while the
    main thread looks up the step at a time long before it (step_at: what a flush does for an
    NVTX range of another domain): X's step was open with a start of 0 then, and was the step
    of every time before it. Its start is set last (after CUPTI's push), so until then it is the
    step of no time at all."""
    import threading

    f = FakeCupti()
    x_read, looked = threading.Event(), threading.Event()

    def x():
        with cuptiprof.step(0):
            pass

    with _held_session(x_read, looked, "_step_of", None)(tmp_path / "a.duckdb", source=f,
                                                         quiet=True) as s:
        t = threading.Thread(target=x, name="X")
        t.start()
        assert x_read.wait(5) and s._open
        before, now = s.step_at(1), s.step_at(time.time_ns())
        looked.set()
        t.join()
    assert (before, now) == (None, None)



_STEP_ENDED_BY_GC = """
import gc, sys, threading, cuptiprof
from cuptiprof.collect.fake import FakeCupti
from cuptiprof.collect.session import Session

armed = []

class S(Session):
    # a garbage collection that runs while step 1 is being numbered, under the phase lock
    @property
    def phase(self):
        if armed:
            armed.clear()
            gc.collect()
        return self.__dict__["phase"]

    @phase.setter
    def phase(self, v):
        self.__dict__["phase"] = v

def held():   # holds step 0 open across yield; dropped unfinished, in a reference cycle
    with cuptiprof.step(0):
        f.launch_kernel("k0")
        yield

f = FakeCupti()
with S(sys.argv[1], steps=2, source=f, quiet=True):
    g = held()
    worker = threading.Thread(target=next, args=(g,))   # a worker began it
    worker.start()
    worker.join()
    cycle = [g]
    cycle.append(cycle)
    del g, cycle
    armed.append(1)
    with cuptiprof.step(1):
        f.launch_kernel("k1")
"""


def test_a_step_a_collected_generator_ends_while_the_next_begins(tmp_path):
    """A generator a worker thread began holds step 0 across `yield`; dropped unfinished, it is
    closed by a garbage collection that runs while step 1 (the last) is being numbered: step 0's end re-entered the
    phase lock on that same thread and the program hung. It must run on, and step 1 (not yet
    open when step 0 ended) keep its GPU work."""
    p = tmp_path / "gc.duckdb"
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    env.pop("CUPTIPROF_DISABLE", None)
    try:
        r = subprocess.run([sys.executable, "-c", _STEP_ENDED_BY_GC, str(p)], env=env,
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the program hung when a finalizer ended a step as the next one began")
    assert r.returncode == 0, r.stderr
    assert q(p, "SELECT name, step FROM kernels ORDER BY start_ns") == [("k0", 0), ("k1", 1)]
    # step 0 was cut short by the generator's close(); step 1 is whole
    assert q(p, "SELECT subject, detail LIKE '%GeneratorExit%' FROM data_quality "
                "WHERE check_name = 'step_incomplete'") == [("0", True)]
    assert q(p, "SELECT status FROM runs") == [("complete",)]


def test_the_last_step_begun_as_another_thread_ends_its_step_keeps_its_work(tmp_path):
    """steps=2: thread X numbers step 1 (the last) and is held before it is open while the main
    thread ends step 0. Every step had begun and none was seen open, so the main thread ended
    the recording: X's step then ran with collection off, its kernel lost and the step said to
    be cut short by a step beyond the last. The end of recording must be decided with X's step
    counted, and X's own end end it."""
    import threading

    f = FakeCupti()
    p = tmp_path / "last.duckdb"
    x_read, flushed, decided = threading.Event(), threading.Event(), threading.Event()

    class Held(_held_session(x_read, flushed)):
        def flush(self, final=False):
            super().flush(final)
            if threading.current_thread() is threading.main_thread():
                flushed.set()   # the main thread found the recording over: let X go on

        def _finish_recording(self, *args, **kwargs):
            super()._finish_recording(*args, **kwargs)
            if threading.current_thread() is threading.main_thread():
                decided.set()

    def x():
        with cuptiprof.step(1):
            decided.wait(5)   # launch once the main thread has ended the recording, or not
            f.launch_kernel("k1")

    with Held(p, steps=2, source=f, quiet=True):
        t = threading.Thread(target=x, name="X")
        with cuptiprof.step(0):
            f.launch_kernel("k0")
            t.start()
            assert x_read.wait(5)
        t.join(10)
        assert not t.is_alive()
    assert q(p, "SELECT name, step FROM kernels ORDER BY start_ns") == [("k0", 0), ("k1", 1)]
    assert q(p, "SELECT count(*) FROM data_quality WHERE check_name = 'step_incomplete'") == [(0,)]
    assert f.enabled == set()


def test_steps_ended_at_once_on_two_threads_are_both_counted(tmp_path):
    """Two threads ending a step at the same moment: each is counted (the count says whether
    the steps asked for were recorded). Thread A is held between reading the count and writing
    it back; thread B's step ends meanwhile."""
    import dis
    import threading

    at = next(i.offset for i in dis.get_instructions(Session._end)
              if i.opname == "STORE_ATTR" and i.argval == "steps_recorded")
    paused, go = threading.Event(), threading.Event()

    def tracer(frame, event, arg):
        if frame.f_code is not Session._end.__code__:
            return None
        frame.f_trace_opcodes = True

        def op(frame, event, arg):
            if event == "opcode" and frame.f_lasti == at and not paused.is_set():
                paused.set()
                go.wait(10)
            return op
        return op

    def a():
        sys.settrace(tracer)
        try:
            with cuptiprof.range("step", step=0):
                pass
        finally:
            sys.settrace(None)

    def b():
        with cuptiprof.range("step", step=1):
            pass
    f = FakeCupti()
    with Session(tmp_path / "t.duckdb", source=f, quiet=True) as s:
        ta = threading.Thread(target=a)
        ta.start()
        assert paused.wait(10)
        tb = threading.Thread(target=b)
        tb.start()
        tb.join(0.5)   # it waits for A now; it used to count its step and go
        go.set()
        ta.join(10)
        tb.join(10)
        assert not ta.is_alive() and not tb.is_alive()
        assert s.steps_recorded == 2


def test_a_launch_at_the_nanosecond_a_step_ends_is_outside_it(tmp_path):
    """steps_at (the step of a launch that carries no range): a step holds [start, end), as the
    importers count it; a launch at the very nanosecond the step ended is none of its work."""
    with Session(tmp_path / "b.duckdb", source=FakeCupti(), quiet=True, flush_every_s=3600) as s:
        with cuptiprof.step(7):
            pass
        start, end, step, tid = s._spans[-1]
        got = s.steps_at([tid] * 4, [start - 1, start, end - 1, end])
        assert [a.tolist() for a in got] == [[0, 7, 7, 0], [False, True, True, False]]


def test_a_range_outside_steps_takes_the_latest_begun_of_the_steps_open(tmp_path):
    """Two threads' steps are open; a range of a third thread outside every step gets the one
    begun last, as a launch outside every range does (steps_at)."""
    import threading

    f = FakeCupti()
    p = tmp_path / "l.duckdb"
    first, second = cuptiprof.step(0), cuptiprof.step(1)
    with Session(p, source=f, quiet=True) as s:
        for r in (first, second):   # begun on threads of their own, left open there
            t = threading.Thread(target=r.__enter__)
            t.start()
            t.join()
        with cuptiprof.range("io"):
            pass
        here = s.step_here()
        for r in (second, first):
            r.__exit__(None, None, None)
    assert here == 1
    assert q(p, "SELECT step FROM ranges WHERE name = 'io'") == [(1,)]


def test_a_warmup_range_inside_a_recorded_step_claims_its_gpu_work_for_no_step(tmp_path):
    """A range named 'warmup' inside a recorded step is warm-up: what it launches, and what the
    ranges inside it launch, has no step, as the range rows have none. It was not pushed to
    CUPTI, and its work counted for the step around it (that of the ranges inside it too, by
    the launch's time), while run's CPU-op recording and README left it out of the step."""
    f = FakeCupti()
    p = tmp_path / "w.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            with cuptiprof.range("warmup"):
                f.launch_kernel("k")
                with cuptiprof.range("compile"):
                    f.launch_kernel("c")
            f.launch_kernel("s")
    assert q(p, "SELECT k.name, k.step, r.name FROM kernels k JOIN ranges r USING (range_id) "
                "ORDER BY k.start_ns") == [("k", None, "warmup"), ("c", None, "compile"),
                                           ("s", 0, "step")]
    assert q(p, "SELECT name, kind, step FROM ranges ORDER BY range_id") == [
        ("step", "step", 0), ("warmup", "warmup", None), ("compile", "user", None)]


def test_a_ranges_step_is_kept_for_three_flushes_after_its_end_then_forgotten(tmp_path):
    """Records of a range can come with a later flush than the one after its end (CUPTI hands
    a buffer over when it fills): its step and start stay known for three flushes, then are
    forgotten, so that a long run's bookkeeping stays flat."""
    with Session(tmp_path / "g.duckdb", source=FakeCupti(), quiet=True, flush_every_s=0) as s:
        with cuptiprof.step(0):
            rid = s._stack()[-1][0]
        known = []
        for i in range(1, 5):
            known.append((s.flushes, s.step_of(rid), s.start_of(rid) > 0))
            with cuptiprof.step(i):
                pass
    assert known == [(1, 0, True), (2, 0, True), (3, 0, True), (4, None, False)]


@pytest.mark.parametrize("code, status", [(None, "complete"), (0, "complete"), (2, "failed")])
def test_sys_exit_inside_the_profile_ends_the_run_by_its_code(tmp_path, code, status):
    p = tmp_path / "x.duckdb"
    with pytest.raises(SystemExit):
        with Session(p, source=FakeCupti(), quiet=True):
            sys.exit(code)
    assert q(p, "SELECT status FROM runs") == [(status,)]


def test_the_exit_status_of_sys_exit_is_what_the_process_exits_with(monkeypatch):
    from cuptiprof.collect.session import _os_exit_status

    codes = (None, 0, 3, 256, 259, -1, "bye", 2**63 - 1, 2**63, 2**70, -2**63, -2**63 - 1)
    assert [_os_exit_status(c) for c in codes] == [0, 0, 3, 0, 3, 255, 1, 255, 255, 255, 0, 255]
    # the status a `cuptiprof run` process keeps in its end marker follows the same rule
    from cuptiprof.run.child import ending, shared
    monkeypatch.setattr(shared, "_status", "complete")
    monkeypatch.setattr(shared, "_end_signal", 0)
    monkeypatch.delattr(sys, "last_type", raising=False)
    for c in codes:
        monkeypatch.setattr(shared, "_exit_arg", c)
        assert ending._exit_status() == _os_exit_status(c), c
    # what Python itself exits with for the ones beyond 64 bits
    for c in (2**63, -2**70):
        assert subprocess.run([sys.executable, "-c", f"import sys; sys.exit({c})"],
                              capture_output=True).returncode == _os_exit_status(c)


def test_a_range_begun_under_an_earlier_profile_ends_nothing_of_the_next(tmp_path):
    """A range left open when its profile stopped, ended under the next profile, whose own
    first range has the same range id: that range stays open, and is written as itself."""
    old = cuptiprof.range("old")
    with Session(tmp_path / "a.duckdb", source=FakeCupti(), quiet=True):
        old.__enter__()
    p = tmp_path / "b.duckdb"
    with Session(p, source=FakeCupti(), quiet=True) as s:
        with cuptiprof.range("new"):
            old.__exit__(None, None, None)
            assert [t[3] for t in s._open.values()] == ["new"]
    assert q(p, "SELECT name, end_ns IS NULL FROM ranges") == [("new", False)]


def test_a_step_ending_just_after_stop_writes_nothing_more(tmp_path):
    """A thread that took the session before stop() ends its step after stop() closed the
    file: stop() flushed for the last time, the step's end flushes nothing (nor fails)."""
    f = FakeCupti()
    p = tmp_path / "a.duckdb"
    s = Session(p, source=f, quiet=True, flush_every_s=0).start()
    left = cuptiprof.step(0)
    left.__enter__()
    tok = s._stack()[-1]
    s.stop()
    flushes = s.flushes
    s._exit(tok)   # what that thread's range does once stop() returned
    left.__exit__(None, None, None)
    assert s.flushes == flushes
    assert q(p, "SELECT name, end_ns IS NULL FROM ranges") == [("step", True)]


def test_a_final_flush_that_fails_is_said_and_the_file_still_closes(tmp_path, monkeypatch):
    f = FakeCupti()
    p = tmp_path / "f.duckdb"
    s = Session(p, source=f, quiet=True, flush_every_s=3600).start()
    with cuptiprof.step(0):
        f.launch_kernel("k0")

    def broken(rows, final=False):
        raise RuntimeError("no memory")
    monkeypatch.setattr(s.resolver, "resolve", broken)
    s.stop()
    assert q(p, "SELECT check_name, detail FROM data_quality WHERE check_name = 'cupti_error'") == [
        ("cupti_error", "final flush failed: no memory")]
    assert q(p, "SELECT status FROM runs") == [("complete",)]


@pytest.mark.parametrize("kinds", [
    " kernel , memcpy,", "kernel memcpy", "kernel, memcpy", "kernel,memcpy kernel",
    ["kernel", "memcpy"], ("kernel memcpy",)])
def test_kinds_given_in_one_string_are_split_as_run_kinds_splits_them(tmp_path, kinds):
    """profile(kinds=os.environ["KINDS"]) takes what `cuptiprof run --kinds "$KINDS"` takes."""
    s = cuptiprof.profile(tmp_path / "k.duckdb", kinds=kinds, source=FakeCupti(), quiet=True)
    assert s.kinds == ["kernel", "memcpy"]


def test_a_range_left_open_inside_a_step_ends_with_it(tmp_path):
    """Ranges the program never ended inside a step (forgotten, or an exception skipped their
    end) end with the step, innermost first: not the parent of the next step, written with the
    step's end, and their external correlation ids off CUPTI's stack in order, so that the work
    launched after them goes to the ranges open then."""
    f = FakeCupti()
    p = tmp_path / "o.duckdb"
    with Session(p, steps=2, source=f, quiet=True):
        with cuptiprof.range("step", step=0):
            forgotten = [cuptiprof.range("forgot").__enter__(),
                         cuptiprof.range("forgot inner").__enter__()]
            f.launch_kernel("k_inner")
        with cuptiprof.range("step", step=1):
            f.launch_kernel("k1")
            with cuptiprof.range("after"):
                f.launch_kernel("k_after")
    for r in reversed(forgotten):   # cuptiprof.range's own entries of them, kept till their end
        r.__exit__(None, None, None)
    rows = q(p, "SELECT name, step, range_id, parent_id, depth, end_ns FROM ranges")
    by = {(name, step): r for name, step, *r in rows}
    step0, step1 = by[("step", 0)], by[("step", 1)]
    forgot, inner, after = by[("forgot", 0)], by[("forgot inner", 0)], by[("after", 1)]
    assert tuple(step1[1:3]) == (None, 0)     # no parent: the forgotten ranges ended
    assert tuple(after[1:3]) == (step1[0], 1)
    assert tuple(forgot[1:]) == (step0[0], 1, step0[3])     # ended at the step's end
    assert tuple(inner[1:]) == (forgot[0], 2, step0[3])
    assert dict(q(p, "SELECT k.name, r.name FROM kernels k JOIN ranges r USING (range_id)")) == {
        "k_inner": "forgot inner", "k1": "step", "k_after": "after"}
    assert dict(q(p, "SELECT name, step FROM kernels")) == {"k_inner": 0, "k1": 1, "k_after": 1}
    assert not any(f._stacks.values())   # every id pushed came off
    assert q(p, "SELECT check_name FROM data_quality") == []


def test_a_ctrl_c_during_a_steps_flush_stops_the_program_and_keeps_the_step(tmp_path):
    """A Ctrl-C that lands while a step's records are resolved: raised there, the records taken
    from CUPTI since the last flush were lost (every step's since then, up to a second's). It
    is raised as the flush ends: the program stops as asked, its steps are in the file."""
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import os, signal, sys, cuptiprof
        from cuptiprof.collect import resolve
        from cuptiprof.collect.fake import FakeCupti
        resolve_rows = resolve.Resolver.resolve
        def resolving(self, rows, final=False):
            if not final and s.steps_recorded == 3:
                os.kill(os.getpid(), signal.SIGINT)   # the Ctrl-C lands here
            return resolve_rows(self, rows, final=final)
        resolve.Resolver.resolve = resolving
        with cuptiprof.profile(sys.argv[1], source=FakeCupti(auto=True), quiet=True,
                               flush_every_s=0) as s:
            for i in range(10):
                with cuptiprof.step(i):
                    pass
    """))
    out = tmp_path / "c.duckdb"
    r = subprocess.run([sys.executable, str(prog), str(out)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1])))
    assert r.returncode == -2 and "KeyboardInterrupt" in r.stderr, r.stderr
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]
    assert q(out, "SELECT DISTINCT step FROM kernels ORDER BY 1") == [(0,), (1,), (2,)]
