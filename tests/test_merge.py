"""merge_files and `cuptiprof merge`: runs kept apart, string ids remapped, one-run merges of
part files, refusal of newer schemas, atomic output."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import duckdb
import pyarrow as pa
import pytest

from _run_helpers import cli, left_parts, one_line_error, q, syncs_and_renames, tree
from cuptiprof.errors import InputError, SchemaVersionError
from cuptiprof.store.merge import merge_files
from cuptiprof.store.writer import RunInfo, Writer
from cuptiprof.synthetic import synthetic_batches


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


@pytest.mark.parametrize("force", [False, True])
def test_a_merge_never_replaces_an_output_another_command_made_meanwhile(tmp_path, monkeypatch,
                                                                          force):
    """Two merges (or an import and a merge) of one new output at once: each found the path
    free, and the later rename replaced the earlier one's file without --force, both saying
    they wrote it. Now the later one says the file is there, keeps it, and leaves no temporary;
    --force still replaces it."""
    import cuptiprof.store.merge as m

    a = _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    b = _file(tmp_path / "b.duckdb", ["relu"], 22, "hostB")
    out = tmp_path / "all.duckdb"
    real = m.sync_file

    def another_command_writes_it(path):   # as this merge ends, the other one has written out
        real(path)
        shutil.copy(a, out)
    monkeypatch.setattr(m, "sync_file", another_command_writes_it)
    if force:
        merge_files([a, b], out, overwrite=True)
        assert q(out, "SELECT count(*) FROM runs") == [(2,)]
    else:
        with pytest.raises(InputError, match=r"all\.duckdb: already exists \(written by another "
                                             r"command since this one began\); choose another"):
            merge_files([a, b], out)
        assert out.read_bytes() == a.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.duckdb", "all.duckdb", "b.duckdb"]


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


def test_runs_kept_apart_note_an_unreadable_input_as_one_run_does(tmp_path):
    """skip_unreadable left an unreadable input out without a word when runs are kept apart
    (one_run=True noted it): the merged file read as the whole of its inputs. Its note now
    goes with every run, as the one run of a one_run merge carries its own."""
    a = _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    bad = tmp_path / "bad.duckdb"
    bad.write_text("not a database" * 100)
    b = _file(tmp_path / "b.duckdb", ["relu"], 22, "hostB")
    out = merge_files([a, bad, b], tmp_path / "all.duckdb", skip_unreadable=True)
    assert q(out, "SELECT run_id, label FROM runs ORDER BY run_id") == [(1, "hostA"), (2, "hostB")]
    rows = q(out, "SELECT run_id, pid, check_name, subject, detail FROM data_quality ORDER BY ALL")
    assert [r[:4] for r in rows] == [(1, None, "unreadable_part", "bad.duckdb"),
                                     (2, None, "unreadable_part", "bad.duckdb")]
    assert rows[0][4].startswith("input file bad.duckdb could not be read and was left out: ")
    # none readable: no run to carry the note, which still says what was left out
    out = merge_files([bad], tmp_path / "none.duckdb", skip_unreadable=True)
    assert q(out, "SELECT run_id, check_name, subject FROM data_quality") == [
        (None, "unreadable_part", "bad.duckdb")]


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


@pytest.mark.parametrize("differs", ["pid", "host", "command", "start_ns", "end_ns"])
def test_runs_alike_but_in_one_thing_merge(tmp_path, differs):
    """Two runs alike in all but one of source, host, command, start, end and pids are two
    runs, not one input's copy of the other: two ranks imported alike (one command, one host,
    the same first and last timestamps) differ in their pids; one command run twice on one
    host with the same pids (a container's pid 1), in its start or its end."""
    a = _file(tmp_path / "a.duckdb", ["gemm"], 11, "rank0")
    b = _file(tmp_path / "b.duckdb", ["gemm"], 22 if differs == "pid" else 11, "rank1")
    row = dict(zip(("command", "host", "start_ns", "end_ns"),
                   q(a, "SELECT command, host, start_ns, end_ns FROM runs")[0]))
    if differs != "pid":
        row[differs] += 1 if differs.endswith("_ns") else "x"
    con = duckdb.connect(str(b))
    con.execute("UPDATE runs SET command = ?, host = ?, start_ns = ?, end_ns = ?", list(row.values()))
    con.close()
    out = merge_files([a, b], tmp_path / "all.duckdb")
    assert q(out, "SELECT run_id, label FROM runs ORDER BY run_id") == [(1, "rank0"), (2, "rank1")]


def test_merge_cli(tmp_path):
    """Its message counts the files given, the runs merged (an input that is itself a merge
    brings several) and the rows of every input (4 kernels and 3 processes here)."""
    merge_files([_file(tmp_path / "a.duckdb", ["x"], 1, "a"),
                 _file(tmp_path / "b.duckdb", ["y", "z"], 2, "b")], tmp_path / "ab.duckdb")
    _file(tmp_path / "c.duckdb", ["w"], 3, "c")
    r = cli(["merge", "ab.duckdb", "c.duckdb", "-o", "all.duckdb"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "merged 2 files (3 runs, 7 rows) into all.duckdb" in r.stderr
    assert q(tmp_path / "all.duckdb", "SELECT count(*) FROM runs") == [(3,)]
    # one file of one run (a run's file rewritten): counted as one, and rows as import counts them
    _file(tmp_path / "big.duckdb", [f"k{i}" for i in range(1200)], 4, "big")
    r = cli(["merge", "big.duckdb", "-o", "one.duckdb"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "merged 1 file (1 run, 1,201 rows) into one.duckdb" in r.stderr


def test_merge_cli_names_its_output_as_one_shell_word(tmp_path):
    """The line names the output as import's and export's do: a name with a space, a quote or
    a line break (which split the line in two) as one word a shell reads back."""
    _file(tmp_path / "a.duckdb", ["x"], 1, "a")
    for name, shown in (("my run.duckdb", "'my run.duckdb'"),
                        ("two\nlines.duckdb", "$'two\\x0alines.duckdb'")):
        r = cli(["merge", "a.duckdb", "-o", name], tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines() == [f"cuptiprof: merged 1 file (1 run, 2 rows) into {shown}"]
        assert (tmp_path / name).is_file()


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


def test_the_folder_of_a_runs_parts_given_for_a_file_says_how_to_merge_it(tmp_path):
    """`merge r.duckdb.parts -o r.duckdb` (or report of it): the line said only "is a
    directory"; it gives the merge of its part files, which works."""
    left_parts(tmp_path / "r.duckdb.parts")
    for args in (["merge", "r.duckdb.parts", "-o", "r.duckdb"], ["report", "r.duckdb.parts"]):
        r = cli(args, tmp_path)
        assert r.returncode == 2, r.stderr
        one_line_error(r.stderr)
        assert r.stderr == ("cuptiprof: error: r.duckdb.parts: the folder of a cuptiprof run's "
                            "part files, not a file; merge them into one: cuptiprof merge "
                            "r.duckdb.parts/*.duckdb -o r.duckdb\n")
    assert not (tmp_path / "r.duckdb").exists()
    r = cli(["merge", "r.duckdb.parts/h-11.duckdb", "-o", "r.duckdb"], tmp_path)
    assert r.returncode == 0 and (tmp_path / "r.duckdb").is_file(), r.stderr


def test_the_parts_of_two_runs_merged_together_name_the_first_given(tmp_path):
    """The part files of two runs in one merge: the line names one run's folder, the first
    given; it named whichever the set of folders held first, one run or the other from one
    call to the next (Python's hash of a path is salted per process)."""
    for name in ("a.duckdb.parts", "b.duckdb.parts"):
        left_parts(tmp_path / name)
    said = set()
    for seed in range(6):
        r = cli(["merge", "b.duckdb.parts/h-11.duckdb", "a.duckdb.parts/h-11.duckdb", "-o",
                 "m.duckdb"], tmp_path, PYTHONHASHSEED=str(seed))
        assert r.returncode == 2, r.stderr
        one_line_error(r.stderr)
        said.add(r.stderr)
    assert said == {f"cuptiprof: error: {tmp_path / 'b.duckdb.parts'}: the part files of one "
                    "cuptiprof run are merged alone, as that run (cuptiprof merge "
                    f"{tmp_path / 'b.duckdb.parts'}/*.duckdb -o OUT.duckdb); then merge "
                    "OUT.duckdb with the other files\n"}


def test_the_commands_a_line_gives_work_pasted_for_paths_with_spaces(tmp_path):
    """`my run.duckdb` left as parts: the merge the line gave ran as several words."""
    left_parts(tmp_path / "my run.duckdb.parts")
    r = cli(["report", "my run.duckdb"], tmp_path)
    one_line_error(r.stderr)
    merge = r.stderr.rstrip().rsplit(": ", 1)[1]
    assert merge == "cuptiprof merge 'my run.duckdb.parts'/*.duckdb -o 'my run.duckdb'", r.stderr
    pasted = subprocess.run(merge.replace("cuptiprof", f"{sys.executable} -m cuptiprof", 1),
                            shell=True, cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert pasted.returncode == 0 and (tmp_path / "my run.duckdb").is_file(), pasted.stderr
    # a trace given for a cuptiprof file: the import the line gives
    (tmp_path / "a trace.json").write_text('{"traceEvents": []}')
    r = cli(["report", "a trace.json"], tmp_path)
    assert "import it first: cuptiprof import 'a trace.json' -o OUT.duckdb" in r.stderr, r.stderr


def test_merge_through_main_refuses_one_path_string_given_twice(tmp_path, capsys):
    """main(["merge", str(a), str(a), ...]) hands over one string object twice (a Path keeps its
    str): the input was merged with itself, every row counted twice."""
    from cuptiprof.cli import main
    a = _file(tmp_path / "a.duckdb", ["x"], 1, "a")
    path = str(a)
    assert main(["merge", path, path, "-o", str(tmp_path / "o.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cuptiprof: error: {path}: the same input file is given twice")
    assert len(err.splitlines()) == 1 and not (tmp_path / "o.duckdb").exists()


def test_merge_refuses_a_file_and_a_hard_link_to_it(tmp_path, capsys):
    """A hard link is the same file under another name (no symlink to resolve): its rows would
    count twice."""
    from cuptiprof.cli import main
    a = _file(tmp_path / "a.duckdb", ["x"], 1, "a")
    os.link(a, tmp_path / "hard.duckdb")
    assert main(["merge", str(a), str(tmp_path / "hard.duckdb"), "-o", str(tmp_path / "o.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cuptiprof: error: {tmp_path / 'hard.duckdb'}: the same input file is given "
                          f"twice ({a})") and len(err.splitlines()) == 1
    assert not (tmp_path / "o.duckdb").exists()


def test_merge_into_one_of_its_inputs_is_refused(tmp_path):
    a = _file(tmp_path / "a.duckdb", ["x"], 1, "a")
    with pytest.raises(InputError):
        merge_files([a], a, overwrite=True)


def _program(path, pid, tag, t0):
    """One program image of process `pid`: a step range (id 1) holding a user range (id 2), each
    with its own kernel, a memcpy and an API call in the inner range, an op (id 3) that launched
    the inner kernel, the call the inner kernel (correlation id 2), an allocation of no call
    (correlation id 0); range and correlation ids from 1, as every program numbers them."""
    with Writer(path, RunInfo(source="synthetic"), pid=pid) as w:
        w.append({
            "ranges": {"range_id": [1, 2, 3], "parent_id": [None, 1, 2], "depth": [0, 1, 2],
                       "name": ["step", f"inner_{tag}", f"aten::{tag}"],
                       "kind": ["step", "user", "op"], "step": [0, 0, 0],
                       "thread_id": [7, 7, 7], "start_ns": [t0, t0 + 10, t0 + 20],
                       "end_ns": [t0 + 100, t0 + 90, t0 + 30]},
            "kernels": {"start_ns": [t0 + 5, t0 + 40], "end_ns": [t0 + 8, t0 + 50],
                        "name": [f"k_step_{tag}", f"k_inner_{tag}"], "step": [0, 0],
                        "range_id": [1, 2], "op_id": [0, 3], "correlation_id": [1, 2]},
            "memcpys": {"start_ns": [t0 + 60], "end_ns": [t0 + 70], "copy_kind": ["HtoD"],
                        "bytes": [64], "step": [0], "range_id": [2], "op_id": [3],
                        "correlation_id": [3]},
            "api_calls": {"start_ns": [t0 + 21], "end_ns": [t0 + 22], "name": ["cudaLaunchKernel"],
                          "step": [0], "range_id": [2], "correlation_id": [2]},
            "memory_events": {"time_ns": [t0 + 1], "operation": ["alloc"], "bytes": [64],
                              "correlation_id": [0]},
            "processes": {"pid": [pid]}})
    return path


def test_one_run_of_a_process_that_exec_d_keeps_each_programs_ranges_apart(tmp_path):
    """A process that exec'd wrote one part per program, each numbering its ranges from 1: in
    the run they are one process, so the later program's range ids go on after the earlier
    one's, and its kernels, copies and calls still name their own ranges and ops."""
    a = _program(tmp_path / "h-5.duckdb", 5, "a", 1_000)
    b = _program(tmp_path / "h-5.exec1.duckdb", 5, "b", 2_000)
    out = merge_files([a, b], tmp_path / "one.duckdb", one_run=True)
    assert q(out, "SELECT range_id, parent_id, name FROM ranges ORDER BY range_id") == [
        (1, None, "step"), (2, 1, "inner_a"), (3, 2, "aten::a"),
        (4, None, "step"), (5, 4, "inner_b"), (6, 5, "aten::b")]
    assert q(out, "SELECT k.name, r.name, o.name FROM kernels k "
                  "JOIN ranges r ON r.run_id = k.run_id AND r.pid = k.pid AND r.range_id = k.range_id "
                  "LEFT JOIN ranges o ON o.run_id = k.run_id AND o.pid = k.pid AND o.range_id = k.op_id "
                  "ORDER BY k.start_ns") == [
        ("k_step_a", "step", None), ("k_inner_a", "inner_a", "aten::a"),
        ("k_step_b", "step", None), ("k_inner_b", "inner_b", "aten::b")]
    for table in ("memcpys", "api_calls"):
        assert q(out, f"SELECT r.name FROM {table} x JOIN ranges r ON r.run_id = x.run_id "
                      "AND r.pid = x.pid AND r.range_id = x.range_id ORDER BY x.start_ns") == [
            ("inner_a",), ("inner_b",)], table
    assert q(out, "SELECT o.name FROM memcpys x JOIN ranges o ON o.run_id = x.run_id "
                  "AND o.pid = x.pid AND o.range_id = x.op_id ORDER BY x.start_ns") == [
        ("aten::a",), ("aten::b",)]
    # runs kept apart are not renumbered: each is its own (run, pid)
    out2 = merge_files([a, _program(tmp_path / "c.duckdb", 5, "c", 3_000)], tmp_path / "two.duckdb")
    assert q(out2, "SELECT run_id, range_id, name FROM ranges WHERE kind = 'user' ORDER BY ALL") == [
        (1, 2, "inner_a"), (2, 2, "inner_c")]


@pytest.mark.parametrize("first_wrote_its_process", [True, False])
def test_one_run_keeps_each_programs_correlation_ids_apart(tmp_path, first_wrote_its_process):
    """Each program of a process that exec'd numbers CUPTI's correlation ids from 1 (a new
    CUPTI): the later program's go on after the earlier one's (even where the earlier wrote no
    processes row), so that a kernel joins the API call that launched it (the Chrome export's
    arrows, the warm-up work compare leaves aside), not the other program's call of the same
    number; 0 still says no call."""
    a = _program(tmp_path / "h-5.duckdb", 5, "a", 1_000)
    if not first_wrote_its_process:
        con = duckdb.connect(str(a))
        con.execute("DELETE FROM processes")
        con.close()
    b = _program(tmp_path / "h-5.exec1.duckdb", 5, "b", 2_000)
    out = merge_files([a, b], tmp_path / "one.duckdb", one_run=True)
    assert q(out, "SELECT g.name, c.start_ns FROM gpu_activities g JOIN api_calls c ON "
                  "c.run_id = g.run_id AND c.pid = g.pid AND c.correlation_id = g.correlation_id "
                  "ORDER BY g.start_ns") == [("k_inner_a", 1_021), ("k_inner_b", 2_021)]
    assert q(out, "SELECT count(*), count(DISTINCT correlation_id) FROM gpu_activities") == [(6, 6)]
    assert q(out, "SELECT correlation_id FROM memory_events") == [(0,), (0,)]


def test_one_run_moves_a_later_programs_ranges_past_the_highest_id_of_the_earlier(tmp_path):
    """A program's range ids may skip numbers (a range whose record was never written): the
    program it exec'd numbers its own past the highest id, not past how many there are, or
    two ranges of the process would share an id."""
    a = tmp_path / "h-5.duckdb"
    with Writer(a, RunInfo(source="synthetic"), pid=5) as w:
        w.append({"ranges": {"range_id": [1, 2, 4], "name": ["x", "y", "z"], "kind": ["user"] * 3,
                             "depth": [0] * 3, "thread_id": [7] * 3, "start_ns": [1, 3, 5],
                             "end_ns": [2, 4, 6]},
                  "processes": {"pid": [5]}})
    b = _program(tmp_path / "h-5.exec1.duckdb", 5, "b", 2_000)
    out = merge_files([a, b], tmp_path / "one.duckdb", one_run=True)
    assert q(out, "SELECT range_id, parent_id, name FROM ranges ORDER BY range_id") == [
        (1, None, "x"), (2, None, "y"), (4, None, "z"),
        (5, None, "step"), (6, 5, "inner_b"), (7, 6, "aten::b")]


# What a file of one run holds, table by table, as reports read it (string and config ids
# resolved; name_id is the file's own numbering).
VIEWS = {"runs": "run_id", "processes": "run_id", "devices": "run_id",
         "kernels": "run_id, name_id", "api_calls": "run_id", "ranges": "run_id",
         "memcpys": "run_id", "memsets": "run_id", "syncs": "run_id", "logs": "run_id",
         "memory_events": "run_id", "data_quality": "run_id", "step_busy": "run_id"}


def _full(path, pid, seed, host):
    """A run with rows in every table, its runs row filled in."""
    info = RunInfo(source="synthetic", label=f"rank{seed}", host=host, command=f"train.py --seed {seed}",
                   settings={"seed": seed}, cuda_driver_version=f"13.{seed}",
                   cupti_version=f"cupti {seed}", torch_version=f"2.{seed}")
    with Writer(path, info, pid=pid) as w:
        for batch in synthetic_batches(steps=2, kernels_per_step=40, n_names=12, seed=seed, pid=pid):
            w.append(batch)
        w.append({"logs": {"pid": [pid], "thread_id": [7], "time_ns": [123 + seed],
                           "level": ["WARNING"], "logger": ["train"], "message": [f"m{seed}"],
                           "step": [1]},
                  "memory_events": {"pid": [pid], "device_id": [0], "time_ns": [456 + seed],
                                    "operation": ["alloc"], "bytes": [4096 * seed],
                                    "address": pa.array([1 << 40], pa.uint64()),
                                    "memory_kind": ["device"], "pool": [True],
                                    "correlation_id": [9], "step": [1]},
                  "ranges": {"range_id": [10_000], "name": [f"tagged{seed}"], "kind": ["user"],
                             "depth": [0], "thread_id": [7], "start_ns": [5], "end_ns": [6],
                             "attrs": [f'{{"lr": 0.{seed}}}'], "domain": ["cuptiprof"]}})
        w.add_quality("dropped_records", "kernel", 3 + seed, f"{3 + seed} kernels dropped",
                      value_ns=77)
    return path


def _rows(path, view, drop, where="TRUE"):
    return sorted(q(path, f"SELECT * EXCLUDE ({drop}) FROM {view} WHERE {where}"), key=repr)


def test_a_merge_keeps_every_column_of_every_table(tmp_path):
    """Each run of a merge reads as its input did, in every table and column (names and
    demangled names through their new ids, the runs row whole, stored busy time); a one-run
    merge holds the rows of both inputs."""
    a = _full(tmp_path / "a.duckdb", 11, 1, "hostA")
    b = _full(tmp_path / "b.duckdb", 22, 2, "hostB")
    out = merge_files([a, b], tmp_path / "all.duckdb")
    for view, drop in VIEWS.items():
        for run, src in ((1, a), (2, b)):
            want = _rows(src, view, drop)
            assert want and _rows(out, view, drop, f"run_id = {run}") == want, (view, run)
    assert q(out, "SELECT bool_or(demangled <> name) FROM kernels") == [(True,)]
    one = merge_files([a, b], tmp_path / "one.duckdb", one_run=True)
    for view, drop in VIEWS.items():
        if view in ("runs", "processes", "data_quality", "step_busy"):
            continue
        assert _rows(one, view, drop) == sorted(_rows(a, view, drop) + _rows(b, view, drop),
                                                key=repr), view


def _part(path, pid, *, status="complete", start=None, end=None, driver=None, proc=None,
          quality=()):
    """A part file of one process; its runs row set to `status`, `start`..`end`, `driver`."""
    with Writer(path, RunInfo(source="synthetic", label="part"), pid=pid) as w:
        w.append({"kernels": {"start_ns": [pid * 1000], "end_ns": [pid * 1000 + 5], "name": ["k"],
                              "step": [0]},
                  "processes": dict({"pid": [pid], "host": [f"h{pid}"]}, **(proc or {}))})
        for check, count, detail in quality:
            w.add_quality(check, None, count, detail)
    con = duckdb.connect(str(path))
    con.execute("UPDATE runs SET status = ?, start_ns = coalesce(?, start_ns), "
                "end_ns = coalesce(?, end_ns), cuda_driver_version = ?", [status, start, end, driver])
    con.close()
    return path


def test_one_run_takes_the_worst_status_the_whole_span_and_what_the_launcher_knew(tmp_path):
    """The run of several parts: failed over interrupted over complete, from the first start to
    the last end; label, command, host and source as the launcher gave them (the source of the
    parts where it gave none), driver and versions from the first part that has them."""
    p1 = _part(tmp_path / "h-1.duckdb", 1, start=100, end=500)
    p2 = _part(tmp_path / "h-2.duckdb", 2, status="interrupted", start=50, end=400, driver="13.0")
    p3 = _part(tmp_path / "h-3.duckdb", 3, status="failed", start=200, end=900, driver="12.4")
    info = RunInfo(label="job", source=None, command="python train.py", host="node7")
    cols = "label, source, command, host, status, start_ns, end_ns, cuda_driver_version"
    out = merge_files([p1, p2, p3], tmp_path / "a.duckdb", one_run=True, run_info=info)
    assert q(out, f"SELECT run_id, {cols} FROM runs") == [
        (1, "job", "synthetic", "python train.py", "node7", "failed", 50, 900, "13.0")]
    out = merge_files([p1, p2], tmp_path / "b.duckdb", one_run=True,
                      run_info=RunInfo(label="job", source="cpu", command="x", host="node7"))
    assert q(out, "SELECT source, status, start_ns, end_ns FROM runs") == [
        ("cpu", "interrupted", 50, 500)]
    # a part that closed interrupted (Ctrl-C) did not end early
    assert q(out, "SELECT pid, ended_early FROM processes WHERE ended_early") == []
    assert q(out, "SELECT count(*) FROM data_quality WHERE check_name = 'process_ended_early'") == [(0,)]
    # what the caller says wins over the parts
    out = merge_files([p1, p3], tmp_path / "c.duckdb", one_run=True, run_info=info,
                      status="complete", end_ns=1234)
    assert q(out, "SELECT status, start_ns, end_ns FROM runs") == [("complete", 100, 1234)]


def test_one_run_makes_one_process_of_the_parts_of_a_process_that_exec_d(tmp_path):
    """The parts of one pid (one per program it ran) are one process: the first program's row,
    to the last end, ended early when any program did; a note each part made alike is kept
    once, counts are kept from every part and notes of other processes stay theirs."""
    same = [("no_gpu", None, "no GPU: CPU ops only")]
    a = _part(tmp_path / "h-5.duckdb", 5, quality=same + [("dropped_records", 3, "3 dropped")],
              proc={"command": ["python a.py"], "start_ns": [10], "end_ns": [100],
                    "ended_early": [False]})
    b = _part(tmp_path / "h-5.exec1.duckdb", 5, quality=same + [("dropped_records", 4, "4 dropped")],
              proc={"command": ["python b.py"], "start_ns": [20], "end_ns": [200],
                    "ended_early": [True]})
    c = _part(tmp_path / "h-6.duckdb", 6, quality=same, proc={"ended_early": [False]})
    out = merge_files([b, a, c], tmp_path / "one.duckdb", one_run=True)
    assert q(out, "SELECT pid, command, start_ns, end_ns, ended_early FROM processes ORDER BY pid") == [
        (5, "python a.py", 10, 200, True), (6, None, None, None, False)]
    assert q(out, "SELECT pid, check_name, count FROM data_quality ORDER BY ALL") == [
        (5, "dropped_records", 3), (5, "dropped_records", 4), (5, "no_gpu", None), (6, "no_gpu", None)]


@pytest.mark.parametrize("dead_name", ["h-7", "node-a-7.exec1"])
def test_one_run_fills_in_processes_and_notes_from_the_launcher(tmp_path, dead_name):
    """The launcher's processes rows fill in what a part left NULL (a part's own value stays,
    its start too where the launcher's is earlier) and add the processes that wrote no part;
    its notes belong to the run; an unreadable part is left out with a note; a part that died
    is named by its pid even without a processes row (that of a program it exec'd too, on a
    host whose name holds dashes)."""
    p1 = _part(tmp_path / "h-1.duckdb", 1, proc={"start_ns": [10]})
    dead = tmp_path / f"{dead_name}.duckdb"
    _part(dead, 7, status="running")
    con = duckdb.connect(str(dead))
    con.execute("DELETE FROM processes")
    con.close()
    bad = tmp_path / "h-8.duckdb"
    bad.write_text("not a database" * 100)
    procs = pa.table({"pid": pa.array([1, 9], pa.int32()), "host": ["launcher", "launcher"],
                      "rank": pa.array([3, 4], pa.int32()), "exit_status": pa.array([0, 1], pa.int32()),
                      "start_ns": pa.array([5, 6], pa.int64())})
    notes = pa.table({"pid": pa.array([1], pa.int32()), "check_name": ["process_exec"],
                      "subject": ["1"], "count": pa.array([1], pa.int64()), "detail": ["exec"]})
    out = merge_files([p1, dead, bad], tmp_path / "one.duckdb", one_run=True,
                      extra={"processes": procs, "data_quality": notes})
    assert q(out, "SELECT run_id, pid, host, rank, exit_status, start_ns FROM processes "
                  "ORDER BY pid") == [(1, 1, "h1", 3, 0, 10), (1, 9, "launcher", 4, 1, 6)]
    assert q(out, "SELECT run_id, pid, check_name, subject FROM data_quality ORDER BY ALL") == [
        (1, 1, "process_exec", "1"), (1, 7, "process_ended_early", "7"),
        (1, None, "unreadable_part", "h-8.duckdb")]


def test_a_temporary_file_left_by_a_killed_merge_of_the_same_pid_is_not_taken_in(tmp_path):
    """A merge killed mid-write leaves its hidden temporary file and WAL; a later merge with the
    same pid (a container's pid 1) writes under the same name: it starts from nothing, and
    leaves no temporary file behind."""
    from cuptiprof.outputs import temp_beside

    a = _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    out = tmp_path / "all.duckdb"
    tmp = temp_beside(out)
    tmp.write_bytes(b"half a database" * 100)
    wal = tmp.with_name(tmp.name + ".wal")
    wal.write_bytes(b"half a log" * 100)
    merge_files([a], out)
    assert q(out, "SELECT run_id, label FROM runs") == [(1, "hostA")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.duckdb", "all.duckdb"]


def test_inputs_whose_names_hold_a_quote_merge(tmp_path):
    """A file name may hold a quote (rank 0's.duckdb): it is a name, not SQL."""
    a = _file(tmp_path / "rank 0's.duckdb", ["gemm"], 11, "hostA")
    b = _file(tmp_path / "b.duckdb", ["relu"], 22, "hostB")
    out = merge_files([a, b], tmp_path / "it's all.duckdb")
    assert q(out, "SELECT run_id, label FROM runs ORDER BY run_id") == [(1, "hostA"), (2, "hostB")]


def test_a_merge_of_no_file_is_refused_and_writes_nothing(tmp_path):
    with pytest.raises(InputError, match="at least one input file"):
        merge_files([], tmp_path / "none.duckdb")
    assert list(tmp_path.iterdir()) == []


def test_inputs_beside_a_file_named_run_json_are_runs_of_their_own(tmp_path):
    """Only an OUT.parts folder holds the parts of one `cuptiprof run`: files in a folder that
    happens to hold a run.json are merged as the runs they are."""
    _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    _file(tmp_path / "b.duckdb", ["relu"], 22, "hostB")
    (tmp_path / "run.json").write_text("{}")
    r = cli(["merge", "a.duckdb", "b.duckdb", "-o", "all.duckdb"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "all.duckdb", "SELECT run_id, label FROM runs ORDER BY run_id") == [
        (1, "hostA"), (2, "hostB")]


def test_a_merged_file_stores_the_busy_time_of_every_run(tmp_path):
    """Reports read a file's stored busy time per step only where it covers every run, else
    they fold every row again: a merge stores it for each run, computing it for an input
    whose writer never stored it (killed)."""
    a = _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    b = _file(tmp_path / "b.duckdb", ["relu", "x"], 22, "hostB")
    con = duckdb.connect(str(b))
    con.execute("DELETE FROM step_busy; DELETE FROM step_busy_runs")
    con.close()
    out = merge_files([a, b], tmp_path / "all.duckdb")
    assert q(out, "SELECT run_id FROM step_busy_runs ORDER BY ALL") == [(1,), (2,)]
    assert q(out, "SELECT run_id, pid, step, busy_ns FROM step_busy ORDER BY ALL") == [
        (1, 11, 0, 10), (2, 22, 0, 11)]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, lambda: RuntimeError("Query interrupted")])
def test_a_merge_interrupted_as_it_creates_its_output_leaves_nothing(tmp_path, monkeypatch, capsys,
                                                                    stop):
    """A Ctrl-C that lands as the temporary output is created (a KeyboardInterrupt, or DuckDB's
    'Query interrupted'): `cuptiprof merge` says interrupted, exits 130 and leaves no
    .OUT.tmp-PID behind."""
    from cuptiprof.cli import main
    _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    _file(tmp_path / "b.duckdb", ["relu"], 22, "hostB")
    before = sorted(os.listdir(tmp_path))
    connect = duckdb.connect

    def interrupted(path, *args, **kw):
        con = connect(path, *args, **kw)
        if ".tmp-" in str(path):   # the output being written, not an input being read
            con.close()
            raise stop()
        return con
    monkeypatch.setattr(duckdb, "connect", interrupted)
    assert main(["merge", str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb"), "-o",
                 str(tmp_path / "all.duckdb")]) == 130
    assert capsys.readouterr().err == "cuptiprof: interrupted\n"
    assert sorted(os.listdir(tmp_path)) == before


def test_merge_replaces_an_existing_output_only_with_force(tmp_path):
    for name in "abc":
        _file(tmp_path / f"{name}.duckdb", [f"k{name}"], ord(name), name)
    assert cli(["merge", "a.duckdb", "b.duckdb", "-o", "all.duckdb"], tmp_path).returncode == 0
    before = tree(tmp_path)
    r = cli(["merge", "a.duckdb", "c.duckdb", "-o", "all.duckdb"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("cuptiprof: error: all.duckdb: already exists; choose another "
                                "path or pass --force")
    assert tree(tmp_path) == before
    r = cli(["merge", "a.duckdb", "c.duckdb", "-o", "all.duckdb", "--force"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "merged 2 files (2 runs" in r.stderr and "into all.duckdb" in r.stderr
    assert q(tmp_path / "all.duckdb", "SELECT label FROM runs ORDER BY run_id") == [("a",), ("c",)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.duckdb", "all.duckdb", "b.duckdb",
                                                          "c.duckdb"]


@pytest.mark.parametrize("case", ["missing", "not_duckdb", "run_held_twice"])
def test_a_failed_merge_with_force_leaves_the_old_output_as_it_was(tmp_path, case):
    """--force replaces OUT only once the merge is written: one that fails, before its temporary
    file is made (an input missing or no DuckDB file) or after (a run two inputs hold), leaves
    OUT byte for byte and no temporary file."""
    _file(tmp_path / "a.duckdb", ["x"], 1, "a")
    _file(tmp_path / "b.duckdb", ["y"], 2, "b")
    assert cli(["merge", "a.duckdb", "b.duckdb", "-o", "all.duckdb"], tmp_path).returncode == 0
    (tmp_path / "text.duckdb").write_text("not a database at all, just text" * 10)
    shutil.copy(tmp_path / "a.duckdb", tmp_path / "copy.duckdb")   # the same run again
    second = {"missing": "nope.duckdb", "not_duckdb": "text.duckdb",
              "run_held_twice": "copy.duckdb"}[case]
    before = tree(tmp_path)
    r = cli(["merge", "a.duckdb", second, "-o", "all.duckdb", "--force"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert second in r.stderr and ".tmp-" not in r.stderr
    assert tree(tmp_path) == before   # no temporary file (nor its .wal) either
    assert q(tmp_path / "all.duckdb", "SELECT label FROM runs ORDER BY run_id") == [("a",), ("b",)]


def test_merge_with_force_into_one_of_its_inputs_is_refused_as_import_refuses_it(tmp_path):
    """It would read the file it replaces: one line, the same as import's for a trace that is
    also its output, and nothing changed."""
    _file(tmp_path / "a.duckdb", ["x"], 1, "a")
    _file(tmp_path / "b.duckdb", ["y"], 2, "b")
    (tmp_path / "t.json").write_text('{"traceEvents": []}')
    before = tree(tmp_path)
    r = cli(["merge", "a.duckdb", "b.duckdb", "-o", "./a.duckdb", "--force"], tmp_path)
    i = cli(["import", "t.json", "-o", "./t.json", "--force"], tmp_path)
    assert r.returncode == i.returncode == 2, (r.stderr, i.stderr)
    assert r.stderr == "cuptiprof: error: a.duckdb: is also an input; write to another path\n"
    assert i.stderr == "cuptiprof: error: t.json: is also an input; write to another path\n"
    assert tree(tmp_path) == before


def test_merging_a_runs_parts_over_an_existing_output_needs_force(tmp_path):
    """The parts of a run that did not finish, merged over an OUT that is there (the file a
    `run --force` was to replace): refused in one line without --force, replaced with it."""
    left_parts(tmp_path / "r.duckdb.parts")
    (tmp_path / "r.duckdb").write_text("the old output")
    before = tree(tmp_path)
    r = cli(["merge", "r.duckdb.parts/h-11.duckdb", "-o", "r.duckdb"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("cuptiprof: error: r.duckdb: already exists; choose another "
                                "path or pass --force")
    assert tree(tmp_path) == before
    r = cli(["merge", "r.duckdb.parts/h-11.duckdb", "-o", "r.duckdb", "--force"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "r.duckdb", "SELECT count(*) FROM runs") == [(1,)]
    assert q(tmp_path / "r.duckdb", "SELECT pid FROM processes") == [(11,)]
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_a_file_whose_runs_row_was_deleted_is_refused_by_name(tmp_path):
    """Its `runs` row deleted by hand, the rows of a file's other tables still name the run:
    the merge left them out (they have no run to be renumbered with) and counted them in its
    line all the same. The file is refused in one line that names it and what is wrong."""
    a = _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    b = _file(tmp_path / "b.duckdb", ["relu", "gelu"], 22, "hostB")
    with duckdb.connect(str(b)) as con:
        con.execute("DELETE FROM runs")
    r = cli(["merge", "a.duckdb", "b.duckdb", "-o", "all.duckdb"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert "b.duckdb: not a complete cuptiprof file (" in r.stderr
    assert "kernel_rows" in r.stderr and "runs table" in r.stderr
    assert not (tmp_path / "all.duckdb").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    # a run's parts: that part is left out and noted, as an unreadable one is
    out = merge_files([a, b], tmp_path / "one.duckdb", one_run=True)
    assert q(out, "SELECT count(*) FROM kernels") == [(1,)]
    (subject, detail), = q(out, "SELECT subject, detail FROM data_quality "
                                "WHERE check_name = 'unreadable_part'")
    assert subject == "b.duckdb" and "runs table" in detail


def test_merge_counts_the_rows_it_merged(tmp_path):
    """The rows a merge counts are those in its output: a note of a merge of nothing (run_id
    NULL, no run to go with) is not merged, and was counted."""
    bad = tmp_path / "bad.duckdb"
    bad.write_text("not a database" * 100)
    none = merge_files([bad], tmp_path / "none.duckdb", skip_unreadable=True)
    _file(tmp_path / "a.duckdb", ["gemm"], 11, "hostA")
    r = cli(["merge", "a.duckdb", none.name, "-o", "all.duckdb"], tmp_path)
    assert r.returncode == 0, r.stderr
    total = sum(q(tmp_path / "all.duckdb", f"SELECT count(*) FROM {t}")[0][0]
                for t in ("kernel_rows", "processes", "data_quality"))
    assert total == 2 and "(1 run, 2 rows)" in r.stderr, r.stderr
