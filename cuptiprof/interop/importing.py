"""`import_traces`: Kineto JSON or Nsight Systems SQLite files -> one cuptiprof file (one run).

The output is written under a temporary name and renamed only when every file was read, so a
bad input never leaves a partial file behind.
"""
from __future__ import annotations

import gc
import gzip
import hashlib
import os
import sys
import threading
import time
import zlib
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import msgspec
import pyarrow as pa

from cuptiprof.errors import (CuptiprofError, InputError, NotCuptiprofFile, UsageError,
                              shell_word)
from cuptiprof.outputs import FORCE_HINT, check_output
from cuptiprof.interop.kineto import claim_pid, import_kineto
from cuptiprof.interop.textsource import looks_like_json
from cuptiprof.store import arrow
from cuptiprof.store.files import (gunzip_command, is_duckdb_head, read_head, refuse_run_parts,
                                   write_unsynced)
from cuptiprof.store.writer import RunInfo, Writer

SQLITE_MAGIC = b"SQLite format 3\x00"


def _first_block(path: Path, head: bytes) -> bytes:
    """The file's first 512 bytes, decompressed where it is gzipped (b"": unreadable)."""
    try:
        with open(path, "rb") as fh:
            block = fh.read(4096)
        if head[:2] == b"\x1f\x8b":
            block = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(block, 512)
    except (OSError, zlib.error):
        return b""
    return block[:512]


def _is_tar(block: bytes) -> bool:
    """A tar archive (gzipped or not): its first header names 'ustar' at byte 257."""
    return block[257:262] == b"ustar"


def _refuse_folder(path: Path) -> None:
    """A folder given where its traces were meant (`import traces/`): the words that give them,
    with the kind it holds (a run's OUT.parts folder: the merge that writes OUT)."""
    refuse_run_parts(path, "a trace")
    pattern = next((p for p in ("*.json.gz", "*.json", "*.sqlite") if any(path.glob(p))),
                   "*.json.gz")
    raise InputError(f"{path}: is a directory; give the trace files in it, e.g. "
                     f"{shell_word(path)}/{pattern}")


def trace_kind(path: Path) -> str:
    """'nsys' for an SQLite file, 'kineto' for JSON (plain or gzip)."""
    if path.is_dir():
        _refuse_folder(path)
    head = read_head(path, "a trace file")
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if is_duckdb_head(head):   # a cuptiprof file given to import, alone or beside traces
        if not _cuptiprof_file(path):   # another program's: `cuptiprof report` refuses it too
            raise InputError(f"{path}: a DuckDB file, but neither a trace nor a cuptiprof file; "
                             "import reads torch.profiler traces (.json/.json.gz) and Nsight "
                             "Systems SQLite exports (nsys export --type sqlite)")
        raise InputError(f"{path}: a DuckDB file, not a trace; a cuptiprof file needs no import: "
                         f"read it as it is (cuptiprof report {shell_word(path)}), or combine "
                         "files with cuptiprof merge")
    block = _first_block(path, head)
    if _is_tar(block):
        raise InputError(f"{path}: a tar archive, not a trace; extract it (tar xf "
                         f"{shell_word(path)}) and import the trace files inside")
    if head[:2] == b"\x1f\x8b" and is_duckdb_head(block[:16]):   # a cuptiprof file, gzipped
        raise InputError(f"{path}: a gzipped DuckDB file (a compressed cuptiprof file?), not a "
                         f"trace; decompress it ({gunzip_command(path, '.duckdb')}) and read it "
                         "as it is, without an import")
    if head[:2] == b"\x1f\x8b" and block.startswith(SQLITE_MAGIC):
        # gunzip -k takes a name ending in .gz only ("unknown suffix -- ignored")
        plain = path.with_name(path.stem + "-unzipped.sqlite")
        how = f"gunzip -k {shell_word(path)}" if path.name.endswith(".gz") else \
            f"gunzip -c {shell_word(path)} > {shell_word(plain)}"
        raise InputError(f"{path}: a gzipped SQLite file (an Nsight Systems export?), which is "
                         f"imported uncompressed; decompress it ({how}) and import the .sqlite "
                         "file")
    if looks_like_json(path, head):
        return "kineto"
    if not head:
        raise InputError(f"{path}: the file is empty; expected a torch.profiler trace "
                         "(.json/.json.gz) or an Nsight Systems SQLite export")
    raise InputError(f"{path}: not a torch.profiler trace (.json/.json.gz) nor an Nsight Systems "
                     "SQLite export (nsys export --type sqlite)")


def _cuptiprof_file(path: Path) -> bool:
    """Whether a DuckDB file says cuptiprof's schema version, as every reader asks (one that
    cannot be read is taken for one: `cuptiprof report` on it says what is wrong)."""
    import duckdb

    from cuptiprof.store.files import schema_version
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            schema_version(con, path)
    except NotCuptiprofFile:
        return False
    except (duckdb.Error, InputError):
        return True
    return True


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


def _text_size(path: Path) -> int | None:
    """The size of a file's text, cheaply: a gzip file's says it in its last 4 bytes (modulo
    2**32, and of its last member only: two files of one text may still differ here, which
    only lets a copy pass); None: not a plain file."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return os.fstat(fh.fileno()).st_size
            fh.seek(-4, os.SEEK_END)
            return int.from_bytes(fh.read(4), "little")
    except OSError:
        return None


def _text_digest(path: Path) -> bytes | None:
    """A hash of a file's text (gunzipped where it is gzip); None where it cannot be read
    (the import says what is wrong with it)."""
    h = hashlib.blake2b(digest_size=20)
    try:
        with open(path, "rb") as raw:
            fh = gzip.GzipFile(fileobj=raw) if raw.read(2) == b"\x1f\x8b" else raw
            raw.seek(0)
            while block := fh.read(1 << 20):
                h.update(block)
    except (OSError, EOFError, zlib.error):
        return None
    return h.digest()


def _refuse_same_content(paths: list[Path]) -> None:
    """Refuse two files of one text (t.json and its gzipped copy t.json.gz, say): their rows
    would count twice. Files are read whole only where their text sizes agree."""
    by_size: dict = {}
    for p in paths:
        if p.is_file() and (n := _text_size(p)) is not None:
            by_size.setdefault(n, []).append(p)
    for same in by_size.values():
        seen: dict = {}
        for p in same if len(same) > 1 else ():
            d = _text_digest(p)
            if d is not None and seen.setdefault(d, p) is not p:
                raise UsageError(f"{p}: the same trace is given twice ({seen[d]} holds the same "
                                 "text); its rows would count twice")


def import_traces(paths, out, *, label: str | None = None, overwrite: bool = False,
                  progress: bool | None = False) -> dict:
    """Import traces of one job (one file per rank/process) into `out` as one run. cuptiprof's
    exports of some steps of one process are that one process (kineto.import_kineto); two
    that hold the same step are refused.

    >>> import_traces(["rank0.json.gz", "rank1.json.gz"], "job.duckdb")   # doctest: +SKIP
    """
    with arrow.malloc_pool():
        return _import_traces(paths, out, label, overwrite, progress)


def _import_traces(paths, out, label: str | None, overwrite: bool,
                   progress: bool | None) -> dict:
    paths = [Path(p) for p in paths]
    if not paths:
        raise UsageError("no trace files given")
    seen: dict = {}
    for p in paths:
        if p.is_file() and seen.setdefault(p.resolve(), p) is not p:
            raise UsageError(f"{p}: the same trace is given twice ({seen[p.resolve()]}); "
                             "its rows would count twice")
    kinds = {trace_kind(p) for p in paths}
    _refuse_same_content(paths)
    if len(kinds) > 1:
        raise UsageError("mixing torch.profiler traces and Nsight Systems exports in one import "
                         "is not supported; import them into separate files")
    kind = kinds.pop()
    out = check_output(out, inputs=paths, force=overwrite)   # fail before parsing, not after
    info = RunInfo(label=label, source=kind,
                   command="cuptiprof import " + " ".join(str(p) for p in paths),
                   settings={"imported_from": [str(p) for p in paths], "format": kind})
    mode = "overwrite" if overwrite else "create"
    taken = FORCE_HINT   # a file made there since the check above: in the check's words
    opening = None
    if kind == "kineto":
        opening = _Opening(lambda: Writer(out, info, mode=mode, atomic=True, taken_hint=taken))
        w = None
    else:
        w = Writer(out, info, mode=mode, atomic=True, taken_hint=taken)
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
        # What cuptiprof's export says of its one run and its data_quality rows goes into the
        # open writer (no second opening of the file); an export of several runs is taken
        # apart after close (_restore_runs), as rows move to other runs
        several = kind == "kineto" and _several_runs(files)
        run = _restore_one_run(w, files, label) if kind == "kineto" and not several else None
        counts = dict(w.rows_written)
    except BaseException as exc:
        if w is None:  # the output may still be opening: wait, then remove it
            opening.thread.join()
            w = opening.writer
            # The output's refusal comes first, as when the Writer is opened before parsing:
            # a trace that fails fast must not hide it by winning the race
            if isinstance(opening.error, CuptiprofError) and isinstance(exc, Exception):
                raise opening.error from None
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
    # the runs of a merged file's export are restored in the temporary file: the file renamed
    # into place holds all of them or is not there
    end = run.endNs if run is not None and run.endNs is not None else \
        hi if lo is not None else time.time_ns()
    path = w.close("complete", end_ns=end,
                   start_ns=run.startNs if run is not None and run.startNs is not None else lo,
                   run_status=run.status if run is not None else None,
                   before_rename=(lambda tmp: _restore_runs(tmp, files, label))
                   if several else None)
    return {"path": str(path), "source": kind, "files": files, "rows": counts}


def _run_groups(files: list, plain: bool = False) -> dict[tuple | None, tuple]:
    """(trace file, exported run id) -> (its RunEntry, the pids imported of it), of the files of
    cuptiprof's export that say their run, in the order of the files. Keyed by file too: run 1
    of one merged file's export and run 1 of another's are different runs. With `plain`, the
    files that say no run (torch.profiler's own traces) are one more, under None, in the place
    of the first of them: (None, their pids)."""
    groups: dict[tuple | None, tuple] = {}
    for f in files:
        if getattr(f, "run", None) is not None:
            groups.setdefault((f.path, f.run.id), (f.run, []))[1].append(f.pid)
        elif plain:
            groups.setdefault(None, (None, []))[1].append(f.pid)
    return groups


def _several_runs(files: list) -> bool:
    """Whether a trace of the import is the export of a file of several runs (a merge): then
    every exported run becomes a run of its own (_restore_runs). Exports of one run each (one
    per rank of a job) stay the import's one run."""
    runs: dict = {}
    for path, run_id in _run_groups(files):   # (no plain group: not asked for)
        runs.setdefault(path, set()).add(run_id)
    return any(len(ids) > 1 for ids in runs.values())


def _restore_one_run(w: Writer, files: list, label: str | None):
    """An export of one run (every file of the import says the same run): the import's run
    takes its label (unless the import was given one), source, command and wall-clock start
    here, and its status, start and end when the writer closes (returned: the RunEntry, else None).
    What says how the file came about stays the import's, as for every import: settings
    (`imported_from`, `format`: the trace files read), host (the writer's) and versions. The
    command is the program profiled (runs.command), which the trace's file names are not:
    they stay in `imported_from`. Then the exported file's data_quality rows (_quality_rows)."""
    runs = [getattr(f, "run", None) for f in files]
    run = runs[0] if runs and all(r is not None and r == runs[0] for r in runs) else None
    if run is not None:
        w.execute("UPDATE runs SET label = coalesce(?, label), source = coalesce(?, source), "
                  "command = coalesce(?, command), start_time = coalesce(?, start_time) "
                  "WHERE run_id = ?", [label or run.label, run.source, run.command,
                                       _start_time(run), w.run_id])
    quiet = _quiet_rows(files, {}, w.query("SELECT run_id, pid FROM processes"), w.run_id)
    for row in quiet:   # (a few: the processes of the run that recorded nothing)
        w.execute(_QUIET_SQL, list(row))
    if not any(getattr(f, "quality", None) for f in files):
        return run
    own = w.query("SELECT run_id, pid, check_name, subject FROM data_quality")
    rows = _quality_rows(files, {}, own, w.run_id)
    if rows:   # (the writer gives them its run_id)
        w.append({"data_quality": {k: arrow.array(list(v), t) for (k, t), v in zip(
            _QUALITY_COLS.items(), zip(*rows)) if k != "run_id"}})
    return run


def _start_time(run):
    """A RunEntry's wall-clock start: as recorded (the Kineto reader refused one that is not
    ISO 8601 with its offset), else from its start on the record clock."""
    import datetime as _dt

    if run.startTime is not None:
        return _dt.datetime.fromisoformat(run.startTime)
    return None if run.startNs is None else \
        _dt.datetime.fromtimestamp(run.startNs / 1e9, _dt.timezone.utc)


def _restore_runs(path: Path, files: list, label: str | None = None) -> None:
    """An export of a file of several runs (a merge) says each process's run: imported back,
    the processes go to those runs again (label, source, status, command, start, end), not to
    one, and the exported file's data_quality rows go to their runs (_quality_rows). Each trace's
    runs are its own (two merged exports imported together give the runs of both). The
    processes of torch.profiler's own traces imported beside it (no run said) are a run of
    their own, as their import alone would be (the import's label, source, command, start),
    in the place of the first of them. A label given to the import names the runs LABEL/1..N,
    in the order of the traces and their runs (one label for all would leave them impossible
    to tell apart). Run on the closed temporary file, before it is renamed into place."""
    import duckdb

    groups = _run_groups(files, plain=True)
    if len(groups) < 2:
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
        new_run: dict = {}   # (trace, exported run id) -> the run it is now
        for new, (key, (run, pids)) in enumerate(groups.items(), start=1):
            new_run[key] = new
            if new > 1:   # a copy of the imported run's row (versions, settings), then its rows
                con.execute("INSERT INTO runs SELECT * REPLACE (? AS run_id) FROM runs "
                            "WHERE run_id = 1", [new])
                con.execute("INSERT INTO step_busy_runs SELECT ? WHERE EXISTS (SELECT 1 FROM "
                            "step_busy_runs WHERE run_id = 1)", [new])
                for t in tables:
                    con.execute(f"UPDATE {t} SET run_id = ? WHERE run_id = 1 AND "
                                "list_contains(?, pid)", [new, pids])
        # (run 1's row is the import's own until every copy is made)
        for new, (key, (run, pids)) in enumerate(groups.items(), start=1):
            if run is None:   # torch.profiler's traces: the import's run, begun with them
                con.execute("UPDATE runs SET label = coalesce(?, label), start_ns = coalesce(("
                            "SELECT min(p.start_ns) FROM processes p WHERE p.run_id = "
                            "runs.run_id), start_ns) WHERE run_id = ?",
                            [f"{label}/{new}" if label else None, new])
                continue
            con.execute("UPDATE runs SET label = ?, source = coalesce(?, source), status = "
                        "coalesce(?, status), command = coalesce(?, command), start_ns = "
                        "coalesce(?, start_ns), start_time = coalesce(?, start_time) "
                        "WHERE run_id = ?", [f"{label}/{new}" if label else run.label,
                                             run.source, run.status, run.command,
                                             run.startNs, _start_time(run), new])
        _own_pids(con, tables, files, new_run)
        quiet = _quiet_rows(files, new_run, con.execute("SELECT run_id, pid FROM processes"
                                                        ).fetchall(), 1)
        if quiet:
            con.executemany(_QUIET_SQL, quiet)
        # each run ends as the export says (an older export's, with its processes, where
        # all of them say an end)
        con.execute("UPDATE runs SET end_ns = coalesce((SELECT CASE WHEN count(*) = "
                    "count(p.end_ns) THEN max(p.end_ns) END FROM processes p WHERE "
                    "p.run_id = runs.run_id), end_ns)")
        con.executemany("UPDATE runs SET end_ns = ? WHERE run_id = ?",
                        [(run.endNs, new_run[key]) for key, (run, _) in groups.items()
                         if run is not None and run.endNs is not None])
        rows = _quality_rows(files, new_run, con.execute(
            "SELECT run_id, pid, check_name, subject FROM data_quality").fetchall(), 1)
        if rows:
            con.executemany(f"INSERT INTO data_quality ({', '.join(_QUALITY_COLS)}) VALUES "
                            "(?, ?, ?, ?, ?, ?, ?)", rows)
        con.execute("COMMIT")
        con.execute("CHECKPOINT")   # no write-ahead log left beside the file that is renamed
    finally:
        con.close()


def _own_pids(con, tables: list[str], files: list, new_run: dict) -> None:
    """Each exported process, now in its own run, takes its pid in the exported file again
    where the import gave it another (one that another run's process of the same pid took
    first: two runs of one program, as in two containers), unless a process of its run has
    that pid. Its FileSummary says the pid it ends with."""
    moves: dict = {}   # run -> {pid as imported: pid exported}
    for f in files:
        run = new_run.get((f.path, f.run.id)) if getattr(f, "run", None) is not None else None
        if run is not None and f.original_pid is not None and f.pid != f.original_pid:
            moves.setdefault(run, {})[f.pid] = f
    for run, by_pid in moves.items():
        taken = {p for (p,) in con.execute("SELECT pid FROM processes WHERE run_id = ?",
                                           [run]).fetchall()} - set(by_pid)
        move = {}
        for pid, f in by_pid.items():
            if f.original_pid not in taken:
                taken.add(f.original_pid)
                move[pid] = f
        if not move:
            continue
        case = " ".join(f"WHEN {int(p)} THEN {int(f.original_pid)}" for p, f in move.items())
        for t in tables:
            con.execute(f"UPDATE {t} SET pid = CASE pid {case} END WHERE run_id = ? AND "
                        "list_contains(?, pid)", [run, list(move)])
        for f in move.values():
            f.pid = f.original_pid


_QUIET_COLS = ("run_id", "pid", "host", "rank", "local_rank", "world_size", "exit_status",
               "ended_early", "command", "start_ns", "end_ns")
_QUIET_SQL = (f"INSERT INTO processes ({', '.join(_QUIET_COLS)}) "
              f"VALUES ({', '.join('?' * len(_QUIET_COLS))})")   # one row of _quiet_rows


def _quiet_rows(files: list, new_run: dict, own: list, default_run: int) -> list[tuple]:
    """The processes of the file cuptiprof exported that recorded no row (a helper, a
    resource tracker), as `processes` rows of their run (`new_run`, else `default_run`), each
    with its pid unless a process of its run (`own`: run_id, pid) has it (then, as
    kineto.claim_pid gives another). No row says anything else of them: no data_quality row
    says that they had no GPU."""
    taken: dict = {}
    for run, pid in own:
        taken.setdefault(run, set()).add(pid)
    rows = []
    for f in files:
        for q in getattr(f, "quiet", None) or ():
            if q.pid is None:
                continue
            run = new_run.get((f.path, q.run), default_run)
            rows.append((run, claim_pid(taken.setdefault(run, set()), q.pid), q.host, q.rank,
                         q.localRank, q.worldSize, q.exitStatus, q.endedEarly, q.command,
                         q.startNs, q.endNs))
    return rows


_QUALITY_COLS = {"run_id": pa.int32(), "pid": pa.int32(), "check_name": pa.string(),
                 "subject": pa.string(), "count": pa.int64(), "value_ns": pa.int64(),
                 "detail": pa.string()}


def _quality_rows(files: list, new_run: dict, own: list, default_run: int) -> list[tuple]:
    """The data_quality rows of the file cuptiprof exported, as rows of the import: in their
    run (`new_run`: (trace, exported run id) -> the run it is now; `default_run` else) and
    process (its pid as imported; a row of no process of the trace keeps its pid), beside the
    import's own (`own`: its rows' run_id, pid, check_name, subject). A row of a check the
    import computed again from the rows the trace brought back (unclaimed_records, empty_step,
    no_gpu, missing_kind of steps, ...: the same process and check, and the same subject, or
    one of them names none) is left out: the import's own row says it of the rows as imported,
    and a second round trip adds nothing. Rows of what the import cannot see again (dropped
    records, steps an exception ended, a process that ended early, ...) are kept.

    Traces exported of one run carry its rows again (exports of some steps, those of the
    processes each holds and of the run as a whole; the export of each of its processes): a row
    of one exported run and process that an earlier trace of the import brought already, the
    same in every column, is that row again, and is added once (with the first trace's pid of
    the process). Rows repeated in one trace stay, as the exported file held them."""
    runs = {(f.path, f.run.id): f.run for f in files if getattr(f, "run", None) is not None}

    def exported(path, run_id) -> tuple:
        """What a trace says of one of its runs: the same in every trace exported of it."""
        r = runs.get((path, run_id))
        return (path, run_id) if r is None else msgspec.structs.astuple(r)

    # (trace, exported run, exported pid) -> the pid imported; and, for a trace that does not
    # hold the process, (run as imported, exported run, exported pid) -> the pid another
    # trace of the import gave it
    pid_of, pid_in_run = {}, {}
    for f in files:
        if getattr(f, "original_pid", None) is None:
            continue
        run_id = f.run.id if f.run is not None else None
        pid_of[(f.path, run_id, f.original_pid)] = f.pid
        pid_in_run.setdefault((new_run.get((f.path, run_id), default_run),
                               exported(f.path, run_id), f.original_pid), f.pid)
    subjects: dict = {}
    for run, pid, check, subject in own:
        subjects.setdefault((run, pid, check), set()).add(subject)
    rows = []
    first: dict = {}   # a row as exported -> the trace that brought it first
    for f in files:
        # (`trace`: the one that carried the row; a process of several traces, f.path is the
        # first of them)
        for trace, q in getattr(f, "quality", None) or ():
            run = new_run.get((f.path, q.run), default_run)
            key = (run, exported(f.path, q.run), q.pid, q.check, q.subject, q.count, q.valueNs,
                   q.detail)
            if first.setdefault(key, trace) != trace:
                continue   # brought by an earlier trace of the same run
            pid = pid_of.get((f.path, q.run, q.pid), pid_in_run.get(key[:3], q.pid))
            again = subjects.get((run, pid, q.check))
            if again is not None and (q.subject is None or None in again or q.subject in again):
                continue   # computed again by the import
            rows.append((run, pid, q.check, q.subject, q.count, q.valueNs, q.detail))
    return rows
