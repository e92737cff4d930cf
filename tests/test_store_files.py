"""The checks every command makes before it reads a file (cuptiprof.store.files): each refusal
is one line that names the file and says what to do."""
from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import duckdb
import pytest

from _run_helpers import gone_pid
from cuptiprof.errors import InputError, SchemaVersionError, StoreError, WriterBusy
from cuptiprof.store import files
from cuptiprof.store.schema import SCHEMA_VERSION


def test_read_head_gives_the_first_bytes_or_one_line(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(bytes(range(40)))
    assert files.read_head(f) == bytes(range(16))
    with pytest.raises(InputError, match=r"missing\.duckdb: no such file$"):
        files.read_head(tmp_path / "missing.duckdb")
    with pytest.raises(InputError, match=r": is a directory, expected a trace$"):
        files.read_head(tmp_path, "a trace")
    os.mkfifo(tmp_path / "fifo")
    fd = os.open(tmp_path / "fifo", os.O_RDWR)   # a writer with bytes waiting: no open blocks
    try:
        os.write(fd, b"x" * 20)
        with pytest.raises(InputError, match=r"fifo: is not a regular file \(a pipe or a device\)"):
            files.read_head(tmp_path / "fifo")
    finally:
        os.close(fd)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_read_head_of_an_unreadable_file(tmp_path):
    f = tmp_path / "f.duckdb"
    f.write_bytes(b"x" * 20)
    f.chmod(0)
    with pytest.raises(InputError, match=r"f\.duckdb: cannot read \(Permission denied\)"):
        files.read_head(f)


def test_require_duckdb_tells_a_trace_from_other_files(tmp_path):
    good = tmp_path / "g.duckdb"
    duckdb.connect(str(good)).close()
    files.require_duckdb(good)   # no error
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    with pytest.raises(StoreError, match=r"looks like a trace .* cuptiprof import .*t\.json\.gz -o OUT\.duckdb"):
        files.require_duckdb(trace)
    sqlite = tmp_path / "n.sqlite"
    sqlite.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    with pytest.raises(StoreError, match="looks like a trace or an Nsight Systems export"):
        files.require_duckdb(sqlite)
    for name, data in (("short", b"12345678DUC"), ("text", b"hello, this is not a database")):
        with pytest.raises(StoreError, match=rf"{name}: not a DuckDB file \(expected"):
            (tmp_path / name).write_bytes(data)
            files.require_duckdb(tmp_path / name)


def test_require_duckdb_of_a_missing_file_with_parts_left_by_a_run(tmp_path):
    out = tmp_path / "o.duckdb"
    with pytest.raises(InputError, match="no such file"):
        files.require_duckdb(out)
    parts = tmp_path / "o.duckdb.parts"
    parts.mkdir()
    with pytest.raises(WriterBusy, match=r"recorded nothing .* remove .*o\.duckdb\.parts"):
        files.require_duckdb(out)
    (parts / "launcher.pid").write_text(str(gone_pid()))   # its launcher gone: still nothing to merge
    with pytest.raises(WriterBusy, match="recorded nothing"):
        files.require_duckdb(out)
    (parts / "p1.duckdb").write_bytes(b"")
    with pytest.raises(WriterBusy, match=r"did not finish; its records are in .*: cuptiprof merge .*o\.duckdb\.parts/\*\.duckdb -o .*o\.duckdb$"):
        files.require_duckdb(out)
    (parts / "launcher.pid").write_text(f"{os.getpid()}\n")   # a launcher still alive
    with pytest.raises(WriterBusy, match=rf"a cuptiprof run \(pid {os.getpid()}\) is still writing"):
        files.require_duckdb(out)


def test_running_launcher_is_a_live_pid_only(tmp_path):
    assert files.running_launcher(tmp_path) is None          # no launcher.pid
    (tmp_path / "launcher.pid").write_text("not a pid")
    assert files.running_launcher(tmp_path) is None
    for pid in (str(gone_pid()), "-1", "0"):   # ended, or no process of its own (a damaged file)
        (tmp_path / "launcher.pid").write_text(pid)
        assert files.running_launcher(tmp_path) is None, pid
    (tmp_path / "launcher.pid").write_text(f" {os.getpid()}\n")
    assert files.running_launcher(tmp_path) == os.getpid()
    assert files.alive(os.getpid()) and not files.alive(2 ** 40)


def test_schema_versions_this_cuptiprof_cannot_read(tmp_path):
    f = tmp_path / "f.duckdb"
    for v in (files.OLDEST_READABLE, SCHEMA_VERSION):
        files.check_schema_version(f, v)   # readable
    with pytest.raises(SchemaVersionError, match=rf"newer cuptiprof \(schema {SCHEMA_VERSION + 1}; this one reads "
                                                 rf"up to {SCHEMA_VERSION}\); upgrade cuptiprof to merge it"):
        files.check_schema_version(f, SCHEMA_VERSION + 1, "merge")
    with pytest.raises(SchemaVersionError, match=rf"schema {files.OLDEST_READABLE - 1} is too old"):
        files.check_schema_version(f, files.OLDEST_READABLE - 1)


def test_check_core_tables_names_up_to_three_missing_and_counts_the_rest(tmp_path):
    con = duckdb.connect()
    with pytest.raises(StoreError, match=r"no runs, processes, devices and 10 more\)"):
        files.check_core_tables(con, tmp_path / "f.duckdb")
    for t in files.CORE_TABLES[:-2]:
        con.execute(f"CREATE TABLE {t} (x INT)")
    with pytest.raises(StoreError, match=r"no ranges, gpu_activities\): damaged"):
        files.check_core_tables(con, tmp_path / "f.duckdb")
    con.execute("CREATE VIEW ranges AS SELECT 1 AS x")
    con.execute("CREATE VIEW gpu_activities AS SELECT 1 AS x")
    files.check_core_tables(con, tmp_path / "f.duckdb")   # views count as much as tables
    # another database than the connection's file: only its own tables and views count
    con = duckdb.connect(str(tmp_path / "main.duckdb"))
    for t in files.CORE_TABLES:
        con.execute(f"CREATE {'VIEW' if t in ('ranges', 'gpu_activities') else 'TABLE'} {t} AS SELECT 1 AS x")
    files.check_core_tables(con, tmp_path / "main.duckdb")
    con.execute("ATTACH ':memory:' AS other")
    for t in files.CORE_TABLES[:-2]:
        con.execute(f"CREATE TABLE other.{t} (x INT)")
    with pytest.raises(StoreError, match=r"no ranges, gpu_activities\)"):
        files.check_core_tables(con, tmp_path / "o.duckdb", "other")


@pytest.mark.parametrize("msg, writing, want", [
    ('IO Error: Could not set lock on file "f.duckdb": Conflicting lock is held in python (PID 4242)',
     True, r"another process \(pid 4242\) is writing this file; wait for it to finish before writing it"
     r", or write to another path$"),
    # a reader (report, sql) is not told to write elsewhere
    ('IO Error: Could not set lock on file "f.duckdb": Resource temporarily unavailable', False,
     r"another process is writing this file; wait for it to finish before opening it$"),
    ('Connection Error: Can\'t open a connection to same database file with a different configuration',
     True, r"already open in this process .* before profiling into it"),
    ("IO Error: The file \"f.duckdb\" exists, but it is not a valid DuckDB database file!", False,
     r"f\.duckdb: not a readable DuckDB file \(IO Error: The file"),
    ("Some other failure\nsecond line", False, r"f\.duckdb: cannot open \(Some other failure\)$"),
    # a file cut off inside its header blocks: said as such, with what to do (it said "cannot
    # open (IO Error: ...)" and no more)
    ('IO Error: Could not read enough bytes from file "f.duckdb": attempted to read 4096 bytes '
     'from location 4096', False, r"f\.duckdb: truncated or damaged \(IO Error: Could not read "
     r"enough bytes .*\); it cannot be read: record or import it again$"),
    ("Corrupt database file: computed checksum 1 does not match stored checksum 0", False, r"f\.duckdb: truncated or damaged \(Corrupt database file: .*\); "
     r"it cannot be read: record or import it again$"),
])
def test_connect_error_is_one_line(tmp_path, msg, writing, want):
    err = files.connect_error(tmp_path / "f.duckdb", RuntimeError(msg), writing=writing)
    assert isinstance(err, StoreError) and "\n" not in str(err)
    assert re.search(want, str(err)), str(err)
    assert isinstance(err, WriterBusy) == ("lock" in msg)


def test_connect_error_names_the_output_not_its_temporary(tmp_path):
    err = files.connect_error(tmp_path / ".o.duckdb.tmp-1", RuntimeError(
        'IO Error: Cannot open file "/x/.o.duckdb.tmp-1": Permission denied'), writing=True,
        target=Path("o.duckdb"))
    assert str(err) == ("o.duckdb: cannot write (Permission denied); give a path in a directory you "
                        "can write to")


def test_open_of_a_file_with_a_column_edited_away_names_the_file_and_the_column(tmp_path):
    """cuptiprof.open() of a file whose kernel_rows lost a column by hand raised DuckDB's
    BinderException ('Table "k" does not have a column named "start_ns"'), naming no file."""
    import cuptiprof
    from cuptiprof.synthetic import write_synthetic

    f = write_synthetic(tmp_path / "edited.duckdb", steps=2, kernels_per_step=20)
    with duckdb.connect(str(f)) as con:
        con.execute("ALTER TABLE kernel_rows DROP COLUMN start_ns")
    with pytest.raises(StoreError, match=r"edited\.duckdb: not a complete cuptiprof file "
                                         r"\(kernel_rows has no column start_ns\): edited"):
        cuptiprof.open(f)
    with duckdb.connect(str(f)) as con:   # nothing keeps it open: it can be written again
        assert files.contract_breaches(con) == ["kernel_rows has no column start_ns"]
        con.execute("ALTER TABLE kernel_rows ADD COLUMN start_ns BIGINT")
        assert files.contract_breaches(con) == []


@pytest.mark.parametrize("values, want", [
    ([str(SCHEMA_VERSION), str(SCHEMA_VERSION)], SCHEMA_VERSION),   # one version, written twice
    ([str(SCHEMA_VERSION), "99"], r"holds 2 different schema versions \(2, 99\): edited by hand"),
    (["99", str(SCHEMA_VERSION)], r"holds 2 different schema versions \(2, 99\): edited by hand"),
    # digits of another script: int() reads '٥' as 5, which no cuptiprof wrote
    (["\u0665"], "not a cuptiprof file"),
    (["\uff12"], "not a cuptiprof file"),
])
def test_schema_version_rows_edited_by_hand(tmp_path, values, want):
    """Two schema_version rows that differ were read as whichever DuckDB returned first, and a
    version in digits of another script as the number int() makes of them."""
    con = duckdb.connect()
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    for v in values:
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [v])
    f = tmp_path / "f.duckdb"
    if isinstance(want, int):
        assert files.schema_version(con, f) == want
    else:
        with pytest.raises(StoreError, match=want):
            files.schema_version(con, f)


def test_a_write_ahead_log_of_another_file_beside_it_is_named_not_the_file(tmp_path):
    """A file copied over one whose killed writer left its .wal: DuckDB refuses to replay that
    log, and the line said the file was 'not a readable DuckDB file', which it is."""
    import shutil

    import cuptiprof
    from cuptiprof.synthetic import write_synthetic

    f = write_synthetic(tmp_path / "run.duckdb", steps=2, kernels_per_step=20)
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:   # a log left beside it, as by a killed writer
        con.execute("PRAGMA disable_checkpoint_on_shutdown")
        con.execute("SET checkpoint_threshold = '1GB'")
        con.execute("CREATE TABLE t AS SELECT range AS x FROM range(1000)")
    shutil.copy(f"{other}.wal", f"{f}.wal")
    with pytest.raises(StoreError, match=r"run\.duckdb: \S*run\.duckdb\.wal beside it is another "
                                         r"file's write-ahead log .*; move \S*run\.duckdb\.wal away"):
        cuptiprof.open(f)
    os.unlink(f"{f}.wal")
    with cuptiprof.open(f) as prof:
        assert prof.ops().fetchall()


def test_a_dangling_symbolic_link_is_named_with_where_it_points(tmp_path):
    """`report last.duckdb`, a link to a run since removed, said 'no such file' of a name that
    ls lists."""
    link = tmp_path / "last.duckdb"
    link.symlink_to("runs/gone.duckdb")
    with pytest.raises(InputError, match=r"last\.duckdb: a symbolic link to runs/gone\.duckdb, "
                                         r"which does not exist \(or links round in a loop\)"):
        files.read_head(link)
    loop = tmp_path / "loop.duckdb"
    loop.symlink_to("loop.duckdb")
    with pytest.raises(InputError, match=r"loop\.duckdb: a symbolic link to loop\.duckdb, which"):
        files.require_duckdb(loop)
    with pytest.raises(InputError, match=r"missing\.duckdb: no such file$"):
        files.read_head(tmp_path / "missing.duckdb")


def test_a_reader_of_a_file_in_a_folder_it_cannot_write_spills_into_the_temporary_folder(
        tmp_path, monkeypatch):
    """DuckDB spills a query that outgrows its memory into FILE.duckdb.tmp beside the file: in
    a folder the reader cannot write (a shared, read-only dataset), every such report failed
    ('Failed to create directory ...: Permission denied'). It spills into the system's
    temporary folder there; beside the file where it can."""
    import tempfile

    import cuptiprof
    from cuptiprof.synthetic import write_synthetic

    data = tmp_path / "shared"
    data.mkdir()
    f = write_synthetic(data / "run.duckdb", steps=2, kernels_per_step=20)

    def spill_dir():
        with cuptiprof.open(f) as prof:
            return Path(prof.con.execute("SELECT current_setting('temp_directory')").fetchone()[0])
    assert spill_dir().parent == data
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == data and
                        mode == os.W_OK else real(p, mode, **kw))
    got = spill_dir()
    assert got.parent == Path(tempfile.gettempdir()) and not got.exists()


def test_a_gzipped_cuptiprof_file_says_to_decompress_it(tmp_path):
    """A run gzipped to ship it: `report` said it looked like a trace and to import it, and
    `import` then said its JSON was malformed at byte 0."""
    import gzip
    import subprocess
    import sys

    from cuptiprof.synthetic import write_synthetic

    f = write_synthetic(tmp_path / "run.duckdb", steps=1, kernels_per_step=10)
    gz = tmp_path / "run.duckdb.gz"
    gz.write_bytes(gzip.compress(f.read_bytes()))
    with pytest.raises(StoreError, match=rf"run\.duckdb\.gz: a gzipped DuckDB file .*; decompress "
                                         rf"it \(gunzip -k {re.escape(str(gz))}\) and give"):
        files.require_duckdb(gz)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    for cmd in (["report", gz], ["import", gz, "-o", tmp_path / "o.duckdb"]):
        r = subprocess.run([sys.executable, "-m", "cuptiprof", *map(str, cmd)], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "a gzipped DuckDB file" in r.stderr and f"gunzip -k {gz}" in r.stderr, r.stderr
        assert "JSON" not in r.stderr and "import it first" not in r.stderr, r.stderr
    assert not (tmp_path / "o.duckdb").exists()
