"""The HTML comparison of several files (write_compare): ops per file, rank shift, kinds and
steps per file, devices, bandwidth and throughput."""
from __future__ import annotations

import os
from pathlib import Path

from cuptiprof.render.html.bump import BUMP_TOP, bump_chart
from cuptiprof.render.html.charts import (PARTS, RUN_COLORS, STACKED, SUMMED, _SPLIT, _SYNC_BESIDE,
                                          _legend, grouped_hbars, stacked_columns)
from cuptiprof.render.html.output import _write, taken
from cuptiprof.render.html.page import _dicts, _left_out, _page, esc, table


def write_compare(cmp, out: str | os.PathLike, top: int = 15, *,
                  replace: bool | None = None) -> Path:
    """The HTML comparison: ops per file, rank shift, kinds and steps per file, devices.
    replace: as write_report's."""
    replace = taken(out) if replace is None else replace
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
                "cuptiprof's table of known GPUs, not from the file.</p>"
                + table(cmp.lettered("bandwidth"), empty="No copies (memcpy) in the recorded "
                        "steps of any file: no bandwidth to show."))
    if cmp.work:
        body.append("<h2>Throughput against peak (estimates)</h2>" + table(cmp.lettered("throughput")))
    return _write(_page("cuptiprof compare", body), out, replace)
