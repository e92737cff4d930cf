"""`cuptiprof sql FILE "SELECT ..."`: ad-hoc SQL over a file, through a read-only connection."""
import itertools
import re
import sys

import duckdb

from cuptiprof.analyse.profile import open_profile, refused_statement
from cuptiprof.commands import FILE_HELP, FORMAT_HELP, STEPS_FORMS, STEPS_METAVAR, input_file
from cuptiprof.errors import UsageError
from cuptiprof.render.table import (FORMATS, Fetched, clean, fmt_value, render, rows_of, stream_of,
                                    unique_names)

TABLE_ROWS = 10_000   # the most rows a terminal table shows (the other formats: all)
EXAMPLE_QUERY = '"SELECT name, count(*) FROM kernels GROUP BY 1"'


def register(sub) -> None:
    p = sub.add_parser("sql", help="run SQL over a cuptiprof file (read-only)",
                       description="Run one SQL query over a cuptiprof file, opened read-only: "
                       "a statement that would change it, or read or write other files, is "
                       "refused.")
    p.add_argument("file", metavar="FILE", type=input_file, help=FILE_HELP)
    p.add_argument("query", metavar="QUERY", help="one SQL query over the file's views (kernels, gpu_activities, "
                   "ranges, api_calls) and tables (memcpys, memsets, syncs, runs, processes, "
                   "devices, logs, data_quality, ...; `cuptiprof schema` documents every column), "
                   "and the views of the --steps scope: sel_activities (gpu_activities in scope), "
                   "sel_work (its kernels, copies and memsets), sel_ranges (the ranges of the "
                   "steps in scope), sel_steps (step windows), sel_busy (busy time per step and "
                   "device), sel_kernel_time (kernel "
                   "calls and time per step and name), sel_kernel_spans (kernel intervals only), "
                   "sel_range_up (the program's own ranges around each launch), sel_cut_steps "
                   "(steps an exception ended early), sel_step_busy (busy time of every step, the "
                   "steps without GPU work as 0), sel_name_keys (kernel names counted under "
                   "another string_id: mangled and readable spellings of one kernel)")
    p.add_argument("--steps", metavar=STEPS_METAVAR,
                   help=f"scope of the sel_* views: {STEPS_FORMS}; default: every recorded step")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help=f"{FORMAT_HELP}; csv is the result as one table. csv, json and "
                   f"markdown write every row as it comes; a table shows the first {TABLE_ROWS:,}")
    p.set_defaults(func=run)


def run(args) -> int:
    with open_profile(args.file, args.steps, option="--steps") as prof:
        # Read-only covers the file; this covers everything else a statement could touch
        # (COPY ... TO, EXPORT DATABASE, ATTACH, INSTALL), and cannot be switched back.
        prof.con.execute("SET enable_external_access = false")
        prof.con.execute("SET lock_configuration = true")
        read_only = UsageError(f"{args.file}: cuptiprof sql is read-only (no writes, no other "
                               "files or extensions); nothing was modified")
        try:
            if refused_statement(args.query) is not None:   # the check Profile.sql() makes
                raise read_only
            n = len(duckdb.extract_statements(args.query))
            if n == 0:   # blank or only a comment: DuckDB runs nothing and returns no relation
                raise UsageError(f"the query is empty; give one SQL query, e.g. {EXAMPLE_QUERY}")
            if n > 1:   # DuckDB would show the last statement's rows only
                raise UsageError(f"the query holds {n} statements; give one at a time "
                                 "(only the last one's rows would show)")
            rel = prof.con.sql(args.query)
            statement = duckdb.extract_statements(args.query)[0]
            if rel is None or _ran_nothing(statement, rel):
                raise UsageError("the statement returned no rows to show (only queries are allowed)")
            shown = as_duckdb_text(rel, args.format)
            if args.format == "table" and statement.type == duckdb.StatementType.EXPLAIN:
                write_plans(*rows_of(shown))
            elif args.format == "table":   # held whole to size its columns: the first rows only
                cols, rows = stream_of(shown)
                first = list(itertools.islice(rows, TABLE_ROWS + 1))
                render(Fetched(cols, first[:TABLE_ROWS]), args.format, quiet=False)
                if len(first) > TABLE_ROWS:
                    print(f"cuptiprof: note: the first {TABLE_ROWS:,} rows; --format csv, json "
                          "or markdown writes every row", file=sys.stderr)
            else:
                render(shown, args.format, quiet=False)
        except duckdb.Error as exc:
            msg = _lines(str(exc))[0]
            if "read-only" in msg or "disabled by configuration" in msg \
                    or "configuration has been locked" in msg:
                raise read_only from None
            raise UsageError(f"SQL error: {msg}{_hint(str(exc))}") from None
    return 0


def write_plans(cols: list[str], rows: list[tuple], out=None) -> None:
    """EXPLAIN's rows in the table format: each plan whole, line by line, under its key
    (physical_plan, analyzed_plan). A plan is read by its lines; a table cell joined them into
    one and cut it at 70 characters."""
    out = out or sys.stdout
    for row in rows:
        *keys, plan = row
        head = "  ".join(clean(fmt_value(k)) for k in keys) or clean(cols[-1])
        lines = [clean(ln) for ln in ("" if plan is None else str(plan)).rstrip("\n").split("\n")]
        out.write(head + "\n" + "".join(ln.rstrip() + "\n" for ln in lines) + "\n")
    if not rows:
        out.write("(no rows)\n")


def _ran_nothing(statement, rel) -> bool:
    """Whether rel is what DuckDB hands back for a statement with nothing to return (BEGIN,
    CHECKPOINT): no rows under one BOOLEAN column named Success. A SELECT is shown as written,
    even one that looks like it."""
    return (statement.type not in (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)
            and rel.columns == ["Success"] and [str(t) for t in rel.types] == ["BOOLEAN"]
            and not rel.limit(1).fetchall())


# Values Python would show by its repr (b'ab', 3 days, 0:00:00), or change: an interval of a
# month comes back as 30 days, and a nanosecond time (make_timestamp_ns(start_ns), of the
# file's nanosecond clocks) as microseconds, its last three digits dropped.
_AS_TEXT = {"blob", "interval", "timestamp_ns", "time_ns"}
_NESTED = {"list", "array", "struct", "map", "union"}


def _holds(typ, ids: set) -> bool:
    if typ.id in ids:
        return True
    return typ.id in _NESTED and any(hasattr(c, "id") and _holds(c, ids) for _, c in typ.children)


def as_duckdb_text(rel, fmt: str):
    """rel with the columns Python cannot show cast to VARCHAR, so they read as DuckDB prints
    them: BLOBs (`ab`, `\\xFF`), INTERVALs (`1 month`) and nanosecond times (TIMESTAMP_NS,
    TIME_NS: `2023-11-14 22:13:20.123456789`) anywhere in a value, and in the text
    formats lists, structs and maps too (`[2024-01-02]`, not a list of datetime.date reprs);
    JSON keeps those as arrays and objects."""
    text = [_holds(t, _AS_TEXT) or (fmt != "json" and t.id in _NESTED) for t in rel.types]
    if not any(text):
        return rel
    # by position, named as they will be shown: a query's columns can share a name
    names = ['"' + n.replace('"', '""') + '"' for n in unique_names(rel.columns)]
    return rel.project(", ".join(f"CAST(#{i} AS VARCHAR) AS {n}" if t else f"#{i} AS {n}"
                                 for i, (n, t) in enumerate(zip(names, text), 1)))


def _hint(error: str) -> str:
    """What to do about a name the query got wrong: DuckDB's suggestion (on a line of its own,
    which one line of error would drop) and where the names are documented."""
    if "Values were not provided for the following parameters" in error:
        return ("; cuptiprof sql takes no parameter values: write the value into the query in "
                "place of ? or $1")
    if error.startswith("Parser Error"):   # a typo in the SQL itself: what a query looks like
        return f"; a query is DuckDB SQL, e.g. {EXAMPLE_QUERY}{_WHERE}"
    if not error.startswith(("Catalog Error", "Binder Error")):
        return ""
    lines = [ln.strip() for ln in _lines(error)[1:]]
    says = next((ln for ln in lines if ln.startswith(("Did you mean", "Candidate bindings"))), "")
    where = _WHERE if re.search(r"\b(Table|column)\b", _lines(error)[0]) else ""
    return (f" ({says})" if says else "") + where


def _lines(error: str) -> list[str]:
    """DuckDB's message by its lines, which end at a newline only: a value or a name it quotes
    may hold a form feed or a Unicode line separator (U+2028), where str.splitlines() cut the
    message short ('Table with name ker' for a table "ker<U+2029>nels"); they show as spaces."""
    return [re.sub(r"[\x0b\x0c\x1c-\x1e\x85\u2028\u2029]", " ", ln)
            for ln in error.replace("\r\n", "\n").split("\n")] or [""]


# Where the names a query may use are documented.
_WHERE = "; `cuptiprof schema` documents every table and column, `cuptiprof sql --help` the " \
    "sel_* views"
