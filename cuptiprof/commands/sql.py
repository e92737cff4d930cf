"""`cuptiprof sql FILE "SELECT ..."`: ad-hoc SQL over a file, through a read-only connection."""
import duckdb

from cuptiprof.analyse.profile import open_profile
from cuptiprof.errors import UsageError
from cuptiprof.render.table import FORMATS, render


def register(sub) -> None:
    p = sub.add_parser("sql", help="run SQL over a cuptiprof file (read-only)")
    p.add_argument("file")
    p.add_argument("query", help="SQL; the views kernels, memcpys, memsets, syncs, gpu_activities, "
                   "ranges, api_calls and the scoped sel_* views are available")
    p.add_argument("--steps", help="scope of the sel_* views: A:B (inclusive), A:, :B or N")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(func=run)


def run(args) -> int:
    with open_profile(args.file, args.steps) as prof:
        try:
            rel = prof.sql(args.query)
            if rel is None:
                raise UsageError("the statement returned no rows to show (only queries are allowed)")
            render(rel, args.format)
        except duckdb.Error as exc:
            msg = str(exc).splitlines()[0]
            if "read-only" in msg:
                raise UsageError(f"{args.file}: cuptiprof sql is read-only; the file was not modified") from None
            raise UsageError(f"SQL error: {msg}") from None
    return 0
