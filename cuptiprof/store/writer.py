"""The one writer of a cuptiprof file: bulk-appends columnar batches and commits after each.

Every source (the CUPTI collector, the importers, the launcher's merge) hands batches here:
a mapping of table name -> columns (a pyarrow Table/RecordBatch, or a dict of numpy arrays /
pyarrow arrays / lists). Rows never go in one by one. Each `append` is one transaction, so a
writer killed at any point leaves a file that opens with every batch committed before.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import duckdb
import numpy as np
import pyarrow as pa

from cuptiprof._version import __version__
from cuptiprof.errors import InputError, SchemaVersionError, StoreError, WriterBusy
from cuptiprof.outputs import publish, temp_beside
from cuptiprof.store import arrow
from cuptiprof.store.arrow import rows_as_lists, valid as _valid, values as _values
from cuptiprof.store.demangle import demangle
from cuptiprof.store.distinct import (_filled, _int_array, _kernel_groups, _one_row_each,
                                      distinct_rows)
from cuptiprof.store.files import first_row
from cuptiprof.store.files import (check_contract, check_core_tables,  # noqa: F401 (re-exported)
                                   check_schema_version, connect_error,
                                   schema_version, sync_file, write_unsynced)
from cuptiprof.store.summary import BUSY_SQL, BusySummary, work_part
from cuptiprof.store.schema import (
    INTERNED,
    LANE,
    LAUNCH_CONFIG,
    SCHEMA_VERSION,
    STORAGE_TABLE,
    schema_sql,
)

Batch = Any  # pa.Table | pa.RecordBatch | Mapping[str, array-like]

_open_paths: set[str] = set()
_open_lock = threading.Lock()


def _open_lock_after_fork() -> None:
    """In a forked child: a fork while another thread of the parent registered or released a
    path leaves the child's copy of the lock held, with no thread to release it; a writer
    opened in the child then waited for ever."""
    global _open_lock
    _open_lock = threading.Lock()


os.register_at_fork(after_in_child=_open_lock_after_fork)


@dataclass
class RunInfo:
    """What the `runs` row says about this run."""

    label: str | None = None
    source: str = "cupti"
    command: str | None = None
    host: str = field(default_factory=socket.gethostname)
    start_ns: int | None = None
    settings: dict = field(default_factory=dict)
    cuda_driver_version: str | None = None
    cupti_version: str | None = None
    torch_version: str | None = None


class Writer:
    """Owns one cuptiprof DuckDB file for writing.

    >>> with Writer("run.duckdb", RunInfo(source="synthetic")) as w:   # doctest: +SKIP
    ...     w.append({"kernels": {"start_ns": starts, "end_ns": ends, "name": names}})

    mode: 'create' refuses an existing file, 'append' adds a new run to an existing file,
    'overwrite' replaces it. atomic=True writes to a temporary name and renames on a clean
    close (importers: no partial output file is ever left behind under the final name).
    """

    def __init__(self, path: str | os.PathLike, run: RunInfo | None = None, *,
                 mode: str = "create", atomic: bool = False, pid: int | None = None,
                 synced: bool = True,
                 taken_hint: str = "choose another path or pass mode='overwrite'"):
        """taken_hint: what to do when mode='create' finds the file there already (a command
        passes its own words: outputs.FORCE_HINT)."""
        self.path = Path(path)
        self.run = run or RunInfo()
        self.atomic = atomic
        self.mode = mode
        self._taken_hint = taken_hint
        # synced=False: a part file of `cuptiprof run`, merged into the output when the run
        # ends; what a killed process committed is in the file system's cache either way, so
        # syncing each commit to the disk only slows the program's step ends
        self.synced = synced
        self.pid = os.getpid() if pid is None else pid
        self._strings: dict[str, int] = {}
        self._max_sid = 0
        # Interned combinations (launch_configs, lanes): value tuple -> id, and the highest id.
        self._combos: dict[str, dict[tuple, int]] = {"launch_configs": {}, "lanes": {}}
        self._max_combo: dict[str, int] = {"launch_configs": 0, "lanes": 0}
        self._closed = False
        self.rows_written: dict[str, int] = {}
        self._held: list = []   # batches a Ctrl-C rolled back, written first next time
        self._committed = False
        self._busy: BusySummary | None = None
        self._summary_stale = False
        self._syncer: threading.Thread | None = None   # an atomic output's early sync
        parent = self.path.parent if str(self.path.parent) else Path(".")
        if not parent.is_dir():
            raise InputError(f"{self.path}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise InputError(f"{self.path}: directory {parent} is not writable")
        if self.path.is_symlink():
            raise InputError(f"{self.path}: is a symbolic link; refusing to write through it")
        if self.path.is_dir():
            raise InputError(f"{self.path}: is a directory; give a file name")
        exists = self.path.exists()
        if exists and not self.path.is_file():
            # a FIFO blocked DuckDB's open for ever; mode='overwrite' wrote to a device and
            # unlinked it (as root, /dev/null gone), as the commands' outputs never do
            raise InputError(f"{self.path}: is not a regular file (a device, a pipe or a socket); "
                             "give the path of a file to write")
        if exists and mode == "create":
            raise InputError(f"{self.path}: already exists; {taken_hint}")
        key = str(self.path.resolve())
        with _open_lock:
            if key in _open_paths:
                raise WriterBusy(f"{self.path}: this process already has a writer for this file")
            _open_paths.add(key)
        self._key = key
        try:
            self._open(exists and mode != "overwrite", mode == "overwrite" and exists)
        except BaseException:
            with _open_lock:
                _open_paths.discard(key)
            if atomic and hasattr(self, "_target"):   # the temporary copy goes too
                con = getattr(self, "_con", None)
                if con is not None:
                    con.close()
                self.discard()
            raise

    # -- opening ---------------------------------------------------------------------------
    def _open(self, reuse: bool, overwrite: bool) -> None:
        if self.atomic:
            self._target = self.path
            self.path = temp_beside(self.path)
            for p in (self.path, Path(str(self.path) + ".wal")):
                if p.exists():
                    p.unlink()
            if reuse:
                import shutil
                shutil.copyfile(self._target, self.path)
        elif overwrite:
            # Take the lock on the existing file first: never clobber a file another run writes.
            try:
                duckdb.connect(str(self.path)).close()
            except duckdb.Error as exc:
                raise connect_error(self.path, exc, writing=True) from None
            for p in (self.path, Path(str(self.path) + ".wal")):
                if p.exists():
                    p.unlink()
            reuse = False
        try:
            # Files are created with the user's umask (DuckDB opens with 0666 & ~umask).
            self._con = duckdb.connect(str(self.path))
        except duckdb.Error as exc:
            raise connect_error(self.path, exc, writing=True,
                                target=self._target if self.atomic else None) from None
        # RLE only ever wins where bitpacking's constant mode does as well (same file sizes),
        # and analysing it costs every column of every row group: off for this connection.
        self._con.execute("SET disabled_compression_methods='rle'")
        # Appends of Arrow batches run faster on one thread (measured: more threads only add
        # scheduling to small tables and nothing to large ones), and a writer inside a
        # profiled process should not take the workload's cores.
        self._con.execute("SET threads=1")
        if self.atomic:
            # A fresh file written in a few large commits (imports, merges): a large commit
            # checkpoints at once instead of going through the log first and being written
            # again at close.
            self._con.execute("SET checkpoint_threshold='1MB'")
            write_unsynced(self._con)   # close() syncs it once, before the rename
        elif not self.synced:
            write_unsynced(self._con)
        if reuse:
            named = self._final_path()   # not the temporary copy
            try:
                version = schema_version(self._con, named)
            except StoreError:
                self._con.close()
                raise
            if version > SCHEMA_VERSION:
                self._con.close()
                check_schema_version(named, version, "append to")
            if version < SCHEMA_VERSION:
                self._con.close()
                raise SchemaVersionError(
                    f"{named}: schema {version} is older than {SCHEMA_VERSION}; write a new "
                    "file instead of appending to this one")
            try:   # tables or columns edited away: the first batch failed on them, or was
                # written into a file no report reads
                check_core_tables(self._con, named)
                check_contract(self._con, named)
            except StoreError:
                self._con.close()
                raise
            for sid, value in self._con.execute("SELECT string_id, value FROM strings").fetchall():
                self._strings[value] = sid
                self._max_sid = max(self._max_sid, sid)
            for table, id_col, cols in _COMBOS:
                known = self._combos[table]
                for cid, *combo in self._con.execute(
                        f"SELECT {id_col}, {', '.join(cols)} FROM {table}").fetchall():
                    known[tuple(combo)] = cid
                    self._max_combo[table] = max(self._max_combo[table], cid)
        else:
            self._con.execute("BEGIN")
            self._con.execute(schema_sql())
            self._con.execute("INSERT INTO meta VALUES ('created_by', ?), ('created_at', ?)",
                             [f"cuptiprof {__version__}", _dt.datetime.now(_dt.timezone.utc).isoformat()])
            self._con.execute("COMMIT")
        # One catalog query (one information_schema query per table took ~100 ms).
        self._columns = {}
        self._order: dict[str, list[str]] = {}   # each table's columns, in order
        for t, c in self._con.execute(
                "SELECT c.table_name, c.column_name FROM duckdb_columns() c JOIN duckdb_tables() t "
                "USING (database_name, schema_name, table_name) WHERE c.schema_name = 'main' "
                "AND c.database_name = current_database() ORDER BY c.column_index").fetchall():
            self._columns.setdefault(t, set()).add(c)
            self._order.setdefault(t, []).append(c)
        # Kernel batches carry the launch-configuration and lane columns; the writer interns them.
        self._accepted = dict(self._columns)
        self._accepted["kernel_rows"] = self._columns["kernel_rows"] | set(_KERNEL) | set(LANE)
        self._busy = BusySummary()
        row = first_row(self._con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs"))
        self.run_id = int(row[0])
        r = self.run
        start_ns = r.start_ns if r.start_ns is not None else time.time_ns()
        self._con.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, NULL, 'running', ?, ?, ?, ?, ?, ?)",
            [self.run_id, r.label or self._final_path().stem, r.source,
             r.command if r.command is not None else " ".join(sys.argv), r.host,
             _dt.datetime.now(_dt.timezone.utc), start_ns, __version__, platform.python_version(),
             r.cuda_driver_version, r.cupti_version, r.torch_version,
             json.dumps(r.settings, sort_keys=True, default=str)])

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The connection, for statements the Writer has no method for. Rows changed through it
        are invisible to the busy summary kept while appending, so close() then recomputes it."""
        self._summary_stale = True
        return self._con

    @con.setter
    def con(self, value) -> None:
        self._summary_stale = True
        self._con = value

    def _final_path(self) -> Path:
        return getattr(self, "_target", self.path)

    # -- writing ---------------------------------------------------------------------------
    def append(self, batches: Mapping[str, Batch]) -> None:
        """Append one batch per table in ONE transaction; commit. Empty batches are skipped.
        A batch a Ctrl-C stopped (rolled back) is held and written first by the next append or
        by close(): the program stops as asked, and what was recorded is not lost with it."""
        if self._closed:
            raise StoreError(f"{self.path}: writer is closed")
        try:
            self._write_held()
        except KeyboardInterrupt:   # stopped again: this batch waits behind the held ones
            self._held.append(batches)
            raise
        self._committed = False
        try:
            self._append(batches)
        except KeyboardInterrupt:
            if not self._committed:   # rolled back (a Ctrl-C after the commit loses nothing)
                self._held.append(batches)
            raise

    def _write_held(self) -> None:
        while self._held:
            self._committed = False
            try:
                self._append(self._held[0])
            finally:
                if self._committed:
                    self._held.pop(0)

    def _append(self, batches: Mapping[str, Batch]) -> None:
        prepared = []
        for table, batch in batches.items():
            storage = STORAGE_TABLE.get(table, table)
            if storage not in self._columns:
                raise ValueError(f"unknown table {table!r}")
            tbl = _as_table(batch)
            if tbl.num_rows == 0:
                continue
            prepared.append((storage, tbl))
        if not prepared:
            return
        con = self._con
        try:
            con.execute("BEGIN")
        except Exception:
            _reraise_interrupt()
            raise
        new_strings: list[tuple[int, str, str | None]] = []
        new_combos: dict[str, list[tuple]] = {"launch_configs": [], "lanes": []}
        work = []
        try:
            for storage, tbl in prepared:
                tbl, busy = self._complete(storage, tbl, new_strings, new_combos)
                if busy is not None:
                    work.append(busy)
                _insert(con, storage, tbl, self._order[storage])
                self.rows_written[storage] = self.rows_written.get(storage, 0) + tbl.num_rows
            if new_strings:  # lists as parameters, not pa.array(): see _intern_dict
                con.execute("INSERT INTO strings SELECT unnest(?::INTEGER[]), unnest(?::VARCHAR[]), "
                            "unnest(?::VARCHAR[])", [list(x) for x in zip(*new_strings)])
            for table, id_col, cols in _COMBOS:
                new = new_combos[table]
                if new:  # from Arrow: binding one list parameter per column costs ~2 us a value
                    _insert(con, table, pa.table({c: _int_array(*_with_nulls(v)) for c, v in
                                                  zip((id_col, *cols), zip(*new))}),
                            self._order[table])
            con.execute("COMMIT")
            self._committed = True
            if self.atomic:
                self._sync_behind()
        except BaseException:
            try:
                con.execute("ROLLBACK")
            except duckdb.TransactionException:   # none active: a Ctrl-C came after the COMMIT
                self._committed = True
                self._summary_stale = True        # the busy summary missed this batch
            except duckdb.Error:
                pass
            if not self._committed:
                for sid, value, _ in new_strings:  # forget ids that were never committed
                    self._strings.pop(value, None)
                for table, new in new_combos.items():
                    for cid, *combo in new:
                        self._combos[table].pop(tuple(combo), None)
            _reraise_interrupt()
            raise
        if work and self._busy is not None:
            try:
                self._busy.add(work)
            except Exception:  # the summary is an optimisation: without it reports fold the rows
                _reraise_interrupt()  # but a Ctrl-C must not be lost with it
                self._busy = None

    def _complete(self, storage: str, tbl: pa.Table, new_strings: list,
                  new_combos: dict) -> tuple[pa.Table, pa.Table | None]:
        """Intern string columns, lanes and launch configurations, add run_id/pid, reject
        unknown columns. Returns the table to insert and, for GPU work, the columns the busy
        summary needs (pid, device_id, step, start_ns, end_ns)."""
        interned = INTERNED.get(storage, {})
        unknown = set(tbl.column_names) - self._accepted[storage] - set(interned)
        if unknown:
            raise ValueError(f"{storage}: unknown columns {sorted(unknown)}")
        for src, dst in interned.items():
            if src in tbl.column_names:
                ids = self._intern(tbl.column(src), new_strings)
                tbl = tbl.drop_columns([src]).append_column(dst, ids)
        names = set(tbl.column_names)
        n = tbl.num_rows
        if "run_id" in self._columns[storage] and "run_id" not in names:
            tbl = tbl.append_column("run_id", _int_array(np.full(n, self.run_id, np.int32)))
        if "pid" in self._columns[storage] and "pid" not in names:
            tbl = tbl.append_column("pid", _int_array(np.full(n, self.pid, np.int32)))
        if storage != "kernel_rows":
            return tbl, (work_part(tbl) if storage in _WORK_TABLES else None)
        # Kernel rows: where they ran, and what ran (name and launch configuration), become one
        # id each.
        lane = tbl.select([c for c in LANE if c in names])
        consts = {"run_id": self.run_id, **({} if "pid" in names else {"pid": self.pid})}
        codes, k = distinct_rows(lane)
        ids, values = self._intern_combos("lanes", lane, consts, new_combos["lanes"], codes, k)
        busy = work_part(tbl, _kernel_groups(values, codes, tbl.column("step") if "step" in names
                                             else None))
        tbl = tbl.drop_columns(lane.column_names).append_column("lane_id", ids)
        for c in _ZERO_IS_NONE:  # stored as 0 when there is none (see the schema)
            if c not in names:
                tbl = tbl.append_column(c, _int_array(np.zeros(n, np.int64)))
            elif tbl.column(c).null_count:
                i = tbl.column_names.index(c)
                tbl = tbl.set_column(i, c, _int_array(_filled(tbl.column(c), 0)))
        given = [c for c in _KERNEL if c in tbl.column_names]
        if given:
            cfg = tbl.select(given)
            ids, _ = self._intern_combos("launch_configs", cfg, {}, new_combos["launch_configs"],
                                         *distinct_rows(cfg))
            tbl = tbl.drop_columns(given).append_column("config_id", ids)
        return tbl, busy

    def _intern(self, col: pa.ChunkedArray, new_strings: list) -> pa.Array:
        """Map a string column to string ids; only the distinct values go through Python."""
        if not pa.types.is_dictionary(col.type):
            col = col.dictionary_encode()
        # Dictionary columns (the collector's and the synthetic generator's) are used as they are.
        return pa.chunked_array([self._intern_dict(c, new_strings) for c in col.chunks],
                                pa.int32())

    def _intern_dict(self, enc: pa.DictionaryArray, new_strings: list) -> pa.Array:
        values = enc.dictionary.to_pylist()
        ids: list[int | None] = [None] * len(values)
        table = self._strings
        for i, v in enumerate(values):
            if v is None:
                continue  # a NULL name stays NULL
            sid = table.get(v)
            if sid is None:
                self._max_sid += 1  # ids of a rolled-back batch are skipped, never reused
                sid = table[v] = self._max_sid
                # every table shares one string id per value: a name first recorded for a range
                # or an API call may name a kernel later, so any mangled name is demangled
                new_strings.append((sid, v, demangle(v)))
            ids[i] = sid
        sid = np.array([-1 if x is None else x for x in ids], np.int32)
        # numpy, not pc.take (whose kernels load on a process's first call: see rows_as_lists)
        ix = enc.indices
        at = _values(ix)
        if ix.null_count:   # a NULL slot's index is whatever the buffer holds
            ok = _valid(ix)
            at = np.where(ok, at, 0)
        per_row = sid[at] if len(sid) else np.full(len(ix), -1, np.int32)
        if ix.null_count:
            per_row[~ok] = -1
        return _int_array(per_row, valid=None if (sid >= 0).all() and not ix.null_count
                          else per_row >= 0)

    def _intern_combos(self, table: str, given: pa.Table, consts: dict, new: list,
                       codes: np.ndarray, k: int) -> tuple[pa.Array, dict[str, list]]:
        """Map each row's combination of `table`'s columns (those in `given`, the ones in `consts`
        the same for every row, the rest NULL) to its id; `codes`, `k`: the rows' distinct
        combinations (`distinct_rows(given)`), so only k combinations go through Python. A
        combination that is all NULL gets a NULL id. Also returns each column's k values."""
        cols = _COMBO_COLUMNS[table]
        first = _one_row_each(codes, k)
        picked = dict(zip(given.column_names, rows_as_lists(given, first)))
        values = [picked[c] if c in picked else [consts.get(c)] * k for c in cols]
        combos = list(zip(*values))
        ids = np.empty(k, np.int32)
        known = self._combos[table]
        # New ids in order of first appearance, so they do not depend on how the codes were
        # numbered (the native and the numpy deduplication number them differently).
        for i in np.argsort(first).tolist():
            combo = combos[i]
            cid = known.get(combo)
            if cid is None:
                if all(v is None for v in combo):
                    ids[i] = -1  # nothing recorded: the id stays NULL
                    continue
                self._max_combo[table] += 1  # ids of a rolled-back batch are skipped, never reused
                cid = known[combo] = self._max_combo[table]
                new.append((cid, *combo))
            ids[i] = cid
        if k == 1:
            arr = _int_array(np.full(given.num_rows, ids[0], np.int32), valid=None if ids[0] >= 0
                             else np.zeros(given.num_rows, bool))
        else:
            per_row = ids[codes]
            arr = _int_array(per_row, valid=None if (ids >= 0).all() else per_row >= 0)
        return arr, dict(zip(cols, values))

    def add_quality(self, check_name: str, subject: str | None, count: int | None,
                    detail: str, value_ns: int | None = None, pid: int | None = None) -> None:
        """Record one data-quality fact (dropped records, unclaimed rows, missing kinds, ...)."""
        self.append({"data_quality": {
            "pid": [self.pid if pid is None else pid], "check_name": [check_name],
            "subject": [subject], "count": arrow.array([count], pa.int64()),
            "value_ns": arrow.array([value_ns], pa.int64()), "detail": [detail]}})

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        """Rows of a read-only statement (unlike `con`, keeps the busy summary valid)."""
        try:
            return self._con.execute(sql, params or []).fetchall()
        except Exception:
            _reraise_interrupt()
            raise

    def execute(self, sql: str, params: list | None = None) -> None:
        """Run one statement in its own transaction (metadata updates)."""
        try:
            self._con.execute(sql, params or [])
        except Exception:
            _reraise_interrupt()
            raise

    # -- closing ---------------------------------------------------------------------------
    def close(self, status: str = "complete", end_ns: int | None = None,
              start_ns: int | None = None,
              before_rename: Callable[[Path], None] | None = None,
              run_status: str | None = None) -> Path:
        """Mark the run finished (and, given `start_ns`, correct its start), checkpoint and
        release the file. Returns the final path. `before_rename`: with atomic=True and a
        complete run, called with the closed temporary file before it is renamed into place
        (a last change the final file must hold); if it raises, the file is removed.
        `run_status`: what runs.status says where not `status` (an import of cuptiprof's
        export: the status of the run exported); `status` still says how writing ended."""
        if self._closed:
            return self._final_path()
        stop = None
        try:   # one more try for what a Ctrl-C stopped
            self._write_held()
        except KeyboardInterrupt as exc:
            # stopped again: the run still ends (marked, checkpointed, its path released) with
            # what was committed, and the program then stops as asked
            stop = exc
            if status == "complete":
                status, run_status = "interrupted", None
        except Exception:
            pass
        self._closed = True
        done = False
        try:
            self._con.execute("UPDATE runs SET status = ?, end_ns = ?, start_ns = coalesce(?, "
                              "start_ns) WHERE run_id = ?",
                              [run_status or status,
                               end_ns if end_ns is not None else time.time_ns(), start_ns,
                               self.run_id])
            self._write_busy()
            self._con.execute("CHECKPOINT")
            done = True
        except BaseException:
            try:
                _reraise_interrupt()
            except KeyboardInterrupt:
                # a Ctrl-C may have stopped the UPDATE itself: 'running' in a closed file
                # would read as a writer that died (a transaction it left open goes first)
                try:
                    self._con.execute("ROLLBACK")
                except Exception:
                    pass
                try:
                    self._con.execute("UPDATE runs SET status = 'interrupted', end_ns = "
                                      "coalesce(end_ns, ?) WHERE run_id = ?",
                                      [time.time_ns(), self.run_id])
                except Exception:
                    pass
                raise
            raise
        finally:
            try:
                self._con.close()
            except BaseException:   # a Ctrl-C as it closed: no rename follows, so no output
                done = False
                raise
            finally:
                with _open_lock:
                    _open_paths.discard(self._key)
                if not done and self.atomic:   # no output: the temporary file goes too
                    self.discard()
        if self.atomic:
            if status == "complete":
                try:   # a failure here (the sync's EIO too) leaves no temporary file
                    if before_rename is not None:
                        before_rename(self.path)
                    if self._syncer is not None:
                        self._syncer.join()
                    sync_file(self.path)
                    # 'create': not over a file another command made there meanwhile
                    publish(self.path, self._target, replace=self.mode != "create",
                            taken_hint=self._taken_hint)
                except BaseException:
                    self.discard()
                    raise
            else:
                self.discard()
            self.path = self._target
        if stop is not None:
            raise stop
        return self.path

    def _sync_behind(self) -> None:
        """Start syncing what the commits wrote so far, on a thread of its own (unless one is
        still at it): the sync before the rename then waits only on what was written since
        (rank0 of the shared traces: ~2 instead of ~13 ms after the import's work)."""
        if self._syncer is not None and self._syncer.is_alive():
            return

        def work(path=self.path):
            try:
                sync_file(path)
            except OSError:   # (the file removed after a failure); the last sync reports
                pass
        self._syncer = threading.Thread(target=work, name="cuptiprof-sync", daemon=True)
        self._syncer.start()

    def _write_busy(self) -> None:
        """Store this run's busy time per step (step_busy) and list the run in step_busy_runs.
        Skipped when the summary was dropped: reports then compute it from the rows."""
        if self._busy is None:
            return
        con, run = self._con, self.run_id
        try:
            con.execute("BEGIN")
            if self._summary_stale:  # rows may have changed outside append(): all from the table
                con.execute(f"INSERT INTO step_busy {BUSY_SQL.format(groups='TRUE')}", {"run": run})
            else:
                rows, dirty = self._busy.finish()
                if rows:
                    con.execute("INSERT INTO step_busy SELECT $run, unnest($p), unnest($d), unnest($s), "
                                "unnest($b), unnest($t0), unnest($t1)",
                                {"run": run, **dict(zip(("p", "d", "s", "b", "t0", "t1"),
                                                        (list(c) for c in zip(*rows))))})
                if dirty:
                    groups = ("EXISTS (SELECT 1 FROM (SELECT unnest($gp) AS p, unnest($gd) AS d, "
                              "unnest($gs) AS s) g WHERE g.p = w.pid AND g.d IS NOT DISTINCT FROM "
                              "w.device_id AND g.s IS NOT DISTINCT FROM w.step)")
                    gp, gd, gs = (list(c) for c in zip(*dirty))
                    con.execute(f"INSERT INTO step_busy {BUSY_SQL.format(groups=groups)}",
                                {"run": run, "gp": gp, "gd": gd, "gs": gs})
            con.execute("INSERT INTO step_busy_runs VALUES (?)", [run])
            con.execute("COMMIT")
        except duckdb.Error:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                pass

    def discard(self) -> None:
        """Remove a temporary (atomic) output after a failure."""
        for p in (self.path, Path(str(self.path) + ".wal")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close("complete")
        else:
            status = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else "failed"
            try:
                self.close(status)
            except Exception:
                pass


def _reraise_interrupt() -> None:
    """DuckDB turns a Ctrl-C that lands in a statement into RuntimeError('Query interrupted')
    (or an error naming KeyboardInterrupt while it reads a registered batch), pyarrow into
    ArrowCancelled, and both swallow the KeyboardInterrupt; give it back so that the program
    stops as asked."""
    exc = sys.exc_info()[1]
    while exc is not None:  # a later statement of the aborted transaction may have replaced it
        if (type(exc) is RuntimeError and str(exc) == "Query interrupted") or \
                (isinstance(exc, duckdb.Error) and "KeyboardInterrupt" in str(exc)) or \
                isinstance(exc, (pa.ArrowCancelled, KeyboardInterrupt)):
            stop = KeyboardInterrupt()
            if hasattr(stop, "add_note"):   # the traceback ends in cuptiprof: say why
                stop.add_note("(the Ctrl-C came while cuptiprof was writing recorded data "
                              "to its file; the program was stopped as asked)")
            raise stop from None
        exc = exc.__context__


def _insert(con, table: str, tbl: pa.Table, order: list[str]) -> None:
    """Bulk-insert an Arrow table into `table`, whose columns are `order`: each column of
    `tbl` goes to the column of its name, NULL to the rest. As a relation inserted by position:
    registering the batch and inserting it by name cost ~0.5-0.8 ms more per insert, a dozen
    times per import or step."""
    names = set(tbl.column_names)
    n = tbl.num_rows
    cols = [tbl.column(c) if c in names else pa.nulls(n) for c in order]
    con.from_arrow(pa.table(cols, names=order)).insert_into(table)


def _with_nulls(values) -> tuple[np.ndarray, np.ndarray]:
    """Python ints or None -> (int64 values, validity)."""
    valid = np.array([v is not None for v in values], bool)
    return np.array([0 if v is None else v for v in values], np.int64), valid


_WORK_TABLES = ("kernel_rows", "memcpys", "memsets")  # GPU work: what busy time is made of
# Interned combinations: table, id column, value columns.
_KERNEL = ("name_id",) + LAUNCH_CONFIG  # what ran: interned into launch_configs
_ZERO_IS_NONE = ("range_id", "op_id")    # kernel_rows ids stored as 0 (not NULL) when absent
_COMBOS = (("launch_configs", "config_id", _KERNEL), ("lanes", "lane_id", LANE))
_COMBO_COLUMNS = {t: cols for t, _, cols in _COMBOS}


def _as_table(batch: Batch) -> pa.Table:
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    cols = {}
    for k, v in batch.items():
        if isinstance(v, (pa.Array, pa.ChunkedArray)):
            cols[k] = v
        elif isinstance(v, np.ndarray):
            cols[k] = arrow.array(v)
        else:
            cols[k] = arrow.array(list(v))
    return pa.table(cols)
