"""One self-contained HTML file with plots: inline SVG and a few lines of inline JS and CSS.

Nothing is fetched from the network. Every name from a trace (kernel, range, device, label,
path) is data: it goes through `esc()` before it touches markup, and the inline script never
reads trace text. Analysis (relations / Arrow) comes in; only layout happens here.

    write_report(profile, "run.html", top=15)      # cuptiprof report FILE --html run.html
    write_compare(comparison, "cmp.html", top=15)  # cuptiprof compare A B --html cmp.html

    page       esc, HTML tables, the page (inline CSS and script), rows as dicts, left-out notes
    charts     SVG bars: hbars, grouped_hbars, stacked_columns (steps in runs), legend, colours
    bump       bump_chart: the comparison's rank shift, labels outside the columns
    timelines  timeline (one step's lanes, busy lanes thinned), _timelines (the report's section)
    output     check_html_output (only an HTML file is replaced), taken, _write (whole or
               nothing, never over a file that appeared after the check)
    report     write_report: one file, with its steps by range
    compare    write_compare: several files

The names other modules and tests use are imported here. A test that replaces one (a constant,
a function) replaces it in the module that reads it.
"""
from __future__ import annotations

from cuptiprof.render.html.bump import BUMP_MAX_RANK, BUMP_TOP, KEY_COLORS, _free_rows, bump_chart
from cuptiprof.render.html.charts import (BESIDE, BESIDE_LABELS, KIND_COLORS, LABEL_CHAR_W, PARTS,
                                          PLOT_COLUMNS, RUN_COLORS, STACKED, SUMMED, _buckets,
                                          grouped_hbars, hbars, stacked_columns)
from cuptiprof.render.html.compare import write_compare
from cuptiprof.render.html.output import check_html_output, taken
from cuptiprof.render.html.page import CELL_CHARS, esc, table
from cuptiprof.render.html.report import RANGES_SHOWN, _by_step, _steps_by_range, write_report
from cuptiprof.render.html.timelines import (TIMELINE_LABEL_W, TIMELINE_LANE_OPS, TIMELINE_STEP_OPS,
                                             TIMELINE_STEPS, TIMELINE_W, _timelines, timeline)

__all__ = [
    "write_report", "write_compare", "check_html_output", "taken", "esc", "table",
    "hbars", "grouped_hbars", "stacked_columns", "bump_chart", "timeline",
    "KIND_COLORS", "RUN_COLORS", "PARTS", "STACKED", "BESIDE", "SUMMED", "BESIDE_LABELS",
    "CELL_CHARS", "LABEL_CHAR_W", "PLOT_COLUMNS", "KEY_COLORS", "BUMP_MAX_RANK", "BUMP_TOP",
    "TIMELINE_STEPS", "TIMELINE_W", "TIMELINE_LABEL_W", "TIMELINE_LANE_OPS", "TIMELINE_STEP_OPS",
    "RANGES_SHOWN",
    # read by tests
    "_buckets", "_by_step", "_steps_by_range", "_timelines", "_free_rows",
]
