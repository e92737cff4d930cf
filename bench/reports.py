"""Time of the top-ops and per-step reports over a file with N kernel rows.

    python bench/reports.py [--rows 10000000] [--file PATH] [--kineto-big N] [--reports ops,steps]
                            [--html]

Writes a synthetic run (100 steps, one device, 3 kernel streams plus copies) unless --file
names an existing one, then times each report on a fresh read-only open (cold: blocks read
from the file) and once more on the same connection (warm), with DuckDB's default threads.
--html also times `cuptiprof report FILE --html` (the whole page, in a fresh process) and its
peak memory.
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import duckdb

import cuptiprof
from cuptiprof.synthetic import write_synthetic

REPORTS = ("ops", "steps", "step_spread", "kinds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--file", default=None)
    ap.add_argument("--reports", default=",".join(REPORTS[:2]))
    ap.add_argument("--kineto-big", type=int, default=0, metavar="N",
                    help="instead of a synthetic run: the import of the shared df_index_resolver "
                         "trace repeated N times (every kernel under an op, ops under annotations)")
    ap.add_argument("--html", action="store_true", help="also time the HTML report")
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
          f"duckdb {duckdb.__version__}, load average {os.getloadavg()[0]:.1f}")
    if a.file and Path(a.file).exists():
        path = Path(a.file)
    elif a.kineto_big:
        path = _kineto_big(a.kineto_big)
    else:
        path = Path(a.file or Path(tempfile.mkdtemp(prefix="cuptiprof-bench-")) / "reports.duckdb")
        t = time.perf_counter()
        steps = 100
        write_synthetic(path, steps=steps, kernels_per_step=a.rows // steps, api=False)
        print(f"wrote {path} in {time.perf_counter() - t:.1f} s")
    with cuptiprof.open(path) as prof:
        n = prof.sql("SELECT count(*) FROM kernel_rows").fetchall()[0][0]
    print(f"{n:,} kernel rows, {path.stat().st_size / 1e6:.0f} MB")
    for name in a.reports.split(","):
        with cuptiprof.open(path) as prof:
            t = time.perf_counter()
            rows = prof.report(name).fetchall()
            cold = time.perf_counter() - t
            t = time.perf_counter()
            prof.report(name).fetchall()
            warm = time.perf_counter() - t
        print(f"report {name}: {cold:.2f} s cold, {warm:.2f} s warm ({len(rows)} rows)")
    if a.html:
        _html(path)


def _html(path: Path) -> None:
    import subprocess
    import sys

    out = Path(tempfile.mkdtemp(prefix="cuptiprof-bench-")) / "report.html"
    # VmHWM: ru_maxrss survives exec, and would be this process's peak
    code = ("import sys, time; from cuptiprof.cli import main; t = time.perf_counter(); "
            "rc = main(['report', sys.argv[1], '--html', sys.argv[2]]); "
            "print(time.perf_counter() - t, next(int(l.split()[1]) for l in "
            "open('/proc/self/status') if l.startswith('VmHWM:')))")
    r = subprocess.run([sys.executable, "-c", code, str(path), str(out)], capture_output=True,
                       text=True, check=True)
    secs, kb = r.stdout.split()[-2:]
    print(f"report --html: {float(secs):.2f} s, peak {int(kb) / 1024:.0f} MB, "
          f"{out.stat().st_size / 1e6:.1f} MB page")


def _kineto_big(n: int) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from import_bench import DEFAULT, SHARED, make_big

    from cuptiprof.interop.importing import import_traces

    tmp = Path(tempfile.mkdtemp(prefix="cuptiprof-bench-"))
    trace = make_big(SHARED / DEFAULT[0], n, tmp / f"big{n}.json.gz")
    t = time.perf_counter()
    import_traces([trace], tmp / f"big{n}.duckdb")
    print(f"imported {trace.name} in {time.perf_counter() - t:.1f} s")
    return tmp / f"big{n}.duckdb"


if __name__ == "__main__":
    main()
