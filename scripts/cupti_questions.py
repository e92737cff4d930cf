"""Answers, from one GPU run, to the open questions of docs/cupti-python.md (Q1-Q10), as JSON.

    python scripts/cupti_questions.py --json questions.json [--parity-file cp.duckdb]

The main process answers what it can in order (each answer is written as soon as it is known,
so a hang or a timeout keeps the earlier ones); parts that may crash the process (NVTX
injection, record objects kept past the callback, a torch.profiler session after ours) run
as child processes (--part NAME), so a segfault becomes an answer ("exit -11") instead of a
lost run. A watchdog ends a hung process after --watchdog-s and prints every thread's stack.

Dry run (DRY_RUN=1 or CUPTIPROF_FAKE_CUPTI=1, no GPU): the same code runs over cuptiprof's
fake CUPTI with simulated launches, so everything up to the GPU is exercised; answers that only
a GPU can give are written as {"skipped": "dry run ..."} and say so on stdout.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _denoise import ROOT, dry_run  # noqa: E402  (also puts the checkout on sys.path)

DRY = dry_run()
SKIP = "dry run: needs a GPU"
OUT: dict = {}
OUT_PATH: Path | None = None


def save() -> None:
    if OUT_PATH:
        OUT_PATH.write_text(json.dumps(OUT, indent=1, default=str))


def answer(key: str, fn, *a, gpu_only: bool = False):
    """Run one question; store its answer or its error; never raise."""
    t0 = time.monotonic()
    if gpu_only and DRY:
        OUT[key] = {"skipped": SKIP}
        print(f"[{key}] SKIP ({SKIP})", flush=True)
        save()
        return None
    try:
        res = fn(*a)
    except Exception as exc:  # one broken answer must not cost the others
        res = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    if isinstance(res, dict):
        res.setdefault("seconds", round(time.monotonic() - t0, 3))
    OUT[key] = res
    print(f"[{key}] {json.dumps(res, default=str)[:600]}", flush=True)
    save()
    return res


def cupti_maps() -> list[str]:
    paths = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "cupti" in line:
                    paths.add(line.split()[-1])
    except OSError as exc:
        return [f"unreadable: {exc}"]
    return sorted(paths)


# -- a minimal collector over the cupti module (real, or the fake in the dry run) --------------
class Probe:
    def __init__(self, buf_bytes: int = 8 << 20, keep_objects: bool = False):
        if DRY:
            from cuptiprof.collect.fake import FakeCupti

            self.m = FakeCupti()
        else:
            from cupti import cupti

            self.m = cupti
        self.K = self.m.ActivityKind
        self.buf = [buf_bytes]
        self.main_tid = threading.get_native_id()
        self.rows: list[dict] = []
        self.deliveries: list[dict] = []
        self.requests: list[int] = []
        self.in_flush = False
        self.cb_ns = 0
        self.keep_objects = keep_objects
        self.kept: list = []
        self.lock = threading.Lock()
        m = self.m
        m.set_thread_id_type(int(m.ActivityThreadIdType.SYSTEM))
        m.activity_register_callbacks(self._requested, self._completed)

    def _requested(self):
        self.requests.append(threading.get_native_id())
        return (self.buf[0], 0)

    def _completed(self, recs):
        t0 = time.perf_counter_ns()
        rows = [self.copy(r) for r in recs]
        if self.keep_objects:
            self.kept.extend(recs[:50])
        dt = time.perf_counter_ns() - t0
        with self.lock:
            self.rows.extend(rows)
            self.cb_ns += dt
            self.deliveries.append({"thread": "main" if threading.get_native_id() == self.main_tid
                                    else "other", "records": len(rows), "in_flush": self.in_flush,
                                    "t": time.monotonic(), "copy_ns": dt})

    def copy(self, r) -> dict:
        K, k = self.K, int(r.kind)
        d = {"kind": k}
        names = {
            int(K.CONCURRENT_KERNEL): ("start", "end", "device_id", "context_id", "stream_id",
                                       "correlation_id", "name", "graph_id", "graph_node_id"),
            int(K.MEMCPY): ("start", "end", "device_id", "stream_id", "correlation_id", "copy_kind",
                            "src_kind", "dst_kind", "bytes"),
            int(K.MEMSET): ("start", "end", "correlation_id", "bytes"),
            int(K.RUNTIME): ("cbid", "start", "end", "thread_id", "correlation_id"),
            int(K.DRIVER): ("cbid", "start", "end", "thread_id", "correlation_id"),
            int(K.EXTERNAL_CORRELATION): ("external_kind", "external_id", "correlation_id"),
            int(K.MARKER): ("id", "name", "domain", "flags_", "object_kind", "timestamp"),
            int(K.MARKER_DATA): ("id", "payload_kind"),
            int(K.DEVICE): ("id", "name", "num_multiprocessors", "core_clock_rate",
                            "global_memory_bandwidth", "global_memory_size", "l2cache_size"),
            int(K.SYNCHRONIZATION): ("type", "start", "end", "correlation_id"),
            int(K.OVERHEAD): ("overhead_kind", "start", "end"),
        }.get(k, ())
        for n in names:
            try:
                v = getattr(r, n)
                d[n] = v if isinstance(v, (int, float, str, type(None))) else str(v)
            except Exception as exc:
                d[n] = f"<{type(exc).__name__}>"
        if k == int(K.MARKER_DATA):
            try:
                p = r.payload
                d["payload_int64"] = p.metric_value_int64
                d["payload_double"] = p.metric_value_double
            except Exception as exc:
                d["payload"] = f"<{type(exc).__name__}>"
        return d

    def enable(self, *kinds: str) -> dict:
        bad = {}
        for n in kinds:
            try:
                self.m.activity_enable(int(getattr(self.K, n)))
            except Exception as exc:
                bad[n] = str(exc)[:200]
        return bad

    def flush(self, forced: bool = True) -> None:
        self.in_flush = True
        try:
            self.m.activity_flush_all(1 if forced else 0)
        finally:
            self.in_flush = False

    def dropped(self) -> int:
        import ctypes

        n = ctypes.c_uint64(0)
        self.m.activity_get_num_dropped_records(0, 0, ctypes.addressof(n))
        return int(n.value)

    def take(self) -> list[dict]:
        with self.lock:
            rows, self.rows = self.rows, []
        return rows


class Work:
    """The application side: torch on the GPU, the fake's simulated launches in the dry run."""

    def __init__(self, probe: Probe):
        self.p = probe
        if not DRY:
            import torch

            self.torch = torch
            self.x = torch.ones(1 << 16, device="cuda")

    def kernels(self, n: int) -> None:
        if DRY:
            for _ in range(n):
                self.p.m.launch_kernel("_Z3addPfi", duration_ns=2000)
        else:
            for _ in range(n):
                self.x.add_(1)

    def sync(self) -> None:
        if not DRY:
            self.torch.cuda.synchronize()


# -- the questions ------------------------------------------------------------------------------
def q9_maps() -> dict:
    res = {"before_torch": cupti_maps()}
    import torch

    res["after_import_torch"] = cupti_maps()
    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        res["after_cuda_init"] = cupti_maps()
    try:
        from cuptiprof.collect.nvtx_setup import libcupti_path

        res["pathfinder_libcupti"] = libcupti_path()
    except Exception as exc:
        res["pathfinder_libcupti"] = f"error: {exc}"
    res["after_pathfinder"] = cupti_maps()
    res["one_libcupti_mapped"] = len([p for p in res["after_pathfinder"] if "libcupti" in p]) <= 1
    return res


def versions() -> dict:
    from importlib import metadata

    v = {}
    for d in ("cupti-python", "nvidia-cuda-cupti", "torch", "cuda-bindings", "cuda-pathfinder",
              "nvtx", "duckdb"):
        try:
            v[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            v[d] = None
    from cuptiprof.collect import libcuda

    v["driver_api"] = libcuda.driver_version()
    return v


def q1_threads(p: Probe, w: Work) -> dict:
    p.take()
    p.deliveries.clear()
    p.enable("CONCURRENT_KERNEL", "RUNTIME", "DRIVER", "EXTERNAL_CORRELATION")
    w.kernels(3000)
    w.sync()
    t0 = time.monotonic()
    time.sleep(0 if DRY else 3.0)  # no flush: does CUPTI's worker deliver on its own?
    spontaneous = [dict(d) for d in p.deliveries]
    n_before = len(p.rows)
    w.kernels(500)
    w.sync()
    t1 = time.monotonic()
    p.flush(forced=True)
    t2 = time.monotonic()
    in_call = [d for d in p.deliveries[len(spontaneous):] if d["in_flush"]]
    after = [d for d in p.deliveries[len(spontaneous):] if not d["in_flush"]]
    rows = p.take()
    return {"spontaneous_deliveries_in_3s": len(spontaneous),
            "spontaneous_threads": sorted({d["thread"] for d in spontaneous}),
            "records_before_forced_flush": n_before,
            "forced_flush_deliveries_inside_call": len(in_call),
            "forced_flush_threads": sorted({d["thread"] for d in in_call}),
            "deliveries_after_call_returned": len(after),
            "forced_flush_s": round(t2 - t1, 4), "records_total": len(rows),
            "requested_threads": sorted({"main" if t == p.main_tid else "other" for t in p.requests}),
            "synchronous": bool(in_call) and not after, "wait_s": round(t1 - t0, 2)}


def q2_gil_stress(p: Probe, w: Work) -> dict:
    """Flush with a Python thread counting: does the counter move while flush runs C code?"""
    stop = [False]
    count = [0]

    def spin():
        while not stop[0]:
            count[0] += 1

    th = threading.Thread(target=spin, daemon=True)
    th.start()
    w.kernels(20000)
    w.sync()
    c0, t0, cb0 = count[0], time.perf_counter(), p.cb_ns
    p.flush(forced=True)
    c1, t1, cb1 = count[0], time.perf_counter(), p.cb_ns
    # stress: small buffers, the worker delivering while the main thread launches with pushes
    p.buf[0] = 256 << 10
    t_end = time.monotonic() + (0.5 if DRY else 5.0)
    ext = int(p.m.ExternalCorrelationKind.CUSTOM2)
    n = 0
    while time.monotonic() < t_end:
        p.m.activity_push_external_correlation_id(ext, 1000 + n)
        w.kernels(50)
        p.m.activity_pop_external_correlation_id(ext)
        n += 1
    w.sync()
    p.flush(forced=True)
    p.buf[0] = 8 << 20
    stop[0] = True
    th.join(1)
    p.take()
    return {"flush_s": round(t1 - t0, 4), "callback_s_during_flush": round((cb1 - cb0) / 1e9, 4),
            "counter_increments_during_flush": c1 - c0,
            "note": "increments while the callback runs Python are expected (GIL switch interval); "
                    "increments beyond that mean the flush released the GIL in C",
            "stress_iterations_256KB_buffers": n, "stress_hung": False,
            "stress_deliveries_other_thread": sum(1 for d in p.deliveries if d["thread"] == "other")}


def q3_records(p: Probe, w: Work) -> dict:
    p.take()
    p.enable("MEMCPY", "MEMSET", "SYNCHRONIZATION")
    if DRY:
        w.kernels(10)
        p.m.memcpy(1 << 20, "HtoD")
        p.m.memset(4096)
    else:
        t = w.torch
        h = t.ones(1 << 20, pin_memory=True)
        d = t.empty(1 << 20, device="cuda")
        d.copy_(h, non_blocking=True)
        d.zero_()
        d.mul_(2)
        t.cuda.synchronize()
    p.flush()
    rows = p.take()
    K = p.K
    ks = [r for r in rows if r["kind"] == int(K.CONCURRENT_KERNEL)]
    api = {r["correlation_id"] for r in rows if r["kind"] in (int(K.RUNTIME), int(K.DRIVER))}
    names = sorted({r["name"] for r in ks if isinstance(r.get("name"), str)})
    res = {"kernels": len(ks), "kernel_names": names[:10],
           "mangled_names": sum(1 for n in names if n.startswith("_Z")),
           "empty_names": sum(1 for r in ks if not r.get("name")),
           "bad_times": sum(1 for r in ks if not (0 < r["start"] < r["end"])),
           "kernels_without_api_record": sum(1 for r in ks if r["correlation_id"] not in api),
           "device_ids": sorted({r["device_id"] for r in ks}),
           "stream_ids": sorted({r["stream_id"] for r in ks})[:10],
           "memcpys": [r for r in rows if r["kind"] == int(K.MEMCPY)][:4],
           "memsets": [r for r in rows if r["kind"] == int(K.MEMSET)][:4],
           "syncs": len([r for r in rows if r["kind"] == int(K.SYNCHRONIZATION)])}
    res["kinds_seen"] = sorted({r["kind"] for r in rows})
    return res


def q5_cost(p: Probe) -> dict:
    n = sum(d["records"] for d in p.deliveries)
    ns = sum(d["copy_ns"] for d in p.deliveries)
    return {"records": n, "callback_copy_us_per_record": round(ns / n / 1e3, 3) if n else None,
            "deliveries": len(p.deliveries)}


def q6_clock(p: Probe, w: Work) -> dict:
    offs = []
    for _ in range(2000):
        a = time.time_ns()
        c = p.m.get_timestamp()
        b = time.time_ns()
        offs.append(c - (a + b) // 2)
    res = {"cupti_minus_time_ns_median": statistics.median(offs),
           "spread_ns": max(offs) - min(offs),
           "realtime_clock": abs(statistics.median(offs)) < 1_000_000}
    if DRY:
        res["events_vs_cupti"] = SKIP
        return res
    t = w.torch
    a = t.randn(4096, 4096, device="cuda", dtype=t.bfloat16)
    for _ in range(3):
        a @ a
    t.cuda.synchronize()
    p.take()
    e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
    host0 = time.time_ns()
    e0.record()
    for _ in range(20):
        a @ a
    e1.record()
    t.cuda.synchronize()
    p.flush()
    ks = [r for r in p.take() if r["kind"] == int(p.K.CONCURRENT_KERNEL) and r["start"] >= host0]
    if ks:
        span = (max(r["end"] for r in ks) - min(r["start"] for r in ks)) / 1e6
        res.update({"event_ms": e0.elapsed_time(e1), "cupti_span_ms": span,
                    "cupti_kernel_sum_ms": sum(r["end"] - r["start"] for r in ks) / 1e6,
                    "first_kernel_start_minus_host_ns": min(r["start"] for r in ks) - host0,
                    "gemm_kernels": len(ks)})
    return res


def q7_device(p: Probe, w: Work) -> dict:
    p.take()
    try:
        p.m.activity_enable_and_dump(int(p.K.DEVICE))
        ok = True
    except Exception as exc:
        ok = f"error: {exc}"
    p.flush()
    devs = [r for r in p.take() if r["kind"] == int(p.K.DEVICE)]
    res = {"enable_and_dump_after_torch_init": ok, "device_records": devs,
           "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
    from cuptiprof.collect import device_info

    drv = device_info.cuda_devices()
    res["cuda_bindings"] = drv
    if devs and drv:
        d, b = devs[0], drv[0]
        res["sm_match"] = d.get("num_multiprocessors") == b.get("sm_count")
        if d.get("core_clock_rate") and b.get("core_clock_mhz"):
            res["core_clock_cupti_mhz"] = d["core_clock_rate"] / 1e3
        if d.get("global_memory_bandwidth") and b.get("peak_memory_bw_gbps"):
            res["bw_cupti_gbps"] = d["global_memory_bandwidth"] / 1e6  # kB/s -> GB/s
            res["bw_bindings_gbps"] = b["peak_memory_bw_gbps"]
    if not DRY:
        t = w.torch
        res["torch_ordinal"] = t.cuda.current_device()
        res["torch_name"] = t.cuda.get_device_name(0)
        res["record_device_ids"] = sorted({x.get("id") for x in devs})
    return res


def q8_graphs(p: Probe, w: Work) -> dict:
    p.take()
    ext = int(p.m.ExternalCorrelationKind.CUSTOM2)
    if DRY:
        p.m.activity_push_external_correlation_id(ext, 777)
        p.m.graph_launch(["k1", "k2", "k3"])
        p.m.activity_pop_external_correlation_id(ext)
    else:
        t = w.torch
        x = t.ones(1 << 20, device="cuda")
        s = t.cuda.Stream()
        s.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(s):
            (x * 2).add_(1).sin_()
        t.cuda.current_stream().wait_stream(s)
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g):
            y = (x * 2).add_(1).sin_()
        t.cuda.synchronize()
        p.take()
        p.m.activity_push_external_correlation_id(ext, 777)
        g.replay()
        p.m.activity_pop_external_correlation_id(ext)
        t.cuda.synchronize()
        del y
    p.flush()
    rows = p.take()
    K = p.K
    ks = [r for r in rows if r["kind"] == int(K.CONCURRENT_KERNEL) and r.get("graph_id")]
    ec = {r["correlation_id"]: r["external_id"] for r in rows
          if r["kind"] == int(K.EXTERNAL_CORRELATION) and r["external_kind"] == ext}
    api = {r["correlation_id"]: r["cbid"] for r in rows if r["kind"] in (int(K.RUNTIME), int(K.DRIVER))}
    return {"graph_kernels": len(ks), "distinct_correlation_ids": len({r["correlation_id"] for r in ks}),
            "with_our_external_id": sum(1 for r in ks if ec.get(r["correlation_id"]) == 777),
            "launch_cbids": sorted({api.get(r["correlation_id"]) for r in ks}, key=str)}


def q8_api_per_step(p: Probe, w: Work) -> dict:
    """API records per denoising step of the example (small size), with and without the
    noisy cbids that the collector turns off."""
    from cuptiprof.collect.cupti_source import NOISY_DRIVER, NOISY_RUNTIME
    from _denoise import load

    mod = load()
    if DRY:
        w.kernels(100)
        p.flush()
        rows = p.take()
        return {"records_per_step_all_kinds": len(rows), "note": SKIP}
    t = w.torch
    cfg = dict(mod.SIZES["small"])
    model = mod.DiT(**cfg).to("cuda", t.bfloat16).eval()
    x = t.randn(2, 4, cfg["latent"], cfg["latent"], device="cuda", dtype=t.bfloat16)
    tt = t.full((2,), 500, device="cuda")
    y = t.tensor([1, 1000], device="cuda")
    with t.inference_mode():
        for _ in range(3):
            model(x, tt, y)
        t.cuda.synchronize()

        def one():
            p.flush()
            p.take()
            model(x, tt, y)
            t.cuda.synchronize()
            p.flush()
            return p.take()

        rows_all = one()
        for c in NOISY_RUNTIME:
            m = getattr(p.m.runtime_api_trace_cbid, c, None)
            if m is not None:
                p.m.activity_enable_runtime_api(int(m), 0)
        for c in NOISY_DRIVER:
            m = getattr(p.m.driver_api_trace_cbid, c, None)
            if m is not None:
                p.m.activity_enable_driver_api(int(m), 0)
        rows_quiet = one()
    K = p.K

    def count(rows):
        by = {}
        for r in rows:
            by[r["kind"]] = by.get(r["kind"], 0) + 1
        return {K(k).name: v for k, v in sorted(by.items())}

    api = [r for r in rows_all if r["kind"] in (int(K.RUNTIME), int(K.DRIVER))]
    top: dict = {}
    for r in api:
        enum = p.m.driver_api_trace_cbid if r["kind"] == int(K.DRIVER) else p.m.runtime_api_trace_cbid
        try:
            n = enum(r["cbid"]).name
        except Exception:
            n = str(r["cbid"])
        top[n] = top.get(n, 0) + 1
    return {"records_per_forward_all": count(rows_all), "records_per_forward_noisy_off": count(rows_quiet),
            "total_all": len(rows_all), "total_noisy_off": len(rows_quiet),
            "top_api": sorted(top.items(), key=lambda kv: -kv[1])[:15]}


def q10_dropped(p: Probe, w: Work) -> dict:
    res = {}
    for size in (64 << 10, 1 << 20, 8 << 20, 32 << 20):
        p.flush()
        p.take()
        p.dropped()
        p.buf[0] = size
        d0 = len(p.deliveries)
        w.kernels(200 if DRY else 20000)
        w.sync()
        p.flush()
        rows = p.take()
        res[f"{size >> 10}KB"] = {"records": len(rows), "dropped": p.dropped(),
                                  "deliveries": len(p.deliveries) - d0}
    p.buf[0] = 8 << 20
    return res


def records_per_step(path: str | None) -> dict:
    if not path or not Path(path).is_file():
        return {"skipped": "no parity file from cuptiprof run"}
    import duckdb

    con = duckdb.connect(path, read_only=True)
    try:
        q = lambda t: con.execute(f"SELECT step, count(*) FROM {t} WHERE step IS NOT NULL "  # noqa: E731
                                  "GROUP BY step ORDER BY step").fetchall()
        return {"kernels": q("kernels"), "memcpys": q("memcpys"), "api_calls": q("api_calls"),
                "memsets": q("memsets"), "syncs": q("syncs"),
                "source": con.execute("SELECT source FROM runs").fetchone()[0]}
    finally:
        con.close()


# -- parts in child processes ------------------------------------------------------------------
def part_nvtx() -> dict:
    """Q4: NVTX through the injection: names from registered strings, domains, payloads."""
    import nvtx

    p = Probe()
    w = Work(p)
    bad = p.enable("MARKER", "MARKER_DATA", "NAME", "CONCURRENT_KERNEL", "RUNTIME")
    if DRY:  # the fake has no NVTX injection: simulate what it would deliver
        p.m.nvtx_push("pushed_registered", domain="qdomain", payload=42)
        p.m.nvtx_pop()
    else:
        nvtx.push_range("pushed_registered", domain="qdomain", payload=42)
        w.kernels(1)
        nvtx.pop_range(domain="qdomain")
        rid = nvtx.start_range("started_registered", domain="qdomain", payload=3.5)
        w.kernels(1)
        nvtx.end_range(rid)
        with nvtx.annotate("annotated_default_domain"):
            w.kernels(1)
        w.torch.cuda.nvtx.range_push("torch_range")
        w.kernels(1)
        w.torch.cuda.nvtx.range_pop()
        w.sync()
    p.flush()
    rows = p.take()
    K = p.K
    return {"enable_errors": bad, "injection": os.environ.get("NVTX_INJECTION64_PATH"),
            "markers": [r for r in rows if r["kind"] == int(K.MARKER)],
            "marker_data": [r for r in rows if r["kind"] == int(K.MARKER_DATA)],
            "names": [r for r in rows if r["kind"] == int(K.NAME)][:10]}


def part_retain() -> dict:
    """Q5: record objects kept past the callback (views or copies?)."""
    p = Probe(keep_objects=True)
    w = Work(p)
    p.enable("CONCURRENT_KERNEL", "RUNTIME")
    w.kernels(20)
    w.sync()
    p.flush()
    first = [p.copy(r) for r in p.kept]
    copied = [r for r in p.take() if r["kind"] == int(p.K.CONCURRENT_KERNEL)][:5]
    w.kernels(5000)  # new buffers, old ones returned to CUPTI and reused
    w.sync()
    p.flush()
    later = [p.copy(r) for r in p.kept[:len(first)]]
    return {"kept": len(first), "unchanged_after_more_work": first == later,
            "changed_fields": sum(1 for a, b in zip(first, later) for k in a if a[k] != b.get(k)),
            "sample_first": first[:2], "sample_later": later[:2], "copied_in_callback": copied[:2]}


def part_steal() -> dict:
    """Q9b: a torch.profiler session after ours: do our callbacks still get records?"""
    p = Probe()
    w = Work(p)
    p.enable("CONCURRENT_KERNEL", "RUNTIME")
    w.kernels(10)
    w.sync()
    p.flush()
    before = len([r for r in p.take() if r["kind"] == int(p.K.CONCURRENT_KERNEL)])
    if DRY:
        return {"ours_before": before, "after_torch_profiler": SKIP}
    import torch
    from torch.profiler import ProfilerActivity, profile

    err = None
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            w.kernels(10)
            w.sync()
        tp_kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception as exc:
        err, tp_kernels = str(exc)[:300], None
    p.enable("CONCURRENT_KERNEL", "RUNTIME")
    w.kernels(10)
    w.sync()
    p.flush()
    after = len([r for r in p.take() if r["kind"] == int(p.K.CONCURRENT_KERNEL)])
    return {"ours_before": before, "torch_profiler_error": err, "torch_profiler_gpu_events": tp_kernels,
            "ours_after_torch_profiler": after, "stolen": after == 0}


PARTS = {"nvtx": part_nvtx, "retain": part_retain, "steal": part_steal}


def run_part(name: str, timeout: float) -> dict:
    env = dict(os.environ)
    if name == "nvtx" and not DRY:
        try:
            from cuptiprof.collect.nvtx_setup import libcupti_path

            path = libcupti_path()
            if path:
                env["NVTX_INJECTION64_PATH"] = path
        except Exception:
            pass
    out = Path(f"/tmp/cupti_q_{name}_{os.getpid()}.json")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--part", name, "--json", str(out),
           "--watchdog-s", str(int(timeout - 5))]
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        rc, err = cp.returncode, cp.stderr
    except subprocess.TimeoutExpired:
        rc, err = "timeout", ""
    res = json.loads(out.read_text()) if out.is_file() else {}
    res = res.get(name, res)
    if rc != 0:
        res = {"exit": rc, "stderr_tail": (err or "").strip().splitlines()[-6:], **(res or {})}
    return res


def main(argv=None) -> int:
    global OUT_PATH
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="questions.json")
    ap.add_argument("--parity-file", help="a cuptiprof file of the example, for records per step")
    ap.add_argument("--watchdog-s", type=int, default=150)
    ap.add_argument("--part", choices=list(PARTS), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    OUT_PATH = Path(a.json)
    faulthandler.enable()
    faulthandler.dump_traceback_later(a.watchdog_s, exit=True)
    if a.part:
        answer(a.part, PARTS[a.part])
        return 0
    if DRY:
        print("cupti_questions: DRY RUN over the fake CUPTI: answers marked skipped need a GPU")
    OUT["dry_run"] = DRY
    answer("q9_libcupti_mapping", q9_maps)
    answer("versions", versions)
    if not DRY:
        import torch

        if not torch.cuda.is_available():
            OUT["error"] = "torch sees no GPU"
            save()
            print("cupti_questions: torch sees no GPU; set DRY_RUN=1 for the CPU rehearsal")
            return 1
    try:
        p = Probe()
    except Exception as exc:
        answer("q3_cupti_starts", lambda: {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    w = Work(p)
    answer("q1_threads_and_flush", q1_threads, p, w)
    answer("q3_records_parse", q3_records, p, w)
    answer("q7_device_after_torch", q7_device, p, w)
    answer("q6_clock", q6_clock, p, w)
    answer("q8_graph_external_correlation", q8_graphs, p, w)
    answer("q8_api_records_per_forward", q8_api_per_step, p, w)
    answer("q10_dropped_by_buffer_size", q10_dropped, p, w)
    answer("q2_gil_and_stress", q2_gil_stress, p, w)
    answer("q5_callback_cost", q5_cost, p)
    answer("q5_records_per_denoising_step", records_per_step, a.parity_file)
    p.m.activity_flush_all(1)
    for name in PARTS:
        answer(f"part_{name}", run_part, name, 60.0)
    faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    sys.exit(main())
