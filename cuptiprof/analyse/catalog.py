"""The SQL shipped with cuptiprof: one .sql file per scope view and per report.

Each report file starts with `-- <name>: <one-line description>` followed by
`-- column: description` lines; `cuptiprof report --list` prints them.
Scope views (sql/scope/) are created per connection as TEMP views with the step filter in
`{where}`; reports read only those views, so `--steps` applies to every report alike.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from cuptiprof.errors import UsageError

_SQL = resources.files("cuptiprof").joinpath("sql")
# Scope views in dependency order.
SCOPE_VIEWS = ("sel_name_keys", "sel_activities", "sel_work", "sel_kernel_spans", "sel_kernel_time",
               "sel_busy", "sel_steps", "sel_ranges", "sel_range_up", "sel_cut_steps", "sel_step_busy")
# `cuptiprof report --by` name -> report name; Profile.report() takes either.
BY = {"op": "ops", "step": "steps", "device": "devices", "kind": "kinds", "stream": "streams",
      "outliers": "outliers", "spread": "step_spread", "quality": "quality", "overview": "overview",
      "cpu_op": "cpu_ops", "range": "ranges", "step_range": "step_ranges"}


@dataclass(frozen=True)
class ReportDoc:
    name: str
    summary: str
    columns: tuple[tuple[str, str], ...]


@functools.lru_cache(maxsize=None)
def _read(sub: str, name: str) -> str:
    return _SQL.joinpath(sub, f"{name}.sql").read_text()


def scope_views(where: str, stored_busy: bool = False,
                kernel_where: str | None = None) -> dict[str, str]:
    """The scope views' SQL with the step filter. stored_busy: read busy time from step_busy
    (complete for every run of the file) instead of folding every work interval. kernel_where:
    the filter for kernel_rows alone (no run_id/pid columns there), where it differs."""
    files = dict(zip(SCOPE_VIEWS, SCOPE_VIEWS))
    if stored_busy:
        files["sel_busy"] = "sel_busy_stored"
    return {v: _strip_comments(_read("scope", f)).replace("{kernel_where}", kernel_where or where)
            .replace("{where}", where) for v, f in files.items()}


_SCOPE_NAME = re.compile(r"\b(" + "|".join(SCOPE_VIEWS) + r")\b")


def pin_scope(sql: str, tag: int) -> str:
    """`sql` reading the scope views named with `tag` (name_tag) instead of the current ones:
    a DuckDB relation binds its names each time it runs, so one made over the current views
    would read the steps of a later set_steps()."""
    return _SCOPE_NAME.sub(rf"\1_{tag}", sql)


@functools.lru_cache(maxsize=1)
def report_names() -> tuple[str, ...]:
    return tuple(sorted(p.name[:-4] for p in _SQL.joinpath("reports").iterdir()
                        if p.name.endswith(".sql")))


def report_sql(name: str) -> str:
    if name not in report_names():
        raise UsageError(f"unknown report {name!r}; known: {', '.join(report_names())} "
                         "(cuptiprof report --list)")
    return _strip_comments(_read("reports", name))


def report_doc(name: str, sub: str = "reports") -> ReportDoc:
    text = _read(sub, name)
    summary, cols = "", []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        body = line[2:].strip()
        m = re.match(r"([A-Za-z_][\w]*):\s*(.*)", body)
        if m and not summary and m.group(1) == name:
            summary = m.group(2)
        elif m and summary:
            cols.append((m.group(1), m.group(2)))
    return ReportDoc(name, summary, tuple(cols))


@functools.lru_cache(maxsize=1)
def macros() -> tuple[str, ...]:
    """CREATE statements for the SQL macros (sql/macros/<name>.sql: `-- name(args): what`, then
    the body): predicates that scope views, reports and compare share, one definition each."""
    out = []
    for p in sorted(_SQL.joinpath("macros").iterdir(), key=lambda p: p.name):
        if p.name.endswith(".sql"):
            head = p.read_text().splitlines()[0]
            m = re.match(r"--\s*(\w+\([\w, ]*\)):", head)
            if not m:
                raise ValueError(f"sql/macros/{p.name}: first line must be `-- name(args): ...`")
            out.append(f"CREATE OR REPLACE TEMP MACRO {m.group(1)} AS ({_strip_comments(p.read_text())})")
    return tuple(out)


def compare_sql(name: str) -> str:
    """sql/compare/<name>.sql without comments (the multi-file comparison and diff)."""
    return _strip_comments(_read("compare", name))


def _strip_comments(sql: str) -> str:
    return "\n".join(l for l in sql.splitlines() if not l.lstrip().startswith("--")).strip().rstrip(";")
