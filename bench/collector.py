"""Collector cost per activity record, from the buffer callback to the committed row.

Uses the fake CUPTI: real cupti-python record objects (built beforehand, not timed) are handed
to the session's buffer-completed callback inside a step; the step exit then synchronizes,
flushes, resolves every row to its step and commits one transaction. Each launch produces
three records (runtime API, external correlation, kernel or memcpy), as it does under CUPTI.

    python bench/collector.py [--launches 20000] [--steps 5] [--repeat 3] [--distinct-names]
                              [--nvtx N]

Kernel records of the same kernel share one name pointer, as under CUPTI (a kernel's name "is
shared across all activity records representing the same kernel"); --distinct-names gives
every record its own copy (the fake's default), so the callback reads every name. --nvtx N
opens a framework NVTX range (domain "torch") around every N launches: MARKER records, and the
per-launch marker projection of the resolver.

Prints one JSON object: medians over the repeats of the cost per record in the callback, in
resolve (rows -> Arrow columns), in the writer (DuckDB insert + commit) and in total, by the
wall clock and by the process's CPU clock (all threads), plus the per-step flush times and
resident memory after each step of the last repeat (both should stay flat as the run grows).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import cuptiprof  # noqa: E402
from cuptiprof.collect.fake import FakeCupti  # noqa: E402
from cuptiprof.collect.session import Session  # noqa: E402

KERNELS = ["_ZN7cutlass6KernelINS_4gemm6kernel4GemmIfEEEEvNT_6ParamsE",
           "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
           "triton_per_fused_softmax_0", "_Z18layer_norm_forwardPKfPfii"]


def _rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _clocks() -> tuple[float, float]:
    """(wall, CPU of every thread of this process): on a loaded machine the CPU time is the
    collector's cost, the wall time adds the time other jobs held the cores."""
    return time.perf_counter(), time.process_time()


def _timed(obj, attr: str, acc: list) -> None:
    """Wrap obj.attr so that its wall and CPU time add up in acc[0] and acc[1]."""
    fn = getattr(obj, attr)

    def wrapper(*a, **k):
        w, c = _clocks()
        try:
            return fn(*a, **k)
        finally:
            w2, c2 = _clocks()
            acc[0] += w2 - w
            acc[1] += c2 - c

    setattr(obj, attr, wrapper)


def _shared_names(fields: dict, names: dict) -> dict:
    """The record's name as a pointer to one buffer per distinct name (as CUPTI hands them)."""
    name = fields.get("name")
    if not isinstance(name, str):
        return fields
    buf = names.get(name)
    if buf is None:
        buf = names[name] = ctypes.create_string_buffer(name.encode())
    return dict(fields, name=ctypes.addressof(buf))


def one_run(launches: int, steps: int, distinct_names: bool = False, nvtx: int = 0) -> dict:
    f = FakeCupti()
    names: dict = {}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.duckdb"
        s = Session(path, source=f, quiet=True).start()
        resolve_s, write_s = [0.0, 0.0], [0.0, 0.0]
        _timed(s.resolver, "resolve", resolve_s)
        _timed(s.writer, "append", write_s)
        deliver = f._callbacks[1]
        cb_s, flush_s = [0.0, 0.0], [0.0, 0.0]
        records = 0
        step_flush_ms, step_rss_mb = [], []
        for step in range(steps):
            r = cuptiprof.range("step", step=step)
            r.__enter__()
            for i in range(launches):
                if nvtx and i % nvtx == 0:
                    if i:
                        f.nvtx_pop()
                    f.nvtx_push(f"aten::op{i // nvtx % 8}", domain="torch")
                if i % 10 == 9:
                    f.memcpy(1 << 16, "HtoD")
                else:
                    f.launch_kernel(KERNELS[i % len(KERNELS)])
            if nvtx and launches:
                f.nvtx_pop()
            keep: list = []
            with f._lock:
                pending, f._pending = f._pending, []
            if not distinct_names:
                pending = [(t, _shared_names(fl, names)) for t, fl in pending]
            recs = [f.build(t, fl, keep) for t, fl in pending]   # not timed: CUPTI's part
            t0 = _clocks()
            deliver(recs)
            t1 = _clocks()
            r.__exit__(None, None, None)                          # sync, flush, resolve, commit
            t2 = _clocks()
            for i in (0, 1):
                cb_s[i] += t1[i] - t0[i]
                flush_s[i] += t2[i] - t1[i]
            records += len(recs)
            del recs, keep, pending
            step_flush_ms.append(round((t2[0] - t1[0]) * 1e3, 1))
            step_rss_mb.append(round(_rss_mb(), 1))
        s.stop()
        size = path.stat().st_size if path.exists() else 0
    us = 1e6 / records
    out = {"records": records, "file_bytes": size, "step_flush_ms": step_flush_ms,
           "step_rss_mb": step_rss_mb}
    for clock, i in (("wall", 0), ("cpu", 1)):
        out[clock] = {"callback": cb_s[i] * us, "resolve": resolve_s[i] * us,
                      "write": write_s[i] * us,
                      "flush_other": (flush_s[i] - resolve_s[i] - write_s[i]) * us,
                      "flush_resolve_commit": flush_s[i] * us,
                      "total": (cb_s[i] + flush_s[i]) * us}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=20000, help="launches per step")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="runs; medians are reported")
    ap.add_argument("--distinct-names", action="store_true",
                    help="every kernel record carries its own copy of its name")
    ap.add_argument("--nvtx", type=int, default=0, metavar="N",
                    help="a framework NVTX range (MARKER records) around every N launches")
    args = ap.parse_args()
    runs = [one_run(args.launches, args.steps, args.distinct_names, args.nvtx)
            for _ in range(max(1, args.repeat))]
    report = {"records": runs[-1]["records"], "repeats": len(runs),
              "names": "distinct" if args.distinct_names else "shared", "nvtx": args.nvtx,
              "target_us": 2.0}
    for clock in ("wall", "cpu"):
        report[f"{clock}_us_per_record"] = {
            k: round(statistics.median(r[clock][k] for r in runs), 3) for k in runs[0][clock]}
        report[f"{clock}_total_each_run"] = [round(r[clock]["total"], 3) for r in runs]
    report.update({"file_bytes": runs[-1]["file_bytes"],
                   "step_flush_ms": runs[-1]["step_flush_ms"],
                   "step_rss_mb": runs[-1]["step_rss_mb"],
                   "python": platform.python_version(), "machine": platform.machine()})
    print(json.dumps(report))


if __name__ == "__main__":
    main()
