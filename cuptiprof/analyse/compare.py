"""Several cuptiprof files side by side: per op / family / range, per kind, per device.

All files are ATTACHed read-only to one in-memory DuckDB connection; the SQL in
sql/compare/*.sql reads the union `cmp_act` (one row per GPU activity of the recorded steps,
with a `run` column = the file's position). File 0 is the baseline for ratios and rank changes.

>>> with Comparison(["t4.duckdb", "h100.duckdb"], by="family") as c:   # doctest: +SKIP
...     c.ops().df()            # long form: one row per file and key (.df() needs pandas)
...     c.side_by_side(top=10)  # wide form (pyarrow), one row per key
"""
from __future__ import annotations

import os
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import duckdb
import pyarrow as pa

from cuptiprof.analyse import catalog
from cuptiprof.analyse.families import BY, families
from cuptiprof.analyse.profile import has_stored_busy, stepless_processes
from cuptiprof.errors import InputError, SchemaVersionError, UsageError, shell_word
from cuptiprof.store import arrow
from cuptiprof.store.files import (check_core_tables, check_schema_version, connect_error,
                                   first_row, require_duckdb, schema_version,
                                   spill_where_writable)
from cuptiprof.store.quality import STEP_INCOMPLETE

# A file whose GPU work lies mostly outside its steps (launched before the first step, between
# steps, after the last, or by a thread no step range covers) is compared on a small part of
# itself: the legend says so from this share of its GPU time on. Warm-up work, left out on
# purpose, counts on neither side. Normal runs stay well below (the bundled example: 4%; the
# real traces in the test data: at most 13%).
OUTSIDE_STEPS_NOTE = 0.3


def _own(col: str) -> str:
    """`col` of a kernel whose name is one cuptiprof gives copies and memsets (a trace's kernel
    named 'Memset', say) with ' (kernel)' after it: keyed by its bare name, it pooled with the
    memsets into one key of kind 'mixed'."""
    return (f"CASE WHEN kind = 'kernel' AND ({col} = 'Memset' OR {col} LIKE 'Memcpy %') "
            f"THEN {col} || ' (kernel)' ELSE {col} END")


_KEYS = {"op": (_own("name"), "'name'"), "family": (_own("family"), "'family'"),
         "range": ("range_key", "range_key_type"), "region": ("region", "region_type")}

# Datasheet peaks of known GPUs, used when the file's devices table lacks a peak. Numbers are
# the vendor's headline figures (GB/s per direction for links; dense 16-bit tensor-core and
# FP32 TFLOP/s), so everything derived from them is labelled an estimate.
# (name pattern, DRAM GB/s, host link GB/s, NVLink GB/s, tensor TFLOP/s, FP32 TFLOP/s)
KNOWN_GPUS: tuple[tuple[str, float, float, float | None, float, float], ...] = (
    (r"\bB200\b", 8000, 64, 900, 2250, 80),
    (r"\bH200\b.*NVL", 4800, 64, 450, 835, 60),
    (r"\bH200\b", 4800, 64, 450, 989, 67),
    (r"\bH100\b.*PCIe", 2000, 64, 300, 756, 51),
    (r"\bH100\b.*NVL", 3900, 64, 300, 835, 60),
    (r"\bH100\b", 3350, 64, 450, 989, 67),
    (r"\bGH200\b", 4000, 450, 450, 989, 67),
    (r"\bA100\b.*80GB", 2039, 32, 300, 312, 19.5),
    (r"\bA100\b", 1555, 32, 300, 312, 19.5),
    (r"\bA10G\b", 600, 32, None, 70, 31.2),
    (r"\bA10\b", 600, 32, None, 125, 31.2),
    (r"\bL40S\b", 864, 32, None, 362, 91.6),
    (r"\bL4\b", 300, 32, None, 121, 30.3),
    (r"\bV100\b.*PCIe", 900, 16, None, 112, 14),
    (r"\bV100\b", 900, 16, 150, 125, 15.7),
    (r"\bT4\b", 320, 16, None, 65, 8.1),
    (r"RTX 4090", 1008, 32, None, 165, 82.6),
)


def known_gpu(name: str | None) -> dict | None:
    """Datasheet peaks for a device name, or None when cuptiprof does not know the GPU."""
    for pat, hbm, link, nvl, tensor, fp32 in KNOWN_GPUS:
        if name and re.search(pat, name, re.I):
            return {"peak_memory_bw_gbps": hbm, "peak_host_link_gbps": link,
                    "peak_nvlink_gbps": nvl, "peak_tensor_tflops": tensor, "peak_fp32_tflops": fp32}
    return None


@dataclass
class RunFile:
    """One compared file."""

    index: int
    letter: str
    path: Path
    schema_version: int
    label: str = ""
    has_steps: bool = True
    steps: int = 0
    incomplete: int = 0    # steps an exception ended early (data_quality), left out
    devices: str = ""
    sources: str = ""
    mixed_runs: int = 0    # runs of unlike kinds or devices in the file (0: none), pooled by step
    stepless: tuple = ()   # (processes, GPU activities, GPU ms) without steps, left out (merged files)
    cpu_ops: bool = False  # every activity is a CPU op time (a run without a GPU), no GPU work
    cpu_mixed: bool = False   # CPU op times and GPU work both (a merge of both kinds of run)
    lanes: int = 0         # (process, device) pairs with work in the compared steps
    outside: tuple = ()    # (activities, of all, share of the time) of GPU work outside every step
    stored_busy: bool = False  # step_busy holds every run's busy time (read, not folded from rows)
    unfinished: str = ""   # the statuses of its runs that did not complete ('failed, interrupted')


@dataclass
class Work:
    """Known work per call of a key (for throughput against peak)."""

    pattern: str
    gflop: float | None = None
    gbytes: float | None = None


def letter(i: int) -> str:
    return string.ascii_uppercase[i] if i < 26 else f"R{i}"


def _not_cut(db: str, step: str) -> str:
    """SQL condition: the step `step` of file `db` was not cut short by an exception (the one
    test of the medians and of the compared step set, which must agree)."""
    return (f" AND NOT EXISTS (SELECT 1 FROM {db}.data_quality q WHERE q.check_name = "
            f"'{STEP_INCOMPLETE}' AND q.subject = CAST({step} AS VARCHAR))")


class Comparison:
    """Files compared side by side. Methods return DuckDB relations or Arrow tables."""

    def __init__(self, paths: Sequence[str | os.PathLike], by: str = "op", *,
                 require_steps: bool = False, work: Sequence[Work] = (), min_files: int = 2,
                 names: Sequence[str] | None = None):
        """`names`: what the notes call the files (default A, B, ...; diff says BASE and NEW)."""
        if by not in BY:
            raise UsageError(f"--by {by!r}: expected one of {', '.join(BY)}")
        if len(paths) < min_files:
            raise UsageError(f"need at least {min_files} files to compare, got {len(paths)}")
        self.paths = [Path(p) for p in paths]
        self._names = list(names) if names else None
        for p in self.paths:
            require_duckdb(p)
        for i, a in enumerate(self.paths):
            for b in self.paths[:i]:
                if os.path.samefile(a, b):
                    raise UsageError(f"{b} and {a} are the same file; comparing a file with itself "
                                     "shows no difference (give two different runs)")
        self.con = duckdb.connect()
        try:
            spill_where_writable(self.con, Path.cwd())   # an in-memory database spills into .tmp
            self._attach()
            self._build(by, require_steps, work)
        except BaseException:
            self.con.close()
            raise

    # -- set-up ------------------------------------------------------------------------------
    def _attach(self) -> None:
        self.runs: list[RunFile] = []
        for i, p in enumerate(self.paths):
            try:
                self.con.execute(f"ATTACH '{_sql_str(str(p))}' AS f{i} (READ_ONLY)")
            except duckdb.Error as exc:
                raise connect_error(p, exc, writing=False) from None
            self.runs.append(RunFile(i, self._names[i] if self._names else letter(i), p,
                                     schema_version(self.con, p, f"f{i}")))
        for r in self.runs:   # one newer than this cuptiprof: upgrading is the answer
            check_schema_version(r.path, r.schema_version)
            check_core_tables(self.con, r.path, f"f{r.index}")
        versions = {r.schema_version for r in self.runs}
        if len(versions) > 1:
            what = ", ".join(f"{r.path} has schema {r.schema_version}" for r in self.runs)
            raise SchemaVersionError(f"files from different schema versions cannot be compared ({what}); "
                                     "re-record or re-import them with the same cuptiprof")

    def _build(self, by: str, require_steps: bool, work: Sequence[Work]) -> None:
        con = self.con
        names: set[str] = set()
        for r in self.runs:
            db = f"f{r.index}"
            # one pass over the rows for the counts and the weight of the steps' work
            n_act, stepped, n_in, ns_in = first_row(con.execute(
                catalog.compare_sql("totals").replace("{db}", db)))
            if n_act == 0:
                raise InputError(f"{r.path}: no GPU activity recorded; nothing to compare")
            r.has_steps = stepped > 0
            r.stored_busy = has_stored_busy(con, db)
            if require_steps and not r.has_steps:
                raise InputError(
                    f"{r.path}: no recorded steps (no activity is tagged with a step), so there is no "
                    "step-to-step noise to judge against; record with steps (cuptiprof.range('step', "
                    "step=i), run --step-range or --step-fn) or import a trace with ProfilerStep#N")
            if r.has_steps:   # a run without steps merged with runs that have them: no step holds it
                procs = stepless_processes(con, db, use_busy=r.stored_busy)
                if procs:
                    cond = " OR ".join(f"(run_id = {int(a)} AND pid = {int(b)})" for a, b in procs)
                    n, ms = first_row(con.execute(f"SELECT count(*), coalesce(sum(end_ns - start_ns), 0) / 1e6 "
                                                  f"FROM {db}.gpu_activities WHERE {cond}"))
                    r.stepless = (len(procs), n, ms)
            if r.has_steps:
                r.outside = self._outside_steps(db, procs, n_in, ns_in)
            r.incomplete = first_row(con.execute(
                f"SELECT count(DISTINCT subject) FROM {db}.data_quality WHERE check_name = '{STEP_INCOMPLETE}'"
            ))[0] if r.has_steps else 0
            # in run order (a merge's order of inputs), not hash order: the same file, the same label
            labels = first_row(con.execute(
                "SELECT (SELECT string_agg(label, '+' ORDER BY f) FROM (SELECT label, min(run_id) f "
                f"FROM {db}.runs GROUP BY label)), (SELECT string_agg(source, '+' ORDER BY f) FROM "
                f"(SELECT source, min(run_id) f FROM {db}.runs GROUP BY source))"))
            r.label, r.sources = labels[0] or r.path.stem, labels[1] or ""
            r.unfinished = first_row(con.execute(
                f"SELECT string_agg(DISTINCT status, ', ' ORDER BY status) FROM {db}.runs "
                "WHERE status <> 'complete'"))[0] or ""
            r.devices = first_row(con.execute(
                f"SELECT string_agg(DISTINCT name, ', ' ORDER BY name) FROM {db}.devices "
                "WHERE kind = 'gpu'"))[0] or ""
            # Runs of one job (hosts, ranks) pool by step as they should; unrelated runs would not.
            n_runs, kinds = first_row(con.execute(
                f"SELECT count(*), count(DISTINCT (source, coalesce((SELECT string_agg(DISTINCT "
                f"d.name, ',' ORDER BY d.name) FROM {db}.devices d WHERE d.run_id = u.run_id "
                f"AND d.kind = 'gpu'), ''))) FROM {db}.runs u"))
            r.mixed_runs = n_runs if kinds > 1 else 0
            # every activity on a CPU device: CPU op times (a run without a GPU); some of them
            # beside GPU work: a merge of both kinds of run, whose CPU op times pool with kernel
            # times. One pass, and none over a file without a CPU device.
            if first_row(con.execute(f"SELECT EXISTS (SELECT 1 FROM {db}.devices WHERE kind = 'cpu')"))[0]:
                on_cpu, off_cpu = first_row(con.execute(
                    f"SELECT coalesce(bool_or(d.kind IS NOT NULL), FALSE), coalesce(bool_or(d.kind IS NULL), FALSE) "
                    f"FROM {db}.gpu_activities a LEFT JOIN {db}.devices d ON d.run_id = a.run_id "
                    f"AND d.pid = a.pid AND d.device_id = a.device_id AND d.kind = 'cpu'"))
                r.cpu_ops, r.cpu_mixed = not off_cpu, on_cpu and off_cpu
            names.update(n for (n,) in con.execute(
                f"SELECT DISTINCT name FROM {db}.gpu_activities WHERE name IS NOT NULL").fetchall())
        fam = families(names)
        con.register("_cmp_families", pa.table({"name": arrow.array(list(fam), pa.string()),
                                                "family": arrow.array(list(fam.values()), pa.string())}))
        con.execute("CREATE TEMP TABLE cmp_families AS SELECT * FROM _cmp_families")
        con.unregister("_cmp_families")
        for macro in catalog.macros():
            con.execute(macro)
        regions = catalog.compare_sql("regions")
        con.execute("CREATE TEMP TABLE cmp_regions AS " + "\nUNION ALL\n".join(
            "(" + regions.replace("{run}", str(r.index)).replace("{db}", f"f{r.index}") + ")"
            for r in self.runs))
        con.execute("CREATE TEMP TABLE cmp_act AS " + "\nUNION ALL\n".join(
            self._per_file("act", r) for r in self.runs))
        # The compared steps: every step with GPU work, and every complete step a process that
        # records GPU work marked but launched none in: a step of 0 (as `report --by step` lists
        # it), not one left out of the medians.
        marked = []
        for r in self.runs:
            if not r.has_steps:
                continue
            db = f"f{r.index}"
            cut = _not_cut(db, "g.step") if r.incomplete else ""
            marked.append(f"SELECT DISTINCT {r.index} AS run, g.step FROM {db}.ranges g WHERE g.kind = 'step' "
                          f"AND g.step IS NOT NULL AND (g.run_id, g.pid) IN (SELECT DISTINCT run_id, pid "
                          f"FROM {db}.gpu_activities){cut}")
        con.execute("CREATE TEMP TABLE cmp_stepset AS SELECT DISTINCT run, step FROM ("
                    + "\nUNION ALL\n".join(["SELECT run, step FROM cmp_act", *marked]) + ")")
        con.execute("CREATE TEMP TABLE cmp_busy AS " + self._busy_sql())
        con.execute("CREATE TEMP TABLE cmp_steps AS " + catalog.compare_sql("steps"))
        for r in self.runs:
            r.steps = first_row(con.execute("SELECT count(*) FROM cmp_steps WHERE run = ?", [r.index]))[0]
            r.lanes = first_row(con.execute("SELECT count(DISTINCT (run_id, pid, device_id)) FROM cmp_act "
                                            "WHERE run = ? AND kind <> 'sync'", [r.index]))[0]
            if r.has_steps and not r.steps:   # all cut short: an empty side would read as "no regression"
                raise InputError(f"{r.path}: every recorded step ({r.incomplete}) was ended early by an "
                                 "exception, so no complete step is left to compare; re-record it with "
                                 "at least one step that runs to its end")
        self._devices_table()
        self.set_work(work)
        for name in ("kinds", "devices", "bandwidth"):
            con.execute(f"CREATE OR REPLACE TEMP VIEW compare_{name} AS {catalog.compare_sql(name)}")
        self.set_by(by)

    def _per_file(self, name: str, r: RunFile) -> str:
        """A per-file template of sql/compare (act, busy_stored) for file r: its rows of the
        compared steps."""
        where = "a.step IS NOT NULL" if r.has_steps else "TRUE"
        if r.incomplete:   # a step cut short would pull the medians down
            # in every process: steps pool by number, and the other ranks' part alone of a
            # step is as short as the cut one
            where += _not_cut(f"f{r.index}", "a.step")
        return (catalog.compare_sql(name).replace("{run}", str(r.index)).replace("{db}", f"f{r.index}")
                .replace("{step}", "a.step" if r.has_steps else "coalesce(a.step, 0)")
                .replace("{where}", where))

    def _busy_sql(self) -> str:
        """Busy time per file, run, process, device and step: read from the file's step_busy
        where the writer stored it for every run, folded from the rows (seconds for millions of
        them) for the other files."""
        stored = [r for r in self.runs if r.stored_busy]
        parts = [self._per_file("busy_stored", r) for r in stored]
        folded = [str(r.index) for r in self.runs if r not in stored]
        if folded:
            parts.append(catalog.compare_sql("busy").replace("{runs}", ", ".join(folded)))
        return "\nUNION ALL\n".join(f"({p})" for p in parts)

    def _outside_steps(self, db: str, stepless: list, n_in: int, ns_in: int) -> tuple:
        """(activities, of all, share of the time) of the file's GPU work that no step claims
        (sql/compare/outside.sql), against the n_in activities of ns_in the steps claim;
        processes without steps (noted apart) left out."""
        skip = " AND ".join(f"NOT (a.run_id = {int(x)} AND a.pid = {int(y)})" for x, y in stepless)
        n_out, ns_out = first_row(self.con.execute(catalog.compare_sql("outside").replace("{db}", db)
                                                   .replace("{skip}", skip or "TRUE")))
        total = ns_out + ns_in
        return (n_out, n_out + n_in, ns_out / total) if n_out and total > 0 else ()

    def _devices_table(self) -> None:
        cols = ["run", "run_id", "pid", "device_id", "kind", "name", "compute_capability", "sm_count",
                "memory_gb", "core_clock_mhz", "peak_memory_bw_gbps", "peak_host_link_gbps",
                "peak_nvlink_gbps", "peak_tensor_tflops", "peak_fp32_tflops", "peaks_from",
                "hbm_from", "link_from", "nvlink_from"]
        rows = []
        for r in self.runs:
            for d in self.con.execute(
                    f"SELECT run_id, pid, device_id, kind, name, compute_capability, sm_count, "
                    f"memory_bytes / 1e9, core_clock_mhz, peak_memory_bw_gbps, peak_host_link_gbps, "
                    f"peak_nvlink_gbps FROM f{r.index}.devices").fetchall():
                rec = dict(zip(cols[1:13], d))
                est = known_gpu(rec["name"]) if rec["kind"] == "gpu" else None
                used = set()
                src = {}
                for k, short in (("peak_memory_bw_gbps", "hbm_from"), ("peak_host_link_gbps", "link_from"),
                                 ("peak_nvlink_gbps", "nvlink_from")):
                    if rec[k] is not None:
                        src[short] = "file"
                        used.add("file")
                    elif est and est[k] is not None:
                        rec[k] = est[k]
                        src[short] = "estimate"
                        used.add("estimate")
                for k in ("peak_tensor_tflops", "peak_fp32_tflops"):
                    rec[k] = est[k] if est else None
                    if est:
                        used.add("estimate")
                rec["peaks_from"] = "+".join(sorted(used)) or None
                rows.append([r.index, *[rec[c] for c in cols[1:16]],
                             src.get("hbm_from"), src.get("link_from"), src.get("nvlink_from")])
        types = [pa.int32(), pa.int32(), pa.int32(), pa.int32(), pa.string(), pa.string(), pa.string(),
                 pa.int32(), pa.float64(), pa.float64(), pa.float64(), pa.float64(), pa.float64(),
                 pa.float64(), pa.float64(), pa.string(), pa.string(), pa.string(), pa.string()]
        tbl = pa.table({c: arrow.array([row[i] for row in rows], t) for i, (c, t) in enumerate(zip(cols, types))})
        self.con.register("_cmp_devices", tbl)
        self.con.execute("CREATE OR REPLACE TEMP TABLE cmp_devices AS SELECT * FROM _cmp_devices")
        self.con.unregister("_cmp_devices")

    def set_by(self, by: str) -> None:
        """Choose the comparison key: 'op' (exact name), 'family', 'range' (enclosing op/range) or
        'region' (the innermost of the program's own ranges)."""
        if by not in BY:
            raise UsageError(f"--by {by!r}: expected one of {', '.join(BY)}")
        self.by = by
        key, key_type = _KEYS[by]
        sql = catalog.compare_sql("keyed").replace("{key}", key).replace("{key_type}", key_type)
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW cmp_keyed AS {sql}")
        # a table, not a view: the side-by-side table, the plots, the notes and diff each read it,
        # and a view would redo the per-step medians (keys x steps rows) for every one of them
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE compare_ops AS {catalog.compare_sql('ops')}")
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW cmp_items AS {catalog.compare_sql('items')}")
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW compare_throughput AS "
                         f"{catalog.compare_sql('throughput')}")

    def set_work(self, work: Sequence[Work]) -> None:
        tbl = pa.table({"pattern": arrow.array([w.pattern for w in work], pa.string()),
                        "gflop": arrow.array([w.gflop for w in work], pa.float64()),
                        "gbytes": arrow.array([w.gbytes for w in work], pa.float64())})
        self.con.register("_cmp_work", tbl)
        self.con.execute("CREATE OR REPLACE TEMP TABLE cmp_work AS SELECT * FROM _cmp_work")
        self.con.unregister("_cmp_work")
        self.work = list(work)

    # -- relations ---------------------------------------------------------------------------
    def ops(self) -> duckdb.DuckDBPyRelation:
        return self.con.sql("SELECT * FROM compare_ops")

    def kinds(self) -> duckdb.DuckDBPyRelation:
        return self.con.sql("SELECT * FROM compare_kinds")

    def steps(self) -> duckdb.DuckDBPyRelation:
        return self.con.sql("SELECT * FROM cmp_steps ORDER BY run, step")

    def steps_wall(self) -> duckdb.DuckDBPyRelation:
        """Each step's GPU window split into time under kernels, copies alone, memsets alone and
        idle time, which add up to steps()' window_ms (sql/compare/steps_wall.sql)."""
        return self.con.sql(catalog.compare_sql("steps_wall"))

    def devices(self) -> duckdb.DuckDBPyRelation:
        return self.con.sql("SELECT * FROM compare_devices")

    def bandwidth(self) -> duckdb.DuckDBPyRelation:
        return self.con.sql("SELECT * FROM compare_bandwidth")

    def throughput(self) -> duckdb.DuckDBPyRelation:
        return self.con.sql("SELECT * FROM compare_throughput")

    def lettered(self, view: str) -> duckdb.DuckDBPyRelation:
        """A compare_* view with the file letter (A, B, ...) in place of the `run` number."""
        letters = ", ".join(f"'{r.letter}'" for r in self.runs)
        return self.con.sql(f"SELECT list_extract([{letters}], run + 1) AS file, * EXCLUDE (run) "
                            f"FROM compare_{view}")

    def items(self) -> duckdb.DuckDBPyRelation:
        return self.con.sql("SELECT * FROM cmp_items ORDER BY run, item_type, item")

    def top_keys(self, top: int) -> list[str]:
        """Keys in the top N of any file, heaviest first."""
        return [k for (k,) in self.con.execute(
            "SELECT key FROM compare_ops GROUP BY key HAVING min(rank) <= ? "
            "ORDER BY max(ms) DESC, key", [top]).fetchall()]

    def keys_left_out(self, top: int) -> tuple[int, int]:
        """(keys that the top N of every file leaves out, the --top that shows every key)."""
        n, need = self.con.execute(
            "SELECT count(*), coalesce(max(r), 0) FROM "
            "(SELECT min(rank) AS r FROM compare_ops GROUP BY key)").fetchall()[0]
        return n - len(self.top_keys(top)), need

    # -- side by side ------------------------------------------------------------------------
    def side_by_side(self, top: int | None = 15) -> pa.Table:
        """One row per key (top N of any file), per file: ms, mad_ms, pct, rank; for files after
        the first: ratio (x) and rank change against the first; `only_in` names the single file
        that has the key."""
        keys = self.top_keys(top) if top else None
        sel = ["key", "any_value(key_type) AS key_type",
               "CASE WHEN count(DISTINCT kind) = 1 THEN any_value(kind) ELSE 'mixed' END AS kind"]
        for r in self.runs:
            L, i = r.letter, r.index
            sel += [f"max(ms) FILTER (WHERE run = {i}) AS {L}_ms",
                    f"max(mad_ms) FILTER (WHERE run = {i}) AS {L}_mad",
                    f"max(pct_step) FILTER (WHERE run = {i}) AS {L}_pct",
                    f"max(rank) FILTER (WHERE run = {i}) AS {L}_rank"]
            if i:
                sel += [f"max(ratio) FILTER (WHERE run = {i}) AS {L}_x",
                        f"max(rank_change) FILTER (WHERE run = {i}) AS {L}_drank"]
        letters = ", ".join(f"'{r.letter}'" for r in self.runs)
        sel.append(f"CASE WHEN any_value(only_in) IS NOT NULL THEN "
                   f"list_extract([{letters}], any_value(only_in) + 1) || ' only' END AS only_in")
        where = ""
        params: list = []
        if keys is not None:
            where = "WHERE list_contains(?, key)"
            params = [keys]
        q = (f"SELECT {', '.join(sel)} FROM compare_ops {where} GROUP BY key "
             "ORDER BY max(ms) DESC, key")
        return (self.con.sql(q, params=params) if params else self.con.sql(q)).to_arrow_table()

    def kinds_side_by_side(self) -> pa.Table:
        sel = ["kind", "detail"]
        for r in self.runs:
            L, i = r.letter, r.index
            sel += [f"max(ms) FILTER (WHERE run = {i}) AS {L}_ms",
                    f"max(mad_ms) FILTER (WHERE run = {i}) AS {L}_mad",
                    f"max(pct_gpu_time) FILTER (WHERE run = {i}) AS {L}_pct",
                    f"max(pct_window) FILTER (WHERE run = {i}) AS {L}_pct_window"]
            if i:
                sel.append(f"max(ratio) FILTER (WHERE run = {i}) AS {L}_x")
        q = (f"SELECT {', '.join(sel)} FROM compare_kinds GROUP BY kind, detail ORDER BY "
             "CASE kind WHEN 'kernel' THEN 0 WHEN 'memcpy' THEN 1 WHEN 'memset' THEN 2 "
             "WHEN 'sync' THEN 3 ELSE 4 END, detail")
        return self.con.sql(q).to_arrow_table()

    def devices_side_by_side(self) -> pa.Table:
        """Device specs as rows, one column per file (GPUs of a file joined with ' / ')."""
        cols, rows = self.devices().columns, self.devices().fetchall()
        fields = [c for c in cols if c not in ("run",)]
        per_run: dict[int, list[dict]] = {}
        for row in rows:
            d = dict(zip(cols, row))
            per_run.setdefault(d["run"], []).append(d)
        out = {"spec": fields}
        for r in self.runs:
            devs = [d for d in per_run.get(r.index, []) if d["kind"] == "gpu"] or per_run.get(r.index, [])
            out[r.letter] = [" / ".join("" if d[f] is None else _short(d[f]) for d in devs) or None
                             for f in fields]
        return pa.table({k: arrow.array(v, pa.string()) for k, v in out.items()})

    def rank_shift(self, top: int = 10) -> pa.Table:
        """Rank of the top keys in every file (for the bump chart)."""
        keys = self.top_keys(top)
        return self.con.sql(
            "SELECT key, run, rank, ms FROM compare_ops WHERE list_contains(?, key) ORDER BY key, run",
            params=[keys]).to_arrow_table()

    def legend(self) -> list[str]:
        out = []
        for r in self.runs:
            steps = (f"{r.steps} step{'s' if r.steps != 1 else ''}" if r.has_steps
                     else "no steps recorded: the whole file counts as one step")
            if r.incomplete:
                steps += f", {r.incomplete} left out (ended early by an exception)"
            out.append(f"{r.letter} = {r.path} (label {r.label}; {r.sources or '?'}; "
                       f"{r.devices or 'no GPU listed'}; {steps})")
        for r in self.runs:
            if r.unfinished:   # the program crashed or was killed: it may have stopped before the slow part
                out.append(f"note: {r.letter} ({r.path.name}) is a run that did not complete ({r.unfinished}); "
                           f"only its {r.steps} complete step{'s are' if r.steps != 1 else ' is'} compared")
        for r in self.runs:
            if r.mixed_runs:
                out.append(f"note: {r.letter} ({r.path.name}) holds {r.mixed_runs} runs of different sources or "
                           "GPUs; their steps are pooled by step number, so its medians and noise "
                           "mix them: compare files of one kind of run")
        one = [r.letter for r in self.runs if r.has_steps and r.steps == 1]
        if one:   # a MAD of one value is 0: not "no noise" but noise unknown
            its = "its" if len(one) == 1 else "their"
            out.append(f"note: {', '.join(one)} {'holds' if len(one) == 1 else 'hold'} a single step: "
                       f"{its} step-to-step noise is unknown and counts as 0, so diff's band is PCT "
                       "alone; record several steps for a gate that tells noise from a regression")
        if len({r.lanes for r in self.runs}) > 1:   # one rank against a whole job reads as N times slower
            out.append("note: the files hold work of different numbers of processes or devices ("
                       + ", ".join(f"{r.letter}: {r.lanes}" for r in self.runs) + "); times per step "
                       "are summed over them: compare runs of the same size")
        cpu = [r for r in self.runs if r.cpu_ops]
        if cpu and len(cpu) < len(self.runs):
            out.append(f"note: {', '.join(r.letter for r in cpu)} recorded CPU op times (no GPU), the "
                       "others GPU work: their times are not comparable")
        for r in self.runs:
            if r.cpu_mixed:
                out.append(f"note: {r.letter} holds both CPU op times (no GPU) and GPU work (a merge of "
                           "both kinds of run): its times per step sum them, comparable to neither")
        for r in self.runs:
            if r.stepless:
                k, n, ms = r.stepless
                out.append(f"note: {r.letter} ({r.path.name}) holds {k} process{'es' if k > 1 else ''} "
                           f"without steps ({n:,} GPU activities, {ms:,.1f} ms), left out: files are "
                           "compared step by step; `cuptiprof report` counts them")
        for r in self.runs:
            if r.outside and r.outside[2] >= OUTSIDE_STEPS_NOTE:
                n, of, share = r.outside
                what = "op time" if r.cpu_ops else "GPU time"
                pct = f"{100 * share:.0f}" if share >= 1 or round(100 * share) < 100 else "99+"
                out.append(f"note: {r.letter} ({r.path.name}): {pct}% of its {what} ({n:,} of "
                           f"{of:,} activities) ran outside every step and is not compared (files are "
                           f"compared step by step); `cuptiprof report {shell_word(r.path)} --by "
                           "quality` shows it")
        out += self._unmatched_work()
        out += self._beyond_peak()
        hint = self._key_hint()
        if hint:
            out.append(hint)
        return out

    def _unmatched_work(self) -> list[str]:
        """A line for each --flops/--bytes NAME that no key matches: a mistyped name would
        otherwise only leave the throughput table without its row."""
        if not self.work:
            return []
        matched = {p for (p,) in self.con.execute(
            "SELECT DISTINCT w.pattern FROM cmp_work w JOIN compare_ops o "
            "ON o.key = w.pattern OR o.key GLOB w.pattern").fetchall()}
        out = []
        for w in self.work:
            if w.pattern in matched:
                continue
            opts = "/".join(o for o, v in (("--flops", w.gflop), ("--bytes", w.gbytes)) if v)
            out.append(f"note: {opts} {w.pattern!r} matches no key (--by {self.by}) in any file, "
                       "so it has no throughput row: give a key as the ops table names it, or a "
                       "glob pattern ('gemm*')")
        return out

    def _beyond_peak(self) -> list[str]:
        """A line for each --flops/--bytes NAME whose throughput comes out above the device's
        peak: work given per step instead of per call, or MB written as GB, would otherwise
        stand in the table as hundreds of percent of peak, read as measured."""
        if not self.work:
            return []
        letters = [r.letter for r in self.runs]
        top = {p: (t, tr, m, mr, of) for p, t, tr, m, mr, of in self.con.execute(
            "SELECT pattern, max(coalesce(pct_tensor_peak, pct_fp32_peak)), "
            "arg_max(run, coalesce(pct_tensor_peak, pct_fp32_peak)), max(pct_memory_peak), "
            "arg_max(run, pct_memory_peak), arg_max(memory_peak_of, pct_memory_peak) "
            "FROM compare_throughput GROUP BY pattern").fetchall()}
        out = []
        for w in self.work:
            t, tr, m, mr, of = top.get(w.pattern, (None,) * 5)
            if w.gflop and t is not None and t > 100:
                # the dense 16-bit tensor peak is the highest cuptiprof knows; FP8 and sparse math go past it
                out.append(f"note: --flops {w.pattern!r} gives {letters[tr]} {t:,.0f}% of the device's "
                           "tensor-core peak (an estimate), beyond what it can do unless the key runs "
                           "FP8 or sparse math: check the GFLOP per call")
            if w.gbytes and m is not None and m > 100:
                # data that stays in cache can outrun DRAM, never a link; else the bytes are too many
                cache = " unless the data stays in cache" if of == "device memory" else ""
                out.append(f"note: --bytes {w.pattern!r} gives {letters[mr]} {m:,.0f}% of the peak of "
                           f"its {of} (an estimate), beyond what it can do{cache}: check the GB per call")
        return out

    def _key_hint(self) -> str | None:
        """When the files share few keys (other kernels on another GPU, or torch.compile's fused
        kernels against eager ops), a line naming the key that lines them up."""
        # a file that shares no key at all shares 0 of its time (a sum over no rows is NULL); a
        # file of no time per step has no share to speak of: it is ordered last
        rows = self.con.execute(
            "SELECT run, coalesce(sum(ms) FILTER (WHERE base_ms IS NOT NULL), 0) / nullif(sum(ms), 0) "
            "FROM compare_ops WHERE run > 0 GROUP BY run ORDER BY 2 NULLS LAST, run LIMIT 1").fetchall()
        if not rows or rows[0][1] is None or rows[0][1] >= 0.5:
            return None
        run, shared = rows[0]
        better = {"op": "--by family across GPU architectures, --by region for eager against "
                        "torch.compile", "range": "--by region (the program's own ranges only)",
                  "family": "--by region (the program's own ranges)"}.get(self.by)
        if better is None:
            return None
        return (f"note: only {100 * shared:.0f}% of {self.runs[run].letter}'s time is on keys "
                f"{self.runs[0].letter} also has; to line the files up try {better}")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Comparison":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def step_timeline(profile, step: int, pixels: int = 960, lane_ops: int = 2000,
                  step_ops: int = 5000) -> duckdb.DuckDBPyRelation:
    """GPU work of one step of an open Profile, one row per op, except in a lane of more than
    `lane_ops` ops, where ops less than one of `pixels` apart are one row, and in a step of
    more than `step_ops` ops, where every lane is thinned to about `step_ops` rows in all
    (sql/compare/timeline.sql)."""
    return profile.sql(catalog.compare_sql("timeline"),
                       params=[int(step), int(pixels), int(lane_ops), int(step_ops)])


def cpu_time(profile) -> duckdb.DuckDBPyRelation:
    """CPU op time and GPU time in an open Profile's scope, and the runs recorded without a GPU
    (sql/compare/cpu_time.sql): reports of such runs show CPU op times."""
    return profile.sql(catalog.compare_sql("cpu_time"))


def step_parts(profile) -> duckdb.DuckDBPyRelation:
    """Each step's GPU window in an open Profile's scope split into time under kernels, copies
    alone, memsets alone and idle time, which add up to the window (sql/compare/step_parts.sql):
    the bars of the HTML report's steps plot."""
    return profile.sql(catalog.compare_sql("step_parts"))


def timeline_processes(profile) -> duckdb.DuckDBPyRelation:
    """Run label, host and rank of each process, to name timeline lanes
    (sql/compare/timeline_processes.sql)."""
    return profile.sql(catalog.compare_sql("timeline_processes"))


def median_step(profile) -> int | None:
    """The step whose busy time is the median of the profile's complete steps (the typical step;
    a step an exception ended early is never it)."""
    rows = profile.sql(
        # busy time per step summed over devices (read from step_busy when the file stores it);
        # a step that launched no GPU work is a step of 0, as step_spread counts it
        "WITH s AS (SELECT step, sum(busy_ns) AS b FROM sel_step_busy b WHERE "
        "NOT EXISTS (SELECT 1 FROM sel_cut_steps c WHERE c.step = b.step) "
        "GROUP BY step) SELECT step FROM s ORDER BY abs(b - (SELECT median(b) FROM s)), step LIMIT 1"
    ).fetchall()
    return int(rows[0][0]) if rows else None


# Work per call of one key beyond which --flops / --bytes is a typo (an exaFLOP, an exabyte):
# larger values overflow the throughput columns to infinity, which JSON cannot hold.
MAX_WORK = 1e9


def parse_work(specs: Sequence[str], unit: str, option: str = "") -> list[tuple[str, float]]:
    """'NAME=NUMBER' options (--flops / --bytes) -> [(NAME, number)]."""
    out = []
    for spec in specs or ():
        name, sep, num = spec.rpartition("=")
        try:   # ASCII digits only: float() reads every script's, and 1_000
            val = float(num) if num.isascii() and "_" not in num else None
        except ValueError:
            val = None
        if not sep or not name or val is None or not 0 < val <= MAX_WORK:   # NaN fails too
            given = f"{option} {spec!r}" if option else repr(spec)
            raise UsageError(f"{given}: expected NAME={unit} with a positive number up to "
                             f"{MAX_WORK:.12g}, e.g. 'gemm=4.3' (NAME is a key or a glob pattern)")
        out.append((name, val))
    return out


def work_list(flops: Sequence[str] = (), bytes_: Sequence[str] = ()) -> list[Work]:
    merged: dict[str, Work] = {}
    for specs, unit, option, attr in ((flops, "GFLOP", "--flops", "gflop"), (bytes_, "GB", "--bytes", "gbytes")):
        for name, v in parse_work(specs, unit, option):
            w = merged.setdefault(name, Work(name))
            old = getattr(w, attr)
            if old is not None and old != v:   # one would be dropped without a word
                raise UsageError(f"{option} {name!r} is given twice ({old:g} and {v:g}); give "
                                 "one work per call for each NAME")
            setattr(w, attr, v)
    return list(merged.values())


def _sql_str(s: str) -> str:
    return s.replace("'", "''")


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


__all__ = ["Comparison", "Work", "RunFile", "known_gpu", "work_list", "BY"]
