"""The Writer: bulk batches in, rows out; interning; commit per batch; one writer per file;
crash safety; schema versions; output modes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from _run_helpers import q as rows, syncs_and_renames

import cuptiprof
from cuptiprof.errors import InputError, SchemaVersionError, StoreError, WriterBusy
from cuptiprof.store import SCHEMA_VERSION, schema_sql
from cuptiprof.store.writer import RunInfo, Writer
from cuptiprof.synthetic import kernel_names, synthetic_batches, write_synthetic

ROOT = Path(__file__).resolve().parents[1]
GEMM = "_ZN7cutlass6KernelINS_4gemm6kernel4GemmILi128ELi64ELi32EEEEEvNT_6ParamsE"


def kernels(n: int, names, t0: int = 1_000, step: int = 0) -> dict:
    start = t0 + np.arange(n, dtype=np.int64) * 1_000
    return {"device_id": np.zeros(n, np.int32), "stream_id": np.full(n, 7, np.int32),
            "start_ns": start, "end_ns": start + 500, "step": np.full(n, step, np.int32),
            "name": [names[i % len(names)] for i in range(n)]}




def test_batches_in_rows_out(tmp_path):
    path = tmp_path / "a.duckdb"
    with Writer(path, RunInfo(source="synthetic", label="t", settings={"steps": 2})) as w:
        w.append({"kernels": kernels(100, ["k1", "k2"])})
        w.append({"kernels": pa.table(kernels(50, ["k3"], t0=10**9, step=1)),
                  "memcpys": {"start_ns": [5], "end_ns": [9], "copy_kind": ["HtoD"], "bytes": [64],
                              "device_id": [0], "step": [0]}})
        assert w.rows_written == {"kernel_rows": 150, "memcpys": 1}
    assert rows(path, "SELECT count(*), count(DISTINCT name), min(step), max(step) FROM kernels") == [(150, 3, 0, 1)]
    assert rows(path, "SELECT DISTINCT run_id, pid FROM kernels") == [(1, os.getpid())]
    assert rows(path, "SELECT copy_kind, bytes, end_ns - start_ns FROM memcpys") == [("HtoD", 64, 4)]
    assert rows(path, "SELECT label, source, status, settings FROM runs") == \
        [("t", "synthetic", "complete", '{"steps": 2}')]
    assert rows(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]


def test_unknown_table_or_column_is_refused_and_nothing_of_the_batch_lands(tmp_path):
    path = tmp_path / "a.duckdb"
    with Writer(path) as w:
        w.append({"kernels": kernels(10, ["ok"])})
        with pytest.raises(ValueError, match="unknown columns"):
            # The kernels part is valid; the memsets part is not: the whole batch rolls back.
            w.append({"kernels": kernels(10, ["new_name"]), "memsets": {"start_ns": [1], "bogus": [2]}})
        with pytest.raises(ValueError, match="unknown table"):
            w.append({"no_such_table": {"x": [1]}})
        w.append({"kernels": kernels(5, ["later"])})
    assert rows(path, "SELECT name, count(*) FROM kernels GROUP BY name ORDER BY name") == \
        [("later", 5), ("ok", 10)]
    # The rolled-back name left no string behind, and ids stay unique.
    assert rows(path, "SELECT count(*), count(DISTINCT string_id) FROM strings") == [(2, 2)]


def test_names_are_interned_once(tmp_path):
    path = tmp_path / "a.duckdb"
    names = kernel_names(50)
    with Writer(path) as w:
        for i in range(3):
            w.append({"kernels": kernels(1000, names, t0=i * 10**7),
                      "api_calls": {"name": ["cudaLaunchKernel"] * 4, "start_ns": [1, 2, 3, 4], "end_ns": [2, 3, 4, 5]},
                      "ranges": {"name": ["step"], "range_id": [i + 1], "kind": ["step"], "step": [i],
                                 "start_ns": [0], "end_ns": [1]}})
    assert rows(path, "SELECT count(*), count(DISTINCT value) FROM strings") == [(52, 52)]
    assert rows(path, "SELECT count(*) FROM kernels WHERE name IS NULL") == [(0,)]
    assert rows(path, "SELECT count(DISTINCT name_id) FROM kernels") == [(50,)]
    assert rows(path, "SELECT DISTINCT name FROM api_calls") == [("cudaLaunchKernel",)]
    # Appending to the file later reuses the ids already there.
    with Writer(path, mode="append") as w:
        w.append({"kernels": kernels(10, names[:5] + ["fresh"])})
    assert rows(path, "SELECT count(*) FROM strings") == [(53,)]
    assert rows(path, "SELECT count(DISTINCT name_id) FROM kernels WHERE run_id = 2") == [(6,)]


def test_dictionary_and_null_names(tmp_path):
    path = tmp_path / "a.duckdb"
    names = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 1], pa.int32()), pa.array(["a", "b"]))
    with Writer(path) as w:
        w.append({"kernels": {"start_ns": [1, 2, 3, 4], "end_ns": [2, 3, 4, 5], "name": names}})
        w.append({"kernels": {"start_ns": [5], "end_ns": [6], "name": pa.array([None], pa.string())}})
    assert rows(path, "SELECT name, count(*) FROM kernels GROUP BY name ORDER BY name NULLS LAST") == \
        [("a", 1), ("b", 2), (None, 2)]


def test_demangled_names(tmp_path):
    path = tmp_path / "a.duckdb"
    with Writer(path) as w:
        w.append({"kernels": kernels(2, [GEMM, "triton_poi_fused_add_0"])})
    got = dict(rows(path, "SELECT name, demangled FROM kernels"))
    assert got[GEMM] == ("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<128, 64, 32> >"
                         "(cutlass::gemm::kernel::Gemm<128, 64, 32>::Params)")
    assert got["triton_poi_fused_add_0"] == "triton_poi_fused_add_0"  # not mangled: as recorded
    assert rows(path, "SELECT count(*) FROM strings WHERE demangled IS NULL") == [(1,)]
    # Most synthetic names are mangled and all of those demangle.
    names = kernel_names(300)
    from cuptiprof.store.demangle import demangle
    mangled = [n for n in names if n.startswith("_Z")]
    assert len(mangled) >= 80 and all(demangle(n) for n in mangled)


@pytest.mark.parametrize("name, want", [
    ("_Z3foov", "foo()"),
    ("_Z6h\u00e9llov", "h\u00e9llo()"),   # a UTF-8 identifier (its length in bytes) reads as written
    ("_Z3fooXYZ!", None),              # mangled badly: kept as recorded
    ("i", None),                       # a type's mangling, not a function's: no _Z, not demangled
    ("", None),
    ("_Z3foo\udc80", None),           # not encodable: kept as recorded
])
def test_demangle(name, want):
    from cuptiprof.store.demangle import demangle
    assert demangle(name) == want


def test_every_column_of_the_schema_is_documented():
    ddl = schema_sql()
    in_table = False
    for line in ddl.splitlines():
        s = line.strip()
        if s.startswith("CREATE TABLE"):
            in_table = True
            continue
        if in_table and s.startswith(")"):
            in_table = False
        elif in_table and s and not s.startswith("--"):
            assert "--" in s and s.split("--", 1)[1].strip(), f"column not documented: {s}"
    assert "'schema_version'" in ddl


def _view_docs(ddl: str) -> dict[str, tuple[str, str, list[str]]]:
    """view -> (its first FROM relation, its comment text, the code lines with a comment)."""
    import re
    lines = ddl.splitlines()
    views = {}
    for i, line in enumerate(lines):
        m = re.match(r"CREATE VIEW (\w+) AS", line)
        if not m:
            continue
        j, above = i - 1, []
        while j >= 0 and lines[j].startswith("--"):
            above.append(lines[j])
            j -= 1
        body = []
        for ln in lines[i + 1:]:
            if not ln.strip():
                break
            body.append(ln)
        code = " ".join(ln.split("--", 1)[0] for ln in body)
        first = re.search(r"\bFROM\s+(\w+)", code).group(1)
        commented = [ln.split("--", 1)[0] for ln in body if "--" in ln and ln.split("--", 1)[1].strip()]
        views[m.group(1)] = (first, "\n".join(above), commented)
    return views


def test_every_column_of_the_views_is_documented():
    """A view's column is documented where the view says what it is (its comment block names it
    in backticks, or the line that selects it carries a comment) or, passed through unchanged
    from the relation the view reads first, there."""
    import re
    ddl = schema_sql()
    con = duckdb.connect()
    con.execute(ddl)
    views = _view_docs(ddl)
    assert {"kernels", "gpu_activities", "api_calls", "ranges"} <= set(views)
    documented: dict[str, set[str]] = {}

    def doc(rel: str) -> set[str]:
        if rel in documented:
            return documented[rel]
        cols = [r[0] for r in con.execute(f"DESCRIBE {rel}").fetchall()]
        if rel not in views:   # a table: every column carries a comment (the test above)
            documented[rel] = set(cols)
            return documented[rel]
        first, text, commented = views[rel]
        inherited = doc(first)
        ok = set()
        for c in cols:
            if f"`{c}`" in text or c in inherited \
                    or any(re.search(rf"\b{c}\b", ln) for ln in commented):
                ok.add(c)
        missing = [c for c in cols if c not in ok]
        assert not missing, f"view {rel}: columns not documented: {missing}"
        documented[rel] = ok
        return ok

    for v in views:
        doc(v)
    # the interned kernel name id both views expose, said to be one
    assert "`name_id`" in views["gpu_activities"][1]
    assert any("name_id" in ln for ln in views["kernels"][2])


# -- one writer per file, crash safety -----------------------------------------------------

HOLD = """
import sys, time
from cuptiprof.store.writer import Writer, RunInfo
from cuptiprof.synthetic import synthetic_batches
w = Writer(sys.argv[1], RunInfo(source="synthetic"))
n = 0
for b in synthetic_batches(steps=10_000, kernels_per_step=500, api=False):
    w.append(b)
    n += 1
    print(n, w.rows_written.get("kernel_rows", 0), flush=True)
    if sys.argv[2] == "hold" and n == 2:
        time.sleep(60)
    if sys.argv[2] == "run" and n >= 8:   # the next batch once the test says so
        sys.stdin.readline()
"""


def _start(path, how):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", HOLD, str(path), how], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)


def test_second_writer_in_another_process_is_refused(tmp_path):
    path = tmp_path / "busy.duckdb"
    proc = _start(path, "hold")
    try:
        proc.stdout.readline()
        proc.stdout.readline()
        for mode in ("append", "overwrite"):
            with pytest.raises(WriterBusy) as err:
                Writer(path, mode=mode)
            msg = str(err.value)
            assert "\n" not in msg and "another process" in msg and f"pid {proc.pid}" in msg
            assert "before writing it" in msg
        with pytest.raises(InputError, match="already exists"):
            Writer(path)  # create
        with pytest.raises(WriterBusy, match="another process.*before opening it"):
            cuptiprof.open(path)
    finally:
        proc.kill()
        proc.wait()


def test_second_writer_in_this_process_is_refused(tmp_path):
    path = tmp_path / "a.duckdb"
    with Writer(path):
        with pytest.raises(WriterBusy, match="already has a writer"):
            Writer(path, mode="append")
    Writer(path, mode="append").close()  # released on close


FORK_WHILE_OPENING = """
import os, signal, threading
from cuptiprof.store import writer
inside, release = threading.Event(), threading.Event()
class Paused(set):   # a writer opened on thread W waits here, the open-paths lock held
    def add(self, key):
        if threading.current_thread().name == "W":
            inside.set()
            release.wait()
        super().add(key)
writer._open_paths = Paused()
w = threading.Thread(target=lambda: writer.Writer("parent.duckdb").close(), name="W")
w.start()
inside.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(20)   # a child that hangs dies of SIGALRM
    writer.Writer("child.duckdb").close()
    print("child wrote", flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
release.set()
w.join()
print("child status", status)
"""


def test_a_writer_opened_in_a_child_forked_while_another_thread_opens_one(tmp_path):
    """The fork came while another thread registered the file it opens: the child's copy of
    the lock on the open paths stayed held, and a writer opened in the child waited for ever."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", FORK_WHILE_OPENING], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "child wrote" in r.stdout and "child status 0" in r.stdout, r.stdout + r.stderr
    assert rows(tmp_path / "child.duckdb", "SELECT status FROM runs") == [("complete",)]
    assert rows(tmp_path / "parent.duckdb", "SELECT status FROM runs") == [("complete",)]


def test_sigkill_mid_run_keeps_every_committed_batch(tmp_path):
    path = tmp_path / "killed.duckdb"
    proc = _start(path, "run")
    committed = 0
    try:
        for line in proc.stdout:
            n, committed = map(int, line.split())
            if n >= 8:
                break
        # The writer holds after batch 8 until told to go on: the kill lands while batch 9 is
        # written or just after, however late this process gets to send it (a loaded machine
        # ran the writer on through several more batches meanwhile).
        proc.stdin.write("go\n")
        proc.stdin.flush()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with cuptiprof.open(path) as prof:
        n_rows = prof.sql("SELECT count(*) FROM kernel_rows").fetchall()[0][0]
        status = prof.sql("SELECT status, end_ns FROM runs").fetchall()[0]
        # Every batch reported as committed is there; at most the one in flight beyond it.
        assert n_rows >= committed > 0
        assert n_rows - committed < 1000
        assert status == ("running", None)  # the writer never closed: says so
        assert prof.ops().fetchall()


def test_newer_schema_is_refused(tmp_path):
    path = write_synthetic(tmp_path / "new.duckdb", steps=1, kernels_per_step=10)
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    con.close()
    with pytest.raises(SchemaVersionError, match="newer cuptiprof") as err:
        Writer(path, mode="append")
    assert f"schema {SCHEMA_VERSION + 1}" in str(err.value)
    with pytest.raises(SchemaVersionError, match="newer cuptiprof"):
        cuptiprof.open(path)


def test_append_to_a_foreign_duckdb_file_is_refused(tmp_path):
    path = tmp_path / "foreign.duckdb"
    duckdb.connect(str(path)).execute("CREATE TABLE t(x INT)").close()
    with pytest.raises(StoreError, match="not a cuptiprof file"):
        Writer(path, mode="append")
    con = duckdb.connect(str(path))   # a meta table whose version is no number
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', 'two')")
    con.close()
    with pytest.raises(StoreError, match="not a cuptiprof file"):
        Writer(path, mode="append")


def test_a_file_with_a_schema_version_and_few_tables_names_what_it_lacks(tmp_path):
    from cuptiprof.store.files import CORE_TABLES, check_core_tables

    path = tmp_path / "cut.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    con.execute("CREATE TABLE runs (run_id INTEGER)")
    with pytest.raises(StoreError) as err:
        check_core_tables(con, path)
    more = len(CORE_TABLES) - 4
    assert str(err.value).startswith(f"{path}: not a complete cuptiprof file (it has a schema "
                                     f"version but no processes, devices, kernel_rows and {more} more)")
    for t in CORE_TABLES[1:-2]:
        con.execute(f"CREATE TABLE {t} (x INTEGER)")
    with pytest.raises(StoreError, match=r"but no ranges, gpu_activities\)"):
        check_core_tables(con, path)
    for t in CORE_TABLES[-2:]:
        con.execute(f"CREATE VIEW {t} AS SELECT 1 AS x")
    check_core_tables(con, path)
    con.close()


# -- modes ---------------------------------------------------------------------------------

def test_an_existing_file_is_refused_with_what_replaces_it(tmp_path, monkeypatch):
    """The Writer says what replaces a file there, in the words of whoever asked for it: its
    own mode='overwrite' by default, --force for the import command, as every other command
    whose output exists (it said "or remove the file first")."""
    from cuptiprof.interop import importing
    path = tmp_path / "m.duckdb"
    write_synthetic(path, steps=1, kernels_per_step=20)
    with pytest.raises(InputError) as err:
        Writer(path)
    assert str(err.value) == f"{path}: already exists; choose another path or pass " \
                             "mode='overwrite'"
    # a file made after the import's own check of its output (a race): the same words as that
    # check's
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    monkeypatch.setattr(importing, "check_output", lambda out, **kw: Path(out))
    with pytest.raises(InputError) as err:
        importing.import_traces([trace], path)
    assert str(err.value) == f"{path}: already exists; choose another path or pass --force"
    # the output opens beside the parsing of the first trace; an empty trace fails at once, and
    # the output's refusal is still the one said, however late the opening ends
    import time

    def slow_writer(*a, **kw):
        time.sleep(0.3)
        return Writer(*a, **kw)
    monkeypatch.setattr(importing, "Writer", slow_writer)
    with pytest.raises(InputError) as err:
        importing.import_traces([trace], path)
    assert str(err.value) == f"{path}: already exists; choose another path or pass --force"


def test_modes(tmp_path):
    path = tmp_path / "m.duckdb"
    write_synthetic(path, steps=1, kernels_per_step=20)
    with pytest.raises(InputError, match="already exists"):
        Writer(path)
    write_synthetic(path, steps=2, kernels_per_step=20, mode="append")
    assert rows(path, "SELECT run_id, status FROM runs ORDER BY 1") == [(1, "complete"), (2, "complete")]
    assert rows(path, "SELECT count(DISTINCT step) FROM kernels WHERE run_id = 2") == [(2,)]
    write_synthetic(path, steps=1, kernels_per_step=20, mode="overwrite")
    assert rows(path, "SELECT count(*) FROM runs") == [(1,)]


def test_atomic_writes_under_a_temporary_name(tmp_path):
    path = tmp_path / "atomic.duckdb"
    w = Writer(path, RunInfo(source="kineto"), atomic=True)
    w.append({"kernels": kernels(10, ["k"])})
    assert not path.exists() and w.path.exists() and w.path.parent == tmp_path
    assert w.close() == path
    assert path.exists() and rows(path, "SELECT count(*) FROM kernels") == [(10,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atomic.duckdb"]


def test_an_atomic_writer_replaces_a_temporary_file_a_killed_writer_left(tmp_path):
    """A writer killed before its rename leaves its temporary file; a later process of the
    same pid writes its own from scratch."""
    from cuptiprof.outputs import temp_beside

    path = tmp_path / "atomic.duckdb"
    write_synthetic(temp_beside(path), steps=1, kernels_per_step=5)
    with Writer(path, atomic=True) as w:
        w.append({"kernels": kernels(3, ["k"])})
    assert rows(path, "SELECT count(*) FROM runs") == [(1,)]
    assert rows(path, "SELECT count(*) FROM kernel_rows") == [(3,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atomic.duckdb"]


def test_atomic_writer_never_replaces_a_file_made_there_meanwhile(tmp_path):
    """An import (an atomic 'create' writer) whose output another command wrote while it ran
    (two imports of one -o at once): the rename replaced that file, and both said they wrote
    it. Now the later one is refused in the check's words, the other's file is kept, and no
    temporary file is left; mode='overwrite' still replaces it."""
    path = tmp_path / "out.duckdb"
    w = Writer(path, RunInfo(source="kineto"), atomic=True, taken_hint="pass --force")
    w.append({"kernels": kernels(3, ["k"])})
    path.write_bytes(b"the other command's file")
    with pytest.raises(InputError, match=r"out\.duckdb: already exists \(written by another "
                                         r"command since this one began\); pass --force$"):
        w.close()
    assert path.read_bytes() == b"the other command's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.duckdb"]
    w = Writer(path, RunInfo(source="kineto"), mode="overwrite", atomic=True)
    w.append({"kernels": kernels(3, ["k"])})
    w.close()
    assert rows(path, "SELECT count(*) FROM kernel_rows") == [(3,)]


def test_atomic_writer_syncs_the_file_once_before_the_rename(tmp_path, monkeypatch):
    """A temporary file nobody reads is written without DuckDB's syncs at each commit; what a
    commit wrote is synced behind it on a thread of its own, and close() syncs the rest,
    before the rename makes it the output. A file written in place keeps DuckDB's syncs."""
    events = syncs_and_renames(monkeypatch)
    fsync, threads = os.fsync, []

    def noted(fd):
        threads.append(threading.current_thread().name)
        fsync(fd)
    monkeypatch.setattr(os, "fsync", noted)
    path = tmp_path / "atomic.duckdb"
    w = Writer(path, RunInfo(source="kineto"), atomic=True)
    has_setting = w.query("SELECT count(*) FROM duckdb_settings() WHERE name = 'fsync_mode'")
    if has_setting == [(1,)]:   # DuckDB 1.x before the setting syncs as it always did
        assert w.query("SELECT current_setting('fsync_mode')") == [("NONE",)]
    w.append({"kernels": kernels(10, ["k"])})
    temp = str(w.path)
    w.close()
    assert events == [("fsync", temp), ("fsync", temp), ("replace", temp)]
    assert threads == ["cuptiprof-sync", threading.current_thread().name]
    del events[0]
    if has_setting == [(1,)]:
        with Writer(tmp_path / "inplace.duckdb", RunInfo(source="test")) as w:
            assert w.query("SELECT current_setting('fsync_mode')") == [("STANDARD",)]
        with Writer(tmp_path / "part.duckdb", RunInfo(source="test"), synced=False) as w:
            assert w.query("SELECT current_setting('fsync_mode')") == [("NONE",)]
    assert [e[0] for e in events] == ["fsync", "replace"]   # neither in-place file syncs at close


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_atomic_failure_leaves_nothing_behind(tmp_path, error):
    path = tmp_path / "atomic.duckdb"
    with pytest.raises(error):
        with Writer(path, atomic=True) as w:
            w.append({"kernels": kernels(10, ["k"])})
            raise error("import failed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_writer_whose_sync_fails_leaves_nothing_behind(tmp_path, monkeypatch):
    """The sync before the rename fails (EIO, a full disk): the error reaches the caller and
    neither the temporary file nor an output is left; an existing output is kept."""
    path = write_synthetic(tmp_path / "x.duckdb", steps=1, kernels_per_step=20)
    before = sorted(p.name for p in tmp_path.iterdir())
    old = rows(path, "SELECT count(*) FROM kernel_rows")

    def fsync(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", fsync)
    w = Writer(path, atomic=True, mode="overwrite")
    w.append({"kernels": kernels(3, ["k"])})
    with pytest.raises(OSError):
        w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert rows(path, "SELECT count(*) FROM kernel_rows") == old != [(3,)]   # the old file


def test_atomic_writer_whose_close_fails_leaves_nothing_behind(tmp_path, monkeypatch):
    """The last statements of close() fail (a full disk at the checkpoint): the error reaches
    the caller and the temporary file goes; an existing output is kept."""
    path = write_synthetic(tmp_path / "x.duckdb", steps=1, kernels_per_step=20)
    before = sorted(p.name for p in tmp_path.iterdir())
    _close_on_a_full_disk(Writer(path, atomic=True, mode="overwrite"), monkeypatch)
    assert sorted(p.name for p in tmp_path.iterdir()) == before



def test_a_ctrl_c_as_an_atomic_writer_closes_its_file_leaves_nothing_behind(tmp_path):
    """A Ctrl-C that lands as close() closes the connection (`cuptiprof import`, interrupted
    at its very end): the temporary file went neither into place nor away, and stayed beside
    the output as .OUT.tmp-PID. It goes; the interrupt reaches the caller."""
    w = Writer(tmp_path / "out.duckdb", atomic=True)
    w.append({"kernels": kernels(3, ["k"])})
    con = w._con

    class Interrupted:   # the connection, whose close() is followed by a Ctrl-C
        def __getattr__(self, name):
            return getattr(con, name)

        def close(self):
            con.close()
            raise KeyboardInterrupt

    w._con = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        w.close()
    assert list(tmp_path.iterdir()) == []

def test_a_writer_in_place_whose_close_fails_keeps_its_file(tmp_path, monkeypatch):
    """Only a temporary (atomic) file is removed when close() fails: a file written in place
    keeps every batch committed before."""
    path = tmp_path / "inplace.duckdb"
    _close_on_a_full_disk(Writer(path), monkeypatch)
    assert rows(path, "SELECT count(*) FROM kernel_rows") == [(3,)]


def _close_on_a_full_disk(w, monkeypatch):
    """Three kernels appended to `w`, then its close() failing at its last statements."""
    w.append({"kernels": kernels(3, ["k"])})

    def fail():
        raise duckdb.IOException("No space left on device")
    monkeypatch.setattr(w, "_write_busy", fail)
    with pytest.raises(duckdb.IOException):
        w.close()


def test_atomic_overwrite_keeps_the_old_file_until_the_end(tmp_path):
    path = write_synthetic(tmp_path / "x.duckdb", steps=1, kernels_per_step=20)
    w = Writer(path, atomic=True, mode="overwrite")
    assert rows(path, "SELECT count(*) FROM runs") == [(1,)]  # still the old file
    w.append({"kernels": kernels(3, ["k"])})
    w.close()
    assert rows(path, "SELECT count(*) FROM kernel_rows") == [(3,)]


def test_symlinked_output_is_refused(tmp_path):
    target = tmp_path / "real.duckdb"
    target.write_bytes(b"")
    link = tmp_path / "link.duckdb"
    link.symlink_to(target)
    for mode in ("create", "append", "overwrite"):
        with pytest.raises(InputError, match="symbolic link"):
            Writer(link, mode=mode)
    assert target.read_bytes() == b""
    dangling = tmp_path / "dangling.duckdb"
    dangling.symlink_to(tmp_path / "nowhere.duckdb")
    with pytest.raises(InputError, match="symbolic link"):
        Writer(dangling)
    assert not (tmp_path / "nowhere.duckdb").exists()


def test_missing_directory_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        Writer(tmp_path / "no" / "such" / "dir.duckdb")


def test_an_atomic_output_that_cannot_be_created_names_the_path_asked_for(tmp_path):
    """/proc passes the up-front check as root; the temporary file beside it cannot be created:
    the one line names the output given, not the temporary name."""
    if not os.access("/proc", os.W_OK):
        pytest.skip("/proc is refused up front when not root")
    with pytest.raises(StoreError) as err:
        Writer("/proc/cuptiprof-x.duckdb", atomic=True)
    assert str(err.value).startswith("/proc/cuptiprof-x.duckdb: cannot write (")
    assert ".tmp-" not in str(err.value) and "\n" not in str(err.value)
    Writer(tmp_path / "free.duckdb", atomic=True).close()


def test_closed_writer_refuses_appends(tmp_path):
    w = Writer(tmp_path / "c.duckdb")
    w.close()
    with pytest.raises(StoreError, match="closed"):
        w.append({"kernels": kernels(1, ["k"])})


def test_interrupted_status(tmp_path):
    path = tmp_path / "i.duckdb"
    with pytest.raises(KeyboardInterrupt):
        with Writer(path) as w:
            w.append({"kernels": kernels(3, ["k"])})
            raise KeyboardInterrupt
    assert rows(path, "SELECT status FROM runs") == [("interrupted",)]
    assert rows(path, "SELECT count(*) FROM kernel_rows") == [(3,)]


def test_synthetic_is_deterministic_and_realistic(tmp_path):
    a = list(synthetic_batches(steps=2, kernels_per_step=200, seed=5, devices=2))
    b = list(synthetic_batches(steps=2, kernels_per_step=200, seed=5, devices=2))
    assert all(x["kernels"].equals(y["kernels"]) for x, y in zip(a, b) if "kernels" in x)
    path = write_synthetic(tmp_path / "s.duckdb", steps=3, kernels_per_step=400, seed=1, devices=2)
    kinds = dict(rows(path, "SELECT kind, count(*) FROM gpu_activities GROUP BY kind"))
    assert set(kinds) == {"kernel", "memcpy", "memset", "sync"}
    assert {r[0] for r in rows(path, "SELECT DISTINCT copy_kind FROM memcpys")} == {"HtoD", "DtoH", "DtoD", "PtoP"}
    assert rows(path, "SELECT count(DISTINCT stream_id) FROM kernels")[0][0] >= 3
    assert rows(path, "SELECT count(DISTINCT name) FROM kernels")[0][0] > 100
    assert rows(path, "SELECT max(length(name)) FROM kernels")[0][0] > 150
    assert rows(path, "SELECT list(DISTINCT kind ORDER BY kind) FROM ranges") == [(["step", "user", "warmup"],)]


def test_appends_with_nulls_do_not_import_pandas():
    """The writer reads and fills NULLs with numpy: pyarrow's bool conversion and scalars import
    pandas (when installed), ~0.3 s inside an append."""
    import subprocess, sys
    code = ("import sys, numpy as np, pyarrow as pa\n"
            "from cuptiprof.store.arrow import valid as _valid\n"
            "from cuptiprof.store.distinct import _int_array\n"
            "ok = np.arange(35) % 5 % 2 == 0\n"
            "a = _int_array(np.arange(35, dtype=np.int32), valid=ok).slice(3)\n"
            "assert _valid(a).tolist() == ok[3:].tolist()\n"
            "full = _int_array(np.arange(2, dtype=np.int32))\n"
            "assert _valid(full).all() and not _valid(pa.nulls(3, pa.int32())).any()\n"
            "import tempfile, os\n"
            "from cuptiprof.store.writer import Writer\n"
            "with Writer(os.path.join(tempfile.mkdtemp(), 'a.duckdb')) as w:\n"
            "    w.append({'kernels': {'start_ns': full, 'end_ns': full, 'step': a.slice(0, 2),\n"
            "              'range_id': a.slice(1, 2), 'registers': a.slice(0, 2)}})\n"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_ctrl_c_inside_a_write_is_given_back_and_says_where_it_landed():
    """DuckDB turns a Ctrl-C inside a statement into an error; the writer raises the
    KeyboardInterrupt again, with a note (Python 3.11+) on why the traceback ends in cuptiprof."""
    import sys
    from cuptiprof.store.writer import _reraise_interrupt

    with pytest.raises(KeyboardInterrupt) as got:
        try:
            raise RuntimeError("Query interrupted")
        except RuntimeError:
            _reraise_interrupt()
    if sys.version_info >= (3, 11):
        assert "while cuptiprof was writing recorded data" in got.value.__notes__[0]


def _ctrl_c_on_kernel_inserts(monkeypatch, at: set) -> None:
    """A Ctrl-C inside the writer's transaction: the n-th insert into kernel_rows, for n in
    `at`, raises KeyboardInterrupt before it writes."""
    import cuptiprof.store.writer as W

    real_insert, calls = W._insert, []

    def insert(con, table, tbl, *order):
        if table == "kernel_rows":
            calls.append(table)
            if len(calls) in at:
                raise KeyboardInterrupt
        real_insert(con, table, tbl, *order)

    monkeypatch.setattr(W, "_insert", insert)


def test_a_batch_a_ctrl_c_rolled_back_is_written_by_close(tmp_path, monkeypatch):
    """The program stops as asked, and the rows of the stopped commit are not lost: close()
    (the collector's end) writes them; a Ctrl-C after the commit writes nothing twice."""
    import cuptiprof.store.writer as W

    path = tmp_path / "h.duckdb"
    real_insert = W._insert
    _ctrl_c_on_kernel_inserts(monkeypatch, {2})   # inside the second batch's transaction
    w = Writer(path)
    w.append({"kernels": kernels(2, ["a"])})
    with pytest.raises(KeyboardInterrupt):
        w.append({"kernels": kernels(3, ["b"])})
    assert w.query("SELECT count(*) FROM kernel_rows")[0] == (2,)
    w.close("interrupted")
    assert rows(path, "SELECT name, count(*) FROM kernels GROUP BY name ORDER BY name") == \
        [("a", 2), ("b", 3)]
    # after its commit: the rows are in once
    w = Writer(tmp_path / "c.duckdb")
    monkeypatch.setattr(W, "_insert", real_insert)
    monkeypatch.setattr(w._busy, "add", lambda work: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        w.append({"kernels": kernels(4, ["c"])})
    w.close("interrupted")
    assert rows(tmp_path / "c.duckdb", "SELECT count(*) FROM kernel_rows") == [(4,)]


def test_a_ctrl_c_right_after_the_commit_writes_nothing_twice(tmp_path):
    """The Ctrl-C lands after DuckDB committed but before COMMIT returned: the batch is in the
    file, so it is not held for another write (its rows would be there twice)."""
    path = tmp_path / "d.duckdb"
    w = Writer(path)

    class AfterCommit:   # the connection, with a Ctrl-C right after the first COMMIT
        def __init__(self, con):
            self.con, self.fired = con, False

        def execute(self, sql, *args):
            out = self.con.execute(sql, *args)
            if sql == "COMMIT" and not self.fired:
                self.fired = True
                raise KeyboardInterrupt
            return out

        def __getattr__(self, name):
            return getattr(self.con, name)

    real = w._con
    w._con = AfterCommit(real)
    with pytest.raises(KeyboardInterrupt):
        w.append({"kernels": kernels(3, ["k"])})
    w._con = real
    w.append({"kernels": kernels(2, ["j"])})
    w.close("interrupted")
    assert rows(path, "SELECT name, count(*) FROM kernels GROUP BY name ORDER BY name") == \
        [("j", 2), ("k", 3)]
    # the busy time stored at close counts the batch the Ctrl-C came after: k and j overlap
    assert rows(path, "SELECT busy_ns, start_ns, end_ns FROM step_busy") == [(1_500, 1_000, 3_500)]


def test_the_top_level_schema_is_the_packaged_one():
    """schemas/cuptiprof.sql (the documented schema, at the top of the repository) is the file
    the package creates its tables from, kept as a copy: the two never say different things."""
    root = Path(__file__).resolve().parents[1]
    assert (root / "schemas" / "cuptiprof.sql").read_text() == \
        (root / "cuptiprof" / "schemas" / "cuptiprof.sql").read_text()


def test_the_runs_row_says_what_run_info_gave(tmp_path):
    """runs holds the RunInfo the writer was given; a run without a label is named after the
    output file (the final name, also for a writer that writes under a temporary one)."""
    path = tmp_path / "given.duckdb"
    info = RunInfo(label="lbl", source="kineto", command="python train.py", host="node7",
                   start_ns=123_456, settings={"steps": 3}, cuda_driver_version="13.0",
                   cupti_version="cupti 26", torch_version="2.9")
    with Writer(path, info) as w:
        w.append({"kernels": kernels(2, ["k"])})
    assert rows(path, "SELECT run_id, label, source, command, host, start_ns, status, "
                      "cuda_driver_version, cupti_version, torch_version, settings FROM runs") == \
        [(1, "lbl", "kineto", "python train.py", "node7", 123_456, "complete", "13.0",
          "cupti 26", "2.9", '{"steps": 3}')]
    imported = tmp_path / "imported.duckdb"
    with Writer(imported, RunInfo(source="kineto"), atomic=True) as w:
        w.append({"kernels": kernels(2, ["k"])})
    assert rows(imported, "SELECT label FROM runs") == [("imported",)]


def test_older_schema_is_refused_for_appending_and_the_file_is_left_as_it_was(tmp_path):
    path = write_synthetic(tmp_path / "old.duckdb", steps=1, kernels_per_step=10)
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION - 1)])
    con.close()
    with pytest.raises(SchemaVersionError, match="older than") as err:
        Writer(path, mode="append")
    assert f"schema {SCHEMA_VERSION - 1}" in str(err.value)
    assert rows(path, "SELECT run_id, status FROM runs") == [(1, "complete")]
    Writer(path, mode="overwrite").close()   # the path is free again: no writer kept it


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, SCHEMA_VERSION - 1, None])
def test_an_atomic_append_refused_names_the_file_and_leaves_no_temporary(tmp_path, version):
    path = write_synthetic(tmp_path / "x.duckdb", steps=1, kernels_per_step=10)
    con = duckdb.connect(str(path))
    if version is None:
        con.execute("DELETE FROM meta WHERE key = 'schema_version'")
    else:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])
    con.close()
    with pytest.raises(StoreError) as err:
        Writer(path, mode="append", atomic=True)
    assert str(err.value).startswith(f"{path}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.duckdb"]
    assert rows(path, "SELECT run_id, status FROM runs") == [(1, "complete")]


def test_a_batch_a_ctrl_c_rolled_back_is_written_by_the_next_append(tmp_path, monkeypatch):
    """The rows a Ctrl-C rolled back go in with the next append, not only at close: a process
    killed later keeps them."""
    _ctrl_c_on_kernel_inserts(monkeypatch, {2})   # inside the second batch's transaction
    w = Writer(tmp_path / "h.duckdb")
    w.append({"kernels": kernels(2, ["a"])})
    with pytest.raises(KeyboardInterrupt):
        w.append({"kernels": kernels(3, ["b"])})
    w.append({"kernels": kernels(1, ["c"], t0=10**6)})
    assert w.query("SELECT name, count(*) FROM kernels GROUP BY name ORDER BY name") == \
        [("a", 2), ("b", 3), ("c", 1)]
    w.close()


def test_a_failing_busy_summary_leaves_reports_to_fold_the_rows(tmp_path, monkeypatch):
    """The busy summary is an optimisation: when it fails on a batch, nothing is stored for the
    run and the reports compute busy time from the rows (no partial sums)."""
    import cuptiprof.store.summary as S

    real_add, calls = S.BusySummary.add, []

    def add(self, parts):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("broken")
        real_add(self, parts)

    monkeypatch.setattr(S.BusySummary, "add", add)
    path = tmp_path / "b.duckdb"
    with Writer(path) as w:
        for i in range(3):
            w.append({"kernels": kernels(4, ["k"], t0=i * 10**6, step=i)})
    assert rows(path, "SELECT count(*) FROM step_busy_runs") == [(0,)]
    with cuptiprof.open(path) as prof:
        assert not prof.stored_busy
        assert prof.sql("SELECT sum(busy_ns) FROM sel_busy").fetchall() == [(3 * 4 * 500,)]


def test_run_status_names_the_run_and_status_how_writing_ended(tmp_path):
    """close(run_status=...) (an import of an exported run) sets runs.status; the writing itself
    ended well, so an atomic output is renamed into place."""
    path = tmp_path / "imp.duckdb"
    w = Writer(path, RunInfo(source="cuptiprof"), atomic=True)
    w.append({"kernels": kernels(2, ["k"])})
    assert w.close("complete", end_ns=9_000, start_ns=500, run_status="interrupted") == path
    assert rows(path, "SELECT status, start_ns, end_ns FROM runs") == [("interrupted", 500, 9_000)]


def test_kernel_ids_given_as_null_are_stored_as_0_and_read_as_null(tmp_path):
    """kernel_rows stores 'no range' / 'no op' as 0 (see the schema); the views say NULL."""
    path = tmp_path / "r.duckdb"
    with Writer(path) as w:
        w.append({"kernels": dict(kernels(3, ["k"]), range_id=pa.array([4, None, 6], pa.int64()),
                                  op_id=pa.array([None, None, 9], pa.int64()))})
        w.append({"kernels": kernels(1, ["k"], t0=10**6)})
    assert rows(path, "SELECT range_id, op_id FROM kernel_rows ORDER BY start_ns") == \
        [(4, 0), (0, 0), (6, 9), (0, 0)]
    assert rows(path, "SELECT range_id, op_id FROM kernels ORDER BY start_ns") == \
        [(4, None), (None, None), (6, 9), (None, None)]


def test_a_kernel_name_first_seen_as_a_range_or_api_name_is_demangled(tmp_path):
    """Strings are interned once for every table: a mangled name recorded first as a range
    (or API call) name and then as a kernel's still reads demangled in the kernels view."""
    from cuptiprof.store.demangle import demangle

    path, other = tmp_path / "d.duckdb", GEMM + "x"
    with Writer(path) as w:
        w.append({"ranges": {"name": [GEMM], "range_id": [1], "kind": ["user"], "step": [0],
                             "start_ns": [0], "end_ns": [10**6]}})
        w.append({"api_calls": {"name": [other], "start_ns": [1], "end_ns": [2]},
                  "kernels": kernels(2, [other])})
        w.append({"kernels": kernels(2, [GEMM], t0=10**6)})
    assert demangle(GEMM) and demangle(other) and demangle(GEMM) != demangle(other)
    assert rows(path, "SELECT DISTINCT name, demangled FROM kernels ORDER BY 1") == \
        [(GEMM, demangle(GEMM)), (other, demangle(other))]
    assert rows(path, "SELECT DISTINCT name FROM ranges") == [(GEMM,)]   # names as recorded


def test_quality_facts_name_the_process_given_or_the_writers(tmp_path):
    path = tmp_path / "q.duckdb"
    with Writer(path, pid=11) as w:
        w.add_quality("dropped_records", None, 3, "CUPTI dropped 3 activity records")
        w.add_quality("dropped_records", "gpu", 5, "CUPTI dropped 5 activity records", pid=42)
    assert rows(path, "SELECT pid, subject, count FROM data_quality ORDER BY pid") == \
        [(11, None, 3), (42, "gpu", 5)]


@pytest.mark.parametrize("error", [
    duckdb.InvalidInputException("Python exception occurred while reading: KeyboardInterrupt"),
    pa.ArrowCancelled("Operation cancelled"),
])
def test_a_ctrl_c_that_duckdb_or_pyarrow_reported_as_an_error_is_given_back(error):
    """A Ctrl-C while DuckDB reads a registered batch, or inside a pyarrow call, comes back as
    their error; also when a later statement (the ROLLBACK) raised another one after it."""
    from cuptiprof.store.writer import _reraise_interrupt

    with pytest.raises(KeyboardInterrupt):
        try:
            raise error
        except Exception:
            _reraise_interrupt()
    with pytest.raises(KeyboardInterrupt):
        try:
            try:
                raise error
            except Exception:
                raise duckdb.TransactionException("cannot rollback")
        except Exception:
            _reraise_interrupt()
    try:   # any other error is left to the caller
        raise duckdb.InvalidInputException("bad input")
    except Exception:
        _reraise_interrupt()


def test_before_rename_sees_the_closed_file_and_a_failure_there_leaves_nothing(tmp_path):
    path = tmp_path / "imp.duckdb"
    seen = []

    def last_change(tmp):
        assert not path.exists()
        con = duckdb.connect(str(tmp))
        con.execute("UPDATE runs SET label = 'restored'")
        con.close()
        seen.append(tmp)

    w = Writer(path, RunInfo(source="kineto"), atomic=True)
    w.append({"kernels": kernels(2, ["k"])})
    assert w.close(before_rename=last_change) == path
    assert len(seen) == 1 and seen[0] != path and not seen[0].exists()
    assert rows(path, "SELECT label FROM runs") == [("restored",)]

    def broken(tmp):
        raise ValueError("cannot restore")
    w = Writer(tmp_path / "other.duckdb", RunInfo(source="kineto"), atomic=True)
    w.append({"kernels": kernels(2, ["k"])})
    with pytest.raises(ValueError, match="cannot restore"):
        w.close(before_rename=broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imp.duckdb"]


def test_record_batches_go_in_whole(tmp_path):
    path = tmp_path / "rb.duckdb"
    with Writer(path) as w:
        w.append({"kernels": pa.RecordBatch.from_pydict(kernels(5, ["a", "b"]))})
    assert rows(path, "SELECT name, count(*) FROM kernels GROUP BY name ORDER BY name") == \
        [("a", 3), ("b", 2)]


def test_an_atomic_append_keeps_the_runs_already_there(tmp_path):
    path = write_synthetic(tmp_path / "x.duckdb", steps=1, kernels_per_step=20)
    before = rows(path, "SELECT count(*) FROM kernel_rows")[0][0]
    w = Writer(path, RunInfo(source="kineto"), mode="append", atomic=True)
    w.append({"kernels": kernels(3, ["k"])})
    assert rows(path, "SELECT count(*) FROM runs") == [(1,)]   # the file is untouched until close
    w.close()
    assert rows(path, "SELECT run_id, count(*) FROM kernels GROUP BY run_id ORDER BY 1") == \
        [(1, before), (2, 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.duckdb"]


def test_a_combination_first_seen_late_in_a_large_batch_keeps_its_values(tmp_path):
    """A launch configuration, or a stream, that first occurs far into a large batch is stored
    with its own values."""
    path = tmp_path / "late.duckdb"
    n = 10_000
    grid, stream = np.ones(n, np.int32), np.full(n, 7, np.int32)
    grid[6_000], stream[7_000] = 5, 9
    with Writer(path) as w:
        w.append({"kernels": dict(kernels(n, ["k"]), grid_x=grid, stream_id=stream)})
    assert rows(path, "SELECT start_ns, grid_x, stream_id FROM kernels "
                      "WHERE grid_x <> 1 OR stream_id <> 7 ORDER BY start_ns") == \
        [(1_000 + 6_000 * 1_000, 5, 7), (1_000 + 7_000 * 1_000, 1, 9)]


def test_a_null_name_slot_may_hold_any_index(tmp_path):
    """Arrow leaves the index under a NULL slot undefined: whatever it holds, the row's name is
    NULL and the others keep theirs."""
    path = tmp_path / "n.duckdb"
    valid = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little").tobytes())
    at = pa.Array.from_buffers(pa.int32(), 3, [valid, pa.py_buffer(np.array([0, 99, 1], np.int32).tobytes())],
                               null_count=1)
    names = pa.DictionaryArray.from_arrays(at, pa.array(["a", "b"]))
    with Writer(path) as w:
        w.append({"kernels": {"start_ns": [1, 2, 3], "end_ns": [2, 3, 4], "name": names}})
    assert rows(path, "SELECT start_ns, name FROM kernels ORDER BY start_ns") == \
        [(1, "a"), (2, None), (3, "b")]
    # stored as NULL (no name, so no launch configuration), not as an id no string has
    assert rows(path, "SELECT start_ns, config_id IS NULL FROM kernel_rows ORDER BY start_ns") == \
        [(1, False), (2, True), (3, False)]


def test_a_ctrl_c_while_a_held_batch_is_written_again_loses_no_batch(tmp_path, monkeypatch):
    """A second Ctrl-C lands while the next append writes the held batch again: both that batch
    and the one being appended are held, and close() writes them in order."""
    _ctrl_c_on_kernel_inserts(monkeypatch, {2, 3})   # the second batch, then its second try
    path = tmp_path / "h.duckdb"
    w = Writer(path)
    w.append({"kernels": kernels(2, ["a"])})
    for batch in (kernels(3, ["b"], t0=10**6), kernels(4, ["c"], t0=10**7)):
        with pytest.raises(KeyboardInterrupt):
            w.append({"kernels": batch})
    w.close("interrupted")
    assert rows(path, "SELECT name, count(*), min(start_ns) FROM kernels GROUP BY name ORDER BY 3") == \
        [("a", 2, 1_000), ("b", 3, 10**6), ("c", 4, 10**7)]


def test_a_writer_closed_inside_its_with_block_closes_once(tmp_path):
    """close() then the end of the `with` block: the second close does nothing (an atomic
    output renamed into place stays there)."""
    path = tmp_path / "twice.duckdb"
    with Writer(path, RunInfo(source="kineto"), atomic=True) as w:
        w.append({"kernels": kernels(2, ["k"])})
        assert w.close() == path
    assert w.close() == path
    assert rows(path, "SELECT status, count(*) FROM runs GROUP BY ALL") == [("complete", 1)]
    assert rows(path, "SELECT count(*) FROM kernels") == [(2,)]


def test_a_ctrl_c_while_close_writes_a_held_batch_still_closes_the_run(tmp_path, monkeypatch):
    """A Ctrl-C lands while close() writes a held batch again: the KeyboardInterrupt still
    reaches the program, but the file keeps every committed batch, the run says
    'interrupted' (not 'running') and the path is free for another writer in this process."""
    _ctrl_c_on_kernel_inserts(monkeypatch, {2, 3})   # the second batch, then close's retry
    path = tmp_path / "held.duckdb"
    w = Writer(path)
    w.append({"kernels": kernels(2, ["a"])})
    with pytest.raises(KeyboardInterrupt):
        w.append({"kernels": kernels(3, ["b"], t0=10**6)})
    with pytest.raises(KeyboardInterrupt):
        w.close("complete")
    assert w.close() == path   # closed once: nothing more to do
    assert rows(path, "SELECT status FROM runs") == [("interrupted",)]
    assert rows(path, "SELECT name, count(*) FROM kernels GROUP BY name") == [("a", 2)]
    Writer(path, mode="append").close()   # the path was released
    assert rows(path, "SELECT run_id, status FROM runs ORDER BY 1") == \
        [(1, "interrupted"), (2, "complete")]


def test_a_ctrl_c_on_closes_status_update_still_marks_the_run_interrupted(tmp_path):
    """A Ctrl-C stops close()'s own UPDATE of the runs row: the row still says 'interrupted'
    (not 'running', which reads as a writer that died) and the KeyboardInterrupt goes on."""
    path = tmp_path / "mark.duckdb"
    w = Writer(path)
    w.append({"kernels": kernels(2, ["a"])})

    class StopOnUpdate:   # the connection, with a Ctrl-C before the first UPDATE runs
        def __init__(self, con):
            self.con, self.fired = con, False

        def execute(self, sql, *args):
            if sql.startswith("UPDATE runs") and not self.fired:
                self.fired = True
                raise KeyboardInterrupt
            return self.con.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.con, name)

    w._con = StopOnUpdate(w._con)
    with pytest.raises(KeyboardInterrupt):
        w.close("complete")
    assert rows(path, "SELECT status FROM runs") == [("interrupted",)]
    assert rows(path, "SELECT count(*) FROM kernels") == [(2,)]
    Writer(path, mode="append").close()


@pytest.mark.parametrize("edit, says", [
    ("ALTER TABLE kernel_rows DROP COLUMN start_ns", "kernel_rows has no column start_ns"),
    ("DROP TABLE launch_configs", "no launch_configs"),
    ("DROP TABLE logs", "no logs"),
    ("ALTER TABLE kernel_rows ALTER COLUMN end_ns TYPE VARCHAR", "kernel_rows.end_ns is VARCHAR"),
])
def test_append_to_a_file_edited_by_hand_is_refused_before_anything_is_written(tmp_path, edit,
                                                                                 says):
    """mode='append' to a file whose tables were edited in DuckDB: the first batch failed on
    them (a ValueError, a CatalogException), or a run was added to a file no report reads."""
    path = tmp_path / "edited.duckdb"
    write_synthetic(path, steps=1, kernels_per_step=10)
    with duckdb.connect(str(path)) as con:
        con.execute(edit)
    before = path.read_bytes()
    with pytest.raises(StoreError, match=rf"edited\.duckdb: not a complete cuptiprof file \({says}"):
        Writer(path, RunInfo(source="synthetic"), mode="append")
    assert path.read_bytes() == before
    with duckdb.connect(str(path)) as con:   # nothing holds it open
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)
