"""`cuptiprof run` on a program that replaces itself (os.exec*): one process, several programs."""
from __future__ import annotations

import sys

import pytest

from _run_helpers import cli, q, script

PY = sys.executable
PATHS = {"fake_cupti": {"CUPTIPROF_FAKE_CUPTI": "1"}, "no_gpu": {"CUDA_VISIBLE_DEVICES": ""}}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_exec_keeps_both_programs_steps(tmp_path, path):
    p = script(tmp_path, """
        import os, sys, cuptiprof
        if sys.argv[1:] == ["child"]:
            for i in range(2, 5):
                with cuptiprof.step(i):
                    sum(range(1000))
            print("child done")
        else:
            for i in range(2):
                with cuptiprof.step(i):
                    sum(range(1000))
            sys.stdout.flush()
            os.execv(sys.executable, [sys.executable, __file__, "child"])
    """, name="ex.py")
    r = cli(["run", "-o", "x.duckdb", "--no-report", "--", PY, p], tmp_path, **PATHS[path])
    assert r.returncode == 0, r.stderr
    assert "child done" in r.stdout
    # no 'already exists', no bookkeeping failure: only the line naming the file
    assert [ln for ln in r.stderr.splitlines() if "cuptiprof" in ln] == ["cuptiprof: wrote x.duckdb"], r.stderr
    out = tmp_path / "x.duckdb"
    assert q(out, "SELECT step FROM ranges WHERE kind = 'step' ORDER BY step") == [(i,) for i in range(5)]
    assert q(out, "SELECT count(*), bool_or(ended_early), any_value(exit_status) FROM processes") \
        == [(1, False, 0)]
    assert q(out, "SELECT count(*) FROM data_quality WHERE check_name = 'process_ended_early'") == [(0,)]
    assert q(out, "SELECT count FROM data_quality WHERE check_name = 'process_exec'") == [(1,)]
    [(detail,)] = q(out, "SELECT detail FROM data_quality WHERE check_name = 'process_exec'")
    assert " replaced its program once (exec): " in detail, detail
    assert q(out, "SELECT check_name, count(*) FROM data_quality GROUP BY ALL HAVING count(*) > 1") == []
    assert not (tmp_path / "x.duckdb.parts").exists()


@pytest.mark.parametrize("path", sorted(PATHS))
def test_exec_goes_on_counting_steps(tmp_path, path):
    """Warm-up is not repeated and --steps counts the steps of every program the process ran;
    an exec that fails leaves the recording going."""
    p = script(tmp_path, """
        import os, sys, cuptiprof
        n = int(sys.argv[1]) if len(sys.argv) > 1 else 0
        for i in range(2):
            with cuptiprof.range("step"):
                sum(range(1000))
        if n == 0:
            try:
                os.execv("/nonexistent/prog", ["prog"])
            except OSError:
                print("exec failed")
        if n < 2:
            os.execlp(sys.executable, sys.executable, __file__, str(n + 1))
    """, name="ex2.py")
    r = cli(["run", "-o", "y.duckdb", "--warmup", "1", "--steps", "4", "--no-report", "--", PY, p],
            tmp_path, **PATHS[path])
    assert r.returncode == 0, r.stderr
    assert "exec failed" in r.stdout
    out = tmp_path / "y.duckdb"
    assert q(out, "SELECT kind, step FROM ranges WHERE kind IN ('step', 'warmup') ORDER BY start_ns") \
        == [("warmup", 0), ("step", 1), ("step", 2), ("step", 3), ("step", 4)]
    assert q(out, "SELECT count(*), bool_or(ended_early) FROM processes") == [(1, False)]
    assert q(out, "SELECT count FROM data_quality WHERE check_name = 'process_exec'") == [(2,)]
    assert q(out, "SELECT count(*) FROM data_quality WHERE check_name IN "
                  "('steps_short', 'process_ended_early')") == [(0,)]


@pytest.mark.parametrize("how", ["popen_env", "popen_env_by_position", "execve_env"])
def test_a_python_started_with_an_environment_of_its_own_is_profiled(tmp_path, how):
    """A helper started with a clean environment (subprocess's env=, os.execve) left cuptiprof's
    variables behind and went unprofiled without a word; CUPTIPROF_DISABLE in that environment
    still keeps a process out."""
    p = script(tmp_path, f"""
        import os, subprocess, sys, cuptiprof
        how = {how!r}
        if sys.argv[1:] == ["child"]:
            for i in range(2, 4):
                with cuptiprof.step(i):
                    sum(range(1000))
            sys.exit(0)
        clean = {{"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.environ["PYTHONPATH"].split(os.pathsep)[-1]}}
        with cuptiprof.step(0):
            sum(range(1000))
        off = dict(clean, CUPTIPROF_DISABLE="1")
        subprocess.run([sys.executable, __file__, "child"], env=off, check=True)   # stays out
        if how == "popen_env":
            subprocess.run([sys.executable, __file__, "child"], env=clean, check=True)
        elif how == "popen_env_by_position":
            subprocess.Popen([sys.executable, __file__, "child"], -1, None, None, None, None, None,
                             True, False, None, clean).wait()
        else:
            sys.stdout.flush()
            os.execve(sys.executable, [sys.executable, __file__, "child"], clean)
    """, name="envs.py")
    r = cli(["run", "-o", "e.duckdb", "--no-report", "--", PY, p], tmp_path, CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "e.duckdb"
    got = q(out, "SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step' GROUP BY pid ORDER BY 1")
    # the parent's step 0, and one helper's steps 2 and 3 (an exec goes on in the same process)
    assert got == ([([0, 2, 3],)] if how == "execve_env" else [([0],), ([2, 3],)]), r.stderr


@pytest.mark.parametrize("how", [["--light"], []], ids=["light", "fake_cupti"])
def test_after_the_last_step_nothing_more_is_recorded_across_an_exec(tmp_path, how):
    """--steps 2 reached: collection is off for the rest of the process, so the range after the
    steps is not recorded, nor anything of the program it execs (which counts on from 2): by
    the Recorder (--light) or by the collector the exec'd program starts."""
    p = script(tmp_path, """
        import os, sys, cuptiprof
        n = int(sys.argv[1]) if len(sys.argv) > 1 else 0
        if n == 1:
            with cuptiprof.range("before"):   # the exec'd program's, before any step of its own
                pass
        for i in range(2):
            with cuptiprof.range("step"):
                sum(range(1000))
        with cuptiprof.range("after"):
            pass
        if n == 0:
            os.execlp(sys.executable, sys.executable, __file__, "1")
    """, name="ex3.py")
    r = cli(["run", "-o", "z.duckdb", "--steps", "2", *how, "--no-report", "--", PY, p],
            tmp_path, **({} if how else PATHS["fake_cupti"]))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "z.duckdb"
    assert q(out, "SELECT name, kind, step FROM ranges ORDER BY start_ns") == [
        ("step", "step", 0), ("step", "step", 1)]
    assert q(out, "SELECT count(*), bool_or(ended_early) FROM processes") == [(1, False)]


def test_a_python_an_execd_shell_starts_counts_its_own_steps(tmp_path):
    """The state an exec hands over names the process that exec'd: a Python the exec'd shell
    starts (another process, which inherits it) counts its own warm-up and steps."""
    p = script(tmp_path, """
        import os, sys, cuptiprof
        for i in range(2):
            with cuptiprof.range("step"):
                sum(range(1000))
        if sys.argv[1:] != ["child"]:
            sys.stdout.flush()
            os.execv("/bin/sh", ["sh", "-c", f'"{sys.executable}" "{__file__}" child; exit $?'])
    """, name="ex4.py")
    r = cli(["run", "-o", "s.duckdb", "--warmup", "1", "--light", "--no-report", "--", PY, p],
            tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "s.duckdb"
    assert q(out, "SELECT list((kind, step) ORDER BY start_ns) FROM ranges GROUP BY pid") == \
        [([("warmup", 0), ("step", 1)],)] * 2


@pytest.mark.parametrize("path", sorted(PATHS))
def test_steps_mixed_after_a_failed_exec_counts_only_the_steps_since(tmp_path, path):
    """After an exec that failed, the recording goes on into a part of its own, counting steps
    from there: the --step-fn steps begun before the exec are not taken for some of the steps
    after it (which hid the program's own steps there, and the steps_mixed note with them)."""
    script(tmp_path, "def work(x):\n    return x + 1\n", name="work_mod.py")
    p = script(tmp_path, """
        import os, cuptiprof
        from work_mod import work
        work(0)
        work(1)
        try:
            os.execv("/nonexistent/prog", ["prog"])
        except OSError:
            print("exec failed")
        work(2)
        for i in range(2):
            with cuptiprof.range("step"):
                pass
    """, name="ex3.py")
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--step-fn", "work_mod:work", "--", PY, p],
            tmp_path, **PATHS[path])
    assert r.returncode == 0, r.stderr
    assert "exec failed" in r.stdout
    out = tmp_path / "m.duckdb"
    assert q(out, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(5,)]
    rows = q(out, "SELECT detail FROM data_quality WHERE check_name = 'steps_mixed'")
    assert len(rows) == 1 and rows[0][0].startswith(
        "1 step came from --step-fn and 2 from the program's own"), rows
