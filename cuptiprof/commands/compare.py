"""`cuptiprof compare A.duckdb B.duckdb [C ...]`: runs side by side (GPUs, precisions, commits).

File A is the baseline: ratios (x) and rank changes (drank) are against it.
"""
from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from cuptiprof.analyse import catalog
from cuptiprof.analyse.families import BY
from cuptiprof.commands import top_rows
from cuptiprof.render.table import FORMATS, _json_default, render, rows_of

if TYPE_CHECKING:  # loaded in run(): reading commands do not load pyarrow
    from cuptiprof.analyse.compare import Comparison

_KEY_HELP = {"op": "exact op name (kernel name, 'Memcpy HtoD', 'Memset')",
             "family": "normalised kernel family (gemm, conv, softmax, elementwise, ...): "
                       "matches kernels across GPU architectures",
             "range": "the enclosing framework op (aten::mm) or else the innermost range",
             "region": "the innermost of the program's own ranges (cuptiprof.range, NVTX, "
                       "record_function), framework ops passed over: eager against torch.compile"}


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare runs side by side (per op, family or range; kinds; devices)",
                       description="Compare cuptiprof files side by side. The first file is the "
                       "baseline for ratios (x) and rank changes (drank). Times are per step: the "
                       "median over each file's recorded steps, with the median absolute deviation.")
    p.add_argument("files", nargs="*", metavar="FILE", help="two or more cuptiprof files")
    p.add_argument("--top", type=top_rows, default=15, help="keys in the top N of any file (default 15)")
    p.add_argument("--by", choices=BY, default="op",
                   help="comparison key: " + "; ".join(f"{k}: {v}" for k, v in _KEY_HELP.items()))
    p.add_argument("--format", choices=FORMATS, default="table")
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
    if args.html is not None:
        from cuptiprof.render.html import check_html_output
        check_html_output(args.html, inputs=args.files)
    with Comparison(args.files, by=args.by, work=work) as cmp:
        if args.html is not None:
            from cuptiprof.render.html import write_compare

            path = write_compare(cmp, args.html, top=args.top)
            print(f"cuptiprof: wrote {path}", file=sys.stderr)
        print_comparison(cmp, args.format, args.top)
    return 0


def print_comparison(cmp: Comparison, fmt: str = "table", top: int = 15, out=None) -> None:
    out = out or sys.stdout
    sections = [("ops", cmp.side_by_side(top)), ("kinds", cmp.kinds_side_by_side()),
                ("devices", cmp.devices_side_by_side()), ("bandwidth", cmp.lettered("bandwidth"))]
    if cmp.work:
        sections.append(("throughput", cmp.lettered("throughput")))
    if fmt == "json":
        doc = {"files": [{"letter": r.letter, "path": str(r.path), "label": r.label, "devices": r.devices,
                          "steps": r.steps, "has_steps": r.has_steps} for r in cmp.runs],
               "by": cmp.by, "notes": [n for n in cmp.legend() if n.startswith("note:")]}
        long = {"ops": cmp.ops(), "kinds": cmp.kinds(), "devices": cmp.devices(),
                "bandwidth": cmp.bandwidth()}
        if cmp.work:
            long["throughput"] = cmp.throughput()
        keys = set(cmp.top_keys(top))
        for name, rel in long.items():
            cols, rows = rows_of(rel)
            recs = [dict(zip(cols, r)) for r in rows]
            if name == "ops":
                recs = [r for r in recs if r["key"] in keys]
            doc[name] = recs
        json.dump(doc, out, default=_json_default, indent=1)
        out.write("\n")
        return
    if fmt in ("table", "markdown"):
        prefix = "- " if fmt == "markdown" else "  "
        out.write(f"cuptiprof compare (by {cmp.by}: {_KEY_HELP[cmp.by]})\n")
        for line in cmp.legend():
            out.write(prefix + line + "\n")
        out.write("\n")
    for name, tbl in sections:
        if fmt == "csv":
            render(tbl, fmt, out=out)
            out.write("\n")
            continue
        title = _TITLES[name]
        if name in ("bandwidth", "throughput"):
            title += f" ({catalog.report_doc(name, 'compare').summary})"
        if name == "throughput":
            title += "; peaks are datasheet estimates"
        render(tbl, fmt, out=out, title=title)


_TITLES = {
    "ops": "ops: ms per step (median over steps), mad = median absolute deviation, pct = share of the "
           "step's GPU work, x = ratio to A, drank = rank change against A (+ moved up)",
    "kinds": "kinds: ms per step of each kind (idle = GPU window minus busy time), pct = share of the "
             "step's GPU window, x = ratio to A",
    "devices": "devices",
    "bandwidth": "bandwidth",
    "throughput": "throughput",
}
