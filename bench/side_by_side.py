"""Store speed of this checkout against another one, measured alternately in one run.

    git worktree add /tmp/before 8467e90
    python bench/side_by_side.py /tmp/before [--rows 5000000] [--rounds 5] [--reports]

Each round runs, in a fresh subprocess per tree, the Writer on the same synthetic kernel rows
(`Writer.append` of 1 M-row batches plus `close()`, DuckDB `threads=1`) and prints rows/s by
the wall clock and by the process's CPU time, and bytes on disk per row. With --reports it also
writes a 9.7 M-row file with each tree (once, under the system temp dir) and times the cold
`ops` and `steps` reports on it. Machines shared with other work vary run to run: compare the
medians of rounds made side by side, not numbers across runs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

INGEST = r'''
import os, sys, tempfile, time
sys.path.insert(0, "bench")
from ingest import kernel_batches
from cuptiprof.store.writer import RunInfo, Writer
batches = kernel_batches(int(sys.argv[1]), 1_000_000)
n = sum(b.num_rows for b in batches)
w = Writer(os.path.join(tempfile.mkdtemp(), "x.duckdb"), RunInfo(source="synthetic"), mode="overwrite")
w.execute("SET threads=1")
t, c = time.perf_counter(), time.process_time()
for b in batches:
    w.append({"kernels": b})
w.close()
print(n / (time.perf_counter() - t) / 1e6, n / (time.process_time() - c) / 1e6,
      os.path.getsize(w.path) / n)
'''

REPORTS = r'''
import sys, time
from pathlib import Path
import cuptiprof
from cuptiprof.synthetic import write_synthetic
p = Path(sys.argv[1])
if not p.exists():
    write_synthetic(p, steps=100, kernels_per_step=100_000, api=False)
out = []
for name in ("ops", "steps"):
    with cuptiprof.open(p) as prof:
        t = time.perf_counter()
        prof.report(name).fetchall()
        out.append(time.perf_counter() - t)
print(*out)
'''


def run(tree: Path, code: str, *args: str) -> list[float]:
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=tree, capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(tree)))
    if r.returncode:
        sys.exit(f"{tree}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return [float(x) for x in r.stdout.split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", type=Path, help="another checkout of cuptiprof (e.g. a git worktree)")
    ap.add_argument("--rows", default="5000000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reports", action="store_true")
    a = ap.parse_args()
    trees = {"other": a.other.resolve(), "this": HERE}
    tmp = Path(tempfile.gettempdir())
    for k in trees:  # each run writes its report files anew (a file of older code would mislead)
        (tmp / f"cuptiprof-sbs-{k}.duckdb").unlink(missing_ok=True)
    ingest = {k: [] for k in trees}
    reports = {k: [] for k in trees}
    for r in range(a.rounds):
        for k, tree in trees.items():
            ingest[k].append(run(tree, INGEST, a.rows))
            if a.reports:
                reports[k].append(run(tree, REPORTS, str(tmp / f"cuptiprof-sbs-{k}.duckdb")))
        print(f"round {r + 1}: " + ", ".join(f"{k} {ingest[k][-1][1]:.2f} M rows/s CPU"
                                             for k in trees) + f" (load {os.getloadavg()[0]:.1f})",
              flush=True)
    for k, tree in trees.items():
        v = ingest[k]
        line = (f"{k} ({tree}): ingest wall {statistics.median(x[0] for x in v):.2f} "
                f"[best {max(x[0] for x in v):.2f}] M rows/s, CPU "
                f"{statistics.median(x[1] for x in v):.2f} [best {max(x[1] for x in v):.2f}] "
                f"M rows/s, {v[0][2]:.1f} B/row")
        if a.reports:
            line += (f"; ops {statistics.median(x[0] for x in reports[k]):.2f} s, steps "
                     f"{statistics.median(x[1] for x in reports[k]):.2f} s (cold, medians)")
        print(line)


if __name__ == "__main__":
    main()
