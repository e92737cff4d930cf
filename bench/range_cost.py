"""Cost of one `with cuptiprof.range(...)` in the program's thread: when nothing profiles, and
inside a host-only profile() (source='none': the range bookkeeping without CUPTI).

    python bench/range_cost.py [--n 200000] [--repeat 5]

Prints the best of `repeat` timings, in ns per range (timeit; the loop's own cost included).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import timeit

import cuptiprof


def per_range(n: int, repeat: int) -> float:
    r = cuptiprof.range("x")

    def body():
        with r:
            pass
    return min(timeit.repeat(body, number=n, repeat=repeat)) / n * 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    print(f"nothing profiling: {per_range(a.n, a.repeat):.0f} ns per range")
    out = os.path.join(tempfile.mkdtemp(), "r.duckdb")
    with cuptiprof.profile(out, source="none", quiet=True):
        with cuptiprof.step(0):   # user ranges are recorded inside steps
            print(f"inside profile(source='none'): {per_range(a.n // 10, a.repeat):.0f} ns per range")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
