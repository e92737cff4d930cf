"""`cuptiprof merge A.duckdb B.duckdb ... -o ALL.duckdb`: runs from several hosts or ranks in one
file; every row keeps its run (renumbered in input order) and pid."""
from __future__ import annotations

import sys

from cuptiprof.errors import UsageError


def register(sub) -> None:
    p = sub.add_parser("merge", help="merge cuptiprof files (hosts, ranks, runs) into one file")
    p.add_argument("files", nargs="+", metavar="FILE", help="cuptiprof .duckdb files")
    p.add_argument("-o", "--output", required=True, metavar="ALL.duckdb",
                   help="the merged file (must not exist; written atomically)")
    p.set_defaults(func=run)


def run(args) -> int:
    from cuptiprof.store.merge import merge_files_result

    if len(set(args.files)) != len(args.files):
        raise UsageError("the same input file is given twice")
    res = merge_files_result(args.files, args.output)
    rows = sum(res.rows.values())
    print(f"cuptiprof: merged {len(args.files)} files ({res.runs} runs, {rows} rows) into "
          f"{res.path}", file=sys.stderr)
    return 0
