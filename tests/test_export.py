"""Chrome-trace and Parquet export: valid files, Kineto categories and flows, step scope,
round trips that keep every kernel's start and end to the ns, odd names and NULLs, and bad
arguments."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import zlib
from collections import Counter
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import cuptiprof
from cuptiprof.interop.chrome import NO_THREAD, export_chrome
from cuptiprof.interop.importing import import_traces
from cuptiprof.interop.parquet import export_parquet
from cuptiprof.store.merge import merge_files
from cuptiprof.store.writer import RunInfo, Writer
from cuptiprof.synthetic import synthetic_batches, write_synthetic

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
TB0 = SHARED / "kineto-tbplugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
CLOVER = SHARED / "pipit-nsys/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite"
FILT = [SHARED / "hta/trace_filter/sampled_rank-0.json.gz", SHARED / "hta/trace_filter/sampled_rank-1.json.gz"]


def imported(tmp_path_factory, *srcs: Path) -> Path:
    if not all(s.exists() for s in srcs):
        pytest.skip("../shared/traces is not present")
    base = tmp_path_factory.getbasetemp() / "imported"
    base.mkdir(exist_ok=True)
    out = base / ("+".join(s.name for s in srcs) + ".duckdb")
    if not out.exists():
        import_traces(list(srcs), out)
    return out


def per_kernel(path: Path, where: str = "TRUE"):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return dict((n, (c, d)) for n, c, d in con.execute(
            f"SELECT name, count(*), sum(end_ns - start_ns) FROM kernels WHERE {where} GROUP BY 1").fetchall())
    finally:
        con.close()


@pytest.fixture(scope="module")
def tb0(tmp_path_factory):
    return imported(tmp_path_factory, TB0)


@pytest.fixture(scope="module")
def chrome_steps(tb0, tmp_path_factory):
    out = tmp_path_factory.mktemp("chrome") / "steps.json.gz"
    with cuptiprof.open(tb0, "6:7") as prof:
        counts = export_chrome(prof, out)
    return out, counts


def test_chrome_trace_is_valid_kineto_json(tb0, chrome_steps):
    out, counts = chrome_steps
    doc = json.loads(gzip.decompress(out.read_bytes()))
    ev = doc["traceEvents"]
    assert counts["events"] == len(ev)
    assert (doc["schemaVersion"], doc["displayTimeUnit"]) == (1, "ms")   # as Kineto writes them
    cats = {e.get("cat") for e in ev if e["ph"] == "X"}
    assert {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op", "user_annotation"} <= cats
    for e in ev:
        assert e["ph"] in {"X", "s", "f", "M", "i"}
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["ts"], (int, float))
    # the instants: the [memory] events of the steps exported (6 and 7), no others
    mem = [e for e in ev if e["ph"] == "i"]
    assert {e["name"] for e in mem} == {"[memory]"}
    with duckdb.connect(str(tb0), read_only=True) as con:
        assert len(mem) == con.execute("SELECT count(*) FROM memory_events WHERE step IN (6, 7)"
                                       ).fetchone()[0] > 0
    starts = {e["id"] for e in ev if e["ph"] == "s"}
    ends = {e["id"] for e in ev if e["ph"] == "f"}
    assert ends and ends <= starts  # every arrow into a GPU row starts at its launching call
    assert doc["deviceProperties"][0]["name"] == "Tesla V100-DGXS-32GB"
    steps = sorted(e["name"] for e in ev if e["ph"] == "X" and e["name"].startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#6", "ProfilerStep#7"]


def kernel_times(path: Path, where: str = "TRUE"):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(f"SELECT name, start_ns, end_ns FROM kernels WHERE {where} "
                           "ORDER BY ALL").fetchall()
    finally:
        con.close()


def test_round_trip_keeps_per_kernel_totals(tb0, chrome_steps, tmp_path):
    out, _ = chrome_steps
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    assert per_kernel(back) == per_kernel(tb0, "step IN (6, 7)")
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT count(*) FROM kernels WHERE op_id IS NULL OR step IS NULL").fetchone()[0] == 0
    orig = duckdb.connect(str(tb0), read_only=True)
    q = "SELECT min(start_ns), max(end_ns) FROM kernels WHERE step IN (6, 7)"
    assert con.execute(q).fetchone() == orig.execute(q).fetchone()  # timestamps kept to the ns
    assert kernel_times(back) == kernel_times(tb0, "step IN (6, 7)")  # each kernel's, too
    # attrs as the first import's: none on a host range (no arg of cuptiprof's piled up there)
    q = "SELECT DISTINCT attrs FROM ranges WHERE domain IS DISTINCT FROM 'gpu_user_annotation'"
    assert con.execute(q).fetchall() == orig.execute(q).fetchall() == [(None,)]


def test_full_round_trip_nsys_and_two_ranks(tmp_path_factory, tmp_path):
    src = imported(tmp_path_factory, CLOVER)
    out = tmp_path / "clover.json"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    assert per_kernel(back) == per_kernel(src)
    assert kernel_times(back) == kernel_times(src)  # Nsight Systems' ns, every kernel
    two = imported(tmp_path_factory, *FILT)
    out2 = tmp_path / "two.json.gz"
    with cuptiprof.open(two) as prof:
        export_chrome(prof, out2)
    doc = json.loads(gzip.decompress(out2.read_bytes()))
    labels = [e["args"]["labels"] for e in doc["traceEvents"] if e.get("name") == "process_labels"]
    assert labels.count("CPU") == 2


def test_parquet_datasets_read_as_one_table(tmp_path_factory, tmp_path):
    two = imported(tmp_path_factory, *FILT)
    out = tmp_path / "pq"
    with cuptiprof.open(two) as prof:
        counts = export_parquet(prof, out)
    con = duckdb.connect()
    got = con.execute(f"SELECT pid, count(*) FROM read_parquet('{out}/kernels/**/*.parquet', "
                      "hive_partitioning = true) GROUP BY 1 ORDER BY 1").fetchall()
    src = duckdb.connect(str(two), read_only=True)
    assert got == src.execute("SELECT pid, count(*) FROM kernels GROUP BY 1 ORDER BY 1").fetchall()
    assert len(got) == 2 and counts["kernels"] == sum(n for _, n in got)
    # no host in these traces: Hive's NULL partition, read back as NULL, not a made-up name
    assert sorted(p.name for p in (out / "kernels").iterdir()) == ["host=__HIVE_DEFAULT_PARTITION__"]
    assert con.execute(f"SELECT DISTINCT host FROM read_parquet('{out}/kernels/**/*.parquet', "
                       "hive_partitioning = true)").fetchall() == [(None,)]
    names = con.execute(f"SELECT count(DISTINCT name) FROM read_parquet('{out}/ranges/**/*.parquet', "
                        "hive_partitioning = true)").fetchone()[0]
    assert names > 10  # names are resolved, no strings table needed
    assert (out / "runs" / "data_0.parquet").exists()


def chrome_round_trip(src: Path, out: Path, back: Path) -> Path:
    """Export `src` to the Chrome trace `out`, import that into `back`."""
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    import_traces([out], back)
    return back


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "cuptiprof", *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("given,says", [
    (["--chrome", ""], "--chrome needs a file name"),
    (["--parquet", ""], "--parquet needs a directory name"),
    (["--chrome", "t.json", "--parquet", ""], "--parquet needs a directory name"),
    ([], "say what to write"),
])
def test_export_with_an_empty_output_says_which(tmp_path, capsys, monkeypatch, given, says):
    """`--chrome "$OUT"` with OUT unset: the error named the option given as missing ("say what
    to write: --chrome ..."); it says that the path is empty. Nothing is written."""
    from cuptiprof.cli import main
    src = write_synthetic(tmp_path / "s.duckdb", steps=2, kernels_per_step=5)
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(src), *given]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("cuptiprof: error: ") and says in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]


@pytest.mark.parametrize("given,says", [
    (["--chrome", "t.json.bz2"], "not .bz2; name it t.json.gz or .json"),
    (["--chrome", "t.json.ZST", "--parquet", "pq"], "not .zst; name it t.json.gz or .json"),
])
def test_a_chrome_trace_named_for_another_compression_is_refused(tmp_path, capsys, monkeypatch,
                                                                 given, says):
    """The trace is gzip (.gz) or plain JSON: under t.json.bz2 it was plain JSON that no viewer
    or decompressor took for what its name says. Refused before anything is written."""
    from cuptiprof.cli import main
    src = write_synthetic(tmp_path / "s.duckdb", steps=2, kernels_per_step=5)
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(src), *given]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("cuptiprof: error: --chrome ") and says in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]


def test_export_force_replaces_a_chrome_trace(tmp_path, capsys):
    """--force replaces an existing trace (a file of cuptiprof's own kind); without it the
    export is refused and the trace kept."""
    from cuptiprof.cli import main
    src = write_synthetic(tmp_path / "s.duckdb", steps=3, kernels_per_step=5)
    out = tmp_path / "t.json"
    assert main(["export", str(src), "--chrome", str(out), "--steps", "1"]) == 0
    one = out.read_text()
    assert main(["export", str(src), "--chrome", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and out.read_text() == one
    assert main(["export", str(src), "--chrome", str(out), "--force"]) == 0
    assert len(json.loads(out.read_text())["traceEvents"]) > len(json.loads(one)["traceEvents"])


def test_cli_export_and_errors(tb0, tmp_path):
    out = tmp_path / "t.json.gz"
    r = run_cli("export", tb0, "--chrome", out, "--steps", "8")
    assert r.returncode == 0, r.stderr
    assert "steps 8:8" in r.stderr and out.exists()
    r = run_cli("export", tb0, "--chrome", out)
    assert r.returncode == 2 and "already exists" in r.stderr
    r = run_cli("export", tb0)
    assert r.returncode == 2 and "--chrome" in r.stderr
    r = run_cli("export", tb0, "--chrome", tmp_path / "x.json", "--steps", "99:100")
    assert r.returncode == 2 and not (tmp_path / "x.json").exists()
    r = run_cli("export", tmp_path / "missing.duckdb", "--parquet", tmp_path / "pq")
    assert r.returncode == 2 and "no such file" in r.stderr
    r = run_cli("export", tb0, "--parquet", tmp_path / "nodir" / "pq")
    assert r.returncode == 2 and "does not exist" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz"]  # nothing partial left


# Names JSON must escape, and one that is NULL.
ODD = ['plain', 'with "quotes"', 'back\\slash\\', 'ctrl \x01\x1f\t\n\r\x7f end',
       'non-ASCII é 日本 😀 \u2028', "single ' quote", None]
T0 = 1_700_000_000_123_456_789  # an epoch-ns start: ts far from 0 in microseconds


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """A file with odd names, NULLs where columns allow them, flows on some rows only, an open
    range, a context-wide sync and a negative duration, at odd ns over ~600 s and one row
    200 days later."""
    path = tmp_path_factory.mktemp("odd") / "odd.duckdb"
    n = len(ODD)
    start = [T0 + i * 123_456_789_001 + i for i in range(n - 1)]
    start.append(T0 + 200 * 86_400 * 10**9 + 1)  # 200 days on: a double of us drops the ns
    end = [s + 1_001 + 7 * i for i, s in enumerate(start)]
    corr = pa.array([None if i % 3 == 1 else 100 + i for i in range(n)], pa.int64())
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    gpu = {"start_ns": start, "end_ns": end, "device_id": i32([0, None] + [1] * (n - 2)),
           "context_id": i32([1] * n), "stream_id": i32([7, 7, None, 7, 8, 8, 8]),
           "correlation_id": corr}
    with Writer(path, RunInfo(source="test")) as w:
        w.append({
            "kernels": {**gpu, "stream_id": i32([7] * n), "name": pa.array(ODD, pa.string()),
                        "registers": i32([32, None, 16, 16, 16, 16, 16]),
                        "grid_x": i32([1, None, 2, 2, 2, 2, 2]), "grid_y": i32([1, None, None, 1, 1, 1, 1]),
                        "grid_z": i32([1] * n)},
            "memcpys": {**gpu, "copy_kind": ["HtoD", None, "DtoH", "DtoD", "HtoD", "HtoD", "PtoP"],
                        "src_kind": ["pageable", None, "device", "device", "pinned", "weird", "device"],
                        "dst_kind": ["device"] * n,
                        "bytes": pa.array([4096, None, 1, 0, 10**12, 3, 5], pa.int64())},
            "memsets": {**gpu, "memory_kind": ["device", None, "managed", "x", "device", "device", "device"],
                        "bytes": pa.array([None, 1, 2, 3, 4, 5, 6], pa.int64())},
            "syncs": {**gpu, "sync_type": ["stream_synchronize", "context_synchronize", "odd", None,
                                           "event_synchronize", "stream_wait_event", "unknown"]},
            "api_calls": {"start_ns": start, "end_ns": [e if i != 2 else s - 5 for i, (s, e) in
                                                        enumerate(zip(start, end))],
                          "name": pa.array(ODD, pa.string()), "thread_id": pa.array([11] * n, pa.int64()),
                          "api_kind": ["runtime", "driver"] * 3 + [None],
                          "cbid": i32([None, 1, 2, 3, 4, 5, 6]), "correlation_id": corr},
            "ranges": {"range_id": pa.array(range(1, n + 1), pa.int64()), "name": pa.array(ODD, pa.string()),
                       "start_ns": start, "end_ns": pa.array(end[:-1] + [None], pa.int64()),
                       "thread_id": pa.array([11] * n, pa.int64()),
                       "domain": ["cpu_op", None, "gpu_user_annotation", "python_function",
                                  "gpu_user_annotation", "nvtx", "cpu_op"],
                       "kind": ["op", "user", "user", "user", "user", "op", "op"],
                       "attrs": [None, None, '{"device": 1, "stream": 9}', None, None, None, None]},
        })
    return path


def load_trace(path: Path, **kw) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:  # the gzip module reads what isal wrote
        return json.load(fh, **kw)


@pytest.fixture(scope="module")
def odd_trace(odd, tmp_path_factory):
    out = tmp_path_factory.mktemp("odd_out") / "odd.json.gz"
    with cuptiprof.open(odd) as prof:
        counts = export_chrome(prof, out)
    return out, counts


def test_odd_names_and_nulls_survive(odd_trace):
    out, counts = odd_trace
    doc = load_trace(out)
    ev = doc["traceEvents"]
    assert counts["events"] == len(ev)
    # no thread or stream: track -1 as an unsigned 32-bit number, never null nor negative
    assert all(e["tid"] is not None and e["tid"] >= 0 and e["pid"] >= 0 for e in ev)
    # every pid has its process named, the GPU rows of no device's too, and the
    # track of a context-wide sync (no stream) is named so
    assert {e["pid"] for e in ev if e["name"] == "process_name"} == {e["pid"] for e in ev}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert tracks[(1, NO_THREAD)] == "no stream" and tracks[(1, 7)] == "stream 7"
    x = [e for e in ev if e["ph"] == "X"]
    names = lambda *cats: Counter(e["name"] for e in x if e["cat"] in cats)  # noqa: E731
    assert names("kernel") == names("cuda_runtime", "cuda_driver") == Counter(ODD)
    assert names("cpu_op", "user_annotation", "python_function", "gpu_user_annotation") == \
        Counter(ODD)
    # the open range ends at the export's last time (the last kernel's end), and says it is open
    still = [e for e in x if e["args"].get("cuptiprof open")]
    assert [e["name"] for e in still] == [ODD[-1]] and still[0]["args"]["cuptiprof open"] == 1
    assert Decimal(still[0]["ts"]) + Decimal(still[0]["dur"]) == max(
        Decimal(e["ts"]) + Decimal(e["dur"]) for e in x if e["cat"] == "kernel")
    k = {e["name"]: e for e in x if e["cat"] == "kernel"}
    assert k["with \"quotes\""]["args"]["registers per thread"] is None
    assert k["with \"quotes\""]["args"]["device"] is None and k["with \"quotes\""]["pid"] == 999_999
    assert "grid" not in k["with \"quotes\""]["args"] and "grid" not in k["back\\slash\\"]["args"]
    assert k["plain"]["args"]["grid"] == [1, 1, 1]   # a grid of unknown y is left out, not [2, null, 1]
    assert k["plain"]["args"]["correlation"] == 100 and k["with \"quotes\""]["args"]["correlation"] is None
    copies = sorted((e for e in x if e["cat"] == "gpu_memcpy"), key=lambda e: e["ts"])  # row order
    # a copy of no stream is on track -1 (unsigned), its stream arg left null as recorded
    assert (copies[2]["tid"], copies[2]["args"]["stream"]) == (NO_THREAD, None)
    assert copies[1]["name"] == "Memcpy None (Unknown -> Device)" and copies[1]["args"]["bytes"] is None
    assert copies[1]["args"]["memory bandwidth (GB/s)"] == 0.0
    assert copies[0]["args"]["memory bandwidth (GB/s)"] == 4096 / 1001
    assert copies[5]["name"] == "Memcpy HtoD (Unknown -> Device)"
    assert sorted(e["name"] for e in x if e["cat"] == "gpu_memset") == \
        ["Memset (Device)"] * 4 + ["Memset (Managed)", "Memset (Unknown)", "Memset (Unknown)"]
    syncs = [e for e in x if e["cat"] == "cuda_sync"]
    assert sorted(e["name"] for e in syncs) == ["Context Sync", "Event Sync", "Stream Sync",
                                                "Stream Wait Event", "Sync", "Sync", "Sync"]
    assert {e["tid"] for e in syncs if e["args"]["stream"] == -1} == {NO_THREAD}  # context-wide
    calls = {e["name"]: e for e in x if e["cat"].startswith("cuda_") and e["cat"] != "cuda_sync"}
    assert "cbid" not in calls["plain"]["args"] and calls["with \"quotes\""]["args"]["cbid"] == 1
    assert calls["with \"quotes\""]["cat"] == "cuda_driver" and calls[None]["cat"] == "cuda_runtime"
    assert calls["back\\slash\\"]["dur"] == -0.005  # a negative duration keeps its sign
    gpu_ann = [e for e in x if e["cat"] == "gpu_user_annotation"]
    assert sorted((e["pid"], e["tid"], e["args"]["device"], e["args"]["stream"]) for e in gpu_ann) == \
        [(0, 11, None, None), (1, 9, 1, 9)]  # no attrs: device 0, the range's thread
    assert sorted(e["cat"] for e in x if e["name"] in ("plain", "single ' quote", None) and e["cat"]
                  not in ("kernel", "cuda_runtime", "cuda_driver")) == ["cpu_op"] * 3
    # a GPU's process is labelled with its device, device 0 too; rows of no device are CPU ops
    labels = {e["pid"]: e["args"]["labels"] for e in ev if e["name"] == "process_labels"}
    assert (labels[0], labels[1], labels[999_999]) == ("GPU 0", "GPU 1", "CPU ops")


def test_a_partial_grid_exports_to_a_trace_that_imports_back(tmp_path):
    """A grid of unknown y was written as [2, null, 1], which no Kineto reader (cuptiprof's own
    import included) takes: the export leaves such a grid out, and the trace imports back."""
    src, trace, back = tmp_path / "g.duckdb", tmp_path / "g.json.gz", tmp_path / "back.duckdb"
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    with Writer(src, RunInfo(source="test")) as w:
        w.append({"kernels": {"start_ns": [T0, T0 + 10_000], "end_ns": [T0 + 5_000, T0 + 15_000],
                              "device_id": i32([0, 0]), "stream_id": i32([7, 7]),
                              "name": ["partial", "whole"], "grid_x": i32([2, 4]),
                              "grid_y": i32([None, 2]), "grid_z": i32([1, 1])}})
    with cuptiprof.open(src) as prof:
        export_chrome(prof, trace)
    import_traces([trace], back)
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT name, grid_x, grid_y, grid_z FROM kernels ORDER BY name").fetchall() == \
        [("partial", None, None, None), ("whole", 4, 2, 1)]


def test_copies_keep_their_memory_kinds_and_one_of_no_duration_has_no_bandwidth(tmp_path):
    """A copy's name says its memory kinds as Kineto does ('Memcpy HtoD (Pinned -> Device)',
    'Device Static' for a __device__ variable), which the importer reads back; a copy that took no time has bandwidth 0.0 (not a division
    by zero, which would leave the key without a value)."""
    kinds = ["pageable", "pinned", "device", "array", "managed", "device_static", "managed_static"]
    n = len(kinds)
    src, out, back = tmp_path / "c.duckdb", tmp_path / "c.json", tmp_path / "back.duckdb"
    with Writer(src, RunInfo(source="test")) as w:
        w.append({"memcpys": {"start_ns": [T0 + 1_000 * i for i in range(n)],
                              "end_ns": [T0 + 1_000 * i + (500 if i else 0) for i in range(n)],
                              "device_id": pa.array([0] * n, pa.int32()),
                              "stream_id": pa.array([7] * n, pa.int32()), "copy_kind": ["HtoD"] * n,
                              "src_kind": kinds, "dst_kind": kinds[::-1],
                              "bytes": pa.array([1_000] * n, pa.int64())}})
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    copies = sorted((e for e in load_trace(out)["traceEvents"] if e.get("cat") == "gpu_memcpy"),
                    key=lambda e: e["ts"])
    assert [e["args"]["memory bandwidth (GB/s)"] for e in copies] == [0.0] + [2.0] * (n - 1)
    assert copies[1]["name"] == "Memcpy HtoD (Pinned -> Device Static)"
    assert copies[5]["name"] == "Memcpy HtoD (Device Static -> Pinned)"   # a __device__ variable
    import_traces([out], back)
    q = "SELECT start_ns, src_kind, dst_kind FROM memcpys ORDER BY 1"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(q).fetchall() == orig.execute(q).fetchall()


def test_a_log_record_without_a_time_is_left_out(tmp_path):
    """A log record of no time has no place on a timeline: the trace holds the others and stays
    valid JSON."""
    src, out = tmp_path / "l.duckdb", tmp_path / "l.json"
    with Writer(src, RunInfo(source="test"), pid=3) as w:
        w.append({"kernels": {"start_ns": [T0], "end_ns": [T0 + 10], "name": ["k"],
                              "device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32())}})
    with duckdb.connect(str(src)) as con:
        con.executemany("INSERT INTO logs (run_id, pid, thread_id, time_ns, level, logger, message) "
                        "SELECT min(run_id), 3, 1, ?, 'INFO', 'x', ? FROM runs",
                        [(T0 + 5, "timed"), (None, "untimed")])
    with cuptiprof.open(src) as prof:
        counts = export_chrome(prof, out)
    ev = load_trace(out)["traceEvents"]
    assert [e["name"] for e in ev if e.get("cat") == "cuptiprof_log"] == ["timed"]
    assert counts["events"] == len(ev)


def test_flows_match_rows_with_a_correlation_id(odd, odd_trace):
    ev = load_trace(odd_trace[0])["traceEvents"]
    con = duckdb.connect(str(odd), read_only=True)
    n = lambda t: con.execute(f"SELECT count(correlation_id) FROM {t}").fetchone()[0]  # noqa: E731
    starts = [e for e in ev if e["ph"] == "s"]
    ends = [e for e in ev if e["ph"] == "f"]
    assert n("api_calls") == 5
    # a kernel, copy, memset and sync share each id: an arrow to each, a flow id each
    assert len(starts) == len(ends) == n("gpu_activities") == 20
    assert all(e["cat"] == e["name"] == "ac2g" and e.get("bp") == "e" for e in ends)
    assert len({e["id"] for e in ends}) == 20
    assert sorted(e["id"] for e in ends) == sorted(e["id"] for e in starts)


def test_timestamps_are_exact_to_the_ns(odd, odd_trace):
    """ts and dur are decimals with three places: read as Decimal, each row's start and end
    come back to the nanosecond, far from the base too."""
    doc = load_trace(odd_trace[0], parse_float=Decimal)
    base = doc["baseTimeNanoseconds"]
    assert base == T0 // 10**6 * 10**6
    con = duckdb.connect(str(odd), read_only=True)
    for table, cats in (("kernels", {"kernel"}), ("memcpys", {"gpu_memcpy"}), ("syncs", {"cuda_sync"}),
                        ("api_calls", {"cuda_runtime", "cuda_driver"})):
        want = Counter(con.execute(f"SELECT start_ns, end_ns FROM {table}").fetchall())
        got = Counter()
        for e in doc["traceEvents"]:
            if e["ph"] == "X" and e["cat"] in cats:
                assert isinstance(e["ts"], Decimal) and e["ts"].as_tuple().exponent == -3
                s = base + int(e["ts"] * 1000)
                got[(s, s + int(e["dur"] * 1000))] += 1
        assert got == want, table


def test_plain_json_and_two_processes_pids(tmp_path_factory, tmp_path):
    two = imported(tmp_path_factory, *FILT)
    out = tmp_path / "two.json"
    with cuptiprof.open(two) as prof:
        export_chrome(prof, out)
    doc = load_trace(out)
    ev = doc["traceEvents"]
    named = {e["pid"] for e in ev if e["ph"] == "M"}
    assert {e["pid"] for e in ev} == named  # every row's pid has its process name
    cpu = {e["pid"] for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime")}
    gpu = {e["pid"] for e in ev if e.get("cat") == "kernel"}
    con = duckdb.connect(str(two), read_only=True)
    devs = con.execute("SELECT DISTINCT dense_rank() OVER (ORDER BY run_id, pid) - 1, device_id "
                       "FROM kernels").fetchall()
    assert cpu == {2_000_000, 2_000_001}  # by the process's index
    assert gpu == {1_000_000 + i * 1000 + d for i, d in devs} == {1_000_000, 1_001_001}
    assert "distributedInfo" not in doc  # two ranks: no single rank to name


def test_zlib_when_isal_is_missing(odd, odd_trace, tmp_path, monkeypatch):
    import types
    import cuptiprof.interop.chrome.export as chrome_export   # the module that reads them
    levels = []

    def zlib_file(*a, **k):   # the standard library's writer, seen to be the one used
        levels.append(k.get("compresslevel"))
        return gzip.GzipFile(*a, **k)
    monkeypatch.setattr(chrome_export, "_gzip", types.SimpleNamespace(GzipFile=zlib_file))
    monkeypatch.setattr(chrome_export, "_GZIP_LEVEL", 6)
    out = tmp_path / "zlib.json.gz"
    with cuptiprof.open(odd) as prof:
        export_chrome(prof, out)
    assert levels == [6]
    a, b = load_trace(out), load_trace(odd_trace[0])
    key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731 - events in any order
    assert sorted(a.pop("traceEvents"), key=key) == sorted(b.pop("traceEvents"), key=key)
    assert a == b


@pytest.mark.parametrize("lib", ["isal", "zlib"])
def test_gzip_header_names_the_output_not_the_temporary_file(odd, tmp_path, monkeypatch, lib):
    """The name in a .gz header is what `gunzip -N` restores and `file` shows: the trace's own
    name, not the hidden name it was written under before the rename."""
    import cuptiprof.interop.chrome.export as chrome_export   # the module that reads it
    if lib == "zlib":
        monkeypatch.setattr(chrome_export, "_gzip", gzip)
    out = tmp_path / "run.json.gz"
    with cuptiprof.open(odd) as prof:
        export_chrome(prof, out)
    head = out.read_bytes()[:200]
    assert head[:2] == b"\x1f\x8b" and head[3] & 0x08   # FNAME: a name follows the header
    assert head[10:head.index(b"\0", 10)] == b"run.json"
    assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]


def _two_processes(path: Path) -> Path:
    """Two processes of one run, as a merge of ranks holds them: each a step (10) on its own
    thread, the steps overlapping in time, an op around each launch, and the SAME correlation
    ids (1..4) and range ids in both, as CUPTI and each process number them."""
    t0 = 1_700_000_000_000_000_000
    for i, pid in enumerate((101, 202)):
        t = t0 + i * 30_000    # rank 1's step starts 30 us later and ends 90 us earlier:
        tid = pid * 10         # rank 0's last launch is after the end of the step started last
        span, gap = (300_000, 70_000) if i == 0 else (180_000, 40_000)
        ops = [(2 + k, 1, 1, f"aten::op{k}", "op", 10, t + 10_000 + k * gap, t + 40_000 + k * gap)
               for k in range(4)]
        rows = [(1, None, 0, "ProfilerStep#10", "step", 10, t, t + span)] + ops
        with Writer(path, RunInfo(source="synthetic", label="two"), mode="append" if i else "create",
                    pid=pid) as w:
            w.append({
                "ranges": {"range_id": [r[0] for r in rows], "parent_id": pa.array([r[1] for r in rows], pa.int64()),
                           "depth": pa.array([r[2] for r in rows], pa.int32()), "name": [r[3] for r in rows],
                           "kind": [r[4] for r in rows], "step": pa.array([r[5] for r in rows], pa.int32()),
                           "thread_id": [tid] * len(rows), "start_ns": [r[6] for r in rows],
                           "end_ns": [r[7] for r in rows], "domain": [None] + ["cpu_op"] * 4},
                "api_calls": {"thread_id": [tid] * 4, "api_kind": ["runtime"] * 4,
                              "name": ["cudaLaunchKernel"] * 4, "correlation_id": [1, 2, 3, 4],
                              "start_ns": [o[6] + 1_000 for o in ops], "end_ns": [o[6] + 5_000 for o in ops],
                              "step": pa.array([10] * 4, pa.int32()), "range_id": [o[0] for o in ops]},
                "kernels": {"device_id": pa.array([i] * 4, pa.int32()), "stream_id": pa.array([7] * 4, pa.int32()),
                            "name": [f"k{i}_{k}" for k in range(4)], "correlation_id": [1, 2, 3, 4],
                            "step": pa.array([10] * 4, pa.int32()), "range_id": [o[0] for o in ops],
                            "op_id": [o[0] for o in ops],
                            "start_ns": [o[6] + 20_000 for o in ops], "end_ns": [o[6] + 30_000 for o in ops]},
                "devices": {"device_id": pa.array([i], pa.int32()), "kind": ["gpu"], "name": ["NVIDIA H200"],
                            "peak_memory_bw_gbps": [4800.0]}})
    return path


def test_round_trip_of_several_processes_keeps_steps_and_links(tmp_path):
    """Each process's ids are moved apart in the export (flows and the importer's links would
    join one process's call to another's kernel), steps of several threads that overlap in time
    still give each call the step of its own thread, and the importer takes the processes apart
    again (their pids, ids, devices)."""
    src = _two_processes(tmp_path / "two.duckdb")
    out = tmp_path / "two.json.gz"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    ev = load_trace(out)["traceEvents"]
    starts = [e["id"] for e in ev if e.get("ph") == "s"]
    assert len(starts) == 8 and len(set(starts)) == 8
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    con = duckdb.connect(str(back), read_only=True)
    got = con.execute("SELECT k.pid, k.name, k.step, o.name, k.correlation_id FROM kernels k "
                      "JOIN ranges o ON o.range_id = k.op_id AND o.pid = k.pid ORDER BY k.name").fetchall()
    assert got == [(pid, f"k{i}_{k}", 10, f"aten::op{k}", k + 1)
                   for i, pid in enumerate((101, 202)) for k in range(4)]
    # the processes come back apart: their own pids, devices, steps; nothing merged
    assert con.execute("SELECT pid, device_id, peak_memory_bw_gbps FROM devices ORDER BY 1"
                       ).fetchall() == [(101, 0, 4800.0), (202, 1, 4800.0)]
    assert con.execute("SELECT pid, count(*) FROM ranges WHERE kind = 'step' GROUP BY 1 ORDER BY 1"
                       ).fetchall() == [(101, 1), (202, 1)]
    assert con.execute("SELECT count(*) FROM data_quality WHERE check_name = 'processes_merged'"
                       ).fetchall() == [(0,)]


def test_processes_past_1000_keep_their_gpu_rows(tmp_path):
    """Process i's GPU rows are written on pids 1_000_000 + 1000 * i + device: those of the
    1001st process on were the CPU pids of the first ones (2_000_000 + i), and imported back
    its kernels went to them. The CPU pids go above every GPU pid."""
    src = _two_processes(tmp_path / "two.duckdb")
    with duckdb.connect(str(src)) as con:   # 1002 processes: copies of the second, pids 1000 on
        for t in ("processes", "api_call_rows", "range_rows", "devices"):
            con.execute(f"INSERT INTO {t} SELECT x.* REPLACE (x.pid + i AS pid) FROM {t} x, "
                        "range(1, 1001) t(i) WHERE x.pid = 202")
        con.execute("CREATE TEMP TABLE l2 AS SELECT lane_id AS old, i, lane_id + 100 * i AS new "
                    "FROM lanes, range(1, 1001) t(i) WHERE pid = 202")
        con.execute("INSERT INTO lanes SELECT l2.new, run_id, pid + l2.i, device_id, context_id, "
                    "stream_id FROM lanes JOIN l2 ON l2.old = lanes.lane_id")
        con.execute("INSERT INTO kernel_rows SELECT k.* REPLACE (l2.new AS lane_id) "
                    "FROM kernel_rows k JOIN l2 ON l2.old = k.lane_id")
        con.execute("DELETE FROM step_busy_runs")   # computed again as the file is opened
        want = con.execute("SELECT pid, name, step FROM kernels ORDER BY ALL").fetchall()
    out, back = tmp_path / "many.json.gz", tmp_path / "back.duckdb"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    import_traces([out], back)
    with duckdb.connect(str(back), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM processes").fetchone() == (1002,)
        assert con.execute("SELECT pid, name, step FROM kernels ORDER BY ALL").fetchall() == want


def test_correlation_ids_of_several_processes_stay_apart_beyond_16_bits(tmp_path):
    """CUPTI's correlation ids are 32-bit: one process's id 65537 and another's 1 are two
    arrows in an export of both, and each kernel comes back linked to its own call."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "two.duckdb"
    for i, pid in enumerate((101, 202)):
        with Writer(src, RunInfo(source="synthetic", label="two"), mode="append" if i else "create",
                    pid=pid) as w:
            w.append({"api_calls": {"thread_id": [5, 5], "api_kind": ["runtime"] * 2,
                                    "name": [f"launch{i}"] * 2, "correlation_id": [1, 65_537],
                                    "start_ns": [t, t + 100], "end_ns": [t + 50, t + 150]},
                      "kernels": {"device_id": pa.array([0, 0], pa.int32()),
                                  "stream_id": pa.array([7, 7], pa.int32()), "name": [f"k{i}"] * 2,
                                  "correlation_id": [1, 65_537], "start_ns": [t + 1_000, t + 2_000],
                                  "end_ns": [t + 1_100, t + 2_100]}})
    out = tmp_path / "two.json"
    back = chrome_round_trip(src, out, tmp_path / "back.duckdb")
    ev = load_trace(out)["traceEvents"]
    for ph in ("s", "f"):
        ids = [e["id"] for e in ev if e["ph"] == ph]
        assert len(ids) == len(set(ids)) == 4, ph
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT k.name, a.name, count(*) FROM kernels k JOIN api_calls a USING "
                       "(run_id, pid, correlation_id) GROUP BY ALL ORDER BY ALL").fetchall() == [
        ("k0", "launch0", 2), ("k1", "launch1", 2)]


def test_parquet_with_steps_holds_only_those_steps(tmp_path):
    from cuptiprof.synthetic import write_synthetic
    from cuptiprof.interop.parquet import export_parquet

    src = write_synthetic(tmp_path / "s.duckdb", steps=3, kernels_per_step=40, seed=3)
    with cuptiprof.open(src, "1") as prof:
        counts = export_parquet(prof, tmp_path / "pq")
    read = lambda t: duckdb.sql(   # noqa: E731
        f"SELECT DISTINCT step FROM read_parquet('{tmp_path}/pq/{t}/**/*.parquet', "
        "hive_partitioning = true) ORDER BY 1").fetchall()
    assert read("kernels") == read("memcpys") == read("ranges") == [(1,)]
    assert counts["kernels"] == per_kernel_count(src, "step = 1") and counts["devices"] > 0
    assert counts["runs"] == 1   # every run (a run has no step)


def per_kernel_count(path: Path, where: str) -> int:
    return sum(c for c, _ in per_kernel(path, where).values())


def _with_rows_outside_steps(path: Path) -> Path:
    """One process: a step with a kernel, and a kernel and a copy launched after it (a decode
    after the loop), on a host, with a peak bandwidth that is not a whole number."""
    t = 1_700_000_000_000_000_000
    with Writer(path, RunInfo(source="synthetic", host="node-7"), pid=31) as w:
        w.append({
            "ranges": {"range_id": [1], "parent_id": pa.array([None], pa.int64()),
                       "depth": pa.array([0], pa.int32()), "name": ["ProfilerStep#3"], "kind": ["step"],
                       "step": pa.array([3], pa.int32()), "thread_id": [5], "start_ns": [t],
                       "end_ns": [t + 100_000]},
            "api_calls": {"thread_id": [5, 5, 5], "api_kind": ["runtime"] * 3,
                          "name": ["cudaLaunchKernel", "cudaLaunchKernel", "cudaMemcpyAsync"],
                          "correlation_id": [1, 2, 3], "start_ns": [t + 1_000, t + 200_000, t + 210_000],
                          "end_ns": [t + 5_000, t + 205_000, t + 215_000],
                          "step": pa.array([3, None, None], pa.int32())},
            "kernels": {"device_id": pa.array([0, 0], pa.int32()), "stream_id": pa.array([7, 7], pa.int32()),
                        "name": ["gemm", "decode"], "correlation_id": [1, 2],
                        "step": pa.array([3, None], pa.int32()),
                        "start_ns": [t + 10_000, t + 220_000], "end_ns": [t + 50_000, t + 260_000]},
            "memcpys": {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32()),
                        "copy_kind": ["DtoH"], "bytes": [4096], "correlation_id": [3],
                        "step": pa.array([None], pa.int32()), "start_ns": [t + 270_000], "end_ns": [t + 280_000]},
            "devices": {"device_id": pa.array([0], pa.int32()), "kind": ["gpu"], "name": ["NVIDIA H200"],
                        "peak_memory_bw_gbps": [2039.04]}})
    return path


def test_chrome_export_holds_every_row_unless_steps_are_chosen(tmp_path):
    """A timeline shows the work outside steps too (warm-up, a decode after the loop); --steps
    caps it. Host and a fractional peak bandwidth survive the round trip."""
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    out = tmp_path / "o.json.gz"
    with cuptiprof.open(src) as prof:
        counts = export_chrome(prof, out)
    assert counts["kernels"] == 2 and counts["memcpys"] == 1
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    assert per_kernel(back) == per_kernel(src)
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT host FROM processes").fetchall() == [("node-7",)]
    assert con.execute("SELECT peak_memory_bw_gbps FROM devices").fetchall() == [(2039.04,)]
    assert con.execute("SELECT count(*) FROM memcpys").fetchone()[0] == 1
    with cuptiprof.open(src, "3") as prof:
        assert export_chrome(prof, tmp_path / "s.json", force=True)["kernels"] == 1


def _range_rows(rows) -> dict:
    """A ranges batch from (range_id, parent_id, depth, name, kind, step, thread_id, start_ns,
    end_ns) tuples, in cuptiprof's domain."""
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    return {"range_id": [r[0] for r in rows], "parent_id": pa.array([r[1] for r in rows], pa.int64()),
            "depth": i32([r[2] for r in rows]), "name": [r[3] for r in rows],
            "kind": [r[4] for r in rows], "step": i32([r[5] for r in rows]),
            "thread_id": [r[6] for r in rows], "start_ns": [r[7] for r in rows],
            "end_ns": [r[8] for r in rows], "domain": ["cuptiprof"] * len(rows)}


def _steps_in_enclosing_ranges(path: Path, more: bool = False) -> Path:
    """Steps 1-3 inside a "generate" range (thread 5), a data loader's range on thread 6 that
    began before the first step and spans them all (its launch in step 2 takes that step by
    the process's open step), a range opened in a warm-up (step 0, thread 7) that outlasts it,
    another thread's warm-up overlapping step 2, and a range that ended before the steps.
    `more`: also a range never closed (thread 9, from the start), and in each step a log
    record and an allocation (step 2's of pinned memory)."""
    t = 1_700_000_000_000_000_000
    us = lambda x: t + x * 1000  # noqa: E731
    # range_id, parent, depth, name, kind, step, thread, start, end
    rows = [(1, None, 0, "generate", "user", None, 5, us(0), us(1000)),
            (2, 1, 1, "prefill", "user", None, 5, us(10), us(100)),
            (3, None, 0, "loader", "user", None, 6, us(50), us(900)),
            (4, None, 0, "step", "warmup", 0, 7, us(20), us(90)),
            (5, 4, 1, "compile", "user", 0, 7, us(30), us(800)),
            (6, None, 0, "step", "warmup", 0, 8, us(350), us(450))]
    for k in (1, 2, 3):   # step k: [100k, 100k + 200), an op inside it
        s = us(100 + 200 * (k - 1))
        rows += [(5 + 2 * k, 1, 1, f"ProfilerStep#{k}", "step", k, 5, s, s + 150_000),
                 (6 + 2 * k, 5 + 2 * k, 2, f"aten::op{k}", "op", k, 5, s + 10_000, s + 50_000)]
    # a launch in each step's op, and the loader's launch during step 2
    calls = [(5, 6 + 2 * k, k, us(100 + 200 * (k - 1)) + 20_000) for k in (1, 2, 3)]
    calls += [(6, 3, 2, us(320))]
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    if more:
        rows.append((20, None, 0, "serve", "user", None, 9, us(0), None))
    with Writer(path, RunInfo(source="synthetic"), pid=31) as w:
        if more:
            w.append({
                "logs": {"thread_id": [5] * 3, "time_ns": [us(130 + 200 * k) for k in range(3)],
                         "level": ["INFO"] * 3, "logger": ["train"] * 3,
                         "message": [f"step {k}" for k in (1, 2, 3)], "step": i32([1, 2, 3])},
                "memory_events": {"device_id": i32([0] * 3),
                                  "time_ns": [us(140 + 200 * k) for k in range(3)],
                                  "operation": ["alloc"] * 3, "bytes": [4096] * 3,
                                  "memory_kind": ["device", "pinned", "device"],
                                  "step": i32([1, 2, 3])}})
        w.append({
            "ranges": _range_rows(rows),
            "api_calls": {"thread_id": [c[0] for c in calls], "api_kind": ["runtime"] * 4,
                          "name": ["cudaLaunchKernel"] * 4, "correlation_id": [1, 2, 3, 4],
                          "start_ns": [c[3] for c in calls], "end_ns": [c[3] + 2_000 for c in calls],
                          "step": i32([c[2] for c in calls]), "range_id": [c[1] for c in calls]},
            "kernels": {"device_id": i32([0] * 4), "stream_id": i32([7] * 4),
                        "name": ["k1", "k2", "k3", "load2"], "correlation_id": [1, 2, 3, 4],
                        "step": i32([c[2] for c in calls]), "range_id": [c[1] for c in calls],
                        "start_ns": [c[3] + 5_000 for c in calls],
                        "end_ns": [c[3] + 9_000 for c in calls]}})
    return path


def test_an_export_of_some_steps_holds_the_ranges_around_them(tmp_path):
    """--steps keeps every range that overlaps the steps' time, unclipped (an enclosing
    "generate", a loader's range begun before them, one opened in a warm-up); steps and
    warm-ups of other numbers and ranges that ended before stay out. Imported back, those
    ranges are in no step, no step is added, and every launch keeps its step, the loader's
    (in a range begun outside every step) included."""
    src = _steps_in_enclosing_ranges(tmp_path / "s.duckdb")
    out = tmp_path / "s.json"
    with cuptiprof.open(src, "2") as prof:
        export_chrome(prof, out)
    names = sorted(e["name"] for e in load_trace(out)["traceEvents"]
                   if e["ph"] == "X" and e["cat"] != "kernel" and e["cat"] != "cuda_runtime")
    assert names == ["ProfilerStep#2", "aten::op2", "compile", "generate", "loader"]
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    assert per_kernel(back, "step = 2") == per_kernel(src, "step = 2") == {
        "k2": (1, 4_000), "load2": (1, 4_000)}
    rows = ("SELECT name, kind, step, start_ns, end_ns FROM ranges WHERE name IN "
            "('generate', 'loader', 'compile') ORDER BY name")
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert [r[:2] + (None,) + r[3:] for r in orig.execute(rows).fetchall()] == \
        con.execute(rows).fetchall()
    assert con.execute("SELECT list(step) FROM ranges WHERE kind IN ('step', 'warmup')"
                       ).fetchall() == [([2],)]
    assert con.execute("SELECT step, count(*) FROM api_calls GROUP BY ALL").fetchall() == [(2, 2)]


def test_an_export_of_some_steps_leaves_out_ranges_of_other_steps(tmp_path):
    """Thread 5 runs step 1 while thread 6 runs step 2. An export of step 2 holds the range
    around both steps (begun before them), not the ranges of step 1 that thread 5 opened while
    step 2 ran (one at the very ns step 2 began too): imported back, they would fall in step 2
    by time. Nor does it hold another thread's warm-up running into step 2 (an import would
    take it for a warm-up beside it) or a range begun the ns step 2 ended. No range is in
    step 2 that was not recorded there."""
    t = 1_700_000_000_000_000_000
    us = lambda x: t + x * 1000  # noqa: E731
    # range_id, parent, depth, name, kind, step, thread, start, end
    rows = [(1, None, 0, "serve", "user", None, 5, us(0), us(1000)),
            (2, 1, 1, "step", "step", 1, 5, us(10), us(300)),
            (3, 2, 2, "fwd1", "user", 1, 5, us(150), us(250)),
            (4, None, 0, "step", "step", 2, 6, us(100), us(400)),
            (5, 4, 1, "fwd2", "user", 2, 6, us(120), us(200)),
            (6, 2, 2, "bwd1", "user", 1, 5, us(100), us(140)),
            (7, None, 0, "step", "warmup", 0, 7, us(50), us(150)),
            (8, None, 0, "after", "user", None, 8, us(400), us(500))]
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "s.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=31) as w:
        w.append({
            "ranges": _range_rows(rows),
            "api_calls": {"thread_id": [5, 6], "api_kind": ["runtime"] * 2,
                          "name": ["cudaLaunchKernel"] * 2, "correlation_id": [1, 2],
                          "start_ns": [us(160), us(130)], "end_ns": [us(161), us(131)],
                          "step": i32([1, 2]), "range_id": [3, 5]},
            "kernels": {"device_id": i32([0] * 2), "stream_id": i32([7] * 2),
                        "name": ["k1", "k2"], "correlation_id": [1, 2], "step": i32([1, 2]),
                        "range_id": [3, 5], "start_ns": [us(170), us(140)],
                        "end_ns": [us(175), us(145)]}})
    out = tmp_path / "s.json"
    with cuptiprof.open(src, "2") as prof:
        export_chrome(prof, out)
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT name, step FROM ranges ORDER BY start_ns").fetchall() == [
        ("serve", None), ("ProfilerStep#2", 2), ("fwd2", 2)]
    assert con.execute("SELECT name, step FROM kernels").fetchall() == [("k2", 2)]


def test_export_checks_both_outputs_before_writing_either(tmp_path):
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    for force in ([], ["--force"]):
        r = run_cli("export", src, "--chrome", tmp_path / "both.json", "--parquet", taken, *force)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "both.json").exists()   # nothing written when one is refused
    # one path for both: refused, whatever --force says, before either is written
    for force in ([], ["--force"]):
        r = run_cli("export", src, "--chrome", tmp_path / "same", "--parquet", tmp_path / "." / "same", *force)
        assert r.returncode == 2 and "name the same path" in r.stderr, r.stderr
        assert not (tmp_path / "same").exists()
    r = run_cli("export", src, "--chrome", tmp_path / "UP.JSON.GZ")
    assert r.returncode == 0, r.stderr
    assert gzip.decompress((tmp_path / "UP.JSON.GZ").read_bytes()).startswith(b"{")


def test_parquet_table_without_rows_is_still_a_dataset(tmp_path):
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    with cuptiprof.open(src, "3") as prof:
        counts = export_parquet(prof, tmp_path / "pq")
    assert counts["memcpys"] == 0 and counts["memsets"] == 0
    for t in ("memcpys", "memsets", "memory_events"):
        rel = duckdb.sql(f"SELECT * FROM read_parquet('{tmp_path}/pq/{t}/**/*.parquet', "
                         "hive_partitioning = true)")
        assert rel.fetchall() == [] and {"host", "pid", "run_id"} <= set(rel.columns), t
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/pq/kernels/**/*.parquet', "
                      "hive_partitioning = true)").fetchall() == [(1,)]
    # host and pid are the directories' alone: no file holds them as columns as well
    import pyarrow.parquet as pq
    files = list((tmp_path / "pq").glob("*/host=*/pid=*/*.parquet"))
    assert {f.parts[-4] for f in files} >= {"kernels", "memcpys", "memsets"}
    for f in files:
        assert not {"host", "pid"} & set(pq.read_schema(f).names), f


def test_every_flow_arrow_has_both_ends_once(tmp_path, chrome_steps):
    """An arrow goes from the first call with a correlation id (a runtime call and the driver
    call it makes share one) to each GPU row with it (a graph launch's kernels share one), a
    flow id each, and only where both are exported: no dangling or doubled ends."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "f.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({
            "api_calls": {"thread_id": [5] * 4, "api_kind": ["runtime", "driver", "runtime", "runtime"],
                          "name": ["cudaMalloc", "cuMemAlloc", "cudaGraphLaunch", "cudaEventRecord"],
                          "correlation_id": [1, 1, 2, 3], "start_ns": [t, t + 100, t + 1_000, t + 2_000],
                          "end_ns": [t + 500, t + 400, t + 1_500, t + 2_500]},
            "kernels": {"device_id": pa.array([0] * 4, pa.int32()), "stream_id": pa.array([7] * 4, pa.int32()),
                        "name": ["a", "b", "c", "orphan"], "correlation_id": [2, 2, 2, 4],
                        "start_ns": [t + 3_000, t + 4_000, t + 5_000, t + 6_000],
                        "end_ns": [t + 3_500, t + 4_500, t + 5_500, t + 6_500]},
            "memsets": {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32()),
                        "bytes": [64], "correlation_id": [1], "start_ns": [t + 600], "end_ns": [t + 700]}})
    out = tmp_path / "f.json"
    with cuptiprof.open(src) as prof:
        counts = export_chrome(prof, out)
    ev = load_trace(out)["traceEvents"]
    assert counts["events"] == len(ev)
    s = [(e["id"], e["tid"]) for e in ev if e["ph"] == "s"]
    f = sorted((e["id"], e["ts"]) for e in ev if e["ph"] == "f")
    # cudaMalloc (not cuMemAlloc); the graph launch, once per kernel
    assert [i for i, _ in sorted(s)][:2] == [1, 2] and {tid for _, tid in s} == {5}
    assert len(s) == len(set(s)) == len(f) == 4 and sorted(i for i, _ in s) == [i for i, _ in f]
    # the memset; kernels "a" (the launch's id), "b" and "c"
    assert [ts for _, ts in f] == [0.6, 3.0, 4.0, 5.0]
    for trace in (chrome_steps[0],):   # a real trace: every id once at each end
        ev = load_trace(trace)["traceEvents"]
        s = [e["id"] for e in ev if e["ph"] == "s"]
        f = [e["id"] for e in ev if e["ph"] == "f"]
        assert len(s) == len(set(s)) and sorted(s) == sorted(f) and s


def test_an_export_of_some_steps_draws_no_arrow_to_a_row_left_out(tmp_path):
    """A call of step 1 whose GPU row the file puts in step 2: an export of step 2 holds the
    row without an arrow's end (its call is not there) and says its step and range; one of step 1
    holds the call without one."""
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "s.duckdb"
    rows = [(1, None, 0, "step", "step", 1, 5, t, t + 1_000), (2, None, 0, "step", "step", 2, 5, t + 1_000, t + 2_000)]
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({"ranges": _range_rows(rows),
                  "api_calls": {"thread_id": [5, 5], "api_kind": ["runtime"] * 2,
                                "name": ["cudaLaunchKernel"] * 2, "correlation_id": [1, 2],
                                "start_ns": [t + 900, t + 1_100], "end_ns": [t + 950, t + 1_150],
                                "step": i32([1, 2]), "range_id": [1, 2]},
                  "kernels": {"device_id": i32([0, 0]), "stream_id": i32([7, 7]), "name": ["late", "k2"],
                              "correlation_id": [1, 2], "step": i32([2, 2]), "range_id": [1, 2],
                              "start_ns": [t + 1_200, t + 1_300], "end_ns": [t + 1_250, t + 1_350]}})
    for steps, want in (("2", {"late": {"cuptiprof step": 2, "cuptiprof range": 1}, "k2": {}}), ("1", {})):
        out = tmp_path / f"s{steps}.json"
        with cuptiprof.open(src, steps) as prof:
            export_chrome(prof, out)
        ev = load_trace(out)["traceEvents"]
        assert {e["id"] for e in ev if e["ph"] == "s"} == {e["id"] for e in ev if e["ph"] == "f"} == \
            ({2} if want else set())
        assert {e["name"]: {k: v for k, v in e["args"].items() if k.startswith("cuptiprof")}
                for e in ev if e.get("cat") == "kernel"} == want


def test_steps_of_a_recorded_run_survive_a_round_trip(tmp_path):
    """A run marks its steps with any name ('step', a --step-fn function); the export writes
    them as ProfilerStep#N, which torch.profiler writes and the importer reads as steps."""
    from cuptiprof.synthetic import write_synthetic

    src = write_synthetic(tmp_path / "s.duckdb", steps=3, kernels_per_step=20, seed=1, warmup=1)
    out = tmp_path / "s.json.gz"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    per_step = "SELECT step, count(*), sum(end_ns - start_ns) FROM kernels GROUP BY 1 ORDER BY 1"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(per_step).fetchall() == orig.execute(per_step).fetchall()
    assert con.execute("SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step'"
                       ).fetchall() == [([1, 2, 3],)]
    # every GPU track is named after its stream, as torch.profiler names them
    ev = load_trace(out)["traceEvents"]
    named = {(e["pid"], e["tid"]) for e in ev if e.get("name") == "thread_name"
             and e["args"]["name"] == f"stream {e['tid']}"}
    assert named and named == {(e["pid"], e["tid"]) for e in ev if e.get("cat") in
                               ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")}
    # a step is a user annotation, as torch.profiler writes ProfilerStep#N
    assert {e["cat"] for e in ev if e["name"].startswith("ProfilerStep#")} == {"user_annotation"}



@pytest.mark.parametrize("native", ["1", "0"])
def test_rows_without_a_recorded_launch_call_keep_their_step(tmp_path, monkeypatch, native):
    """A row whose launching call is not in the file (a run recorded without `api`, a sync's
    call) has its step from the collector; the importer reads a step off the launching call, so
    without one the export must say the step itself, or per-step totals change on a round
    trip (and `--steps` would export rows that import back in no step)."""
    from cuptiprof.synthetic import write_synthetic

    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    src = write_synthetic(tmp_path / "s.duckdb", steps=3, kernels_per_step=20, seed=1, warmup=1)
    per_step = ("SELECT kind, step, count(*), sum(end_ns - start_ns) FROM gpu_activities "
                "WHERE {} GROUP BY ALL ORDER BY ALL")
    orig = duckdb.connect(str(src), read_only=True)
    uncalled = ("SELECT count(*) FROM gpu_activities g WHERE step IS NOT NULL AND NOT EXISTS "
                "(SELECT 1 FROM api_calls c WHERE c.correlation_id = g.correlation_id)")
    assert orig.execute(uncalled).fetchone()[0] > 0   # what this is about
    for steps, where in ((None, "TRUE"), ("2:3", "step BETWEEN 2 AND 3")):
        out, back = tmp_path / f"{steps}.json.gz", tmp_path / f"{steps}.duckdb"
        with cuptiprof.open(src, steps=steps) as prof:
            export_chrome(prof, out)
        import_traces([out], back)
        con = duckdb.connect(str(back), read_only=True)
        assert con.execute(per_step.format("TRUE")).fetchall() == \
            orig.execute(per_step.format(where)).fetchall()
        con.close()
    # a row with its call in the export takes the call's step: nothing more is written on it
    ev = load_trace(tmp_path / "None.json.gz")["traceEvents"]
    assert all("cuptiprof step" not in e["args"] and "cuptiprof range" not in e["args"]
               for e in ev if e.get("cat") == "kernel")


@pytest.fixture(scope="module")
def no_api_run(tmp_path_factory):
    """`cuptiprof run` without the `api` kind (fake CUPTI): GPU rows in ranges nested inside
    steps, none with its launching call in the file; and two such runs merged."""
    from tests._run_helpers import cli, script

    d = tmp_path_factory.mktemp("no_api")
    prog = script(d, """
        import cuptiprof
        for i in range(3):
            with cuptiprof.step(i):
                with cuptiprof.range("fwd"):
                    with cuptiprof.range("attn"):
                        pass
                with cuptiprof.range("bwd"):
                    pass
    """)
    recs = [d / "a.duckdb", d / "b.duckdb"]
    for rec in recs:
        r = cli(["run", "--kinds", "kernel", "memcpy", "sync", "-o", rec, "--no-report", "--",
                 sys.executable, prog], d, CUPTIPROF_FAKE_CUPTI="1")
        assert r.returncode == 0, r.stderr
    r = cli(["merge", *recs, "-o", d / "ab.duckdb"], d)
    assert r.returncode == 0, r.stderr
    return recs[0], d / "ab.duckdb"


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("merged", [False, True])
def test_rows_without_a_recorded_launch_call_keep_their_range(tmp_path, monkeypatch, no_api_run,
                                                              native, merged):
    """Such a row's innermost range comes from the collector, as its step does: the export
    says it ("cuptiprof range"), and the import keeps it, so per-range GPU totals (the ranges
    report) are those of the recorded file, for one process and for several."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    src = no_api_run[merged]
    links = ("SELECT g.pid, g.kind, g.step, r.name, r.depth, count(*), sum(g.end_ns - g.start_ns) "
             "FROM gpu_activities g LEFT JOIN ranges r USING (run_id, pid, range_id) "
             "GROUP BY ALL ORDER BY ALL")
    orig = duckdb.connect(str(src), read_only=True)
    assert orig.execute("SELECT count(*) FROM api_calls").fetchone()[0] == 0  # what this is about
    want = orig.execute(links).fetchall()
    assert {r[3] for r in want} == {"step", "fwd", "attn", "bwd"}
    back = chrome_round_trip(src, tmp_path / "t.json.gz", tmp_path / "back.duckdb")
    con = duckdb.connect(str(back), read_only=True)
    # the pid as recorded; a step range's name is ProfilerStep#N after the round trip
    got = con.execute(links.replace("r.name", "CASE WHEN r.kind = 'step' THEN 'step' ELSE r.name END"
                                    )).fetchall()
    assert got == want
    with cuptiprof.open(src) as a, cuptiprof.open(back) as b:
        assert b.report("ranges").fetchall() == a.report("ranges").fetchall()

def test_gpu_rows_in_a_framework_nvtx_range_keep_it(tmp_path):
    """A kernel launched inside a framework's NVTX range (opened inside a cuptiprof range) has
    that range as its innermost, though its launching call's record names only the cuptiprof
    range: the export says the row's own range, so the ranges report of the import is the
    recorded one."""
    from cuptiprof.collect.fake import FakeCupti
    from cuptiprof.collect.session import Session

    src, f = tmp_path / "nvtx.duckdb", FakeCupti()
    with Session(src, source=f, quiet=True):
        for i in range(2):
            with cuptiprof.range("step", step=i), cuptiprof.range("fwd"):
                f.launch_kernel("gemm", duration_ns=7000)
                f.nvtx_push("attn", domain="torch")
                f.launch_kernel("softmax")
                f.nvtx_pop()
    links = ("SELECT k.name, k.step, r.name FROM kernels k JOIN ranges r USING (run_id, pid, range_id) "
             "ORDER BY ALL")
    back = chrome_round_trip(src, tmp_path / "nvtx.json.gz", tmp_path / "back.duckdb")
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(links).fetchall() == orig.execute(links).fetchall() == [
        ("gemm", 0, "fwd"), ("gemm", 1, "fwd"), ("softmax", 0, "attn"), ("softmax", 1, "attn")]
    con.close()
    with cuptiprof.open(src) as a, cuptiprof.open(back) as b:
        assert b.report("ranges").fetchall() == a.report("ranges").fetchall()


def test_a_gpu_row_whose_range_is_not_its_calls_says_it(tmp_path):
    """A kernel whose innermost range is not the one its launching call's record names (an
    NVTX range the call's record misses) says its own in the trace, and keeps it imported
    back; a kernel of its call's range says none."""
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    # range_id, parent, depth, name, kind, step, thread, start, end
    rows = [(1, None, 0, "fwd", "user", None, 5, t, t + 10_000),
            (2, 1, 1, "attn", "user", None, 5, t + 1_000, t + 2_000)]
    src = tmp_path / "r.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({"ranges": _range_rows(rows),
                  "api_calls": {"thread_id": [5, 5], "api_kind": ["runtime"] * 2,
                                "name": ["cudaLaunchKernel"] * 2, "correlation_id": [1, 2],
                                "start_ns": [t + 500, t + 1_500], "end_ns": [t + 600, t + 1_600],
                                "range_id": [1, 1]},
                  "kernels": {"device_id": i32([0, 0]), "stream_id": i32([7, 7]),
                              "name": ["gemm", "softmax"], "correlation_id": [1, 2],
                              "range_id": [1, 2], "start_ns": [t + 3_000, t + 4_000],
                              "end_ns": [t + 3_500, t + 4_500]}})
    out = tmp_path / "r.json"
    back = chrome_round_trip(src, out, tmp_path / "back.duckdb")
    assert {e["name"]: e["args"].get("cuptiprof range") for e in load_trace(out)["traceEvents"]
            if e.get("cat") == "kernel"} == {"gemm": None, "softmax": 2}
    links = ("SELECT k.name, r.name FROM kernels k JOIN ranges r USING (run_id, pid, range_id) "
             "ORDER BY ALL")
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute(links).fetchall() == [("gemm", "fwd"), ("softmax", "attn")]


@pytest.mark.parametrize("native", ["1", "0"])
def test_ranges_still_open_survive_a_round_trip(tmp_path, monkeypatch, native):
    """A range the program never closed (one entered around a serving loop and never left)
    is in the export, to the export's last time and marked open: imported back it has no end,
    and holds the steps and the work inside it as recorded."""
    from tests._run_helpers import cli, script

    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    prog = script(tmp_path, """
        import cuptiprof
        cuptiprof.range("serve").__enter__()
        for i in range(3):
            with cuptiprof.step(i):
                with cuptiprof.range("fwd"):
                    pass
        cuptiprof.range("tail").__enter__()
    """)
    rec = tmp_path / "r.duckdb"
    r = cli(["run", "-o", rec, "--no-report", "--", sys.executable, prog], tmp_path,
            CUPTIPROF_FAKE_CUPTI="1")
    assert r.returncode == 0, r.stderr
    back = chrome_round_trip(rec, tmp_path / "r.json.gz", tmp_path / "back.duckdb")
    rows = ("SELECT CASE WHEN kind = 'step' THEN 'step' ELSE name END, kind, step, depth, "
            "end_ns IS NULL FROM ranges ORDER BY start_ns")
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, rec))
    assert con.execute(rows).fetchall() == orig.execute(rows).fetchall()
    assert con.execute("SELECT name FROM ranges WHERE end_ns IS NULL ORDER BY 1").fetchall() == \
        [("serve",), ("tail",)]
    con.close()
    with cuptiprof.open(rec) as a, cuptiprof.open(back) as b:
        for report in ("ranges", "step_ranges"):
            assert b.report(report).fetchall() == a.report(report).fetchall(), report

@pytest.mark.parametrize("native", ["1", "0"])
def test_a_range_opened_at_the_last_time_stays_inside_the_one_still_open(tmp_path, monkeypatch,
                                                                         native):
    """A range opened last and never closed, with nothing recorded after it, starts at the
    export's last time, where the range it was opened inside (open too) ends in the trace:
    imported back it is still inside that one, not beside it."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    t = 1_700_000_000_000_000_000
    # range_id, parent, depth, name, kind, step, thread, start, end
    rows = [(1, None, 0, "serve", "user", None, 5, t, None),
            (2, 1, 1, "step", "step", 0, 5, t + 1_000, t + 2_000),
            (3, 1, 1, "tail", "user", None, 5, t + 3_000, None)]
    src = tmp_path / "r.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({"ranges": _range_rows(rows)})
    back = chrome_round_trip(src, tmp_path / "r.json.gz", tmp_path / "back.duckdb")
    q = "SELECT name, depth, end_ns IS NULL FROM ranges WHERE kind <> 'step' ORDER BY start_ns"
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute(q).fetchall() == [("serve", 0, True), ("tail", 1, True)]
    assert con.execute("SELECT p.name FROM ranges r JOIN ranges p ON p.range_id = r.parent_id "
                       "AND p.pid = r.pid WHERE r.name = 'tail'").fetchall() == [("serve",)]

@pytest.mark.parametrize("native", ["1", "0"])
def test_a_range_opened_last_inside_a_step_still_open_keeps_its_step(tmp_path, monkeypatch,
                                                                      native):
    """A step never ended ends in the trace at the export's last time, which is where a range
    opened last inside it begins: imported back that range is still of the step."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    t = 1_700_000_000_000_000_000
    # range_id, parent, depth, name, kind, step, thread, start, end
    rows = [(1, None, 0, "step", "step", 0, 5, t, t + 1_000),
            (2, None, 0, "step", "step", 1, 5, t + 2_000, None),
            (3, 2, 1, "fwd", "user", 1, 5, t + 2_500, t + 2_600),
            (4, 2, 1, "tail", "user", 1, 5, t + 3_000, None)]
    src = tmp_path / "r.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({"ranges": _range_rows(rows)})
    back = chrome_round_trip(src, tmp_path / "r.json.gz", tmp_path / "back.duckdb")
    q = "SELECT range_id, step, depth, end_ns IS NULL FROM ranges ORDER BY range_id"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(q).fetchall() == orig.execute(q).fetchall() == [
        (1, 0, 0, False), (2, 1, 0, True), (3, 1, 1, False), (4, 1, 1, True)]


def test_an_open_range_ends_at_the_last_time_an_export_holds(tmp_path):
    """The export's last time is the latest it holds, an open range's start, an allocation's
    or a log record's time included: a range opened after every other row ended ends the range
    opened before it, and a free or a log record after both is inside both."""
    t = 1_700_000_000_000_000_000
    # range_id, parent, depth, name, kind, step, thread, start, end
    rows = [(1, None, 0, "serve", "user", None, 5, t, None),
            (2, 1, 1, "step", "step", 1, 5, t + 1_000, t + 2_000),
            (3, 1, 1, "tail", "user", None, 5, t + 5_000, None)]
    later = {"memory_events": {"device_id": pa.array([0], pa.int32()), "time_ns": [t + 8_000],
                               "operation": ["free"], "bytes": [64]},
             "logs": {"thread_id": [5], "time_ns": [t + 9_000], "level": ["INFO"],
                      "logger": ["serve"], "message": ["bye"]}}
    for k, (tables, want) in enumerate((({}, (5.0, 0.0)), ({"memory_events": 8.0}, (8.0, 3.0)),
                                        ({"logs": 9.0}, (9.0, 4.0)))):
        src, out = tmp_path / f"o{k}.duckdb", tmp_path / "o.json"
        with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
            w.append({"ranges": _range_rows(rows), **{k: later[k] for k in tables}})
        with cuptiprof.open(src) as prof:
            export_chrome(prof, out, force=True)
        ev = load_trace(out)["traceEvents"]
        x = {e["name"]: e for e in ev if e["ph"] == "X"}
        assert (x["serve"]["ts"], x["tail"]["ts"]) == (0.0, 5.0)
        assert (x["serve"]["dur"], x["tail"]["dur"]) == want, tables
        assert [e["ts"] for e in ev if e["ph"] == "i"] == list(tables.values())
        assert x["serve"]["args"]["cuptiprof open"] == x["tail"]["args"]["cuptiprof open"] == 1


def _no_gpu_run(path: Path) -> Path:
    """A run without a GPU, as `cuptiprof run` writes it: every op a range of kind 'op' (one
    inside another), the ops that do the work also kernels on device -1 over the op's own
    interval (stream = thread, correlation = op = range = the op's range id), a 'cpu' device."""
    t, tid = 1_700_000_000_000_000_000, 4242
    ranges = [(1, None, 0, "step", "step", 0, t, t + 100_000),
              (2, 1, 1, "aten::linear", "op", 0, t + 10_000, t + 60_000),
              (3, 2, 2, "aten::addmm", "op", 0, t + 11_000, t + 59_000),
              (4, None, 0, "step", "step", 1, t + 100_000, t + 200_000),
              (5, 4, 1, "aten::relu", "op", 1, t + 120_000, t + 150_000)]
    work = [r for r in ranges if r[0] in (3, 5)]
    with Writer(path, RunInfo(source="cpu", label="cpu"), pid=77) as w:
        w.append({
            "ranges": {"range_id": [r[0] for r in ranges], "parent_id": pa.array([r[1] for r in ranges], pa.int64()),
                       "depth": pa.array([r[2] for r in ranges], pa.int32()), "name": [r[3] for r in ranges],
                       "kind": [r[4] for r in ranges], "step": pa.array([r[5] for r in ranges], pa.int32()),
                       "thread_id": [tid] * len(ranges), "start_ns": [r[6] for r in ranges],
                       "end_ns": [r[7] for r in ranges]},
            "kernels": {"device_id": pa.array([-1] * 2, pa.int32()), "stream_id": pa.array([tid] * 2, pa.int32()),
                        "name": [r[3] for r in work], "correlation_id": [r[0] for r in work],
                        "step": pa.array([r[5] for r in work], pa.int32()), "range_id": [r[0] for r in work],
                        "op_id": [r[0] for r in work], "start_ns": [r[6] for r in work],
                        "end_ns": [r[7] for r in work]},
            "devices": {"device_id": pa.array([-1], pa.int32()), "kind": ["cpu"], "name": ["AMD EPYC"],
                        "source": ["torch"]}})
        w.add_quality("no_gpu", "gpu", None, "no GPU activity was captured (no CUDA GPU found)")
    return path


def test_round_trip_of_a_run_without_a_gpu_keeps_its_cpu_ops_in_their_steps(tmp_path):
    """The CPU ops of a run without a GPU (kernels on device -1, launched by no API call) come
    back in their steps, linked to their op, and on a 'cpu' device: not GPU work."""
    src = _no_gpu_run(tmp_path / "cpu.duckdb")
    out = tmp_path / "cpu.json.gz"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    links = ("SELECT k.name, k.device_id, k.step, o.name, r.name FROM kernels k "
             "LEFT JOIN ranges o ON o.range_id = k.op_id LEFT JOIN ranges r ON r.range_id = k.range_id "
             "ORDER BY k.start_ns")
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(links).fetchall() == orig.execute(links).fetchall() == [
        ("aten::addmm", -1, 0, "aten::addmm", "aten::addmm"), ("aten::relu", -1, 1, "aten::relu", "aten::relu")]
    assert con.execute("SELECT device_id, kind, name FROM devices").fetchall() == [(-1, "cpu", "AMD EPYC")]
    assert con.execute("SELECT check_name FROM data_quality ORDER BY 1").fetchall() == [("no_gpu",)]
    # the ops' process in a viewer is no GPU's (an unused positive pid: a viewer reads -1 as none)
    doc = load_trace(out)
    assert doc["cuptiprofNegativeIds"]["pids"] == {"999999": -1}
    meta = {e["name"]: e["args"] for e in doc["traceEvents"] if e["ph"] == "M" and e["pid"] == 999_999}
    assert meta["process_name"] == {"name": "CPU ops (no GPU)"} and meta["process_labels"] == {"labels": "CPU ops"}


@pytest.fixture(scope="module")
def denoise_run(tmp_path_factory) -> Path:
    """`cuptiprof run` of the bundled example on this machine (without a GPU: CPU op times)."""
    out = tmp_path_factory.mktemp("denoise") / "a.duckdb"
    example = Path(__file__).resolve().parent.parent / "examples" / "denoise.py"
    r = run_cli("run", "-o", out, "--", sys.executable, example)
    assert r.returncode == 0 and out.exists(), r.stderr[-2000:]
    return out


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_recorded_run_without_a_gpu_exports_no_negative_pid_or_tid(tmp_path, monkeypatch,
                                                                      native, denoise_run):
    """Perfetto UI reads a negative pid or tid as none (pid 0, the process's main thread): the
    CPU ops' process (device -1) and the track of rows of no thread (`[memory]` instants) are
    written as unused positive numbers, named, and imported back as -1: every row keeps its
    device, pid and thread."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    out, back = tmp_path / "a.json.gz", tmp_path / "back.duckdb"
    chrome_round_trip(denoise_run, out, back)
    ev = load_trace(out)["traceEvents"]
    bad = [e for e in ev if any(isinstance(e.get(k), int) and e[k] < 0 for k in ("pid", "tid"))]
    assert not bad, bad[:3]
    names = {(e["pid"], e.get("tid"), e["name"]): e["args"] for e in ev if e["ph"] == "M"}
    ops = {e["pid"] for e in ev if e.get("cat") == "kernel"}
    assert len(ops) == 1 and names[(*ops, 0, "process_name")] == {"name": "CPU ops (no GPU)"}
    # (range ids are numbered anew on import: a kernel's op and a range's parent by name; a
    # step's name is ProfilerStep#N in the trace)
    named = lambda r: f"CASE WHEN {r}.kind = 'step' THEN NULL ELSE {r}.name END"  # noqa: E731
    rows = {"kernels k LEFT JOIN ranges o ON o.range_id = k.op_id":
            "k.device_id, k.stream_id, k.pid, k.name, k.start_ns, k.end_ns, k.step, o.name",
            "ranges r LEFT JOIN ranges u ON u.range_id = r.parent_id":
            f"r.pid, r.thread_id, {named('r')}, r.kind, r.start_ns, r.end_ns, r.step, {named('u')}",
            "api_calls": "pid, thread_id, name, start_ns", "logs": "pid, thread_id, message",
            "memory_events": "pid, device_id, time_ns, bytes, step", "devices": "device_id, kind"}
    with duckdb.connect(str(denoise_run), read_only=True) as a, \
            duckdb.connect(str(back), read_only=True) as b:
        assert a.execute("SELECT count(*) FROM kernels").fetchone()[0] > 0
        for t, cols in rows.items():
            q = f"SELECT {cols} FROM {t} ORDER BY ALL"
            assert a.execute(q).fetchall() == b.execute(q).fetchall(), t


def test_an_imported_trace_without_a_host_is_not_given_the_importing_host(tmp_path):
    """runs.host of an import is the host that imported it, not the one that recorded the
    trace: the export names no host where the trace named none."""
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 5,
         "ts": 10, "dur": 2, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 13, "dur": 4,
         "args": {"device": 0, "stream": 7, "correlation": 1}}]}))
    src = tmp_path / "t.duckdb"
    import_traces([trace], src)
    out = tmp_path / "t.chrome.json"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    assert "host_name" not in load_trace(out)
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT host FROM processes").fetchall() == [(None,)]



def test_a_recorded_run_keeps_its_host_whatever_text_its_settings_hold(tmp_path):
    """The host of a recorded run (runs.host, no process row naming one) is exported as
    host_name; what leaves it out is the `imported_from` key of an import's settings, not that
    text in a setting's value (a step function of that name)."""
    src = tmp_path / "r.duckdb"
    t = 1_700_000_000_000_000_000
    with Writer(src, RunInfo(source="synthetic", host="node-7",
                             settings={"warmup": 0, "step_fn": "imported_from"}), pid=31) as w:
        w.append({"kernels": {"device_id": pa.array([0], pa.int32()),
                              "stream_id": pa.array([7], pa.int32()), "name": ["k"],
                              "correlation_id": [1], "start_ns": [t], "end_ns": [t + 10]}})
    out = tmp_path / "r.json"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    assert load_trace(out)["host_name"] == "node-7"


def test_memory_events_survive_a_round_trip(tmp_path):
    """Allocations and frees are written as torch.profiler's `[memory]` instants, which the
    importer reads back: each process's, with its device, bytes, address, step and time to the
    ns."""
    t = 1_700_000_000_000_000_123
    mem = "SELECT pid, device_id, time_ns, operation, bytes, address, step FROM memory_events ORDER BY ALL"
    for pids in ((11,), (11, 22)):   # one process (its own pid in the trace), and several
        src = tmp_path / f"mem{len(pids)}.duckdb"
        for i, pid in enumerate(pids):
            with Writer(src, RunInfo(source="synthetic"), mode="append" if i else "create", pid=pid) as w:
                w.append({
                    "kernels": {"device_id": pa.array([i], pa.int32()), "stream_id": pa.array([7], pa.int32()),
                                "name": ["k"], "start_ns": [t], "end_ns": [t + 1_000]},
                    "memory_events": {"device_id": pa.array([i, i], pa.int32()),
                                      "time_ns": [t + 5, t + 900_007 + i], "operation": ["alloc", "free"],
                                      "bytes": [4096 * (i + 1)] * 2, "memory_kind": ["device"] * 2,
                                      "address": pa.array([0x7F0000001000 + i] * 2, pa.uint64()),
                                      "step": pa.array([3, None], pa.int32())}})
        out, back = tmp_path / f"mem{len(pids)}.json.gz", tmp_path / f"back{len(pids)}.duckdb"
        chrome_round_trip(src, out, back)
        # on the process's track of no thread (none is recorded); device memory, Kineto's
        # only kind, is said by no arg of cuptiprof's own
        mem_ev = [e for e in load_trace(out)["traceEvents"] if e["name"] == "[memory]"]
        assert {e["tid"] for e in mem_ev} == {NO_THREAD}   # -1 as an unsigned 32-bit number
        assert not any("cuptiprof kind" in e["args"] for e in mem_ev)
        con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
        want = orig.execute(mem).fetchall()
        assert len(want) == 2 * len(pids) and con.execute(mem).fetchall() == want
        con.close()
        orig.close()


# columns Kineto has no key for, which the export writes as args of cuptiprof's own
_NO_KINETO_KEY = {
    "kernels": "SELECT pid, name, graph_id, graph_node_id FROM kernels ORDER BY ALL",
    "memcpys": "SELECT pid, start_ns, is_async, graph_id, graph_node_id, src_device_id, "
               "dst_device_id FROM memcpys ORDER BY ALL",
    "memsets": "SELECT pid, start_ns, value, graph_id, graph_node_id FROM memsets ORDER BY ALL",
    "api_calls": "SELECT pid, correlation_id, return_code FROM api_calls ORDER BY ALL",
    "memory_events": "SELECT pid, time_ns, pool, correlation_id, memory_kind FROM memory_events "
                     "ORDER BY ALL",
    "processes": "SELECT pid, exit_status, ended_early, command, start_ns, end_ns FROM processes "
                 "ORDER BY ALL"}


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("procs", [1, 2])
def test_columns_kineto_has_no_key_for_survive_a_round_trip(tmp_path, monkeypatch, native, procs):
    """Graph ids and a peer copy's devices (under Kineto's keys), a copy's asynchrony, a
    memset's value, a call's
    return code, an allocation's pool, correlation id and memory kind, and how each process
    ended come back from an export (one process: the trace's
    own keys; several: each process's), NULL where they were NULL, by the native scanner and
    the msgspec path alike."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    t = 1_700_000_000_000_000_000
    i32, i64 = (lambda v: pa.array(v, pa.int32())), (lambda v: pa.array(v, pa.int64()))  # noqa: E731
    src = tmp_path / "s.duckdb"
    for i, pid in enumerate((11, 22)[:procs]):
        ts = [t + i * 1_000_000 + k * 10_000 for k in range(3)]
        gpu = {"device_id": i32([0] * 3), "stream_id": i32([7] * 3), "correlation_id": [1, 2, 3],
               "start_ns": ts, "end_ns": [x + 5_000 for x in ts],
               "graph_id": i64([None, 4 + i, 5]), "graph_node_id": i64([None, 1 << 40, 9])}
        with Writer(src, RunInfo(source="synthetic"), mode="append" if i else "create", pid=pid) as w:
            w.append({
                "kernels": {**gpu, "name": ["k0", "k1", "k2"]},
                "memcpys": {**gpu, "copy_kind": ["HtoD", "PtoP", "PtoP"], "bytes": [8] * 3,
                            "is_async": pa.array([None, True, False], pa.bool_()),
                            # a peer copy's devices (NULL for the others)
                            "src_device_id": i32([None, 0, 1 + i]), "dst_device_id": i32([None, 1, 0])},
                "memsets": {**gpu, "bytes": [8] * 3, "value": i32([None, 0, 255 - i])},
                "api_calls": {"thread_id": [5] * 3, "api_kind": ["runtime"] * 3,
                              "name": ["cudaLaunchKernel"] * 3, "correlation_id": [1, 2, 3],
                              "start_ns": [x - 2_000 for x in ts], "end_ns": [x - 1_000 for x in ts],
                              "return_code": i32([None, 0, 700 + i])},
                "memory_events": {"device_id": i32([0] * 3), "time_ns": ts, "operation": ["alloc"] * 3,
                                  "bytes": [64] * 3, "memory_kind": ["device", "pinned", "managed"],
                                  "pool": pa.array([None, True, False], pa.bool_()),
                                  "correlation_id": i64([None, 2, 3])}})
    with duckdb.connect(str(src)) as con:   # how each ended: killed (137, no end), and exit 0
        con.execute("INSERT INTO processes (run_id, pid, exit_status, ended_early, command, start_ns, "
                    "end_ns) SELECT DISTINCT run_id, pid, CASE pid WHEN 11 THEN 137 ELSE 0 END, "
                    f"pid = 11, CASE pid WHEN 11 THEN 'python train.py --lr 0.1' END, {t} - pid, "
                    f"CASE pid WHEN 22 THEN {t} + 9_000_000 END FROM kernels")
        # what each file does not contain: of its process, of none (no pid, a launcher's), and
        # a check the import computes again (no step ranges: it says so itself, once)
        con.execute("INSERT INTO data_quality SELECT run_id, pid, c, s, n, v, d FROM (SELECT "
                    "DISTINCT run_id, pid FROM kernels), (VALUES ('dropped_records', NULL, 12, NULL, "
                    "'CUPTI dropped 12 activity records'), ('step_incomplete', '3', NULL, 5, 'step 3 "
                    "ended by an exception'), ('missing_kind', 'step', 0, NULL, 'no steps'))"
                    " _q(c, s, n, v, d)")
        con.execute("INSERT INTO data_quality (run_id, pid, check_name, detail) SELECT DISTINCT "
                    "run_id, p, 'process_exec', 'ran another program' FROM kernels, "
                    "(VALUES (NULL), (99)) _p(p)")
    back = chrome_round_trip(src, tmp_path / "s.json.gz", tmp_path / "back.duckdb")
    # the graph ids and a peer copy's devices under Kineto's keys, which tools that read
    # Kineto's traces know
    keys = {(e["cat"], k) for e in load_trace(tmp_path / "s.json.gz")["traceEvents"]
            for k in e.get("args", {}) if "graph" in k or k.endswith("Device")}
    assert keys == {(c, k) for c in ("kernel", "gpu_memcpy", "gpu_memset")
                    for k in ("graph id", "graph node id")} | \
        {("gpu_memcpy", "fromDevice"), ("gpu_memcpy", "toDevice")}
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    for table, sql in _NO_KINETO_KEY.items():
        want = orig.execute(sql).fetchall()
        assert want and con.execute(sql).fetchall() == want, table
    assert orig.execute("SELECT count(*) FROM memsets WHERE value = 0").fetchone() == (procs,)
    # data_quality: the file's rows in their run and process, and once what the import
    # computes again
    step = "check_name = 'missing_kind' AND subject = 'step'"
    dq = f"SELECT run_id, pid, check_name, subject, count, value_ns, detail FROM data_quality WHERE NOT ({step})"
    assert con.execute(dq + " ORDER BY ALL").fetchall() == orig.execute(dq + " ORDER BY ALL").fetchall()
    assert con.execute(f"SELECT run_id, pid FROM data_quality WHERE {step} ORDER BY ALL").fetchall() \
        == orig.execute(f"SELECT run_id, pid FROM data_quality WHERE {step} ORDER BY ALL").fetchall()
    # a process without an end: the run ends as recorded all the same (not with its rows)
    assert con.execute("SELECT end_ns FROM runs").fetchall() == \
        orig.execute("SELECT end_ns FROM runs").fetchall()
    assert con.execute("SELECT count(*) FROM data_quality WHERE check_name = 'out_of_range_args'"
                       ).fetchone() == (0,)


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    """`cuptiprof run --warmup 1` with the fake CUPTI (whose launches are stamped just before
    the range they run in begins), exported and imported back: (recorded, trace, imported)."""
    from tests._run_helpers import cli, script

    d = tmp_path_factory.mktemp("fake_run")
    prog = script(d, """
        import cuptiprof
        for i in range(4):
            with cuptiprof.step(i):
                pass
    """, "steps.py")
    rec, trace, back = d / "r.duckdb", d / "r.json.gz", d / "rt.duckdb"
    r = cli(["run", "--warmup", "1", "-o", rec, "--no-report", "--", sys.executable, prog], d,
            CUPTIPROF_FAKE_CUPTI="1")
    assert r.returncode == 0, r.stderr
    with cuptiprof.open(rec) as prof:
        export_chrome(prof, trace)
    import_traces([trace], back)
    return rec, trace, back


def test_a_warm_up_comes_back_as_a_warm_up(fake_run):
    """A warm-up step is written under its own name with args that say so (not ProfilerStep#N,
    which tools that read traces count as a step), and imported back as kind 'warmup' with its
    number: no range outside every step, and the recorded steps only."""
    rec, trace, back = fake_run
    warm = "SELECT name, kind, step, end_ns - start_ns FROM ranges WHERE kind = 'warmup'"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, rec))
    assert con.execute(warm).fetchall() == orig.execute(warm).fetchall() == [
        ("step", "warmup", 0, orig.execute("SELECT end_ns - start_ns FROM ranges "
                                           "WHERE kind = 'warmup'").fetchone()[0])]
    assert con.execute("SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step'"
                       ).fetchall() == [([1, 2, 3],)]
    con.close()
    ev = load_trace(trace)["traceEvents"]
    assert sorted(e["name"] for e in ev if e.get("name", "").startswith("ProfilerStep#")) == \
        ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    w = [e for e in ev if e.get("args", {}).get("cuptiprof kind") == "warmup"]
    assert [(e["name"], e["cat"], e["args"]["cuptiprof step"]) for e in w] == [("step", "user_annotation", 0)]
    # of the host's ranges, only a warm-up says its step in args (a step's is its name)
    assert [e for e in ev if e.get("cat") in ("user_annotation", "cpu_op", "python_function")
            and "cuptiprof step" in e["args"]] == w
    r = run_cli("report", back)
    assert r.returncode == 0, r.stderr
    assert " of range '" not in r.stderr + r.stdout   # the warm-up is no such range


# each row's step, range and op (a step's name is left out: the export writes ProfilerStep#N)
_LINKS = {t: (f"SELECT x.correlation_id, x.start_ns, x.step, "
              "CASE WHEN r.kind = 'step' THEN 'step' ELSE r.name END, r.start_ns, o.name, o.start_ns "
              f"FROM {t} x LEFT JOIN ranges r ON r.range_id = x.range_id "
              f"LEFT JOIN ranges o ON o.range_id = {'x.op_id' if t != 'api_calls' else 'NULL'} "
              "ORDER BY ALL") for t in ("kernels", "memcpys", "api_calls")}


def test_a_round_trip_keeps_each_rows_step_and_links_as_recorded(fake_run):
    """The fake CUPTI stamps each launch just before its step's range begins: the recorded
    file puts it in that step (by the range it was launched in), and so does the import of
    the export (by the External ids), not outside every step (by time)."""
    rec, _, back = fake_run
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, rec))
    assert orig.execute("SELECT count(*) FROM api_calls c JOIN ranges r USING (range_id) "
                        "WHERE c.start_ns < r.start_ns").fetchone()[0] > 0   # what this is about
    for t, sql in _LINKS.items():
        want = orig.execute(sql).fetchall()
        assert want and all(row[2] is not None for row in want), t
        assert con.execute(sql).fetchall() == want, t


def test_a_round_trip_keeps_op_links_that_time_would_change(tmp_path):
    """A GPU row's op is its External id (the op as recorded, none where none was), not the
    op open at its call's time; a call's range is its External id's."""
    t = 1_700_000_000_000_000_000
    i64 = lambda v: pa.array(v, pa.int64())  # noqa: E731
    src = tmp_path / "ops.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=12) as w:
        w.append({
            "ranges": {"range_id": [1, 2, 3], "parent_id": i64([None, 1, 1]),
                       "depth": pa.array([0, 1, 1], pa.int32()), "name": ["step", "aten::mm", "attn"],
                       "kind": ["step", "op", "user"], "domain": ["cuptiprof", "cpu_op", "cuptiprof"],
                       "step": pa.array([0, 0, 0], pa.int32()), "thread_id": [5] * 3,
                       "start_ns": [t, t + 10_000, t + 50_000], "end_ns": [t + 100_000, t + 40_000, t + 90_000]},
            "api_calls": {"thread_id": [5, 5, 5], "api_kind": ["runtime"] * 3, "name": ["cudaLaunchKernel"] * 3,
                          "correlation_id": [1, 2, 3], "start_ns": [t + 20_000, t + 30_000, t + 49_000],
                          "end_ns": [t + 21_000, t + 31_000, t + 49_500],
                          "step": pa.array([0, 0, 0], pa.int32()), "range_id": i64([2, 1, 3])},
            "kernels": {"device_id": pa.array([0] * 3, pa.int32()), "stream_id": pa.array([7] * 3, pa.int32()),
                        "name": ["mm", "fill", "softmax"], "correlation_id": [1, 2, 3],
                        "step": pa.array([0, 0, 0], pa.int32()), "range_id": i64([2, 1, 3]),
                        "op_id": i64([2, None, 2]), "start_ns": [t + 60_000, t + 70_000, t + 80_000],
                        "end_ns": [t + 65_000, t + 75_000, t + 85_000]}})
    out, back = tmp_path / "ops.json.gz", tmp_path / "back.duckdb"
    chrome_round_trip(src, out, back)
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    for t, sql in _LINKS.items():
        assert con.execute(sql).fetchall() == orig.execute(sql).fetchall(), t
    assert [r[3:6:2] for r in con.execute(_LINKS["kernels"]).fetchall()] == [
        ("aten::mm", "aten::mm"), ("step", None), ("attn", "aten::mm")]


def test_ranges_inside_a_warm_up_keep_its_step(tmp_path):
    """A range the program opened inside a warm-up step is in that step (its number), as
    recorded: not a range outside every step, which the quality report would list."""
    from tests._run_helpers import cli, script

    prog = script(tmp_path, """
        import cuptiprof
        for i in range(3):
            with cuptiprof.step(i):
                with cuptiprof.range("fwd"):
                    pass
    """)
    rec = tmp_path / "r.duckdb"
    r = cli(["run", "--warmup", "1", "-o", rec, "--no-report", "--", sys.executable, prog], tmp_path)
    assert r.returncode == 0, r.stderr
    back = chrome_round_trip(rec, tmp_path / "r.json.gz", tmp_path / "back.duckdb")
    rows = "SELECT name, kind, step, depth FROM ranges WHERE kind NOT IN ('step') ORDER BY start_ns"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, rec))
    assert con.execute(rows).fetchall() == orig.execute(rows).fetchall() == [
        ("step", "warmup", 0, 0), ("fwd", "user", 0, 1), ("fwd", "user", 1, 1), ("fwd", "user", 2, 1)]
    con.close()
    for f in (rec, back):
        with cuptiprof.open(f) as prof:
            assert prof.report("quality").filter("check_name = 'outside_steps'").fetchall() == []


def test_work_launched_in_a_warm_up_has_no_step_after_a_round_trip(tmp_path):
    """A warm-up holds its ranges (its number their step) but not its work: a launch inside
    it, or on another thread while it runs, has no step, as recorded, and does not come back
    counted as a step's."""
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "w.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=5) as w:
        w.append({
            "ranges": {"range_id": [1, 2, 3], "parent_id": pa.array([None, 1, None], pa.int64()),
                       "depth": i32([0, 1, 0]), "name": ["step", "fwd", "step"],
                       "kind": ["warmup", "user", "step"], "step": i32([0, 0, 1]),
                       "thread_id": [5] * 3, "start_ns": [t, t + 10_000, t + 100_000],
                       "end_ns": [t + 90_000, t + 80_000, t + 200_000]},
            "api_calls": {"thread_id": [5, 6, 5], "api_kind": ["runtime"] * 3,
                          "name": ["cudaLaunchKernel"] * 3, "correlation_id": [1, 2, 3],
                          "start_ns": [t + 20_000, t + 30_000, t + 110_000],
                          "end_ns": [t + 21_000, t + 31_000, t + 111_000],
                          "step": i32([None, None, 1]), "range_id": pa.array([2, None, 3], pa.int64())},
            "kernels": {"device_id": i32([0] * 3), "stream_id": i32([7] * 3),
                        "name": ["warm", "side", "real"], "correlation_id": [1, 2, 3],
                        "step": i32([None, None, 1]), "range_id": pa.array([2, None, 3], pa.int64()),
                        "start_ns": [t + 40_000, t + 50_000, t + 120_000],
                        "end_ns": [t + 45_000, t + 55_000, t + 130_000]}})
    back = chrome_round_trip(src, tmp_path / "w.json", tmp_path / "back.duckdb")
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    for sql in ("SELECT name, step FROM kernels ORDER BY 1",
                "SELECT correlation_id, step FROM api_calls ORDER BY 1",
                "SELECT kind, step FROM ranges ORDER BY start_ns"):
        assert con.execute(sql).fetchall() == orig.execute(sql).fetchall(), sql
    assert con.execute("SELECT name, step FROM kernels ORDER BY 1").fetchall() == [
        ("real", 1), ("side", None), ("warm", None)]


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_warm_up_beside_another_threads_step_keeps_each_launchs_step(tmp_path, monkeypatch,
                                                                       native):
    """Thread 7 warms up while thread 5 runs steps 1 and 2. What thread 7 launches inside its
    warm-up has no step (its own warm-up comes first, as the collector gives it), whether in a
    range or not; what it launches after the warm-up ended, in a range begun inside it, takes
    the step open then (the range gives none). A round trip keeps each as recorded, looking up
    the step or warm-up each range began in once."""
    from cuptiprof.interop.kineto import finish

    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    looked_up, steps_at = [], finish.steps_at
    monkeypatch.setattr(finish, "steps_at", lambda times, *a, **k: looked_up.append(len(times))
                        or steps_at(times, *a, **k))
    t = 1_700_000_000_000_000_000
    us = lambda x: t + x * 1000  # noqa: E731
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "w.duckdb"
    # calls: thread, start, range_id, step as the collector records it
    calls = [(7, 60, None, None), (7, 70, 2, None), (7, 150, 2, 1), (5, 100, 3, 1),
             (7, 300, 2, 2)]
    with Writer(src, RunInfo(source="synthetic"), pid=5) as w:
        w.append({
            "ranges": {"range_id": [1, 2, 3, 4], "parent_id": pa.array([None, 1, None, None], pa.int64()),
                       "depth": i32([0, 1, 0, 0]), "name": ["step", "compile", "step", "step"],
                       "kind": ["warmup", "user", "step", "step"], "step": i32([0, 0, 1, 2]),
                       "thread_id": [7, 7, 5, 5], "start_ns": [us(0), us(30), us(50), us(250)],
                       "end_ns": [us(90), us(800), us(250), us(450)]},
            "api_calls": {"thread_id": [c[0] for c in calls], "api_kind": ["runtime"] * 5,
                          "name": ["cudaLaunchKernel"] * 5, "correlation_id": [1, 2, 3, 4, 5],
                          "start_ns": [us(c[1]) for c in calls],
                          "end_ns": [us(c[1]) + 1_000 for c in calls],
                          "step": i32([c[3] for c in calls]),
                          "range_id": pa.array([c[2] for c in calls], pa.int64())},
            "kernels": {"device_id": i32([0] * 5), "stream_id": i32([7] * 5),
                        "name": ["bare", "warm", "late", "main", "later"],
                        "correlation_id": [1, 2, 3, 4, 5], "step": i32([c[3] for c in calls]),
                        "range_id": pa.array([c[2] for c in calls], pa.int64()),
                        "start_ns": [us(c[1]) + 5_000 for c in calls],
                        "end_ns": [us(c[1]) + 9_000 for c in calls]}})
    back = chrome_round_trip(src, tmp_path / "w.json", tmp_path / "back.duckdb")
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    for sql in ("SELECT name, step FROM kernels ORDER BY 1",
                "SELECT correlation_id, step FROM api_calls ORDER BY 1"):
        assert con.execute(sql).fetchall() == orig.execute(sql).fetchall(), sql
    assert looked_up.count(4) == 1   # over the 4 ranges' starts (the 5 calls' are apart)


def test_an_op_keeps_its_kind_whatever_its_name(tmp_path):
    """An op named as torch names its annotations ('Optimizer.step#SGD.step': a 2021 trace's
    operator that is no op) was recorded as an op, and is one again after a round trip."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "ops.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=12) as w:
        w.append({"ranges": {
            "range_id": [1, 2, 3], "parent_id": pa.array([None, 1, 1], pa.int64()),
            "depth": pa.array([0, 1, 1], pa.int32()),
            "name": ["step", "Optimizer.step#SGD.step", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"],
            "kind": ["step", "op", "user"], "domain": ["cuptiprof", None, "user_annotation"],
            "step": pa.array([0, 0, 0], pa.int32()), "thread_id": [5] * 3,
            "start_ns": [t, t + 10_000, t + 50_000], "end_ns": [t + 100_000, t + 40_000, t + 90_000]}})
    back = chrome_round_trip(src, tmp_path / "ops.json.gz", tmp_path / "back.duckdb")
    rows = "SELECT name, kind, domain, step FROM ranges WHERE kind <> 'step' ORDER BY start_ns"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(rows).fetchall() == orig.execute(rows).fetchall()
    assert [r[1] for r in con.execute(rows).fetchall()] == ["op", "user"]


@pytest.mark.parametrize("native", ["1", "0"])
def test_shared_memory_is_kinetos_sum_and_splits_again(tmp_path, monkeypatch, native):
    """Kineto's "shared memory" is a kernel's static plus dynamic shared memory: the export
    writes that sum (what readers of Kineto traces take it for) and the dynamic part apart, and
    its import has both columns back; a trace without that part keeps the sum as static."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "smem.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=12) as w:
        w.append({"kernels": {"device_id": i32([0] * 4), "stream_id": i32([7] * 4),
                              "name": ["a", "b", "c", "d"], "correlation_id": [1, 2, 3, 4],
                              "static_smem": i32([1024, 0, None, 2048]),
                              "dynamic_smem": i32([4096, 512, None, None]),
                              "start_ns": [t, t + 10, t + 20, t + 30], "end_ns": [t + 5, t + 15, t + 25, t + 35]}})
    out = tmp_path / "smem.json"
    back = chrome_round_trip(src, out, tmp_path / "back.duckdb")
    ev = [e for e in load_trace(out)["traceEvents"] if e.get("cat") == "kernel"]
    assert sorted((e["name"], e["args"]["shared memory"]) for e in ev) == [
        ("a", 5120), ("b", 512), ("c", None), ("d", 2048)]
    rows = "SELECT name, static_smem, dynamic_smem FROM kernels ORDER BY name"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(rows).fetchall() == orig.execute(rows).fetchall()
    for e in ev:   # as torch.profiler writes it: the sum only
        e["args"].pop("cuptiprof dynamic smem", None)
    out.write_text(json.dumps({"traceEvents": ev}))
    import_traces([out], tmp_path / "kineto.duckdb")
    from tests._run_helpers import q
    assert q(tmp_path / "kineto.duckdb", rows) == [("a", 5120, None), ("b", 512, None),
                                                   ("c", None, None), ("d", 2048, None)]


@pytest.mark.parametrize("procs", [1, 2])
def test_device_specs_survive_a_round_trip(tmp_path, procs):
    """What the devices table knows of a GPU (clocks, L2, UUID, link peaks: `compare` shows
    them) comes back from an export, of one process or several."""
    t = 1_700_000_000_000_000_000
    srcs = []
    for k in range(procs):
        src = tmp_path / f"d{k}.duckdb"
        with Writer(src, RunInfo(source="synthetic"), pid=12 + k) as w:
            w.append({
                "kernels": {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32()),
                            "name": ["k"], "correlation_id": [1], "start_ns": [t], "end_ns": [t + 5]},
                "devices": {"device_id": pa.array([0], pa.int32()), "kind": ["gpu"], "name": ["NVIDIA H200"],
                            "uuid": [f"GPU-5b7c-{k}"], "compute_capability": ["9.0"],
                            "sm_count": pa.array([132], pa.int32()), "core_clock_mhz": [1980.0],
                            "memory_clock_mhz": [2619.0], "memory_bus_width_bits": pa.array([6144], pa.int32()),
                            "memory_bytes": [151397597184], "l2_bytes": [62914560],
                            "peak_memory_bw_gbps": [4800.0], "peak_host_link_gbps": [64.0],
                            "peak_nvlink_gbps": [450.0], "source": ["cupti"]}})
        srcs.append(src)
    src = srcs[0]
    if procs > 1:
        src = merge_files(srcs, tmp_path / "merged.duckdb")
    back = chrome_round_trip(src, tmp_path / "d.json.gz", tmp_path / "back.duckdb")
    rows = "SELECT * EXCLUDE (run_id, source) FROM devices ORDER BY pid"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(rows).fetchall() == orig.execute(rows).fetchall()
    assert con.execute("SELECT count(*) FROM devices WHERE core_clock_mhz = 1980 AND l2_bytes "
                       "= 62914560 AND peak_nvlink_gbps = 450").fetchone() == (procs,)
    # Kineto's deviceProperties name each ordinal once: the first process's device 0
    assert [d["uuid"] for d in load_trace(tmp_path / "d.json.gz")["deviceProperties"]] == ["GPU-5b7c-0"]


def test_a_single_process_keeps_its_local_rank(tmp_path):
    """A process's local rank (an nsys import's, a launcher's) comes back from an export of it
    alone, as from an export of several."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "p.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=12) as w:
        w.append({"kernels": {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32()),
                              "name": ["k"], "correlation_id": [1], "start_ns": [t], "end_ns": [t + 5]},
                  "processes": {"host": ["h1"], "rank": pa.array([3], pa.int32()),
                                "local_rank": pa.array([1], pa.int32()),
                                "world_size": pa.array([4], pa.int32())}})
    back = chrome_round_trip(src, tmp_path / "p.json", tmp_path / "back.duckdb")
    rows = "SELECT pid, host, rank, local_rank, world_size FROM processes"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(rows).fetchall() == orig.execute(rows).fetchall() == [(12, "h1", 3, 1, 4)]


@pytest.mark.parametrize("native", ["1", "0"])
def test_the_event_a_sync_waited_on_survives_a_round_trip(tmp_path, monkeypatch, native):
    """A sync's CUDA event is written as Kineto writes it ("wait_on_cuda_event_id") and read
    back, from an export as from torch.profiler; CUPTI's "no event" (0xFFFFFFFF) is none."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "s.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=12) as w:
        w.append({"syncs": {"device_id": i32([0, 0]), "stream_id": i32([7, None]),
                            "correlation_id": [1, 2], "sync_type": ["event_synchronize", "context_synchronize"],
                            "cuda_event_id": pa.array([5, None], pa.int64()),
                            "start_ns": [t, t + 10], "end_ns": [t + 5, t + 15]}})
    out = tmp_path / "s.json"
    back = chrome_round_trip(src, out, tmp_path / "back.duckdb")
    rows = "SELECT sync_type, stream_id, cuda_event_id FROM syncs ORDER BY start_ns"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(rows).fetchall() == orig.execute(rows).fetchall() == [
        ("event_synchronize", 7, 5), ("context_synchronize", None, None)]
    doc = load_trace(out)
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_sync" and "wait_on_cuda_event_id" not in e["args"]:
            e["args"]["wait_on_cuda_event_id"] = 0xFFFFFFFF
    out.write_text(json.dumps(doc))
    import_traces([out], tmp_path / "kineto.duckdb")
    from tests._run_helpers import q
    assert q(tmp_path / "kineto.duckdb", rows) == [("event_synchronize", 7, 5),
                                                   ("context_synchronize", None, None)]


SAXPY = SHARED / "pipit-nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


def _no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), keys
    return dict(pairs)


def test_range_attrs_are_args_of_their_event(tmp_path):
    """A host range's attrs (cuptiprof.range's keywords, an imported op's parts) are args of
    its event beside cuptiprof's own, which win a clash and are written once; attrs that are
    not a JSON object go whole under "cuptiprof attrs"; a GPU annotation's (its device and
    stream) are not written twice. Imported back, no key of cuptiprof's is left in attrs."""
    t = 1_700_000_000_000_000_000
    attrs = ['{"layer": 3, "shape": [2, 3], "who": "a\\"b", "x": null}',
             '{"External id": 99, "cuptiprof kind": "warmup", "seq": 7}', '[1, 2]', 'not json',
             None, ' { } ', '{"device": 1, "stream": 9}']
    src = tmp_path / "attrs.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"ranges": {
            "range_id": list(range(1, 8)), "name": [f"r{i}" for i in range(7)],
            "domain": [None, "cpu_op", None, "nvtx", None, None, "gpu_user_annotation"],
            "kind": ["user", "op", "user", "user", "user", "user", "user"], "thread_id": [5] * 7,
            "start_ns": [t + 10 * i for i in range(7)],
            "end_ns": [t + 10 * i + 5 for i in range(7)], "attrs": attrs}})
    out, back = tmp_path / "attrs.json.gz", tmp_path / "back.duckdb"
    chrome_round_trip(src, out, back)
    ev = load_trace(out, object_pairs_hook=_no_duplicate_keys)["traceEvents"]
    args = {e["name"]: e["args"] for e in ev if e.get("ph") == "X"}
    assert args["r0"] == {"External id": 1, "cuptiprof domain": None, "layer": 3,
                          "shape": [2, 3], "who": 'a"b', "x": None}
    assert args["r1"] == {"External id": 2, "seq": 7}   # cuptiprof's own win, and only theirs
    assert (args["r2"]["cuptiprof attrs"], args["r3"]["cuptiprof attrs"]) == ("[1, 2]", "not json")
    assert (args["r4"], args["r5"]) == ({"External id": 5, "cuptiprof domain": None},
                                        {"External id": 6, "cuptiprof domain": None})
    assert args["r6"] == {"device": 1, "stream": 9}
    con = duckdb.connect(str(back), read_only=True)
    got = con.execute("SELECT name, kind, domain, attrs FROM ranges ORDER BY name").fetchall()
    assert [r[:3] for r in got] == duckdb.connect(str(src), read_only=True).execute(
        "SELECT name, kind, domain FROM ranges ORDER BY name").fetchall()
    # the importer keeps no host event's args in attrs, so none of cuptiprof's piles up there
    assert [json.loads(r[3]) if r[3] else None for r in got] == [None] * 6 + [
        {"device": 1, "stream": 9}]


def test_range_domains_survive_a_round_trip(tmp_path_factory, tmp_path, fake_run):
    """A domain the category does not say (an NVTX domain, NVTX's default domain NULL,
    'cuptiprof') is written as an arg and read back; the category's domains stay as they were."""
    doms = "SELECT name, kind, domain, count(*) FROM ranges WHERE end_ns IS NOT NULL GROUP BY ALL ORDER BY ALL"
    src = imported(tmp_path_factory, SAXPY)
    t = 1_700_000_000_000_000_000
    mine = tmp_path / "doms.duckdb"
    domains = [None, "nvtx", "cpu_op", "user_annotation", "python_function", "gpu_user_annotation", None]
    with Writer(mine, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"ranges": {
            "range_id": list(range(1, 8)), "name": [f"r{i}" for i in range(7)], "domain": domains,
            "kind": ["user", "op", "op", "user", "user", "user", "user"], "thread_id": [5] * 7,
            "start_ns": [t + 10 * i for i in range(7)],
            "end_ns": pa.array([t + 10 * i + 5 for i in range(6)] + [None], pa.int64())}})
    cases = [(src, doms), (mine, doms), (fake_run[0], doms.replace("name, ", ""))]
    for i, (path, sql) in enumerate(cases):
        out, back = tmp_path / f"{i}.json.gz", tmp_path / f"{i}.duckdb"
        chrome_round_trip(path, out, back)
        con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, path))
        want = orig.execute(sql).fetchall()
        if path == src:
            assert {r[2] for r in want} == {"MPI", None}
        assert con.execute(sql).fetchall() == want, path.name
    ev = load_trace(tmp_path / "1.json.gz")["traceEvents"]
    assert sorted(map(str, {e["args"]["cuptiprof domain"] for e in ev if "cuptiprof domain" in e.get("args", {})})) \
        == ["None", "nvtx"]   # written only where the category does not say it


def test_parquet_datasets_read_back_with_the_types_of_the_views(tmp_path):
    """Read as the export documents (hive_types), every dataset, with rows or without (--steps 3
    leaves no copies), has the columns and types of its view, host added; the kernels dataset
    carries no id into the file's string table, only the names the kernels view gives."""
    from cuptiprof.interop.parquet import PARTITIONED
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    with duckdb.connect(str(src)) as con:   # a host named like a number stays a name
        con.execute("INSERT INTO processes (run_id, pid, host) SELECT run_id, 31, '1234' FROM runs")
    with cuptiprof.open(src, "3") as prof:
        counts = export_parquet(prof, tmp_path / "pq")
    assert counts["memcpys"] == 0 and counts["kernels"] == 1
    types = "'host': 'VARCHAR', 'pid': 'INTEGER'"   # as the README reads a dataset
    view = duckdb.connect(str(src), read_only=True)
    for t in PARTITIONED:
        got = {r[0]: r[1] for r in duckdb.sql(
            f"DESCRIBE SELECT * FROM read_parquet('{tmp_path}/pq/{t}/**/*.parquet', "
            f"hive_partitioning = true, hive_types = {{{types}}})").fetchall()}
        want = {r[0]: r[1] for r in view.execute(f"DESCRIBE {t}").fetchall() if r[0] != "name_id"}
        want.setdefault("host", "VARCHAR")
        assert got == want, t
    kernels = duckdb.sql(f"SELECT * FROM read_parquet('{tmp_path}/pq/kernels/**/*.parquet', "
                         f"hive_partitioning = true, hive_types = {{{types}}})")
    assert "name_id" not in kernels.columns and {"name", "demangled"} <= set(kernels.columns)
    assert kernels.select("name, host, pid").fetchall() == [("gemm", "1234", 31)]
    # a dataset without rows reads back as one with them, with the documented read or without it
    for extra in (f", hive_types = {{{types}}}", ""):
        full, empty = (duckdb.sql(f"DESCRIBE SELECT host, pid FROM read_parquet('{tmp_path}/pq/{t}/**/*.parquet', "
                                  f"hive_partitioning = true{extra})").fetchall() for t in ("kernels", "memcpys"))
        assert [r[0] for r in full] == [r[0] for r in empty] == ["host", "pid"]
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/pq/memcpys/**/*.parquet', "
                      f"hive_partitioning = true, hive_types = {{{types}}})").fetchall() == [(0,)]


@pytest.mark.parametrize("what", ["--chrome", "--parquet"])
def test_an_export_that_cannot_be_written_names_the_path_and_exits_2(tmp_path, monkeypatch, capsys, what):
    """The output passed the up-front check (as /proc/x does as root), then writing it failed:
    one line naming the path asked for (not its temporary name), exit 2, nothing left behind."""
    from cuptiprof.cli import main
    from cuptiprof.synthetic import write_synthetic
    src = write_synthetic(tmp_path / "s.duckdb", steps=2, kernels_per_step=10, seed=1)
    out = tmp_path / ("t.json" if what == "--chrome" else "pq")
    real_open, real_mkdir = open, Path.mkdir

    def refused(*a, **k):
        raise PermissionError(13, "Permission denied", str(a[0]))

    if what == "--chrome":
        import builtins
        import gzip
        monkeypatch.setattr(builtins, "open", lambda f, *a, **k: refused(f) if ".tmp-" in str(f)
                            else real_open(f, *a, **k))
        monkeypatch.setattr(gzip, "open", lambda f, *a, **k: refused(f))
    else:
        monkeypatch.setattr(Path, "mkdir", lambda self, *a, **k: refused(self) if ".tmp-" in str(self)
                            else real_mkdir(self, *a, **k))
    assert main(["export", str(src), what, str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"cuptiprof: error: {out}: cannot write (Permission denied); give a path in a "
                   "directory you can write to"], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]


_LOGS = "SELECT pid, thread_id, time_ns, level, logger, message, step FROM logs ORDER BY ALL"


def test_log_records_survive_a_round_trip(tmp_path):
    """Each row of `logs` is written as an instant on its thread's track, in a category of
    cuptiprof's own (the message its name, level and logger args), and read back as it was:
    odd messages and NULLs, each process's records apart, and the step as recorded (a record
    after its step's range ended keeps that step). The category is no unknown one to the
    import; `--steps` leaves out the records of other steps."""
    src = _two_processes(tmp_path / "two.duckdb")
    t0 = 1_700_000_000_000_000_000
    rows = [(101, 1010, t0 + 5_000 + k, "INFO", "train", m, 10) for k, m in enumerate(ODD)]
    rows += [(101, 1010, t0 + 900_000, "WARNING", "late", "after the step", 10),   # past its end
             (202, 2020, t0 + 50_000, None, None, "no level", 10),
             (202, None, t0 - 7_000, "ERROR", "x.y", "before every step", None)]
    with duckdb.connect(str(src)) as con:
        run_id = con.execute("SELECT min(run_id) FROM runs").fetchone()[0]
        con.executemany("INSERT INTO logs (run_id, pid, thread_id, time_ns, level, logger, message, "
                        "step) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [(run_id, *r) for r in rows])
        want = con.execute(_LOGS).fetchall()
    assert len(want) == len(rows)
    out, back = tmp_path / "two.json.gz", tmp_path / "back.duckdb"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    ev = [e for e in load_trace(out)["traceEvents"] if e.get("cat") == "cuptiprof_log"]
    assert len(ev) == len(rows)
    late = next(e for e in ev if e["name"] == "after the step")
    assert (late["ph"], late["s"], late["args"]) == ("i", "t", {"level": "WARNING", "logger": "late",
                                                                  "cuptiprof step": 10})
    assert late["tid"] == 1010
    import_traces([out], back)
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute(_LOGS).fetchall() == want
    assert con.execute("SELECT count(*) FROM data_quality WHERE check_name = 'unknown_category'"
                       ).fetchone() == (0,)
    con.close()
    r = run_cli("import", out, "-o", tmp_path / "cli.duckdb")
    assert r.returncode == 0 and f"{len(rows)} log records" in r.stderr, r.stderr
    with cuptiprof.open(src, "10") as prof:
        export_chrome(prof, tmp_path / "s.json.gz")
    names = {e["name"] for e in load_trace(tmp_path / "s.json.gz")["traceEvents"]
             if e.get("cat") == "cuptiprof_log"}
    assert "before every step" not in names and "after the step" in names and len(names) == len(rows) - 1


@pytest.mark.parametrize("step", [4294967296, -4294967296, 7])
def test_a_cuptiprof_step_arg_beyond_32_bits_is_taken_as_absent(tmp_path, step):
    """A log record's or warm-up's "cuptiprof step" no step column can hold (an edited trace,
    another writer) made the whole import fail with an Arrow overflow message."""
    import hostile_corpus as H

    doc = H.good_trace()
    doc["cuptiprofLinks"] = "range_id"
    doc["traceEvents"] += [
        {"ph": "i", "s": "t", "cat": "cuptiprof_log", "name": "hello", "pid": 10, "tid": 10,
         "ts": 20.0, "args": {"level": "INFO", "logger": "app", "cuptiprof step": step}},
        {"ph": "X", "cat": "user_annotation", "name": "step", "pid": 10, "tid": 10, "ts": 200.0,
         "dur": 10.0, "args": {"cuptiprof kind": "warmup", "cuptiprof step": step}}]
    src, out = tmp_path / "t.json", tmp_path / "t.duckdb"
    src.write_text(json.dumps(doc))
    import_traces([src], out)
    con = duckdb.connect(str(out), read_only=True)
    want = step if abs(step) < 2**31 else None
    assert con.execute("SELECT message, step FROM logs").fetchall() == [("hello", want)]
    assert con.execute("SELECT kind, step FROM ranges WHERE name = 'step'").fetchall() == [("warmup", want)]


def test_parquet_rows_go_to_their_own_runs_host(tmp_path):
    """Two runs of one pid on two hosts, in one file: each row is in its own run's host's
    partition, once (a process is its run and pid)."""
    src = tmp_path / "two.duckdb"
    for i, host in enumerate(("h1", "h2")):
        with Writer(src, RunInfo(source="synthetic"), mode="append" if i else "create", pid=42) as w:
            w.append({"kernels": {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32()),
                                  "name": [f"k{i}"], "start_ns": [T0 + i], "end_ns": [T0 + 10 + i]},
                      "processes": {"host": [host]}})
    with cuptiprof.open(src) as prof:
        export_parquet(prof, tmp_path / "pq")
    assert duckdb.sql(f"SELECT host, pid, name FROM read_parquet('{tmp_path}/pq/kernels/**/*.parquet', "
                      "hive_partitioning = true) ORDER BY ALL").fetchall() == [("h1", 42, "k0"), ("h2", 42, "k1")]


def test_an_export_of_one_process_names_its_own_host_and_rank(tmp_path):
    """A file of two processes of which one recorded nothing (a rank that failed before its
    first step, say): the export is of the other, and says its host, rank and devices, not the
    first ones the file holds."""
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "p.duckdb"
    for i, (pid, host, gpu) in enumerate(((100, "node-a", "A100"), (200, "node-b", "H200"))):
        with Writer(src, RunInfo(source="synthetic"), mode="append" if i else "create", pid=pid) as w:
            batch = {"processes": {"host": [host], "rank": i32([i]), "local_rank": i32([i]),
                                   "world_size": i32([2])},
                     "devices": {"device_id": i32([0]), "kind": ["gpu"], "name": [gpu]}}
            if i:
                batch["kernels"] = {"device_id": i32([0]), "stream_id": i32([7]), "name": ["k"],
                                    "correlation_id": [1], "start_ns": [T0], "end_ns": [T0 + 5]}
            w.append(batch)
    out = tmp_path / "p.json"
    back = chrome_round_trip(src, out, tmp_path / "back.duckdb")
    doc = load_trace(out)
    assert (doc["host_name"], doc["distributedInfo"]["rank"]) == ("node-b", 1)
    assert [d["name"] for d in doc["deviceProperties"]] == ["H200"]
    assert {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]   # named with its host
            if e.get("name") == "process_name"}[200] == "pid 200 (node-b)"
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT pid, host, rank, local_rank FROM processes").fetchall() == [(200, "node-b", 1, 1)]
    assert con.execute("SELECT name FROM devices").fetchall() == [("H200",)]


def test_parquet_force_replaces_no_file_named_as_a_dataset(tmp_path):
    """--force replaces an earlier export's dataset directories, not a file of the same name."""
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    out = tmp_path / "pq"
    out.mkdir()
    (out / "kernels").write_text("mine")
    r = run_cli("export", src, "--parquet", out, "--force")
    assert r.returncode == 2 and "holds kernels" in r.stderr, r.stderr
    assert (out / "kernels").read_text() == "mine"


def test_parquet_export_counts_every_dataset_it_writes(tmp_path):
    """The line after a Parquet export counts the datasets in DIR, empty ones included (each is
    a directory a reader finds), and says how many hold rows."""
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    r = run_cli("export", src, "--parquet", tmp_path / "pq", "--steps", "3")
    assert r.returncode == 0, r.stderr
    written = [p for p in (tmp_path / "pq").iterdir() if p.is_dir()]
    assert sorted(p.name for p in written) == [
        "api_calls", "data_quality", "devices", "kernels", "logs", "memcpys", "memory_events",
        "memsets", "processes", "ranges", "runs", "syncs"]
    assert f"cuptiprof: wrote {len(written)} Parquet datasets (" in r.stderr and " with rows; " in r.stderr, \
        r.stderr


def _merged_runs(tmp_path: Path, tag: str = "", dropped: int | None = None) -> Path:
    """A merge of two runs (one process each, a kernel each); `tag` ends their labels and
    kernel names, `dropped` is a dropped_records row of the second run."""
    t = 1_700_000_000_000_000_000
    srcs = []
    for k, (label, source, status) in enumerate((("eager", "cupti", "complete"),
                                                 ("compiled", "cpu", "interrupted"))):
        src = tmp_path / f"{label}{tag}.duckdb"
        w = Writer(src, RunInfo(label=label + tag, source=source, command=f"python {label}.py",
                                start_ns=t + k * 1000), pid=40 + k)
        w.append({"kernels": {"device_id": pa.array([0], pa.int32()),
                              "stream_id": pa.array([7], pa.int32()), "name": [f"k{k}{tag}"],
                              "correlation_id": [1], "start_ns": [t + k * 1000 + 10],
                              "end_ns": [t + k * 1000 + 20]}})
        if k and dropped is not None:
            w.add_quality("dropped_records", None, dropped, "CUPTI dropped activity records")
        w.close(status)
        srcs.append(src)
    return merge_files(srcs, tmp_path / f"merged{tag}.duckdb")


def test_a_merged_file_of_several_runs_imports_back_as_those_runs(tmp_path):
    """Each process of the export carries its run: imported back, the runs are apart again
    (label, source, status, command, start and end), each with its own processes and rows."""
    src = _merged_runs(tmp_path)
    back = chrome_round_trip(src, tmp_path / "m.json.gz", tmp_path / "back.duckdb")
    runs = ("SELECT run_id, label, source, status, command, start_ns, end_ns FROM runs "
            "ORDER BY run_id")
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    assert con.execute(runs).fetchall() == orig.execute(runs).fetchall()
    per_run = "SELECT run_id, pid, name FROM kernels ORDER BY run_id"
    assert con.execute(per_run).fetchall() == orig.execute(per_run).fetchall()
    assert con.execute("SELECT run_id, pid FROM processes ORDER BY 1").fetchall() == \
        [(1, 40), (2, 41)]



def test_processes_of_a_merged_file_with_the_same_pid_keep_it_in_their_runs(tmp_path):
    """Two runs of one program (the same pid, as in two containers) merged: imported back,
    each run's process has its pid again, with its rows and data_quality rows (in one run,
    two processes of one pid would need another pid; in two, they do not)."""
    srcs = [write_synthetic(tmp_path / f"s{k}.duckdb", steps=2, kernels_per_step=5, seed=k,
                            label=f"s{k}") for k in (1, 2)]
    src = merge_files(srcs, tmp_path / "m.duckdb")
    back = chrome_round_trip(src, tmp_path / "m.json.gz", tmp_path / "back.duckdb")
    q = ("SELECT run_id, pid, count(*) FROM {} GROUP BY ALL ORDER BY ALL")
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    for table in ("processes", "kernels", "api_calls", "ranges", "devices"):
        assert con.execute(q.format(table)).fetchall() == orig.execute(q.format(table)).fetchall()
    assert con.execute("SELECT DISTINCT run_id, pid FROM data_quality ORDER BY ALL").fetchall() \
        == [(1, 4242), (2, 4242)]

@pytest.mark.parametrize("busy", [1, 2])
def test_a_process_that_recorded_nothing_survives_a_round_trip(tmp_path, busy):
    """A process of the run that recorded no row (a helper, multiprocessing's resource
    tracker) is listed in `processes` with how it ended: an export of every row carries it,
    imported back as it was (no data_quality row says it had no GPU); an export of some steps
    leaves it out, as every process it holds no row of."""
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "s.duckdb"
    with Writer(src, RunInfo(label="job", source="synthetic"), pid=11) as w:
        for pid in range(11, 11 + busy):
            w.append({"api_calls": {"pid": i32([pid]), "thread_id": [5], "api_kind": ["runtime"],
                                    "name": ["cudaLaunchKernel"], "correlation_id": [1],
                                    "step": i32([1]), "start_ns": [t], "end_ns": [t + 50]},
                      "kernels": {"pid": i32([pid]), "device_id": i32([0]), "stream_id": i32([7]),
                                  "name": [f"k{pid}"], "correlation_id": [1], "step": i32([1]),
                                  "start_ns": [t + 100], "end_ns": [t + 200]}})
        w.append({"processes": {"pid": i32([20]), "host": ["h"], "command": ["python -c helper"],
                                "start_ns": [t - 10], "end_ns": [t + 10],
                                "exit_status": i32([3]), "ended_early": [False]}})
    procs = ("SELECT run_id, pid, host, rank, world_size, local_rank, command, start_ns, end_ns, "
             "exit_status, ended_early FROM processes ORDER BY pid")
    back = chrome_round_trip(src, tmp_path / "s.json.gz", tmp_path / "back.duckdb")
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    helper = orig.execute(procs).fetchall()[-1]
    assert helper[1:] == (20, "h", None, None, None, "python -c helper", t - 10, t + 10, 3, False)
    assert con.execute(procs).fetchall()[-1] == helper
    assert con.execute("SELECT count(*) FROM processes").fetchall() == [(busy + 1,)]
    assert con.execute("SELECT count(*) FROM data_quality WHERE pid = 20").fetchall() == [(0,)]
    assert con.execute("SELECT label FROM runs").fetchall() == [("job",)]
    con.close()
    some = tmp_path / "some.duckdb"
    with cuptiprof.open(src, "1") as prof:
        export_chrome(prof, tmp_path / "some.json")
    import_traces([tmp_path / "some.json"], some)
    con = duckdb.connect(str(some), read_only=True)
    assert con.execute("SELECT pid FROM processes ORDER BY 1").fetchall() == \
        [(p,) for p in range(11, 11 + busy)]

def test_a_merged_export_whose_processes_say_no_rank_takes_none_from_its_file_name(tmp_path):
    """A process of a merged file's export says its rank, none included: a trace named like a
    rank's (rank3.json.gz) does not give it one."""
    back = chrome_round_trip(_merged_runs(tmp_path), tmp_path / "rank3.json.gz",
                             tmp_path / "back.duckdb")
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT pid, rank FROM processes ORDER BY 1").fetchall() == \
        [(40, None), (41, None)]


def test_two_merged_exports_imported_together_keep_each_files_runs(tmp_path):
    """Run 1 of one merged file's export and run 1 of another's are different runs: imported
    together, each file's runs come back apart (in the order given), with their own processes,
    rows and data_quality rows, not mixed by their exported run ids."""
    outs = []
    for tag, dropped in (("-a", 3), ("-b", 5)):
        src = _merged_runs(tmp_path, tag, dropped)
        outs.append(tmp_path / f"m{tag}.json.gz")
        with cuptiprof.open(src) as prof:
            export_chrome(prof, outs[-1])
    back = tmp_path / "back.duckdb"
    import_traces(outs, back)
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT run_id, label FROM runs ORDER BY 1").fetchall() == [
        (1, "eager-a"), (2, "compiled-a"), (3, "eager-b"), (4, "compiled-b")]
    assert con.execute("SELECT run_id, name FROM kernels ORDER BY 1").fetchall() == [
        (1, "k0-a"), (2, "k1-a"), (3, "k0-b"), (4, "k1-b")]
    assert con.execute("SELECT run_id, count(*) FROM processes GROUP BY 1 ORDER BY 1"
                       ).fetchall() == [(1, 1), (2, 1), (3, 1), (4, 1)]
    assert con.execute("SELECT run_id, count FROM data_quality WHERE check_name = "
                       "'dropped_records' ORDER BY 1").fetchall() == [(2, 3), (4, 5)]


def test_exports_of_one_run_each_imported_together_stay_one_run(tmp_path):
    """Traces of one job exported one per file (each says its own run) import as the job's one
    run, as torch.profiler's one file per rank does: only a file of several runs is taken apart."""
    outs = []
    for k in range(2):
        src = tmp_path / f"rank{k}.duckdb"
        with Writer(src, RunInfo(label=f"rank{k}", source="cupti"), pid=40 + k) as w:
            w.append({"kernels": {"device_id": pa.array([0], pa.int32()),
                                  "stream_id": pa.array([7], pa.int32()), "name": [f"k{k}"],
                                  "correlation_id": [1], "start_ns": [10 + k], "end_ns": [20]}})
        outs.append(tmp_path / f"rank{k}.json")
        with cuptiprof.open(src) as prof:
            export_chrome(prof, outs[-1])
    back = tmp_path / "back.duckdb"
    import_traces(outs, back, label="job")
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT run_id, label FROM runs").fetchall() == [(1, "job")]
    assert con.execute("SELECT run_id, pid FROM processes ORDER BY 2").fetchall() == \
        [(1, 40), (1, 41)]
    con.close()
    # no label given: the runs differ, so neither's label, source or command is the import's
    import_traces(outs, tmp_path / "job.duckdb")
    con = duckdb.connect(str(tmp_path / "job.duckdb"), read_only=True)
    assert con.execute("SELECT label, source, command LIKE 'cuptiprof import %' FROM runs"
                       ).fetchall() == [("job", "kineto", True)]


def _plain_trace(path: Path, pid: int, tid: int | None = None, ts: int = 1) -> Path:
    """torch.profiler's own trace (none of cuptiprof's keys): one cudaFree of process `pid`."""
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaFree", "pid": pid,
         "tid": pid if tid is None else tid, "ts": ts, "dur": 1, "args": {"correlation": 1}}]}))
    return path


@pytest.mark.parametrize("label", [None, "mine"])
@pytest.mark.parametrize("plain_first", [True, False])
def test_a_plain_trace_beside_a_merged_export_is_a_run_of_its_own(tmp_path, plain_first, label):
    """torch.profiler's own trace imported with a merged file's export: its process is a run of
    its own, labelled as its import alone would be (the output's name, or --label's L/k), in
    the place of the trace among the files; the export's runs keep theirs."""
    src = _merged_runs(tmp_path, dropped=3)
    out = tmp_path / "m.json"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    plain = _plain_trace(tmp_path / "plain.json", 11, ts=5)
    back = tmp_path / "back.duckdb"
    import_traces([plain, out] if plain_first else [out, plain], back, label=label)
    con = duckdb.connect(str(back), read_only=True)
    runs = [("back", "kineto"), ("eager", "cupti"), ("compiled", "cpu")]
    if not plain_first:
        runs = runs[1:] + runs[:1]
    if label:
        runs = [(f"{label}/{k}", source) for k, (_, source) in enumerate(runs, start=1)]
    assert con.execute("SELECT label, source FROM runs ORDER BY run_id").fetchall() == runs
    mine = 1 if plain_first else 3
    assert con.execute("SELECT run_id, pid FROM processes WHERE pid = 11").fetchall() == [(mine, 11)]
    assert con.execute("SELECT start_ns, end_ns, command LIKE 'cuptiprof import %' FROM runs "
                       "WHERE run_id = ?", [mine]).fetchall() == [(5000, 6000, True)]
    assert con.execute("SELECT DISTINCT run_id FROM api_calls WHERE pid = 11").fetchall() == [(mine,)]
    assert con.execute("SELECT r.source, count FROM data_quality JOIN runs r USING (run_id) "
                       "WHERE check_name = 'dropped_records'").fetchall() == [("cpu", 3)]


def test_a_label_given_to_the_import_of_several_runs_numbers_them(tmp_path):
    """`import --label L` of a merged file's export names its runs L/1..N (one label for all
    would leave them impossible to tell apart); without --label they keep their own."""
    src = _merged_runs(tmp_path)
    out = tmp_path / "m.json.gz"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    back = tmp_path / "back.duckdb"
    r = run_cli("import", out, "-o", back, "--label", "mine", "--no-progress")
    assert r.returncode == 0, r.stderr
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT run_id, label, source FROM runs ORDER BY 1").fetchall() == \
        [(1, "mine/1", "cupti"), (2, "mine/2", "cpu")]


def test_data_quality_rows_go_with_their_process_as_imported(tmp_path):
    """Imported beside a trace of a process with the same pid, the export's process gets
    another pid: its data_quality rows go with it; a row of another process keeps its pid."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "s.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=11) as w:
        w.append({"api_calls": {"thread_id": [5], "api_kind": ["runtime"], "name": ["cudaMalloc"],
                                "correlation_id": [1], "start_ns": [t], "end_ns": [t + 5]}})
        w.add_quality("dropped_records", None, 3, "CUPTI dropped 3 activity records")
        w.add_quality("process_exec", "99", None, "ran another program", pid=99)
    out = tmp_path / "s.json"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    other = _plain_trace(tmp_path / "other.json", 11)
    back = tmp_path / "back.duckdb"
    import_traces([other, out], back)
    con = duckdb.connect(str(back), read_only=True)
    moved = 11 + (1 << 22)
    assert con.execute("SELECT pid FROM processes WHERE command = ?", [str(other)]).fetchall() == [(11,)]
    assert con.execute("SELECT pid, check_name, count FROM data_quality WHERE check_name IN "
                       "('dropped_records', 'process_exec') ORDER BY 2").fetchall() == \
        [(moved, "dropped_records", 3), (99, "process_exec", None)]


def test_exports_of_some_steps_of_one_run_imported_together_add_its_quality_rows_once(tmp_path):
    """Each export of some steps carries all of its run's data_quality rows: two exports of one
    file imported together give them once (with the one process the two exports are again),
    not once a trace."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "s.duckdb"
    with Writer(src, RunInfo(label="eager", source="cupti"), pid=40) as w:
        w.append({"ranges": {"thread_id": [1, 1], "kind": ["step", "step"],
                             "name": ["ProfilerStep#1", "ProfilerStep#2"],
                             "step": pa.array([1, 2], pa.int32()), "depth": pa.array([0, 0], pa.int32()),
                             "start_ns": [t, t + 100], "end_ns": [t + 90, t + 190]}})
        w.append({"kernels": {"device_id": pa.array([0, 0], pa.int32()),
                              "stream_id": pa.array([7, 7], pa.int32()), "name": ["k1", "k2"],
                              "correlation_id": [1, 2], "step": pa.array([1, 2], pa.int32()),
                              "start_ns": [t + 10, t + 110], "end_ns": [t + 20, t + 120]}})
        w.add_quality("dropped_records", None, 3, "CUPTI dropped 3 activity records")
    outs = []
    for step in (1, 2):
        outs.append(tmp_path / f"s{step}.json")
        with cuptiprof.open(src, step) as prof:
            export_chrome(prof, outs[-1])
    back = tmp_path / "back.duckdb"
    import_traces(outs, back)
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT run_id, pid FROM processes ORDER BY 2").fetchall() == [(1, 40)]
    assert con.execute("SELECT run_id, pid, count FROM data_quality WHERE check_name = "
                       "'dropped_records'").fetchall() == [(1, 40, 3)]


# -- exports of some steps of one process, imported together ----------------------------------

def _export_steps(src: Path, steps: list[str], d: Path) -> list[Path]:
    """One Chrome export of `src` per entry of `steps` ('A:B'), in `d`."""
    outs = []
    for s in steps:
        outs.append(d / f"{src.stem}-{s.replace(':', '_')}.json.gz")
        with cuptiprof.open(src, s) as prof:
            export_chrome(prof, outs[-1])
    return outs


def _golden(path: Path) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_reports import write_fixture
    return write_fixture(path)


def test_exports_of_some_steps_of_one_process_import_as_that_one_process(tmp_path):
    """`export --steps 1` and `--steps 2:3` of the golden run, imported together, are its one
    process again (its pid, steps 1 to 3), not two: per kernel, per step and per op they are
    what the import of one export of steps 1 to 3 gives, and what the run recorded."""
    src = _golden(tmp_path / "golden.duckdb")
    parts = _export_steps(src, ["1", "2:3"], tmp_path)
    union, = _export_steps(src, ["1:3"], tmp_path)
    both, one = tmp_path / "both.duckdb", tmp_path / "one.duckdb"
    r = run_cli("import", *parts, "-o", both, "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "(kineto, 1 process): " in r.stderr and ", 3 steps -> " in r.stderr, r.stderr
    import_traces([union], one)
    con = duckdb.connect(str(both), read_only=True)
    assert con.execute("SELECT pid FROM processes").fetchall() == [(4242,)]
    assert con.execute("SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step'"
                       ).fetchall() == [([1, 2, 3],)]
    con.close()
    assert per_kernel(both) == per_kernel(one) == per_kernel(src, "step BETWEEN 1 AND 3")
    assert kernel_times(both) == kernel_times(one)
    with cuptiprof.open(both) as a, cuptiprof.open(one) as b:
        for report in ("steps", "ops", "ranges", "step_ranges", "kinds", "devices", "streams"):
            assert a.report(report).fetchall() == b.report(report).fetchall(), report


def test_an_exports_head_is_read_past_a_byte_order_mark_and_whitespace(tmp_path):
    """The processes an export of some steps says in its head are read the same after a UTF-8
    byte-order mark and whitespace (a trace saved again by an editor)."""
    from cuptiprof.interop.kineto import _said_processes
    part, = _export_steps(_golden(tmp_path / "golden.duckdb"), ["1"], tmp_path)
    said = _said_processes(part)
    assert len(said) == 1
    again = tmp_path / "again.json"
    again.write_bytes(b"\xef\xbb\xbf\n" + b" " * 100 + gzip.decompress(part.read_bytes()))
    assert _said_processes(again) == said


def _ids_and_links(path: Path) -> dict:
    """Each table's rows with their range ids as the range they name (name, start, thread),
    after checking that range ids are 1..N in each process and every id names a range of the
    row's own process."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM (SELECT pid FROM ranges GROUP BY pid HAVING "
                           "count(DISTINCT range_id) <> count(*) OR min(range_id) <> 1 OR "
                           "max(range_id) <> count(*))").fetchone() == (0,)
        name = ("(SELECT concat_ws(' ', r.name, r.start_ns, r.thread_id) FROM ranges r WHERE "
                "r.pid = t.pid AND r.range_id = t.{c})")
        for table, col in (("ranges", "parent_id"), ("api_calls", "range_id"),
                           ("kernels", "range_id"), ("kernels", "op_id")):
            assert con.execute(f"SELECT count(*) FROM {table} t WHERE {col} IS NOT NULL AND "
                               f"{name.format(c=col)} IS NULL").fetchone() == (0,), (table, col)
        sql = {"ranges": "name, kind, step, depth, thread_id, start_ns, end_ns, domain, "
                         + name.format(c="parent_id"),
               "api_calls": "correlation_id, thread_id, start_ns, end_ns, step, "
                            + name.format(c="range_id"),
               "kernels": "correlation_id, name, start_ns, end_ns, step, "
                          f"{name.format(c='range_id')}, {name.format(c='op_id')}",
               "logs": "thread_id, time_ns, level, logger, message, step",
               "memory_events": "time_ns, operation, bytes, memory_kind, step"}
        return {t: con.execute(f"SELECT pid, {cols} FROM {t} t ORDER BY ALL").fetchall()
                for t, cols in sql.items()}
    finally:
        con.close()


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("order", ["as exported", "reversed"])
def test_exports_of_some_steps_keep_ids_and_links_of_one_process(tmp_path, monkeypatch, order,
                                                                 native):
    """Steps 1 to 3 inside a "generate" range, a loader's range around all of them, a range
    opened in a warm-up, and one never closed (on a thread of its own), with log records and
    allocations in each step: exported as `--steps 1` and `--steps 2:3` and imported together
    (in either order), each range both exports hold is there once (the one never closed
    without an end), range ids are unique in the process and every call, kernel and range
    names a range of it, and each row's step, range and op are those of an import of one
    export of steps 1 to 3."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    src = _steps_in_enclosing_ranges(tmp_path / "s.duckdb", more=True)
    parts = _export_steps(src, ["1", "2:3"], tmp_path)
    union, = _export_steps(src, ["1:3"], tmp_path)
    both, one = tmp_path / "both.duckdb", tmp_path / "one.duckdb"
    import_traces(parts if order == "as exported" else parts[::-1], both)
    import_traces([union], one)
    got = _ids_and_links(both)
    assert got == _ids_and_links(one)
    assert [r[1] for r in got["ranges"] if r[2] != "step"] == \
        ["aten::op1", "aten::op2", "aten::op3", "compile", "generate", "loader", "serve"]
    assert [r[1:3] + r[7:8] for r in got["ranges"] if r[1] == "serve"] == [("serve", "user", None)]
    assert {r[0] for t in got.values() for r in t} == {31}
    assert [r[-1] for r in got["logs"]] == [1, 2, 3] and len(got["memory_events"]) == 3
    assert per_kernel(both) == per_kernel(src, "step BETWEEN 1 AND 3")
    drop = lambda rows, cols: [tuple(v for c, v in zip(cols, r) if c not in ("top_op", "top_op_ms"))  # noqa: E731
                               for r in rows]
    with cuptiprof.open(both) as a, cuptiprof.open(one) as b:
        for report in ("steps", "ops", "step_ranges"):
            ra, rb = a.report(report), b.report(report)
            assert drop(ra.fetchall(), ra.columns) == drop(rb.fetchall(), rb.columns), report


def test_exports_of_one_process_that_hold_the_same_step_are_refused(tmp_path):
    """Two exports of one process that both hold a step (steps 1:2 and 2:3; an export of every
    row beside one of some steps; one trace copied under another name) would count its rows
    twice, as one process or as two: the import is refused in one line, exit 2, naming both
    traces and the step, and leaves no output."""
    src = _golden(tmp_path / "golden.duckdb")
    a, b = _export_steps(src, ["1:2", "2:3"], tmp_path)
    every = tmp_path / "every.json.gz"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, every)
    copy = tmp_path / "copy.json.gz"
    copy.write_bytes(a.read_bytes())
    for inputs, says in (([a, b], "both hold step 2"), ([b, every], "both hold steps 2:3")):
        out = tmp_path / "x.duckdb"
        r = run_cli("import", *inputs, "-o", out, "--no-progress")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"{inputs[1]}: an export of the same process as {inputs[0]} (pid 4242 of run " \
               f"'golden'), and {says}: " in r.stderr, r.stderr
        assert "would count twice" in r.stderr and not out.exists()
    # a copy is one trace given twice, whatever it holds
    r = run_cli("import", a, copy, "-o", tmp_path / "x.duckdb", "--no-progress")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"{copy}: the same trace is given twice ({a} holds the same text)" in r.stderr
    assert "would count twice" in r.stderr and not (tmp_path / "x.duckdb").exists()


def test_only_exports_of_one_process_of_one_run_import_as_one(tmp_path):
    """Exports of some steps of a run of two processes import as those two processes (not
    four); beside them, torch.profiler's own trace of a process with the same pid, and an
    export of another run's process with that pid, stay processes of their own."""
    src = tmp_path / "two.duckdb"
    with Writer(src, RunInfo(label="job", source="synthetic", start_ns=1_700_000_000_000_000_000),
                pid=100) as w:
        for pid, seed in ((100, 1), (200, 2)):
            for batch in synthetic_batches(steps=4, kernels_per_step=20, seed=seed, pid=pid):
                w.append(batch)
    other = write_synthetic(tmp_path / "other.duckdb", steps=3, kernels_per_step=10, seed=5,
                            pid=100)
    plain = _plain_trace(tmp_path / "plain.json", 100)
    inputs = [*_export_steps(src, ["1:2"], tmp_path), plain,
              *_export_steps(other, ["2:3"], tmp_path), *_export_steps(src, ["3:4"], tmp_path)]
    back = tmp_path / "back.duckdb"
    import_traces(inputs, back)
    con = duckdb.connect(str(back), read_only=True)
    steps = ("SELECT p.pid, p.command, (SELECT list(step ORDER BY step) FROM ranges r WHERE "
             "r.pid = p.pid AND kind = 'step') FROM processes p ORDER BY 1")
    assert con.execute(steps).fetchall() == [
        (100, "python synthetic.py", [1, 2, 3, 4]), (200, "python synthetic.py", [1, 2, 3, 4]),
        (100 + (1 << 22), str(plain), None), (100 + (2 << 22), "python synthetic.py", [2, 3])]
    per_pid = "SELECT pid, name, count(*), sum(end_ns - start_ns) FROM kernels {} GROUP BY ALL ORDER BY ALL"
    with duckdb.connect(str(src), read_only=True) as orig:
        assert con.execute(per_pid.format("WHERE pid IN (100, 200)")).fetchall() == \
            orig.execute(per_pid.format("WHERE step BETWEEN 1 AND 4")).fetchall()


def test_exports_of_some_steps_of_a_merged_file_import_as_its_runs_and_processes(tmp_path):
    """A merge of two runs exported as `--steps 1:2` and `--steps 3:4` imports as those two
    runs, each with its one process and steps 1 to 4 (not each trace's runs apart)."""
    runs = [write_synthetic(tmp_path / f"{name}.duckdb", steps=4, kernels_per_step=10, seed=k,
                            pid=100 + k) for k, name in enumerate(("eager", "compiled"))]
    src = merge_files(runs, tmp_path / "m.duckdb")
    back = tmp_path / "back.duckdb"
    import_traces(_export_steps(src, ["1:2", "3:4"], tmp_path), back)
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT run_id, label FROM runs ORDER BY 1").fetchall() == [
        (1, "eager"), (2, "compiled")]
    assert con.execute("SELECT p.run_id, p.pid, (SELECT list(step ORDER BY step) FROM ranges r "
                       "WHERE r.pid = p.pid AND kind = 'step') FROM processes p ORDER BY 1"
                       ).fetchall() == [(1, 100, [1, 2, 3, 4]), (2, 101, [1, 2, 3, 4])]
    assert per_kernel(back) == per_kernel(src, "step BETWEEN 1 AND 4")


def _run_of_steps(path: Path, label: str, pid: int, steps, t: int, dropped: int | None = None,
                  mode: str = "create") -> Path:
    """A run (or, with mode="append", another process of it) of one process `pid`: per step
    number of `steps`, a ProfilerStep range with a launch and its kernel inside; `dropped`: a
    dropped_records row."""
    us = lambda x: t + x * 1000  # noqa: E731
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    rows = [(k + 1, None, 0, f"ProfilerStep#{s}", "step", s, 5, us(100 * k), us(100 * k + 90))
            for k, s in enumerate(steps)]
    at = [us(100 * k + 10) for k in range(len(steps))]
    with Writer(path, RunInfo(label=label, source="synthetic", command=f"python {label}.py",
                              start_ns=t), mode=mode, pid=pid) as w:
        w.append({"ranges": _range_rows(rows),
                  "api_calls": {"thread_id": [5] * len(steps), "api_kind": ["runtime"] * len(steps),
                                "name": ["cudaLaunchKernel"] * len(steps),
                                "correlation_id": list(range(1, len(steps) + 1)),
                                "start_ns": at, "end_ns": [a + 2_000 for a in at],
                                "step": i32(list(steps)), "range_id": [r[0] for r in rows]},
                  "kernels": {"device_id": i32([0] * len(steps)), "stream_id": i32([7] * len(steps)),
                              "name": [f"{label}_k{s}" for s in steps],
                              "correlation_id": list(range(1, len(steps) + 1)),
                              "step": i32(list(steps)), "range_id": [r[0] for r in rows],
                              "start_ns": [a + 5_000 for a in at],
                              "end_ns": [a + 9_000 for a in at]}})
        if dropped is not None:
            w.add_quality("dropped_records", None, dropped, f"CUPTI dropped {dropped} records")
    return path


def _merge_of_disjoint_steps(tmp_path: Path, pid_b: int = 41) -> Path:
    """A merge of run "a" (pid 40, steps 1-2, 3 records dropped) and run "b" (pid `pid_b`,
    steps 11-12, 5 dropped): no step number is in both."""
    t = 1_700_000_000_000_000_000
    return merge_files([_run_of_steps(tmp_path / "a.duckdb", "a", 40, (1, 2), t, dropped=3),
                        _run_of_steps(tmp_path / "b.duckdb", "b", pid_b, (11, 12), t + 10**9,
                                      dropped=5)], tmp_path / "m.duckdb")


def _quality_of(path: Path) -> list:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT r.label, q.pid, q.check_name, q.count FROM data_quality q "
                           "JOIN runs r USING (run_id) ORDER BY ALL").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("steps, run, pid_b", [("1:2", "a", 41), ("11:12", "b", 41),
                                               ("11:12", "b", 40)])
def test_an_export_of_one_runs_steps_of_a_merged_file_imports_as_that_run_alone(tmp_path, steps,
                                                                                 run, pid_b):
    """`export --steps` of a merged file that holds rows of one run only imports back as that
    run alone, with its pid (another run's of the same pid is not there to take it): no empty
    run or process beside it (a false no_gpu row would say it had no GPU), and only its own
    data_quality rows."""
    src = _merge_of_disjoint_steps(tmp_path, pid_b)
    out, back = tmp_path / "s.json.gz", tmp_path / "back.duckdb"
    r = run_cli("export", src, "--chrome", out, "--steps", steps)
    assert r.returncode == 0, r.stderr
    r = run_cli("import", out, "-o", back, "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "(kineto): " in r.stderr, r.stderr   # one process
    pid = {"a": 40, "b": pid_b}[run]
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT run_id, label, command FROM runs").fetchall() == \
        [(1, run, f"python {run}.py")]
    assert con.execute("SELECT run_id, pid FROM processes").fetchall() == [(1, pid)]
    con.close()
    assert _quality_of(back) == [(run, pid, "dropped_records", 3 if run == "a" else 5)]
    lo, hi = (int(x) for x in steps.split(":"))
    assert per_kernel(back) == per_kernel(src, f"step BETWEEN {lo} AND {hi}")


def test_exports_of_each_runs_steps_of_a_merged_file_import_together_as_its_runs(tmp_path):
    """`--steps 1:2` (run a's) and `--steps 11:12` (run b's) of one merged file, imported
    together in either order, are its two runs again, in its order (each trace names both),
    each with its process, rows and data_quality rows once, and no empty process."""
    src = _merge_of_disjoint_steps(tmp_path)
    back = tmp_path / "back.duckdb"
    for k, order in enumerate((["1:2", "11:12"], ["11:12", "1:2"])):
        (tmp_path / str(k)).mkdir()
        import_traces(_export_steps(src, order, tmp_path / str(k)), back, overwrite=True)
        con = duckdb.connect(str(back), read_only=True)
        assert con.execute("SELECT run_id, label FROM runs ORDER BY 1").fetchall() == \
            [(1, "a"), (2, "b")]
        assert con.execute("SELECT r.label, p.pid FROM processes p JOIN runs r USING (run_id) "
                           "ORDER BY 1").fetchall() == [("a", 40), ("b", 41)]
        con.close()
        assert _quality_of(back) == [("a", 40, "dropped_records", 3), ("b", 41, "dropped_records", 5)]
        assert per_kernel(back) == per_kernel(src)


def test_an_export_of_steps_one_process_of_a_run_has_no_rows_in_leaves_it_out(tmp_path):
    """A run of two processes (one in steps 1-2, one in steps 1-4) exported as `--steps 3:4`
    imports back as the one process with rows there: no empty process, no no_gpu row."""
    t = 1_700_000_000_000_000_000
    src = _run_of_steps(tmp_path / "r.duckdb", "job", 40, (1, 2), t)
    _run_of_steps(src, "job", 41, (1, 2, 3, 4), t, mode="append")
    out, back = tmp_path / "s.json", tmp_path / "back.duckdb"
    with cuptiprof.open(src, "3:4") as prof:
        export_chrome(prof, out)
    import_traces([out], back)
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT run_id, pid FROM processes").fetchall() == [(1, 41)]
    assert con.execute("SELECT label FROM runs").fetchall() == [("job",)]
    assert con.execute("SELECT count(*) FROM data_quality WHERE check_name = 'no_gpu'"
                       ).fetchall() == [(0,)]
    con.close()
    assert per_kernel(back) == per_kernel(src, "step BETWEEN 3 AND 4")


_ORPHANS = ("SELECT count(*) FROM data_quality q WHERE pid IS NOT NULL AND NOT EXISTS (SELECT 1 "
            "FROM processes p WHERE p.run_id = q.run_id AND p.pid = q.pid)")
_QUALITY = ("SELECT pid, check_name, count, detail FROM data_quality WHERE check_name IN "
            "('no_gpu', 'dropped_records', 'process_ended_early', 'unreadable_part') ORDER BY ALL")


def test_an_export_of_steps_carries_the_quality_rows_of_the_processes_it_holds(tmp_path):
    """One run of two processes (40 in steps 1-4, with a dropped_records row and another row
    twice; 41 in steps 1-2, with a no_gpu and a dropped_records row) and a row of the run as a
    whole: `--steps 3:4` holds process 40 alone and carries its rows and the run's, not 41's,
    which, imported, would name a process the import does not have. `--steps 1:2` and
    `--steps 3:4` imported together, in either order, give every row of the file as often as
    it holds it, each with its process, whichever trace carried it."""
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "r.duckdb"
    with Writer(src, RunInfo(label="job", source="synthetic"), pid=40) as w:
        for pid, steps in ((40, [1, 2, 3, 4]), (41, [1, 2])):
            n, at, ids = len(steps), [t + 1_000 * s for s in steps], list(range(1, len(steps) + 1))
            ranges = _range_rows([(i, None, 0, f"ProfilerStep#{s}", "step", s, 5, a - 10, a + 300)
                                  for i, s, a in zip(ids, steps, at)])
            w.append({"ranges": {**ranges, "pid": i32([pid] * n)},
                      "api_calls": {"pid": i32([pid] * n), "thread_id": [5] * n,
                                    "api_kind": ["runtime"] * n, "name": ["cudaLaunchKernel"] * n,
                                    "correlation_id": ids, "step": i32(steps), "range_id": ids,
                                    "start_ns": at, "end_ns": [a + 50 for a in at]},
                      "kernels": {"pid": i32([pid] * n), "device_id": i32([0] * n),
                                  "stream_id": i32([7] * n), "name": [f"k{pid}"] * n,
                                  "correlation_id": ids, "step": i32(steps), "range_id": ids,
                                  "start_ns": [a + 100 for a in at],
                                  "end_ns": [a + 200 for a in at]}})
        w.add_quality("dropped_records", None, 5, "dropped 5", pid=40)
        for _ in range(2):
            w.add_quality("process_ended_early", "40", None, "killed", pid=40)
        w.add_quality("no_gpu", "gpu", None, "process 41 saw no GPU", pid=41)
        w.add_quality("dropped_records", None, 3, "dropped 3", pid=41)
        w.execute("INSERT INTO data_quality (run_id, pid, check_name, detail) VALUES "
                  "(?, NULL, 'unreadable_part', 'a part of the run')", [w.run_id])
    with duckdb.connect(str(src), read_only=True) as con:
        every = con.execute(_QUALITY).fetchall()
    assert len(every) == 6
    back = tmp_path / "back.duckdb"
    first, second = _export_steps(src, ["1:2", "3:4"], tmp_path)
    import_traces([second], back)
    with duckdb.connect(str(back), read_only=True) as con:
        assert con.execute("SELECT pid FROM processes").fetchall() == [(40,)]
        assert con.execute(_ORPHANS).fetchall() == [(0,)]
        assert con.execute(_QUALITY).fetchall() == [r for r in every if r[0] in (40, None)]
    assert per_kernel(back) == per_kernel(src, "step BETWEEN 3 AND 4")
    for order in ([first, second], [second, first]):
        import_traces(order, back, overwrite=True)
        with duckdb.connect(str(back), read_only=True) as con:
            assert con.execute("SELECT pid FROM processes ORDER BY 1").fetchall() == [(40,), (41,)]
            assert con.execute(_ORPHANS).fetchall() == [(0,)]
            assert con.execute(_QUALITY).fetchall() == every, order[0].name
        assert per_kernel(back) == per_kernel(src)


def test_exports_of_each_process_of_one_run_add_its_quality_rows_once(tmp_path):
    """The export of each process of a run carries every row of the run: imported together,
    each row is there once, with its process as imported (moved, beside a trace that took its
    pid first), whichever trace brought it. A row the exported file held twice stays twice."""
    run = {"id": 1, "label": "job", "source": "cupti", "startNs": 1_700_000_000_000_000_000}
    quality = [{"run": 1, "pid": 40, "check": "dropped_records", "count": 3, "detail": "dropped 3"},
               {"run": 1, "pid": 41, "check": "process_ended_early", "detail": "killed"},
               {"run": 1, "pid": 41, "check": "process_ended_early", "detail": "killed"}]
    paths = [_plain_trace(tmp_path / "plain.json", 41)]
    for pid in (40, 41):
        paths.append(tmp_path / f"p{pid}.json")
        paths[-1].write_text(json.dumps({
            "cuptiprofLinks": "range_id", "cuptiprofProcess": {"pid": pid}, "cuptiprofRun": run,
            "cuptiprofDataQuality": quality, "traceEvents": [
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "pid": pid, "tid": pid,
                 "ts": 1, "dur": 1, "args": {"correlation": 1}}]}))
    back = tmp_path / "back.duckdb"
    import_traces(paths, back)
    con = duckdb.connect(str(back), read_only=True)
    moved = 41 + (1 << 22)
    assert con.execute("SELECT pid, command FROM processes ORDER BY 1").fetchall() == [
        (40, str(paths[1])), (41, str(paths[0])), (moved, str(paths[2]))]
    assert con.execute("SELECT pid, check_name, count FROM data_quality WHERE check_name IN "
                       "('dropped_records', 'process_ended_early') ORDER BY 1").fetchall() == \
        [(40, "dropped_records", 3), (moved, "process_ended_early", None),
         (moved, "process_ended_early", None)]


@pytest.mark.parametrize("label", [None, "mine"])
@pytest.mark.parametrize("procs", [1, 2])
def test_the_run_of_an_export_of_one_run_imports_back_as_that_run(tmp_path, procs, label):
    """An export of one run (one process, or several) says what the run was: imported back,
    the run has its label (unless the import was given one), source, status, command, start
    and end again; how the file came about stays the import's (settings, host, versions)."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "eager.duckdb"
    w = Writer(src, RunInfo(label="eager", source="cupti", command="python train.py --lr 0.1",
                            start_ns=t, host="gpu-node-7", settings={"warmup": 1}), pid=40)
    w.append({"kernels": {"device_id": pa.array([0] * procs, pa.int32()),
                          "stream_id": pa.array([7] * procs, pa.int32()), "name": ["k"] * procs,
                          "pid": pa.array([40, 41][:procs], pa.int32()),
                          "correlation_id": [1] * procs, "start_ns": [t + 10] * procs,
                          "end_ns": [t + 20] * procs}})
    w.close("interrupted")
    out = tmp_path / "e.json.gz"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    back = tmp_path / "back.duckdb"
    import_traces([out], back, label=label)
    runs = "SELECT run_id, label, source, status, command, start_ns, end_ns FROM runs"
    con, orig = (duckdb.connect(str(p), read_only=True) for p in (back, src))
    want = orig.execute(runs).fetchall()
    assert con.execute(runs).fetchall() == [(1, label or "eager", *want[0][2:])]
    assert con.execute("SELECT start_time FROM runs").fetchall() == \
        orig.execute("SELECT start_time FROM runs").fetchall()
    settings, host, version = con.execute("SELECT settings, host, cuptiprof_version FROM runs").fetchone()
    assert json.loads(settings) == {"imported_from": [str(out)], "format": "kineto"}
    assert host != "gpu-node-7" and version == cuptiprof.__version__
    assert con.execute("SELECT run_id, pid FROM processes ORDER BY 2").fetchall() == \
        [(1, 40), (1, 41)][:procs]


def _own_keys_trace(path: Path, **keys) -> Path:
    """A trace as cuptiprof's export of one process writes it, with its own keys as given."""
    keys = {"cuptiprofRun": {"id": 1, "label": "job", "startNs": 1_700_000_000_000_000_000,
                             "startTime": "2023-11-14T22:13:20.000000+00:00"},
            "cuptiprofProcess": {"pid": 40}, **keys}
    path.write_text(json.dumps({"cuptiprofLinks": "range_id", **keys, "traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "pid": 40, "tid": 40, "ts": 1,
         "dur": 1, "args": {"correlation": 1}}]}))
    return path


_RUN = {"id": 1, "label": "job"}


@pytest.mark.parametrize("keys, says", [
    # a wall-clock start without its UTC offset names no known time; one not ISO 8601 none
    ({"cuptiprofRun": {**_RUN, "startTime": "2026-12-01T08:00:00"}},
     "cuptiprofRun.startTime '2026-12-01T08:00:00' has no UTC offset"),
    ({"cuptiprofProcesses": [{"pid": 40, "gpuPids": 1000, "run": {**_RUN, "startTime": "1 Dec"}},
                             {"pid": 41, "gpuPids": 2000, "run": _RUN}]},
     "cuptiprofProcesses[0].run.startTime '1 Dec' is not an ISO 8601 time"),
    # a data_quality entry that does not say its check
    ({"cuptiprofDataQuality": [{"run": 1, "pid": 40, "check": "dropped_records", "count": 1},
                               {"run": 1, "pid": 40, "count": 3, "detail": "dropped"}]},
     'cuptiprofDataQuality[1] has no "check"'),
    # integers beyond the columns they go to
    ({"cuptiprofProcess": {"pid": 40, "endNs": 2**63}},
     "cuptiprofProcess.endNs is 9223372036854775808, out of range (a signed 64-bit integer)"),
    ({"cuptiprofRun": {**_RUN, "startNs": 2**64}},
     "cuptiprofRun.startNs is 18446744073709551616, out of range"),
    ({"cuptiprofDataQuality": [{"run": 1, "pid": 40, "check": "c", "valueNs": -2**63 - 1}]},
     "cuptiprofDataQuality[0].valueNs is -9223372036854775809, out of range"),
    ({"cuptiprofProcess": {"pid": 40, "exitStatus": 2**31}},
     "cuptiprofProcess.exitStatus is 2147483648, out of range (a signed 32-bit integer)"),
    ({"cuptiprofProcess": {"pid": 40, "startNs": 10**60}},
     "cuptiprofProcess.startNs is a 200-bit number, out of range"),
    ({"distributedInfo": {"rank": 0, "local_rank": 2**40}},
     "distributedInfo.local_rank is 1099511627776, out of range (a signed 32-bit integer)"),
    # valid JSON, a value of the wrong type: the key named, not "invalid JSON"
    ({"cuptiprofProcess": {"pid": "x"}},
     "cuptiprofProcess.pid: expected `int | null`, got `str`; the trace's cuptiprof metadata "
     "is damaged"),
    ({"cuptiprofProcesses": [{"pid": 40, "gpuPids": 1000, "run": {"id": "one"}},
                             {"pid": 41, "gpuPids": 2000}]},
     "cuptiprofProcesses[0].run.id: expected `int`, got `str`; the trace's cuptiprof metadata"),
    ({"cuptiprofDataQuality": [{"check": "c", "count": [1]}]},
     "cuptiprofDataQuality[0].count: expected `int | null`, got `array`; the trace's cuptiprof"),
    ({"distributedInfo": {"rank": 0, "local_rank": "0"}},
     "distributedInfo.local_rank: expected `int | null`, got `str`; the trace's cuptiprof"),
    ({"distributedInfo": {"rank": "zero"}},   # Kineto's key: its metadata, not cuptiprof's
     "distributedInfo.rank: expected `int | null`, got `str`; the trace's metadata is damaged"),
])
def test_damaged_own_keys_are_refused_in_one_line(tmp_path, keys, says):
    """cuptiprof's own keys hand-edited or damaged: one line naming the file and the key, exit
    2, no output (nor its temporary file); not a Python error's name, not a guess at the time."""
    src = _own_keys_trace(tmp_path / "t.json", **keys)
    r = run_cli("import", src, "-o", tmp_path / "back.duckdb", "--no-progress")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and f"{src}: {says}" in r.stderr, r.stderr
    assert "Error" not in r.stderr.replace("cuptiprof: error:", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_a_start_time_with_any_utc_offset_is_that_time(tmp_path):
    """A run's wall-clock start is taken with the offset it says, whatever the offset."""
    src = _own_keys_trace(tmp_path / "t.json", cuptiprofRun={
        **_RUN, "startTime": "2026-12-01T10:00:00+02:00"})
    import_traces([src], tmp_path / "back.duckdb")
    con = duckdb.connect(str(tmp_path / "back.duckdb"), read_only=True)
    assert con.execute("SELECT epoch(start_time) FROM runs").fetchall() == [(1796112000.0,)]


def test_a_start_time_not_recorded_is_the_runs_start(tmp_path):
    """An export that says its run's start on the record clock and no wall-clock start (an
    earlier export): the run's wall-clock start is that start."""
    src = _own_keys_trace(tmp_path / "t.json", cuptiprofRun={
        **_RUN, "startNs": 1_796_112_000_000_000_000})
    import_traces([src], tmp_path / "back.duckdb")
    con = duckdb.connect(str(tmp_path / "back.duckdb"), read_only=True)
    assert con.execute("SELECT epoch(start_time), start_ns FROM runs").fetchall() == [
        (1796112000.0, 1_796_112_000_000_000_000)]


def test_the_runs_of_a_merged_export_are_restored_before_the_rename(tmp_path, monkeypatch):
    """The import restores the runs in its temporary file: the file renamed into place already
    holds them all (a crash in between leaves no file, never one holding one run), and a
    failed restore leaves neither the output nor its temporary file."""
    import os

    src = _merged_runs(tmp_path)
    out = tmp_path / "m.json.gz"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    seen = []

    def placing(real):   # a new output is put in place by a hard link, a replaced one renamed
        def place(a, b, **kw):
            if Path(b).suffix == ".duckdb":
                with duckdb.connect(str(a), read_only=True) as con:
                    seen.append((Path(b).name,
                                 con.execute("SELECT count(*) FROM runs").fetchone()[0]))
            return real(a, b, **kw)
        return place
    monkeypatch.setattr(os, "replace", placing(os.replace))
    monkeypatch.setattr(os, "link", placing(os.link))
    import_traces([out], tmp_path / "back.duckdb")
    assert seen == [("back.duckdb", 2)]

    from cuptiprof.interop import importing

    def broken(path, files, label=None):
        raise RuntimeError("restore failed")
    monkeypatch.setattr(importing, "_restore_runs", broken)
    with pytest.raises(RuntimeError, match="restore failed"):
        import_traces([out], tmp_path / "again.duckdb")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("again", ".again"))) == []


def test_an_export_of_nothing_is_refused(tmp_path):
    """A file without rows would export a trace without events, which `import` refuses: the
    export says so in one line instead of writing it."""
    src, out = tmp_path / "empty.duckdb", tmp_path / "e.json"
    with Writer(src, RunInfo(source="test")):
        pass
    r = run_cli("export", src, "--chrome", out)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"cuptiprof: error: {src}: nothing to export (no GPU activity, range, API call or log "
        "record); no trace written"], r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.duckdb"]


@pytest.mark.parametrize("native", ["1", "0"])
def test_start_times_survive_a_round_trip_of_clocks_far_apart(tmp_path, monkeypatch, native):
    """A merged file whose processes ran on clocks far apart (time since boot, time since the
    epoch): its export holds microsecond timestamps of 19 digits, which a double cannot hold;
    imported back, every start is exact to the ns, by either parse path."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    parts = []
    for pid, t in ((31, 1_000_000_123), (32, 1_764_000_000_123_456_789)):
        parts.append(tmp_path / f"p{pid}.duckdb")
        with Writer(parts[-1], RunInfo(source="synthetic", host=f"node-{pid}"), pid=pid) as w:
            w.append({"kernels": {"device_id": pa.array([0] * 3, pa.int32()),
                                  "stream_id": pa.array([7] * 3, pa.int32()), "name": ["a", "b", "c"],
                                  "start_ns": [t, t + 1_001, t + 2_999],
                                  "end_ns": [t + 500, t + 1_777, t + 3_333]}})
    src = merge_files(parts, tmp_path / "m.duckdb")
    with cuptiprof.open(src) as prof:
        export_chrome(prof, tmp_path / "m.json")
    import_traces([tmp_path / "m.json"], tmp_path / "back.duckdb")
    sql = "SELECT name, start_ns, end_ns FROM kernels ORDER BY 2"
    with duckdb.connect(str(src), read_only=True) as a, \
            duckdb.connect(str(tmp_path / "back.duckdb"), read_only=True) as b:
        assert b.execute(sql).fetchall() == a.execute(sql).fetchall()


def test_an_export_of_one_process_without_host_events_keeps_its_pid(tmp_path):
    """A process of GPU rows only exports no host event to take its pid from, and a tool that
    keeps a trace's events but not its metadata ones leaves no process label either: the pid
    its export records (`cuptiprofProcess.pid`) comes back, not the trace's place in the
    import, and is claimed like any other (one a trace before it used moves up)."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "gpu.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=4242) as w:
        w.append({"kernels": {"device_id": pa.array([0], pa.int32()),
                              "stream_id": pa.array([7], pa.int32()), "name": ["k"],
                              "correlation_id": [1], "start_ns": [t + 10], "end_ns": [t + 20]}})
    out = tmp_path / "gpu.json"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    doc = json.loads(out.read_text())
    assert doc["cuptiprofProcess"]["pid"] == 4242
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    assert [e["pid"] for e in doc["traceEvents"]] == [0]   # the kernel, on its device's pid
    out.write_text(json.dumps(doc))
    other = _plain_trace(tmp_path / "other.json", 4242, tid=1)
    for inputs, want in (([out], [4242]), ([other, out], [4242, 4242 + (1 << 22)])):
        back = tmp_path / f"back{len(inputs)}.duckdb"
        import_traces(inputs, back)
        with duckdb.connect(str(back), read_only=True) as con:
            pids = con.execute("SELECT pid FROM processes ORDER BY 1").fetchall()
            assert [p for (p,) in pids] == want
            assert con.execute("SELECT pid FROM kernels").fetchall() == [(want[-1],)]


def test_export_and_import_status_lines_are_prefixed_on_stderr(tmp_path):
    """Like report, compare and merge: each line export and import print about what they did
    starts `cuptiprof:` and goes to stderr, so stdout stays free for data."""
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    r = run_cli("export", src, "--chrome", tmp_path / "t.json.gz", "--parquet", tmp_path / "pq")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert r.stdout == "" and len(lines) == 2, (r.stdout, r.stderr)
    assert lines[0].startswith("cuptiprof: wrote ") and " trace events (" in lines[0], lines
    assert lines[1].startswith("cuptiprof: wrote ") and " Parquet datasets (" in lines[1], lines
    # what was written: every row (no --steps), and how many datasets hold rows (no memset)
    assert "(2 kernels, scope: every row) -> " in lines[0], lines
    datasets, with_rows = map(int, re.search(r"wrote (\d+) Parquet datasets \((\d+) with rows; "
                                             r"2 kernel rows\)", lines[1]).groups())
    assert 0 < with_rows < datasets, lines
    # --steps: the line names the steps written, and counts only their kernels
    r = run_cli("export", src, "--steps", "3", "--chrome", tmp_path / "s.json.gz")
    assert r.returncode == 0 and "(1 kernel, scope: steps 3:3) -> " in r.stderr, r.stderr
    r = run_cli("import", tmp_path / "t.json.gz", "-o", tmp_path / "back.duckdb", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr.startswith("cuptiprof: imported 1 file ("), r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


def test_an_export_of_one_process_names_its_runs_devices_not_another_runs(tmp_path):
    """A merge of two runs on different GPUs: the first recorded nothing but its A100, the
    second's process has GPU rows while its H200 is recorded under another process of that run
    (rank 0, say). An export of that process names its own run's GPU, not the first one the
    file holds; where its run names none, the file's."""
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    srcs = []
    for k, gpu in enumerate(("A100", "H200")):
        src = tmp_path / f"r{k}.duckdb"
        with Writer(src, RunInfo(source="synthetic"), pid=40 + k) as w:
            batch = {"devices": {"pid": i32([40 + k]), "device_id": i32([0]), "kind": ["gpu"],
                                 "name": [gpu]}}
            if k:
                batch["kernels"] = {"pid": i32([50]), "device_id": i32([0]), "stream_id": i32([7]),
                                    "name": ["k"], "correlation_id": [1], "start_ns": [T0],
                                    "end_ns": [T0 + 5]}
            w.append(batch)
        srcs.append(src)
    merged = merge_files(srcs, tmp_path / "m.duckdb")
    out = tmp_path / "m.json"
    with cuptiprof.open(merged) as prof:
        export_chrome(prof, out)
    assert [d["name"] for d in load_trace(out)["deviceProperties"]] == ["H200"]
    with duckdb.connect(str(merged)) as con:   # its run names no device: the file's
        con.execute("DELETE FROM devices WHERE name = 'H200'")
    with cuptiprof.open(merged) as prof:
        export_chrome(prof, out, force=True)
    assert [d["name"] for d in load_trace(out)["deviceProperties"]] == ["A100"]


def test_a_correlation_across_kernels_copies_and_memsets_has_an_arrow_to_each(tmp_path):
    """A graph launch whose kernels (on two GPUs), copy and memset share its correlation id:
    an arrow from the launch to each of them whatever its table, a flow id each
    (chrome://tracing ends a flow at its first "f" and drops any other); a launch of one row
    keeps its correlation id as the flow's."""
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "g.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({
            "api_calls": {"thread_id": [5, 5, 5], "api_kind": ["runtime"] * 3,
                          "name": ["cudaGraphLaunch"] * 3, "correlation_id": [2, 3, 4],
                          "start_ns": [t, t + 100, t + 200], "end_ns": [t + 50, t + 150, t + 250]},
            "kernels": {"device_id": i32([0, 1, 0, 0]), "stream_id": i32([7, 3, 7, 7]),
                        "name": ["a", "b", "c", "d"], "correlation_id": [2, 2, 3, 4],
                        "start_ns": [t + 1_000, t + 1_500, t + 5_000, t + 6_000],
                        "end_ns": [t + 1_100, t + 1_600, t + 5_100, t + 6_200]},
            "memcpys": {"device_id": i32([0, 0, 0]), "stream_id": i32([7, 8, 8]), "bytes": [64] * 3,
                        "correlation_id": [2, 3, 4], "start_ns": [t + 3_000, t + 5_000, t + 6_000],
                        "end_ns": [t + 3_100, t + 5_100, t + 6_100]},
            "memsets": {"device_id": i32([0]), "stream_id": i32([7]), "bytes": [64], "correlation_id": [2],
                        "start_ns": [t + 900], "end_ns": [t + 950]}})
    out = tmp_path / "g.json"
    with cuptiprof.open(src) as prof:
        counts = export_chrome(prof, out)
    ev = load_trace(out)["traceEvents"]
    assert counts["events"] == len(ev)
    starts = sorted(e["id"] for e in ev if e["ph"] == "s")
    ends = {(e["ts"], e["tid"]): e["id"] for e in ev if e["ph"] == "f"}
    assert sorted(ends.values()) == starts and len(set(starts)) == len(starts) == 8
    gpu = {(e["ts"], e["tid"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    assert set(ends) == gpu
    # the first kernel of launch 2 ("a", stream 7), and each launch's kernel, keep the id
    assert [ends[k] for k in ((1.0, 7), (5.0, 7), (6.0, 7))] == [2, 3, 4]


def test_a_process_of_memory_events_only_is_a_process_of_its_own(tmp_path):
    """A process that recorded allocations and frees and nothing else (no kernel, call or
    range) is one of the export's processes: its [memory] instants go on a pid of its own,
    named, and come back under its own pid, not under the other process's."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "mem.duckdb"
    for i, pid in enumerate((11, 22)):
        with Writer(src, RunInfo(source="synthetic"), mode="append" if i else "create", pid=pid) as w:
            if pid == 11:
                w.append({"kernels": {"device_id": pa.array([0], pa.int32()),
                                      "stream_id": pa.array([7], pa.int32()), "name": ["k"],
                                      "start_ns": [t], "end_ns": [t + 1_000]}})
            else:
                w.append({"memory_events": {"device_id": pa.array([0, 0], pa.int32()),
                                            "time_ns": [t + 5, t + 700], "operation": ["alloc", "free"],
                                            "bytes": [4096] * 2, "memory_kind": ["device"] * 2}})
    out, back = tmp_path / "mem.json", tmp_path / "back.duckdb"
    chrome_round_trip(src, out, back)
    ev = load_trace(out)["traceEvents"]
    named = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    mem_pids = {e["pid"] for e in ev if e["name"] == "[memory]"}
    assert len(mem_pids) == 1 and "pid 22" in named[mem_pids.pop()]
    with duckdb.connect(str(back), read_only=True) as con:
        assert con.execute("SELECT pid, count(*) FROM memory_events GROUP BY 1").fetchall() == [(22, 2)]
        assert con.execute("SELECT pid FROM kernels").fetchall() == [(11,)]


def test_a_gpu_annotation_on_a_stream_of_no_other_work_has_a_named_track(tmp_path):
    """A GPU user annotation sits on its device's stream: the device's process and the
    stream's track are named, as those of kernels are, where no kernel, copy or memset ran
    on that stream or that device."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "ann.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({"kernels": {"device_id": pa.array([0], pa.int32()),
                              "stream_id": pa.array([7], pa.int32()), "name": ["k"],
                              "start_ns": [t], "end_ns": [t + 1_000]},
                  "ranges": {"range_id": [1, 2], "name": ["ann0", "ann1"], "kind": ["user"] * 2,
                             "domain": ["gpu_user_annotation"] * 2, "thread_id": [5, 5],
                             "start_ns": [t, t + 10], "end_ns": [t + 500, t + 600],
                             "attrs": ['{"device": 0, "stream": 13}',
                                       '{"device": 2, "stream": 21}']}})
    out = tmp_path / "ann.json"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    ev = load_trace(out)["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    labels = {e["pid"]: e["args"]["labels"] for e in ev if e["name"] == "process_labels"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    ann = {e["name"]: (e["pid"], e["tid"]) for e in ev if e.get("cat") == "gpu_user_annotation"}
    assert ann == {"ann0": (0, 13), "ann1": (2, 21)}
    assert tracks[(0, 13)] == "stream 13" and tracks[(2, 21)] == "stream 21"
    assert tracks[(0, 7)] == "stream 7"
    assert procs[2] == "GPU" and labels[2] == "GPU 2"


def test_an_export_of_a_step_never_closed_holds_what_ran_inside_it(tmp_path):
    """A step never closed (the program killed inside it) ends at the export's last time: an
    export of it holds the ranges of no step that other threads opened inside it, as one of
    a closed step does."""
    t = 1_700_000_000_000_000_000
    # range_id, parent, depth, name, kind, step, thread, start, end
    rows = [(1, None, 0, "step1", "step", 1, 5, t, t + 1_000),
            (2, None, 0, "step2", "step", 2, 5, t + 2_000, None),
            (3, None, 0, "loader", "user", None, 6, t + 3_000, t + 4_000)]
    src = tmp_path / "open.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({"ranges": _range_rows(rows),
                  "kernels": {"device_id": pa.array([0], pa.int32()),
                              "stream_id": pa.array([7], pa.int32()), "name": ["k"],
                              "step": pa.array([2], pa.int32()),
                              "start_ns": [t + 5_000], "end_ns": [t + 6_000]}})
    out = tmp_path / "open.json"
    with cuptiprof.open(src, "2") as prof:
        export_chrome(prof, out)
    x = {e["name"]: e for e in load_trace(out)["traceEvents"] if e["ph"] == "X"}
    assert sorted(x) == ["ProfilerStep#2", "k", "loader"]
    assert x["ProfilerStep#2"]["args"]["cuptiprof open"] == 1
    assert Decimal(x["ProfilerStep#2"]["ts"]) + Decimal(x["ProfilerStep#2"]["dur"]) == \
        Decimal(x["k"]["ts"]) + Decimal(x["k"]["dur"])


def test_a_process_of_pid_1_shares_no_trace_process_with_gpu_1(tmp_path):
    """A program that runs as PID 1 (a container's) on GPU 1: its CPU rows and GPU 1's rows
    are processes apart in the trace (one process name each), and the trace imports back as
    that process, pid 1, with its kernels on their devices and its calls, ranges and host."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "pid1.duckdb"
    with Writer(src, RunInfo(source="synthetic", host="box"), pid=1) as w:
        ranges = _range_rows([(1, None, 0, "step", "step", 3, 1, t, t + 10_000),
                              (2, 1, 1, "fwd", "user", 3, 1, t + 100, t + 9_000),
                              (3, None, 0, "ann", "user", 3, 1, t + 400, t + 900)])
        ranges["domain"][2] = "gpu_user_annotation"   # on device 0 (no device said), stream 1
        ranges["attrs"] = [None, None, '{"stream": 1}']
        w.append({"ranges": ranges,
                  "api_calls": {"thread_id": [1, 1], "api_kind": ["runtime"] * 2,
                                "name": ["cudaLaunchKernel"] * 2, "correlation_id": [1, 2],
                                "start_ns": [t + 200, t + 300], "end_ns": [t + 250, t + 350],
                                "step": pa.array([3, 3], pa.int32()), "range_id": [2, 2]},
                  "kernels": {"device_id": pa.array([1, 0], pa.int32()),
                              "stream_id": pa.array([1, 7], pa.int32()), "name": ["k1", "k0"],
                              "correlation_id": [1, 2], "step": pa.array([3, 3], pa.int32()),
                              "range_id": [2, 2], "start_ns": [t + 400, t + 500],
                              "end_ns": [t + 1_400, t + 2_500]}})
    out, back = tmp_path / "pid1.json", tmp_path / "back.duckdb"
    chrome_round_trip(src, out, back)
    ev = load_trace(out)["traceEvents"]
    cpu = {e["pid"] for e in ev if e.get("cat") in ("cuda_runtime", "user_annotation")}
    gpu = {e["pid"] for e in ev if e.get("cat") == "kernel"}
    assert len(cpu) == 1 and len(gpu) == 2 and not cpu & gpu
    names = Counter(e["pid"] for e in ev if e["name"] == "process_name")
    assert set(names) == cpu | gpu and set(names.values()) == {1}
    q = {"kernels": "SELECT pid, device_id, stream_id, name, start_ns, end_ns, step FROM kernels",
         "api_calls": "SELECT pid, thread_id, correlation_id, start_ns, end_ns, step FROM api_calls",
         "ranges": "SELECT pid, thread_id, CASE WHEN kind = 'step' THEN 'step' ELSE name END, "
                   "kind, step, start_ns, end_ns, domain FROM ranges WHERE kind <> 'user' "
                   "OR domain = 'gpu_user_annotation'"}
    with duckdb.connect(str(back), read_only=True) as con, \
            duckdb.connect(str(src), read_only=True) as orig:
        for table, sql in q.items():
            sql += " ORDER BY ALL"
            assert con.execute(sql).fetchall() == orig.execute(sql).fetchall(), table
        assert con.execute("SELECT pid, host FROM processes").fetchall() == [(1, "box")]
        # the annotation of no device comes back on device 0, where it was drawn (as it does
        # from the export of a process of any pid)
        assert con.execute("SELECT attrs FROM ranges WHERE name = 'ann'").fetchall() == \
            [('{"device": 0, "stream": 1}',)]


def test_a_process_of_pid_minus_1_shares_no_trace_process_with_rows_of_no_device(tmp_path):
    """An imported process of pid -1 with GPU rows of no device: its CPU rows and those rows
    are processes apart in the trace (one process name each, not the CPU ops' name over the
    process's), and the trace imports back with each kernel's device as before (-1: none)."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "m1.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=-1) as w:
        w.append({"api_calls": {"thread_id": [5], "api_kind": ["runtime"],
                                "name": ["cudaLaunchKernel"], "correlation_id": [1],
                                "start_ns": [t], "end_ns": [t + 50]},
                  "kernels": {"device_id": pa.array([None, 0], pa.int32()),
                              "stream_id": pa.array([7, 7], pa.int32()), "name": ["kn", "k0"],
                              "correlation_id": [1, 2], "start_ns": [t + 100, t + 200],
                              "end_ns": [t + 150, t + 300]}})
    out, back = tmp_path / "m1.json", tmp_path / "back.duckdb"
    chrome_round_trip(src, out, back)
    ev = load_trace(out)["traceEvents"]
    cpu = {e["pid"] for e in ev if e.get("cat") == "cuda_runtime"}
    gpu = {e["name"]: e["pid"] for e in ev if e.get("cat") == "kernel"}
    # pid -1 is written as an unused positive pid (a viewer reads a negative one as none)
    assert cpu == {999_998} and cpu.isdisjoint(gpu.values()) and len(set(gpu.values())) == 2
    assert min(gpu.values()) >= 0
    names = Counter(e["pid"] for e in ev if e["name"] == "process_name")
    assert set(names) == cpu | set(gpu.values()) and set(names.values()) == {1}
    with duckdb.connect(str(back), read_only=True) as con:
        assert con.execute("SELECT pid, device_id, name FROM kernels ORDER BY name").fetchall() \
            == [(-1, 0, "k0"), (-1, -1, "kn")]
        assert con.execute("SELECT pid, thread_id FROM api_calls").fetchall() == [(-1, 5)]


def test_a_gpu_annotation_on_a_stream_that_is_not_a_number_gets_a_numeric_track(tmp_path):
    """An imported GPU user annotation whose stream is a string (or a fraction): its tid and
    its args' stream are the number the importer makes of such a thread id (a trailing number,
    else a crc32 of the text), its track is named, and the trace imports back as one that
    carried the strings as tids does."""
    t = 1_700_000_000_000_000_000
    streams = ["s13", "compute", "7", 2.5, 4]
    src = tmp_path / "str.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({"ranges": {"range_id": [1, 2, 3, 4, 5], "name": list("abcde"),
                             "kind": ["user"] * 5, "domain": ["gpu_user_annotation"] * 5,
                             "thread_id": [5] * 5, "start_ns": [t + 10 * i for i in range(5)],
                             "end_ns": [t + 500 + 10 * i for i in range(5)],
                             "attrs": [json.dumps({"device": 0, "stream": s}) for s in streams]}})
    out, back = tmp_path / "str.json", tmp_path / "back.duckdb"
    chrome_round_trip(src, out, back)
    doc = load_trace(out)
    ann = {e["name"]: e for e in doc["traceEvents"] if e.get("cat") == "gpu_user_annotation"}
    compute = zlib.crc32(b"compute") & 0x3FFFFFFF
    want = {"a": 13, "b": compute, "c": 7, "d": 5, "e": 4}
    assert {n: (e["tid"], e["args"]["stream"]) for n, e in ann.items()} == \
        {n: (s, s) for n, s in want.items()}
    tracks = {e["tid"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert tracks == set(want.values())
    # the strings as tids (no stream in args; the fraction's text: a tid is no fraction):
    # what the importer makes of them
    for e, s in zip((ann[n] for n in "abcde"), streams):
        e["tid"] = str(s) if isinstance(s, float) else s
        del e["args"]["stream"]
    plain, back2 = tmp_path / "plain.json", tmp_path / "back2.duckdb"
    plain.write_text(json.dumps(doc))
    import_traces([plain], back2)
    q = "SELECT name, thread_id, attrs FROM ranges ORDER BY name"
    with duckdb.connect(str(back), read_only=True) as a, \
            duckdb.connect(str(back2), read_only=True) as b:
        assert a.execute(q).fetchall() == b.execute(q).fetchall()
        assert [r[1] for r in a.execute(q).fetchall()] == [want[n] for n in "abcde"]


def test_a_gpu_annotation_on_a_negative_stream_shares_its_kernels_track(tmp_path):
    """A GPU user annotation whose stream is negative is on the track of that stream's
    kernels (its tid unsigned, as theirs, not negative: a viewer reads a negative tid as
    none), a named one; imported back it has no stream, as those kernels have none (NULL),
    read from its args or, without them, from its tid, and stays on their track."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "neg.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({"kernels": {"device_id": pa.array([0, 0], pa.int32()),
                              "stream_id": pa.array([-1, 7], pa.int32()), "name": ["k", "k7"],
                              "start_ns": [t, t + 2_000], "end_ns": [t + 1_000, t + 3_000]},
                  "ranges": {"range_id": [1, 2], "name": ["ann", "ann7"], "kind": ["user"] * 2,
                             "domain": ["gpu_user_annotation"] * 2, "thread_id": [5, 5],
                             "start_ns": [t, t + 2_000], "end_ns": [t + 500, t + 2_500],
                             "attrs": ['{"device": 0, "stream": -1}',
                                       '{"device": 0, "stream": 7}']}})
    out, back = tmp_path / "neg.json", tmp_path / "back.duckdb"
    chrome_round_trip(src, out, back)
    doc = load_trace(out)
    ev = doc["traceEvents"]
    track = {e["name"]: (e["pid"], e["tid"]) for e in ev
             if e.get("cat") in ("kernel", "gpu_user_annotation")}
    assert track["ann"] == track["k"] == (0, NO_THREAD)
    assert track["ann7"] == track["k7"] == (0, 7)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert names[(0, NO_THREAD)] == "no stream"
    q = "SELECT name, attrs FROM ranges WHERE domain = 'gpu_user_annotation' ORDER BY name"
    with duckdb.connect(str(src), read_only=True) as con:
        want = con.execute(q).fetchall()
    assert want[0] == ("ann", '{"device": 0, "stream": -1}')
    for e in ev:   # the stream from the tid alone
        if e.get("cat") == "gpu_user_annotation":
            del e["args"]["stream"]
    plain, back2 = tmp_path / "plain.json", tmp_path / "back2.duckdb"
    plain.write_text(json.dumps(doc))
    import_traces([plain], back2)
    for path in (back, back2):
        with duckdb.connect(str(path), read_only=True) as con:
            assert con.execute(q).fetchall() == [("ann", '{"device": 0, "stream": null}'),
                                                 want[1]], path.name
            # an imported GPU annotation's thread is its stream: none for no stream
            assert con.execute(q.replace("attrs", "thread_id")).fetchall() == \
                [("ann", None), ("ann7", 7)], path.name
            assert con.execute("SELECT name, stream_id FROM kernels ORDER BY name").fetchall() \
                == [("k", None), ("k7", 7)], path.name
    again = tmp_path / "again.json"
    with cuptiprof.open(back) as prof:
        export_chrome(prof, again)
    track = {e["name"]: (e["pid"], e["tid"]) for e in load_trace(again)["traceEvents"]
             if e.get("cat") in ("kernel", "gpu_user_annotation")}
    assert track["ann"] == track["k"] and track["ann7"] == track["k7"]


def test_a_gpu_annotation_whose_stream_is_null_is_on_a_track(tmp_path):
    """attrs with a JSON null stream: the annotation goes where one without a stream goes (its
    thread's track), not to a null tid, which a viewer draws on no track."""
    t = 1_700_000_000_000_000_000
    src = tmp_path / "null.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({"ranges": {"range_id": [1, 2], "name": ["null", "none"], "kind": ["user"] * 2,
                             "domain": ["gpu_user_annotation"] * 2, "thread_id": [5, 5],
                             "start_ns": [t, t + 2_000], "end_ns": [t + 500, t + 2_500],
                             "attrs": ['{"device": 0, "stream": null}', '{"device": 0}']}})
    out = tmp_path / "null.json"
    chrome_round_trip(src, out, tmp_path / "back.duckdb")
    track = {e["name"]: (e["pid"], e["tid"]) for e in load_trace(out)["traceEvents"]
             if e.get("cat") == "gpu_user_annotation"}
    assert track["null"] == track["none"] and track["null"][1] is not None


def test_every_row_of_a_graph_launch_has_an_arrow_from_the_launch(tmp_path):
    """A CUDA graph launch (one call, its correlation id on several kernels, a copy and a
    memset): an arrow from the launch to each of them, each a flow of its own (one flow ends
    at its first "f"), the first kernel's under the correlation id; the trace imports back
    with every row linked to the launch and the same per-kernel totals."""
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "g.duckdb"
    with Writer(src, RunInfo(source="synthetic"), pid=9) as w:
        w.append({
            "api_calls": {"thread_id": [5, 5], "api_kind": ["runtime"] * 2,
                          "name": ["cudaGraphLaunch", "cudaLaunchKernel"],
                          "correlation_id": [2, 3], "start_ns": [t, t + 100],
                          "end_ns": [t + 50, t + 150]},
            "kernels": {"device_id": i32([0, 0, 1, 0]), "stream_id": i32([7, 7, 3, 7]),
                        "name": ["a", "b", "a", "k"], "correlation_id": [2, 2, 2, 3],
                        "start_ns": [t + 1_000, t + 2_000, t + 1_500, t + 5_000],
                        "end_ns": [t + 1_100, t + 2_300, t + 1_600, t + 5_100]},
            "memcpys": {"device_id": i32([0]), "stream_id": i32([8]), "bytes": [64],
                        "correlation_id": [2], "start_ns": [t + 3_000], "end_ns": [t + 3_100]},
            "memsets": {"device_id": i32([0]), "stream_id": i32([7]), "bytes": [64],
                        "correlation_id": [2], "start_ns": [t + 900], "end_ns": [t + 950]}})
    out, back = tmp_path / "g.json", tmp_path / "back.duckdb"
    with cuptiprof.open(src) as prof:
        counts = export_chrome(prof, out)
    import_traces([out], back)
    ev = load_trace(out)["traceEvents"]
    assert counts["events"] == len(ev)
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    ends = {(e["pid"], e["tid"], e["ts"]): e["id"] for e in ev if e["ph"] == "f"}
    assert len(ends) == sum(1 for e in ev if e["ph"] == "f") == len(gpu) == 6
    assert all((e["pid"], e["tid"], e["ts"]) in ends for e in gpu)
    starts = Counter(e["id"] for e in ev if e["ph"] == "s")
    assert set(starts.values()) == {1} and set(starts) == set(ends.values())
    calls = {e["ts"]: e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"}
    by_id = {e["id"]: calls[e["ts"]] for e in ev if e["ph"] == "s"}
    assert sorted(by_id[ends[(e["pid"], e["tid"], e["ts"])]] for e in gpu) == [2] * 5 + [3]
    first = next(e for e in gpu if e["name"] == "a" and e["args"]["device"] == 0)
    assert ends[(first["pid"], first["tid"], first["ts"])] == 2
    assert per_kernel(back) == per_kernel(src)
    with duckdb.connect(str(back), read_only=True) as con:
        linked = con.execute(
            "SELECT g.kind, g.name, c.name FROM gpu_activities g LEFT JOIN api_calls c "
            "USING (correlation_id) ORDER BY ALL").fetchall()
    assert sorted(c for _, _, c in linked) == ["cudaGraphLaunch"] * 5 + ["cudaLaunchKernel"]
    assert [n for _, n, c in linked if c == "cudaLaunchKernel"] == ["k"]


def test_an_export_of_some_steps_names_only_the_processes_and_tracks_it_holds(tmp_path):
    """Process and track names of an export of some steps are those of what it holds: not a
    process, device or stream whose rows are all in other steps. The trace pids stay those of
    an export of every row (the file's processes, in order)."""
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "s.duckdb"
    for i, pid in enumerate((11, 22)):
        with Writer(src, RunInfo(source="synthetic"), mode="append" if i else "create",
                    pid=pid) as w:
            steps = [2, 2, 2] if i else [1, 2, 2]
            w.append({"api_calls": {"thread_id": [5, 5, 6], "api_kind": ["runtime"] * 3,
                                    "name": ["cudaLaunchKernel"] * 3, "correlation_id": [1, 2, 3],
                                    "step": i32(steps), "start_ns": [t, t + 100, t + 200],
                                    "end_ns": [t + 50, t + 150, t + 250]},
                      "kernels": {"device_id": i32([0, 1, 0]), "stream_id": i32([7, 9, 8]),
                                  "name": ["a", "b", "c"], "correlation_id": [1, 2, 3],
                                  "step": i32(steps), "start_ns": [t + 1_000, t + 2_000, t + 3_000],
                                  "end_ns": [t + 1_100, t + 2_100, t + 3_100]}})
    every, some = tmp_path / "all.json", tmp_path / "some.json"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, every)
    with cuptiprof.open(src, "1") as prof:
        export_chrome(prof, some)
    ev = load_trace(some)["traceEvents"]
    held = [e for e in ev if e["ph"] != "M"]
    named = {e["pid"] for e in ev if e["name"] == "process_name"}
    assert named == {e["pid"] for e in held}
    tracks = {(e["pid"], e["tid"]) for e in ev if e["name"] == "thread_name"}
    assert tracks == {(e["pid"], e["tid"]) for e in held if e.get("cat") == "kernel"}
    assert len(tracks) == 1
    names = lambda evs: {e["pid"]: e["args"]["name"] for e in evs  # noqa: E731
                         if e["name"] == "process_name"}
    full, scoped = names(load_trace(every)["traceEvents"]), names(ev)
    assert scoped == {p: full[p] for p in named} and set(scoped.values()) == {"pid 11"}


def test_each_process_of_a_merged_export_names_the_devices_it_has_rows_on(tmp_path):
    """Two processes of one run, only the first of which recorded the run's GPUs: an export of
    both gives each process the specs of every device it has rows on (its own record, else
    its run's), so that each imports back with named devices, as an export of it alone does."""
    t = 1_700_000_000_000_000_000
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    src = tmp_path / "d.duckdb"
    for i, pid in enumerate((40, 50)):
        with Writer(src, RunInfo(source="synthetic", label="r"), mode="append" if i else "create",
                    pid=pid) as w:
            batch = {"kernels": {"device_id": i32([0, 1] if i else [0]),
                                 "stream_id": i32([7, 7] if i else [7]), "name": ["k"] * (i + 1),
                                 "start_ns": [t, t + 10][:i + 1], "end_ns": [t + 5, t + 15][:i + 1]}}
            if not i:
                batch["devices"] = {"device_id": i32([0, 1]), "kind": ["gpu"] * 2,
                                    "name": ["H200 a", "H200 b"], "sm_count": i32([132, 132])}
            w.append(batch)
    out, back = tmp_path / "d.json", tmp_path / "back.duckdb"
    chrome_round_trip(src, out, back)
    procs = {p["originalPid"]: [d["name"] for d in p["devices"]]
             for p in load_trace(out)["cuptiprofProcesses"]}
    assert procs == {40: ["H200 a", "H200 b"], 50: ["H200 a", "H200 b"]}
    with duckdb.connect(str(back), read_only=True) as con:
        assert con.execute("SELECT pid, device_id, name, sm_count FROM devices ORDER BY ALL"
                           ).fetchall() == [(40, 0, "H200 a", 132), (50, 0, "H200 a", 132),
                                            (50, 1, "H200 b", 132)]


HIVE_TYPES = "hive_types = {'host': 'VARCHAR', 'pid': 'INTEGER'}"   # as the README reads a dataset


def _read_dataset(out: Path, table: str, what: str = "*", group: str = ""):
    return duckdb.sql(f"SELECT {what} FROM read_parquet('{out}/{table}/**/*.parquet', "
                      f"hive_partitioning = true, {HIVE_TYPES}) {group} ORDER BY ALL").fetchall()


@pytest.mark.parametrize("host", ["a/b c=d", "", "héllo✓", "50%25x", "..", "new\nline"])
def test_parquet_host_names_are_partition_values_read_back_as_written(tmp_path, host):
    """A host name with a slash, a space, '=', '%', unicode, a newline, '..' or nothing at all
    names one partition (escaped in its directory name) and reads back as itself, in DuckDB and
    in pyarrow, beside the rows of a plain host."""
    import pyarrow.dataset as ds
    src = tmp_path / "h.duckdb"
    for i, (pid, h) in enumerate(((41, "plain"), (42, host))):
        with Writer(src, RunInfo(source="synthetic"), mode="append" if i else "create", pid=pid) as w:
            w.append({"kernels": {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32()),
                                  "name": [f"k{i}"], "start_ns": [T0 + i], "end_ns": [T0 + 10 + i]},
                      "processes": {"host": [h]}})
    out = tmp_path / "pq"
    with cuptiprof.open(src) as prof:
        export_parquet(prof, out)
    assert len(list((out / "kernels").iterdir())) == 2   # one directory per host, none nested
    want = sorted([("plain", 41, "k0"), (host, 42, "k1")])
    assert _read_dataset(out, "kernels", "host, pid, name") == want
    part = ds.partitioning(pa.schema([("host", pa.string()), ("pid", pa.int32())]), flavor="hive")
    got = ds.dataset(out / "kernels", format="parquet", partitioning=part).to_table(
        columns=["host", "pid", "name"]).to_pylist()
    assert sorted(tuple(r.values()) for r in got) == want


def test_parquet_counts_are_the_rows_each_dataset_reads_back(tmp_path_factory, tmp_path):
    """export_parquet's counts (the CLI's line) are the rows a reader finds in each dataset,
    and, per host, pid and kernel, the rows and GPU time are those of the file."""
    from cuptiprof.interop.parquet import PARTITIONED
    two = imported(tmp_path_factory, *FILT)
    out = tmp_path / "pq"
    with cuptiprof.open(two) as prof:
        counts = export_parquet(prof, out)
    assert counts["logs"] == 0 and counts["kernels"] > 1000
    for t in PARTITIONED:
        assert counts[t] == _read_dataset(out, t, "count(*)")[0][0], t
    assert counts["runs"] == len(duckdb.sql(f"SELECT * FROM '{out}/runs/data_0.parquet'").fetchall()) == 1
    with duckdb.connect(str(two), read_only=True) as con:
        want = con.execute("SELECT p.host, k.pid, k.name, count(*), sum(k.end_ns - k.start_ns) FROM kernels k "
                           "LEFT JOIN processes p USING (run_id, pid) GROUP BY ALL ORDER BY ALL").fetchall()
    assert _read_dataset(out, "kernels", "host, pid, name, count(*), sum(end_ns - start_ns)",
                         "GROUP BY ALL") == want


def test_parquet_table_without_rows_is_one_file_in_the_null_partition(tmp_path):
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    with cuptiprof.open(src, "3") as prof:
        export_parquet(prof, tmp_path / "pq")
    files = [p.relative_to(tmp_path / "pq" / "memcpys").as_posix()
             for p in (tmp_path / "pq" / "memcpys").rglob("*.parquet")]
    assert files == ["host=__HIVE_DEFAULT_PARTITION__/pid=__HIVE_DEFAULT_PARTITION__/data_0.parquet"]


@pytest.mark.parametrize("n, more", [(3, False), (4, True)])
def test_parquet_force_names_up_to_three_foreign_entries(tmp_path, n, more):
    """--force on a directory holding other things names the first three, and says when
    there are more."""
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    out = tmp_path / "pq"
    out.mkdir()
    for i in range(n):
        (out / f"mine{i}").write_text("x")
    r = run_cli("export", src, "--parquet", out, "--force")
    assert r.returncode == 2 and "holds mine0, mine1, mine2" in r.stderr, r.stderr
    assert ("mine3" in r.stderr) is False and ("mine2 ..." in r.stderr) is more, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_parquet_export_clears_a_leftover_temporary_of_its_own(tmp_path):
    """A temporary directory left by an earlier export that had this pid (killed before it
    cleaned up) does not stop the export, nor end up in it."""
    import os
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    out = tmp_path / "pq"
    left = tmp_path / f".pq.tmp-{os.getpid()}"
    (left / "kernels").mkdir(parents=True)
    (left / "stale.parquet").write_text("old")
    with cuptiprof.open(src) as prof:
        export_parquet(prof, out)
    assert not left.exists() and not (out / "stale.parquet").exists()
    assert _read_dataset(out, "kernels", "name") == [("decode",), ("gemm",)]


@pytest.mark.parametrize("target", ["earlier", "empty", "missing"])
def test_parquet_export_replaces_a_symlink_at_its_path(tmp_path, target):
    """DIR a symbolic link (to an earlier export, to an empty directory, to nothing): the
    export replaces the link with its directory, as every output does, and leaves what the
    link pointed at as it was."""
    src = _with_rows_outside_steps(tmp_path / "o.duckdb")
    victim = tmp_path / "victim"
    if target == "earlier":
        assert run_cli("export", src, "--parquet", victim).returncode == 0
    elif target == "empty":
        victim.mkdir()
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    link = tmp_path / "pq"
    link.symlink_to(victim)
    r = run_cli("export", src, "--parquet", link, "--force")
    assert r.returncode == 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not link.is_symlink() and _read_dataset(link, "kernels", "name") == [("decode",), ("gemm",)]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                  if p.relative_to(tmp_path).parts[0] != "pq") == before


def test_readme_pyarrow_read_of_an_imported_traces_parquet_export(tmp_path, monkeypatch):
    """An imported trace has no host: pyarrow, left to infer the partition types, cannot read
    its datasets; the README's read, with the types given, does, with every row."""
    import pyarrow.dataset as ds
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = re.search(r"With pyarrow.*?```python\n(.*?)```", readme, re.S).group(1)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10 + i, "dur": 0.5,
         "args": {"device": 0, "stream": 7}} for i in range(3)]}))
    import_traces([trace], tmp_path / "t.duckdb")
    with cuptiprof.open(tmp_path / "t.duckdb") as prof:
        export_parquet(prof, tmp_path / "run_parquet")
    with pytest.raises(pa.ArrowInvalid):   # what the README's types are for
        ds.dataset(tmp_path / "run_parquet/kernels", partitioning="hive").to_table()
    space: dict = {}
    monkeypatch.chdir(tmp_path)   # the README reads run_parquet/ where it stands
    exec(code, space)
    t = space["kernels"].to_table()
    assert t.num_rows == 3 and t.column("host").null_count == 3
    assert t.schema.field("pid").type == pa.int32()


def test_a_gpu_annotation_keeps_its_step_through_a_round_trip(tmp_path):
    """A GPU-side annotation takes the step of the host annotation it mirrors, whose GPU work
    often runs in the next step: the export says that step, and the import reads it back, not
    the step open (or none) at the annotation's time on the GPU."""
    def x(cat, name, ts, dur, pid=1, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                "args": args}
    ev = [x("user_annotation", "ProfilerStep#1", 0, 100, **{"External id": 1}),
          x("user_annotation", "ProfilerStep#2", 100, 100, **{"External id": 2}),
          x("user_annotation", "fwd", 10, 10, **{"External id": 5}),
          x("user_annotation", "opt", 110, 10, **{"External id": 6}),
          # each runs on the GPU after its step ended: in the next step, then in none
          x("gpu_user_annotation", "fwd", 150, 10, pid=0, tid=7, **{"External id": 5}),
          x("gpu_user_annotation", "opt", 250, 10, pid=0, tid=7, **{"External id": 6}),
          x("kernel", "k", 150, 10, pid=0, tid=7, device=0, stream=7, correlation=9,
            **{"External id": 5}),
          x("cuda_runtime", "cudaLaunchKernel", 12, 2, correlation=9, **{"External id": 5})]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": ev}))
    first, out, back = tmp_path / "first.duckdb", tmp_path / "t.json.gz", tmp_path / "back.duckdb"
    import_traces([src], first)
    chrome_round_trip(first, out, back)
    sql = ("SELECT name, step FROM ranges WHERE domain = 'gpu_user_annotation' ORDER BY start_ns")
    for path in (first, back):
        con = duckdb.connect(str(path), read_only=True)
        assert con.execute(sql).fetchall() == [("fwd", 1), ("opt", 2)], path.name
        con.close()


@pytest.mark.parametrize("kind", ["chrome", "parquet"])
def test_an_export_keeps_an_output_another_command_made_meanwhile(tmp_path, monkeypatch, kind):
    """Two exports to one new path at once: each found it free, and the later one replaced the
    earlier one's trace (--chrome) or removed its whole folder (--parquet) without --force.
    Now it is kept, the later export refused in one line, and no temporary is left."""
    import cuptiprof.interop.chrome.export as chrome_mod
    import cuptiprof.interop.parquet as parquet_mod

    src = write_synthetic(tmp_path / "s.duckdb", steps=2, kernels_per_step=20)
    out = tmp_path / ("t.json" if kind == "chrome" else "pq")
    mod, name = (chrome_mod, "_metadata") if kind == "chrome" else (parquet_mod, "first_row")
    real, made = getattr(mod, name), []

    def meanwhile(*a, **kw):   # the other export ends while this one runs
        if not made:
            made.append(out)
            if kind == "chrome":
                out.write_text("the other export")
            else:
                (out / "kernels").mkdir(parents=True)
                (out / "kernels" / "theirs.parquet").write_text("the other export")
        return real(*a, **kw)
    monkeypatch.setattr(mod, name, meanwhile)
    with cuptiprof.open(src) as prof:
        with pytest.raises(cuptiprof.errors.InputError,
                           match=r"already exists \(written by another command since this one "
                                 r"began\); choose another path or pass --force"):
            (export_chrome if kind == "chrome" else export_parquet)(prof, out)
    kept = out if kind == "chrome" else out / "kernels" / "theirs.parquet"
    assert kept.read_text() == "the other export"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["s.duckdb", out.name])


def test_a_failed_parquet_export_leaves_no_chrome_trace_behind(tmp_path, capsys, monkeypatch):
    """`export --chrome t.json --parquet pq` whose Parquet write failed (a full disk) said so
    and exited non-zero, but left t.json written: an output of a failed command. The trace
    is published only once the datasets are written."""
    import errno

    import cuptiprof.interop.parquet as parquet
    from cuptiprof.cli import main
    src = write_synthetic(tmp_path / "s.duckdb", steps=2, kernels_per_step=5)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(parquet, "export_parquet", full)
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(src), "--chrome", "t.json", "--parquet", "pq"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "pq: cannot write: the disk is full" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]


def test_steps_numbered_below_0_survive_an_export_and_import(tmp_path):
    """A program may number its warm-up steps -2, -1; cuptiprof stores them as given. The
    export wrote ProfilerStep#-2, which the importer read as no step: the round trip lost
    those steps, and their rows came back in none. They come back as written."""
    src = write_synthetic(tmp_path / "s.duckdb", steps=5, kernels_per_step=20)
    con = duckdb.connect(str(src))
    for (t,) in con.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'step' AND "
            "table_name IN (SELECT table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE')").fetchall():
        con.execute(f"UPDATE {t} SET step = step - 3")
    con.close()
    trace, back = tmp_path / "t.json", tmp_path / "back.duckdb"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, trace)
    import_traces([trace], back)
    queries = ["SELECT kind, step, count(*) FROM ranges WHERE kind IN ('step', 'warmup') "
               "GROUP BY ALL ORDER BY ALL"] + [
        f"SELECT step, count(*) FROM {t} GROUP BY ALL ORDER BY ALL"
        for t in ("kernels", "memcpys", "memsets", "api_calls", "logs", "memory_events")]
    got = []
    for path in (src, back):
        con = duckdb.connect(str(path), read_only=True)
        got.append([con.execute(q).fetchall() for q in queries])
        con.close()
    assert ("step", -2, 1) in got[0][0] and ("warmup", -3, 1) in got[0][0], got[0][0]
    assert got[1] == got[0]


def test_a_trace_that_cannot_take_its_name_leaves_no_parquet_datasets(tmp_path, capsys,
                                                                     monkeypatch):
    """`export --chrome t.json --parquet pq` whose trace could not take its name once the
    datasets were written (another command made t.json meanwhile) failed, but left pq."""
    import cuptiprof.interop.chrome.export as chrome_export
    from cuptiprof.cli import main
    from cuptiprof.errors import InputError
    src = write_synthetic(tmp_path / "s.duckdb", steps=2, kernels_per_step=5)

    def taken(tmp, out, **k):
        raise InputError(f"{out}: already exists (written by another command since this one "
                         "began)")
    monkeypatch.setattr(chrome_export, "publish", taken)
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(src), "--chrome", "t.json", "--parquet", "pq"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "t.json: already exists" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]
