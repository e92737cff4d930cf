"""Merge cuptiprof files into one: runs from several hosts or ranks, or the part files of the
processes of one `cuptiprof run`.

Every row keeps where it came from: run ids are renumbered (one_run=False) or collapsed into one
run (one_run=True, the launcher's parts), interned string ids are remapped by value, pid stays.
The destination is written under a temporary name and renamed at the end, so a failed merge
leaves no file that looks complete.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import duckdb
import numpy as np

from cuptiprof._version import __version__
from cuptiprof.errors import InputError, StoreError
from cuptiprof.outputs import check_output, publish, temp_beside
from cuptiprof.store import arrow
from cuptiprof.store.files import (check_contract, check_core_tables, check_rows_have_runs,
                                   check_schema_version, first_row, require_duckdb, schema_version,
                                   sync_file, write_unsynced)
from cuptiprof.store.schema import INTERNED, LANE, LAUNCH_CONFIG, schema_sql, table_columns
from cuptiprof.store.summary import BUSY_SQL
from cuptiprof.store.writer import RunInfo, _as_table, connect_error

# What tells runs apart when files are merged (runs columns; their processes' pids as well).
RUN_IDENTITY = ("source", "host", "command", "start_ns", "end_ns")
# Worst first: the merged status of one run made of several parts.
_STATUS_ORDER = ("failed", "interrupted", "running", "complete")
# Columns that hold a range id of the row's own (run, pid) (0 or NULL: none).
_RANGE_REFS = ("range_id", "parent_id", "op_id")
# Tables whose correlation_id is CUPTI's of the row's own (run, pid) (0 or NULL: none).
_CORRELATED = ("kernel_rows", "memcpys", "memsets", "syncs", "api_call_rows", "memory_events")


@dataclass
class MergeResult:
    """What a merge did; `skipped` lists sources that could not be read (skip_unreadable)."""

    path: Path
    runs: int = 0
    rows: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)
    ended_early: list = field(default_factory=list)   # (source, pid) whose writer never closed


def merge_files(sources: Iterable[str | os.PathLike], dest: str | os.PathLike, *,
                one_run: bool = False, run_info: RunInfo | None = None,
                status: str | None = None, end_ns: int | None = None,
                extra: Mapping[str, object] | None = None, skip_unreadable: bool | None = None,
                overwrite: bool = False, ended_early: Iterable[int] = ()) -> Path:
    """Merge `sources` into a new file `dest`; returns its path.

    one_run=False keeps each source run as its own run (renumbered 1..N in source order).
    one_run=True makes ONE run of every source (the part files of one `cuptiprof run`): its
    `runs` row comes from `run_info` (start/end/status from the parts unless given), and a
    part whose writer never closed marks its processes `ended_early` with a data_quality
    row 'process_ended_early' (so do the pids in `ended_early`). `extra` maps table -> columns
    appended to that run; its `processes` rows fill in (by pid) those the parts wrote.
    skip_unreadable (default: one_run) leaves unreadable sources out instead of failing, each
    with a data_quality row 'unreadable_part' (pid NULL): the one run's (one_run=True), or every
    merged run's (one_run=False; run_id NULL when no source could be read).
    """
    return merge_files_result(sources, dest, one_run=one_run, run_info=run_info, status=status,
                              end_ns=end_ns, extra=extra, skip_unreadable=skip_unreadable,
                              overwrite=overwrite, ended_early=ended_early).path


def merge_files_result(sources, dest, *, one_run=False, run_info=None, status=None, end_ns=None,
                       extra=None, skip_unreadable=None, overwrite=False,
                       ended_early=()) -> MergeResult:
    sources = [Path(s) for s in sources]
    given, dest = dest, Path(dest)
    skip = one_run if skip_unreadable is None else skip_unreadable
    if not sources and not one_run:
        raise InputError("merge needs at least one input file")
    for s in sources:
        if not s.is_file() and skip:
            continue
        if not skip:
            require_duckdb(s)   # missing, a directory, a run still writing it, not DuckDB
    check_output(given, inputs=sources, force=overwrite)
    tmp = temp_beside(dest)
    _unlink(tmp)
    result = MergeResult(dest)
    try:
        con = duckdb.connect(str(tmp))
    except duckdb.Error as exc:
        raise connect_error(tmp, exc, writing=True, target=given) from None
    except BaseException:   # a Ctrl-C as the file was created
        _unlink(tmp)
        raise
    try:
        write_unsynced(con)
        con.execute("BEGIN")
        con.execute(schema_sql())
        con.execute("INSERT INTO meta VALUES ('created_by', ?), ('created_at', ?)",
                    [f"cuptiprof {__version__} merge",
                     _dt.datetime.now(_dt.timezone.utc).isoformat()])
        con.execute("COMMIT")
        m = _Merger(con, one_run, result)
        for s in sources:
            m.add(s, skip)
        if one_run:
            m.dead.update(int(p) for p in ended_early)
            m.finish_one_run(run_info or RunInfo(), status, end_ns, extra or {})
        else:
            m.finish_runs()
        m.finish_busy()
        result.runs = first_row(con.execute("SELECT count(*) FROM runs"))[0]
        con.execute("CHECKPOINT")
        con.close()
        sync_file(tmp)
        publish(tmp, dest, replace=overwrite)   # not over a file another merge made meanwhile
    except BaseException:
        try:
            con.close()
        except Exception:
            pass
        _unlink(tmp)
        raise
    return result


def _unlink(p: Path) -> None:
    for x in (p, Path(str(p) + ".wal")):
        try:
            x.unlink()
        except FileNotFoundError:
            pass


class _Merger:
    def __init__(self, con, one_run: bool, result: MergeResult):
        self.con = con
        self.one_run = one_run
        self.result = result
        self.tables = [t for (t,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema='main' "
            "AND table_type='BASE TABLE' AND table_catalog = current_database()").fetchall()
            if t not in ("meta", "runs", "strings", "launch_configs", "lanes", "step_busy",
                         "step_busy_runs")]
        self.columns = {t: [c for c, _ in table_columns(con, t)] for t in self.tables + ["runs"]}
        self.next_run = 1
        self.part_runs: list[tuple] = []   # (start_ns, end_ns, status, versions...) per source run
        self.quality: list[tuple] = []     # (pid, check_name, subject, count, detail)
        self.dead: set[int] = set()        # pids that ended before their collector closed
        self.busy_missing: set[int] = set()  # merged runs whose step_busy must be computed here
        self.run_from: dict[tuple, str] = {}  # identity of each run merged so far -> its source

    def add(self, src: Path, skip: bool) -> None:
        con = self.con
        try:
            con.execute(f"ATTACH '{_sql_str(src)}' AS src (READ_ONLY)")
        except duckdb.Error as exc:
            err = connect_error(src, exc, writing=False)
            if skip:
                self._skipped(src, str(err))
                return
            raise err from None
        try:
            try:
                version = schema_version(con, src, "src")
            except StoreError as exc:
                if skip:
                    self._skipped(src, str(exc))
                    return
                raise
            check_schema_version(src, version, "merge")
            try:
                check_core_tables(con, src, "src")
                # a column or table edited away would be merged as NULLs, without a word
                check_contract(con, src, "src")
                # rows whose runs row was deleted would be left out, and counted as merged
                check_rows_have_runs(con, src, "src")
            except StoreError as exc:
                if skip:
                    self._skipped(src, str(exc))
                    return
                raise
            self._copy(src)
        finally:
            con.execute("DETACH src")

    def _pids_merged_before(self, src_tables: set) -> bool:
        """Fill spids with the (new run, pid) of the source's rows; whether any of them already
        has a processes row or a lane in the merged file (a process that exec'd)."""
        con = self.con
        have = [t for t in ("processes", "lanes") + _CORRELATED
                if t in src_tables and t != "kernel_rows"]
        pairs = " UNION ".join(f"SELECT run_id, pid FROM src.{t}" for t in have) or \
            "SELECT NULL::INTEGER AS run_id, NULL::INTEGER AS pid WHERE FALSE"
        con.execute(f"CREATE OR REPLACE TEMP TABLE spids AS SELECT DISTINCT rm.new AS run_id, x.pid "
                    f"FROM ({pairs}) x JOIN runmap rm ON rm.old = x.run_id")
        return bool(first_row(con.execute(
            "SELECT count(*) FROM spids s WHERE EXISTS (SELECT 1 FROM main.processes p WHERE "
            "p.run_id = s.run_id AND p.pid = s.pid) OR EXISTS (SELECT 1 FROM main.lanes l "
            "WHERE l.run_id = s.run_id AND l.pid = s.pid)"))[0])

    def _skipped(self, src: Path, why: str) -> None:
        self.result.skipped.append((str(src), why))
        what = "part file" if self.one_run else "input file"
        self.quality.append((None, "unreadable_part", src.name, None,
                             f"{what} {src.name} could not be read and was left out: {why}"))

    def _refuse_runs_seen(self, src: Path) -> None:
        """Refuse a run that an earlier input already brought (a merged file with one of its
        inputs, a copy of a file, one trace imported twice): its rows would count twice, and a
        comparison would read its job as twice as slow. A run is its source, host, command,
        start and end on the record clock and its processes' pids; the import time (start_time)
        is left out, so that two imports of one trace are one run."""
        have = self._src_columns("runs")
        cols = ", ".join(f"x.{c}" if c in have else "NULL" for c in RUN_IDENTITY)
        for label, *key in self.con.execute(
                f"SELECT x.label, {cols}, (SELECT list_sort(list(p.pid)) FROM src.processes p "
                "WHERE p.run_id = x.run_id) FROM src.runs x ORDER BY x.run_id").fetchall():
            key[-1] = tuple(key[-1] or ())
            earlier = self.run_from.setdefault(tuple(key), str(src))
            if earlier != str(src):
                raise InputError(f"{src}: its run '{label}' is already in {earlier} (same command, "
                                 "host, times and processes); its rows would count twice: leave "
                                 "out one of them")

    def _src_columns(self, table: str) -> set[str]:
        return {c for (c,) in self.con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name='src' "
            "AND schema_name='main' AND table_name=?", [table]).fetchall()}

    def _copy(self, src: Path) -> None:
        con = self.con
        runs = con.execute("SELECT run_id, start_ns, end_ns, status, cuda_driver_version, "
                           "cupti_version, torch_version, source FROM src.runs ORDER BY run_id"
                           ).fetchall()
        if self.one_run:
            mapping = [(r[0], 1) for r in runs]
            self.part_runs.extend(runs)
        else:
            self._refuse_runs_seen(src)
            mapping = []
            for r in runs:
                mapping.append((r[0], self.next_run))
                self.next_run += 1
        con.execute("CREATE OR REPLACE TEMP TABLE runmap (old INTEGER, new INTEGER)")
        if mapping:
            con.executemany("INSERT INTO runmap VALUES (?, ?)", mapping)
        if not self.one_run:
            cols = self.columns["runs"]
            have = self._src_columns("runs")
            sel = ", ".join("rm.new" if c == "run_id" else (f"x.{c}" if c in have else "NULL")
                            for c in cols)
            con.execute(f"INSERT INTO runs ({', '.join(cols)}) SELECT {sel} FROM src.runs x "
                        "JOIN runmap rm ON rm.old = x.run_id")
        # Strings: add the values this file does not know yet, then map old id -> new id.
        base = first_row(con.execute("SELECT coalesce(max(string_id), 0) FROM strings"))[0]
        con.execute(
            "INSERT INTO strings SELECT ? + row_number() OVER (ORDER BY value NULLS FIRST), value, demangled "
            "FROM (SELECT s.value, any_value(s.demangled) AS demangled FROM src.strings s "
            "      WHERE NOT EXISTS (SELECT 1 FROM main.strings d WHERE d.value IS NOT DISTINCT FROM s.value) "
            "      GROUP BY s.value)", [base])
        con.execute("CREATE OR REPLACE TEMP TABLE smap AS SELECT s.string_id AS old, d.string_id AS new "
                    "FROM src.strings s JOIN main.strings d ON d.value IS NOT DISTINCT FROM s.value")
        src_tables = {t for (t,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name='src'").fetchall()}
        # Kernels (name and launch configuration): likewise by value (every column, NULL equal to
        # NULL), the name by its new string id.
        has_configs = "launch_configs" in src_tables
        if has_configs:
            cols = ("name_id",) + LAUNCH_CONFIG
            cfg = ", ".join(cols)
            same = " AND ".join(f"d.{c} IS NOT DISTINCT FROM s.{c}" for c in cols)
            con.execute(f"CREATE OR REPLACE TEMP TABLE sconfigs AS SELECT x.config_id, "
                        f"(SELECT sm.new FROM smap sm WHERE sm.old = x.name_id) AS name_id, "
                        f"{', '.join('x.' + c for c in LAUNCH_CONFIG)} FROM src.launch_configs x")
            base = first_row(con.execute("SELECT coalesce(max(config_id), 0) FROM launch_configs"))[0]
            con.execute(
                f"INSERT INTO launch_configs SELECT ? + row_number() OVER (ORDER BY {cfg}), {cfg} "
                f"FROM (SELECT DISTINCT {cfg} FROM sconfigs s WHERE NOT EXISTS "
                f"      (SELECT 1 FROM main.launch_configs d WHERE {same}))", [base])
            con.execute(f"CREATE OR REPLACE TEMP TABLE cmap AS SELECT s.config_id AS old, "
                        f"d.config_id AS new FROM sconfigs s JOIN main.launch_configs d ON {same}")
        # Before this source's lanes join the merged ones: does it go on a process merged so far?
        again = self.one_run and self._pids_merged_before(src_tables)
        # Lanes: the source's lanes with their new run ids, added by value, then old -> new id.
        lane = ", ".join(LANE)
        same = " AND ".join(f"d.{c} IS NOT DISTINCT FROM s.{c}" for c in LANE)
        con.execute(f"CREATE OR REPLACE TEMP TABLE slanes AS SELECT x.lane_id, rm.new AS run_id, "
                    f"{', '.join('x.' + c for c in LANE[1:])} FROM src.lanes x "
                    "JOIN runmap rm ON rm.old = x.run_id")
        base = first_row(con.execute("SELECT coalesce(max(lane_id), 0) FROM lanes"))[0]
        con.execute(f"INSERT INTO lanes SELECT ? + row_number() OVER (ORDER BY {lane}), {lane} "
                    f"FROM (SELECT DISTINCT {lane} FROM slanes s WHERE NOT EXISTS "
                    f"      (SELECT 1 FROM main.lanes d WHERE {same}))", [base])
        con.execute(f"CREATE OR REPLACE TEMP TABLE lmap AS SELECT s.lane_id AS old, "
                    f"d.lane_id AS new FROM slanes s JOIN main.lanes d ON {same}")
        # Range ids are unique per (run, pid): a process that exec'd brings a part per program,
        # each numbering its ranges from 1. Those of a later part go on after the ones merged
        # so far (and so do the range and op ids of its other rows).
        con.execute("CREATE OR REPLACE TEMP TABLE roff (run_id INTEGER, pid INTEGER, off BIGINT)")
        if "range_rows" in src_tables:
            con.execute("INSERT INTO roff SELECT d.run_id, d.pid, max(d.range_id) FROM main.range_rows d "
                        "WHERE d.run_id IN (SELECT new FROM runmap) GROUP BY d.run_id, d.pid "
                        "HAVING max(d.range_id) > 0")
        shift = bool(first_row(con.execute("SELECT count(*) FROM roff"))[0])
        # Correlation ids likewise: each program's CUPTI numbers them from 1 (only one run's
        # parts share a (run, pid), and only those of a process that exec'd already have rows).
        con.execute("CREATE OR REPLACE TEMP TABLE coff (run_id INTEGER, pid INTEGER, off BIGINT)")
        if again:
            rows = " UNION ALL ".join(
                "SELECT l.run_id, l.pid, k.correlation_id AS c FROM main.kernel_rows k "
                "JOIN main.lanes l ON l.lane_id = k.lane_id" if t == "kernel_rows" else
                f"SELECT run_id, pid, correlation_id AS c FROM main.{t}" for t in _CORRELATED)
            con.execute(f"INSERT INTO coff SELECT run_id, pid, max(c) FROM ({rows}) "
                        "WHERE (run_id, pid) IN (SELECT run_id, pid FROM spids) "
                        "GROUP BY run_id, pid HAVING max(c) > 0")
        cshift = bool(first_row(con.execute("SELECT count(*) FROM coff"))[0])
        for t in self.tables:
            if t not in src_tables:
                continue
            have = self._src_columns(t)
            cols = self.columns[t]
            interned = set(INTERNED.get(t, {}).values())
            sel = []
            for c in cols:
                if c == "run_id":
                    sel.append("rm.new")
                elif c == "lane_id":
                    sel.append("lm.new")
                elif c in interned and c in have:
                    sel.append(f"(SELECT sm.new FROM smap sm WHERE sm.old = x.{c})")
                elif c == "config_id" and c in have and has_configs:
                    sel.append("(SELECT cm.new FROM cmap cm WHERE cm.old = x.config_id)")
                elif shift and c in _RANGE_REFS and c in have:
                    sel.append(f"CASE WHEN x.{c} IS NULL OR x.{c} = 0 THEN x.{c} "
                               f"ELSE x.{c} + coalesce(ro.off, 0) END")
                elif cshift and c == "correlation_id" and c in have and t in _CORRELATED:
                    sel.append("CASE WHEN x.correlation_id IS NULL OR x.correlation_id = 0 THEN "
                               "x.correlation_id ELSE x.correlation_id + coalesce(co.off, 0) END")
                else:
                    sel.append(f"x.{c}" if c in have else "NULL")
            join = ("JOIN lmap lm ON lm.old = x.lane_id" if "lane_id" in cols
                    else "JOIN runmap rm ON rm.old = x.run_id")
            offs = []   # (offset table, alias) of the row's own (run, pid)
            if shift and have & set(_RANGE_REFS):
                offs.append(("roff", "ro"))
            if cshift and "correlation_id" in have and t in _CORRELATED:
                offs.append(("coff", "co"))
            if offs:
                if "lane_id" in cols:
                    join += " JOIN main.lanes dl ON dl.lane_id = lm.new"
                    run, pid = "dl.run_id", "dl.pid"
                else:
                    run, pid = "rm.new", "x.pid"
                join += "".join(f" LEFT JOIN {o} {a} ON {a}.run_id = {run} AND {a}.pid = {pid}"
                                for o, a in offs)
            # the rows merged, as inserted: a note of no run (data_quality, run_id NULL) is not
            n = first_row(con.execute(f"INSERT INTO {t} ({', '.join(cols)}) SELECT {', '.join(sel)} "
                                      f"FROM src.{t} x {join}"))[0]
            self.result.rows[t] = self.result.rows.get(t, 0) + n
        # Stored busy time is copied when the source has it for every run, else computed at the end.
        complete = "step_busy_runs" in src_tables and not first_row(con.execute(
            "SELECT count(*) FROM src.runs WHERE run_id NOT IN (SELECT run_id FROM src.step_busy_runs)"
        ))[0]
        if complete:
            con.execute("INSERT INTO step_busy SELECT rm.new, x.pid, x.device_id, x.step, x.busy_ns, "
                        "x.start_ns, x.end_ns FROM src.step_busy x JOIN runmap rm ON rm.old = x.run_id")
        else:
            self.busy_missing.update(new for _, new in mapping)
        if self.one_run:
            dead = [r for r in runs if r[3] == "running"]
            if dead:
                pids = [p for (p,) in con.execute(
                    "SELECT DISTINCT pid FROM src.processes ORDER BY pid").fetchall()] \
                    if "processes" in src_tables else []
                if not pids:
                    pids = [pid_from_stem(src.stem)]
                for pid in pids:
                    self.result.ended_early.append((str(src), pid))
                    if pid is not None:
                        self.dead.add(pid)

    def finish_one_run(self, info: RunInfo, status: str | None, end_ns: int | None,
                       extra: Mapping[str, object]) -> None:
        con = self.con
        starts = [r[1] for r in self.part_runs if r[1] is not None]
        ends = [r[2] for r in self.part_runs if r[2] is not None]
        if status is None:
            st = [("running" if r[3] == "running" else r[3]) for r in self.part_runs] or ["complete"]
            status = min(st, key=lambda s: _STATUS_ORDER.index(s) if s in _STATUS_ORDER else 0)
            if status == "running":   # a dead part does not make the whole run 'running'
                status = "complete"

        def first(i):
            return next((r[i] for r in self.part_runs if r[i]), None)

        start_ns = info.start_ns if info.start_ns is not None else (min(starts) if starts else time.time_ns())
        end = end_ns if end_ns is not None else (max(ends) if ends else time.time_ns())
        con.execute(
            "INSERT INTO runs VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [info.label, info.source or first(7), info.command if info.command is not None else " ".join(sys.argv),
             info.host, _dt.datetime.fromtimestamp(start_ns / 1e9, _dt.timezone.utc), start_ns, end,
             status, __version__, platform.python_version(),
             info.cuda_driver_version or first(4), info.cupti_version or first(5),
             info.torch_version or first(6), json.dumps(info.settings, sort_keys=True, default=str)])
        for table, batch in extra.items():
            tbl = _as_table(batch)
            if tbl.num_rows == 0:
                continue
            if "run_id" not in tbl.column_names:
                tbl = tbl.append_column("run_id", arrow.array(np.ones(tbl.num_rows, np.int32)))
            con.register("_extra", tbl)
            try:
                if table == "processes":   # fill in what the parts left NULL, add the others
                    sets = ", ".join(f"{c} = coalesce(processes.{c}, e.{c})"
                                     for c in tbl.column_names if c not in ("pid", "run_id"))
                    con.execute(f"UPDATE processes SET {sets} FROM _extra e "
                                "WHERE processes.pid = e.pid AND processes.run_id = e.run_id")
                    con.execute("INSERT INTO processes BY NAME SELECT * FROM _extra e WHERE NOT EXISTS "
                                "(SELECT 1 FROM processes p WHERE p.pid = e.pid AND p.run_id = e.run_id)")
                else:
                    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _extra")
            finally:
                con.unregister("_extra")
        # A process that exec'd wrote one part per program it ran, each with its row: one process.
        con.execute(
            "UPDATE processes p SET end_ns = d.end_ns, ended_early = d.ee FROM (SELECT run_id, pid, "
            "max(end_ns) AS end_ns, bool_or(ended_early) AS ee FROM processes GROUP BY run_id, pid "
            "HAVING count(*) > 1) d WHERE p.run_id = d.run_id AND p.pid = d.pid")
        con.execute("DELETE FROM processes WHERE rowid NOT IN (SELECT arg_min(rowid, "
                    "coalesce(start_ns, 0)) FROM processes GROUP BY run_id, pid)")
        # ... and each part said the same of it (no_gpu): once is enough. Counts are left alone.
        con.execute("DELETE FROM data_quality WHERE count IS NULL AND value_ns IS NULL AND rowid NOT IN "
                    "(SELECT min(rowid) FROM data_quality WHERE count IS NULL AND value_ns IS NULL "
                    "GROUP BY run_id, pid, check_name, subject, detail)")
        for pid in sorted(self.dead):
            con.execute("UPDATE processes SET ended_early = TRUE WHERE pid = ?", [pid])
            self.quality.append((pid, "process_ended_early", str(pid), None,
                                 f"process {pid} ended before its collector closed (killed, "
                                 "crashed or os._exit); records it had not flushed are missing"))
        if self.quality:
            con.executemany("INSERT INTO data_quality (run_id, pid, check_name, subject, count, detail) "
                            "VALUES (1, ?, ?, ?, ?, ?)", self.quality)

    def finish_runs(self) -> None:
        """Runs kept apart: a note on the merge as a whole (an input left out) belongs to no run
        more than another, so every run carries it; run_id NULL when there is none."""
        if self.quality:
            self.con.executemany(
                "INSERT INTO data_quality (run_id, pid, check_name, subject, count, detail) "
                "SELECT r.run_id, ?, ?, ?, ?, ? FROM (SELECT run_id FROM runs UNION ALL "
                "SELECT NULL WHERE NOT EXISTS (SELECT 1 FROM runs)) r", self.quality)

    def finish_busy(self) -> None:
        """Complete step_busy for every merged run: compute it for runs whose source lacked it,
        or whose parts brought the same (pid, device, step) twice."""
        con = self.con
        twice = {r for (r,) in con.execute(
            "SELECT DISTINCT run_id FROM (SELECT run_id FROM step_busy GROUP BY run_id, pid, "
            "device_id, step HAVING count(*) > 1)").fetchall()}
        for run in sorted(self.busy_missing | twice):
            con.execute("DELETE FROM step_busy WHERE run_id = ?", [run])
            con.execute(f"INSERT INTO step_busy {BUSY_SQL.format(groups='TRUE')}", {"run": run})
        con.execute("INSERT INTO step_busy_runs SELECT run_id FROM runs")


def pid_from_stem(stem: str) -> int | None:
    """The pid of a part or marker named <host>-<pid> or <host>-<pid>.exec<N> (the program a
    process exec'd), its suffix off; a host name may hold dots and dashes."""
    m = re.search(r"-(\d+)(?:\.exec\d+)?$", stem)
    return int(m.group(1)) if m else None


def _sql_str(p: Path) -> str:
    return str(p).replace("'", "''")
