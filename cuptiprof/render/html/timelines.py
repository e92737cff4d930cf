"""Step timelines: one step's GPU work as SVG lanes (timeline, busy lanes thinned) and the
report's Timeline section (_timelines: the typical step and its neighbours, one shown at a time)."""
from __future__ import annotations

from typing import Sequence

from cuptiprof.render.html.charts import KIND_COLORS, _legend
from cuptiprof.render.html.page import _dicts, esc


TIMELINE_STEPS = 6  # steps whose timeline is embedded (the typical one and its neighbours)
TIMELINE_W, TIMELINE_LABEL_W = 1100, 130   # pixels: the whole plot, the lane labels
# Ops a timeline lane draws one by one; a busier lane draws ops less than a pixel apart as one
# box, which keeps the page small for steps of any size while every lane and the whole step show.
TIMELINE_LANE_OPS = 2000
# Ops a step's timeline draws one by one in all: a step of many processes or streams (64 ranks,
# hundreds of streams) has every lane thinned, so that each embedded step stays about this many
# boxes (hundreds of kB) instead of one box per op (tens of MB, a page the browser hangs on).
TIMELINE_STEP_OPS = 5000


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
