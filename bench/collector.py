"""Collector cost per activity record, from the buffer callback to the committed row.

Uses the fake CUPTI: real cupti-python record objects (built beforehand, not timed) are handed
to the session's buffer-completed callback inside a step; the step exit then synchronizes,
flushes, resolves every row to its step and commits one transaction. Each launch produces
three records (runtime API, external correlation, kernel or memcpy), as it does under CUPTI.

    python bench/collector.py [--launches 20000] [--steps 5]
"""
from __future__ import annotations

import argparse
import json
import platform
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=20000, help="launches per step")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    f = FakeCupti()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.duckdb"
        s = Session(path, source=f, quiet=True).start()
        deliver = f._callbacks[1]
        cb_s = flush_s = 0.0
        records = 0
        for step in range(args.steps):
            r = cuptiprof.range("step", step=step)
            r.__enter__()
            for i in range(args.launches):
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
            del recs, keep
        s.stop()
        size = path.stat().st_size if path.exists() else 0
    per = (cb_s + flush_s) / records * 1e6
    print(json.dumps({
        "records": records, "callback_us_per_record": round(cb_s / records * 1e6, 3),
        "flush_resolve_commit_us_per_record": round(flush_s / records * 1e6, 3),
        "total_us_per_record": round(per, 3), "target_us": 2.0,
        "file_bytes": size, "python": platform.python_version(),
        "machine": platform.machine()}, indent=1))


if __name__ == "__main__":
    main()
