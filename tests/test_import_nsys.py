"""Nsight Systems SQLite import, checked against the per-interval CSV published with the
CloverLeaf export, the older 2.9.1 schema, NVTX projection and bad input."""
from __future__ import annotations

import csv
import shutil
import sqlite3
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from cuptiprof.interop.importing import import_traces

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "pipit-nsys"
CLOVER = SHARED / "cloverleaf-nsys" / "perlmutter-cloverleaf-cuda.sqlite"
SAXPY = SHARED / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


def imported(tmp_path_factory, src: Path):
    if not src.exists():
        pytest.skip("../shared/traces is not present")
    base = tmp_path_factory.getbasetemp() / "imported"
    base.mkdir(exist_ok=True)
    out = base / (src.name + ".duckdb")
    if not out.exists():
        import_traces([src], out)
    return duckdb.connect(str(out), read_only=True)


@pytest.fixture(scope="module")
def clover(tmp_path_factory):
    return imported(tmp_path_factory, CLOVER)


def test_cloverleaf_per_name_sums_equal_published_csv(clover):
    expected = defaultdict(lambda: [0, 0])
    with open(CLOVER.parent / "cloverleaf_gpu_trace.csv") as fh:
        for row in csv.DictReader(fh):
            if row["Event Type"] == "Enter":
                e = expected[(row["type"], row["Name"])]
                e[0] += 1
                e[1] += int(row["_matching_timestamp"]) - int(row["Timestamp (ns)"])
    # the CSV names kernels by nsys's short name; map the recorded (mangled) name to it
    db = sqlite3.connect(f"file:{CLOVER}?mode=ro", uri=True)
    short = dict(db.execute("""SELECT m.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds m ON m.id = k.mangledName JOIN StringIds s ON s.id = k.shortName"""))
    got = defaultdict(lambda: [0, 0])
    for name, n, d in clover.execute(
            "SELECT name, count(*), sum(end_ns - start_ns) FROM kernels GROUP BY name").fetchall():
        g = got[("kernel", short[name])]
        g[0] += n
        g[1] += d
    for kind, n, d in clover.execute(
            "SELECT copy_kind, count(*), sum(end_ns - start_ns) FROM memcpys GROUP BY 1").fetchall():
        got[(f"CUDA_MEMCPY_KIND_{kind.upper()}", f"CUDA_MEMCPY_KIND_{kind.upper()}")] = [n, d]
    assert dict(got) == dict(expected)
    assert clover.execute("SELECT count(*) FROM kernels").fetchone()[0] == 1312


def test_cloverleaf_metadata(clover):
    assert clover.execute("SELECT name, compute_capability, sm_count FROM devices").fetchall() \
        == [("NVIDIA A100-SXM4-80GB", "8.0", 108)]
    assert clover.execute("SELECT pid, command FROM processes").fetchall() == [(1701896, "cuda-cloverleaf")]
    # host from TARGET_INFO_SYSTEM_ENV; rank from the environment nsys ran in (srun: PMI_RANK=0,
    # PMI_SIZE=1, SLURM_LOCALID=0)
    assert clover.execute("SELECT host, rank, local_rank, world_size FROM processes").fetchall() \
        == [("nid008553", 0, 0, 1)]
    assert clover.execute("SELECT count(*), count(DISTINCT sync_type) FROM syncs").fetchone() == (1312, 1)
    # its event syncs name no event (eventId 0xFFFFFFFF, CUPTI's "none"): NULL, not 4294967295
    assert clover.execute("SELECT count(cuda_event_id) FROM syncs").fetchone() == (0,)
    # every kernel has its launching runtime call
    assert clover.execute("""SELECT count(*) FROM kernels k LEFT JOIN api_calls c
        ON c.correlation_id = k.correlation_id AND c.pid = k.pid WHERE c.name IS NULL""").fetchone()[0] == 0
    assert clover.execute("SELECT source FROM runs").fetchone() == ("nsys",)
    # no NVTX step ranges: the file says its rows carry no step, under the trace's process
    assert clover.execute("SELECT check_name, subject, pid FROM data_quality").fetchall() == \
        [("missing_kind", "step", 1701896)]


def test_old_schema_and_nvtx_projection(tmp_path_factory):
    con = imported(tmp_path_factory, SAXPY)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 5
    assert con.execute("SELECT copy_kind, count(*) FROM memcpys GROUP BY 1 ORDER BY 1").fetchall() \
        == [("DtoH", 5), ("HtoD", 10)]
    # each saxpy kernel was launched inside the NVTX range "saxpy" on the launching thread
    assert con.execute("""SELECT r.name, count(*) FROM kernels k JOIN ranges r
        ON r.pid = k.pid AND r.range_id = k.range_id GROUP BY 1""").fetchall() == [("saxpy", 5)]
    assert con.execute("SELECT count(*) FROM ranges WHERE name = 'MPI_Send'").fetchone()[0] == 10
    # host and rank from the environment nsys ran in (2.9.1 separates it with NUL characters:
    # PMI_RANK=0, PMI_SIZE=2, SLURM_LOCALID=0)
    assert con.execute("SELECT host, rank, local_rank, world_size FROM processes").fetchall() \
        == [("nid001608", 0, 0, 2)]


def test_rank_from_the_file_name_and_an_export_without_system_env(tmp_path):
    """An export without TARGET_INFO_SYSTEM_ENV (older nsys, or stripped) still imports; its
    rank comes from a file name such as report_rank3.sqlite."""
    import shutil
    if not SAXPY.exists():
        pytest.skip("../shared/traces is not present")
    src = tmp_path / "job_rank3.sqlite"
    shutil.copy(SAXPY, src)
    with sqlite3.connect(src) as db:
        db.execute("DROP TABLE TARGET_INFO_SYSTEM_ENV")
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT host, rank FROM processes").fetchall() == [(None, 3)]
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 5


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "cuptiprof", *map(str, args)],
                          capture_output=True, text=True)


def nsys_export(path: Path, pid: int = 4242, launches=(), ranges=(), env: str | None = None) -> Path:
    """A small export with the tables and columns the importer reads, one process.

    launches: (thread, call start, call end, kernel start, kernel end[, pid]), one
    cudaLaunchKernel and its kernel each; ranges: (thread, start, end, eventType, text).
    """
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, deviceId INTEGER,
            contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
            mangledName INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, "end" INTEGER, globalTid INTEGER,
            correlationId INTEGER, nameId INTEGER, returnValue INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, eventType INTEGER, text TEXT,
            globalTid INTEGER, textId INTEGER, domainId INTEGER);
        CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
        CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT);
        INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel'), (2, 'saxpy_kernel');""")
    # sized so that StringIds spans pages of its own
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, f"unused string {i}" * 8)
                                                           for i in range(3, 200)])
    gpid = pid << 24
    for corr, (tid, cs, ce, ks, ke, *other) in enumerate(launches, 1):
        g = other[0] << 24 if other else gpid   # a launch of another process of the export
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 1, 0)",
                   [cs, ce, g | tid, corr])
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, 2)",
                   [ks, ke, corr, g])
    db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, NULL, NULL)",
                   [(s, e, typ, text, gpid | tid) for tid, s, e, typ, text in ranges])
    db.execute("INSERT INTO PROCESSES VALUES (?, ?, 'app')", [gpid, pid])
    if env is not None:
        db.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('DeviceEnvironment', ?)", [env])
    db.commit()
    db.close()
    return path


def corrupt_table(path: Path, table: str) -> None:
    """Overwrite the first page of `table` with garbage, as a damaged disk or copy would."""
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", [table]).fetchone()[0]
    db.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xff" * page_size)


def test_sqlite_that_is_not_an_nsys_export(tmp_path):
    src = tmp_path / "other.sqlite"
    db = sqlite3.connect(src)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    r = run_cli("import", src, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and str(src) in r.stderr and "not an Nsight Systems export" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]


def test_corrupt_sqlite(tmp_path):
    src = tmp_path / "bad.sqlite"
    src.write_bytes(b"SQLite format 3\x00" + b"\xff" * 2000)
    r = run_cli("import", src, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2 and str(src) in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o.duckdb").exists()


@pytest.mark.parametrize("table, column, value, says", [
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid", None, "NULL"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid", "abc", "the text 'abc'"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "start", None, "NULL"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "end", None, "NULL"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", "x", "the text 'x'"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "returnValue", "x", "the text 'x'"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "start", "x", "the text 'x'"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "end", None, "NULL"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId", None, "NULL"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "streamId", "x", "the text 'x'"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid", "x", "the text 'x'"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "mangledName", "x", "the text 'x'"),
    ("NVTX_EVENTS", "globalTid", None, "NULL"),
    ("NVTX_EVENTS", "start", None, "NULL"),
    ("NVTX_EVENTS", "end", "x", "the text 'x'"),
])
def test_a_value_of_the_wrong_type_is_named(tmp_path, table, column, value, says):
    """A value no importer could read (a NULL thread or time, text where an integer belongs)
    is named with its table, row and column, not as Python's own TypeError."""
    src = nsys_export(tmp_path / "bad.sqlite", launches=_launches(3),
                      ranges=[(7, 990, 1150, 59, "step 0"), (7, 1150, 1300, 59, "step 1")])
    with sqlite3.connect(src) as db:
        db.execute(f'UPDATE {table} SET "{column}" = ? WHERE rowid = 2', [value])
    r = run_cli("import", src, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"cuptiprof: error: {src}: {table} rowid 2: {column} is {says}, where an "
                        "integer belongs; the export is damaged or was edited: export it again "
                        "(nsys export --type sqlite REPORT.nsys-rep)\n")
    assert not (tmp_path / "o.duckdb").exists()


def _launches(n, t0=1000, tid=7):
    return [(tid, t0 + i * 100, t0 + i * 100 + 10, t0 + i * 100 + 20, t0 + i * 100 + 60)
            for i in range(n)]


@pytest.mark.parametrize("order", [0, 1])
def test_files_whose_processes_share_a_pid_stay_apart(tmp_path, order):
    """Nodes and containers reuse pids: each file's process keeps its own rows, ranges and
    launch links, whatever the order of the files."""
    # node0: 3 launches inside 'saxpy' ranges; node1: 4 launches, no NVTX at all
    node0 = nsys_export(tmp_path / "node0.sqlite", launches=_launches(3), ranges=[
        (7, 1000 + i * 100 - 5, 1000 + i * 100 + 15, 59, "saxpy") for i in range(3)])
    node1 = nsys_export(tmp_path / "node1.sqlite", launches=_launches(4))
    out = tmp_path / "o.duckdb"
    import_traces([node0, node1] if order == 0 else [node1, node0], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT count(*), count(range_id) FROM kernels").fetchone() == (7, 3)
    assert con.execute("SELECT count(*), count(DISTINCT pid) FROM processes").fetchone() == (2, 2)
    # the process written under another pid keeps its command from PROCESSES
    assert con.execute("SELECT command FROM processes").fetchall() == [("app",), ("app",)]
    # every process: its own kernels, each linked to its own launch and range
    per_pid = con.execute("""SELECT count(*), count(r.name) FROM kernels k
        JOIN api_calls c ON c.pid = k.pid AND c.correlation_id = k.correlation_id
        LEFT JOIN ranges r ON r.pid = k.pid AND r.range_id = k.range_id
        GROUP BY k.pid ORDER BY 1""").fetchall()
    assert per_pid == [(3, 3), (4, 0)]


def test_range_ids_of_files_sharing_a_pid_do_not_collide(tmp_path):
    """Two traces with one pid: each range is credited with its own file's launches only."""
    a = nsys_export(tmp_path / "a.sqlite", launches=_launches(2), ranges=[
        (7, 990, 1200, 59, "saxpy")])
    b = nsys_export(tmp_path / "b.sqlite", launches=_launches(5), ranges=[
        (7, 990, 1020, 59, "setup"), (7, 1090, 1600, 59, "saxpy")])
    out = tmp_path / "o.duckdb"
    import_traces([a, b], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT r.name, count(*) FROM kernels k JOIN ranges r
        ON r.pid = k.pid AND r.range_id = k.range_id GROUP BY 1 ORDER BY 1""").fetchall() \
        == [("saxpy", 6), ("setup", 1)]
    assert con.execute("SELECT count(*) FROM ranges").fetchone()[0] == 3


def test_copies_of_one_real_export_as_two_nodes(tmp_path):
    import shutil
    if not SAXPY.exists():
        pytest.skip("../shared/traces is not present")
    node0, node1 = tmp_path / "node0.sqlite", tmp_path / "node1.sqlite"
    shutil.copy(SAXPY, node0)
    shutil.copy(SAXPY, node1)
    with sqlite3.connect(node1) as db:
        db.execute("DROP TABLE NVTX_EVENTS")
    got = []
    for i, files in enumerate(([node0, node1], [node1, node0])):
        import_traces(files, tmp_path / f"{i}.duckdb")
        con = duckdb.connect(str(tmp_path / f"{i}.duckdb"), read_only=True)
        got.append((con.execute("SELECT count(*), count(range_id) FROM kernels").fetchone(),
                    con.execute("SELECT count(DISTINCT pid), count(*) FROM processes").fetchone()))
    assert got == [((10, 5), (2, 2))] * 2


def test_summary_counts_input_files_not_processes(tmp_path):
    two = nsys_export(tmp_path / "two.sqlite", launches=[(7, 100, 110, 120, 200),
                                                         (8, 300, 310, 320, 400, 5151)])
    one = nsys_export(tmp_path / "one.sqlite", pid=6161, launches=_launches(1))
    r = run_cli("import", two, one, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("cuptiprof: imported 2 files (nsys, 3 processes): 3 kernels,"), r.stderr
    # an export without any GPU activity is still one file read
    empty = nsys_export(tmp_path / "empty.sqlite")
    r = run_cli("import", empty, "-o", tmp_path / "e.duckdb")
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("cuptiprof: imported 1 file (nsys, 0 processes): 0 kernels,"), r.stderr
    r = run_cli("import", empty, two, "-o", tmp_path / "e2.duckdb")
    assert r.stderr.startswith("cuptiprof: imported 2 files (nsys, 2 processes): 2 kernels,"), r.stderr


def test_start_end_range_is_credited_only_with_work_launched_inside_it(tmp_path):
    """A start/end range ('upload') that closes after a push/pop range ('saxpy') opened inside
    it is not that range's parent, and launches after it closed are not its own."""
    src = nsys_export(tmp_path / "se.sqlite", launches=[
        (7, 950, 955, 960, 990),       # inside upload only
        (7, 1010, 1015, 1020, 1100),   # inside saxpy, after upload ended
        (8, 960, 965, 1200, 1210),     # another thread, while upload is open on thread 7
    ], ranges=[
        (7, 0, 5000, 59, "outer"),     # push/pop around everything on thread 7
        (7, 920, 1003, 60, "upload"),  # start/end
        (7, 1000, 1100, 59, "saxpy"),  # push/pop, opened before upload ended
    ])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT r.name, p.name, r.depth FROM ranges r LEFT JOIN ranges p
        ON p.pid = r.pid AND p.range_id = r.parent_id ORDER BY r.start_ns""").fetchall() == [
        ("outer", None, 0), ("upload", "outer", 1), ("saxpy", "outer", 1)]
    assert con.execute("""SELECT k.start_ns, r.name FROM kernels k LEFT JOIN ranges r
        ON r.pid = k.pid AND r.range_id = k.range_id ORDER BY 1""").fetchall() == [
        (960, "upload"), (1020, "saxpy"), (1200, None)]
    r = run_cli("report", out, "--by", "range", "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = {row["range"]: row for row in csv.DictReader(r.stdout.splitlines())}
    assert {k: int(v["gpu_calls"]) for k, v in rows.items()} == {"outer": 2, "upload": 1, "saxpy": 1}


def test_start_end_range_without_push_pop_around(tmp_path):
    """Overlapping start/end ranges on their own: a call belongs to the latest-started one
    that holds it, and none of them is another's parent."""
    src = nsys_export(tmp_path / "se.sqlite", launches=_launches(3, t0=1000), ranges=[
        (7, 990, 1150, 71, "a"), (7, 1050, 1400, 60, "b")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT name, parent_id, depth FROM ranges ORDER BY name").fetchall() == [
        ("a", None, 0), ("b", None, 0)]
    assert con.execute("""SELECT r.name FROM kernels k LEFT JOIN ranges r
        ON r.pid = k.pid AND r.range_id = k.range_id ORDER BY k.start_ns""").fetchall() == [
        ("a",), ("b",), ("b",)]


@pytest.mark.parametrize("table", ["StringIds", "CUPTI_ACTIVITY_KIND_KERNEL",
                                   "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "PROCESSES",
                                   "TARGET_INFO_SYSTEM_ENV"])
def test_damaged_page_in_any_table_is_one_line(tmp_path, table):
    src = nsys_export(tmp_path / "bad.sqlite", launches=[(1, 100, 110, 120, 200)],
                      ranges=[(1, 90, 115, 59, "step 0")], env="PMI_RANK=0")
    import_traces([src], tmp_path / "good.duckdb")   # readable before the damage
    corrupt_table(src, table)
    r = run_cli("import", src, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and str(src) in r.stderr and "malformed" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o.duckdb").exists()


def test_unknown_file_and_mixed_inputs(tmp_path):
    src = tmp_path / "x.bin"
    src.write_bytes(b"\x00\x01binary")
    r = run_cli("import", src, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2 and "not a torch.profiler trace" in r.stderr
    j = tmp_path / "t.json"
    j.write_text('{"traceEvents": []}')
    s = tmp_path / "s.sqlite"
    sqlite3.connect(s).execute("CREATE TABLE StringIds (id, value)").connection.commit()
    r = run_cli("import", j, s, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2 and "separate" in r.stderr
    # a cuptiprof file needs no import: the line says what to do with it instead
    from cuptiprof.synthetic import write_synthetic
    d = write_synthetic(tmp_path / "run.duckdb", steps=1, kernels_per_step=2)
    r = run_cli("import", d, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"cuptiprof: error: {d}: a DuckDB file, not a trace; a cuptiprof file needs no import: "
        f"read it as it is (cuptiprof report {d}), or combine files with cuptiprof merge")
    assert not (tmp_path / "o.duckdb").exists()
    # another program's DuckDB file: `cuptiprof report` would refuse it, so the line does not
    # send the user there
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE t (a INT)").close()
    r = run_cli("import", other, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"cuptiprof: error: {other}: a DuckDB file, but neither a trace nor a cuptiprof file; "
        "import reads torch.profiler traces (.json/.json.gz) and Nsight Systems SQLite exports "
        "(nsys export --type sqlite)")
    assert not (tmp_path / "o.duckdb").exists()


def test_a_process_without_gpu_work_is_a_process_of_the_file(tmp_path):
    """A process of the export with NVTX ranges and API calls but no GPU work (a helper the
    profiled rank started) gets its processes row, with no rank of its own; the rank stays the
    GPU process's, and each process's span holds its first and last record, host ones too."""
    src = nsys_export(tmp_path / "r.sqlite", launches=_launches(3), env="PMI_RANK=5;PMI_SIZE=8",
                      ranges=[(7, 900, 1500, 59, "step 0")])
    with sqlite3.connect(src) as db:
        g = 5151 << 24
        db.execute("INSERT INTO NVTX_EVENTS VALUES (500, 2000, 59, 'loader', ?, NULL, NULL)", [g | 9])
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (600, 650, ?, 99, 1, 0)", [g | 9])
        db.execute("INSERT INTO PROCESSES VALUES (?, 5151, 'worker')", [g])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT pid, command, rank, world_size, start_ns, end_ns FROM processes "
                       "ORDER BY pid").fetchall() == [(4242, "app", 5, 8, 900, 1500),
                                                      (5151, "worker", None, None, 500, 2000)]
    assert con.execute("SELECT pid, count(*) FROM ranges GROUP BY 1 ORDER BY 1").fetchall() == \
        [(4242, 1), (5151, 1)]


def test_a_syncs_cuda_event_is_kept_and_cuptis_none_is_null(tmp_path):
    """A sync's eventId is the CUDA event it waited on; CUPTI's "no event" (0xFFFFFFFF, on syncs
    of other types) is NULL, as the collector stores it, not 4294967295."""
    src = nsys_export(tmp_path / "s.sqlite", launches=_launches(1))
    with sqlite3.connect(src) as db:
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER, \"end\" INTEGER, "
                   "deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
                   "globalPid INTEGER, syncType INTEGER, eventId INTEGER)")
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?, ?, 0, 1, ?, ?, ?, ?, ?)",
                       [(2000, 2100, 7, 90, 4242 << 24, 1, 5),
                        (2200, 2300, 7, 91, 4242 << 24, 2, 0xFFFFFFFE),
                        (2400, 2500, None, 92, 4242 << 24, 4, 0xFFFFFFFF)])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT sync_type, stream_id, cuda_event_id FROM syncs ORDER BY start_ns"
                           ).fetchall() == [("event_synchronize", 7, 5),
                                            ("stream_wait_event", 7, 0xFFFFFFFE),
                                            ("context_synchronize", None, None)]


def test_nvtx_domains_are_per_process(tmp_path):
    """A domain id names the domain its own process created: two processes of one export that
    both number their first domain 1 keep their own names (destroying a domain later does not
    unname its ranges); the default domain has none."""
    src = nsys_export(tmp_path / "dom.sqlite")
    a, b = 4242 << 24 | 7, 5151 << 24 | 9
    with sqlite3.connect(src) as db:
        db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, NULL, ?)", [
            (10, None, 75, "MPI", a, 1), (20, None, 75, "NCCL", b, 1), (900, None, 76, None, a, 1),
            (100, 200, 59, "send", a, 1), (150, 250, 59, "allreduce", b, 1),
            (300, 400, 59, "plain", a, 0), (300, 400, 60, "plain", b, 0)])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT pid, name, domain FROM ranges ORDER BY start_ns, pid").fetchall() == [
        (4242, "send", "MPI"), (5151, "allreduce", "NCCL"), (4242, "plain", None), (5151, "plain", None)]


def add_table(path: Path, table: str, cols: str, rows) -> None:
    """Create `table` (cols: its column list, as SQL) in an export and insert `rows`."""
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE {table} ({cols})")
        if rows:
            db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)


# the ENUM_* tables of schema 3.x exports, as nsys writes them (2.x has none)
COPY_ENUM = ["UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA", "DTOD", "HTOH",
             "PTOP", "UVM_HTOD", "UVM_DTOH", "UVM_DTOD"]
MEM_ENUM = ["PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED", "DEVICE_STATIC", "MANAGED_STATIC",
            "UNKNOWN"]
SYNC_ENUM = ["UNKNOWN", "EVENT_SYNCHRONIZE", "STREAM_WAIT_EVENT", "STREAM_SYNCHRONIZE",
             "CONTEXT_SYNCHRONIZE"]


def add_enums(path: Path) -> None:
    for table, prefix, names in (("ENUM_CUDA_MEMCPY_OPER", "CUDA_MEMCPY_KIND_", COPY_ENUM),
                                 ("ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_", MEM_ENUM),
                                 ("ENUM_CUPTI_SYNC_TYPE", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_",
                                  SYNC_ENUM)):
        add_table(path, table, "id INTEGER, name TEXT, label TEXT",
                  [(i, prefix + n, n.title()) for i, n in enumerate(names)])


GPU_COLS = ("start INTEGER, \"end\" INTEGER, deviceId INTEGER, contextId INTEGER, streamId INTEGER, "
            "correlationId INTEGER, globalPid INTEGER")


@pytest.mark.parametrize("enums", [True, False], ids=["schema3-enums", "schema2-no-enums"])
@pytest.mark.parametrize("memkind", ["memKind", "memoryKind"])
def test_memcpy_and_memset_fields(tmp_path, enums, memkind):
    """Every copyKind, srcKind/dstKind and memset memory kind reads as nsys names it, from the
    ENUM_* tables (3.x) or without them (2.x, the same numbers); bytes, peer devices, value and
    graph node land in their own columns; the memset's kind column has either name."""
    src = nsys_export(tmp_path / "m.sqlite")
    g = 4242 << 24
    # copyKind, srcKind, dstKind, srcDeviceId, dstDeviceId
    copies = [(1, 0, 2, None, None), (2, 2, 1, None, None), (8, 2, 2, None, None), (10, 2, 2, 0, 1),
              (11, 4, 2, None, None), (12, 2, 4, None, None), (13, 4, 4, None, None),
              (9, 1, 0, None, None), (3, 1, 3, None, None), (4, 3, 1, None, None),
              (5, 3, 3, None, None), (6, 3, 2, None, None), (7, 2, 3, None, None),
              (0, 7, 5, None, None), (1, 6, 5, None, None)]
    add_table(src, "CUPTI_ACTIVITY_KIND_MEMCPY",
              GPU_COLS + ", bytes INTEGER, copyKind INTEGER, srcKind INTEGER, dstKind INTEGER, "
              "srcDeviceId INTEGER, dstDeviceId INTEGER, graphNodeId INTEGER",
              [(100 * i, 100 * i + 50, 0, 1, 7, 10 + i, g, 1000 + i, *c, 500 + i if i == 2 else None)
               for i, c in enumerate(copies)])
    add_table(src, "CUPTI_ACTIVITY_KIND_MEMSET",
              GPU_COLS + f", value INTEGER, bytes INTEGER, graphNodeId INTEGER, {memkind} INTEGER",
              [(5000, 5040, 0, 1, 9, 90, g, 255, 4096, 77, 2), (5100, 5140, 0, 1, 9, 91, g, 0, 64, None, 4),
               (5200, 5240, 0, 1, 9, 92, g, 7, 128, None, 1)])
    if enums:
        add_enums(src)
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT copy_kind, src_kind, dst_kind, src_device_id, dst_device_id, bytes,
        graph_node_id, stream_id, context_id FROM memcpys ORDER BY start_ns""").fetchall() == [
        ("HtoD", "pageable", "device", None, None, 1000, None, 7, 1),
        ("DtoH", "device", "pinned", None, None, 1001, None, 7, 1),
        ("DtoD", "device", "device", None, None, 1002, 502, 7, 1),
        ("PtoP", "device", "device", 0, 1, 1003, None, 7, 1),
        # nsys's unified-memory kinds are the plain directions
        ("HtoD", "managed", "device", None, None, 1004, None, 7, 1),
        ("DtoH", "device", "managed", None, None, 1005, None, 7, 1),
        ("DtoD", "managed", "managed", None, None, 1006, None, 7, 1),
        ("HtoH", "pinned", "pageable", None, None, 1007, None, 7, 1),
        ("HtoA", "pinned", "array", None, None, 1008, None, 7, 1),
        ("AtoH", "array", "pinned", None, None, 1009, None, 7, 1),
        ("AtoA", "array", "array", None, None, 1010, None, 7, 1),
        ("AtoD", "array", "device", None, None, 1011, None, 7, 1),
        ("DtoA", "device", "array", None, None, 1012, None, 7, 1),
        ("unknown", "unknown", "device_static", None, None, 1013, None, 7, 1),
        ("HtoD", "managed_static", "device_static", None, None, 1014, None, 7, 1)]
    assert con.execute("SELECT value, bytes, memory_kind, graph_node_id, stream_id FROM memsets "
                       "ORDER BY start_ns").fetchall() == [
        (255, 4096, "device", 77, 9), (0, 64, "managed", None, 9), (7, 128, "pinned", None, 9)]


def test_kernel_launch_configuration(tmp_path):
    """Grid, block, registers, static and dynamic shared memory and graph node of each kernel,
    each from its own column, the name the mangled one (the store demangles it)."""
    src = nsys_export(tmp_path / "k.sqlite", launches=_launches(2))
    g = 4242 << 24
    with sqlite3.connect(src) as db:
        db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
        db.execute("INSERT INTO StringIds VALUES (300, '_Z6kernelPfi'), (301, 'kernel(float*, int)')")
    add_table(src, "CUPTI_ACTIVITY_KIND_KERNEL",
              GPU_COLS + ", demangledName INTEGER, shortName INTEGER, mangledName INTEGER, "
              "registersPerThread INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, "
              "blockY INTEGER, blockZ INTEGER, staticSharedMemory INTEGER, dynamicSharedMemory INTEGER, "
              "graphNodeId INTEGER",
              [(1020, 1060, 0, 1, 7, 1, g, 301, 2, 300, 40, 120, 3, 2, 256, 4, 1, 1024, 8192, None),
               (1120, 1160, 0, 1, 7, 2, g, 2, 2, None, 16, 1, 1, 1, 32, 1, 1, 0, 0, 99)])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT name, demangled, grid_x, grid_y, grid_z, block_x, block_y, block_z,
        registers, static_smem, dynamic_smem, graph_node_id FROM kernels ORDER BY start_ns""").fetchall() == [
        ("_Z6kernelPfi", "kernel(float*, int)", 120, 3, 2, 256, 4, 1, 40, 1024, 8192, None),
        # no mangled name (a C kernel): the demangled one
        ("saxpy_kernel", "saxpy_kernel", 1, 1, 1, 32, 1, 1, 16, 0, 0, 99)]


@pytest.mark.parametrize("enums", [True, False], ids=["schema3-enums", "schema2-no-enums"])
def test_every_sync_type(tmp_path, enums):
    """Each syncType reads as CUPTI names it, with the ENUM table (3.x) or without (2.x)."""
    src = nsys_export(tmp_path / "s.sqlite")
    add_table(src, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", GPU_COLS + ", syncType INTEGER, eventId INTEGER",
              [(100 * t, 100 * t + 50, 0, 1, 7, 10 + t, 4242 << 24, t, 0xFFFFFFFF) for t in range(5)])
    if enums:
        add_enums(src)
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT sync_type FROM syncs ORDER BY start_ns").fetchall() == [
            ("unknown",), ("event_synchronize",), ("stream_wait_event",), ("stream_synchronize",),
            ("context_synchronize",)]


def test_cloverleaf_devices_lanes_and_syncs(clover):
    """The device is TARGET_INFO_GPU's row whose id is the activity's deviceId (not its
    cuDevice: on this node they differ), in the units of the devices table; each GPU row keeps
    its own device, context and stream."""
    assert clover.execute("""SELECT device_id, name, uuid, compute_capability, sm_count, core_clock_mhz,
        memory_bytes, l2_bytes, peak_memory_bw_gbps FROM devices""").fetchall() == [
        (0, "NVIDIA A100-SXM4-80GB", "cf6b97c0-bf53-a39e-febd-9532190b5766", "8.0", 108, 1410.0,
         84990623744, 41943040, 2039.04)]
    for t in ("kernels", "memcpys"):
        assert clover.execute(f"SELECT DISTINCT device_id, context_id, stream_id FROM {t}").fetchall() \
            == [(0, 1, 7)], t
    # its event syncs are on no stream (streamId 0xFFFFFFFF, CUPTI's "invalid"): NULL
    assert clover.execute("SELECT DISTINCT device_id, context_id, stream_id FROM syncs").fetchall() \
        == [(0, 1, None)]
    assert clover.execute("SELECT sync_type, count(*) FROM syncs GROUP BY 1").fetchall() == \
        [("event_synchronize", 1312)]
    assert clover.execute("""SELECT copy_kind, src_kind, dst_kind, count(*), sum(bytes) FROM memcpys
        GROUP BY ALL ORDER BY 1""").fetchall() == [("DtoH", "device", "pageable", 25, 51200),
                                                    ("HtoD", "pageable", "device", 254, 225065752)]
    # the thread of each runtime call (the main thread: its id is the pid's)
    assert clover.execute("SELECT thread_id, api_kind, return_code, count(*) FROM api_calls "
                          "GROUP BY ALL").fetchall() == [(1701896, "runtime", 0, 3048)]


def test_steps_from_nvtx_ranges_reach_calls_and_gpu_rows(tmp_path):
    """Ranges named 'step N' (any case, with ' ', '_', '#', ':' or '=' or nothing before N) or
    'ProfilerStep#N' are steps; a call's step is the one it started in, and its kernel, memcpy,
    memset and sync take the call's step and innermost range through the correlation id."""
    src = nsys_export(tmp_path / "st.sqlite", launches=[
        (7, 1000, 1010, 1020, 1060),
        (7, 1140, 1160, 1170, 1210),   # started in 'step 3', ended in 'Step#4'
        (7, 1200, 1210, 1220, 1260),   # inside 'fwd'
        (7, 1300, 1310, 1320, 1360),
        (7, 1400, 1410, 1420, 1460),
    ], ranges=[(7, 900, 1150, 59, "step 3"), (7, 1150, 1380, 59, "Step#4"),
               (7, 1190, 1250, 59, "fwd"), (7, 1390, 1500, 59, "ProfilerStep#5")])
    g = 4242 << 24
    add_table(src, "CUPTI_ACTIVITY_KIND_MEMCPY", GPU_COLS + ", bytes INTEGER, copyKind INTEGER",
              [(1230, 1240, 0, 1, 7, 3, g, 64, 1), (1600, 1640, 0, 1, 7, 99, g, 64, 2)])
    add_table(src, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", GPU_COLS + ", syncType INTEGER, eventId INTEGER",
              [(1145, 1170, 0, 1, 7, 2, g, 3, None)])
    add_table(src, "CUPTI_ACTIVITY_KIND_MEMSET", GPU_COLS + ", value INTEGER, bytes INTEGER",
              [(1330, 1340, 0, 1, 7, 4, g, 0, 64)])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT r.name, r.kind, r.step, r.depth, p.name, r.thread_id FROM ranges r
        LEFT JOIN ranges p ON p.pid = r.pid AND p.range_id = r.parent_id
        ORDER BY r.start_ns""").fetchall() == [
        ("step 3", "step", 3, 0, None, 7), ("Step#4", "step", 4, 0, None, 7),
        ("fwd", "user", 4, 1, "Step#4", 7), ("ProfilerStep#5", "step", 5, 0, None, 7)]
    by_range = """SELECT x.start_ns, x.step, r.name FROM {} x LEFT JOIN ranges r
        ON r.pid = x.pid AND r.range_id = x.range_id ORDER BY 1"""
    assert con.execute(by_range.format("api_calls")).fetchall() == [
        (1000, 3, "step 3"), (1140, 3, "step 3"), (1200, 4, "fwd"), (1300, 4, "Step#4"),
        (1400, 5, "ProfilerStep#5")]
    assert con.execute(by_range.format("kernels")).fetchall() == [
        (1020, 3, "step 3"), (1170, 3, "step 3"), (1220, 4, "fwd"), (1320, 4, "Step#4"),
        (1420, 5, "ProfilerStep#5")]
    # a memcpy with no launching call in the export has neither
    assert con.execute(by_range.format("memcpys")).fetchall() == [(1230, 4, "fwd"), (1600, None, None)]
    assert con.execute(by_range.format("syncs")).fetchall() == [(1145, 3, "step 3")]
    assert con.execute(by_range.format("memsets")).fetchall() == [(1330, 4, "Step#4")]
    # steps are recorded (no missing_kind row); the memcpy no step holds is said
    assert con.execute("SELECT check_name, subject, count FROM data_quality").fetchall() == [
        ("unclaimed_records", "memcpy", 1)]


def test_driver_calls_thread_ids_and_return_codes(tmp_path):
    """Driver API calls (CUPTI_ACTIVITY_KIND_DRIVER) are calls of kind 'driver' that launch
    their kernels too; a thread id (a call's or a range's) is the low 24 bits of globalTid,
    whatever its size; a call's
    returnValue is its return code."""
    tid = 0x9ABCDE
    src = nsys_export(tmp_path / "d.sqlite", launches=[(tid, 1000, 1010, 1020, 1060)],
                      ranges=[(tid, 990, 1100, 59, "r")])
    g = 4242 << 24
    with sqlite3.connect(src) as db:
        db.execute("INSERT INTO StringIds VALUES (310, 'cuLaunchKernel'), (311, 'cudaMalloc')")
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (900, 950, ?, 40, 311, 2)", [g | 0x10001])
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1250, 1300, 0, 1, 7, 50, ?, 2)", [g])
    add_table(src, "CUPTI_ACTIVITY_KIND_DRIVER", "start INTEGER, \"end\" INTEGER, globalTid INTEGER, "
              "correlationId INTEGER, nameId INTEGER, returnValue INTEGER",
              [(1200, 1230, g | 0x1234, 50, 310, 0)])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT name, api_kind, thread_id, return_code, pid FROM api_calls
        ORDER BY start_ns""").fetchall() == [("cudaMalloc", "runtime", 0x10001, 2, 4242),
                                             ("cudaLaunchKernel", "runtime", tid, 0, 4242),
                                             ("cuLaunchKernel", "driver", 0x1234, 0, 4242)]
    assert con.execute("""SELECT k.start_ns, c.name FROM kernels k JOIN api_calls c
        ON c.pid = k.pid AND c.correlation_id = k.correlation_id ORDER BY 1""").fetchall() == [
        (1020, "cudaLaunchKernel"), (1250, "cuLaunchKernel")]
    assert con.execute("SELECT thread_id FROM ranges").fetchall() == [(tid,)]


def test_an_export_with_copies_but_no_kernels(tmp_path):
    """Memcpys without kernels are GPU work all the same: the file is said to lack steps only;
    memsets alone are not kernels or memcpys."""
    g = 4242 << 24
    cp = nsys_export(tmp_path / "cp.sqlite")
    add_table(cp, "CUPTI_ACTIVITY_KIND_MEMCPY", GPU_COLS + ", bytes INTEGER, copyKind INTEGER",
              [(100, 200, 0, 1, 7, 1, g, 64, 1)])
    ms = nsys_export(tmp_path / "ms.sqlite")
    add_table(ms, "CUPTI_ACTIVITY_KIND_MEMSET", GPU_COLS + ", value INTEGER, bytes INTEGER",
              [(100, 200, 0, 1, 7, 1, g, 0, 64)])
    for src, want in ((cp, "step"), (ms, "kernel")):
        out = tmp_path / (src.stem + ".duckdb")
        import_traces([src], out)
        with duckdb.connect(str(out), read_only=True) as con:
            assert con.execute("SELECT check_name, subject, pid FROM data_quality").fetchall() == \
                [("missing_kind", want, 4242)], src.name


def test_an_unclosed_range_is_kept_without_an_end(tmp_path):
    """A range still open when the capture ended (no end) is a range of the import, written
    without an end, holding what its thread launched after it began."""
    src = nsys_export(tmp_path / "u.sqlite", launches=_launches(2), ranges=[(7, 990, 1050, 59, "a")])
    with sqlite3.connect(src) as db:
        db.execute("INSERT INTO NVTX_EVENTS VALUES (1080, NULL, 59, 'open', ?, NULL, NULL)", [4242 << 24 | 7])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT name, end_ns FROM ranges ORDER BY 1").fetchall() == [
        ("a", 1050), ("open", None)]
    assert con.execute("""SELECT r.name FROM kernels k LEFT JOIN ranges r
        ON r.pid = k.pid AND r.range_id = k.range_id ORDER BY k.start_ns""").fetchall() == [
        ("a",), ("open",)]


@pytest.mark.parametrize("push_pop,start_end", [(59, 60), (70, 71)], ids=["nvtx", "nvtxt"])
def test_a_push_pop_range_inside_a_start_end_range_keeps_its_calls(tmp_path, push_pop, start_end):
    """NVTXT push/pop and start/end ranges (event types 70 and 71) are NVTX's (59 and 60). A call in a push/pop range opened inside a start/end range is that push/pop range's (its
    innermost on the thread), not the start/end range's, which keeps the calls made in it
    outside that push/pop range; the push/pop range's parent is the push/pop range around."""
    src = nsys_export(tmp_path / "pp.sqlite", launches=[
        (7, 960, 965, 970, 980),       # inside 'inner', itself inside 'upload'
        (7, 1000, 1005, 1010, 1020),   # inside 'upload' only
    ], ranges=[(7, 0, 5000, push_pop, "outer"), (7, 920, 1100, start_end, "upload"),
               (7, 950, 990, push_pop, "inner")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT r.name, p.name FROM ranges r LEFT JOIN ranges p
        ON p.pid = r.pid AND p.range_id = r.parent_id ORDER BY r.start_ns""").fetchall() == [
        ("outer", None), ("upload", "outer"), ("inner", "outer")]
    assert con.execute("""SELECT k.start_ns, r.name FROM kernels k LEFT JOIN ranges r
        ON r.pid = k.pid AND r.range_id = k.range_id ORDER BY 1""").fetchall() == [
        (970, "inner"), (1010, "upload")]


@pytest.mark.parametrize("graph_cols", [True, False], ids=["graphId", "no-graphId"])
def test_graph_launches_keep_their_graph_and_node(tmp_path, graph_cols):
    """Kernels, copies and memsets replayed from a CUDA graph keep graphId and graphNodeId; nsys
    writes 0 for work that is no graph's (as CUPTI does), which reads as NULL, as the collector
    stores it. An export without the columns (older schemas) has NULL throughout."""
    src = nsys_export(tmp_path / "g.sqlite", launches=_launches(2))
    g = 4242 << 24
    extra = ", graphId INTEGER, graphNodeId INTEGER" if graph_cols else ""
    ids = [(5, 501), (0, 0)] if graph_cols else [(), ()]
    with sqlite3.connect(src) as db:
        db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    add_table(src, "CUPTI_ACTIVITY_KIND_KERNEL", GPU_COLS + ", mangledName INTEGER" + extra,
              [(1020, 1060, 0, 1, 7, 1, g, 2, *ids[0]), (1120, 1160, 0, 1, 7, 2, g, 2, *ids[1])])
    add_table(src, "CUPTI_ACTIVITY_KIND_MEMCPY",
              GPU_COLS + ", bytes INTEGER, copyKind INTEGER, srcKind INTEGER, dstKind INTEGER" + extra,
              [(2000, 2050, 0, 1, 7, 10, g, 64, 8, 2, 2, *ids[0]),
               (2100, 2150, 0, 1, 7, 11, g, 64, 8, 2, 2, *ids[1])])
    add_table(src, "CUPTI_ACTIVITY_KIND_MEMSET",
              GPU_COLS + ", value INTEGER, bytes INTEGER, memKind INTEGER" + extra,
              [(3000, 3050, 0, 1, 7, 20, g, 0, 64, 2, *ids[0]),
               (3100, 3150, 0, 1, 7, 21, g, 0, 64, 2, *ids[1])])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    want = [(5, 501), (None, None)] if graph_cols else [(None, None), (None, None)]
    with duckdb.connect(str(out), read_only=True) as con:
        for t in ("kernels", "memcpys", "memsets"):
            assert con.execute(f"SELECT graph_id, graph_node_id FROM {t} ORDER BY start_ns"
                               ).fetchall() == want, t


def test_ranges_hold_calls_from_their_start_to_before_their_end(tmp_path):
    """A call that starts the instant a range opens is in it, push/pop or start/end; one that
    starts the instant a start/end range closes is not. A start/end range that ends with the
    push/pop range around it is held by it (its child); one that outlives the innermost
    push/pop range it started in is the child of the next one out that holds it. User ranges
    alone are no steps."""
    src = nsys_export(tmp_path / "b.sqlite", launches=[
        (7, 1000, 1005, 1010, 1020),   # at 'pp' start
        (7, 1200, 1205, 1210, 1220),   # at 'se' start
        (7, 1300, 1305, 1310, 1320),   # at 'se' end
    ], ranges=[(7, 0, 5000, 59, "outer"), (7, 1000, 1100, 59, "pp"), (7, 1200, 1300, 60, "se"),
               (7, 2000, 3000, 59, "mid"), (7, 2100, 2200, 59, "in"), (7, 2150, 2500, 60, "se2"),
               (7, 4000, 5000, 60, "tail")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT r.name, p.name, r.depth FROM ranges r LEFT JOIN ranges p
        ON p.pid = r.pid AND p.range_id = r.parent_id ORDER BY r.start_ns""").fetchall() == [
        ("outer", None, 0), ("pp", "outer", 1), ("se", "outer", 1), ("mid", "outer", 1),
        ("in", "mid", 2), ("se2", "mid", 2), ("tail", "outer", 1)]
    assert con.execute("""SELECT c.start_ns, r.name FROM api_calls c LEFT JOIN ranges r
        ON r.pid = c.pid AND r.range_id = c.range_id ORDER BY 1""").fetchall() == [
        (1000, "pp"), (1200, "se"), (1300, "outer")]
    assert con.execute("SELECT check_name, subject, pid FROM data_quality").fetchall() == [
        ("missing_kind", "step", 4242)]


def test_step_range_names(tmp_path):
    """'step' then ' ', '_', '#', ':', '=' or nothing, then the number, and nothing after it,
    names a step, and so does an empty one; a name that goes on after the number is a user
    range."""
    names = ["step_6", "step:7", "step=8", "step9", "step 3 backward", "ProfilerStep#10"]
    src = nsys_export(tmp_path / "n.sqlite", ranges=[
        (7, 100 * i, 100 * i + (0 if i == 5 else 100), 59, n) for i, n in enumerate(names)])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT name, kind, step FROM ranges ORDER BY start_ns").fetchall() == [
        ("step_6", "step", 6), ("step:7", "step", 7), ("step=8", "step", 8), ("step9", "step", 9),
        ("step 3 backward", "user", None), ("ProfilerStep#10", "step", 10)]


def test_cuptiprof_step_ranges_take_their_step_from_the_payload(tmp_path):
    """cuptiprof.range("step", step=N) pushes an NVTX range named 'step' with N as its integer
    payload: under Nsight Systems that range is step N, and the launches inside it are its.
    A 'step' range without an integer payload (or another name with one) marks no step."""
    src = nsys_export(tmp_path / "p.sqlite", launches=[
        (7, 1000, 1010, 1020, 1060), (7, 2000, 2010, 2020, 2060), (7, 3000, 3010, 3020, 3060)],
        ranges=[(7, 900, 1500, 59, "step"), (7, 1900, 2500, 59, "step"),
                (7, 2900, 3500, 59, "step"), (7, 3600, 3700, 59, "attn")])
    with sqlite3.connect(src) as db:
        db.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN int64Value INTEGER")
        db.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN uint64Value INTEGER")
        db.execute("UPDATE NVTX_EVENTS SET int64Value = 4 WHERE start = 900")
        db.execute("UPDATE NVTX_EVENTS SET uint64Value = 5 WHERE start = 1900")
        db.execute("UPDATE NVTX_EVENTS SET int64Value = 6 WHERE start = 3600")
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT name, kind, step FROM ranges ORDER BY start_ns").fetchall() == [
        ("step", "step", 4), ("step", "step", 5), ("step", "user", None), ("attn", "user", None)]
    assert con.execute("SELECT step FROM kernels ORDER BY start_ns").fetchall() == [
        (4,), (5,), (None,)]


def test_a_step_number_past_32_bits_marks_no_step(tmp_path):
    """A range named with a time after 'step' ('step_1714567890123'), or a 'step' range whose
    payload is past 2**31 - 1, is no step: it failed the import ("cannot import this export
    (ValueError: value ... does not fit a int32 column)"); it stays a range of that name."""
    src = nsys_export(tmp_path / "t.sqlite", launches=[(7, 1000, 1010, 1020, 1060)],
                      ranges=[(7, 900, 1500, 59, "step_1714567890123"), (7, 1600, 1700, 59, "step"),
                              (7, 1800, 1900, 59, "step_2147483647")])
    with sqlite3.connect(src) as db:
        db.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN int64Value INTEGER")
        db.execute("UPDATE NVTX_EVENTS SET int64Value = 2147483648 WHERE start = 1600")
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT name, kind, step FROM ranges ORDER BY start_ns").fetchall() == [
        ("step_1714567890123", "user", None), ("step", "user", None),
        ("step_2147483647", "step", 2147483647)]
    assert con.execute("SELECT step FROM kernels").fetchall() == [(None,)]


def test_steps_are_per_process(tmp_path):
    """A process's step ranges give steps to its own calls and GPU rows only: another process's
    launch at the same time has none, and a call at the instant a step ends is in no step."""
    src = nsys_export(tmp_path / "p.sqlite", launches=[
        (7, 1000, 1010, 1020, 1060), (7, 1500, 1510, 1520, 1560), (8, 1100, 1110, 1120, 1160, 5151)],
        ranges=[(7, 900, 1500, 59, "step 0")])
    with sqlite3.connect(src) as db:
        db.execute("INSERT INTO NVTX_EVENTS VALUES (1050, 1200, 59, 'load', ?, NULL, NULL)", [5151 << 24 | 8])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT pid, name, step FROM ranges ORDER BY start_ns").fetchall() == [
        (4242, "step 0", 0), (5151, "load", None)]
    for t in ("api_calls", "kernels"):
        assert con.execute(f"SELECT pid, step FROM {t} ORDER BY start_ns").fetchall() == [
            (4242, 0), (5151, None), (4242, None)], t


def test_a_process_span_from_gpu_rows_or_calls_alone(tmp_path):
    """A process whose host records the export lacks spans from its first GPU row's start to
    its last one's end; one with API calls only is a process of the file, spanning them, and
    with no PROCESSES row its command is the export's path."""
    src = nsys_export(tmp_path / "k.sqlite")
    with sqlite3.connect(src) as db:
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, 0, 1, 0)",
                       [(300, 350, 5151 << 24 | 9), (2000, 2100, 5151 << 24 | 9)])
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, 2)",
                       [(1000, 1100, 1, 4242 << 24), (500, 700, 2, 4242 << 24),
                        (1200, 1250, 3, 4242 << 24)])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT pid, command, start_ns, end_ns FROM processes ORDER BY pid").fetchall() == [
        (4242, "app", 500, 1250), (5151, str(src), 300, 2100)]


def test_a_stream_or_name_past_range_is_null(tmp_path):
    """A streamId of 2**31 or more (0xFFFFFFFF is CUPTI's "none") has no int32 stream: NULL; a
    name id one past the last of StringIds (a damaged export) names nothing: NULL."""
    src = nsys_export(tmp_path / "x.sqlite")
    with sqlite3.connect(src) as db:
        last = db.execute("SELECT max(id) FROM StringIds").fetchone()[0]
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, ?, ?, ?, ?)",
                       [(100, 200, 1 << 31, 1, 4242 << 24, 2), (300, 400, 7, 2, 4242 << 24, last + 1)])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT stream_id, name FROM kernels ORDER BY start_ns").fetchall() == [
        (None, "saxpy_kernel"), (7, None)]


def test_ranges_opening_together_nest_the_longer_outside(tmp_path):
    """Of two push/pop ranges opened at the same instant on a thread, the longer is the
    parent, and a call made at that instant is the shorter's."""
    src = nsys_export(tmp_path / "t.sqlite", launches=[(7, 1000, 1005, 1010, 1020)],
                      ranges=[(7, 1000, 1100, 59, "short"), (7, 1000, 2000, 59, "long")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT r.name, p.name, r.depth FROM ranges r LEFT JOIN ranges p
        ON p.pid = r.pid AND p.range_id = r.parent_id ORDER BY r.depth""").fetchall() == [
        ("long", None, 0), ("short", "long", 1)]
    assert con.execute("""SELECT r.name FROM api_calls c JOIN ranges r
        ON r.pid = c.pid AND r.range_id = c.range_id""").fetchall() == [("short",)]


@pytest.mark.parametrize("table,column", [("CUPTI_ACTIVITY_KIND_KERNEL", "end"),
                                          ("CUPTI_ACTIVITY_KIND_RUNTIME", "end"),
                                          ("NVTX_EVENTS", "end")])
def test_a_row_that_ends_before_it_starts_is_one_line(tmp_path, table, column):
    """A negative span is not time (the Kineto importer refuses one too): not a row whose
    duration would subtract from every sum it is in."""
    src = nsys_export(tmp_path / "bad.sqlite", launches=[(1, 100, 110, 120, 200)],
                      ranges=[(1, 90, 115, 59, "step 0")])
    db = sqlite3.connect(src)
    db.execute(f'UPDATE {table} SET "{column}" = start - 5')
    db.commit()
    db.close()
    r = run_cli("import", src, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("cuptiprof: error: ")
    assert str(src) in r.stderr and table in r.stderr and "ends before it starts" in r.stderr
    assert not (tmp_path / "o.duckdb").exists()


@pytest.mark.parametrize("table,sql", [
    ("StringIds", "UPDATE StringIds SET value = x'ff00' WHERE id = 2"),
    ("NVTX_EVENTS", "UPDATE NVTX_EVENTS SET text = x'ff00'")])
def test_a_name_stored_as_bytes_is_one_line(tmp_path, table, sql):
    """A StringIds value or an NVTX range's text that is a BLOB, not text (a damaged or
    hand-made export), fails as text that is not UTF-8 does: one line naming the file, no
    traceback."""
    src = nsys_export(tmp_path / "bad.sqlite", launches=[(1, 100, 110, 120, 200)],
                      ranges=[(1, 90, 115, 59, "step 0")])
    db = sqlite3.connect(src)
    db.execute(sql)
    db.commit()
    db.close()
    r = run_cli("import", src, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("cuptiprof: error: ")
    assert str(src) in r.stderr and table in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o.duckdb").exists()


def test_a_gzipped_export_says_to_decompress_it(tmp_path):
    """An export gzipped to ship it is not a trace with invalid JSON: the line says what it is
    and what to do."""
    import gzip
    src = nsys_export(tmp_path / "run.sqlite", launches=[(1, 100, 110, 120, 200)])
    gz = tmp_path / "run.sqlite.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    r = run_cli("import", gz, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("cuptiprof: error: ")
    assert str(gz) in r.stderr and "gzipped SQLite" in r.stderr and "gunzip" in r.stderr
    assert "JSON" not in r.stderr
    assert not (tmp_path / "o.duckdb").exists()
    # the command the line gives works: gunzip -k takes a name ending in .gz only
    assert f"(gunzip -k {gz})" in r.stderr
    named = tmp_path / "plain.sqlite"
    named.write_bytes(gz.read_bytes())
    r = run_cli("import", named, "-o", tmp_path / "o.duckdb")
    out = tmp_path / "plain-unzipped.sqlite"
    assert f"(gunzip -c {named} > {out})" in r.stderr, r.stderr
    subprocess.run(f"gunzip -c {named} > {out}", shell=True, check=True)
    assert out.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("first", [b"{", b"[", b"\x1f\x8b"])
def test_a_duckdb_file_whose_checksum_begins_like_json_or_gzip_is_told_a_duckdb_file(tmp_path, first):
    """A DuckDB file begins with an 8-byte checksum, any bytes: one that began with '{' or '['
    (about 1 file in 128) was read as a JSON trace ("invalid JSON near byte 1"), one that began
    with gzip's magic as a gzipped one. Its magic and version after the checksum tell it."""
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE t (a INT)").close()
    data = bytearray(other.read_bytes())
    data[:len(first)] = first   # the checksum no longer matches: what import says is the same
    other.write_bytes(bytes(data))
    r = run_cli("import", other, "-o", tmp_path / "o.duckdb")
    assert r.returncode == 2 and r.stderr.startswith(f"cuptiprof: error: {other}: a DuckDB file"), r.stderr
    assert not (tmp_path / "o.duckdb").exists()


def test_string_ids_are_looked_up_not_used_as_positions(tmp_path):
    """A StringIds id far beyond the others (an edited export) names its rows without a list
    as long as the id; a row naming an id StringIds lacks has no name; an id that is no
    integer (a table declared without a type) is one line naming it."""
    src = nsys_export(tmp_path / "s.sqlite", launches=_launches(3))
    with sqlite3.connect(src) as db:
        db.execute("UPDATE StringIds SET id = ? WHERE id = 2", [1 << 40])
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET mangledName = ? WHERE rowid < 3", [1 << 40])
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET mangledName = 2 WHERE rowid = 3")
    out = tmp_path / "o.duckdb"
    r = run_cli("import", src, "-o", out)
    assert r.returncode == 0, r.stderr
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT name FROM kernels ORDER BY start_ns").fetchall() == [
        ("saxpy_kernel",), ("saxpy_kernel",), (None,)]
    assert con.execute("SELECT DISTINCT name FROM api_calls").fetchall() == [("cudaLaunchKernel",)]
    con.close()

    loose = Path(shutil.copy(src, tmp_path / "loose.sqlite"))
    with sqlite3.connect(loose) as db:
        db.execute("ALTER TABLE StringIds RENAME TO old_strings")
        db.execute("CREATE TABLE StringIds (id, value)")
        db.execute("INSERT INTO StringIds SELECT * FROM old_strings")
        db.execute("INSERT INTO StringIds VALUES ('x9', 'text id')")
    r = run_cli("import", loose, "-o", tmp_path / "o2.duckdb")
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"cuptiprof: error: {loose}: StringIds: the id 'x9' is not an integer; "
                        "the export is damaged or was edited: export it again (nsys export "
                        "--type sqlite REPORT.nsys-rep)\n")
    assert not (tmp_path / "o2.duckdb").exists()


def test_a_range_never_ended_keeps_its_work(tmp_path):
    """An NVTX range the program never ended (end NULL: a crash or a stop inside the last step)
    is a range of the file, open until the capture's end: what its thread launched after it
    began is its own and its step's, and the step is said to be incomplete."""
    src = nsys_export(tmp_path / "open.sqlite", launches=_launches(4), ranges=[
        (7, 990, 1150, 59, "step 0"), (7, 1150, None, 59, "step 1"), (7, 1160, None, 59, "tail")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT step, count(*) FROM kernels GROUP BY 1 ORDER BY 1").fetchall() \
        == [(0, 2), (1, 2)]
    assert con.execute("SELECT name, end_ns, step, depth FROM ranges ORDER BY start_ns").fetchall() \
        == [("step 0", 1150, 0, 0), ("step 1", None, 1, 0), ("tail", None, 1, 1)]
    assert con.execute("""SELECT r.name, count(*) FROM kernels k JOIN ranges r
        ON r.pid = k.pid AND r.range_id = k.range_id GROUP BY 1 ORDER BY 1""").fetchall() \
        == [("step 0", 2), ("tail", 2)]
    assert con.execute("SELECT check_name, subject FROM data_quality").fetchall() == [
        ("step_incomplete", "1")]
    # the process's span is that of what it recorded, not stretched by the open ranges
    assert con.execute("SELECT start_ns, end_ns FROM processes").fetchall() == [(990, 1360)]

def test_a_range_opened_last_inside_one_never_ended_stays_inside_it(tmp_path):
    """A range pushed last, after everything else the capture holds, inside a range never
    ended and never ended itself (a crash just after the push): both are open to the
    capture's end, which is where the inner one begins, and it is still inside the outer."""
    src = nsys_export(tmp_path / "open.sqlite", launches=_launches(4), ranges=[
        (7, 980, None, 59, "serve"), (7, 990, 1150, 59, "step 0"), (7, 5000, None, 59, "save")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT r.name, r.depth, p.name FROM ranges r LEFT JOIN ranges p "
                       "ON p.pid = r.pid AND p.range_id = r.parent_id ORDER BY r.start_ns"
                       ).fetchall() == [("serve", 0, None), ("step 0", 1, "serve"),
                                        ("save", 1, "serve")]


def test_a_range_pushed_last_inside_a_step_never_ended_keeps_its_step(tmp_path):
    """A step never ended holds to the capture's end, which is where a range pushed last
    inside it begins: that range is of the step, as the others inside it are."""
    src = nsys_export(tmp_path / "open.sqlite", launches=_launches(2), ranges=[
        (7, 990, 1050, 59, "ProfilerStep#0"), (7, 1090, None, 59, "ProfilerStep#1"),
        (7, 1095, 1150, 59, "fwd"), (7, 5000, None, 59, "save")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT name, step, depth FROM ranges ORDER BY start_ns").fetchall() == [
        ("ProfilerStep#0", 0, 0), ("ProfilerStep#1", 1, 0), ("fwd", 1, 1), ("save", 1, 1)]


def test_steps_of_two_threads_that_overlap_keep_their_own_launches(tmp_path):
    """Two worker threads each mark their own steps, which overlap in time: a launch inside its
    own thread's step is that step's, not the step another thread began later (nor the other
    way round); a thread without steps takes the latest-started step that holds its launch."""
    src = nsys_export(tmp_path / "two.sqlite", launches=[
        (7, 1100, 1110, 1120, 1130), (7, 2000, 2010, 2020, 2030), (7, 2900, 2910, 2920, 2930),
        (8, 1600, 1610, 1620, 1630), (9, 2100, 2110, 2120, 2130)],
        ranges=[(7, 1000, 3000, 59, "step 1"), (8, 1500, 2500, 59, "step 2")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT c.thread_id, c.start_ns, k.step, r.name FROM kernels k
        JOIN api_calls c ON c.pid = k.pid AND c.correlation_id = k.correlation_id
        LEFT JOIN ranges r ON r.pid = k.pid AND r.range_id = k.range_id
        ORDER BY 2""").fetchall() == [
        (7, 1100, 1, "step 1"), (8, 1600, 2, "step 2"), (7, 2000, 1, "step 1"),
        (9, 2100, 2, None), (7, 2900, 1, "step 1")]
    assert con.execute("SELECT count(*) FROM api_calls WHERE thread_id = 7 AND step = 1"
                       ).fetchone() == (3,)


def test_step_ranges_named_by_torch_emit_nvtx(tmp_path):
    """Under torch.autograd.profiler.emit_nvtx(), torch names each range after its
    record_function followed by ', seq = N', ', op_id = N' and ', sizes = [...]': the
    record_function('ProfilerStep#N') of each step is still step N."""
    src = nsys_export(tmp_path / "emit.sqlite", launches=_launches(3), ranges=[
        (7, 990, 1100, 59, "ProfilerStep#4, op_id = 17"),
        (7, 1100, 1200, 59, "ProfilerStep#5, op_id = 95, sizes = []"),
        (7, 1200, 1300, 59, "step 6, seq = 3, op_id = 160"),
        (7, 1290, 1295, 59, "ProfilerStep#7x, op_id = 1")])   # no step: not N alone
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT step, count(*) FROM kernels GROUP BY 1 ORDER BY 1").fetchall() \
        == [(4, 1), (5, 1), (6, 1)]
    assert con.execute("SELECT name, kind, step FROM ranges ORDER BY start_ns").fetchall() == [
        ("ProfilerStep#4, op_id = 17", "step", 4), ("ProfilerStep#5, op_id = 95, sizes = []", "step", 5),
        # a record_function label of that form: named without torch's parts (attrs hold them)
        ("step 6, seq = 3, op_id = 160", "step", 6), ("ProfilerStep#7x", "user", 6)]


def test_gpu_rows_outside_every_step_are_said(tmp_path):
    """GPU rows of a process with steps that no step holds (launched before the first step
    range or after the last, or by no call the export kept) are counted in data_quality per
    kind, as the Kineto importer counts them; a process without steps is said apart."""
    src = nsys_export(tmp_path / "out.sqlite", launches=_launches(5) + [
        (9, 1000, 1010, 1020, 1060, 5151)], ranges=[(7, 1090, 1300, 59, "step 0")])
    g = 4242 << 24
    add_table(src, "CUPTI_ACTIVITY_KIND_MEMCPY", GPU_COLS + ", bytes INTEGER, copyKind INTEGER",
              [(1230, 1240, 0, 1, 7, 3, g, 64, 1), (1600, 1640, 0, 1, 7, 99, g, 64, 2)])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT pid, step, count(*) FROM kernels GROUP BY ALL ORDER BY ALL"
                       ).fetchall() == [(4242, 0, 2), (4242, None, 3), (5151, None, 1)]
    assert con.execute("SELECT check_name, subject, count, pid FROM data_quality ORDER BY ALL"
                       ).fetchall() == [("missing_kind", "step", 0, 5151),
                                        ("unclaimed_records", "kernel", 3, 4242),
                                        ("unclaimed_records", "memcpy", 1, 4242)]
    # with every call of the export gone, no GPU row has a step, and the file says so
    with sqlite3.connect(src) as db:
        db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    import_traces([src], tmp_path / "nocalls.duckdb")
    con = duckdb.connect(str(tmp_path / "nocalls.duckdb"), read_only=True)
    assert con.execute("SELECT check_name, subject, count, pid FROM data_quality ORDER BY ALL"
                       ).fetchall() == [("missing_kind", "step", 0, 5151),
                                        ("unclaimed_records", "kernel", 5, 4242),
                                        ("unclaimed_records", "memcpy", 2, 4242)]


def test_a_process_without_steps_beside_one_with_steps_is_said(tmp_path):
    """In an export where one process marks steps and another does not, the one without steps
    has its missing_kind 'step' row under its own pid (as it has when no process marks any),
    named in the detail; the process with steps has none."""
    src = nsys_export(tmp_path / "mixed.sqlite", launches=_launches(2) + [
        (9, 1000, 1010, 1020, 1060, 5151), (9, 1100, 1110, 1120, 1160, 6161)],
        ranges=[(7, 990, 1300, 59, "step 0")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    rows = con.execute("SELECT check_name, subject, count, pid, detail FROM data_quality "
                       "ORDER BY pid").fetchall()
    assert [r[:4] for r in rows] == [("missing_kind", "step", 0, 5151),
                                     ("missing_kind", "step", 0, 6161)]
    assert rows[0][4].startswith("process 5151 in mixed.sqlite has no step ranges (NVTX ranges "
                                 "named 'step N'"), rows[0][4]
    assert rows[0][4].endswith("; rows carry no step")


def test_a_gpu_row_without_globalpid_is_the_only_process_s_or_refused(tmp_path):
    """A GPU row whose globalPid is NULL belongs to the only process the export's records name:
    no process 0 appears in processes, devices or data_quality, and the row keeps the step of
    the call that launched it. Where the records name several processes, which one it ran for
    is unknown: the import is refused, naming the table and row."""
    src = nsys_export(tmp_path / "one.sqlite", launches=_launches(2),
                      ranges=[(7, 990, 1300, 59, "step 0")])
    with sqlite3.connect(src) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL "
                   "WHERE correlationId = 1")
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT pid FROM processes").fetchall() == [(4242,)]
    assert con.execute("SELECT DISTINCT pid FROM devices").fetchall() == [(4242,)]
    assert con.execute("SELECT pid, correlation_id, step FROM kernels ORDER BY 2").fetchall() == [
        (4242, 1, 0), (4242, 2, 0)]
    assert con.execute("SELECT count(*) FROM data_quality WHERE pid = 0").fetchone() == (0,)
    two = nsys_export(tmp_path / "two.sqlite", launches=_launches(1) + [
        (9, 1000, 1010, 1020, 1060, 5151)])
    with sqlite3.connect(two) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL "
                   "WHERE correlationId = 2")
    r = run_cli("import", two, "-o", tmp_path / "two.duckdb")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "CUPTI_ACTIVITY_KIND_KERNEL rowid 2: globalPid is NULL" in r.stderr, r.stderr
    assert "2 processes (4242, 5151)" in r.stderr, r.stderr


def test_a_step_without_gpu_work_is_said(tmp_path):
    """A step range that holds no GPU row while the other steps do (its launches missed the
    capture, or it launched none) is said in data_quality as empty_step, as the Kineto importer
    says it; a file none of whose steps holds GPU work says no step empty."""
    src = nsys_export(tmp_path / "e.sqlite", launches=_launches(2), ranges=[
        (7, 990, 1090, 59, "step 0"), (7, 1090, 1190, 59, "step 1"), (7, 1500, 1600, 59, "step 2")])
    out = tmp_path / "o.duckdb"
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT check_name, subject, count, pid FROM data_quality").fetchall() == [
        ("empty_step", "2", 0, 4242)]
    late = nsys_export(tmp_path / "late.sqlite", launches=_launches(2), ranges=[
        (7, 1500, 1600, 59, "step 0")])
    import_traces([late], tmp_path / "late.duckdb")
    con = duckdb.connect(str(tmp_path / "late.duckdb"), read_only=True)
    assert con.execute("SELECT check_name, subject FROM data_quality").fetchall() == [
        ("unclaimed_records", "kernel")]


def test_exports_of_one_job_are_put_on_one_clock(tmp_path):
    """Each export counts time from its own capture's start: imported together (one per rank),
    a file whose capture began 5 ms after the other's is shifted by 5 ms, so its kernels sit where
    they ran beside the other rank's; one file alone keeps its own clock. Where a file does not
    say when its capture began, each keeps its own and data_quality says so."""
    t0 = 1_700_000_000_000_000_000
    a = nsys_export(tmp_path / "rank0.sqlite", pid=11, launches=_launches(2), ranges=[
        (7, 900, 1300, 59, "ProfilerStep#0")])
    b = nsys_export(tmp_path / "rank1.sqlite", pid=12, launches=_launches(2), ranges=[
        (7, 900, 1300, 59, "ProfilerStep#0")])
    for path, start in ((a, t0), (b, t0 + 5_000_000)):
        add_table(path, "TARGET_INFO_SESSION_START_TIME",
                  "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT", [(start, "", "")])
    import_traces([b, a], tmp_path / "job.duckdb")
    con = duckdb.connect(str(tmp_path / "job.duckdb"), read_only=True)
    q = "SELECT pid, {} FROM {} GROUP BY pid ORDER BY pid"
    assert con.execute(q.format("min(start_ns), max(end_ns)", "kernels")).fetchall() == [
        (11, 1020, 1160), (12, 5_001_020, 5_001_160)]
    assert con.execute(q.format("min(start_ns), max(end_ns)", "api_calls")).fetchall() == [
        (11, 1000, 1110), (12, 5_001_000, 5_001_110)]
    assert con.execute(q.format("min(start_ns), max(end_ns)", "ranges")).fetchall() == [
        (11, 900, 1300), (12, 5_000_900, 5_001_300)]
    assert con.execute(q.format("min(start_ns), max(end_ns)", "processes")).fetchall() == [
        (11, 900, 1300), (12, 5_000_900, 5_001_300)]
    # steps still hold their own launches, and nothing is said of the clocks
    assert con.execute("SELECT pid, step, count(*) FROM kernels GROUP BY ALL ORDER BY ALL"
                       ).fetchall() == [(11, 0, 2), (12, 0, 2)]
    assert con.execute("SELECT count(*) FROM data_quality WHERE check_name = 'clock_unaligned'"
                       ).fetchone() == (0,)
    con.close()
    # one file: its own clock
    import_traces([b], tmp_path / "one.duckdb")
    con = duckdb.connect(str(tmp_path / "one.duckdb"), read_only=True)
    assert con.execute("SELECT min(start_ns) FROM kernels").fetchone() == (1020,)
    con.close()
    # a file that does not say when its capture began: each keeps its own clock, said
    c = nsys_export(tmp_path / "rank2.sqlite", pid=13, launches=_launches(1))
    import_traces([a, b, c], tmp_path / "three.duckdb")
    con = duckdb.connect(str(tmp_path / "three.duckdb"), read_only=True)
    assert con.execute(q.format("min(start_ns)", "kernels")).fetchall() == [
        (11, 1020), (12, 1020), (13, 1020)]
    assert con.execute("SELECT count, detail FROM data_quality WHERE check_name = "
                       "'clock_unaligned'").fetchall() == [
        (1, "rank2.sqlite does not say when its capture began (no "
            "TARGET_INFO_SESSION_START_TIME): each export keeps its own clock (ns since its "
            "capture began), so times of different files are not comparable")]


US = 1000   # ns per µs: times of the emit_nvtx export below, in µs
LINEAR = ("aten::linear, seq = 0, op_id = 2, sizes = [[4, 8], [16, 8], [16]], "
          "input_op_ids = [(0,0), (0,0), (0,0)]")


def emit_nvtx_export(path: Path) -> Path:
    """A step of a torch program run under torch.autograd.profiler.emit_nvtx(record_shapes=True):
    aten::linear > aten::t, aten::addmm (which launches a kernel and a memcpy), a kernel of
    linear's own, a record_function label around aten::relu, and a plain range 'aten::foo'."""
    src = nsys_export(path, launches=[(7, a * US, a * US + 5, b * US, c * US) for a, b, c in (
        (1150, 1200, 1260),   # inside aten::addmm
        (1420, 1440, 1450),   # inside aten::linear, after addmm
        (1620, 1630, 1650),   # inside aten::relu, inside the label
        (1800, 1810, 1815),   # inside the label only (aten::mul is another thread's)
        (1960, 1970, 1975))], ranges=[
        (7, 900 * US, 2000 * US, 59, "ProfilerStep#1, op_id = 1"),
        (7, 1000 * US, 1500 * US, 59, LINEAR),
        (7, 1010 * US, 1050 * US, 59, "aten::t, seq = 1, op_id = 3, sizes = [[16, 8]]"),
        (7, 1100 * US, 1400 * US, 59, "aten::addmm, seq = 2, op_id = 4, sizes = [[16], [4, 8], "
                                      "[8, 16]], input_op_ids = [(0,0), (0,0), (3,0)]"),
        (7, 1600 * US, 1900 * US, 59, "## forward ##, op_id = 5"),
        (7, 1610 * US, 1700 * US, 59, "aten::relu, seq = 3, op_id = 6, sizes = [[4, 16]]"),
        (8, 1790 * US, 1850 * US, 59, "aten::mul, seq = 9, op_id = 7"),
        (7, 1950 * US, 1990 * US, 59, "aten::foo")])
    # a copy and a memset launched inside aten::addmm, by calls of their own
    g = (4242 << 24) | 7
    with sqlite3.connect(src) as db:
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 1, 0)",
                       [(1300 * US, 1305 * US, g, 100), (1310 * US, 1315 * US, g, 101)])
    add_table(src, "CUPTI_ACTIVITY_KIND_MEMCPY", GPU_COLS + ", bytes INTEGER, copyKind INTEGER",
              [(1320 * US, 1340 * US, 0, 1, 7, 100, 4242 << 24, 4096, 1)])
    add_table(src, "CUPTI_ACTIVITY_KIND_MEMSET", GPU_COLS + ", bytes INTEGER, value INTEGER",
              [(1345 * US, 1355 * US, 0, 1, 7, 101, 4242 << 24, 64, 0)])
    return src


def test_emit_nvtx_ranges_are_ops_named_by_their_op(tmp_path):
    """torch's emit_nvtx() names each range 'NAME, seq = N, op_id = N, sizes = [...],
    input_op_ids = [...]': the range is named NAME, its parts are kept in attrs, and an
    operator is of kind 'op'. A record_function label in that form is a range of the
    program's own (kind 'user'); a range named 'aten::foo' with none of those parts stays as
    it is (nothing tells it from a range anyone may name so); the step stays the step."""
    import json
    out = tmp_path / "o.duckdb"
    import_traces([emit_nvtx_export(tmp_path / "emit.sqlite")], out)
    con = duckdb.connect(str(out), read_only=True)
    got = con.execute("""SELECT r.name, r.kind, r.attrs, p.name FROM ranges r LEFT JOIN ranges p
        ON p.pid = r.pid AND p.range_id = r.parent_id ORDER BY r.start_ns""").fetchall()
    step = "ProfilerStep#1, op_id = 1"
    assert [(n, k, json.loads(a) if a else None, p) for n, k, a, p in got] == [
        (step, "step", None, None),
        ("aten::linear", "op", {"seq": 0, "op_id": 2, "sizes": [[4, 8], [16, 8], [16]],
                                "input_op_ids": [[0, 0], [0, 0], [0, 0]]}, step),
        ("aten::t", "op", {"seq": 1, "op_id": 3, "sizes": [[16, 8]]}, "aten::linear"),
        ("aten::addmm", "op", {"seq": 2, "op_id": 4, "sizes": [[16], [4, 8], [8, 16]],
                               "input_op_ids": [[0, 0], [0, 0], [3, 0]]}, "aten::linear"),
        ("## forward ##", "user", {"op_id": 5}, step),
        ("aten::relu", "op", {"seq": 3, "op_id": 6, "sizes": [[4, 16]]}, "## forward ##"),
        ("aten::mul", "op", {"seq": 9, "op_id": 7}, None),
        ("aten::foo", "user", None, step)]


def test_gpu_rows_take_the_innermost_emit_nvtx_op_that_launched_them(tmp_path):
    """A kernel, copy or memset launched inside an emit_nvtx op range on its thread has that
    op (the innermost one, as torch.profiler traces give it) as op_id; one launched outside
    every op of its thread has none, whatever other threads run meanwhile. `report --by
    cpu_op` sums their GPU time per op."""
    out = tmp_path / "o.duckdb"
    import_traces([emit_nvtx_export(tmp_path / "emit.sqlite")], out)
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("""SELECT a.kind, a.start_ns // 1000, o.name, o.kind, r.name
        FROM gpu_activities a LEFT JOIN ranges o ON o.pid = a.pid AND o.range_id = a.op_id
        LEFT JOIN ranges r ON r.pid = a.pid AND r.range_id = a.range_id
        ORDER BY a.start_ns""").fetchall() == [
        ("kernel", 1200, "aten::addmm", "op", "aten::addmm"),
        ("memcpy", 1320, "aten::addmm", "op", "aten::addmm"),
        ("memset", 1345, "aten::addmm", "op", "aten::addmm"),
        ("kernel", 1440, "aten::linear", "op", "aten::linear"),
        ("kernel", 1630, "aten::relu", "op", "aten::relu"),
        ("kernel", 1810, None, None, "## forward ##"),
        ("kernel", 1970, None, None, "aten::foo")]
    r = run_cli("report", out, "--by", "cpu_op", "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = {row["op"]: row for row in csv.DictReader(r.stdout.splitlines())}
    assert {k: (int(v["op_calls"]), int(v["gpu_calls"]), round(float(v["gpu_ms"]), 6))
            for k, v in rows.items()} == {"aten::addmm": (1, 3, 0.09),
                                          "aten::linear": (1, 1, 0.01),
                                          "aten::relu": (1, 1, 0.02)}
    # `report --by range` lists the program's own ranges: the label by its name, not the ops
    r = run_cli("report", out, "--by", "range", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert {row["range"]: int(row["gpu_calls"]) for row in csv.DictReader(r.stdout.splitlines())} \
        == {"## forward ##": 2, "aten::foo": 1}
