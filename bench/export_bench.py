"""Chrome export speed and size per gzip writer: `export_chrome` on one cuptiprof file, with
ISA-L's deflate at each level and zlib at 6 (the fallback without isal) and 9.

    python bench/export_bench.py FILE.duckdb [--rounds 2] [--steps A:B]

Each (round, writer) exports the same rows to a temporary .json.gz in this process and prints
the wall time and the output size; rounds alternate the writers so they see the same load.
Peak memory of a whole export is measured with the CLI instead:
`/usr/bin/time -f "%e s %M KB" python -m cuptiprof export FILE --chrome OUT.json.gz`.
"""
from __future__ import annotations

import argparse
import gzip
import os
import statistics
import tempfile
import time

from cuptiprof.analyse.profile import open_profile
from cuptiprof.interop.chrome import export as chrome_export   # the module that reads _gzip

WRITERS = {"isal 0": ("isal", 0), "isal 1": ("isal", 1), "isal 2": ("isal", 2),
           "isal 3": ("isal", 3), "zlib 6": ("zlib", 6), "zlib 9": ("zlib", 9)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", default=None)
    args = ap.parse_args()
    try:
        from isal import igzip
    except ImportError:
        igzip = None
    times: dict[str, list[float]] = {w: [] for w in WRITERS}
    sizes: dict[str, int] = {}
    out = os.path.join(tempfile.mkdtemp(), "out.json.gz")
    with open_profile(args.file, steps=args.steps) as prof:
        for _ in range(args.rounds):
            for name, (lib, level) in WRITERS.items():
                if lib == "isal" and igzip is None:
                    continue
                chrome_export._gzip = igzip if lib == "isal" else gzip
                chrome_export._GZIP_LEVEL = level
                t = time.perf_counter()
                chrome_export.export_chrome(prof, out, force=True)
                times[name].append(time.perf_counter() - t)
                sizes[name] = os.path.getsize(out)
    print(f"# {args.file}, steps {args.steps or 'all'}, {args.rounds} rounds, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print("| writer | wall s (min-max) | output MB |")
    print("|---|---|---|")
    for name, ts in times.items():
        if ts:
            print(f"| {name} | {min(ts):.2f}-{max(ts):.2f} (median {statistics.median(ts):.2f}) | "
                  f"{sizes[name] / 1e6:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
