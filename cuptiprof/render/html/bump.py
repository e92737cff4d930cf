"""The rank-shift (bump) chart of the comparison: each key's rank per file, joined by lines,
with labels outside the columns."""
from __future__ import annotations

from typing import Sequence

from cuptiprof.render.html.charts import _labels
from cuptiprof.render.html.page import esc


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
