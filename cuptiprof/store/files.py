"""Checks every command makes before it reads a file: one place, one wording.

Each raises a cuptiprof error whose message is the one line the user sees.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from cuptiprof.errors import (InputError, NotCuptiprofFile, SchemaVersionError, StoreError,
                              WriterBusy, damage_said, shell_word)
from cuptiprof.store.schema import SCHEMA_VERSION

# Lowest schema version this cuptiprof still reads (nothing older was ever released; schema 1
# stored the lane columns in every kernel row).
OLDEST_READABLE = 2


def is_duckdb_head(head: bytes) -> bool:
    """Whether a file's first 16 bytes (read_head) are a DuckDB file's: its magic after an
    8-byte checksum, then a version number, which holds a NUL byte. Told before any guess at
    JSON: the checksum is any 8 bytes, and one that begins with '{' or '[' (1 file in ~128)
    looked like a trace."""
    return head[8:12] == b"DUCK" and b"\x00" in head[12:16]


def read_head(path: Path, expected: str = "a cuptiprof file") -> bytes:
    """The first 16 bytes of an input file (missing, a directory, unreadable: one line)."""
    if not path.exists():
        if path.is_symlink():   # a link whose file was moved or removed: name where it points
            try:
                to = os.readlink(path)
            except OSError:
                to = None
            if to is not None:
                raise InputError(f"{path}: a symbolic link to {shell_word(to)}, which does not "
                                 "exist (or links round in a loop); give a file that exists")
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected {expected}")
    if not path.is_file():   # a pipe (`<(zcat t.json.gz)`) is read more than once, a FIFO may block
        raise InputError(f"{path}: is not a regular file (a pipe or a device); save it to a file "
                         "and give that file")
    try:
        with open(path, "rb") as fh:
            return fh.read(16)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def write_unsynced(con) -> None:
    """For a temporary file nobody reads before it is renamed into place: DuckDB's syncs at
    every commit and checkpoint only wait on the disk (rank0 of the shared traces: 7 ms of a
    156 ms import on a quiet disk, more on a busy one; bench/import_knobs.py). The caller
    syncs the finished file once (sync_file) before the rename. A DuckDB without the setting
    syncs as before."""
    import duckdb
    try:
        con.execute("SET fsync_mode='NONE'")
    except duckdb.Error:
        pass


def sync_file(path: Path) -> None:
    """The file's data on disk, before a rename makes it the output."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def spill_where_writable(con, folder: Path) -> None:
    """Where a reading connection's DuckDB spills what outgrows its memory (a sort over a
    large file's kernels): beside the file it reads (FILE.duckdb.tmp; an in-memory one: .tmp
    in the current folder), removed on close. Where that folder cannot be written (a shared,
    read-only dataset), the system's temporary folder instead: the query failed there ('Failed
    to create directory "FILE.duckdb.tmp": Permission denied')."""
    if os.access(folder if str(folder) else ".", os.W_OK):
        return
    import tempfile
    spill = Path(tempfile.gettempdir()) / f"cuptiprof-spill-{os.getpid()}"
    con.execute(f"SET temp_directory = '{str(spill).replace(chr(39), chr(39) * 2)}'")


def first_row(result) -> tuple | None:
    """The first row of an execute() result, or None when it has none. It fetches every row, so
    the result ends here: DuckDB 2 keeps a result that fetchone() read only part of open, and
    refuses con.sql() and every relation of that connection until it is finished."""
    rows = result.fetchall()
    return rows[0] if rows else None


RECORD = "run.json"   # what a `cuptiprof run` knows of its run, in OUT.parts (run.merge_parts)


def is_run_parts(folder: Path) -> bool:
    """A `cuptiprof run`'s OUT.parts folder (its lock file or its record in it)."""
    return folder.name.endswith(".parts") and any(
        (folder / n).is_file() for n in ("launcher.pid", RECORD))


def refuse_run_parts(path: Path, expected: str) -> None:
    """`path` is a run's OUT.parts folder with part files, given where `expected` (a file, a
    trace) was: refused with the merge that writes OUT from them."""
    if path.is_dir() and is_run_parts(path) and any(path.glob("*.duckdb")):
        out = path.with_name(path.name[:-len(".parts")])
        raise InputError(f"{path}: the folder of a cuptiprof run's part files, not {expected}; "
                         f"merge them into one: {recover_command(path, out)}")


def running_launcher(parts: Path) -> int | None:
    """The pid of the `cuptiprof run` that writes into `parts` (its launcher.pid), while it is
    alive."""
    try:
        pid = int((parts / "launcher.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    # 0 and -1 are no process of their own: os.kill(-1, 0) asks about every process there is
    return pid if pid > 0 and alive(pid) else None


def recover_command(parts: Path, out: Path) -> str:
    """The command that writes OUT from the parts a run left; --force where an OUT is there
    (the old file a run with --force was to replace), which a merge would otherwise refuse."""
    return (f"cuptiprof merge {shell_word(parts)}/*.duckdb -o {shell_word(out)}"
            f"{' --force' if out.exists() else ''}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, another user's
        return True
    except (OSError, OverflowError):
        return False
    return True


def require_duckdb(path: Path) -> None:
    """A cuptiprof file must at least be a DuckDB file (checked before DuckDB opens it); a run
    still writing it is told apart from a missing file, and from the older file that a
    `run --force` writing it (or killed while it did) replaces."""
    parts = path.with_name(path.name + ".parts")
    if path.exists() and (parts / "launcher.pid").is_file() and _older_than(path, parts):
        # read now, it would show the run before, with nothing to say so (a file newer than
        # the run's parts is read: merged from them, or written by that run as it ended)
        owner = running_launcher(parts)
        if owner:
            raise WriterBusy(f"{path}: a cuptiprof run (pid {owner}) is writing a new {path.name} "
                             "to replace this one; wait for it to end")
        if any(parts.glob("*.duckdb")):
            raise WriterBusy(f"{path}: a run that was to replace this file did not finish; its "
                             f"records are in {parts}: {recover_command(parts, path)} (or remove "
                             f"{parts} to read the older file)")
    if not path.exists():
        if parts.is_dir():  # `cuptiprof run` writes OUT only when the command has ended
            owner = running_launcher(parts)
            if owner:
                raise WriterBusy(f"{path}: a cuptiprof run (pid {owner}) is still writing this "
                                 "file; wait for it to end")
            if not any(parts.glob("*.duckdb")):   # the merge below would find no file
                raise WriterBusy(f"{path}: the run writing it did not finish and recorded nothing "
                                 f"({parts} holds no part file); remove {parts} and run again")
            raise WriterBusy(f"{path}: the run writing it did not finish; its records are in "
                             f"{parts}: {recover_command(parts, path)}")
    refuse_run_parts(path, "a file")   # `report OUT.duckdb.parts`
    head = read_head(path)
    if gzipped_duckdb(path, head):   # not the trace that a gzip file most often is
        raise StoreError(f"{path}: a gzipped DuckDB file (a compressed cuptiprof file?), which "
                         f"is read uncompressed; decompress it ({gunzip_command(path, '.duckdb')})"
                         " and give the .duckdb file")
    if not is_duckdb_head(head):
        # a trace handed to report/compare/...: say how to read it
        if _looks_importable(path, head):
            raise StoreError(f"{path}: looks like a trace or an Nsight Systems export, not a "
                             f"cuptiprof file; import it first: cuptiprof import "
                             f"{shell_word(path)} -o OUT.duckdb")
        raise StoreError(f"{path}: not a DuckDB file (expected a cuptiprof .duckdb file)")
    if "\\" in str(path):   # DuckDB opens another path, or none: say why it would not be this file
        raise StoreError(f"{path}: {BACKSLASH}; rename the file (or its folder)")


# Why DuckDB cannot open or write a path holding a backslash (it opened a/b.duckdb for
# a\b.duckdb, or said it does not exist; a run wrote nothing after its program had run).
BACKSLASH = "the path holds a backslash, which DuckDB takes for a folder separator (/)"


def gzipped_duckdb(path: Path, head: bytes) -> bool:
    """Whether `path` (`head`: its first bytes) is a DuckDB file compressed with gzip."""
    if head[:2] != b"\x1f\x8b":
        return False
    import gzip
    import zlib
    try:
        with gzip.open(path, "rb") as fh:
            return is_duckdb_head(fh.read(16))
    except (OSError, EOFError, zlib.error):
        return False


def gunzip_command(path: Path, suffix: str) -> str:
    """The command that decompresses `path` beside it (gunzip -k takes only a name ending in
    .gz: "unknown suffix -- ignored"); `suffix`: the plain file's, where the name has no .gz."""
    if path.name.endswith(".gz"):
        return f"gunzip -k {shell_word(path)}"
    plain = path.with_name(path.stem + "-unzipped" + suffix)
    return f"gunzip -c {shell_word(path)} > {shell_word(plain)}"


def _older_than(path: Path, folder: Path) -> bool:
    """`path` was last written before something in `folder` was."""
    try:
        mine = path.stat().st_mtime_ns
        return any(p.stat().st_mtime_ns > mine for p in folder.iterdir())
    except OSError:
        return False


def _looks_importable(path: Path, head: bytes) -> bool:
    """What `cuptiprof import` reads (`head`: the first bytes of `path`): a trace, gzipped or
    JSON as the importer tells it (past however much leading whitespace), or an SQLite file
    (an nsys export)."""
    from cuptiprof.interop.textsource import looks_like_json   # (only on this error path)
    return looks_like_json(path, head) or head.startswith(b"SQLite format 3")


def check_schema_version(path: Path, version: int, action: str = "read") -> None:
    """Refuse files this cuptiprof cannot `action` (read, merge, append to)."""
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path}: written by a newer cuptiprof (schema {version}; this one reads up to "
            f"{SCHEMA_VERSION}); upgrade cuptiprof to {action} it")
    if version < OLDEST_READABLE:  # no released cuptiprof wrote it: its tables cannot be trusted
        raise SchemaVersionError(f"{path}: schema {version} is too old for this cuptiprof; "
                                 "record or import it again with this version")


def schema_version(con, path: Path, db: str | None = None) -> int:
    """The schema version `path` records in `meta` (`db`: the attached database's name), or a
    StoreError saying why there is none: no `meta` table (not a cuptiprof file), or one that
    cannot be read (a file cut off or damaged still lists its tables: said as such, not as
    some other program's file)."""
    import duckdb

    try:
        values = {str(v) for (v,) in con.execute(f"SELECT value FROM {db + '.' if db else ''}meta "
                                                  "WHERE key = 'schema_version'").fetchall()}
    except (duckdb.CatalogException, duckdb.BinderException):   # no meta table, or not ours
        values = set()
    except duckdb.Error as exc:
        raise StoreError(f"{path}: truncated or corrupt ({str(exc).splitlines()[0][:160]}); "
                         "record or import it again") from None
    if len(values) > 1:   # which one holds is anyone's guess: read as the first DuckDB returned
        shown = ", ".join(sorted(values, key=lambda v: (len(v), v))[:4])
        raise StoreError(f"{path}: holds {len(values)} different schema versions ({shown}): "
                         "edited by hand, or not written by cuptiprof; record or import it again")
    # ASCII digits: isdigit() and int() also take other scripts' ('٥' read as schema 5)
    if not values or not re.fullmatch(r"[0-9]+", v := values.pop()):
        raise NotCuptiprofFile(f"{path}: a DuckDB file, but not a cuptiprof file (no schema "
                               "version); give one that cuptiprof run, import or merge wrote")
    return int(v)


def damaged_among(paths) -> Path | None:
    """Which of several files a "corrupt block" met mid-query came from (DuckDB's message
    names none): the first whose tables cannot be read in full. Only on that error's path: it
    reads every column of every table."""
    import duckdb

    for path in paths:
        try:
            with duckdb.connect(str(path), read_only=True) as con:
                for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT "
                                        "internal AND database_name = current_database()"
                                        ).fetchall():
                    con.execute(f'SELECT max(hash(COLUMNS(*))) FROM "{t}"').fetchall()
        except duckdb.Error as exc:
            if damage_said(str(exc)):
                return Path(path)
    return None


# Tables and views every file of a readable schema (2 and later) holds; readers start from them.
CORE_TABLES = ("runs", "processes", "devices", "kernel_rows", "lanes", "memcpys", "memsets", "syncs",
               "range_rows", "data_quality", "kernels", "ranges", "gpu_activities")


def check_core_tables(con, path: Path, db: str | None = None) -> None:
    """Refuse a file that says it is a cuptiprof file (a schema version in `meta`) but lacks
    the tables that version defines: cut down, or a `meta` table made by hand. `db`: the
    attached database's name (default: the connection's own file)."""
    if db is None:
        db = first_row(con.execute("SELECT current_database()"))[0]
    present = {n for (n,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? "
        "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = ?", [db, db]).fetchall()}
    missing = [t for t in CORE_TABLES if t not in present]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise StoreError(f"{path}: not a complete cuptiprof file (it has a schema version but no "
                         f"{', '.join(missing[:3])}{more}): damaged, or not written by cuptiprof; "
                         "record or import it again")


@functools.lru_cache(maxsize=1)
def _contract() -> dict[str, dict[str, str]]:
    """Every table and view schemas/cuptiprof.sql makes, as {name: {column: type}}."""
    import duckdb
    from cuptiprof.store.schema import schema_sql

    with duckdb.connect(":memory:") as con:
        con.execute(schema_sql())
        return _columns(con, "memory")


def _columns(con, db: str) -> dict[str, dict[str, str]]:
    """{table or view: {column: type}} of database `db`, tables first (a view's column is
    retyped with the table's it reads)."""
    out: dict[str, dict[str, str]] = {}
    for t, c, typ in con.execute(
            "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c "
            "JOIN information_schema.tables t USING (table_catalog, table_schema, table_name) "
            "WHERE c.table_catalog = ? AND c.table_schema = 'main' "
            "ORDER BY t.table_type, c.table_name, c.ordinal_position", [db]).fetchall():
        out.setdefault(t, {})[c] = typ
    return out


def contract_breaches(con, db: str | None = None) -> list[str]:
    """What a file (`db`: the attached database's name; default the connection's own) lacks of
    the tables, views and columns schemas/cuptiprof.sql defines, or holds with another type: a
    table, column or view dropped, renamed or retyped by hand. Tables, views and columns of its
    own beside them are no breach."""
    if db is None:
        db = first_row(con.execute("SELECT current_database()"))[0]
    have = _columns(con, db)
    out = []
    for name, cols in _contract().items():
        got = have.get(name)
        if got is None:
            out.append(f"no {name}")
            continue
        for c, typ in cols.items():
            if c not in got:
                out.append(f"{name} has no column {c}")
            elif got[c] != typ:
                out.append(f"{name}.{c} is {got[c]}, not {typ}")
    return out


def check_contract(con, path: Path, db: str | None = None) -> None:
    """Refuse a file whose tables or views are not those of its schema version (see
    contract_breaches): its reports would fail on DuckDB's words, or a merge would fill what it
    lacks with NULLs."""
    breaches = contract_breaches(con, db)
    if breaches:
        more = f" and {len(breaches) - 2} more" if len(breaches) > 2 else ""
        raise StoreError(f"{path}: not a complete cuptiprof file ({'; '.join(breaches[:2])}{more}): "
                         "edited or damaged, or not written by cuptiprof; record or import it again")


def rows_of_no_run(con, db: str | None = None) -> dict[str, int]:
    """{table: rows} of a file's rows whose run is not in its `runs` (kernel rows: whose lane is
    not in `lanes`): the run's row deleted by hand. A note of a merge of nothing (data_quality,
    run_id NULL) belongs to no run by design and is not counted."""
    if db is None:
        db = first_row(con.execute("SELECT current_database()"))[0]
    q = db.replace('"', '""')
    out = {}
    for (t,) in con.execute(
            "SELECT DISTINCT c.table_name FROM duckdb_columns() c JOIN duckdb_tables() t "
            "USING (database_name, schema_name, table_name) WHERE c.database_name = ? AND "
            "c.schema_name = 'main' AND c.column_name = 'run_id' AND c.table_name <> 'runs' "
            "ORDER BY 1", [db]).fetchall():
        t_q = t.replace('"', '""')
        n = first_row(con.execute(
            f'SELECT count(*) FROM "{q}".main."{t_q}" x WHERE x.run_id IS NOT NULL AND NOT EXISTS '
            f'(SELECT 1 FROM "{q}".main.runs r WHERE r.run_id = x.run_id)'))[0]
        if n:
            out[t] = n
    n = first_row(con.execute(
        f'SELECT count(*) FROM "{q}".main.kernel_rows k WHERE NOT EXISTS (SELECT 1 FROM '
        f'"{q}".main.lanes l JOIN "{q}".main.runs r ON r.run_id = l.run_id '
        "WHERE l.lane_id = k.lane_id)"))[0]
    if n:
        out["kernel_rows"] = n
    return out


def check_rows_have_runs(con, path: Path, db: str | None = None) -> None:
    """Refuse a file with rows of a run that its `runs` table does not list (rows_of_no_run):
    a merge renumbers rows by their run, and such rows have none to go with, so they would be
    left out without a word (and counted as merged)."""
    orphans = rows_of_no_run(con, db)
    if orphans:
        names = sorted(orphans, key=lambda t: (-orphans[t], t))
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        raise StoreError(f"{path}: not a complete cuptiprof file ({sum(orphans.values()):,} rows "
                         f"in {', '.join(names[:3])}{more} belong to no run that its runs table "
                         "lists: a runs row deleted by hand?); they cannot be merged as any run: "
                         "record or import it again, or leave it out")


def breached_among(paths) -> StoreError | None:
    """The refusal of the first of `paths` whose tables are not those of its schema (a
    Catalog or Binder error met mid-command: a table or column edited away), or None."""
    import duckdb

    for path in paths:
        try:
            with duckdb.connect(str(path), read_only=True) as con:
                check_contract(con, Path(path))
        except StoreError as exc:
            return exc
        except duckdb.Error:
            continue
    return None


def _read_locked(path: Path) -> bool:
    """True where the lock another process holds on `path` is a reader's (DuckDB's read-only
    connection takes a shared lock); False for a writer's, or where it cannot be told (the
    layout of struct flock below is Linux's)."""
    import sys
    if not sys.platform.startswith("linux"):
        return False
    try:
        import fcntl
        import struct
        fd = os.open(path, os.O_RDONLY)
        try:
            got = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0))
        finally:
            os.close(fd)
        return struct.unpack("hhqqi4x", got)[0] == fcntl.F_RDLCK
    except Exception:
        return False


def connect_error(path: Path, exc: Exception, *, writing: bool,
                  target: Path | None = None) -> StoreError:
    """Turn a duckdb.connect failure into one line for the user. `target`: the output a
    temporary `path` stands for, which the line names (the user never gave the temporary)."""
    msg = str(exc)
    named = target if target is not None else path
    if "\\" in str(named):   # profile("a\\b.duckdb"): DuckDB looked for a/b.duckdb
        return StoreError(f"{named}: {BACKSLASH}; give a path without one")
    if target is not None and "Cannot open file" in msg:
        why = msg.splitlines()[0].rsplit('": ', 1)[-1]
        return StoreError(f"{target}: cannot write ({why}); give a path in a directory you can "
                          "write to")
    if "Could not set lock" in msg or "Conflicting lock" in msg:
        pid = ""
        if "(PID " in msg:
            pid = " (pid " + msg.split("(PID ", 1)[1].split(")", 1)[0] + ")"
        if writing and _read_locked(path):   # readers share the file; only a writer waits
            return WriterBusy(
                f"{path}: another process{pid} has this file open for reading (a report, a "
                "cuptiprof.open()); wait for it to close the file before writing it, or write to "
                "another path")
        # a reader has no other path to write to
        what = "writing it, or write to another path" if writing else "opening it"
        return WriterBusy(
            f"{path}: another process{pid} is writing this file; wait for it to finish "
            f"before {what}"
        )
    # DuckDB opens a file once per process: a second connection with other settings (read-only
    # beside read-write) or an ATTACH of it is refused with a message that names the
    # "database file"; that is no damage to the file.
    if "different configuration" in msg or "already attached" in msg:
        what = "profiling into" if writing else "opening"
        return StoreError(
            f"{path}: already open in this process (an open cuptiprof.open() of it, or a "
            f"profile() writing it); close that (prof.close(), or end the profile) before "
            f"{what} it")
    if "WAL does not match database file" in msg:
        # FILE.wal left by another file's writer (a file copied over one a killed writer left
        # its log beside): the file itself is whole, the log is not its own
        wal = f"{path}.wal"
        return StoreError(f"{path}: {wal} beside it is another file's write-ahead log (left by a "
                          f"writer of an earlier file of that name); move {shell_word(wal)} away "
                          "and try again")
    if damage_said(msg):   # cut off (a copy that stopped short, a full disk) or corrupt blocks
        return StoreError(f"{path}: truncated or damaged ({msg.splitlines()[0][:160]}); it cannot "
                          "be read: record or import it again")
    if "not a valid DuckDB" in msg or "database file" in msg.lower() or "Corrupt" in msg \
            or "checksum" in msg.lower() or "serializ" in msg.lower():
        return StoreError(f"{path}: not a readable DuckDB file ({msg.splitlines()[0][:160]})")
    return StoreError(f"{path}: cannot open ({msg.splitlines()[0][:200]})")
