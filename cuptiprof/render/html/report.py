"""The HTML report of one file (write_report): overview and data quality, top ops, ranges,
steps (and steps by range), kinds, the step timelines, the ops table."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from cuptiprof.render.html.charts import (PARTS, RUN_COLORS, STACKED, SUMMED, _SPLIT, _SYNC_BESIDE,
                                          hbars, stacked_columns)
from cuptiprof.render.html.output import _write, taken
from cuptiprof.render.html.page import _dicts, _left_out, _page, esc, table
from cuptiprof.render.html.timelines import _timelines
from cuptiprof.render.table import Fetched, fmt_value, rows_of


def _calls(n) -> str:
    """'1 call', '3 calls': a tooltip's count."""
    return f"{n} call" if n == 1 else f"{n} calls"


def _counted(n, what: str) -> str:
    """'1 kernel', '3 memcpy HtoD': a count of rows of a kind."""
    return f"{n:,} {what}" if n == 1 or " " in what else f"{n:,} {what}s"


def write_report(profile, out: str | os.PathLike, top: int = 15, *,
                 replace: bool | None = None) -> Path:
    """The HTML report of one file: top ops, steps as stacked bars, kinds, a step's timeline.
    replace: a file at `out` is replaced (one there when the path was checked; default: one
    there as the report begins); a file that appears there while the report is made is kept
    and the page refused."""
    from cuptiprof.analyse.compare import (cpu_time, median_step, step_parts, step_timeline,
                                           timeline_processes)

    replace = taken(out) if replace is None else replace

    overview = profile.report("overview")
    # fetched whole, then cut: the ops left out are counted (the page would read as complete)
    ops_cols, ops_rows = rows_of(profile.ops())
    cpu = _dicts(cpu_time(profile))[0]
    # Activity recorded, every row of zero duration (no time measured): its counts are what the
    # data holds, so the top ops are those that ran most often, the plots of ops and kinds show
    # counts, and the page says why (it said "No GPU activity", as if nothing had run).
    untimed = bool(cpu["gpu_rows"] or cpu["cpu_rows"]) and not cpu["gpu_ms"] and not cpu["cpu_ms"]
    if untimed:
        calls = ops_cols.index("calls")
        ops_rows = sorted(ops_rows, key=lambda r: -(r[calls] or 0))
    ops_left = max(0, len(ops_rows) - top)
    ops_top = Fetched(ops_cols, ops_rows[:top])
    ops = _dicts(ops_top)
    kinds = _dicts(profile.kinds())
    steps = _dicts(profile.report("steps"))
    quality = profile.report("quality").to_arrow_table()   # run once: tested, then shown
    # A run without a GPU stores torch.profiler's CPU ops as kernels: the page must not call
    # their times GPU time. (Rows, not time: work recorded with zero durations is work.)
    only_cpu = bool(cpu["cpu_runs"]) and not cpu["gpu_rows"]
    what = "CPU op" if only_cpu else ("GPU and CPU op" if cpu["cpu_runs"] else "GPU")
    # No activity at all in scope (a --light run, or steps that launched nothing): steps and
    # ranges are plotted by their host time, as the text report gives it, not as bars of 0 ms.
    host_only = not cpu["gpu_rows"] and not cpu["cpu_rows"]
    # said to be a --light run only when it is one: steps that launched nothing are not
    why = ("a <code>--light</code> run records ranges and logs only" if cpu["light"] else
           "nothing in it launched GPU work")
    # where there is no op (no kind) to show, the page says why, not a plot of nothing under
    # "Top 0 ops" and a table's header over no row
    no_ops = (f"No ops in scope ({why}, no GPU or CPU op)." if host_only else
              "No kernels, copies or memsets in scope (only host syncs: see Kinds).")
    no_kinds = f"No GPU activity in scope ({why}): nothing to split by kind."
    body = [f"<h1>cuptiprof report: {esc(profile.path.name)}</h1>",
            f'<p class="note">{esc(profile.path)}; scope: {esc(profile.scope)}</p>']
    if only_cpu:
        body.append('<p class="notice cpu">No GPU activity was captured: this file holds CPU op times '
                    "from torch.profiler (recorded without a CUDA GPU; device -1, one stream per "
                    "thread). Every time on this page is CPU op time, not GPU time.</p>")
    elif cpu["cpu_runs"]:
        body.append(f'<p class="notice cpu">Recorded without a GPU: {esc(cpu["cpu_runs"])}. Those '
                    "runs hold CPU op times from torch.profiler (device -1), counted on this page "
                    "with the GPU work of the other runs.</p>")
    elif host_only:
        body.append(f'<p class="notice host">No GPU activity in scope ({why}): the steps and ranges '
                    "on this page are plotted by their host time.</p>")
    if untimed:
        recorded = ", ".join(_counted(k["count"], f'{k["kind"]} {k["detail"] or ""}'.strip())
                             for k in kinds)
        body.append(f'<p class="notice untimed">{what} activity was recorded ({esc(recorded)}), but '
                    "every row of it has zero duration (it starts and ends at the same time): its "
                    "time was not measured, so the times on this page are 0 ms; the plots of ops "
                    "and kinds show how many times each ran.</p>")
    body.append(table(overview))
    if quality.num_rows:
        body.append("<h2>Data quality</h2><p class=\"note\">What the data does not contain, or holds "
                    "only in part (<code>cuptiprof report --by quality</code>).</p>" + table(quality, wrap=True))
    if not ops:
        body.append(f'<h2>Ops</h2><p class="note none">{no_ops}</p>')
    else:
        _top_ops(body, ops, ops_left, top, what, untimed)
    r_cols, r_rows = rows_of(profile.report("ranges"))
    ranges = _dicts(Fetched(r_cols, r_rows[:top]))
    ranges_left = _left_out(len(r_rows) - top, "range", top)
    if ranges and host_only:
        body.append(f"<h2>The program's ranges</h2><p class=\"note\">Host time of each range, in scope."
                    f"{ranges_left}</p>")
        body.append(hbars([(r["range"], r["host_ms"], f'{r["range"]}: {fmt_value(r["host_ms"])} ms on the '
                            f'host in {_calls(r["calls"])}') for r in ranges], cls="plot ranges"))
    elif ranges:
        body.append(f"<h2>The program's ranges</h2><p class=\"note\">{what} time of the work launched "
                    f"inside each range (nested ranges included), in scope.{ranges_left}</p>")
        body.append(hbars([(r["range"], r["gpu_ms"],
                            f'{r["range"]}: {fmt_value(r["gpu_ms"])} ms in {_calls(r["calls"])}, '
                            f'{fmt_value(r["pct_gpu_time"])}% of {what} time') for r in ranges],
                          cls="plot ranges"))
    # per step, summed over devices and processes: the bar splits the step's GPU window (each
    # moment counted once, as busy and idle time are), the summed durations of the steps report
    # on hover; sync from the steps report
    per_step: dict = {}
    cut = set()  # steps an exception ended early: labelled so, as their bars are short
    whole = {p: 0.0 for p in PARTS}   # a file without steps: its one row (step NULL) per device

    def _add(step, key, v):
        d = whole if step is None else per_step.setdefault(step, {p: 0.0 for p in PARTS})
        d[key] = d.get(key, 0.0) + (v or 0.0)

    for s in steps:
        _add(s["step"], "sync", s["sync_ms"])
        for p in STACKED[:-1]:   # kernel, memcpy, memset: summed durations
            _add(s["step"], p + SUMMED, s[f"{p}_ms"])
        if s["step"] is not None and s.get("complete") is False:
            cut.add(s["step"])
    for s in _dicts(step_parts(profile)):
        for p in STACKED:
            _add(s["step"], p, s[f"{p}_ms"])
    if host_only:
        host: dict = {}   # step -> {process: host ms}: a step's rows repeat it per device
        for s in steps:
            if s["step"] is not None:
                host.setdefault(s["step"], {})[(s["run_id"], s["pid"])] = s["host_ms"] or 0.0
        body.append("<h2>Steps</h2><p class=\"note\">Host time of each step (summed over processes).</p>")
        body.append(stacked_columns(_by_step({k: {"host": sum(v.values())} for k, v in host.items()}, cut),
                                    ("host",), colors={"host": "#9d755d"}, beside=()))
    elif only_cpu:
        body.append("<h2>Steps</h2><p class=\"note\">Each step's bar splits its window (first op's start "
                    "to last op's end) by what ran: a CPU op (shown as kernel; ops of several threads "
                    "at once count once), else nothing (idle).<br>Hover a bar for the ops' summed "
                    "durations.</p>")
    else:
        body.append("<h2>Steps</h2><p class=\"note\">Each step's bar splits its GPU window (first start "
                    "to last end of its GPU work, summed over devices: <code>report --by step</code>'s "
                    f"gpu_window_ms) {_SPLIT} (its kernel_ms, memcpy_ms and memset_ms).<br>{_SYNC_BESIDE}</p>")
    if not host_only and not per_step and any(whole.values()):
        body.append('<p class="note">No steps recorded: the bar is the whole file.</p>'
                    + stacked_columns([("all", whole)]))
    elif not host_only:
        body.append(stacked_columns(_by_step(per_step, cut)))
        stepless = {(s["run_id"], s["pid"]) for s in steps if s["step"] is None}
        if stepless and any(whole.values()):
            # a run without steps merged with runs that have them: in scope (the tables above
            # count it) but in no step's bar; said, or the plot reads as all of the file's work
            n, ms = len(stepless), sum(whole.get(p + SUMMED, 0.0) for p in STACKED[:-1])
            body.append(f'<p class="note stepless">Not in any bar: the {what} time of {n:,} process'
                        f'{"es" if n != 1 else ""} without steps ({fmt_value(ms)} ms, counted in '
                        "the tables above); <code>report --by step</code> gives it in its rows "
                        "without a step.</p>")
    if cut:
        body.append('<p class="note">* ended early by an exception (a Ctrl-C, an error): the bar '
                    "covers only the part of the step that ran.</p>")
    if ranges and not host_only and per_step:
        body.append(_steps_by_range(profile, cut, what, sorted(per_step)))
    body.append("<h2>Kinds</h2>")
    if not kinds:
        body.append(f'<p class="note none">{no_kinds}</p>')
    else:
        body.append(hbars([(f'{k["kind"]} {k["detail"] or ""}'.strip(), k["count"] if untimed else k["total_ms"],
                            f'{k["kind"]} {k["detail"] or ""}'.strip() + f': {fmt_value(k["total_ms"])} ms, {_calls(k["count"])}'
                            + (", host wait (not GPU time)" if k["kind"] == "sync" else ""))
                           for k in kinds], cls="plot kinds", unit="calls" if untimed else "ms"))
        body.append(table(profile.kinds()))
    if host_only:   # nothing to draw: said once, not as one empty timeline per step
        body.append("<h2>Timeline</h2><p class=\"note timeline-none\">No GPU activity in scope "
                    "(ranges and logs only): there is no timeline to draw.</p>")
    else:
        body.append(_timelines(profile, sorted(per_step), median_step, step_timeline,
                               timeline_processes, only_cpu))
    if ops:   # (none: said under the ops' heading above)
        body.append("<h2>Ops</h2>" + table(ops_top))
    if ops_left:
        body.append(f'<p class="note">{_left_out(ops_left, "op", top).strip()}</p>')
    return _write(_page(f"cuptiprof report: {profile.path.name}", body), out, replace)


def _top_ops(body: list, ops: list, left: int, top: int, what: str, untimed: bool) -> None:
    """The top ops' heading, note and bars; `untimed`: every op's time is 0, so the bars are
    their calls."""
    body.append(f"<h2>Top {len(ops)} ops by "
                f"{f'calls (no {what} time measured)' if untimed else f'{what} time'}</h2>"
                f'<p class="note">{"Calls (no time measured)" if untimed else "Summed duration"} '
                'in scope; hover a bar for the full name.'
                f'{_left_out(left, "op", top)}</p>')
    body.append(hbars([(o["name"], o["calls"] if untimed else o["total_ms"],
                        f'{o["name"]}: {fmt_value(o["total_ms"])} ms, {_calls(o["calls"])}, '
                        f'{fmt_value(o["pct_gpu_time"])}% of {what} time') for o in ops],
                      cls="plot ops", unit="calls" if untimed else "ms"))


RANGES_SHOWN = 6   # ranges with a colour of their own in the steps-by-range plot; the rest: "other"


def _by_step(per: dict, cut: set) -> list:
    """Bars in step order, labelled by step; a step an exception ended early is starred."""
    return [(f"{k}*" if k in cut else str(k), v) for k, v in sorted(per.items())]


def _steps_by_range(profile, cut: set, what: str = "GPU", steps: Sequence = ()) -> str:
    """Each step as a stacked bar of the GPU work under the innermost of the program's ranges;
    `steps`: the steps of the Steps plot, each a bar here too (one without GPU work: empty)."""
    rows = [r for r in _dicts(profile.report("step_ranges"))
            if r["step"] is not None and r["range"] is not None]   # (a step without work: empty)
    total: dict = {}
    for r in rows:
        total[r["range"]] = total.get(r["range"], 0.0) + (r["gpu_ms"] or 0.0)
    named = [k for k in sorted(total, key=lambda k: -total[k]) if k != "(no range)"]
    shown = named[:RANGES_SHOWN]
    # the rest's piece: named apart from a range of the program's own called "other"
    other = "(other ranges)" if "other" in total else "other"
    parts = shown + ([other] if len(named) > len(shown) else []) + \
        (["(no range)"] if "(no range)" in total else [])
    per: dict = {s: {} for s in steps}
    for r in rows:
        key = r["range"] if r["range"] in shown or r["range"] == "(no range)" else other
        d = per.setdefault(r["step"], {})
        d[key] = d.get(key, 0.0) + (r["gpu_ms"] or 0.0)
    colors = dict(zip(shown, RUN_COLORS))
    colors.update({other: "#bab0ac", "(no range)": "#dddddd"})
    return (f"<h2>Steps by range</h2><p class=\"note\">Each step's {what} time split by the innermost "
            "of the program's own ranges open when it was launched (each piece counted once).</p>"
            + stacked_columns(_by_step(per, cut), parts, colors=colors, beside=()))
