"""What a byte-reproducible Chrome export would cost: `cuptiprof export FILE --chrome OUT.json`
as it is (events in the order DuckDB's threads return them) against the same export with each
table's query ordered by its start time and then the event's text. Each export runs in a
fresh process (wall time, peak RSS); the two ways alternate over the rounds; the report says
whether two exports of each way were byte-identical.

    python bench/export_order.py FILE.duckdb [--rounds 2]
"""
from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The ordered export: interop.chrome.events builds each table's query with _select; the
# patched one orders its rows (time_ns for instants, start_ns for the rest).
RUN = """
import resource, sys, time
from cuptiprof.interop.chrome import events, json_sql
if sys.argv[1] == "ordered":
    plain = json_sql._select
    def ordered(source, cols, event, *a, **k):
        key = "time_ns" if "time_ns" in cols.get("_ts", "") else "start_ns"
        sql = plain(source, cols, event, *a, **k).replace(" AS flow FROM (",
                                                          f" AS flow, {key} AS _key FROM (", 1)
        return f"SELECT text, flow FROM ({sql}) ORDER BY _key, text"
    events._select = ordered
from cuptiprof.cli import main
t = time.perf_counter()
code = main(["export", sys.argv[2], "--chrome", sys.argv[3], "--force"])
wall = time.perf_counter() - t
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(code, wall, peak)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    got: dict[str, list[tuple[float, int]]] = {"as is": [], "ordered": []}
    for i in range(max(2, args.rounds)):
        for way in got:
            out = tmp / f"{way.replace(' ', '_')}{i % 2}.json"
            r = subprocess.run([sys.executable, "-c", RUN, way if way == "ordered" else "plain",
                                args.file, str(out)], capture_output=True, text=True, cwd=ROOT)
            code, wall, peak = r.stdout.split()[-3:]
            if code != "0":
                sys.exit(f"export failed: {r.stderr.strip()}")
            got[way].append((float(wall), int(peak)))
    print(f"# {args.file}, {max(2, args.rounds)} rounds, {time.strftime('%Y-%m-%d %H:%M')}")
    print("| export | wall s | peak RSS MB | two exports byte-identical |")
    print("|---|---|---|---|")
    for way, rs in got.items():
        stem = tmp / way.replace(" ", "_")
        same = filecmp.cmp(f"{stem}0.json", f"{stem}1.json", shallow=False)
        print(f"| {way} | {' / '.join(f'{w:.2f}' for w, _ in rs)} | "
              f"{' / '.join(str(p // 1024) for _, p in rs)} | {'yes' if same else 'no'} |")
    for f in tmp.iterdir():
        os.unlink(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
