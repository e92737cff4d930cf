"""processes.command under `cuptiprof run`: each process's command line as it was started, the
same with the CUPTI collector and without a GPU."""
from __future__ import annotations

import os
import shlex
import sys

import pytest

from _run_helpers import cli, gone_pid, left_parts, one_line_error, q, script, tree

PY = sys.executable
PATHS = {"fake_cupti": {"CUPTIPROF_FAKE_CUPTI": "1"}, "no_gpu": {"CUDA_VISIBLE_DEVICES": ""}}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_python_m_command_is_as_typed(tmp_path, path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    script(tmp_path / "pkg", """
        import cuptiprof
        with cuptiprof.step(0):
            pass
    """, name="__main__.py")
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--", PY, "-m", "pkg", "x", "y"], tmp_path,
            **PATHS[path])
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "m.duckdb", "SELECT command FROM processes") \
        == [(shlex.join([PY, "-m", "pkg", "x", "y"]),)]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_spawned_workers_show_their_own_command(tmp_path, path):
    p = script(tmp_path, """
        import multiprocessing as mp, cuptiprof

        def work(i):
            with cuptiprof.step(i):
                return i

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=work, args=(i,)) for i in range(2)]
            for w in procs:
                w.start()
            for w in procs:
                w.join()
            print([w.exitcode for w in procs])
    """, name="mp.py")
    r = cli(["run", "-o", "s.duckdb", "--no-report", "--", PY, p, "spawn"], tmp_path, **PATHS[path])
    assert r.returncode == 0, r.stderr
    cmds = [c for (c,) in q(tmp_path / "s.duckdb", "SELECT command FROM processes")]
    assert shlex.join([PY, str(p), "spawn"]) in cmds
    workers = [c for c in cmds if "spawn_main" in c]
    assert len(workers) == 2 and all(c.endswith("--multiprocessing-fork") for c in workers), cmds
    assert cmds.count(shlex.join([PY, str(p), "spawn"])) == 1, cmds   # not the workers' too


@pytest.mark.parametrize("args,says", [
    ([], "run needs a command after --"),
    (["--"], "run needs a command after --"),
    (["--", ""], "the command is empty ('')"),      # `cuptiprof run -- "$CMD"` with CMD unset
    (["--", " "], "the command is empty (' ')"),
    (["--overhead", "--repeat", "0", "--", PY, "-c", "print('ran')"], "--repeat 0: must be at least 1"),
    (["--overhead", "--repeat", "-2", "--", PY, "-c", "print('ran')"], "--repeat -2: must be at least 1"),
    # without -o the output is a new file: there is nothing for --force to replace
    (["--force", "--", PY, "-c", "print('ran')"], "--force replaces the file -o names"),
    (["--overhead", "--force", "--", PY, "-c", "print('ran')"], "writes no file; leave out --force"),
])
def test_run_usage_mistakes_are_one_line_and_run_nothing(tmp_path, capsys, monkeypatch, args, says):
    """No command, or --overhead with no run of each kind: one line, exit 2, nothing run."""
    from cuptiprof.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["run", *args]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuptiprof: error: ") and says in lines[0], err
    assert "ran" not in out and list(tmp_path.iterdir()) == []


def _refused_before_it_runs(tmp_path, args, says):
    """`run ARGS -- python -c ...` ends in one error line, exit 2: the command never ran and
    nothing was written."""
    r = cli(["run", *args, "--", PY, "-c", "print('ran')"], tmp_path)
    assert r.returncode == 2 and "ran" not in r.stdout
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cuptiprof: error: {says}"), r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,says", [
    # int() reads every script's digits: an Arabic-Indic 3 recorded 3 steps
    (["--steps", "\u0663"], "argument --steps: '\u0663' is not a whole number in ASCII digits (0-9)"),
    (["--warmup", "\uff12"], "argument --warmup: '\uff12' is not a whole number"),
    (["--overhead", "--repeat", "1_0"], "argument --repeat: '1_0' is not a whole number"),
    (["--steps", "9" * 5000], "argument --steps: a number of 5000 digits is beyond any count"),
    # a count no step number reaches was taken, where report --steps refuses such a step
    (["--steps", "9" * 20], "argument --steps: 99999999999999999999 is more steps than can be "
     "numbered; give at most 2147483647 (steps are numbered from -2147483648 to 2147483647)"),
    (["--warmup", "2147483648"], "argument --warmup: 2147483648 is more steps than can be numbered"),
])
def test_run_counts_are_ascii_whole_numbers(tmp_path, args, says):
    _refused_before_it_runs(tmp_path, args, says)


@pytest.mark.parametrize("args,says", [
    (["--step-fn", "m:prefill", "--step-fn", "m:decode"],
     "argument --step-fn: given twice (m:prefill, then m:decode): a run takes one function as "
     "its steps; give one"),
    (["--step-range", "prefill", "--step-range=decode"],
     "argument --step-range: given twice (prefill, then decode): a run takes one range name as "
     "its steps; give one"),
])
def test_run_refuses_a_step_option_given_twice(tmp_path, args, says):
    """The last one was kept: the first one's calls or ranges were no steps, without a word."""
    _refused_before_it_runs(tmp_path, args, says)


@pytest.mark.parametrize("given,runs", [([], 3), (["--repeat", "5"], 5)])
def test_overhead_runs_each_kind_3_times_unless_repeat_says(monkeypatch, given, runs):
    """--help: --repeat R runs of each kind, 3 by default; the command goes as typed."""
    from cuptiprof.cli import main
    from cuptiprof.run import overhead
    seen = []
    monkeypatch.setattr(overhead, "measure", lambda cmd, opts, repeat: seen.append((cmd, repeat)) or 0)
    assert main(["run", "--overhead", *given, "--", PY, "-c", "pass"]) == 0
    assert seen == [([PY, "-c", "pass"], runs)]


def test_overhead_with_no_report_is_refused(tmp_path):
    """--overhead prints its measurement and never a report: --no-report beside it changed
    nothing, and said nothing."""
    p = script(tmp_path, "print('ran')")
    r = cli(["run", "--overhead", "--no-report", "--", sys.executable, p], tmp_path)
    assert r.returncode == 2 and "ran" not in r.stdout
    assert r.stderr.strip().splitlines() == [
        "cuptiprof: error: --overhead prints its measurement and no report, so --no-report changes "
        "nothing; leave it out"]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_helper_that_records_nothing_adds_only_its_processes_row(tmp_path, path):
    """A helper process that reaches no step and records nothing (`python -c pass`) is listed
    in processes and adds no other row: with the CUPTI collector its part file was made as it
    started, giving it a device and a steps_short row saying 0 of the 2 steps were recorded."""
    p = script(tmp_path, f"""
        import subprocess, cuptiprof
        subprocess.run([{PY!r}, "-c", "pass"], check=True)
        for i in range(2):
            with cuptiprof.step(i):
                pass
    """)
    r = cli(["run", "-o", "h.duckdb", "--steps", "2", "--no-report", "--", PY, str(p)], tmp_path,
            **PATHS[path])
    assert r.returncode == 0, r.stderr
    out = tmp_path / "h.duckdb"
    procs = dict(q(out, "SELECT command, pid FROM processes"))
    helper = procs.pop(shlex.join([PY, "-c", "pass"]))
    assert list(procs) == [shlex.join([PY, str(p)])]
    for table in ("devices", "data_quality", "ranges", "kernels"):
        assert q(out, f"SELECT count(*) FROM {table} WHERE pid = {helper}") == [(0,)], table
    assert q(out, "SELECT step FROM ranges WHERE kind = 'step' ORDER BY step") == [(0,), (1,)]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_run_replaces_an_existing_output_only_with_force(tmp_path, path):
    p = script(tmp_path, """
        import sys, cuptiprof
        print("ran", sys.argv[1])
        with cuptiprof.step(0):
            pass
    """)
    r = cli(["run", "-o", "o.duckdb", "--no-report", "--", PY, p, "first"], tmp_path, **PATHS[path])
    assert r.returncode == 0, r.stderr
    before = tree(tmp_path)
    r = cli(["run", "-o", "o.duckdb", "--no-report", "--", PY, p, "second"], tmp_path, **PATHS[path])
    assert r.returncode == 2 and "ran" not in r.stdout, r.stderr
    assert r.stderr.strip() == ("cuptiprof: error: o.duckdb: already exists; choose another "
                                "path or pass --force")
    assert tree(tmp_path) == before
    r = cli(["run", "-o", "o.duckdb", "--force", "--no-report", "--", PY, p, "third"], tmp_path,
            **PATHS[path])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ran third\n" and "wrote o.duckdb" in r.stderr
    assert q(tmp_path / "o.duckdb", "SELECT command FROM processes") \
        == [(shlex.join([PY, str(p), "third"]),)]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["o.duckdb", "prog.py"]


@pytest.mark.parametrize("case", ["not_found", "missing_interpreter"])
def test_run_with_force_whose_command_cannot_start_leaves_the_old_output(tmp_path, case):
    """A command that does not exist is refused before anything; one whose #! interpreter is
    missing fails as it is started, after the run's parts folder was made: either way the old
    OUT is as it was and nothing else is left."""
    (tmp_path / "o.duckdb").write_text("the old output")
    bad = tmp_path / "bad"
    bad.write_text("#!/no/such/interpreter\n")
    bad.chmod(0o755)
    cmd = {"not_found": ["no-such-command-cuptiprof"], "missing_interpreter": [str(bad)]}[case]
    before = tree(tmp_path)
    r = cli(["run", "-o", "o.duckdb", "--force", "--no-report", "--", *cmd], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert cmd[0] in r.stderr
    assert tree(tmp_path) == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bad", "o.duckdb"]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("report", [True, False])
def test_run_with_force_whose_command_records_nothing_leaves_the_old_output(tmp_path, path, report):
    """Python starts and exits 2 on a script that is not there: nothing recorded, so the old
    OUT stays (an empty failed run would replace a good one) and a notice says so; nothing
    else is left, and the exit status is the program's."""
    p = script(tmp_path, """
        import cuptiprof
        with cuptiprof.step(0):
            pass
    """)
    r = cli(["run", "-o", "o.duckdb", "--no-report", "--", PY, p], tmp_path, **PATHS[path])
    assert r.returncode == 0, r.stderr
    before = tree(tmp_path)
    quiet = [] if report else ["--no-report"]
    r = cli(["run", "-o", "o.duckdb", "--force", *quiet, "--", PY, tmp_path / "missing.py"],
            tmp_path, **PATHS[path])
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[-1] == ("cuptiprof: notice: the command exited with status 2 "
                                         "before anything was recorded; o.duckdb left as it was")
    assert "wrote" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert tree(tmp_path) == before


def test_run_with_force_of_which_no_process_was_profiled_leaves_the_old_output(tmp_path):
    """A command none of whose processes cuptiprof records (here CUPTIPROF_DISABLE is set; a
    Python that cannot import cuptiprof is the same) gives an empty run: with --force the old
    OUT stays, and the notice says why nothing was profiled and that OUT was kept."""
    p = script(tmp_path, """
        print("ran")
    """)
    (tmp_path / "o.duckdb").write_text("the old output")
    before = tree(tmp_path)
    r = cli(["run", "-o", "o.duckdb", "--force", "--", PY, p], tmp_path,
            CUPTIPROF_DISABLE="1")
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith("cuptiprof: notice: no process of the command was profiled: "
                           "CUPTIPROF_DISABLE=1 is set") and last.endswith(
                               "; o.duckdb left as it was"), r.stderr
    assert "wrote" not in r.stderr, r.stderr
    assert tree(tmp_path) == before


def test_run_with_force_and_a_step_fn_problem_names_the_old_output_as_kept(tmp_path):
    """--step-fn naming nothing the script defines is still the error, and it says OUT was
    left as it was (not that OUT has no steps from the command)."""
    p = script(tmp_path, """
        import sys
        sys.exit(3)
    """)
    (tmp_path / "o.duckdb").write_text("the old output")
    before = tree(tmp_path)
    r = cli(["run", "-o", "o.duckdb", "--force", "--step-fn", "__main__:nothere", "--", PY, p],
            tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert r.stderr.rstrip().endswith("(the command ran; o.duckdb was left as it was)"), r.stderr
    assert tree(tmp_path) == before


def test_run_with_force_replaces_the_output_with_a_failed_run_that_recorded(tmp_path):
    """Only a run that recorded nothing keeps the old OUT: a failed one that recorded a step
    replaces it, and without an OUT to replace, one that recorded nothing is written (the
    record of the failure)."""
    p = script(tmp_path, """
        import sys, cuptiprof
        with cuptiprof.step(0):
            pass
        sys.exit(int(sys.argv[1]))
    """)
    (tmp_path / "o.duckdb").write_text("the old output")
    r = cli(["run", "-o", "o.duckdb", "--force", "--no-report", "--", PY, p, "3"], tmp_path)
    assert r.returncode == 3 and "wrote o.duckdb" in r.stderr, r.stderr
    assert q(tmp_path / "o.duckdb", "SELECT status FROM runs") == [("failed",)]
    r = cli(["run", "-o", "n.duckdb", "--force", "--", PY, tmp_path / "missing.py"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[-2:] == [
        "cuptiprof: notice: the command exited with status 2 before anything was recorded; no "
        "report", "cuptiprof: wrote n.duckdb"]
    assert q(tmp_path / "n.duckdb", "SELECT status, count(*) FROM runs GROUP BY ALL") \
        == [("failed", 1)]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["n.duckdb", "o.duckdb", "prog.py"]


def test_run_with_force_keeps_the_parts_a_run_that_did_not_finish_left(tmp_path):
    """OUT.parts of a run whose launcher is gone holds its recorded steps: --force replaces
    OUT, never that folder. Refused in one line that says so and how to recover them (with
    --force: the merge would otherwise refuse the OUT that is there); nothing runs."""
    left_parts(tmp_path / "o.duckdb.parts")
    (tmp_path / "o.duckdb").write_text("the old output")
    before = tree(tmp_path)
    r = cli(["run", "-o", "o.duckdb", "--force", "--", PY, "-c", "print('ran')"], tmp_path)
    assert r.returncode == 2 and "ran" not in r.stdout, r.stderr
    one_line_error(r.stderr)
    assert ("o.duckdb.parts is left from a run that did not finish; merge its parts (cuptiprof "
            "merge o.duckdb.parts/*.duckdb -o o.duckdb --force) or remove that folder (--force "
            "does not remove it)") in r.stderr, r.stderr
    assert tree(tmp_path) == before


def test_the_file_a_run_with_force_replaces_is_not_read_as_if_current(tmp_path):
    """While a `run --force` writes a new OUT, or after it was killed, OUT is still the run
    before: report, sql and compare refuse it in one line that says so (naming the live run,
    or how to recover the killed one's steps) instead of showing the older results; its own
    report at the end reads the new file."""
    p = script(tmp_path, """
        import sys, cuptiprof
        with cuptiprof.step(0):
            pass
    """)
    r = cli(["run", "-o", "o.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli(["run", "-o", "o.duckdb", "--force", "--", PY, p], tmp_path)   # with its report
    assert r.returncode == 0 and "cuptiprof report: o.duckdb" in r.stderr, r.stderr
    parts = left_parts(tmp_path / "o.duckdb.parts", launcher=os.getpid())   # alive: this test
    for argv in (["report", "o.duckdb"], ["sql", "o.duckdb", "SELECT 1"]):
        r = cli(argv, tmp_path)
        assert r.returncode == 2, r.stderr
        one_line_error(r.stderr)
        assert r.stderr.strip() == (
            f"cuptiprof: error: o.duckdb: a cuptiprof run (pid {os.getpid()}) is writing a new "
            "o.duckdb to replace this one; wait for it to end")
    (parts / "launcher.pid").write_text(str(gone_pid()))   # a run killed mid-way
    r = cli(["compare", "o.duckdb", "o.duckdb"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert r.stderr.strip() == (
        "cuptiprof: error: o.duckdb: a run that was to replace this file did not finish; its "
        "records are in o.duckdb.parts: cuptiprof merge o.duckdb.parts/*.duckdb -o o.duckdb "
        "--force (or remove o.duckdb.parts to read the older file)")
    # the merge it names writes a file newer than the parts, which is read, the folder still there
    r = cli(["merge", "o.duckdb.parts/h-11.duckdb", "-o", "o.duckdb", "--force"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert parts.is_dir()
    r = cli(["sql", "o.duckdb", "SELECT pid FROM processes"], tmp_path)
    assert r.returncode == 0 and "11" in r.stdout, r.stderr
