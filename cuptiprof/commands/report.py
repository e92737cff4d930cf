"""`cuptiprof report FILE`: per-op, per-step, per-device, per-kind and per-stream breakdowns."""
from __future__ import annotations

import json
import shlex
import sys

from cuptiprof.analyse import catalog
from cuptiprof.analyse.profile import open_profile
from cuptiprof.commands import (FILE_HELP, FORMAT_HELP, STEPS_FORMS, STEPS_METAVAR, counted,
                                input_file, output_name, top_rows)
from cuptiprof.errors import UsageError, shell_word
from cuptiprof.render.table import FORMATS, Fetched, md_escape, plain_table, render, rows_of

# --by value -> report name
BY = catalog.BY
# Reports shown, in order, when --by is not given.
SUMMARY = ("overview", "ops", "ranges", "kinds", "steps", "step_spread", "quality")
# Left out of a summary where they have no rows (a program without ranges of its own).
OPTIONAL = ("ranges", "quality")
# Columns of sentences a table shows whole: quality's detail says what the data misses and
# where it is still found, which a cut sentence loses.
WHOLE = {"quality": ("detail",)}
# Rows of the steps report a summary prints (a decode loop has thousands of steps, per device):
# the rest are counted in a line; --by step prints them all, step_spread sums them up.
SUMMARY_STEP_ROWS = 20


def _by_value(text: str) -> str:
    """A report's name ('devices', 'step_spread') as its --by value ('device', 'spread'), as
    Profile.report() takes either."""
    return next((k for k, v in BY.items() if v == text), text)


def register(sub) -> None:
    p = sub.add_parser("report", help="print breakdowns of a cuptiprof file",
                       description="Print breakdowns of a cuptiprof file: a summary of several, "
                       "or one with --by; --html writes them as one page with plots; --list names "
                       "every report and what it shows (with --format json, each column too).")
    p.add_argument("file", nargs="?", metavar="FILE", type=input_file, help=FILE_HELP)
    p.add_argument("--by", choices=sorted(BY), type=_by_value,
                   help="one breakdown (default: a summary of several; with --html, the page is "
                   "written and this breakdown printed as well); a report's name (--list) works too")
    p.add_argument("--top", type=top_rows, default=None,
                   help="rows per breakdown, the rest counted below the table (default: 15 "
                        "for ops, ranges, streams and outliers, the rest also counted on stderr "
                        "for csv and json; every row for the others; a summary's steps: the "
                        "first 20 rows); overview, kinds and quality are always shown whole")
    p.add_argument("--steps", metavar=STEPS_METAVAR, help=f"steps to include: {STEPS_FORMS}")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help=f"{FORMAT_HELP}; csv is one table: the --by breakdown, without --by the "
                        "ops report")
    p.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML report with plots "
                   "(nothing is printed, unless --by asks for a breakdown)")
    p.add_argument("--list", action="store_true",
                   help="list the reports: name, --by value and what each shows (with --format "
                        "json, what each column holds)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.list:
        given = [o for o, v in (("FILE", args.file), ("--by", args.by), ("--top", args.top),
                                ("--steps", args.steps), ("--html", args.html)) if v is not None]
        if given:   # a user expecting that file's reports would get the catalogue instead
            raise UsageError(f"--list lists the reports and reads no file; leave out "
                             f"{', '.join(given)}, or --list")
        return list_reports(args.format)
    if not args.file:
        raise UsageError("report needs a FILE (or --list)")
    if args.html is not None:
        if args.format != "table" and not args.by:   # the page alone prints nothing to format
            raise UsageError(f"--format {args.format} formats a printed breakdown and --html "
                             "prints none; add --by NAME to print one beside the page, or leave "
                             "out --format")
        from cuptiprof.render.html import check_html_output, taken
        output_name(args.html, "--html", utf8=False)
        check_html_output(args.html, inputs=[args.file])
        replace = taken(args.html)   # (an HTML page: the check refused anything else)
    with open_profile(args.file, args.steps, option="--steps") as prof:
        if args.html is not None:
            from cuptiprof.render.html import write_report

            path = write_report(prof, args.html, top=args.top or 15, replace=replace)
            print(f"cuptiprof: wrote {shell_word(path)}", file=sys.stderr)
            if args.by:   # the page shows a fixed set of sections: a breakdown asked for is printed
                print_reports(prof, [BY[args.by]], args.format, args.top)
            return 0
        print_reports(prof, [BY[args.by]] if args.by else _summary(args.format), args.format, args.top)
    return 0


def _summary(fmt: str) -> list[str]:
    """The reports a summary prints. A CSV file holds one table (several, one after another,
    would not load as CSV): the ops report, and a line on stderr saying how to get another."""
    if fmt != "csv":
        return list(SUMMARY)
    print("cuptiprof: --format csv writes one table: the ops report (--by picks another)",
          file=sys.stderr)
    return ["ops"]


def print_reports(prof, names, fmt: str = "table", top: int | None = None, out=None) -> None:
    """Print reports one after the other (JSON: one object keyed by report name)."""
    out = out or sys.stdout
    file = f" {shlex.quote(str(prof.path))}" if prof.path else ""
    steps = _steps_option(prof)
    if fmt == "json" and len(names) > 1:
        doc = {}
        for name in names:
            rel, cut, more = _report(prof, name, top)
            cols, rows = rows_of(rel)
            doc[name] = [dict(zip(cols, r)) for r in rows]
            if top is None:   # a --top given cuts the data as asked: nothing to note
                _note_cut(name, cut, more)
        from cuptiprof.render.table import write_json
        write_json({"file": str(prof.path), "scope": prof.scope, "reports": doc}, out)
        return
    if fmt in ("table", "markdown") and len(names) > 1:
        path = md_escape(str(prof.path)) if fmt == "markdown" else prof.path   # the user's text
        out.write(f"cuptiprof report: {path}  (scope: {prof.scope})\n")
        out.write(_cpu_note(prof) + "\n")
    elif fmt in ("table", "markdown"):   # one table says GPU as well: what that means here
        note = _cpu_note(prof)
        if note:
            out.write(note + "\n")
    for name in names:
        # a summary's steps are cut here, by --top or at SUMMARY_STEP_ROWS, and the rest counted
        steps_cut = name == "steps" and len(names) > 1 and fmt in ("table", "markdown")
        if steps_cut:
            rel, cut, more = prof.report(name), 0, 0
        else:
            rel, cut, more = _report(prof, name, top)
        if name in OPTIONAL and len(names) > 1 and not rel.limit(1).fetchall():
            continue
        doc = catalog.report_doc(name)
        if steps_cut:
            shown = top or SUMMARY_STEP_ROWS
            more = rel.count("*").fetchall()[0][0] - shown
            if more > 0:
                rel = rel.limit(shown)
        render(rel, fmt, out=out, title=f"{name}: {doc.summary}" if fmt != "csv" else None,
               whole=WHOLE.get(name, ()))
        if more > 0 and steps_cut:
            out.write(f"... {counted(more, 'more row')}: `cuptiprof report{file} --by step{steps}` "
                      f"prints every step (step_spread below sums them up)\n\n")
        elif more > 0 and fmt in ("table", "markdown"):
            by = f" --by {name}" if len(names) == 1 else ""
            out.write(f"... {counted(more, 'more row')}: `cuptiprof report{file}{by}{steps} --top "
                      f"{cut + more}` shows every one\n\n")
        elif top is None:
            _note_cut(name, cut, more)
        if fmt == "csv" and len(names) > 1:
            out.write("\n")


def _steps_option(prof) -> str:
    """The --steps of the scope, for the commands a cut table names: the rows it counts are
    those of these steps ('' for the default scope)."""
    rng = getattr(prof, "step_range", None)
    if rng is None:
        return ""
    lo, hi = ("" if v is None else str(v) for v in rng)
    text = f"{lo}:{hi}"
    return f" --steps={text}" if text.startswith("-") else f" --steps {text}"


def _report(prof, name: str, top: int | None):
    """(rows, cut, more): the report as printed, the length it was cut at (the default or
    --top; 0: not cut) and the rows that cut left out: a table cut by --top is counted as one
    cut by default, or it reads as complete."""
    cut = _top(name, top)
    if not cut:
        return prof.report(name), 0, 0
    # fetched whole, then cut: the rows left out are counted without running the report twice
    cols, rows = rows_of(prof.report(name))
    return Fetched(cols, rows[:cut]), cut, max(0, len(rows) - cut)


def _note_cut(name: str, cut: int, more: int) -> None:
    """CSV and JSON stay data alone: rows a default length left out are said on stderr."""
    if more > 0:
        print(f"cuptiprof: note: {name}: the first {cut} of {cut + more:,} rows; --top "
              f"{cut + more} gives every one", file=sys.stderr)


def _cpu_note(prof) -> str:
    """A line saying that the tables' GPU time is CPU op time, for a file (or some of its runs)
    recorded without a GPU: its headings and columns say GPU and kernel throughout."""
    cols, rows = rows_of(prof.sql(catalog.compare_sql("cpu_time")))   # (not via compare.py:
    # reading commands do not load numpy and pyarrow)
    cpu = dict(zip(cols, rows[0])) if rows else {}
    if not cpu.get("cpu_runs"):
        return ""
    if not cpu.get("gpu_ms"):
        return ("no GPU activity in this file: it holds CPU op times from torch.profiler (device "
                "-1, one stream per thread); below, 'GPU' time and 'kernel' mean CPU op time and "
                "CPU op\n")
    return (f"recorded without a GPU: {cpu['cpu_runs']}; those runs' CPU op times (device -1) are "
            "counted below with the GPU work of the others\n")


def _top(name: str, top: int | None) -> int | None:
    if top:
        return top if name not in ("overview", "quality", "kinds") else None
    return 15 if name in ("ops", "outliers", "streams", "ranges") else None


def list_reports(fmt: str) -> int:
    rows = []
    for name in catalog.report_names():
        d = catalog.report_doc(name)
        by = next((k for k, v in BY.items() if v == name), "")
        rows.append((name, by, d.summary))
    if fmt == "json":
        json.dump([{"report": n, "by": b, "summary": s,
                    "columns": dict(catalog.report_doc(n).columns)} for n, b, s in rows],
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    cols = ["report", "--by", "description"]
    if fmt in ("csv", "markdown"):   # the format asked for, not the terminal table
        render(Fetched(cols, rows), fmt, quiet=False)
        return 0
    sys.stdout.write(plain_table(cols, [list(r) for r in rows], [False] * 3))
    return 0
