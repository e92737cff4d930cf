"""Read-only access to a cuptiprof file: reports and ad-hoc SQL as DuckDB relations.

>>> p = cuptiprof.open("run.duckdb")            # doctest: +SKIP
>>> p.ops(top=10).df()                          # a pandas DataFrame (needs pandas)
>>> p.sql("SELECT step, count(*) FROM kernels GROUP BY step").fetchall()
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import duckdb

from cuptiprof.errors import UsageError, damage_said, file_path, shell_word, whole_number
from cuptiprof.markers import steps_beyond
from cuptiprof.store.files import (check_contract, check_core_tables, check_schema_version,
                                   connect_error, first_row, require_duckdb, schema_version,
                                   spill_where_writable)
from cuptiprof.analyse import catalog


# What a `steps` argument of the Python API takes (steps_range says what each form means).
Steps = int | str | range | tuple[int | None, int | None] | list[int | None] | None


def stepless_processes(con, db: str = "", use_busy: bool = False) -> list[tuple[int, int]]:
    """(run_id, pid) of the processes with GPU work but no step at all, in a file that may hold
    steps of other processes (a run without steps merged with runs that have them). `db`: the
    attached file's name; use_busy: read step_busy (complete for every run) instead of every row.
    A process that marked only warm-up steps has steps too: none of them in the default scope."""
    p = f"{db}." if db else ""
    work = (f"SELECT run_id, pid FROM {p}step_busy GROUP BY ALL HAVING count(step) = 0"
            if use_busy else
            f"SELECT run_id, pid FROM {p}gpu_activities GROUP BY ALL HAVING count(step) = 0")
    return con.execute(f"{work} EXCEPT SELECT run_id, pid FROM {p}ranges WHERE kind IN "
                       "('step', 'warmup') ORDER BY ALL").fetchall()


def has_stored_busy(con, db: str = "") -> bool:
    """True when the file's step_busy is complete for every run (no writer of it died), so
    that busy time can be read from it instead of folded from every row. `db`: the attached
    file's name."""
    p = f"{db}." if db else ""
    try:
        return first_row(con.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {p}runs WHERE run_id NOT IN "
                                     f"(SELECT run_id FROM {p}step_busy_runs))"))[0]
    except duckdb.CatalogException:  # written before step_busy existed
        return False


def parse_steps(spec: str | None, label: str | None = None) -> tuple[int | None, int | None] | None:
    """'3:5' -> (3, 5) inclusive; '3:' / ':5' open-ended; '4' -> (4, 4); None -> None.
    label: how messages name the argument (default: the CLI's `--steps '3:5'`)."""
    if spec is None:
        return None
    label = label or f"--steps {spec!r}"
    if not str(spec).strip():   # `--steps "$STEPS"` with STEPS unset: not every step
        raise UsageError(f"{label}: empty; give A:B, A:, :B or N (step numbers, inclusive), "
                         "or leave it out")
    # ASCII digits only: \d and int() read every script's (Arabic-Indic, full-width)
    m = re.fullmatch(r"\s*(-?[0-9]+)?\s*(:)?\s*(-?[0-9]+)?\s*", str(spec))
    other = next((c for c in str(spec) if c.isdigit() and not c.isascii()), None)
    if other is not None:
        raise UsageError(f"{label}: step numbers are written in ASCII digits (0-9); {other!r} is "
                         "not one")
    if not m or (m.group(1) is None and m.group(3) is None):
        raise UsageError(f"{label}: expected A:B, A:, :B or N (step numbers, inclusive)")
    if m.group(2) is None and m.group(1) is not None and m.group(3) is not None:
        # '5-7' or '5 7' is two numbers without the colon: not step 5 alone
        raise UsageError(f"{label}: expected A:B, A:, :B or N (step numbers, inclusive); steps "
                         f"{m.group(1)} to {m.group(3).lstrip('-')} are "
                         f"{m.group(1)}:{m.group(3).lstrip('-')}")
    for g in (m.group(1), m.group(3)):
        why = None if g is None else steps_beyond(g)
        if why:
            raise UsageError(f"{label}: {why}")
    lo = int(m.group(1)) if m.group(1) is not None else None
    hi = int(m.group(3)) if m.group(3) is not None else None
    if m.group(2) is None:
        hi = lo
    if lo is not None and hi is not None and hi < lo:
        raise UsageError(f"{label}: the end ({hi}) is before the start ({lo})")
    return lo, hi


def steps_range(steps, label: str) -> tuple[int | None, int | None] | None:
    """The inclusive (first, last) steps of a `steps` argument from Python: None (every step),
    an int N, a (first, last) pair with None for an open end ((None, None) is None), a range
    of consecutive steps (range(0, 3): steps 0 to 2), or the string forms of parse_steps. A
    list of two steps is taken only where it means the same read either way ([3, 4]).
    label names the argument in messages."""
    from cuptiprof.markers import step_index

    if steps is None or isinstance(steps, str):
        return parse_steps(steps, label)
    if isinstance(steps, range):
        if len(steps) == 0:
            raise UsageError(f"{label}: an empty range holds no step; range(3, 6) is steps 3 to 5")
        if steps.step != 1:
            raise UsageError(f"{label}: expected a range of consecutive steps (step 1), such as "
                             "range(3, 6) for steps 3 to 5")
        return steps[0], steps[-1]
    n = step_index(steps)
    if n is not None:
        return n, n
    if isinstance(steps, (tuple, list)) and len(steps) == 2:
        lo, hi = (None if v is None else step_index(v) for v in steps)
        if (lo is None) == (steps[0] is None) and (hi is None) == (steps[1] is None):
            if lo is not None and hi is not None and hi < lo:
                raise UsageError(f"{label}: the end ({hi}) is before the start ({lo})")
            if isinstance(steps, list) and lo is not None and hi is not None and hi - lo > 1:
                # [1, 101] reads as the steps 1 and 101 as well as steps 1 to 101: it selected
                # every step between; a pair that means the same either way ([1, 2]) is taken
                raise UsageError(f"{label}: a list of two steps is not taken (the steps {lo} and "
                                 f"{hi}, or {lo} to {hi}?); give ({lo}, {hi}) or '{lo}:{hi}' for "
                                 f"steps {lo} to {hi}")
            # open at both ends bounds nothing: every step, as None (processes without steps
            # included), not every row that has a step
            return None if lo is None and hi is None else (lo, hi)
    raise UsageError(f"{label}: expected an int N, a (first, last) pair of steps (None for an "
                     "open end), a range(first, last + 1), or a string 'A:B', 'A:', ':B' or 'N'")


# The statement kinds a read-only query is made of. Everything else is refused, by
# Profile.sql() and `cuptiprof sql` alike: a read-only connection keeps the file as it is, but
# COPY and EXPORT DATABASE write other files, ATTACH opens other databases, INSTALL/LOAD fetch
# extensions, SET changes settings (some name files), PREPARE wraps any of these, and CREATE
# makes persistent secrets.
QUERY_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN,
                              duckdb.StatementType.PRAGMA, duckdb.StatementType.CALL,
                              duckdb.StatementType.MULTI, duckdb.StatementType.TRANSACTION})


def refused_statement(query: str) -> str | None:
    """The first statement of `query` that is no read-only query (its first word, upper case),
    or None when every statement is one. Raises duckdb.ParserException on bad SQL."""
    for st in duckdb.extract_statements(query):
        try:
            kind = st.type
        except ValueError:   # a kind newer than this binding's enum (UPDATE EXTENSIONS)
            kind = None
        words = st.query.split()
        if kind is not None and kind.name == "EXPLAIN":   # EXPLAIN ANALYZE runs what it explains
            inner = words[1:]
            if inner and inner[0].upper() == "ANALYZE":
                inner = inner[1:]
            why = refused_statement(" ".join(inner)) if inner else None
            if why:
                return why
            continue
        if kind not in QUERY_STATEMENTS:
            return words[0].upper() if words else "?"
    return None


class Profile:
    """One cuptiprof file opened read-only. Report methods return DuckDB relations. For one
    thread at a time (DuckDB refuses a second call on its connection meanwhile): open one
    Profile per thread."""

    def __init__(self, path: str | os.PathLike, steps: Steps = None, *, option: str | None = None):
        """steps: see set_steps. option: the command-line option `steps` came from (messages
        then name it, `--steps '3:5'`, instead of the Python argument)."""
        self.path = file_path("path", path)
        self._option = option
        self._scope_tag = 0   # the scope views of set_steps' Nth call are named sel_x_N
        require_duckdb(self.path)
        try:
            self.con = duckdb.connect(str(self.path), read_only=True)
        except duckdb.Error as exc:
            raise connect_error(self.path, exc, writing=False) from None
        try:
            # Reports (and the checks of set_steps) run on a connection of their own: a result
            # the program is still reading from sql() (to_arrow_reader) made every report fail
            # ("connection has an open result"), and a temp view of its own named like a table
            # (CREATE TEMP VIEW kernels ...) changed what the reports said.
            spill_where_writable(self.con, self.path.parent)   # (cursors share the database's)
            self._rep = self.con.cursor()
            self._check_and_scope(steps)
        except BaseException:
            # Nothing may keep the file open after a failed open: DuckDB would refuse the next
            # profile() or open() of it in this process with other settings.
            if hasattr(self, "_rep"):
                self._rep.close()
            self.con.close()
            raise

    def _check_and_scope(self, steps) -> None:
        version = schema_version(self._rep, self.path)
        check_schema_version(self.path, version)
        check_core_tables(self._rep, self.path)
        self.schema_version = version
        try:
            self.stored_busy = has_stored_busy(self._rep)
            self.set_steps(steps)
        except duckdb.Error as exc:
            # a table, column or view edited away fails the scope views in DuckDB's words,
            # naming no file: said as such (only here, where it failed: it costs a schema's
            # build), and anything else as it was
            if not damage_said(str(exc)):
                check_contract(self._rep, self.path)
            raise

    def _step_span(self) -> str:
        """The recorded steps, first to last, for a --steps that selects none of them."""
        lo, hi = first_row(self._rep.execute(
            "SELECT min(step), max(step) FROM (SELECT step FROM gpu_activities WHERE step IS NOT "
            "NULL UNION ALL SELECT step FROM ranges WHERE kind = 'step')"))
        return f"its only step is {lo}" if lo == hi else f"its steps are {lo} to {hi}"

    def _stepless_processes(self) -> list[tuple[int, int]]:
        return stepless_processes(self._rep, use_busy=self.stored_busy)

    # -- scope -------------------------------------------------------------------------------
    def set_steps(self, steps: Steps) -> None:
        """Choose the steps reports look at, inclusive: None or (None, None) (every recorded
        step, or every row when the file has no steps at all), an int N, a (first, last) pair
        with None for an open end, a range of consecutive steps, or a string 'A:B', 'A:', ':B'
        or 'N'. A report made before keeps the steps it was made with; sql() over the sel_*
        views reads the steps in scope when it runs."""
        label = f"{self._option} {steps!r}" if self._option else f"steps={steps!r}"
        rng = steps_range(steps, label)
        kernel_where = None   # the filter over kernel_rows (keyed by lane), where it differs
        has_steps = first_row(self._rep.execute(
            "SELECT EXISTS (SELECT 1 FROM gpu_activities WHERE step IS NOT NULL) "
            "OR EXISTS (SELECT 1 FROM ranges WHERE kind = 'step')"))[0]
        if rng is None:
            where = "step IS NOT NULL" if has_steps else "TRUE"
            scope = "all recorded steps" if has_steps else "all rows, no steps recorded"
            stepless = self._stepless_processes() if has_steps else []
            if stepless:   # e.g. a run without steps merged with runs that have them
                procs = " OR ".join(f"(run_id = {int(r)} AND pid = {int(p)})" for r, p in stepless)
                where = f"(step IS NOT NULL OR {procs})"
                kernel_where = (f"(step IS NOT NULL OR lane_id IN "
                                f"(SELECT lane_id FROM lanes WHERE {procs}))")
                scope += (f", and every row of the {len(stepless)} process"
                          f"{'es' if len(stepless) > 1 else ''} without steps")
        else:
            lo, hi = rng
            conds = ["step IS NOT NULL"]
            if lo is not None:
                conds.append(f"step >= {int(lo)}")
            if hi is not None:
                conds.append(f"step <= {int(hi)}")
            where = " AND ".join(conds)
            scope = f"steps {'' if lo is None else lo}:{'' if hi is None else hi}"
            # first_row: a result left unfinished by fetchone() made every later query of this
            # connection fail (DuckDB 2), once the refusal below was raised
            found = first_row(self._rep.execute(
                f"SELECT EXISTS (SELECT 1 FROM gpu_activities WHERE {where}) OR EXISTS "
                f"(SELECT 1 FROM ranges WHERE kind = 'step' AND {where})"))[0]
            if not found and not has_steps:   # pointing at the steps it has would not help
                leave = f"leave out {self._option}" if self._option else "leave out steps="
                # steps marked but all warm-up (a warm-up as long as the loop) are not "none"
                warm = first_row(self._rep.execute(
                    "SELECT count(*) FROM ranges WHERE kind = 'warmup'"))[0]
                why = (f": its {warm} step{'s are' if warm > 1 else ' is'} all warm-up (a "
                       "warm-up as long as the loop or longer)" if warm else
                       " (no row is tagged with a step)")
                raise UsageError(f"{self.path}: has no recorded steps{why}, so {label} selects "
                                 f"nothing; {leave} to read every row")
            if not found:
                see = (f"`cuptiprof report {shell_word(self.path)} --by step` lists them"
                       if self._option else f"cuptiprof.open({str(self.path)!r}).steps() lists them")
                raise UsageError(f"{self.path}: no recorded step in {label}; "
                                 f"{self._step_span()} ({see})")
        # A scope refused above leaves the one before in place, its description included.
        self.scope = scope
        self.step_range = rng    # (first, last) with None for an open end; None: the default
        self.step_filter = where
        # temp views and macros belong to one connection: made on both (the program's needs
        # the plain names, for sql() over the scope)
        for con in (self._rep, self.con):
            for macro in catalog.macros():
                con.execute(macro)
        self._scope_tag += 1
        for name, sql in catalog.scope_views(where, self.stored_busy, kernel_where).items():
            # reports read this scope's own views, which later scopes leave alone; the plain
            # names (for sql()) follow the current scope
            pinned, sql = f"{name}_{self._scope_tag}", catalog.pin_scope(sql, self._scope_tag)
            for con in (self._rep, self.con):
                con.execute(f"CREATE TEMP VIEW {pinned} AS {sql}")
                con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM {pinned}")

    # -- queries -----------------------------------------------------------------------------
    def _ready(self):
        """The connection, with a result of the user's own `prof.con.execute(...)` that was not
        read to its end (a fetchone()) ended first: DuckDB 2 refuses every relation of a
        connection holding one ("connection has an unfinished result"), where DuckDB 1 dropped
        it when the next query ran. The rows not read yet are dropped, as DuckDB 1 dropped them,
        without being computed (the connection is read-only: no write is undone)."""
        end = getattr(self.con, "abort", None)   # DuckDB 2; a closed Profile says so here
        if end is not None:
            end()
        return self.con

    def sql(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None
            ) -> duckdb.DuckDBPyRelation:
        """Read-only SQL over the file: one query (SELECT, EXPLAIN, PRAGMA, CALL) at a time;
        BEGIN, COMMIT and ROLLBACK pass too (they change nothing on a read-only connection).
        Anything else is refused, as by `cuptiprof sql`: COPY, EXPORT DATABASE, ATTACH, INSTALL/LOAD, SET,
        CREATE, PREPARE and writes (which the read-only connection refuses too). Unlike
        `cuptiprof sql`, a query may read other files (read_parquet(...)). To save a result, call
        .write_parquet(path) or .to_csv(path) on the relation it returns.

        >>> p.sql("SELECT demangled, count(*) FROM kernels GROUP BY 1").df()   # doctest: +SKIP
        """
        if not isinstance(query, str):   # DuckDB's TypeError spread over several lines
            raise UsageError(f"{self.path}: Profile.sql() takes the query as a str, not {query!r}")
        n = len(duckdb.extract_statements(query))
        if not n:   # DuckDB returned None, no relation
            raise UsageError(f"{self.path}: Profile.sql(): the query is empty; give one SQL "
                             "query, e.g. \"SELECT name, count(*) FROM kernels GROUP BY 1\"")
        if params is not None and not isinstance(params, Mapping) and (
                not isinstance(params, Sequence) or isinstance(params, (str, bytes))):
            # an int failed with "not iterable", a string gave one parameter per character
            raise UsageError(f"{self.path}: Profile.sql() takes params as a list or tuple (for ?) "
                             f"or a dict (for $name), not {params!r}")
        kind = refused_statement(query)
        if kind is not None:
            raise UsageError(f"{self.path}: Profile.sql() runs read-only queries only (SELECT, "
                             f"EXPLAIN, PRAGMA, CALL); {kind} is refused and nothing "
                             "ran. To save a result, call .write_parquet(path) or .to_csv(path) "
                             "on the relation of a query")
        if n > 1:   # DuckDB runs them all and returns the last one's rows alone
            raise UsageError(f"{self.path}: Profile.sql(): the query holds {n} queries; give one "
                             "at a time (only the last one's rows would be returned)")
        con = self._ready()
        return con.sql(query, params=params) if params else con.sql(query)

    def report(self, name: str, top: int | None = None) -> duckdb.DuckDBPyRelation:
        """The report `name` over the steps in scope, as `cuptiprof report FILE --by ...` prints
        it: 'ops', 'steps', 'kinds', 'ranges', 'step_ranges', 'cpu_ops', 'devices', 'streams',
        'outliers', 'overview', 'quality' or 'step_spread' (`cuptiprof report --list` says what
        each holds); the `--by` spellings ('step', 'range', 'spread', ...) name the same reports.
        top: the first N rows only (None: every row)."""
        top = whole_number("top", top, 1, none_ok=True)
        name = catalog.BY.get(name, name) if isinstance(name, str) else name
        rel = self._rep.sql(catalog.pin_scope(catalog.report_sql(name), self._scope_tag))
        # a top beyond DuckDB's 64-bit LIMIT (a ConversionException there) is every row too
        return rel.limit(top) if top and top < 1 << 63 else rel

    def ops(self, top: int | None = None) -> duckdb.DuckDBPyRelation:
        """Top GPU ops in scope (kernels by readable name, copies per direction, memsets) with
        calls, total and per-call times and shares of GPU and busy time: report('ops')."""
        return self.report("ops", top)

    def steps(self, top: int | None = None) -> duckdb.DuckDBPyRelation:
        """One row per step and device in scope: host window, GPU window, busy and idle time,
        time per kind and the top op: report('steps'). (The scope itself is `step_range`.)"""
        return self.report("steps", top)

    steps_report = steps   # the name this report had before

    def kinds(self) -> duckdb.DuckDBPyRelation:
        """GPU time in scope split by kind (kernel, memcpy per direction, memset) and host sync
        time (a share of the GPU window, not of GPU time), with the copy and memset time no
        kernel on the device hides (exposed_ms): report('kinds')."""
        return self.report("kinds")

    def devices(self) -> duckdb.DuckDBPyRelation:
        """Per device: its specs and the GPU time recorded on it in scope: report('devices')."""
        return self.report("devices")

    def streams(self, top: int | None = None) -> duckdb.DuckDBPyRelation:
        """Per device and stream: work counts, summed time and share of the device's busy time
        in scope: report('streams')."""
        return self.report("streams", top)

    def outliers(self, top: int | None = None) -> duckdb.DuckDBPyRelation:
        """Op instances in scope at least 3x (and 1 us) slower than their op's median, for ops
        with 5 or more calls, the most times their median first: report('outliers')."""
        return self.report("outliers", top)

    def data_quality(self) -> duckdb.DuckDBPyRelation:
        """Every row of the data_quality table (what the file does not contain), whatever the
        scope. report('quality') adds the program's ranges that ran outside every step."""
        return self._rep.sql("SELECT * FROM data_quality "
                             "ORDER BY run_id, pid, check_name, subject, detail, count, value_ns")

    def runs(self) -> duckdb.DuckDBPyRelation:
        """Every row of the runs table (label, source, status, command, versions, settings)."""
        return self._rep.sql("SELECT * FROM runs ORDER BY run_id")

    def close(self) -> None:
        """Close the file (relations made from it can no longer be read); `with` does it too.
        A method called after it says so in one line."""
        self._rep.close()
        self.con.close()
        self.con = self._rep = _Closed(self.path)

    def __repr__(self) -> str:
        state = "closed" if isinstance(self.con, _Closed) else self.scope
        return f"<cuptiprof.Profile {str(self.path)!r}: {state}>"

    def __enter__(self) -> "Profile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Closed:
    """The connection of a closed Profile: any use says what happened and what to do (DuckDB
    said "Connection already closed", naming no file)."""

    def __init__(self, path: Path):
        self.path = path

    def close(self) -> None:
        pass

    def __getattr__(self, name: str):
        raise UsageError(f"{self.path}: this Profile is closed (close(), or the end of its "
                         "`with`); cuptiprof.open() the file again to read it")


def open_profile(path: str | os.PathLike, steps: Steps = None, *,
                 option: str | None = None) -> Profile:
    """Open a cuptiprof file read-only (the public `cuptiprof.open`; the commands pass the
    option their steps came from)."""
    return Profile(path, steps, option=option)
