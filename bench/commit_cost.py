"""Where an import's COMMIT goes: the tables of one imported file, inserted into a fresh file
with the writer's settings (one thread, no RLE, an early checkpoint), in a fresh process per
measurement, the variants alternating over the rounds. Times are CPU ms of the inserting
thread (the writer runs DuckDB on one thread), so a loaded machine skews them less than
wall time.

    python bench/commit_cost.py [TRACE.json.gz | FILE.duckdb] [--rounds 4]
                                [--variants default,fixed,frac0.1,bs16384,bs65536]

Variants:
  default   the schema as it is
  fixed     every integer column `USING COMPRESSION bitpacking`, every text column
            `dict_fsst` (what DuckDB picks for them anyway): the compression not analysed
  fracF     only the fraction F of each table's rows (the checkpoint's fixed part)
  bsN       the file attached with BLOCK_SIZE N (an ATTACH option DuckDB documents from 1.2)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
DEFAULT = "hta/negative_queue_length_values_check/rank0.json.gz"
_INT = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER")


def fixed_compression(sql: str) -> str:
    """The schema with each integer and text column's compression named."""
    def fix(m):
        col, typ = m.group(1), m.group(2)
        how = "bitpacking" if typ in _INT else "dict_fsst"
        return f"{col} {typ} USING COMPRESSION {how}"
    return re.sub(rf"^(\s+\w+)\s+({'|'.join(_INT)}|VARCHAR)\b(?=\s*[,\n-])", fix, sql, flags=re.M)


def one(src: str, variant: str) -> dict:
    """One measurement, in this (fresh) process."""
    import duckdb

    from cuptiprof.store.schema import schema_sql
    with duckdb.connect(src, read_only=True) as con:
        names = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE "
                                           "schema_name = 'main' AND table_name <> 'meta'").fetchall()]
        tables = {t: con.sql(f'SELECT * FROM "{t}"').to_arrow_table() for t in names}
    if variant.startswith("frac"):
        f = float(variant[4:])
        tables = {t: v.slice(0, max(1, int(v.num_rows * f))) for t, v in tables.items()}
    sql = fixed_compression(schema_sql()) if variant == "fixed" else schema_sql()
    path = os.path.join(tempfile.mkdtemp(), "o.duckdb")
    if variant.startswith("bs"):
        con = duckdb.connect()
        con.execute(f"ATTACH '{path}' AS o (BLOCK_SIZE {int(variant[2:])})")
        con.execute("USE o")
    else:
        con = duckdb.connect(path)
    for setting in ("disabled_compression_methods='rle'", "threads=1", "checkpoint_threshold='1MB'"):
        con.execute(f"SET {setting}")
    con.execute("BEGIN")
    con.execute(sql)
    con.execute("COMMIT")
    t0 = time.thread_time()
    con.execute("BEGIN")
    for t, tbl in tables.items():
        con.from_arrow(tbl).insert_into(t)
    t1 = time.thread_time()
    con.execute("COMMIT")
    t2 = time.thread_time()
    con.close()
    t3 = time.thread_time()
    return {"insert": 1e3 * (t1 - t0), "commit": 1e3 * (t2 - t1), "close": 1e3 * (t3 - t2),
            "MB": os.path.getsize(path) / 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", nargs="?", default=str(SHARED / DEFAULT))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variants", default="default,fixed,frac0.1,bs16384,bs65536")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)   # (file, variant): a child's run
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.one:
        print(json.dumps(one(*args.one)))
        return 0
    src = args.source
    if not src.endswith(".duckdb"):
        from cuptiprof.interop.importing import import_traces
        src = os.path.join(tempfile.mkdtemp(), "imported.duckdb")
        import_traces([args.source], src)
    variants = args.variants.split(",")
    got: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            r = subprocess.run([sys.executable, __file__, "--one", src, v], capture_output=True,
                               text=True, check=True, cwd=ROOT)
            got[v].append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"# {Path(args.source).name}, {args.rounds} rounds, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; CPU ms of the writing thread: min-max (median)")
    print("| variant | insert | commit | close | file MB |")
    print("|---|---|---|---|---|")
    for v, rs in got.items():
        cells = []
        for k in ("insert", "commit", "close"):
            xs = [r[k] for r in rs]
            cells.append(f"{min(xs):.1f}-{max(xs):.1f} ({statistics.median(xs):.1f})")
        print(f"| {v} | {' | '.join(cells)} | {rs[-1]['MB']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
