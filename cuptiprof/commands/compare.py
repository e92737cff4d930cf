"""`cuptiprof compare A.duckdb B.duckdb [C ...]`: runs side by side (GPUs, precisions, commits).

File A is the baseline: ratios (x) and rank changes (drank) are against it.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from cuptiprof.analyse import catalog
from cuptiprof.analyse.families import BY
from cuptiprof.commands import (FILES_HELP, FORMAT_HELP, counted, input_file, output_name,
                                top_rows)
from cuptiprof.errors import UsageError, shell_word
from cuptiprof.render.table import FORMATS, clean, md_escape, render, rows_of, write_json

if TYPE_CHECKING:  # loaded in run(): reading commands do not load pyarrow
    from cuptiprof.analyse.compare import Comparison

# The tables compare prints, in order (throughput only with --flops or --bytes).
TABLES = ("ops", "kinds", "devices", "bandwidth", "throughput")
DEFAULT_TOP = 15   # keys of the ops table: those in the top N of any file
_KEY_HELP = {"op": "exact op name (kernel name, 'Memcpy HtoD', 'Memset')",
             "family": "normalised kernel family (gemm, conv, softmax, elementwise, ...): "
                       "matches kernels across GPU architectures",
             "range": "the enclosing framework op (aten::mm) or else the innermost range",
             "region": "the innermost of the program's own ranges (cuptiprof.range, NVTX, "
                       "record_function), framework ops passed over: eager against torch.compile"}


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare runs side by side (per op, family, range or region; kinds; devices)",
                       description="Compare cuptiprof files side by side. The first file is the "
                       "baseline for ratios (x) and rank changes (drank). Times are per step: the "
                       "median over each file's recorded steps, with the median absolute deviation.")
    p.add_argument("files", nargs="*", metavar="FILE", type=input_file,
                   help=f"two or more {FILES_HELP}; the first is the baseline")
    p.add_argument("--top", type=top_rows, default=None,
                   help="keys in the top N of any file (default 15); the keys left out are "
                        "counted below the ops table (on stderr for csv and json, with the "
                        "default N only)")
    p.add_argument("--by", choices=BY, default="op",
                   help="comparison key: " + "; ".join(f"{k}: {v}" for k, v in _KEY_HELP.items()))
    p.add_argument("--format", choices=FORMATS, default="table",
                   help=f"{FORMAT_HELP}; csv is one table: the one --table names (ops unless given), "
                        "so that it loads whole into pandas, DuckDB or a spreadsheet; its note: "
                        "lines go to stderr")
    p.add_argument("--table", choices=TABLES, metavar="{" + ",".join(TABLES) + "}",
                   help="print this table only (default: all; with --format csv: ops); "
                        "throughput needs --flops or --bytes")
    p.add_argument("--html", metavar="OUT.html", help="also write a self-contained HTML report with plots")
    p.add_argument("--flops", action="append", default=[], metavar="NAME=GFLOP",
                   help="work per call of a key (exact or glob pattern), for throughput against "
                        "peak; repeatable")
    p.add_argument("--bytes", action="append", default=[], metavar="NAME=GB", dest="bytes_",
                   help="bytes moved per call of a key, for memory throughput against peak; repeatable")
    p.set_defaults(func=run)


def run(args) -> int:
    from cuptiprof.analyse.compare import Comparison, work_list
    work = work_list(args.flops, args.bytes_)
    if args.table == "throughput" and not work:   # refused before any file is read
        raise UsageError("--table throughput: give the work per call with --flops NAME=GFLOP or "
                         "--bytes NAME=GB (the table is empty without it)")
    if args.html is not None:
        from cuptiprof.render.html import check_html_output, taken
        output_name(args.html, "--html", utf8=False)
        check_html_output(args.html, inputs=args.files)
        replace = taken(args.html)   # (an HTML page: the check refused anything else)
    with Comparison(args.files, by=args.by, work=work) as cmp:
        if args.html is not None:
            from cuptiprof.render.html import write_compare

            path = write_compare(cmp, args.html, top=args.top or DEFAULT_TOP, replace=replace)
            print(f"cuptiprof: wrote {shell_word(path)}", file=sys.stderr)
        print_comparison(cmp, args.format, args.top, table=args.table)
    return 0


def shown_tables(cmp: Comparison, fmt: str, table: str | None) -> list[str]:
    """The tables printed: the one asked for; else every table, except in CSV, which holds one
    table (tables of different columns one after another are no CSV file a reader can load)."""
    if table:
        return [table]
    if fmt == "csv":
        return ["ops"]
    return [t for t in TABLES if t != "throughput" or cmp.work]


def print_comparison(cmp: Comparison, fmt: str = "table", top: int | None = None, out=None,
                     table: str | None = None) -> None:
    """top: the ops table's keys are those in the top N of any file (None: the default N).
    The keys it leaves out are counted below the table, or it would read as complete; csv and
    json, data alone, say so on stderr for the default N only (as report does): an N given
    there is the data asked for."""
    out = out or sys.stdout
    given, top = top is not None, top or DEFAULT_TOP
    names = shown_tables(cmp, fmt, table)
    more, need = cmp.keys_left_out(top) if "ops" in names else (0, 0)
    if more > 0 and fmt in ("csv", "json") and not given:
        print(f"cuptiprof compare: note: ops: the keys in the top {top} of any file, "
              f"{counted(more, 'key')} left out; --top {need} gives every one", file=sys.stderr)
    if fmt == "json":
        doc = {"files": [{"letter": r.letter, "path": str(r.path), "label": r.label, "devices": r.devices or None,
                          "steps": r.steps, "has_steps": r.has_steps} for r in cmp.runs],
               "by": cmp.by, "notes": [n for n in cmp.legend() if n.startswith("note:")]}
        for name in names:
            cols, rows = rows_of(getattr(cmp, name)())
            recs = [dict(zip(cols, r)) for r in rows]
            if name == "ops":
                keys = set(cmp.top_keys(top))
                recs = [r for r in recs if r["key"] in keys]
                # the file a key is only in, as the other formats name it ("B only"), not
                # by its position
                letters = [r.letter for r in cmp.runs]
                for r in recs:
                    if r.get("only_in") is not None:
                        r["only_in"] = f"{letters[r['only_in']]} only"
            doc[name] = recs
        write_json(doc, out)
        return
    if fmt in ("table", "markdown"):
        prefix = "- " if fmt == "markdown" else "  "
        out.write(f"cuptiprof compare (by {cmp.by}: {_KEY_HELP[cmp.by]})\n")
        # paths and labels are the user's text, as names are; labels, sources and GPU names
        # come from the files: a line break or a terminal escape in them is stripped as in a table
        for line in map(clean, cmp.legend()):
            out.write(prefix + (md_escape(line) if fmt == "markdown" else line) + "\n")
        out.write("\n")
    if fmt == "csv":   # the file holds the table alone: what would be lost from it goes to stderr
        for line in cmp.legend():
            if line.startswith("note:"):
                print(f"cuptiprof compare: {clean(line)}", file=sys.stderr)
    for name in names:
        tbl = _wide(cmp, name, top)
        if fmt == "csv":
            render(tbl, fmt, out=out)
            continue
        title = _TITLES[name]
        if name in ("bandwidth", "throughput"):
            title += f" ({catalog.report_doc(name, 'compare').summary})"
        if name == "throughput":
            title += "; peaks are datasheet estimates"
        render(tbl, fmt, out=out, title=title)
        if name == "ops" and more > 0:
            out.write(f"... {counted(more, 'more key')}: --top {need} shows every one\n\n")


def _wide(cmp: Comparison, name: str, top: int):
    """A table as printed: one row per key (or spec), a column per file."""
    if name == "ops":
        return cmp.side_by_side(top)
    if name in ("kinds", "devices"):
        return getattr(cmp, f"{name}_side_by_side")()
    return cmp.lettered(name)


_TITLES = {
    "ops": "ops: ms per step (median over steps), mad = median absolute deviation, pct = share of the "
           "step's GPU work, x = ratio to A, drank = rank change against A (+ moved up)",
    "kinds": "kinds: ms per step of each kind, x = ratio to A; pct = share of the step's GPU work "
             "(kernel, memcpy, memset: they add to 100%); pct_window = share of the step's GPU window, "
             "for idle (GPU window minus busy time) and sync (host wait time, not GPU work)",
    "devices": "devices",
    "bandwidth": "bandwidth",
    "throughput": "throughput",
}
