"""Render a DuckDB relation (or Arrow table) as a terminal table, CSV, JSON or Markdown.

Names come from traces: they are data, so control characters are stripped from terminal and
Markdown output, CSV is properly quoted, and JSON is escaped by the encoder.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import re
import sys
import unicodedata
from typing import Any, Iterable, Sequence

from cuptiprof.markers import finite

FORMATS = ("table", "csv", "json", "markdown")
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Columns hidden from terminal tables when they hold a single value (single-run, single-GPU files).
_QUIET = ("run_id", "pid", "device_id")


# Markdown punctuation that could turn part of a name into markup: `gemm<float>` is an HTML tag to
# CommonMark (GitHub hides it), `a*b*c` emphasis, `x|y` a new table cell. Backslash-escaped, each
# shows as written.
_MD_SPECIAL = re.compile(r"([\\`*_<>\[\]|&~])")


def md_escape(text: str) -> str:
    """A cell's text for a Markdown table: shown as written, never read as markup."""
    return _MD_SPECIAL.sub(r"\\\1", text)


def clean(text: str) -> str:
    """Strip terminal control characters (and bidi overrides) from a name."""
    return _CTRL.sub("", text.replace("\n", " ").replace("\t", " "))


def rows_of(rel) -> tuple[list[str], list[tuple]]:
    if hasattr(rel, "columns") and hasattr(rel, "fetchall"):
        return unique_names(rel.columns), rel.fetchall()
    return _arrow_rows(rel)


def stream_of(rel) -> tuple[list[str], Iterable[tuple]]:
    """Like rows_of, but the rows of a DuckDB relation come a batch at a time: Python holds
    one batch, not a result of millions of rows (each value a Python object)."""
    if hasattr(rel, "iter_rows"):        # DuckDB 2
        return unique_names(rel.columns), rel.iter_rows()
    if hasattr(rel, "fetchmany") and hasattr(rel, "columns"):   # DuckDB 1

        def batches():
            while True:
                rows = rel.fetchmany(10_000)
                if not rows:
                    return
                yield from rows
        return unique_names(rel.columns), batches()
    return rows_of(rel)


def _arrow_rows(rel) -> tuple[list[str], list[tuple]]:
    tbl = rel  # pyarrow.Table: by column, as to_pylist()'s dicts keep one of two equal names
    rows = list(zip(*(c.to_pylist() for c in tbl.columns))) if tbl.num_columns else [()] * tbl.num_rows
    return unique_names(tbl.column_names), rows


def _first_fetched(rows: Iterable[tuple]) -> Iterable[tuple]:
    """`rows`, the first of them fetched already: a query's error arises as its first rows are
    made (DuckDB computes them before it hands out one), and must end the command before
    anything is written; a CSV or Markdown header came out above the error line."""
    rows = iter(rows)
    return itertools.chain(list(itertools.islice(rows, 1)), rows)


class Fetched:
    """Rows already fetched, as render() reads a relation."""

    def __init__(self, columns: list[str], rows: list[tuple]):
        self.columns, self._rows = columns, rows

    def fetchall(self) -> list[tuple]:
        return self._rows

    def limit(self, n: int) -> Fetched:
        return Fetched(self.columns, self._rows[:n])


def unique_names(names: Iterable[str]) -> list[str]:
    """Column names made unique as DuckDB makes them (`SELECT 1 AS a, 2 AS a` -> a, a_1; its
    COPY to CSV or JSON writes the same): a JSON object keeps one value per key, and a CSV or
    table header that repeats a name leaves its reader to guess which column is which."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        low = name.lower()   # DuckDB's names are case-insensitive: a and A collide
        if low in seen:
            new = f"{name}_{seen[low]}"
            while new.lower() in seen:
                seen[low] += 1
                new = f"{name}_{seen[low]}"
            name, low = new, new.lower()
        seen[low] = seen.get(low, 0) + 1
        out.append(name)
    return out


def fmt_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        a = abs(v)
        if a == 0:
            return "0"
        if a >= 100:
            return f"{v:,.1f}"
        if a >= 1:
            return f"{v:.3f}"
        return f"{v:.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v}" if abs(v) < 10**12 else str(v)
    return clean(str(v))


def _quiet(cols: list[str], rows: list[tuple]) -> tuple[list[str], list[tuple]]:
    keep = [i for i, c in enumerate(cols)
            if c not in _QUIET or len({r[i] for r in rows}) > 1]
    return [cols[i] for i in keep], [tuple(r[i] for i in keep) for r in rows]


def render(rel, fmt: str = "table", out=None, title: str | None = None,
           max_width: int = 70, quiet: bool = True, whole: Sequence[str] = ()) -> None:
    """quiet: in the table format, leave out key columns (run_id, pid, ...) that hold one value
    (the reports); `cuptiprof sql` shows every column the query selected. whole: columns of
    sentences (quality's detail) that a table shows uncut, where names are cut to max_width.
    CSV, JSON and Markdown are written as the rows come (any number of them); a table holds
    all of its rows, to size its columns."""
    out = out or sys.stdout
    if fmt in ("csv", "json", "markdown"):   # written row by row: any number of rows
        cols, rows = stream_of(rel)
        rows = _first_fetched(rows)
    else:
        cols, rows = rows_of(rel)
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        # csv quotes a field holding "\n" but not a lone "\r", which readers take as a line end
        wq = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
        w.writerow(cols)
        for r in rows:
            # CSV has no NULL: an empty field is one, and a NaN or an infinity is written so
            # too (JSON writes null), not as the `nan` a reader takes for text
            cells = ["" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v
                     for v in r]
            (wq if any(isinstance(v, str) and "\r" in v for v in cells) else w).writerow(cells)
        return
    if fmt == "json":
        _write_json_rows(cols, rows, out)
        return
    if fmt == "markdown":
        if title:
            out.write(f"### {clean(title)}\n\n")
        out.write("| " + " | ".join(md_escape(clean(c)) for c in cols) + " |\n")
        out.write("|" + "|".join("---" for _ in cols) + "|\n")
        for r in rows:
            out.write("| " + " | ".join(md_escape(fmt_value(v)) for v in r) + " |\n")
        out.write("\n")
        return
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}")
    if quiet:
        cols, rows = _quiet(cols, rows)
    cols = [clean(c) for c in cols]   # a query's column names are text like any cell's
    texts = [[fmt_value(v) for v in r] for r in rows]
    cells = cut_cells(rows, texts, max_width)
    for i in (i for i, c in enumerate(cols) if c in whole):
        for r, t in zip(cells, texts):
            r[i] = t[i]
    if _is_tty(out):
        from rich.console import Console
        from rich.table import Table

        t = Table(title=clean(title) if title else None, title_justify="left", show_lines=False)
        for i, c in enumerate(cols):
            numeric = all(isinstance(r[i], (int, float)) or r[i] is None for r in rows)
            t.add_column(c, justify="right" if numeric else "left", overflow="fold")
        for r in cells:
            t.add_row(*r, style=None)
        Console(file=out, markup=False, highlight=False, emoji=False).print(t)
        return
    out.write(plain_table(cols, cells, [_numeric(rows, i) for i in range(len(cols))], title))


def plain_table(cols: Sequence[str], cells: Iterable[Sequence[str]], numeric: Sequence[bool],
                title: str | None = None) -> str:
    cells = list(cells)
    widths = [max([_width(c)] + [_width(r[i]) for r in cells]) for i, c in enumerate(cols)]
    def line(vals):
        return "  ".join(" " * (w - _width(v)) + v if n else v + " " * (w - _width(v))
                         for v, w, n in zip(vals, widths, numeric)).rstrip()
    buf = io.StringIO()
    if title:
        buf.write(clean(title) + "\n")
    buf.write(line(cols) + "\n")
    buf.write("  ".join("-" * w for w in widths) + "\n")
    for r in cells:
        buf.write(line(r) + "\n")
    if not cells:
        buf.write("(no rows)\n")
    return buf.getvalue() + "\n"


def _width(s: str) -> int:
    """The terminal columns `s` takes: a wide character (CJK, most emoji) two, a combining mark
    or an invisible format character (a zero-width joiner) none. Padding by len() put every
    column after such a name (a range named in Chinese) out of line with the header."""
    if s.isascii():
        return len(s)
    return sum(0 if unicodedata.category(ch) in ("Mn", "Me", "Cf")
               else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in s)


def _numeric(rows, i) -> bool:
    return all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) if rows else False


def cut_cells(rows: Sequence[tuple], texts: list[list[str]], n: int) -> list[list[str]]:
    """The cell texts of `rows` (`texts`: their values formatted) cut to n characters, names
    that share their first n characters cut where they differ (_keep_apart)."""
    cells = [[_shorten(t, n) for t in r] for r in texts]
    for i in range(len(texts[0]) if texts else 0):
        _keep_apart(rows, texts, cells, i, n)
    return cells


def _shorten(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def _keep_apart(rows, texts, cells, i: int, n: int) -> None:
    """Cells of column i cut to the same text from different names (thousands of CUTLASS or
    Triton kernels, module paths, that share their first n characters) are cut around where
    each name parts from the names nearest it instead: the head, then the part that tells it
    apart."""
    full: dict[str, set] = {}
    for r, t, c in zip(rows, texts, cells):
        if isinstance(r[i], str) and c[i] != t[i]:
            full.setdefault(c[i], set()).add(t[i])
    head = n // 3
    for shown, names in full.items():
        if len(names) < 2:
            continue
        srt = sorted(names)
        lcp = [len(os.path.commonprefix(pair)) for pair in zip(srt, srt[1:])]
        alt = {}
        for j, name in enumerate(srt):
            at = max(lcp[j - 1] if j else 0, lcp[j] if j < len(lcp) else 0)
            start = max(head, at - 8)   # a little of what it shares, then where it differs
            piece = name[start:start + n - head - 2]
            alt[name] = (name[:head] + "\u2026" + piece
                         + ("\u2026" if start + len(piece) < len(name) else ""))
        for r, t, c in zip(rows, texts, cells):
            if c[i] == shown and isinstance(r[i], str):
                c[i] = alt[t[i]]


def _is_tty(out) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def _write_json_rows(cols: list[str], rows: Iterable[tuple], out) -> None:
    """The rows as write_json writes a list of one object per row, byte for byte, written
    a thousand rows at a time (one json.dumps per row took twice as long)."""
    first, rows = True, iter(rows)
    while batch := [_jsonable(dict(zip(cols, r))) for r in itertools.islice(rows, 1000)]:
        text = json.dumps(batch, default=_json_default, indent=1, allow_nan=False)
        out.write(("[\n" if first else ",\n") + text[2:-2])   # inside the list's brackets
        first = False
    out.write("[]\n" if first else "\n]\n")


def write_json(doc, out) -> None:
    """JSON that every reader parses: a NaN or an infinity (a ratio to 0, a query's
    'nan'::DOUBLE), which json writes as the NaN and Infinity no JSON parser takes, is null."""
    json.dump(_jsonable(doc), out, default=_json_default, indent=1, allow_nan=False)
    out.write("\n")


def _jsonable(value: Any) -> Any:
    """`value` with every NaN or infinity in it null (markers.finite) and the keys of its
    MAPs JSON object keys: a DECIMAL, DATE or TIMESTAMP key (histogram() of such values) as
    its text, an infinite or NaN DOUBLE key as 'inf' or 'nan'; json refuses either as a key."""
    return finite(value, key=_json_key)


def _json_key(k: Any) -> Any:
    if isinstance(k, float) and not math.isfinite(k):
        return str(k)
    if k is None or isinstance(k, (str, int, float, bool)):
        return k
    return _json_default(k)


def _json_default(v):
    if hasattr(v, "isoformat"):
        return v.isoformat()
    from decimal import Decimal
    if isinstance(v, Decimal):
        return float(v) if v.is_finite() else None
    return str(v)
