"""One self-contained HTML file with plots: inline SVG and a few lines of inline JS and CSS.

Nothing is fetched from the network. Every name from a trace (kernel, range, device, label,
path) is data: it goes through `esc()` before it touches markup, and the inline script never
reads trace text. Analysis (relations / Arrow) comes in; only layout happens here.

    write_report(profile, "run.html", top=15)      # cuptiprof report FILE --html run.html
    write_compare(comparison, "cmp.html", top=15)  # cuptiprof compare A B --html cmp.html
"""
from __future__ import annotations

import datetime as _dt
import html
import math
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

from cuptiprof._version import __version__
from cuptiprof.errors import InputError
from cuptiprof.outputs import check_output, temp_beside, write_failed
from cuptiprof.render.table import Fetched, clean, cut_cells, fmt_value, rows_of

KIND_COLORS = {"kernel": "#4c78a8", "memcpy": "#f58518", "memset": "#54a24b", "sync": "#b279a2",
               "idle": "#bab0ac"}
RUN_COLORS = ("#4c78a8", "#e45756", "#54a24b", "#f58518", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")
PARTS = ("kernel", "memcpy", "memset", "sync", "idle")
# A step's bar: its GPU work and idle time stacked; host sync time (the host waiting, not GPU
# work: it overlaps the work it waits for) is a bar of its own beside it, else the stack would
# stand many times taller than the step's GPU window.
STACKED = tuple(p for p in PARTS if p != "sync")
BESIDE = ("sync",)
# A column's "<part> summed" value: the part's summed durations, given on hover beside the part
# where they differ from it (a steps bar's parts are wall time, overlapping work counted once).
SUMMED = " summed"
BESIDE_LABELS = {"sync": "sync (host wait, beside the bar)"}
# The notes of the steps plots (report and compare): how a bar splits a step's GPU window.
_SPLIT = ("by what ran: a kernel; else a copy; else a memset; else nothing (idle).<br>Work on "
          "several streams at once counts once, so the bar is the window; hover a bar for each "
          "kind's summed durations")
_SYNC_BESIDE = "The thin bar beside it: host sync time (the host waiting, not GPU work)."
# Characters a table cell shows of a name: about what fits the cell's 520 pixels (_CSS) at 12px.
CELL_CHARS = 72
TIMELINE_STEPS = 6  # steps whose timeline is embedded (the typical one and its neighbours)
TIMELINE_W, TIMELINE_LABEL_W = 1100, 130   # pixels: the whole plot, the lane labels
# Ops a timeline lane draws one by one; a busier lane draws ops less than a pixel apart as one
# box, which keeps the page small for steps of any size while every lane and the whole step show.
TIMELINE_LANE_OPS = 2000
# Ops a step's timeline draws one by one in all: a step of many processes or streams (64 ranks,
# hundreds of streams) has every lane thinned, so that each embedded step stays about this many
# boxes (hundreds of kB) instead of one box per op (tens of MB, a page the browser hangs on).
TIMELINE_STEP_OPS = 5000

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
p.note{color:#555;font-size:13px;margin:4px 0 10px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:left;max-width:520px;overflow:hidden;
text-overflow:ellipsis;white-space:nowrap} td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f4f4f4} svg{display:block;margin:6px 0} svg text{font-size:11px;fill:#333}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
select{font-size:13px} table.wrap td{white-space:normal}
p.notice{background:#fff4d6;border:1px solid #e0c36c;padding:8px 10px;font-size:14px;margin:10px 0}
"""

_JS = """
(function(){
  var sel = document.getElementById('step-select');
  if (!sel) { return; }
  function show(){
    var items = document.querySelectorAll('.timeline');
    for (var i = 0; i < items.length; i++) {
      items[i].style.display = (items[i].getAttribute('data-step') === sel.value) ? 'block' : 'none';
    }
  }
  sel.addEventListener('change', show);
  show();
})();
"""


def esc(value) -> str:
    """Text or attribute value from a trace, escaped for HTML (quotes included); control
    characters (NUL, escapes, bidi overrides) are dropped: they are invalid in HTML."""
    return html.escape("" if value is None else clean(str(value)), quote=True)


LABEL_CHAR_W = 6.5   # pixels: the widest character of an 11px label (a digit is about 6)
_STEP_LABEL = re.compile(r"-?\d+\*?")   # a step's column label: its number, starred if cut short


def _calls(n) -> str:
    """'1 call', '3 calls': a tooltip's count."""
    return f"{n} call" if n == 1 else f"{n} calls"


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _labels(names: Sequence, n: int) -> list[str]:
    """Bar labels of names cut to n characters: names that share their first n characters
    (C++ templates, a kernel's lambdas) cut where they differ, as table cells are, not all to
    one label."""
    texts = [" ".join(str(t).split()) for t in names]
    return [c[0] for c in cut_cells([(t,) for t in texts], [[t] for t in texts], n)]


# -- SVG primitives -------------------------------------------------------------------------
def _legend(items: Iterable[tuple[str, str]]) -> str:
    # labels are range names too: a long one is cut (in full on hover), or one unbreakable
    # legend item would stretch the page to its length
    return '<div class="legend">' + "".join(
        f'<span title="{esc(label)}"><i style="background:{c}"></i>{esc(_short(label, 48))}</span>'
        for label, c in items) + "</div>"


def hbars(items: Sequence[tuple[str, float, str]], unit: str = "ms", width: int = 900,
          label_w: int = 330, color: str = KIND_COLORS["kernel"], cls: str = "plot") -> str:
    """Horizontal bars: (label, value, tooltip)."""
    if not items:
        return '<p class="note">(nothing to plot)</p>'
    bar_h, gap = 16, 5
    vmax = max((v or 0) for _, v, _ in items) or 1.0
    plot_w = width - label_w - 90
    h = len(items) * (bar_h + gap) + 6
    out = [f'<svg class="{cls}" width="{width}" height="{h}" viewBox="0 0 {width} {h}" role="img">']
    labels = _labels([label for label, _, _ in items], 46)
    for i, (label, v, tip) in enumerate(items):
        y = 3 + i * (bar_h + gap)
        w = max(1.0, plot_w * (v or 0) / vmax)
        out.append(f'<g><title>{esc(tip)}</title>'
                   f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{esc(labels[i])}</text>'
                   f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color}"></rect>'
                   f'<text x="{label_w + w + 4:.1f}" y="{y + 12}">{esc(fmt_value(v))} {esc(unit)}</text></g>')
    out.append("</svg>")
    return "".join(out)


def grouped_hbars(keys: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]],
                  unit: str = "ms", width: int = 900, label_w: int = 330) -> str:
    """One group per key, one bar per series (file)."""
    if not keys:
        return '<p class="note">(nothing to plot)</p>'
    bar_h, gap = 11, 9
    vmax = max((v or 0) for _, vals in series for v in vals) or 1.0
    plot_w = width - label_w - 90
    group_h = len(series) * bar_h + gap
    h = len(keys) * group_h + 6
    out = [f'<svg class="plot" width="{width}" height="{h}" viewBox="0 0 {width} {h}" role="img">']
    labels = _labels(keys, 46)
    for i, key in enumerate(keys):
        y0 = 3 + i * group_h
        out.append(f'<text x="{label_w - 6}" y="{y0 + bar_h * len(series) / 2 + 4:.1f}" '
                   f'text-anchor="end"><title>{esc(key)}</title>{esc(labels[i])}</text>')
        for j, (name, vals) in enumerate(series):
            v = vals[i]
            y = y0 + j * bar_h
            color = RUN_COLORS[j % len(RUN_COLORS)]
            if v is None:
                out.append(f'<text x="{label_w + 2}" y="{y + 9}" style="fill:#999">{esc(name)}: absent</text>')
                continue
            w = max(1.0, plot_w * v / vmax)
            out.append(f'<g><title>{esc(name)}: {esc(key)}: {esc(fmt_value(v))} {esc(unit)}</title>'
                       f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 1}" fill="{color}"></rect>'
                       f'<text x="{label_w + w + 4:.1f}" y="{y + 9}">{esc(fmt_value(v))}</text></g>')
    out.append("</svg>")
    return "".join(out)


def stacked_columns(columns: Sequence[tuple[str, dict]], parts: Sequence[str] = STACKED,
                    unit: str = "ms", height: int = 240, width: int | None = None,
                    colors: dict | None = None, beside: Sequence[str] = BESIDE) -> str:
    """Vertical stacked bars: (label, {part: value}); `colors`: part -> colour (else by kind).
    `beside`: parts drawn as a thin bar of their own right of the stack, on the same scale
    (host sync time: not GPU work, so never stacked on it)."""
    colors = colors or KIND_COLORS
    if not columns:
        return '<p class="note">(nothing to plot)</p>'
    columns, tips, note = _buckets(columns, parts, unit, beside)
    # room is made beside the stacks only where some column has a part to draw there
    beside = [p for p in beside if any((d.get(p) or 0) > 0 for _, d in columns)]
    n = len(columns)
    # a step number (starred where cut short) is shown whole, a name cut to 8 characters
    labels = [label if _STEP_LABEL.fullmatch(str(label)) else _short(label, 8) for label, _ in columns]
    need = max(len(t) for t in labels) * LABEL_CHAR_W + 6   # pixels from one label to the next
    # a column and the gap after it: thousands of steps share the page's width (thinner
    # columns, then no gap) rather than widening the plot 10 pixels a step; a few columns with
    # long labels (step 123456789) are spaced so that every label clears the next
    slot = min(52, 860 // n) if 860 // n >= 10 else 860 / n
    if slot < need <= 860 / n:
        slot = need
    col_w = min(48, slot - 4) if slot >= 10 else slot * (0.6 if slot >= 3 else 1.0)
    width = width or max(300, round(60 + n * slot + 20))
    plot_h = height - 40
    vmax = max(max([sum((d.get(p) or 0) for p in parts)] + [d.get(p) or 0 for p in beside])
               for _, d in columns) or 1.0
    stack_w = col_w * 0.7 if beside else col_w   # the rest of the column: the bars beside
    # every so many columns is labelled, so that the longest label clears the next one shown
    stride = max(1 if n <= 40 else n // 20, math.ceil(need / slot))
    out = [f'<svg class="plot" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
           f'<text x="4" y="12">{esc(fmt_value(vmax))} {esc(unit)}</text>',
           f'<line x1="56" y1="{height - 28}" x2="{width - 4}" y2="{height - 28}" stroke="#999"></line>']
    for i, (label, d) in enumerate(columns):
        x = round(60 + i * slot, 2)
        y = height - 28
        tip = [tips[i] if tips else f"{label}"] + [_part_tip(p, d, unit) for p in parts]
        tip += [f"{p} (host wait): {fmt_value(d.get(p) or 0)} {unit}" for p in beside]
        out.append(f'<g><title>{esc(" | ".join(tip))}</title>')
        for p in parts:
            v = d.get(p) or 0
            if v <= 0:
                continue
            hh = plot_h * v / vmax
            y -= hh
            out.append(f'<rect x="{x}" y="{y:.1f}" width="{stack_w:.4g}" height="{hh:.1f}" '
                       f'fill="{colors.get(p, "#888")}"></rect>')
        for j, p in enumerate(beside):
            v = d.get(p) or 0
            if v <= 0:
                continue
            hh = plot_h * v / vmax
            w = (col_w - stack_w) / len(beside)
            out.append(f'<rect x="{x + stack_w + j * w:.2f}" y="{height - 28 - hh:.1f}" width="{w:.4g}" '
                       f'height="{hh:.1f}" fill="{colors.get(p, "#888")}" class="beside"></rect>')
        out.append("</g>")
        if i % stride == 0:
            out.append(f'<text x="{x + col_w / 2:.1f}" y="{height - 14}" text-anchor="middle">'
                       f'{esc(labels[i])}</text>')
    out.append("</svg>")
    return "".join(out) + _legend([(p, colors.get(p, "#888")) for p in parts] +
                                  [(BESIDE_LABELS.get(p, p), colors.get(p, "#888")) for p in beside]) + note


def _part_tip(p: str, d: dict, unit: str) -> str:
    """A part's line of a column's tooltip, with its summed durations where they differ."""
    v, summed = fmt_value(d.get(p) or 0), d.get(p + SUMMED)
    more = f" (summed durations: {fmt_value(summed)} {unit})" if summed is not None and \
        fmt_value(summed) != v else ""
    return f"{p}: {v} {unit}{more}"


PLOT_COLUMNS = 860   # columns a stacked plot draws at most: about one pixel each across the page


def _buckets(columns: Sequence[tuple[str, dict]], parts: Sequence[str], unit: str,
             beside: Sequence[str] = ()):
    """Steps beyond PLOT_COLUMNS (a decode loop of thousands) drawn as runs of consecutive
    steps, each bar the run's mean: (columns, a tooltip per column or None, a note).
    Narrower than a pixel, one column a step could be neither seen nor hovered, and made pages
    of many MB; the tooltip names each run's slowest column (by its stacked parts), so a spike
    is not averaged away. The parts `beside` the stack are averaged too."""
    n = len(columns)
    if n <= PLOT_COLUMNS:
        return columns, None, ""
    k = math.ceil(n / PLOT_COLUMNS)
    out, tips = [], []
    for i in range(0, n, k):
        run = columns[i:i + k]
        totals = [sum((d.get(p) or 0) for p in parts) for _, d in run]
        slow = max(range(len(run)), key=totals.__getitem__)
        keys = (*parts, *beside, *(p + SUMMED for p in parts if any(p + SUMMED in d for _, d in run)))
        mean = {p: sum((d.get(p) or 0) for _, d in run) / len(run) for p in keys}
        first, last = str(run[0][0]), str(run[-1][0])
        # a starred step (ended early) keeps its star on the run's label
        label = first.rstrip("*") + ("*" if any(str(c).endswith("*") for c, _ in run) else "")
        out.append((label, mean))
        tips.append(f"steps {first}\u2013{last} ({len(run)} steps), mean per step | slowest: step "
                    f"{run[slow][0]}, {fmt_value(totals[slow])} {unit}")
    note = (f'<p class="note buckets">{n:,} steps, more than the page has pixels: each bar is the mean '
            f"per step of {k} consecutive steps (the last bar of {n - (len(out) - 1) * k}), labelled by "
            "its first step; hover a bar for its steps and the slowest of them. <code>cuptiprof report "
            "FILE --by step</code> lists every step.</p>")
    return out, tips, note


def _clock_origins(windows: dict) -> dict:
    """Time origin of each process: processes whose work lies close in time (the ranks of one
    job) share the earliest start, so their skew shows; one far from the others (another trace
    or run merged into the file, on a clock hours away) starts at its own first op."""
    origin: dict = {}
    g0 = g1 = None
    for key in sorted(windows, key=lambda k: windows[k]):
        t0, t1 = windows[key]
        if g0 is None or t0 > g1 + max(g1 - g0, t1 - t0):
            g0, g1 = t0, t1
        else:
            g1 = max(g1, t1)
        origin[key] = g0
    return origin


def _process_label(run_id, pid, info: dict) -> str:
    p = info.get((run_id, pid)) or {}
    parts = [str(p["run_label"])] if (p.get("runs") or 0) > 1 and p.get("run_label") else []
    parts.append(f"pid {pid}")
    if p.get("rank") is not None:
        parts.append(f"rank {p['rank']}")
    if p.get("host"):
        parts.append(f"host {p['host']}")
    return " \u00b7 ".join(parts)


def timeline(rows: Sequence[dict], width: int = TIMELINE_W, processes: Sequence[dict] = ()) -> str:
    """One lane per (run, process, device, stream), grouped under a process heading when the step
    has several; rows need run_id, pid, device_id, stream_id, kind, name, start_ns, end_ns, and
    may have ops and busy_ns (a box standing for several ops, from step_timeline) and on_cpu
    (a CPU op of a run without a GPU, named so in its tooltip).
    `processes`: rows of timeline_processes (run label, host, rank) to name the headings."""
    if not rows:
        return '<p class="note">(no GPU work in this step)</p>'

    def order(x):
        return tuple(v for part in x for v in (part is None, part or 0))

    lanes = sorted({(r["run_id"], r["pid"], r["device_id"], r["stream_id"]) for r in rows}, key=order)
    windows: dict = {}
    for r in rows:
        key = (r["run_id"], r["pid"])
        t0, t1 = windows.get(key, (r["start_ns"], r["end_ns"]))
        windows[key] = (min(t0, r["start_ns"]), max(t1, r["end_ns"]))
    origin = _clock_origins(windows)
    span = max(1, max(windows[k][1] - origin[k] for k in windows))
    apart = len(set(origin.values())) > 1
    headed = len(windows) > 1
    info = {(p["run_id"], p["pid"]): p for p in processes}
    label_w, lane_h, head_h = TIMELINE_LABEL_W, 18, 18
    plot_w = width - label_w - 10
    ys: dict = {}
    y = 4
    out = []
    prev = None
    for lane in lanes:
        run_id, pid, dev, stream = lane
        if headed and (run_id, pid) != prev:
            out.append(f'<text class="process" x="4" y="{y + 13}" style="font-weight:600">'
                       f'{esc(_process_label(run_id, pid, info))}</text>')
            y += head_h
        prev = (run_id, pid)
        ys[lane] = y
        out.append(f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end">'
                   f'dev {esc(dev)} stream {esc(stream)}</text>'
                   f'<rect x="{label_w}" y="{y}" width="{plot_w}" height="{lane_h}" fill="#f6f6f6"></rect>')
        y += lane_h + 4
    h = y + 20
    merged_ops = boxes = 0
    merge_px = max((r.get("merge_px") or 0) for r in rows)
    step_ops = sum((r.get("ops") or 1) for r in rows)
    for r in rows:
        lane = (r["run_id"], r["pid"], r["device_id"], r["stream_id"])
        x = label_w + plot_w * (r["start_ns"] - origin[lane[:2]]) / span
        w = max(0.6, plot_w * (r["end_ns"] - r["start_ns"]) / span)
        dur = (r["end_ns"] - r["start_ns"]) / 1e3
        n = r.get("ops") or 1
        fill = f'fill="{KIND_COLORS.get(r["kind"], "#888")}"'
        # a run without a GPU stores torch.profiler's CPU ops as kernels on a CPU device
        what = "CPU op" if r.get("on_cpu") else r["kind"]
        if n > 1:
            merged_ops += n
            boxes += 1
            busy = (r.get("busy_ns") or 0) / 1e3
            # the idle time between the merged ops shows as a paler box
            fill += f' fill-opacity="{max(0.3, min(1.0, busy / dur if dur else 1.0)):.2f}"'
            tip = (f'{n} ops less than a pixel apart, {_us(busy)} us busy in {_us(dur)} us; '
                   f'longest: {esc(r["name"])} ({esc(what)})')
        else:
            tip = f'{esc(r["name"])} ({esc(what)}, {_us(dur)} us)'
        out.append(f'<rect x="{x:.2f}" y="{ys[lane]}" width="{w:.2f}" height="{lane_h}" '
                   f'{fill}><title>{tip}</title></rect>')
    out.append(f'<text x="{label_w}" y="{h - 6}">0</text>'
               f'<text x="{width - 10}" y="{h - 6}" text-anchor="end">{span / 1e6:.3f} ms</text></svg>')
    svg = f'<svg class="plot" width="{width}" height="{h}" viewBox="0 0 {width} {h}" role="img">' + "".join(out)
    if merged_ops and step_ops > TIMELINE_STEP_OPS:
        svg += (f'<p class="note thinned">Thinned: this step has more than {TIMELINE_STEP_OPS:,} ops, '
                f"so in every lane ops less than {merge_px:.0f} pixel{'s' if merge_px >= 1.5 else ''} "
                "apart are drawn as one box "
                f"({merged_ops:,} ops as {boxes:,} {'box' if boxes == 1 else 'boxes'}, coloured by the "
                "longest op, paler where the GPU was idle between them); hover a box for its count, "
                "or export the step (<code>cuptiprof export FILE --chrome OUT.json.gz --steps N</code>) "
                "to see each op. Every lane and the whole step are shown.</p>")
    elif merged_ops:
        svg += (f'<p class="note thinned">Thinned: in lanes of more than {TIMELINE_LANE_OPS:,} ops, ops '
                f"less than a pixel apart are drawn as one box ({merged_ops:,} ops as {boxes:,} "
                f'{"box" if boxes == 1 else "boxes"}, coloured by the longest op, paler where the '
                "GPU was idle between them); hover a box for its count. Every lane and the whole "
                "step are shown.</p>")
    if apart:
        svg += ('<p class="note">Processes far apart in time (separate traces or runs in one file) '
                "are each drawn from their own first op in this step, on one scale.</p>")
    return svg


def _us(us: float) -> str:
    """A duration in microseconds for a tooltip: a tenth of a microsecond from 1 us, else two
    significant digits (a 40 ns memset read "0.0 us")."""
    return f"{us:.1f}" if us >= 1 or us == 0 else f"{us:.2g}"


KEY_COLORS = ("#4c78a8", "#e45756", "#54a24b", "#f58518", "#72b7b2", "#b279a2", "#ff9da6",
              "#9d755d", "#eeca3b", "#1f77b4", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f",
              "#d62728", "#2ca02c")
BUMP_MAX_RANK = 40   # ranks below this are drawn on the last row
BUMP_TOP = 24        # about this many lines in the rank-shift chart: each file's top 24 / files


def _free_rows(wanted: dict, taken: set) -> dict:
    """key -> the free row nearest its wanted row (rows: 0, 1, ...), in the order given."""
    out = {}
    for key, row in wanted.items():
        for d in range(0, 1000):
            pick = next((r for r in (row + d, row - d) if r >= 0 and r not in taken), None)
            if pick is not None:
                break
        taken.add(pick)
        out[key] = pick
    return out


def bump_chart(keys: Sequence[str], letters: Sequence[str], ranks: dict[str, list[int | None]],
               width: int = 1100) -> str:
    """Rank of each key per file, joined by lines (rank 1 on top). Labels sit outside the
    columns, so they never cross one: a key of the first file on the left at its rank, a key of
    the last file on the right at its rank, and a key of neither on the right in the free row
    nearest its last rank, with a leader line to it."""
    if not keys:
        return '<p class="note">(nothing to plot)</p>'
    row_h = 20
    max_rank = min(max([r for k in keys for r in ranks[k] if r is not None] + [1]), BUMP_MAX_RANK)
    n = len(letters)
    left, right = 340, 340
    step_x = (width - left - right) / max(1, n - 1)

    def row_of(rank):
        return min(rank, BUMP_MAX_RANK) - 1

    def y_of(rank):
        return 30 + row_of(rank) * row_h

    def rank_text(rank):
        return f"{rank}." if rank < BUMP_MAX_RANK else f"{rank}. (below)"

    color = {k: KEY_COLORS[i % len(KEY_COLORS)] for i, k in enumerate(keys)}
    last = {k: max(j for j, r in enumerate(ranks[k]) if r is not None)
            for k in keys if any(r is not None for r in ranks[k])}
    def place(at: dict, taken: set | None = None) -> dict:
        """Label rows: a key at its rank's row, ranks past the last row (and `taken` rows)
        moved to the nearest free row."""
        taken = set() if taken is None else taken
        exact = {k: row_of(r) for k, r in at.items() if r < BUMP_MAX_RANK and row_of(r) not in taken}
        taken |= set(exact.values())
        rest = {k: row_of(r) for k, r in sorted(at.items(), key=lambda kv: (kv[1], kv[0])) if k not in exact}
        return {**exact, **_free_rows(rest, taken)}

    left_rows = place({k: ranks[k][0] for k in last if ranks[k][0] is not None})
    # right: the last file's keys, then the keys of neither end (at their last rank)
    right_rows = place({k: ranks[k][n - 1] for k in last if last[k] == n - 1})
    right_rows.update(place({k: ranks[k][last[k]] for k in last
                             if last[k] < n - 1 and ranks[k][0] is None}, set(right_rows.values())))
    h = int(30 + max([row_of(max_rank), *left_rows.values(), *right_rows.values()]) * row_h + row_h)
    left_text, right_text = (dict(zip(keys, _labels(keys, n))) for n in (48, 44))
    out = [f'<svg class="plot bump" width="{width}" height="{h}" viewBox="0 0 {width} {h}" role="img">']
    for j, L in enumerate(letters):
        out.append(f'<text x="{left + j * step_x:.1f}" y="14" text-anchor="middle">{esc(L)}</text>')
    x_end = left + (n - 1) * step_x
    for key in keys:
        if key not in last:
            continue
        c = color[key]
        pts = [(left + j * step_x, y_of(r)) for j, r in enumerate(ranks[key]) if r is not None]
        tip = f"{key}: " + ", ".join(f"{L} rank {r if r is not None else '-'}"
                                      for L, r in zip(letters, ranks[key]))
        out.append(f'<g><title>{esc(tip)}</title>')
        if len(pts) > 1:
            out.append('<polyline fill="none" stroke-width="2" stroke="' + c + '" points="'
                       + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"></polyline>')
        for x, y in pts:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{c}"></circle>')
        if key in left_rows:
            ly = 30 + left_rows[key] * row_h
            if ly != y_of(ranks[key][0]):   # moved off its rank's row: a leader line to it
                out.append(f'<polyline fill="none" stroke-width="1" stroke-dasharray="2,2" stroke="{c}" '
                           f'points="{left - 5},{y_of(ranks[key][0]):.1f} {left - 6},{ly:.1f}"></polyline>')
            out.append(f'<text class="left" x="{left - 8}" y="{ly + 4:.1f}" '
                       f'text-anchor="end">{rank_text(ranks[key][0])} {esc(left_text[key])}</text>')
        if key in right_rows:
            j = last[key]
            ly = 30 + right_rows[key] * row_h
            if j < n - 1 or ly != y_of(ranks[key][j]):   # a leader line from its last point
                out.append(f'<polyline fill="none" stroke-width="1" stroke-dasharray="2,2" stroke="{c}" '
                           f'points="{left + j * step_x + 5:.1f},{y_of(ranks[key][j]):.1f} '
                           f'{x_end + 4:.1f},{ly:.1f}"></polyline>')
            where = "" if j == n - 1 else f"{letters[j]} "
            out.append(f'<text class="right" x="{x_end + 10:.1f}" y="{ly + 4:.1f}">'
                       f'{esc(where)}{rank_text(ranks[key][j])} {esc(right_text[key])}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def table(rel_or_tbl, max_rows: int = 200, wrap: bool = False) -> str:
    """An HTML table; wrap: long cells wrap (sentences) instead of being cut off. Otherwise a
    long name is cut here, not by the browser at its end, so that names that share a long
    prefix (C++ templates) stay apart; every cell holds its full value as its tooltip."""
    cols, rows = rows_of(rel_or_tbl)
    shown_rows = rows[:max_rows]
    texts = [[fmt_value(v) for v in r] for r in shown_rows]
    cells = texts if wrap else cut_cells(shown_rows, texts, CELL_CHARS)
    out = ['<table class="wrap">' if wrap else "<table>", "<thead><tr>", *(f"<th>{esc(c)}</th>" for c in cols), "</tr></thead><tbody>"]
    for r, shown in zip(shown_rows, cells):
        out.append("<tr>")
        for v, text in zip(r, shown):
            cls = ' class="n"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            out.append(f'<td{cls} title="{esc(_full(v))}">{esc(text)}</td>')
        out.append("</tr>")
    out.append("</tbody></table>")
    if len(rows) > max_rows:
        more = len(rows) - max_rows
        out.append(f'<p class="note">{more} more row{"s" if more != 1 else ""} not shown</p>')
    return "".join(out)


def _full(v) -> str:
    """A cell's whole value, for its tooltip: a float to 10 significant digits (a nanosecond of
    seconds in ms), so that the binary noise of sums and differences does not show
    (0.000129000000000007 ms), a NaN as the empty cell it is."""
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.10g}"
    return "" if v is None else str(v)


def _page(title: str, body: Sequence[str]) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
            f"<style>{_CSS}</style></head><body>"
            + "".join(body)
            + f'<p class="note">cuptiprof {esc(__version__)}, {esc(stamp)}</p>'
            + f"<script>{_JS}</script></body></html>\n")


def _not_html(path: Path) -> str | None:
    """An existing HTML file is replaced (re-running a report refreshes it); anything else is
    refused, so a report never overwrites a profile or a file the user keeps."""
    if not path.is_file():   # a FIFO or a terminal (/dev/stdout): reading its head would block
        return "is not a regular file; give the path of a file to write"
    try:
        with open(path, "rb") as fh:
            head = fh.read(64).lstrip().lower()
    except OSError:
        head = b""
    if head.startswith((b"<!doctype html", b"<html")):
        return None
    return "exists and is not an HTML file; choose another path (or remove it first)"


def check_html_output(out: str | os.PathLike, inputs=()) -> Path:
    """Refuse an HTML output path before the report is computed."""
    if not os.fspath(out):   # `--html ""` (an unset shell variable) must not pass for no --html
        raise InputError("--html needs a file name, e.g. --html report.html")
    return check_output(out, inputs=inputs, force=True, replaceable=_not_html)


def _write(text: str, out: str | os.PathLike) -> Path:
    path = Path(out)
    tmp = temp_beside(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:   # name the file the user asked for, leave nothing
        tmp.unlink(missing_ok=True)
        raise write_failed(path, exc) from None
    except BaseException:   # a Ctrl-C mid-write: no half-written page left beside the output
        tmp.unlink(missing_ok=True)
        raise
    return path


def _dicts(rel) -> list[dict]:
    cols, rows = rows_of(rel)
    return [dict(zip(cols, r)) for r in rows]


# -- one file ---------------------------------------------------------------------------------
def write_report(profile, out: str | os.PathLike, top: int = 15) -> Path:
    """The HTML report of one file: top ops, steps as stacked bars, kinds, a step's timeline."""
    from cuptiprof.analyse.compare import (cpu_time, median_step, step_parts, step_timeline,
                                           timeline_processes)

    overview = profile.report("overview")
    # fetched whole, then cut: the ops left out are counted (the page would read as complete)
    ops_cols, ops_rows = rows_of(profile.ops())
    ops_left = max(0, len(ops_rows) - top)
    ops_top = Fetched(ops_cols, ops_rows[:top])
    ops = _dicts(ops_top)
    kinds = _dicts(profile.kinds())
    steps = _dicts(profile.report("steps"))
    quality = profile.report("quality").to_arrow_table()   # run once: tested, then shown
    cpu = _dicts(cpu_time(profile))[0]
    # A run without a GPU stores torch.profiler's CPU ops as kernels: the page must not call
    # their times GPU time.
    only_cpu = bool(cpu["cpu_runs"]) and not cpu["gpu_ms"]
    what = "CPU op" if only_cpu else ("GPU and CPU op" if cpu["cpu_runs"] else "GPU")
    # No activity at all in scope (a --light run, or steps that launched nothing): steps and
    # ranges are plotted by their host time, as the text report gives it, not as bars of 0 ms.
    host_only = not cpu["gpu_ms"] and not cpu["cpu_ms"]
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
        # said to be a --light run only when it is one: steps that launched nothing are not
        why = ("a <code>--light</code> run records ranges and logs only" if cpu["light"] else
               "nothing in it launched GPU work")
        body.append(f'<p class="notice host">No GPU activity in scope ({why}): the steps and ranges '
                    "on this page are plotted by their host time.</p>")
    body.append(table(overview))
    if quality.num_rows:
        body.append("<h2>Data quality</h2><p class=\"note\">What the data does not contain, or holds "
                    "only in part (<code>cuptiprof report --by quality</code>).</p>" + table(quality, wrap=True))
    body.append(f"<h2>Top {len(ops)} ops by {what} time</h2>"
                '<p class="note">Summed duration in scope; hover a bar for the full name.'
                f'{_left_out(ops_left, "op", top)}</p>')
    body.append(hbars([(o["name"], o["total_ms"],
                        f'{o["name"]}: {fmt_value(o["total_ms"])} ms, {_calls(o["calls"])}, '
                        f'{fmt_value(o["pct_gpu_time"])}% of {what} time') for o in ops], cls="plot ops"))
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
    if cut:
        body.append('<p class="note">* ended early by an exception (a Ctrl-C, an error): the bar '
                    "covers only the part of the step that ran.</p>")
    if ranges and not host_only and per_step:
        body.append(_steps_by_range(profile, cut, what, sorted(per_step)))
    body.append("<h2>Kinds</h2>")
    body.append(hbars([(f'{k["kind"]} {k["detail"] or ""}'.strip(), k["total_ms"],
                        f'{k["kind"]} {k["detail"] or ""}'.strip() + f': {fmt_value(k["total_ms"])} ms, {_calls(k["count"])}'
                        + (", host wait (not GPU time)" if k["kind"] == "sync" else ""))
                       for k in kinds], cls="plot kinds"))
    body.append(table(profile.kinds()))
    if host_only:   # nothing to draw: said once, not as one empty timeline per step
        body.append("<h2>Timeline</h2><p class=\"note timeline-none\">No GPU activity in scope "
                    "(ranges and logs only): there is no timeline to draw.</p>")
    else:
        body.append(_timelines(profile, sorted(per_step), median_step, step_timeline,
                               timeline_processes, only_cpu))
    body.append("<h2>Ops</h2>" + table(ops_top))
    if ops_left:
        body.append(f'<p class="note">{_left_out(ops_left, "op", top).strip()}</p>')
    return _write(_page(f"cuptiprof report: {profile.path.name}", body), out)


def _left_out(more: int, what: str, top: int, need: int | None = None) -> str:
    """A sentence counting the rows (ops, keys) a top-N cut left out, and the --top that shows
    them all; empty where none was."""
    if more <= 0:
        return ""
    return (f" {more:,} more {what}{'s' if more != 1 else ''} not shown; <code>--top "
            f"{need if need is not None else top + more}</code> shows every one.")


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


def _timelines(profile, step_ids: list, median_step, step_timeline, timeline_processes,
               only_cpu: bool = False) -> str:
    if not step_ids:
        return "<h2>Timeline</h2><p class=\"note\">(no recorded steps)</p>"
    mid = median_step(profile)
    if mid not in step_ids:
        mid = step_ids[len(step_ids) // 2]
    i = step_ids.index(mid)
    # centred on it, and as many steps near the last one as near the first
    first = max(0, min(i - TIMELINE_STEPS // 2, len(step_ids) - TIMELINE_STEPS))
    chosen = step_ids[first: first + TIMELINE_STEPS]
    opts = "".join(f'<option value="{esc(s)}"{" selected" if s == mid else ""}>step {esc(s)}'
                   f'{" (typical)" if s == mid else ""}</option>' for s in chosen)
    lanes = ("CPU ops in one step (the typical step: median busy time), one lane per process and "
             "thread (shown as dev -1 and a stream)" if only_cpu else
             "GPU work in one step (the typical step: median busy time), one lane per process, "
             "device and stream")
    parts = [f"<h2>Timeline</h2><p class=\"note\">{lanes}. Hover a box for the op.</p>",
             f'<label>Step <select id="step-select">{opts}</select></label>',
             _legend([("CPU op", KIND_COLORS["kernel"])] if only_cpu else
                     ((k, c) for k, c in KIND_COLORS.items() if k not in ("sync", "idle")))]
    processes = _dicts(timeline_processes(profile))
    for s in chosen:
        rows = _dicts(step_timeline(profile, s, TIMELINE_W - TIMELINE_LABEL_W - 10, TIMELINE_LANE_OPS,
                                     TIMELINE_STEP_OPS))
        parts.append(f'<div class="timeline" data-step="{esc(s)}">{timeline(rows, processes=processes)}</div>')
    return "".join(parts)


# -- several files ----------------------------------------------------------------------------
def write_compare(cmp, out: str | os.PathLike, top: int = 15) -> Path:
    """The HTML comparison: ops per file, rank shift, kinds and steps per file, devices."""
    letters = [r.letter for r in cmp.runs]
    body = [f"<h1>cuptiprof compare ({esc(len(cmp.runs))} files, by {esc(cmp.by)})</h1><ul>"]
    body += [f"<li>{esc(line)}</li>" for line in cmp.legend()]
    body.append("</ul>")
    wide = cmp.side_by_side(top).to_pylist()
    keys = [r["key"] for r in wide]
    more, need = cmp.keys_left_out(top)
    body.append(f"<h2>Top ops per file</h2><p class=\"note\">ms per step (median over the recorded "
                f"steps); key: {esc(cmp.by)}; the keys in the top {top} of any file."
                f"{_left_out(more, 'key', top, need)}</p>")
    body.append(_legend((f"{r.letter}: {r.label}", RUN_COLORS[i % len(RUN_COLORS)])
                        for i, r in enumerate(cmp.runs)))
    body.append(grouped_hbars(keys, [(L, [r[f"{L}_ms"] for r in wide]) for L in letters]))
    # every file's own top ranks, so no file's leaders are missing; few enough keys to read
    per_file = max(1, min(top, BUMP_TOP // len(letters)))
    shift = cmp.rank_shift(per_file).to_pylist()
    ranks: dict[str, list] = {}
    for r in shift:
        ranks.setdefault(r["key"], [None] * len(letters))[r["run"]] = r["rank"]
    shown = sorted(ranks, key=lambda k: (min(v for v in ranks[k] if v is not None),
                                         next(j for j, v in enumerate(ranks[k]) if v is not None), k))
    body.append(f"<h2>Rank shift</h2><p class=\"note\">Rank of each file's top {per_file} ops in every "
                "file (1 = most time per step); on the right each op at its last rank (a letter "
                "first where that is not the last file). Hover a line for all its ranks.</p>")
    body.append(bump_chart(shown, letters, ranks))
    body.append("<h2>Kinds per file</h2><p class=\"note\">Median ms per step of each kind, as the table "
                "gives them: GPU work (summed durations) and idle time stacked, host sync time (not "
                "GPU work) the thin bar beside.<br>Work on several streams at once counts each time, "
                "so a bar can stand taller than a step's GPU window (Steps per file splits it).</p>")
    per_run: dict[int, dict] = {r.index: {p: 0.0 for p in PARTS} for r in cmp.runs}
    for k in _dicts(cmp.kinds()):
        per_run[k["run"]][k["kind"]] = per_run[k["run"]].get(k["kind"], 0.0) + (k["ms"] or 0.0)
    body.append(stacked_columns([(r.letter, per_run[r.index]) for r in cmp.runs], width=420))
    body.append(table(cmp.kinds_side_by_side()))
    body.append("<h2>Steps per file</h2><p class=\"note\">Each step's bar splits its GPU window (summed "
                f"over devices) {_SPLIT}.<br>{_SYNC_BESIDE}</p>")
    steps = _dicts(cmp.steps())
    wall = {(w["run"], w["step"]): w for w in _dicts(cmp.steps_wall())}
    for r in cmp.runs:
        # a file without steps is one step 0 to the comparison: its bar is the whole file, "all"
        # as in the report's HTML, not a step 0 that the file never recorded
        cols = [(str(s["step"]) if r.has_steps else "all",
                 {**{p: (wall.get((r.index, s["step"])) or {}).get(f"{p}_ms") or 0.0 for p in STACKED},
                  **{p + SUMMED: s[f"{p}_ms"] for p in STACKED[:-1]}, "sync": s["sync_ms"]})
                for s in steps if s["run"] == r.index]
        whole = "" if r.has_steps else " (no steps recorded: the bar is the whole file)"
        body.append(f"<p>{esc(r.letter)}: {esc(r.label)}{whole}</p>" + stacked_columns(cols, height=180))
    body.append("<h2>Ops side by side</h2>" + table(cmp.side_by_side(top)))
    if more > 0:
        body.append(f'<p class="note">The keys in the top {top} of any file;'
                    f'{_left_out(more, "key", top, need)}</p>')
    body.append("<h2>Devices</h2>" + table(cmp.devices_side_by_side()))
    body.append("<h2>Copy bandwidth against peak</h2><p class=\"note\">Peaks marked 'estimate' come from "
                "cuptiprof's table of known GPUs, not from the file.</p>" + table(cmp.lettered("bandwidth")))
    if cmp.work:
        body.append("<h2>Throughput against peak (estimates)</h2>" + table(cmp.lettered("throughput")))
    return _write(_page("cuptiprof compare", body), out)
