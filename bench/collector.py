"""Collector cost per activity record, from the buffer callback to the committed row.

Uses the fake CUPTI: real cupti-python record objects (built beforehand, not timed) are handed
to the session's buffer-completed callback inside a step; the step exit then synchronizes,
flushes, resolves every row to its step and commits one transaction. Each launch produces
three records (runtime API, external correlation, kernel or memcpy), as it does under CUPTI.

    python bench/collector.py [--launches 20000] [--steps 5] [--repeat 3]

Prints one JSON object: medians over the repeats of the cost per record in the callback, in
resolve (rows -> Arrow columns), in the writer (DuckDB insert + commit) and in total, plus the
per-step flush times and resident memory after each step of the last repeat (both should stay
flat as the run grows).
"""
from __future__ import annotations

import argparse
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


def _timed(obj, attr: str, acc: list) -> None:
    """Wrap obj.attr so that its wall time adds up in acc[0]."""
    fn = getattr(obj, attr)

    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc[0] += time.perf_counter() - t

    setattr(obj, attr, wrapper)


def one_run(launches: int, steps: int) -> dict:
    f = FakeCupti()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.duckdb"
        s = Session(path, source=f, quiet=True).start()
        resolve_s, write_s = [0.0], [0.0]
        _timed(s.resolver, "resolve", resolve_s)
        _timed(s.writer, "append", write_s)
        deliver = f._callbacks[1]
        cb_s = flush_s = 0.0
        records = 0
        step_flush_ms, step_rss_mb = [], []
        for step in range(steps):
            r = cuptiprof.range("step", step=step)
            r.__enter__()
            for i in range(launches):
                if i % 10 == 9:
                    f.memcpy(1 << 16, "HtoD")
                else:
                    f.launch_kernel(KERNELS[i % len(KERNELS)])
            keep: list = []
            with f._lock:
                pending, f._pending = f._pending, []
            recs = [f.build(t, fl, keep) for t, fl in pending]   # not timed: CUPTI's part
            t0 = time.perf_counter()
            deliver(recs)
            t1 = time.perf_counter()
            r.__exit__(None, None, None)                          # sync, flush, resolve, commit
            t2 = time.perf_counter()
            cb_s += t1 - t0
            flush_s += t2 - t1
            records += len(recs)
            del recs, keep, pending
            step_flush_ms.append(round((t2 - t1) * 1e3, 1))
            step_rss_mb.append(round(_rss_mb(), 1))
        s.stop()
        size = path.stat().st_size if path.exists() else 0
    us = 1e6 / records
    return {"records": records, "callback": cb_s * us, "resolve": resolve_s[0] * us,
            "write": write_s[0] * us, "flush_other": (flush_s - resolve_s[0] - write_s[0]) * us,
            "flush_resolve_commit": flush_s * us, "total": (cb_s + flush_s) * us,
            "file_bytes": size, "step_flush_ms": step_flush_ms, "step_rss_mb": step_rss_mb}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=20000, help="launches per step")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="runs; medians are reported")
    args = ap.parse_args()
    runs = [one_run(args.launches, args.steps) for _ in range(max(1, args.repeat))]
    med = {k: round(statistics.median(r[k] for r in runs), 3) for k in (
        "callback", "resolve", "write", "flush_other", "flush_resolve_commit", "total")}
    print(json.dumps({
        "records": runs[-1]["records"], "repeats": len(runs),
        "callback_us_per_record": med["callback"],
        "resolve_us_per_record": med["resolve"], "write_us_per_record": med["write"],
        "flush_other_us_per_record": med["flush_other"],
        "flush_resolve_commit_us_per_record": med["flush_resolve_commit"],
        "total_us_per_record": med["total"], "total_each_run": [round(r["total"], 3) for r in runs],
        "target_us": 2.0, "file_bytes": runs[-1]["file_bytes"],
        "step_flush_ms": runs[-1]["step_flush_ms"], "step_rss_mb": runs[-1]["step_rss_mb"],
        "python": platform.python_version(), "machine": platform.machine()}, indent=1))


if __name__ == "__main__":
    main()
