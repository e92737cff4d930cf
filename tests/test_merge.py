"""merge_files and `cuptiprof merge`: runs kept apart, string ids remapped, one-run merges of
part files, refusal of newer schemas, atomic output."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import duckdb
import pytest

from _run_helpers import cli, one_line_error, q, syncs_and_renames
from cuptiprof.errors import InputError, SchemaVersionError
from cuptiprof.store.merge import merge_files
from cuptiprof.store.writer import RunInfo, Writer


def _file(path, names, pid, label):
    with Writer(path, RunInfo(source="synthetic", label=label), pid=pid) as w:
        n = len(names)
        w.append({"kernels": {"start_ns": list(range(n)), "end_ns": [i + 10 for i in range(n)],
                              "name": names, "step": [0] * n},
                  "processes": {"pid": [pid], "host": [label]}})
    return path


def test_merge_syncs_its_output_once_before_the_rename(tmp_path, monkeypatch):
    """The merged file is written without DuckDB's syncs and synced once, whole, before the
    rename gives it its name."""
    a = _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    b = _file(tmp_path / "b.duckdb", ["relu"], 22, "hostB")
    events = syncs_and_renames(monkeypatch)
    out = merge_files([a, b], tmp_path / "all.duckdb")
    assert [e[0] for e in events] == ["fsync", "replace"] and events[0][1] == events[1][1]
    assert q(out, "SELECT count(*) FROM runs") == [(2,)]


def test_merge_keeps_runs_and_remaps_strings(tmp_path):
    a = _file(tmp_path / "a.duckdb", ["gemm", "relu"], 11, "hostA")
    b = _file(tmp_path / "b.duckdb", ["relu", "softmax", "relu"], 22, "hostB")
    out = merge_files([a, b], tmp_path / "all.duckdb")
    assert q(out, "SELECT run_id, label FROM runs ORDER BY run_id") == [(1, "hostA"), (2, "hostB")]
    assert q(out, "SELECT run_id, pid, name, count(*) FROM kernels GROUP BY ALL ORDER BY ALL") == [
        (1, 11, "gemm", 1), (1, 11, "relu", 1), (2, 22, "relu", 2), (2, 22, "softmax", 1)]
    assert q(out, "SELECT count(*), count(DISTINCT value) FROM strings") == [(3, 3)]
    assert q(out, "SELECT count(*) FROM kernels WHERE name IS NULL") == [(0,)]
    # merging a merged file again renumbers its runs after the others
    c = _file(tmp_path / "c.duckdb", ["gemm"], 33, "hostC")
    out2 = merge_files([out, c], tmp_path / "again.duckdb")
    assert q(out2, "SELECT run_id, label FROM runs ORDER BY run_id") == [
        (1, "hostA"), (2, "hostB"), (3, "hostC")]


@pytest.mark.parametrize("case", ["merged_with_its_input", "a_copy", "one_trace_imported_twice"])
def test_a_run_already_merged_is_refused(tmp_path, case):
    """The same run from two inputs would count twice (a comparison reads the job as twice as
    slow): the merge stops with one line naming both inputs, and writes nothing."""
    a = _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    b = _file(tmp_path / "b.duckdb", ["relu"], 22, "hostB")
    if case == "merged_with_its_input":
        merge_files([a, b], tmp_path / "ab.duckdb")
        args = ["ab.duckdb", "b.duckdb"]
    elif case == "a_copy":
        shutil.copy(a, tmp_path / "copy.duckdb")
        args = ["a.duckdb", "b.duckdb", "copy.duckdb"]
    else:
        trace = tmp_path / "t.json"
        trace.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, '
                         '"tid": 7, "ts": 10, "dur": 5, "args": {"device": 0, "stream": 7}}]}')
        for out in ("t1.duckdb", "t2.duckdb"):
            assert cli(["import", "t.json", "-o", out], tmp_path).returncode == 0
        args = ["t1.duckdb", "t2.duckdb"]
    r = cli(["merge", *args, "-o", "all.duckdb"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert "count twice" in r.stderr and args[0] in r.stderr and args[-1] in r.stderr
    assert not (tmp_path / "all.duckdb").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_one_run_marks_killed_part(tmp_path):
    a = _file(tmp_path / "h-1.duckdb", ["k"], 1, "h")
    code = (f"import os\nfrom cuptiprof.store.writer import Writer, RunInfo\n"
            f"w = Writer({str(tmp_path / 'h-2.duckdb')!r}, RunInfo(), pid=2)\n"
            "w.append({'kernels': {'start_ns': [5], 'end_ns': [6], 'name': ['late']}, "
            "'processes': {'pid': [2]}})\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env=dict(os.environ, PYTHONPATH=str(__import__("_run_helpers").ROOT)))
    out = merge_files([a, tmp_path / "h-2.duckdb"], tmp_path / "one.duckdb", one_run=True,
                      run_info=RunInfo(label="job", source="cpu"))
    assert q(out, "SELECT run_id, label, status FROM runs") == [(1, "job", "complete")]
    assert q(out, "SELECT pid, name FROM kernels ORDER BY pid") == [(1, "k"), (2, "late")]
    assert q(out, "SELECT pid, ended_early FROM processes ORDER BY pid") == [(1, None), (2, True)]
    assert q(out, "SELECT pid FROM data_quality WHERE check_name='process_ended_early'") == [(2,)]


def test_newer_schema_is_refused(tmp_path):
    a = _file(tmp_path / "a.duckdb", ["k"], 1, "a")
    new = tmp_path / "new.duckdb"
    shutil.copy(a, new)
    con = duckdb.connect(str(new))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(SchemaVersionError, match="newer cuptiprof"):
        merge_files([a, new], tmp_path / "m.duckdb")
    assert not (tmp_path / "m.duckdb").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".m.duckdb")]   # no temp left


def test_runs_alike_but_of_other_processes_merge(tmp_path):
    """Two ranks imported alike (one command, one host, the same first and last timestamps)
    are two runs: their processes tell them apart."""
    a = _file(tmp_path / "a.duckdb", ["gemm"], 11, "rank0")
    b = _file(tmp_path / "b.duckdb", ["gemm"], 22, "rank1")
    (cmd, host, start, end), = q(a, "SELECT command, host, start_ns, end_ns FROM runs")
    con = duckdb.connect(str(b))
    con.execute("UPDATE runs SET command = ?, host = ?, start_ns = ?, end_ns = ?",
                [cmd, host, start, end])
    con.close()
    out = merge_files([a, b], tmp_path / "all.duckdb")
    assert q(out, "SELECT run_id, label FROM runs ORDER BY run_id") == [(1, "rank0"), (2, "rank1")]


def test_merge_cli(tmp_path):
    _file(tmp_path / "a.duckdb", ["x"], 1, "a")
    _file(tmp_path / "b.duckdb", ["y"], 2, "b")
    r = cli(["merge", "a.duckdb", "b.duckdb", "-o", "all.duckdb"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "2 runs" in r.stderr
    assert q(tmp_path / "all.duckdb", "SELECT count(*) FROM runs") == [(2,)]


@pytest.mark.parametrize("case", ["exists", "missing", "not_duckdb", "same_twice",
                                  "same_spelled_otherwise", "same_through_symlink"])
def test_merge_cli_bad_input(tmp_path, case):
    _file(tmp_path / "a.duckdb", ["x"], 1, "a")
    (tmp_path / "text.duckdb").write_text("not a database at all, just text" * 10)
    os.symlink(tmp_path / "a.duckdb", tmp_path / "link.duckdb")
    args = {"exists": ["a.duckdb", "-o", "a2.duckdb"], "missing": ["a.duckdb", "nope.duckdb", "-o", "o.duckdb"],
            "not_duckdb": ["a.duckdb", "text.duckdb", "-o", "o.duckdb"],
            "same_twice": ["a.duckdb", "a.duckdb", "-o", "o.duckdb"],
            "same_spelled_otherwise": ["a.duckdb", "./a.duckdb", "-o", "o.duckdb"],
            "same_through_symlink": ["a.duckdb", "link.duckdb", "-o", "o.duckdb"]}[case]
    if case == "exists":
        (tmp_path / "a2.duckdb").write_text("keep me")
    r = cli(["merge", *args], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert not (tmp_path / "o.duckdb").exists()
    if case == "exists":
        assert (tmp_path / "a2.duckdb").read_text() == "keep me"
    if case.startswith("same"):
        assert "given twice" in r.stderr and args[1] in r.stderr


def test_merge_into_one_of_its_inputs_is_refused(tmp_path):
    a = _file(tmp_path / "a.duckdb", ["x"], 1, "a")
    with pytest.raises(InputError):
        merge_files([a], a, overwrite=True)
