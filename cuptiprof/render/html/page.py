"""The page around the plots: escaping of trace text (esc), HTML tables, the page with its
inline CSS and script, and the rows and notes the report and the comparison share."""
from __future__ import annotations

import datetime as _dt
import html
import math
from typing import Sequence

from cuptiprof._version import __version__
from cuptiprof.render.table import clean, cut_cells, fmt_value, rows_of


# Characters a table cell shows of a name: about what fits the cell's 520 pixels (_CSS) at 12px.
CELL_CHARS = 72

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


def table(rel_or_tbl, max_rows: int = 200, wrap: bool = False, empty: str = "(no rows)") -> str:
    """An HTML table; wrap: long cells wrap (sentences) instead of being cut off. Otherwise a
    long name is cut here, not by the browser at its end, so that names that share a long
    prefix (C++ templates) stay apart; every cell holds its full value as its tooltip.
    `empty` (HTML): what is said in place of a table without rows, not a header over nothing."""
    cols, rows = rows_of(rel_or_tbl)
    if not rows:
        return f'<p class="note none">{empty}</p>'
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


def _dicts(rel) -> list[dict]:
    cols, rows = rows_of(rel)
    return [dict(zip(cols, r)) for r in rows]


def _left_out(more: int, what: str, top: int, need: int | None = None) -> str:
    """A sentence counting the rows (ops, keys) a top-N cut left out, and the --top that shows
    them all; empty where none was."""
    if more <= 0:
        return ""
    return (f" {more:,} more {what}{'s' if more != 1 else ''} not shown; <code>--top "
            f"{need if need is not None else top + more}</code> shows every one.")
