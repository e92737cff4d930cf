"""SVG bar charts: horizontal bars (hbars), bars grouped by key (grouped_hbars), stacked
columns (stacked_columns, thousands of steps drawn as runs), their legend and labels, and the
colours and parts of a step's bar."""
from __future__ import annotations

import math
import re
from typing import Iterable, Sequence

from cuptiprof.render.html.page import esc
from cuptiprof.render.table import cut_cells, fmt_value


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

LABEL_CHAR_W = 6.5   # pixels: the widest character of an 11px label (a digit is about 6)
_STEP_LABEL = re.compile(r"-?\d+\*?")   # a step's column label: its number, starred if cut short


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _labels(names: Sequence, n: int) -> list[str]:
    """Bar labels of names cut to n characters: names that share their first n characters
    (C++ templates, a kernel's lambdas) cut where they differ, as table cells are, not all to
    one label."""
    texts = [" ".join(str(t).split()) for t in names]
    return [c[0] for c in cut_cells([(t,) for t in texts], [[t] for t in texts], n)]


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
