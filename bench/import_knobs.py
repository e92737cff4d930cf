"""The import's tuning choices, side by side, each import in a fresh process: the piece size the
Kineto text is decoded in, DuckDB's disk syncs while the temporary output is written, Arrow's
pool during the import (malloc, or pyarrow's default: mimalloc), and the first call of Arrow's
`take` that the writer no longer makes.

    python bench/import_knobs.py [TRACE.json.gz ...] [--rounds 7]

Prints, per trace and setting, the median wall time of `import_traces` (after imports) and its
peak RSS; the CPU one first `pyarrow.compute.take` costs in a fresh process; and the footprint
before any trace is read: the RSS once the import's modules are loaded, and once DuckDB's
instance is opened with cuptiprof's schema.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
DEFAULT = ["hta/df_index_resolver/df_index_resolver.json.gz",
           "kineto-tbplugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
           "hta/negative_queue_length_values_check/rank0.json.gz"]

RUN = r"""
import os, sys, tempfile, time
from cuptiprof.interop import importing
from cuptiprof.interop.kineto import file
from cuptiprof.store import files, writer
piece_mb, synced, default_pool = int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
file.PIECE_BYTES = piece_mb << 20
if default_pool:   # Arrow's allocations from pyarrow's default pool, not malloc
    import contextlib
    importing.arrow.malloc_pool = contextlib.nullcontext
if synced:   # DuckDB's syncs at every commit, as a writer of a file in place has them
    importing.write_unsynced = writer.write_unsynced = files.write_unsynced = lambda con: None
out = os.path.join(tempfile.mkdtemp(), "o.duckdb")
t = time.perf_counter()
importing.import_traces([sys.argv[1]], out)
took = time.perf_counter() - t
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(took, peak)
"""

TAKE = r"""
import time, numpy as np, pyarrow as pa, pyarrow.compute as pc
v, i = pa.array(np.arange(100, dtype=np.int32)), pa.array(np.arange(50, dtype=np.int8))
for _ in range(2):
    t = time.thread_time(); pc.take(v, i); print(time.thread_time() - t)
"""

FOOTPRINT = r"""
import os, tempfile
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS"))
from cuptiprof.interop.importing import import_traces
import duckdb
from cuptiprof.store.schema import schema_sql
a = rss()
con = duckdb.connect(os.path.join(tempfile.mkdtemp(), "f.duckdb"))
con.execute("SET threads=1")
con.execute(schema_sql())
print(a, rss())
"""

# name: (piece MB, DuckDB syncs at each commit, Arrow's default pool)
SETTINGS = {"2 MB pieces, no syncs (the default)": (2, False, False), "16 MB pieces": (16, False, False),
            "DuckDB syncs at each commit": (2, True, False),
            "pyarrow's default pool (mimalloc)": (2, False, True)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    traces = [Path(t) for t in args.traces] or [SHARED / t for t in DEFAULT]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    print(f"load average {os.getloadavg()[0]:.1f}, medians of {args.rounds} rounds")
    for trace in traces:
        got: dict[str, list] = {k: [] for k in SETTINGS}
        for _ in range(args.rounds):   # side by side: every setting under the same load
            for name, (mb, synced, pool) in SETTINGS.items():
                r = subprocess.run([sys.executable, "-c", RUN, str(trace), str(mb),
                                    "1" if synced else "0", "1" if pool else "0"],
                                   capture_output=True, text=True, env=env, check=True)
                took, peak = r.stdout.split()[-2:]
                got[name].append((float(took), int(peak) / 1024))
        for name, ms in got.items():
            print(f"{trace.name:40s} {name:38s} {1e3 * statistics.median(m[0] for m in ms):6.0f} ms"
                  f"  peak {statistics.median(m[1] for m in ms):4.0f} MB")
    firsts = [float(subprocess.run([sys.executable, "-c", TAKE], capture_output=True, text=True,
                                   check=True).stdout.split()[0]) for _ in range(args.rounds)]
    print(f"first pyarrow.compute.take in a fresh process: {1e3 * statistics.median(firsts):.1f} ms "
          "of CPU")
    feet = [subprocess.run([sys.executable, "-c", FOOTPRINT], capture_output=True, text=True,
                           env=env, check=True).stdout.split() for _ in range(args.rounds)]
    print(f"RSS once the import's modules are loaded: "
          f"{statistics.median(int(f[0]) for f in feet) / 1024:.0f} MB; with DuckDB's instance "
          f"and the schema: {statistics.median(int(f[1]) for f in feet) / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
