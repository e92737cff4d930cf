"""`import_traces`: Kineto JSON or Nsight Systems SQLite files -> one cuptiprof file (one run).

The output is written under a temporary name and renamed only when every file was read, so a
bad input never leaves a partial file behind.
"""
from __future__ import annotations

import gc
import sys
import threading
import time
import zlib
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

from cuptiprof.errors import InputError, UsageError
from cuptiprof.outputs import check_output
from cuptiprof.interop.kineto import import_kineto
from cuptiprof.store.files import read_head, write_unsynced
from cuptiprof.store.writer import RunInfo, Writer

SQLITE_MAGIC = b"SQLite format 3\x00"


def _is_tar(path: Path, head: bytes) -> bool:
    """A tar archive (gzipped or not): its first header names 'ustar' at byte 257."""
    try:
        with open(path, "rb") as fh:
            block = fh.read(4096)
        if head[:2] == b"\x1f\x8b":
            block = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(block, 512)
    except (OSError, zlib.error):
        return False
    return block[257:262] == b"ustar"


def trace_kind(path: Path) -> str:
    """'nsys' for an SQLite file, 'kineto' for JSON (plain or gzip)."""
    head = read_head(path, "a trace file")
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if _is_tar(path, head):
        raise InputError(f"{path}: a tar archive, not a trace; extract it (tar xf {path}) and "
                         "import the trace files inside")
    if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    if head[8:12] == b"DUCK":   # a cuptiprof file given to import, alone or beside traces
        raise InputError(f"{path}: a DuckDB file, not a trace; a cuptiprof file needs no import: "
                         f"read it as it is (cuptiprof report {path}), or combine files with "
                         "cuptiprof merge")
    if not head:
        raise InputError(f"{path}: the file is empty; expected a torch.profiler trace "
                         "(.json/.json.gz) or an Nsight Systems SQLite export")
    raise InputError(f"{path}: not a torch.profiler trace (.json/.json.gz) nor an Nsight Systems "
                     "SQLite export (nsys export --type sqlite)")


def _progress(paths: list[Path], show: bool | None):
    """A rich progress bar on stderr (TTY only) over the bytes read; None when not shown."""
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
    prog = Progress(TextColumn("importing"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True), transient=True)
    return prog


class _Opening:
    """Opens the output Writer on a helper thread while the first trace is parsed: creating
    the schema is DuckDB work that releases the GIL. Calling it waits and returns the writer
    (or raises what opening raised); `poll` raises early when opening already failed."""

    def __init__(self, make: Callable[[], Writer]):
        self.writer: Writer | None = None
        self.error: BaseException | None = None

        def work():
            try:
                self.writer = make()
            except BaseException as exc:  # handed to the parsing thread
                self.error = exc
        self.thread = threading.Thread(target=work, name="cuptiprof-open", daemon=True)
        self.thread.start()

    def poll(self) -> None:
        if self.error is not None:
            raise self.error

    def __call__(self) -> Writer:
        self.thread.join()
        self.poll()
        return self.writer


def import_traces(paths, out, *, label: str | None = None, overwrite: bool = False,
                  progress: bool | None = False) -> dict:
    """Import traces of one job (one file per rank/process) into `out` as one run.

    >>> import_traces(["rank0.json.gz", "rank1.json.gz"], "job.duckdb")   # doctest: +SKIP
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise UsageError("no trace files given")
    seen: dict = {}
    for p in paths:
        if p.is_file() and seen.setdefault(p.resolve(), p) is not p:
            raise UsageError(f"{p}: the same trace is given twice ({seen[p.resolve()]}); "
                             "its rows would count twice")
    kinds = {trace_kind(p) for p in paths}
    if len(kinds) > 1:
        raise UsageError("mixing torch.profiler traces and Nsight Systems exports in one import "
                         "is not supported; import them into separate files")
    kind = kinds.pop()
    out = check_output(out, inputs=paths, force=overwrite)   # fail before parsing, not after
    info = RunInfo(label=label, source=kind,
                   command="cuptiprof import " + " ".join(str(p) for p in paths),
                   settings={"imported_from": [str(p) for p in paths], "format": kind})
    mode = "overwrite" if overwrite else "create"
    opening = None
    if kind == "kineto":
        opening = _Opening(lambda: Writer(out, info, mode=mode, atomic=True))
        w = None
    else:
        w = Writer(out, info, mode=mode, atomic=True)
    gc_was = gc.isenabled()
    gc.disable()  # millions of short-lived objects and no cycles: collection passes only cost time
    try:
        with _progress(paths, progress) as prog:
            on_read = None
            if prog is not None:
                task = prog.add_task("import", total=sum(p.stat().st_size for p in paths))
                on_read = lambda n: prog.advance(task, n)  # noqa: E731
            if kind == "kineto":
                files = import_kineto(opening, paths, on_read)
                w = opening()
            else:
                from cuptiprof.interop.nsys import import_nsys
                files = import_nsys(w, paths, on_read)
        # The Kineto importer gives each process its first and last time over every row (or
        # those cuptiprof's export recorded, which hold its rows); the rows are the fallback,
        # also beside a process whose start or end is not known (a process of the export that
        # ended before it could say so: its rows may end after every other's end).
        rows = w.query("SELECT min(start_ns), max(end_ns), count(*) = count(start_ns) AND "
                       "count(*) = count(end_ns) FROM processes WHERE run_id = ?",
                       [w.run_id]) if kind == "kineto" else []
        lo, hi, known = rows[0] if rows else (None, None, False)
        if lo is None or hi is None or not known:
            r_lo, r_hi = w.query(
                "SELECT min(s), max(e) FROM (SELECT min(start_ns) s, max(end_ns) e FROM "
                "gpu_activities UNION ALL SELECT min(start_ns), max(end_ns) FROM ranges "
                "UNION ALL SELECT min(start_ns), max(end_ns) FROM api_calls)")[0]
            lo = min((x for x in (lo, r_lo) if x is not None), default=None)
            hi = max((x for x in (hi, r_hi) if x is not None), default=None)
        counts = dict(w.rows_written)
    except BaseException as exc:
        if w is None:  # the output may still be opening: wait, then remove it
            opening.thread.join()
            w = opening.writer
        if w is not None:
            try:
                w.close("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
            except Exception:
                w.discard()  # closing failed too (a full disk): the temporary file still goes
        if isinstance(exc, OverflowError):  # an id or size beyond 64 bits in a hostile trace
            raise InputError(f"{', '.join(map(str, paths))}: a number in the trace does not fit "
                             "in 64 bits; the trace is corrupt") from None
        raise
    finally:
        if gc_was:
            gc.enable()
    # the runs (and data_quality rows) of cuptiprof's export are restored in the temporary
    # file: the file renamed into place holds all of them or is not there
    path = w.close("complete", end_ns=hi if lo is not None else time.time_ns(), start_ns=lo,
                   before_rename=(lambda tmp: _restore_runs(tmp, files, label)) if kind == "kineto"
                   else None)
    return {"path": str(path), "source": kind, "files": files, "rows": counts}


def _restore_runs(path: Path, files: list, label: str | None = None) -> None:
    """What cuptiprof's Chrome export says of its runs and its data_quality rows, made rows of
    the import again. Run on the closed temporary file, before it is renamed into place.

    Runs: an export of a file of several runs (a merge) says each process's run: imported
    back, the processes go to those runs again (label, source, status, command, start), not
    to one. An export of one run (every file of the import says the same run) gives the
    import's run its label (unless the import was given one), source, status, command and
    start the same way. What says how the file came about is the import's own, as for every
    import: settings (`imported_from`, `format`), host (the writer's) and versions.

    data_quality: the exported file's rows (dropped records, steps an exception ended, ...)
    are added beside the import's own, in their run and process (pid as imported). A row of a
    check the import computed again from the rows the trace brought back (unclaimed_records,
    empty_step, no_gpu, ...: the same check, process and subject, or a subject only one of
    them names) is left out: the import's own row says it of the rows as imported."""
    import datetime as _dt

    import duckdb

    groups: dict[int, tuple] = {}
    for f in files:
        if getattr(f, "run", None) is not None:
            groups.setdefault(f.run.id, (f.run, []))[1].append(f.pid)
    runs = [getattr(f, "run", None) for f in files]
    one = len(groups) == 1 and all(r is not None and r == runs[0] for r in runs)
    quality = [(f, q) for f in files for q in getattr(f, "quality", None) or ()]
    if len(groups) < 2 and not one and not quality:
        return
    con = duckdb.connect(str(path))
    write_unsynced(con)   # the temporary file: close() syncs it once, before the rename
    try:
        tables = [t for (t,) in con.execute(
            "SELECT table_name FROM duckdb_columns() WHERE database_name = current_database() "
            "AND column_name IN ('run_id', 'pid') AND table_name IN (SELECT table_name FROM "
            "duckdb_tables() WHERE database_name = current_database()) "
            "GROUP BY 1 HAVING count(*) = 2").fetchall()]
        con.execute("BEGIN")
        new_run: dict = {}   # exported run id -> the run it is now
        for new, (run, pids) in enumerate(groups.values() if len(groups) > 1 or one else (),
                                          start=1):
            new_run[run.id] = new
            if new > 1:   # a copy of the imported run's row (versions, settings), then its rows
                con.execute("INSERT INTO runs SELECT * REPLACE (? AS run_id) FROM runs "
                            "WHERE run_id = 1", [new])
                con.execute("INSERT INTO step_busy_runs SELECT ? WHERE EXISTS (SELECT 1 FROM "
                            "step_busy_runs WHERE run_id = 1)", [new])
                for t in tables:
                    con.execute(f"UPDATE {t} SET run_id = ? WHERE run_id = 1 AND "
                                "list_contains(?, pid)", [new, pids])
            start = None if run.startNs is None else \
                _dt.datetime.fromtimestamp(run.startNs / 1e9, _dt.timezone.utc)
            if run.startTime is not None:   # the wall-clock start recorded (an export of today)
                try:
                    start = _dt.datetime.fromisoformat(run.startTime)
                except ValueError:
                    pass
            # several runs: each its own label; one: the label the import was given, if any
            con.execute(f"UPDATE runs SET label = {'coalesce(?, label)' if one else '?'}, "
                        "source = coalesce(?, source), status = coalesce(?, status), command = "
                        "coalesce(?, command), start_ns = coalesce(?, start_ns), start_time = "
                        "coalesce(?, start_time) WHERE run_id = ?",
                        [(label or run.label) if one else run.label, run.source, run.status,
                         run.command, run.startNs, start, new])
        if len(groups) > 1:   # each run ends with its processes, where all of them say an end
            con.execute("UPDATE runs SET end_ns = coalesce((SELECT CASE WHEN count(*) = "
                        "count(p.end_ns) THEN max(p.end_ns) END FROM processes p WHERE "
                        "p.run_id = runs.run_id), end_ns)")
        if quality:
            _add_quality(con, files, quality, new_run)
        con.execute("COMMIT")
        con.execute("CHECKPOINT")   # no write-ahead log left beside the file that is renamed
    finally:
        con.close()


def _add_quality(con, files: list, quality: list, new_run: dict) -> None:
    """The exported file's data_quality rows, in their run and process as imported, but for
    those of a check the import computed again (see _restore_runs)."""
    # (trace, exported run, exported pid) -> the pid imported
    pid_of = {(f.path, f.run.id if f.run is not None else None, f.original_pid): f.pid
              for f in files if f.original_pid is not None}
    own: dict = {}
    for run, pid, check, subject in con.execute(
            "SELECT run_id, pid, check_name, subject FROM data_quality").fetchall():
        own.setdefault((run, pid, check), set()).add(subject)
    rows = []
    for f, q in quality:
        run = new_run.get(q.run, 1)
        pid = pid_of.get((f.path, q.run, q.pid), q.pid)
        subjects = own.get((run, pid, q.check))
        if subjects is not None and (q.subject is None or None in subjects or q.subject in subjects):
            continue   # computed again by the import
        rows.append((run, pid, q.check, q.subject, q.count, q.valueNs, q.detail))
    if rows:
        con.executemany("INSERT INTO data_quality (run_id, pid, check_name, subject, count, "
                        "value_ns, detail) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
