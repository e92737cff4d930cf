"""`cuptiprof run` on real child processes: exit statuses, signals, crashes, bad input."""
from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from _run_helpers import (cli, cli_driven, driver, gone_pid, left_parts, one_line_error, popen,
                          q, script, wait_for)

PY = sys.executable


def test_exit_status_and_file(tmp_path):
    p = script(tmp_path, "import sys; print('hello'); sys.exit(3)\n")
    r = cli(["run", "-o", "out.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 3, r.stderr
    assert "hello" in r.stdout
    out = tmp_path / "out.duckdb"
    assert out.exists() and not (tmp_path / "out.duckdb.parts").exists()
    assert q(out, "SELECT status FROM runs") == [("failed",)]
    assert q(out, "SELECT exit_status FROM processes") == [(3,)]


def test_every_process_of_the_command_keeps_its_exit_status(tmp_path):
    """The processes the command starts keep how each ended, not only the command's own: a
    worker's sys.exit(3), another's `raise SystemExit(4)` (seen only as exit() runs), a clean
    one's 0; the command itself exits 0 after them."""
    p = script(tmp_path, """
        import subprocess, sys
        codes = [subprocess.run([sys.executable, "-c", src]).returncode for src in
                 ("import sys; sys.exit(3)", "raise SystemExit(4)", "pass")]
        print("codes", codes)
    """)
    r = cli(["run", "-o", "w.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "codes [3, 4, 0]" in r.stdout
    assert q(tmp_path / "w.duckdb", "SELECT exit_status FROM processes ORDER BY start_ns") == [
        (0,), (3,), (4,), (0,)]


def test_a_program_that_fails_before_recording_anything_gets_one_notice(tmp_path):
    """A missing script or a bad argument: the program's own error is what the user needs to
    see, not five empty tables and a hint to mark steps."""
    r = cli(["run", "-o", "out.duckdb", "--", PY, "missing.py"], tmp_path)
    assert r.returncode == 2, r.stderr
    err = r.stderr.splitlines()
    assert "can't open file" in err[0]
    assert err[1:] == ["cuptiprof: notice: the command exited with status 2 before anything was "
                       "recorded; no report", "cuptiprof: wrote out.duckdb"]
    assert q(tmp_path / "out.duckdb", "SELECT status FROM runs") == [("failed",)]
    # one that fails after recording keeps its report
    p = script(tmp_path, """
        import cuptiprof, sys
        with cuptiprof.range("step", step=0):
            pass
        sys.exit(4)
    """)
    r = cli(["run", "-o", "two.duckdb", "--", PY, p], tmp_path)
    assert r.returncode == 4 and "steps: per step" in r.stderr, r.stderr


def test_part_files_are_written_without_syncs(tmp_path):
    """A part file is merged into the output when the run ends, and what a killed process
    committed is in the file system's cache either way: its commits do not wait on the disk.
    The merged output is synced once, before its rename."""
    p = script(tmp_path, """
        import cuptiprof
        from cuptiprof.run.child import shared
        with cuptiprof.range("step", step=0):
            pass
        w = shared._rec.writer
        print("setting", w.synced, w.query("SELECT current_setting('fsync_mode')")[0][0])
    """)
    r = cli(["run", "--light", "--no-report", "-o", "out.duckdb", "--", PY, p], tmp_path,
            CUPTIPROF_FLUSH_EVERY_S="0")
    assert r.returncode == 0, r.stderr
    assert "setting False NONE" in r.stdout, r.stdout
    assert q(tmp_path / "out.duckdb", "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]


def test_success_prints_report_and_path(tmp_path):
    p = script(tmp_path, """
        import cuptiprof
        for i in range(3):
            with cuptiprof.range("step", step=i):
                sum(range(1000))
        print('{"result": 1}')
    """)
    r = cli(["run", "-o", "ok.duckdb", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "overview:" in r.stderr and "steps:" in r.stderr
    assert r.stdout == '{"result": 1}\n'   # the program's stdout (a result file) stays its own
    assert "wrote ok.duckdb" in r.stderr
    assert q(tmp_path / "ok.duckdb", "SELECT status FROM runs") == [("complete",)]
    assert q(tmp_path / "ok.duckdb",
             "SELECT step FROM ranges WHERE kind='step' ORDER BY step") == [(0,), (1,), (2,)]


def test_no_report_still_names_the_file_written(tmp_path):
    """Without -o the file gets a name of cuptiprof's choosing: --no-report leaves out the
    report, not the one line that says where the profile went."""
    p = script(tmp_path, "print('out')\n")
    r = cli(["run", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0 and r.stdout == "out\n", r.stderr
    made = [f.name for f in tmp_path.glob("cuptiprof-*.duckdb")]
    assert len(made) == 1 and r.stderr.strip().splitlines() == [f"cuptiprof: wrote {made[0]}"]


def test_crashing_child(tmp_path):
    p = script(tmp_path, """
        import cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        raise ValueError("boom")
    """)
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 1
    assert "ValueError: boom" in r.stderr          # the child's own traceback is untouched
    out = tmp_path / "c.duckdb"
    assert q(out, "SELECT status FROM runs") == [("failed",)]
    assert q(out, "SELECT count(*) FROM ranges WHERE kind='step'") == [(1,)]
    # the process closed its part: when it ended is known, after its step
    assert q(out, "SELECT p.end_ns >= r.end_ns, p.ended_early FROM processes p, ranges r "
                  "WHERE r.kind = 'step'") == [(True, False)]


def test_os_exit_marks_process_ended_early(tmp_path):
    p = script(tmp_path, """
        import os, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        with cuptiprof.range("step", step=1):
            os._exit(5)
    """)
    r = cli(["run", "-o", "e.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 5
    out = tmp_path / "e.duckdb"
    assert q(out, "SELECT ended_early, exit_status FROM processes") == [(True, 5)]
    assert q(out, "SELECT check_name FROM data_quality WHERE check_name='process_ended_early'") \
        == [("process_ended_early",)]
    assert q(out, "SELECT step FROM ranges WHERE kind='step'") == [(0,)]   # flushed before the exit


def test_sigkill_child_keeps_flushed_steps(tmp_path):
    p = script(tmp_path, """
        import os, signal, cuptiprof
        for i in range(2):
            with cuptiprof.range("step", step=i):
                pass
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = cli(["run", "-o", "k.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 128 + 9
    out = tmp_path / "k.duckdb"
    assert q(out, "SELECT count(*) FROM ranges WHERE kind='step'") == [(2,)]
    assert q(out, "SELECT bool_and(ended_early) FROM processes") == [(True,)]


def _one_step_then_sleep(tmp_path, ready):
    """A program that records step 0, writes `ready`, then sleeps a minute."""
    return script(tmp_path, f"""
        import time, pathlib, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        pathlib.Path({str(ready)!r}).write_text("x")
        time.sleep(60)
    """)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded(tmp_path, sig):
    ready = tmp_path / "ready"
    p = _one_step_then_sleep(tmp_path, ready)
    proc = popen(["run", "-o", "s.duckdb", "--no-report", "--", PY, p], tmp_path)
    wait_for(ready, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    out = tmp_path / "s.duckdb"
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]
    assert q(out, "SELECT count(*) FROM ranges WHERE kind='step'") == [(1,)]


def test_ctrl_c_while_torch_profiles_exits_130(tmp_path):
    """A Ctrl-C that ends the program (uncaught KeyboardInterrupt) exits 130 as without
    cuptiprof, also in no-GPU mode, where stopping torch.profiler at exit made it 1."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import torch
        raise KeyboardInterrupt
    """)
    r = cli(["run", "-o", "i.duckdb", "--", PY, p], tmp_path)
    assert r.returncode == 130, r.stderr
    assert q(tmp_path / "i.duckdb", "SELECT status FROM runs") == [("interrupted",)]
    assert "KeyboardInterrupt" in r.stderr and "no steps were marked" not in r.stderr


def test_a_forked_worker_counts_its_own_steps_after_the_parents(tmp_path):
    """A worker forked after the parent recorded steps (its writer open) starts its own warm-up
    and step count, as a spawned one does; it used to crash on the parent's DuckDB connection."""
    p = script(tmp_path, """
        import sys, multiprocessing as mp, cuptiprof
        def worker():
            for i in range(4):
                with cuptiprof.range("step", step=i):
                    sum(range(1000))
        if __name__ == "__main__":
            for i in range(3):
                with cuptiprof.range("step", step=i):
                    sum(range(1000))
            c = mp.get_context("fork").Process(target=worker)
            c.start(); c.join()
            print("worker exit", c.exitcode)
    """)
    r = cli(["run", "-o", "f.duckdb", "--no-report", "--warmup", "2", "--steps", "2", "--", PY, p],
            tmp_path)
    assert r.returncode == 0 and "worker exit 0" in r.stdout, r.stdout + r.stderr
    got = q(tmp_path / "f.duckdb", "SELECT pid, list(kind || ' ' || step ORDER BY start_ns) FROM ranges "
                                  "WHERE kind IN ('step', 'warmup') GROUP BY pid ORDER BY min(start_ns)")
    assert [x for _, x in got] == [["warmup 0", "warmup 1", "step 2"],
                                   ["warmup 0", "warmup 1", "step 2", "step 3"]]
    # the worker's own start (the fork), not its parent's: after the parent's steps
    (parent, _), (worker, _) = got
    parent_end = q(tmp_path / "f.duckdb", f"SELECT max(end_ns) FROM ranges WHERE pid = {parent}")
    worker_start = q(tmp_path / "f.duckdb", f"SELECT start_ns FROM processes WHERE pid = {worker}")
    assert worker_start[0][0] >= parent_end[0][0], (worker_start, parent_end)
    # the worker returned: it did not end early (multiprocessing ends it with os._exit)
    assert q(tmp_path / "f.duckdb", "SELECT count(*), count(*) FILTER (WHERE ended_early) "
                                   "FROM processes") == [(2, 0)]


def test_a_forked_worker_writes_none_of_the_ranges_and_logs_its_parent_had_not_yet_written(tmp_path):
    """What the parent recorded before the fork and had not written yet is the parent's: the
    worker writing it too put each such range and log record twice in the file."""
    p = script(tmp_path, """
        import logging, multiprocessing as mp, cuptiprof
        def worker():
            with cuptiprof.range("step", step=0):
                pass
        if __name__ == "__main__":
            with cuptiprof.range("setup"):
                logging.getLogger("t").warning("parent says")
            c = mp.get_context("fork").Process(target=worker)
            c.start(); c.join()
    """)
    r = cli(["run", "-o", "f.duckdb", "--light", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "f.duckdb"
    assert q(out, "SELECT count(*) FROM ranges WHERE name = 'setup'") == [(1,)]
    assert q(out, "SELECT count(*) FROM logs WHERE message = 'parent says'") == [(1,)]
    assert q(out, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_a_multiprocessing_worker_keeps_the_exit_status_its_parent_saw(tmp_path, method):
    """Each worker's exit_status is what its Process.exitcode says (-N: 128+N), however it
    started: fork and forkserver workers leave through os._exit, which the C library's exit()
    never sees, and a SIGTERM that lands after a worker's recording closed (a Pool's
    terminate() racing an idle worker's return) ends it, whatever its recording said."""
    p = script(tmp_path, f"""
        import multiprocessing as mp, os, signal, sys
        from multiprocessing import util
        def returns(): pass
        def exits3(): sys.exit(3)
        def raises(): raise ValueError("boom")
        def terminated_late():   # after cuptiprof's own finalizer (exitpriority -100)
            util.Finalize(None, os.kill, (os.getpid(), signal.SIGTERM), exitpriority=-200)
        if __name__ == "__main__":
            ctx = mp.get_context("{method}")
            seen = {{}}
            for fn in (returns, exits3, raises, terminated_late):
                w = ctx.Process(target=fn)
                w.start(); w.join()
                seen[w.pid] = w.exitcode
            print("seen", seen)
    """)
    r = cli(["run", "-o", "w.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    seen = eval(r.stdout.split("seen ", 1)[1])
    assert sorted(seen.values()) == [-signal.SIGTERM, 0, 1, 3], seen
    got = q(tmp_path / "w.duckdb", "SELECT pid, exit_status, ended_early FROM processes "
                                   f"WHERE pid IN ({', '.join(map(str, seen))})")
    assert sorted(got) == sorted((pid, 128 - c if c < 0 else c, False) for pid, c in seen.items())


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_a_multiprocessing_worker_killed_by_sigkill_keeps_the_status_its_parent_saw(tmp_path,
                                                                                     method):
    """A worker killed by SIGKILL (the OOM killer) cannot keep its status itself: its parent,
    profiled too, saw it in Process.exitcode (-9), and that is its exit_status (137); it still
    ended early."""
    p = script(tmp_path, f"""
        import multiprocessing as mp, os, signal
        def killed():
            os.kill(os.getpid(), signal.SIGKILL)
        if __name__ == "__main__":
            w = mp.get_context("{method}").Process(target=killed)
            w.start(); w.join()
            print("seen", w.pid, w.exitcode)
    """)
    r = cli(["run", "-o", "w.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    pid, code = map(int, r.stdout.split("seen ", 1)[1].split())
    assert code == -signal.SIGKILL
    assert q(tmp_path / "w.duckdb", f"SELECT exit_status, ended_early FROM processes "
                                    f"WHERE pid = {pid}") == [(128 + signal.SIGKILL, True)]


_ENDINGS = """
    import os, signal, subprocess, sys, cuptiprof
    with cuptiprof.range("step", step=0):
        pass
    endings = {"sigkill": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
               "os_exit": "import os; os._exit(7)",
               "sigusr1": "import os, signal; os.kill(os.getpid(), signal.SIGUSR1)",
               # the status of the last program the process ran: a shell's, not Python's
               "exec_sh": "import os; os.execv('/bin/sh', ['sh', '-c', 'exit 6'])"}
    seen = {}
    for name, src in endings.items():
        child = subprocess.Popen([sys.executable, "-c", src])
        child.wait()
        seen[name] = (child.pid, child.returncode)
    pid = os.fork()   # reaped by os.waitpid itself
    if pid == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    seen["forked"] = (pid, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    print("seen", seen)
    open("seen.txt", "w").write(repr(seen))
"""


def _children_seen(out, stdout: str) -> dict:
    seen = eval(stdout.split("seen ", 1)[1])
    rows = dict((pid, (code, early)) for pid, code, early in q(
        out, "SELECT pid, exit_status, ended_early FROM processes"))
    return {name: (code, rows.get(pid)) for name, (pid, code) in seen.items()}


_EXPECTED = {"sigkill": (-signal.SIGKILL, (128 + signal.SIGKILL, True)),
             "os_exit": (7, (7, True)),
             "sigusr1": (-signal.SIGUSR1, (128 + signal.SIGUSR1, True)),
             "exec_sh": (6, (6, False)),
             "forked": (-signal.SIGKILL, (128 + signal.SIGKILL, True))}


def test_a_child_that_could_not_keep_its_status_gets_the_one_its_parent_saw(tmp_path):
    """A child killed by SIGKILL or by a signal cuptiprof does not handle (SIGUSR1), or ended by
    os._exit outside multiprocessing, or whose last program was not Python, kept no status of
    its own: its parent, profiled too, reaped it (subprocess.Popen.wait, os.waitpid) and that
    status is its exit_status (128+N for signal N); each that did not close its recording
    still ended early."""
    p = script(tmp_path, _ENDINGS)
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _children_seen(tmp_path / "c.duckdb", r.stdout) == _EXPECTED


def test_a_run_merged_from_its_parts_keeps_the_status_a_parent_saw(tmp_path):
    """`cuptiprof merge` of the parts of a run whose launcher was killed reads the statuses the
    parents saw as the launcher would have."""
    p = script(tmp_path, _ENDINGS)
    parts = _run_with_launcher_killed_at_the_end(tmp_path, p)
    m = cli(["merge", *sorted(x.name for x in parts.glob("*.duckdb")), "-o", "../k.duckdb"], parts)
    assert m.returncode == 0, m.stderr
    seen = eval((tmp_path / "seen.txt").read_text())
    rows = dict((pid, (code, early)) for pid, code, early in q(
        tmp_path / "k.duckdb", "SELECT pid, exit_status, ended_early FROM processes"))
    assert {name: (code, rows.get(pid)) for name, (pid, code) in seen.items()} == _EXPECTED


def test_a_child_its_parent_never_waited_for_keeps_no_status(tmp_path):
    """A child its parent left running (daemonized) and never reaped: nobody profiled saw how
    it ended, and its exit_status stays NULL."""
    p = script(tmp_path, """
        import os, pathlib, subprocess, sys, time
        src = "import os, pathlib, time; pathlib.Path('up').touch(); time.sleep(0.5); os._exit(7)"
        child = subprocess.Popen([sys.executable, "-c", src], start_new_session=True)
        while not os.path.exists("up"):
            time.sleep(0.01)
        print("child", child.pid)
    """)
    r = cli(["run", "-o", "d.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split("child ", 1)[1].split()[0])
    assert q(tmp_path / "d.duckdb", f"SELECT exit_status, ended_early FROM processes "
                                    f"WHERE pid = {pid}") == [(None, True)]


def test_a_forked_child_that_died_before_recording_anything_is_a_process_of_the_run(tmp_path):
    """A child forked (os.fork) that recorded nothing and ended without its exit handlers (a
    crash, os._exit) is still one of the run's processes, ended early, with its own start."""
    p = script(tmp_path, """
        import os, time, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        time.sleep(0.01)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    """)
    r = cli(["run", "-o", "f.duckdb", "--light", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "f.duckdb"
    assert q(out, "SELECT ended_early FROM processes ORDER BY start_ns") == [(False,), (True,)]
    assert q(out, "SELECT max(end_ns) < (SELECT max(start_ns) FROM processes) FROM ranges") == \
        [(True,)]


def test_a_child_forked_after_cpu_ops_were_recorded_ends_with_its_own_status(tmp_path):
    """Without a GPU, torch.profiler ran before the program forked: a child that ended through
    sys.exit (not os._exit) ran kineto's destructors on its parent's threads: killed by SIGABRT
    (std::system_error), or hung for ever, and the run with it. It ends with its own status."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import os, sys, torch, cuptiprof
        x = torch.ones(4)
        with cuptiprof.range("step"):
            x + x
        pid = os.fork()
        if pid == 0:
            with cuptiprof.range("step"):
                pass
            sys.exit(5)
        print("child", pid, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """)
    r = cli(["run", "-o", "k.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    pid, code = map(int, r.stdout.split("child ", 1)[1].split())
    assert code == 5
    out = tmp_path / "k.duckdb"
    assert q(out, f"SELECT exit_status, ended_early FROM processes WHERE pid = {pid}") == \
        [(5, False)]
    assert q(out, f"SELECT count(*) FROM ranges WHERE kind = 'step' AND pid = {pid}") == [(1,)]


def test_a_command_with_arguments_past_128_kib_runs_as_it_would_unprofiled(tmp_path):
    """The run's settings carried the whole command in one environment variable, which Linux
    caps at 128 KiB: a command that starts without cuptiprof failed to start under it ("cannot
    run (Argument list too long)"). It runs, and the run keeps the whole command."""
    p = script(tmp_path, "import sys; print('args', len(sys.argv) - 1); sys.exit(3)\n")
    args = ["a" * 100] * 2000
    r = cli(["run", "-o", "l.duckdb", "--no-report", "--", PY, p, *args], tmp_path)
    assert r.returncode == 3, r.stderr
    assert "args 2000" in r.stdout
    assert q(tmp_path / "l.duckdb", "SELECT length(command) > 200000 FROM runs") == [(True,)]


def test_a_command_with_arguments_that_are_no_utf8_is_recorded(tmp_path):
    """An argument of bytes that are no UTF-8 (a file name) reached DuckDB as a lone surrogate:
    the process stopped recording its ranges ("range bookkeeping failed") and the launcher's
    merge ended in a traceback, leaving OUT.parts. The command is written as a shell line, such
    bytes and a newline in bash's $'...' quoting."""
    p = script(tmp_path, """
        import cuptiprof
        with cuptiprof.range("step"):
            pass
    """)
    r = cli(["run", "-o", "u.duckdb", "--no-report", "--", PY, p, os.fsdecode(b"\xff.bin"),
             "a\nb"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "warning" not in r.stderr, r.stderr
    out = tmp_path / "u.duckdb"
    want = f"{PY} {p} $'\\xff.bin' $'a\\x0ab'"
    assert q(out, "SELECT command FROM runs") == [(want,)]
    assert q(out, "SELECT command FROM processes") == [(want,)]
    assert q(out, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]


@pytest.mark.parametrize("mode", [["--light"], []], ids=["light", "profile"])
def test_a_range_name_and_a_log_of_bytes_that_are_no_utf8_are_recorded(tmp_path, mode):
    """A range named after a file whose name is no UTF-8 (a lone surrogate in Python) stopped
    every later range ("range bookkeeping failed"), and such a log record failed the part's
    last write: the process had no step at all, ended early. Such bytes are kept as \\xNN."""
    p = script(tmp_path, """
        import logging, os, cuptiprof
        name = os.fsdecode(b"load \\xff.bin")
        for i in range(3):
            with cuptiprof.range("step"):
                with cuptiprof.range(name):
                    logging.getLogger("app").warning("read %s", name)
    """)
    r = cli(["run", "-o", "n.duckdb", "--no-report", *mode, "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "cuptiprof: warning" not in r.stderr, r.stderr
    out = tmp_path / "n.duckdb"
    assert q(out, "SELECT kind, name, count(*) FROM ranges WHERE kind IN ('step', 'user') "
                  "GROUP BY ALL ORDER BY 1") == [("step", "step", 3), ("user", "load \\xff.bin", 3)]
    assert q(out, "SELECT DISTINCT message FROM logs WHERE logger = 'app'") == \
        [("read load \\xff.bin",)]
    assert q(out, "SELECT ended_early FROM processes") == [(False,)]


@pytest.mark.parametrize("code", [0, 4])
def test_a_command_that_removes_the_runs_parts_folder_says_so(tmp_path, code):
    """A command that cleans its folder removed OUT.parts under the run: the launcher ended in
    "OUT.parts/run.json.tmp: No such file or directory". It says what happened, in one line
    of its own, and exits with the command's failure, or 1 (no file was written)."""
    p = script(tmp_path, f"""
        import shutil, sys, cuptiprof
        with cuptiprof.range("step"):
            pass
        shutil.rmtree("g.duckdb.parts")
        sys.exit({code})
    """)
    r = cli(["run", "-o", "g.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == (code or 1), r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("cuptiprof: error:")]
    assert errors == ["cuptiprof: error: g.duckdb.parts, where the command's processes were "
                      "recorded, was removed while it ran: g.duckdb was not written; keep the "
                      "folder (or use -o elsewhere) and run again"], r.stderr
    assert "Traceback" not in r.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["prog.py"]


def test_child_that_spawns_children(tmp_path):
    p = script(tmp_path, """
        import multiprocessing as mp, cuptiprof

        def work(i):
            for s in range(2):
                with cuptiprof.range("step", step=s):
                    sum(range(1000))
            return i

        if __name__ == "__main__":
            with cuptiprof.range("step", step=0):
                pass
            ctx = mp.get_context("spawn")
            ps = [ctx.Process(target=work, args=(i,)) for i in range(2)]
            for x in ps: x.start()
            for x in ps: x.join()
            print("exitcodes", [x.exitcode for x in ps])
    """)
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "m.duckdb"
    assert q(out, "SELECT count(*) FROM runs") == [(1,)]
    # the parent and both workers recorded their steps into the one run
    per_pid = q(out, "SELECT pid, count(*) FROM ranges WHERE kind='step' GROUP BY pid ORDER BY 2")
    assert [n for _, n in per_pid] == [1, 2, 2]
    assert q(out, "SELECT count(*) FROM processes WHERE ended_early") == [(0,)]


def test_a_helper_that_records_nothing_has_the_end_it_recorded_as_it_ended(tmp_path):
    """A short-lived Python helper the command starts records no range and writes no part
    file; its processes row comes from its markers alone, and still has its end (written by
    the helper as it exited), so its duration is not NULL; it did not end early."""
    p = script(tmp_path, """
        import subprocess, sys, cuptiprof
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        with cuptiprof.range("step", step=0):
            pass
    """)
    r = cli(["run", "-o", "h.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "h.duckdb"
    rows = q(out, "SELECT command LIKE '%-c pass', end_ns - start_ns > 0, ended_early, "
                  "end_ns <= (SELECT end_ns FROM runs) FROM processes ORDER BY command LIKE '%-c pass'")
    assert rows == [(False, True, False, True), (True, True, False, True)], rows


def test_command_not_found(tmp_path):
    r = cli(["run", "-o", "x.duckdb", "--", "no-such-command-xyz"], tmp_path)
    assert r.returncode == 2
    one_line_error(r.stderr)
    assert "no-such-command-xyz" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_command_that_cannot_run_says_why(tmp_path):
    (tmp_path / "infer.py").write_text("print('hi')\n")      # not executable
    (tmp_path / "models").mkdir()
    cases = {"./infer.py": "not executable; run it with python", "./models": "is a directory",
             "./gone.py": "no such file"}
    for cmd, words in cases.items():
        r = cli(["run", "-o", "x.duckdb", "--", cmd], tmp_path)
        assert r.returncode == 2, r.stderr
        one_line_error(r.stderr)
        assert words in r.stderr, r.stderr
    r = cli(["run", "-o", "x.duckdb", "--overhead", "--", PY, "-c", "pass"], tmp_path)
    assert r.returncode == 2 and "writes no file" in r.stderr
    one_line_error(r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["infer.py", "models"]


def test_a_command_name_with_a_newline_or_bytes_that_are_no_utf8_is_one_line(tmp_path):
    """The error named the command as given: a newline in it split the one error line in two,
    and bytes that are no UTF-8 showed as \\udcff. It is named as a shell word ($'...')."""
    (tmp_path / "a\nb.py").write_text("print('hi')\n")      # not executable
    cases = {"no\nsuch": "$'no\\x0asuch': command not found",
             os.fsdecode(b"\xff"): "$'\\xff': command not found",
             "./a\nb.py": "$'./a\\x0ab.py': not executable"}
    for cmd, words in cases.items():
        r = cli(["run", "-o", "x.duckdb", "--", cmd], tmp_path)
        assert r.returncode == 2, r.stderr
        one_line_error(r.stderr)
        assert r.stderr.startswith("cuptiprof: error: " + words), r.stderr


def test_warmup_that_takes_every_step_says_so(tmp_path):
    p = script(tmp_path, """
        import cuptiprof
        for i in range(3):
            with cuptiprof.range("step", step=i):
                pass
    """)
    r = cli(["run", "-o", "w.duckdb", "--warmup", "10", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "every step the program marked (3) was warm-up (--warmup 10)" in r.stderr
    assert "no steps were marked" not in r.stderr


@pytest.mark.parametrize("option, says", [
    (["--step-range", "denoise_step"], "no steps were marked: the program opened no range named "
     "'denoise_step' (--step-range); the ranges it opened: attention"),
    (["--step-fn", "__main__:unused"], "no steps were marked: the program never called "
     "__main__:unused (--step-fn); give the function that does a step's work"),
    ([], "no steps were marked; mark them with cuptiprof.range('step'), --step-range NAME or "
     "--step-fn MODULE:QUALNAME"),
])
def test_no_steps_notice_speaks_of_the_step_option_given(tmp_path, option, says):
    """Telling a user who gave --step-range or --step-fn to mark steps with them does not help:
    the notice says what that option did not find."""
    p = script(tmp_path, """
        import cuptiprof
        def unused():
            pass
        for i in range(2):
            with cuptiprof.range("attention"):
                sum(range(1000))
    """)
    r = cli(["run", "-o", "n.duckdb", *option, "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"cuptiprof: notice: {says}\n" in r.stderr, r.stderr[-600:]


@pytest.mark.parametrize("args, words", [
    (["--steps", "0"], "--steps 0"),
    (["--warmup", "-1"], "--warmup"),
    (["--step-fn", "no_such_module_xyz:f"], "cannot import"),
    (["--step-fn", "not-a-spec"], "MODULE:QUALNAME"),
    (["--kinds", "bogus"], "bogus"),
    (["--kinds", ","], "--kinds ',': no kind given"),   # --kinds "$KINDS" with KINDS unset, or a stray comma
    (["-o", "missing-dir/x.duckdb"], "does not exist"),
    (["-o", ""], "the output path is empty"),   # -o "$OUT" with OUT unset
    (["-o", " "], "-o ' ': the output path is empty"),
    (["--step-range", ""], "--step-range '': empty; give the name of the range"),
    (["--step-fn", " "], "--step-fn ' ': empty; give MODULE:QUALNAME"),
    (["--overhead", "-o", ""], "leave out -o"),
    (["--repeat", "3"], "--repeat 3 goes with --overhead"),   # the default count, given alone
    (["--repeat", "5"], "--repeat 5 goes with --overhead"),
    (["--light", "--kinds", "kernel"], "--light"),
    (["--log-level", "loud"], "--log-level loud"),
])
def test_bad_input_one_line(tmp_path, args, words):
    r = cli(["run", *args, "--", PY, "-c", "pass"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert words in r.stderr
    assert not any(p.suffix == ".duckdb" or p.name.endswith(".parts") for p in tmp_path.iterdir())


def test_an_output_that_is_a_file_the_command_names(tmp_path):
    """`-o infer.py` for `-o infer.duckdb`: with --force the run's file replaced the script it
    ran, and without it the line said to pass --force."""
    p = script(tmp_path, "pass\n", name="infer.py")
    for force in ([], ["--force"]):
        r = cli(["run", "-o", "infer.py", *force, "--", PY, p], tmp_path)
        assert r.returncode == 2, r.stderr
        one_line_error(r.stderr)
        assert "error: infer.py: is also an input; write to another path" in r.stderr
    assert p.read_text() == "pass\n" and os.listdir(tmp_path) == ["infer.py"]


def test_unwritable_output_dir(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    r = cli(["run", "-o", d / "x.duckdb", "--", PY, "-c", "pass"], tmp_path)
    assert r.returncode == 2
    one_line_error(r.stderr)


def test_an_output_the_system_refuses_names_the_output_given(tmp_path):
    """/proc passes the writable check as root, then refuses the file: the line names the
    output the user gave and why, not the run's internal parts folder."""
    r = cli(["run", "-o", "/proc/x.duckdb", "--", PY, "-c", "pass"], tmp_path)
    assert r.returncode == 2
    one_line_error(r.stderr)
    assert "/proc/x.duckdb" in r.stderr and ".parts" not in r.stderr, r.stderr


def test_output_another_run_is_writing(tmp_path):
    parts = tmp_path / "busy.duckdb.parts"
    parts.mkdir()
    (parts / "launcher.pid").write_text(str(os.getpid()))   # a live writer
    r = cli(["run", "-o", "busy.duckdb", "--", PY, "-c", "pass"], tmp_path)
    assert r.returncode == 2
    one_line_error(r.stderr)
    assert "another cuptiprof run" in r.stderr
    assert not (tmp_path / "busy.duckdb").exists()


def test_existing_output_is_not_overwritten(tmp_path):
    (tmp_path / "old.duckdb").write_text("previous run")
    r = cli(["run", "-o", "old.duckdb", "--", PY, "-c", "pass"], tmp_path)
    assert r.returncode == 2
    one_line_error(r.stderr)
    assert (tmp_path / "old.duckdb").read_text() == "previous run"


def test_default_output_name_is_unique(tmp_path):
    for _ in range(2):
        r = cli(["run", "--no-report", "--", PY, "-c", "pass"], tmp_path)
        assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in tmp_path.glob("cuptiprof-*.duckdb"))
    assert len(files) == 2 and files[0] != files[1]


def test_a_default_name_another_run_takes_first_is_passed_over(tmp_path):
    """Two runs without -o begun in the same second in one folder: both chose the same default
    name, and the one that came second to reserve it was refused ('another cuptiprof run is
    writing this file; choose another -o') over a name the user never chose. It takes the
    next one."""
    patch = """
        import os
        from cuptiprof.run import launcher
        real, taken = launcher.reserve, []

        def reserve(out, force=False):   # the other run reserves the name just before this one
            if not taken:
                taken.append(out)
                other = out.with_name(out.name + ".parts")
                other.mkdir()
                (other / "launcher.pid").write_text(str(os.getppid()))   # alive
            return real(out, force)
        launcher.reserve = reserve
    """
    r = cli_driven(patch, ["run", "--no-report", "--", PY, "-c", "pass"], tmp_path)
    assert r.returncode == 0, r.stderr
    (other,) = tmp_path.glob("cuptiprof-*.duckdb.parts")
    (mine,) = tmp_path.glob("cuptiprof-*.duckdb")
    assert mine.name != other.name[:-len(".parts")]
    assert q(mine, "SELECT status FROM runs") == [("complete",)]


def test_not_a_python_command(tmp_path):
    r = cli(["run", "-o", "sh.duckdb", "--no-report", "--", "sh", "-c", "exit 4"], tmp_path)
    assert r.returncode == 4
    assert q(tmp_path / "sh.duckdb", "SELECT exit_status FROM processes") == [(4,)]


def test_collector_path_with_fake_cupti(tmp_path):
    p = script(tmp_path, """
        import logging, cuptiprof
        for i in range(4):
            with cuptiprof.range("step", step=i):
                logging.getLogger("app").warning("in step %d", i)
    """)
    r = cli(["run", "-o", "g.duckdb", "--no-report", "--warmup", "1", "--steps", "2", "--", PY, p],
            tmp_path, CUPTIPROF_FAKE_CUPTI="1")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "g.duckdb"
    assert q(out, "SELECT count(*) FROM runs") == [(1,)]
    assert q(out, "SELECT list(DISTINCT step ORDER BY step) FROM kernels") == [([1, 2],)]
    assert q(out, "SELECT ended_early, exit_status FROM processes") == [(False, 0)]
    assert q(out, "SELECT message, step FROM logs WHERE logger='app' ORDER BY time_ns") == [
        ("in step 0", None), ("in step 1", 1), ("in step 2", 2), ("in step 3", None)]


def test_rank_from_an_mpi_launcher(tmp_path):
    """A process started by mpirun (Open MPI) records its rank and world size, as one started
    by torchrun does."""
    p = script(tmp_path, "print('rank process')\n")
    r = cli(["run", "-o", "mpi.duckdb", "--no-report", "--", PY, p], tmp_path,
            OMPI_COMM_WORLD_RANK="2", OMPI_COMM_WORLD_LOCAL_RANK="0", OMPI_COMM_WORLD_SIZE="4")
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "mpi.duckdb", "SELECT rank, local_rank, world_size FROM processes") \
        == [(2, 0, 4)]


def test_a_failing_command_with_no_python_process_says_none_was_profiled(tmp_path):
    """A command that is not Python exits non-zero: the notice is that cuptiprof profiled none
    of its processes, not that it failed before recording anything."""
    r = cli(["run", "-o", "s.duckdb", "--", "sh", "-c", "exit 4"], tmp_path)
    assert r.returncode == 4, r.stderr
    assert "no process of the command was profiled" in r.stderr, r.stderr
    assert "before anything was recorded" not in r.stderr, r.stderr


def test_a_command_with_no_python_process_says_so(tmp_path):
    r = cli(["run", "-o", "s.duckdb", "--", "sleep", "0.1"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "no process of the command was profiled" in r.stderr
    assert "no GPU activity was captured" not in r.stderr and "no steps were marked" not in r.stderr
    assert q(tmp_path / "s.duckdb", "SELECT count(*) FROM processes") == [(1,)]


def test_cuptiprof_disable_left_set_for_the_whole_command_says_so(tmp_path):
    """CUPTIPROF_DISABLE=1 exported in the shell keeps out every process: the notice names it,
    not a Python that cannot import cuptiprof."""
    p = script(tmp_path, "print('ran')\n")
    r = cli(["run", "-o", "d.duckdb", "--", PY, p], tmp_path, CUPTIPROF_DISABLE="1")
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    assert ("cuptiprof: notice: no process of the command was profiled: CUPTIPROF_DISABLE=1 is "
            "set in the environment, which keeps every process out; unset it (unset "
            "CUPTIPROF_DISABLE) and run again") in r.stderr, r.stderr[-500:]
    # =0 keeps nothing out: a command with no Python process is told the usual reason
    r = cli(["run", "-o", "e.duckdb", "--", "sh", "-c", "true"], tmp_path, CUPTIPROF_DISABLE="0")
    assert r.returncode == 0, r.stderr
    assert ("cuptiprof: notice: no process of the command was profiled: cuptiprof records the "
            "Python processes") in r.stderr, r.stderr[-500:]


@pytest.mark.parametrize("how", ["env", "sh"])
def test_a_command_that_sets_pythonpath_over_cuptiprofs_says_so(tmp_path, how):
    """`env PYTHONPATH=src python app.py` replaces the PYTHONPATH that loads cuptiprof in every
    Python: nothing was profiled, and the notice blamed a Python that cannot import cuptiprof."""
    p = script(tmp_path, "print('ran')\n")
    cmd = (["env", f"PYTHONPATH={tmp_path}", PY, p] if how == "env"
           else ["sh", "-c", f"PYTHONPATH={tmp_path} {PY} {p}"])
    r = cli(["run", "-o", "p.duckdb", "--no-report", "--", *cmd], tmp_path)
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    notice = [ln for ln in r.stderr.splitlines() if ln.startswith("cuptiprof: notice:")]
    assert len(notice) == 1 and "sets PYTHONPATH" in notice[0] and "$PYTHONPATH" in notice[0], \
        r.stderr
    # one that adds to it is profiled
    cmd = ["sh", "-c", f"PYTHONPATH={tmp_path}:$PYTHONPATH {PY} {p}"]
    r = cli(["run", "-o", "q.duckdb", "--no-report", "--", *cmd], tmp_path)
    assert r.returncode == 0 and "notice" not in r.stderr, r.stderr


@pytest.mark.parametrize("flag, why", [
    ("-I", "ignores PYTHONPATH, through which cuptiprof loads"),
    ("-E", "ignores PYTHONPATH, through which cuptiprof loads"),
    ("-S", "skips the site module, which loads cuptiprof")])
def test_a_python_started_with_a_flag_that_keeps_cuptiprof_out_says_so(tmp_path, flag, why):
    """`python -I app.py` (or -E, -S) loads no cuptiprof: nothing was profiled, and the notice
    blamed a Python that cannot import cuptiprof, pointing at a warning that was not there."""
    p = script(tmp_path, "print('ran')\n")
    r = cli(["run", "-o", "i.duckdb", "--no-report", "--", PY, "-B" + flag[1], p], tmp_path)
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    assert r.stderr.splitlines() == [
        f"cuptiprof: notice: no process of the command was profiled: python {flag} {why} in "
        f"every Python; leave out {flag}", "cuptiprof: wrote i.duckdb"]


@pytest.mark.parametrize("report", [[], ["--no-report"]], ids=["report", "no-report"])
def test_a_shell_command_that_did_not_find_its_program_says_so(tmp_path, report):
    """`sh -c 'pyhton app.py'` (a typo) exits 127, the shell having said so: the notice blamed a
    Python that cannot import cuptiprof, pointing at a warning that was not there."""
    r = cli(["run", "-o", "t.duckdb", *report, "--", "sh", "-c", "no-such-program-xyz app.py"],
            tmp_path)
    assert r.returncode == 127, r.stderr
    notice = [ln for ln in r.stderr.splitlines() if ln.startswith("cuptiprof: notice:")]
    assert notice == ["cuptiprof: notice: no process of the command was profiled: it exited with "
                      "status 127, a program it started was not found (the shell or env said "
                      "which, before this)"], r.stderr


def test_a_run_that_profiled_no_process_says_so_without_the_report_too(tmp_path):
    """--no-report leaves out the report, not the one line saying the file holds nothing of
    the command: CUPTIPROF_DISABLE left set wrote an empty file without a word."""
    p = script(tmp_path, "print('ran')\n")
    r = cli(["run", "-o", "d.duckdb", "--no-report", "--", PY, p], tmp_path, CUPTIPROF_DISABLE="1")
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    assert r.stderr.splitlines() == [
        "cuptiprof: notice: no process of the command was profiled: CUPTIPROF_DISABLE=1 is set "
        "in the environment, which keeps every process out; unset it (unset CUPTIPROF_DISABLE) "
        "and run again", "cuptiprof: wrote d.duckdb"]


def test_kinds_without_a_gpu_says_it_has_no_effect(tmp_path):
    p = script(tmp_path, "import cuptiprof\nwith cuptiprof.range('step', step=0): pass\n")
    r = cli(["run", "-o", "k.duckdb", "--kinds", "kernel", "memcpy", "--", PY, p], tmp_path,
            CUDA_VISIBLE_DEVICES="")   # no GPU, also on a machine that has one
    assert r.returncode == 0, r.stderr
    assert "no GPU activity was captured" in r.stderr
    assert "--kinds kernel memcpy chooses CUPTI activity kinds; without a GPU it has no effect" \
        in r.stderr


def test_no_gpu_and_no_torch_op_does_not_claim_cpu_op_times(tmp_path):
    """Without a GPU, a program that runs no torch op records none: the notice says so instead of
    pointing at CPU op times that the report does not hold."""
    p = script(tmp_path, "import cuptiprof\nwith cuptiprof.range('step', step=0): pass\n")
    r = cli(["run", "-o", "n.duckdb", "--", PY, p], tmp_path, CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    assert "no GPU activity was captured (no CUDA GPU found), and no CPU op" in r.stderr
    assert "CPU op times" not in r.stderr, r.stderr[-800:]
    # nor does its data_quality row say that kernels holds CPU ops
    (detail,) = q(tmp_path / "n.duckdb", "SELECT detail FROM data_quality WHERE check_name = 'no_gpu'")
    assert "and no CPU op" in detail[0] and "kernels holds" not in detail[0], detail


@pytest.mark.parametrize("step", ["cuptiprof.step(i)", "cuptiprof.range('step', step=i)"])
def test_no_gpu_and_every_step_warm_up_does_not_say_no_torch_op_ran(tmp_path, step):
    """Without a GPU, torch ops are recorded in the steps after the warm-up: a run whose steps
    were all warm-up has none, though the program ran some. The first notice says why, next
    to the warm-up one, not that the program ran no torch op."""
    p = script(tmp_path, f"""
        import torch, cuptiprof
        x = torch.ones(8)
        for i in range(7):
            with {step}:
                x = x @ torch.ones(8, 8)
    """)
    r = cli(["run", "-o", "w.duckdb", "--warmup", "10", "--", PY, p], tmp_path,
            CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    notices = [l for l in r.stderr.splitlines() if l.startswith("cuptiprof: notice:")]
    assert notices == [
        "cuptiprof: notice: no GPU activity was captured (no CUDA GPU found), and no CPU op was "
        "recorded: no step got past the warm-up",
        "cuptiprof: notice: every step the program marked (7) was warm-up (--warmup 10); lower "
        "--warmup or run more steps"], r.stderr[-800:]
    # the file says so too, not that kernels holds CPU ops
    assert q(tmp_path / "w.duckdb", "SELECT detail FROM data_quality WHERE check_name = "
             "'no_gpu'") == [("no GPU activity was captured (no CUDA GPU found), and no CPU op "
                              "was recorded: no step got past the warm-up",)]


def test_sighup_is_forwarded_and_the_file_written(tmp_path):
    """A hung-up terminal or ssh session (SIGHUP) ends the program as SIGTERM does: the launcher
    passes it on and writes OUT (no OUT.parts left behind), and the program writes the step it
    was inside before it ends."""
    ready = tmp_path / "ready"
    p = script(tmp_path, f"""
        import time, pathlib, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        with cuptiprof.range("step", step=1):
            pathlib.Path({str(ready)!r}).write_text("x")
            time.sleep(60)
    """)
    proc = popen(["run", "-o", "h.duckdb", "--no-report", "--", PY, p], tmp_path)
    wait_for(ready, proc)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGHUP, err
    out = tmp_path / "h.duckdb"
    assert not (tmp_path / "h.duckdb.parts").exists()
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]
    assert q(out, "SELECT step, end_ns IS NULL FROM ranges WHERE kind='step' ORDER BY step") \
        == [(0, False), (1, True)]
    assert q(out, "SELECT bool_or(ended_early) FROM processes") == [(False,)]



def test_a_run_started_with_stdout_and_stderr_closed_is_not_ended_by_what_the_program_writes(
        tmp_path):
    """`cuptiprof run ... >&- 2>&-`: the SIGTERM watcher's wakeup pipe took descriptors 1 and 2
    of the program, so a line a C library wrote to stderr went into it, and one that began with
    byte 15 ended the program as a SIGTERM (exit 143, the run failed)."""
    import subprocess
    from _run_helpers import env
    p = script(tmp_path, """
        import os, time, cuptiprof
        with cuptiprof.range("step", step=0):
            try:
                os.write(2, bytes([15]) + b" a C library's warning\\n")
            except OSError:
                pass
            time.sleep(1.5)   # past the watcher's wait for a handler that never runs
    """)
    r = subprocess.run([PY, "-m", "cuptiprof", "run", "-o", "c.duckdb", "--no-report", "--", PY,
                        str(p)], cwd=tmp_path, env=env(), timeout=120,
                       preexec_fn=lambda: (os.close(1), os.close(2)))
    assert r.returncode == 0
    assert q(tmp_path / "c.duckdb", "SELECT status FROM runs") == [("complete",)]


@pytest.mark.parametrize("report", [False, True])
def test_a_terminal_that_went_away_keeps_the_status_of_the_sighup(tmp_path, report):
    """A terminal closed under the run (SIGHUP, then every write to it fails with EIO): the
    last lines the launcher printed there failed, and it exited 1, not 128+SIGHUP as the
    program, which it passes on."""
    import pty
    import subprocess

    from _run_helpers import env

    ready = tmp_path / "ready"
    p = _one_step_then_sleep(tmp_path, ready)
    master, slave = pty.openpty()
    args = ["run", "-o", "t.duckdb"] + ([] if report else ["--no-report"]) + ["--", PY, p]
    proc = subprocess.Popen([PY, "-m", "cuptiprof", *args], cwd=tmp_path, env=env(),
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        wait_for(ready, proc)
    finally:
        os.close(master)   # the terminal goes away
    os.killpg(proc.pid, signal.SIGHUP)
    assert proc.wait(timeout=60) == 128 + signal.SIGHUP
    assert q(tmp_path / "t.duckdb", "SELECT status FROM runs") == [("interrupted",)]


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_a_signal_the_run_was_started_ignoring_stays_ignored(tmp_path, sig):
    """`nohup cuptiprof run -- CMD` (SIGHUP ignored), or a background job of a script (SIGINT
    ignored): the program inherits the ignored signal and survives it, as without cuptiprof.
    The launcher's forwarding handler replaced the ignore, so the program started with the
    default action and died of the hang-up it was started to survive."""
    import subprocess

    from _run_helpers import env

    ready = tmp_path / "ready"
    p = script(tmp_path, f"""
        import os, pathlib, signal, time
        print(signal.getsignal({int(sig)}) is signal.SIG_IGN, flush=True)
        pathlib.Path({str(ready)!r}).write_text("x")
        time.sleep(1)
        print("survived", flush=True)
    """)
    proc = subprocess.Popen([PY, "-m", "cuptiprof", "run", "-o", "i.duckdb", "--no-report", "--",
                             PY, p], cwd=tmp_path, env=env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(sig, signal.SIG_IGN))
    wait_for(ready, proc)
    os.killpg(proc.pid, sig)   # the whole job: the terminal's hang-up, a Ctrl-C
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "True\nsurvived\n"), err
    assert q(tmp_path / "i.duckdb", "SELECT status FROM runs") == [("complete",)]

@pytest.mark.parametrize("given, kinds", [
    (["kernel,memcpy"], ["kernel", "memcpy"]),
    (["kernel,memcpy", "memset"], ["kernel", "memcpy", "memset"]),   # both forms, mixed
    (["kernel,", "kernel", "api"], ["kernel", "api"]),
    (["kernel memcpy"], ["kernel", "memcpy"]),   # --kinds "$KINDS": spaces inside one argument
    (["kernel, memset"], ["kernel", "memset"]),
])
def test_kinds_are_taken_comma_or_space_separated(tmp_path, given, kinds):
    p = script(tmp_path, "import cuptiprof\nwith cuptiprof.range('step', step=0): pass\n")
    r = cli(["run", "-o", "k.duckdb", "--no-report", "--kinds", *given, "--", PY, p], tmp_path,
            CUPTIPROF_FAKE_CUPTI="1")
    assert r.returncode == 0, r.stderr
    assert json.loads(q(tmp_path / "k.duckdb", "SELECT settings FROM runs")[0][0])["kinds"] == kinds


@pytest.mark.parametrize("given, words", [(["kernel,bogus"], "--kinds bogus: unknown kind"),
                                          (["kernel", "memcpy,bogus"], "--kinds bogus: unknown kind"),
                                          ([","], "no kind given")])
def test_an_unknown_kind_in_a_comma_list_is_refused_in_one_line(tmp_path, given, words):
    r = cli(["run", "--kinds", *given, "--", PY, "-c", "pass"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert words in r.stderr


def test_a_run_inside_a_run_stands_aside_and_the_outer_one_records_the_command(tmp_path):
    """`cuptiprof run -o outer -- python -m cuptiprof run -o inner -- python x.py`: the outer
    run records x.py's steps (as a profile() inside a run stands aside); the inner one says so,
    writes nothing and passes the command's exit status on."""
    p = script(tmp_path, """
        import sys, cuptiprof
        for i in range(2):
            with cuptiprof.range("step", step=i):
                pass
        sys.exit(3)
    """)
    r = cli(["run", "-o", "outer.duckdb", "--no-report", "--", PY, "-m", "cuptiprof", "run",
             "-o", "inner.duckdb", "--", PY, p], tmp_path, CUPTIPROF_FAKE_CUPTI="1")
    assert r.returncode == 3, r.stderr
    assert ("cuptiprof: notice: this `cuptiprof run` runs under another one, which records its "
            f"command into {tmp_path / 'outer.duckdb'}: it writes no inner.duckdb") in r.stderr
    assert not (tmp_path / "inner.duckdb").exists()
    assert not (tmp_path / "inner.duckdb.parts").exists()
    assert q(tmp_path / "outer.duckdb", "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(2,)]
    assert q(tmp_path / "outer.duckdb", "SELECT status FROM runs") == [("failed",)]


def test_an_overhead_measurement_inside_a_run_stands_aside_too(tmp_path):
    """Its runs would take the command's processes from the outer run, which would then record
    nothing: the command runs once, recorded by the outer run, and no table is printed."""
    p = script(tmp_path, """
        import cuptiprof
        for i in range(2):
            with cuptiprof.range("step", step=i):
                pass
    """)
    r = cli(["run", "-o", "outer.duckdb", "--no-report", "--", PY, "-m", "cuptiprof", "run",
             "--overhead", "--repeat", "1", "--", PY, p], tmp_path, CUPTIPROF_FAKE_CUPTI="1")
    assert r.returncode == 0, r.stderr
    assert "runs under another one" in r.stderr and "it writes no file" in r.stderr
    assert "cuptiprof overhead:" not in r.stdout
    assert q(tmp_path / "outer.duckdb", "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(2,)]


def test_a_run_inside_a_run_with_a_mistake_in_its_options_says_so(tmp_path):
    """Its settings are not used, but a mistake in them is the user's all the same: one line,
    exit 2, and the command not run."""
    p = script(tmp_path, "print('ran')")
    r = cli(["run", "-o", "outer.duckdb", "--no-report", "--", PY, "-m", "cuptiprof", "run",
             "--steps", "0", "--", PY, p], tmp_path, CUPTIPROF_FAKE_CUPTI="1")
    assert r.returncode == 2, r.stderr
    assert "--steps 0" in r.stderr and "Traceback" not in r.stderr
    assert "ran" not in r.stdout


def test_a_minus_value_after_the_command_separator_is_the_programs(tmp_path):
    """`--steps -2:1` is taken as `--steps=-2:1` before `--` only: the profiled program's own
    arguments are passed on as written."""
    p = script(tmp_path, "import sys; print(sys.argv[1:])")
    r = cli(["run", "-o", "a.duckdb", "--no-report", "--light", "--", PY, p, "--steps", "-2:1"],
            tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['--steps', '-2:1']"


def test_a_minus_value_of_a_command_given_without_the_separator_is_the_programs(tmp_path):
    """`cuptiprof run CMD ...` without `--`: the program's `--steps -2:1` is passed on as
    written too (run's own --steps is a count, never such a value)."""
    p = script(tmp_path, "import sys; print(sys.argv[1:])")
    r = cli(["run", "-o", "a.duckdb", "--no-report", "--light", PY, p, "--steps", "-2:1"],
            tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['--steps', '-2:1']"


@pytest.mark.parametrize("at_call", [1, 2])   # 1: before the command starts; 2: just after
def test_sigterm_while_the_command_starts_reaches_it(tmp_path, at_call):
    """A SIGTERM (a scheduler cancelling the job) that reaches the launcher while it starts the
    command must not kill the launcher alone, leaving the command running unprofiled: it is
    passed on once the command exists, and OUT is written."""
    import subprocess
    import time

    ready, pidf = tmp_path / "ready", tmp_path / "child.pid"
    p = script(tmp_path, "import time; time.sleep(60)\n")
    drv = driver(tmp_path, f"""
        import pathlib, sys, time
        from cuptiprof.run import launcher
        real, calls = launcher.save_record, []

        def save_record(parts, record):   # where the test sends SIGTERM: inside the window
            real(parts, record)
            calls.append(1)
            if "child_pid" in record:
                pathlib.Path({str(pidf)!r}).write_text(str(record["child_pid"]))
            if len(calls) == {at_call}:
                pathlib.Path({str(ready)!r}).write_text("x")
                time.sleep(1.5)
        launcher.save_record = save_record
    """)
    proc = subprocess.Popen([PY, str(drv), "run", "-o", "t.duckdb", "--no-report", "--", PY,
                             str(p)], cwd=tmp_path, env=__import__("_run_helpers").env(),
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "err").open("w"))
    child = None
    try:
        wait_for(ready, proc)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)   # not communicate(): a child left running would hold its pipes
        err = (tmp_path / "err").read_text()
        deadline = time.monotonic() + 10
        while not pidf.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        child = int(pidf.read_text())
        assert proc.returncode == 128 + signal.SIGTERM, err
        with pytest.raises(ProcessLookupError):   # ended and reaped, not left running
            os.kill(child, 0)
        out = tmp_path / "t.duckdb"
        assert not (tmp_path / "t.duckdb.parts").exists()
        assert q(out, "SELECT status FROM runs") == [("interrupted",)]
        assert q(out, "SELECT pid, exit_status FROM processes") == [(child, 128 + signal.SIGTERM)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if child is not None:
            with __import__("contextlib").suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def _run_with_launcher_killed_at_the_end(tmp_path, prog, native: bool = True):
    """`cuptiprof run -o k.duckdb -- python PROG` whose launcher is killed (SIGKILL) once the
    program has ended, before it keeps the program's exit status or merges: its OUT.parts.
    native=False: the program runs without cuptiprof's native part (CUPTIPROF_NATIVE=0)."""

    patch = """
        import os, signal, sys
        from cuptiprof.run import launcher

        def wait_then_die(child, fwd=None):   # the program ended; its status never kept
            child.wait()
            os.kill(os.getpid(), signal.SIGKILL)
        launcher._wait_forwarding = wait_then_die
    """ + ("" if native else "    os.environ['CUPTIPROF_NATIVE'] = '0'\n")
    r = cli_driven(patch, ["run", "-o", "k.duckdb", "--no-report", "--", PY, str(prog)], tmp_path)
    assert r.returncode == -signal.SIGKILL, r.stderr
    return tmp_path / "k.duckdb.parts"


@pytest.mark.parametrize("ending, status, code", [
    ("", "complete", 0), ("sys.exit(3)", "failed", 3), ("exit(5)", "failed", 5),
    ("raise ValueError('x')", "failed", 1), ("raise KeyboardInterrupt", "interrupted", 130),
    # raised directly, not through sys.exit(): seen as exit() runs (the native part)
    ("raise SystemExit(4)", "failed", 4), ("raise SystemExit('bye')", "failed", 1),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", "interrupted", 143),
    # the status is the last program's the process ran (an exec'd Python)
    ("import os; os.execv(sys.executable, [sys.executable, '-c', 'import sys; sys.exit(6)'])",
     "failed", 6)])
def test_a_run_whose_launcher_was_killed_after_its_program_ended_keeps_its_exit_status(
        tmp_path, ending, status, code):
    """The launcher killed (SIGKILL) after the program ended, before it kept the program's exit
    status: the file merged from the parts takes the status the program's own process recorded
    as it ended, and says where it came from."""
    p = script(tmp_path, f"""
        import cuptiprof, sys
        with cuptiprof.range("step", step=0):
            pass
        {ending}
    """)
    parts = _run_with_launcher_killed_at_the_end(tmp_path, p)
    m = cli(["merge", *sorted(x.name for x in parts.glob("*.duckdb")), "-o", "../k.duckdb"], parts)
    assert m.returncode == 0, m.stderr
    out = tmp_path / "k.duckdb"
    assert q(out, "SELECT status FROM runs") == [(status,)]
    assert q(out, "SELECT exit_status, ended_early FROM processes") == [(code, False)]
    rep = cli(["report", "k.duckdb"], tmp_path)
    assert rep.returncode == 0, rep.stderr
    line = next(ln for ln in rep.stdout.splitlines() if "run_recovered" in ln)
    assert f"exit status {code}, as the program's own process recorded" in line, rep.stdout


def test_the_merge_of_a_single_part_file_counts_it_in_the_singular(tmp_path):
    """The line that says what the merge of a killed run's parts wrote counts them in words: a
    run of one process left one part file, and the line says '1 part file', not '1 part files'."""
    p = script(tmp_path, """
        import cuptiprof
        with cuptiprof.range("step", step=0):
            pass
    """)
    parts = _run_with_launcher_killed_at_the_end(tmp_path, p)
    files = sorted(x.name for x in parts.glob("*.duckdb"))
    assert len(files) == 1, files
    m = cli(["merge", *files, "-o", "../k.duckdb"], parts)
    assert m.returncode == 0, m.stderr
    assert "the run of the 1 part file in " in m.stderr, m.stderr


def test_without_the_native_part_the_end_marker_keeps_the_status_sys_exit_ends_with(tmp_path):
    """Without the native part, the status a merge of the parts takes is the end marker's own
    reading: sys.exit(300) ends the process with status 300 & 0xFF, as its parent sees it."""
    p = script(tmp_path, """
        import cuptiprof, sys
        with cuptiprof.range("step", step=0):
            pass
        sys.exit(300)
    """)
    parts = _run_with_launcher_killed_at_the_end(tmp_path, p, native=False)
    assert not list(parts.glob("*.exit"))   # nothing but the end marker says how it ended
    m = cli(["merge", *sorted(x.name for x in parts.glob("*.duckdb")), "-o", "../k.duckdb"], parts)
    assert m.returncode == 0, m.stderr
    assert q(tmp_path / "k.duckdb", "SELECT exit_status FROM processes") == [(300 & 0xFF,)]


@pytest.mark.parametrize("ending, written", [
    ("raise SystemExit(9)", "9\n"), ("raise SystemExit(300)", "44\n"), ("pass", "0\n"),
    ("os._exit(3)", None),   # no exit(): nothing written, the end marker's reading stands
    # ending before the destructors (a forked child after torch.profiler) still writes it
    ("assert _exit_status.end_before_destructors()\nraise SystemExit(7)", "7\n"),
    # a child forked without a watch() of its own never writes its parent's file
    ("pid = os.fork()\nif pid == 0: raise SystemExit(5)\nos.waitpid(pid, 0); os._exit(0)", None)])
def test_the_exit_status_extension_writes_what_exit_was_given(tmp_path, ending, written):
    """cuptiprof.run._exit_status (built with the package: a missing one is a failed build)
    writes the status exit() ran with, after Python's own exit handlers."""
    import subprocess

    from cuptiprof.run import _exit_status
    assert _exit_status.API == 2
    path = tmp_path / "h-1.exit"
    code = f"import os, sys\nfrom cuptiprof.run import _exit_status\n" \
           f"assert _exit_status.watch(sys.argv[1])\n{ending}\n"
    subprocess.run([PY, "-c", code, str(path)], env=__import__("_run_helpers").env(), timeout=60)
    assert (path.read_text() if path.exists() else None) == written
    # written beside it and renamed: nothing left there
    assert [p.name for p in tmp_path.iterdir()] == (["h-1.exit"] if written else [])


def test_the_exit_status_file_is_replaced_whole_not_written_in_place(tmp_path):
    """exit() wrote the .exit file in place (truncated, then written): the launcher, reading it
    as a helper that outlived the command ended, could find it empty and lose its status. It is
    written beside it and renamed over it: a reader of the file sees it whole, old or new."""
    import subprocess

    path = tmp_path / "h-1.exit"
    path.write_text("0\n")
    code = "import sys\nfrom cuptiprof.run import _exit_status\n" \
           "assert _exit_status.watch(sys.argv[1])\nraise SystemExit(3)\n"
    with open(path) as reader:   # opened before exit() wrote: in place, it saw the new text
        subprocess.run([PY, "-c", code, str(path)], env=__import__("_run_helpers").env(),
                       timeout=60)
        assert reader.read() == "0\n"
    assert path.read_text() == "3\n"
    assert [p.name for p in tmp_path.iterdir()] == ["h-1.exit"]


def test_a_helper_ending_after_its_end_marker_keeps_the_status_exit_writes(tmp_path):
    """A helper that outlives the command writes its end marker at exit, before the C library's
    exit() writes the status it ends with (`raise SystemExit(3)`: the marker's own reading is
    0). The launcher took the end marker for the helper's end and merged at once: the helper's
    status was 0. It waits for the status while the helper is still ending."""
    p = script(tmp_path, """
        import pathlib, subprocess, sys, time
        helper = '''if True:
            import pathlib, time
            class Slow:   # ends after Python's exit handlers (the end marker), before exit()
                def __del__(self, sleep=time.sleep, touch=pathlib.Path("ending").touch):
                    touch()
                    sleep(1)
            slow = Slow()
            raise SystemExit(3)
        '''
        subprocess.Popen([sys.executable, "-c", helper])
        while not pathlib.Path("ending").exists():
            time.sleep(0.01)
    """)
    r = cli(["run", "-o", "h.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "h.duckdb", "SELECT exit_status FROM processes ORDER BY start_ns") == [
        (0,), (3,)]


def test_the_launcher_waits_for_the_exit_status_of_a_process_ending_after_its_end_marker(
        tmp_path):
    """An end marker with an exit status is written as the process ends, before its .exit: a
    process still alive with one and no .exit is still ending; one whose marker says no status
    (its recording closed before an exec) is not waited for."""
    import socket
    import subprocess

    from cuptiprof.run.merge_parts import _unfinished_alive

    proc = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        key = f"{socket.gethostname()}-{proc.pid}"
        (tmp_path / f"{key}.start.json").write_text(json.dumps({"pid": proc.pid}))
        end = tmp_path / f"{key}.end.json"
        end.write_text(json.dumps({"pid": proc.pid, "exit_status": None}))
        assert _unfinished_alive(tmp_path) is None
        end.write_text(json.dumps({"pid": proc.pid, "exit_status": 0}))
        assert _unfinished_alive(tmp_path) == proc.pid
        (tmp_path / f"{key}.exit").write_text("3\n")
        assert _unfinished_alive(tmp_path) is None
    finally:
        proc.kill()
        proc.wait()


def test_a_run_whose_launcher_was_killed_mid_run_reports_the_exit_status_as_unknown(tmp_path):
    """The launcher and its program killed (SIGKILL) while the program runs: nothing says how
    the program ended (another process of the run that ended well says nothing of it), so the
    merged file leaves its processes.exit_status NULL, and its report says in so many words that
    the status is unknown, not a blank that reads like success."""
    import subprocess
    import time

    from cuptiprof.run.merge_parts import _unfinished_alive

    p = script(tmp_path, """
        import pathlib, subprocess, sys, time, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        pathlib.Path("ready").touch()
        time.sleep(600)
    """)
    proc = subprocess.Popen([PY, "-m", "cuptiprof", "run", "-o", "k.duckdb", "--no-report", "--",
                             PY, str(p)], cwd=tmp_path, env=__import__("_run_helpers").env(),
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(tmp_path / "ready", proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    parts = tmp_path / "k.duckdb.parts"
    deadline = time.monotonic() + 30
    while _unfinished_alive(parts) and time.monotonic() < deadline:
        time.sleep(0.02)
    ends = [json.loads(e.read_text()) for e in parts.glob("*.end.json")]
    assert [e["exit_status"] for e in ends] == [0]   # the helper's, not the program's
    m = cli(["merge", *sorted(x.name for x in parts.glob("*.duckdb")), "-o", "../k.duckdb"], parts)
    assert m.returncode == 0, m.stderr
    out = tmp_path / "k.duckdb"
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]
    # the program's status unknown; the helper's, which it kept as it ended, 0
    assert q(out, "SELECT exit_status FROM processes ORDER BY start_ns") == [(None,), (0,)]
    rep = cli(["report", "k.duckdb"], tmp_path)
    assert rep.returncode == 0, rep.stderr
    line = next(ln for ln in rep.stdout.splitlines() if "run_recovered" in ln)
    assert "exit status is unknown" in line, rep.stdout


def _markers(parts, host, pid, image, *, ended=True, **doc):
    key = f"{host}-{pid}" + (f".exec{image}" if image else "")
    (parts / f"{key}.start.json").write_text(json.dumps(dict(doc, pid=pid, host=host, image=image)))
    if ended:
        (parts / f"{key}.end.json").write_text(json.dumps({"exit_status": 0, "end_ns": ended}
                                                          if ended is not True else {"exit_status": 0}))


def test_finish_writes_the_run_the_markers_and_the_record_describe(tmp_path):
    """The launcher's merge: the runs row from its record; a process per pid with its first
    program's command, start and rank, the command's exit status on the command's own process;
    a process that left no end marker (and no part), or whose exec'd program left none, ended
    early, said in data_quality; a process that exec'd twice (once in vain) replaced its
    program once."""
    from cuptiprof.run.merge_parts import finish
    from cuptiprof.store.writer import RunInfo, Writer

    parts = tmp_path / "r.duckdb.parts"
    parts.mkdir()
    _markers(parts, "h", 100, 0, command="python main.py", start_ns=10, rank=0)
    _markers(parts, "h", 100, 1, command="python main.py", start_ns=20, rank=0, exec_failed=True)
    _markers(parts, "h", 100, 2, command="python other.py", start_ns=30, rank=0)
    _markers(parts, "h", 101, 0, ended=False, command="python worker.py", start_ns=15, rank=1)
    _markers(parts, "h", 102, 0, command="python w2.py", start_ns=16, rank=2)   # its exec'd
    _markers(parts, "h", 102, 1, ended=False, command="python w3.py", start_ns=17, rank=2)  # killed
    with Writer(parts / "h-100.duckdb", RunInfo(source="cpu"), pid=100) as w:
        w.append({"kernels": {"start_ns": [40], "end_ns": [50], "name": ["k"]},
                  "processes": {"pid": [100]}})
    record = {"label": "job", "source": "cpu", "command": "python main.py", "start_ns": 5,
              "settings": {"warmup": 2}, "child_pid": 100, "status": "failed", "exit_code": 3}
    out = finish(tmp_path / "r.duckdb", parts, record, wait=False)
    assert q(out, "SELECT label, source, command, start_ns, status, settings::JSON->>'warmup' "
                  "FROM runs") == [("job", "cpu", "python main.py", 5, "failed", "2")]
    assert q(out, "SELECT pid, host, rank, command, start_ns, exit_status, ended_early "
                  "FROM processes ORDER BY pid") == [
        (100, "h", 0, "python main.py", 10, 3, False),
        (101, "h", 1, "python worker.py", 15, None, True),
        (102, "h", 2, "python w2.py", 16, None, True)]
    assert q(out, "SELECT pid, check_name, count FROM data_quality ORDER BY ALL") == [
        (100, "process_exec", 1), (101, "process_ended_early", None),
        (102, "process_ended_early", None), (102, "process_exec", 1)]
    # a command that is not Python (no marker of its own); a record without the command line;
    # 100, now not the command, exited as its last program's end marker says
    record = dict(record, command=None, child_pid=200, status="complete", exit_code=0)
    out = finish(tmp_path / "s.duckdb", parts, record, sources=[], wait=False)
    assert q(out, "SELECT command FROM runs") == [("python main.py",)]
    assert q(out, "SELECT pid, exit_status FROM processes ORDER BY pid") == [
        (100, 0), (101, None), (102, None), (200, 0)]


def test_finish_gives_each_process_the_end_it_is_known_by(tmp_path):
    """processes.end_ns without part files: the end a process's last program wrote in its end
    marker; the command's own process, when its marker has none (killed, or not Python), the
    end the launcher saw; a helper that ended early without a word, NULL (not known)."""
    from cuptiprof.run.merge_parts import finish

    parts = tmp_path / "r.duckdb.parts"
    parts.mkdir()
    _markers(parts, "h", 100, 0, ended=False, command="python main.py", start_ns=10)   # killed
    _markers(parts, "h", 101, 0, ended=40, command="python -c pass", start_ns=20)
    _markers(parts, "h", 102, 0, ended=50, command="python a.py", start_ns=30)
    _markers(parts, "h", 102, 1, ended=60, command="python b.py", start_ns=55)   # exec'd
    _markers(parts, "h", 103, 0, ended=False, command="python helper.py", start_ns=35)
    record = {"label": "job", "command": "python main.py", "start_ns": 5, "child_pid": 100,
              "status": "interrupted", "exit_code": 137, "end_ns": 70}
    out = finish(tmp_path / "r.duckdb", parts, record, sources=[], wait=False)
    assert q(out, "SELECT pid, end_ns, ended_early FROM processes ORDER BY pid") == [
        (100, 70, True), (101, 40, False), (102, 60, False), (103, None, True)]
    record = dict(record, child_pid=200, status="complete", exit_code=0)   # not Python
    out = finish(tmp_path / "s.duckdb", parts, record, sources=[], wait=False)
    assert q(out, "SELECT end_ns FROM processes WHERE pid = 200") == [(70,)]
    # a command whose process wrote its end keeps that one: the launcher sees it a moment later
    record = dict(record, child_pid=101, status="complete", exit_code=0)
    out = finish(tmp_path / "t.duckdb", parts, record, sources=[], wait=False)
    assert q(out, "SELECT end_ns FROM processes WHERE pid = 101") == [(40,)]


def test_a_run_inside_a_run_passes_on_the_signal_that_ended_the_command(tmp_path):
    """The inner `cuptiprof run` that stands aside exits as its command did: a command ended by
    SIGTERM gives 128+15, as without the inner run."""
    p = script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    r = cli(["run", "-o", "outer.duckdb", "--no-report", "--", PY, "-m", "cuptiprof", "run",
             "-o", "inner.duckdb", "--", PY, p], tmp_path)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    assert not (tmp_path / "inner.duckdb").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_output_is_written_does_not_cost_it(tmp_path, sig):
    """A second Ctrl-C, a SIGTERM or a SIGHUP that reaches the launcher while it merges the parts
    into OUT is noted: OUT is written whole, and the command's exit status is still the run's."""

    p = script(tmp_path, """
        import sys, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        sys.exit(3)
    """)
    patch = f"""
        import os, sys
        from cuptiprof.run import launcher
        real = launcher.finish

        def finish(*args, **kw):   # the signal comes as the merge starts
            os.kill(os.getpid(), {int(sig)})
            return real(*args, **kw)
        launcher.finish = finish
    """
    r = cli_driven(patch, ["run", "-o", "m.duckdb", "--no-report", "--", PY, str(p)], tmp_path)
    assert r.returncode == 3, r.stderr
    assert "cuptiprof: writing m.duckdb first; it takes a moment" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "m.duckdb.parts").exists()
    assert q(tmp_path / "m.duckdb", "SELECT status FROM runs") == [("failed",)]
    assert q(tmp_path / "m.duckdb", "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]


def test_a_command_whose_interpreter_is_missing_is_one_line_and_leaves_nothing(tmp_path):
    """An executable script whose #! line names an interpreter that is not there passes the
    checks made before it starts, then cannot be started: one line that names the missing
    interpreter (the system's "No such file or directory" named none, for a file that is
    there), and no OUT.parts left."""
    tool = tmp_path / "tool"
    tool.write_text("#!/no/such/interpreter\nprint('hi')\n")
    tool.chmod(0o755)
    r = cli(["run", "-o", "x.duckdb", "--", "./tool"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert "./tool: cannot run: its #! interpreter /no/such/interpreter does not exist" \
        in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tool"]


def test_a_script_whose_interpreter_line_ends_in_a_carriage_return_says_so(tmp_path):
    """A script saved with Windows line ends names "PYTHON\\r" on its #! line: the file and the
    interpreter are there, and the one line said only "cannot run (No such file or
    directory)". It names the carriage return and how to fix it."""
    tool = tmp_path / "tool"
    tool.write_bytes(f"#!{PY}\r\nprint('hi')\r\n".encode())
    tool.chmod(0o755)
    r = cli(["run", "-o", "x.duckdb", "--", "./tool"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert "./tool: cannot run: its #! line ends in a carriage return" in r.stderr, r.stderr
    assert "dos2unix ./tool" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tool"]


def test_an_executable_script_without_its_interpreter_line_is_one_line_that_says_how(tmp_path):
    """An executable file the system cannot start (a script without #!): the line said only
    "cannot run (Exec format error)"."""
    p = script(tmp_path, "print('hi')\n", name="app.py")
    p.chmod(0o755)
    r = cli(["run", "-o", "x.duckdb", "--", "./app.py"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert ("./app.py: cannot run (Exec format error): a script without a #! line, or a program "
            "for another system; give its interpreter (cuptiprof run -- python ./app.py) or begin "
            "the script with a #! line") in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py"]


def test_a_process_that_ended_early_is_named_under_the_report(tmp_path):
    p = script(tmp_path, """
        import os, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        os._exit(5)
    """)
    r = cli(["run", "-o", "e.duckdb", "--", PY, p], tmp_path)
    assert r.returncode == 5, r.stderr
    assert ("cuptiprof: notice: 1 process ended before its collector closed (see "
            "processes.ended_early)") in r.stderr, r.stderr[-800:]


def test_output_left_by_a_run_that_did_not_finish_says_how_to_recover_it(tmp_path):
    """OUT.parts of a launcher that is gone (killed before it merged): not "another run is
    writing", but how to merge what it left, and nothing is touched."""
    parts = tmp_path / "old.duckdb.parts"
    parts.mkdir()
    (parts / "launcher.pid").write_text(str(gone_pid()))
    r = cli(["run", "-o", "old.duckdb", "--", PY, "-c", "pass"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert ("old.duckdb.parts is left from a run that did not finish; merge its parts (cuptiprof "
            "merge old.duckdb.parts/*.duckdb -o old.duckdb)") in r.stderr, r.stderr
    assert "another cuptiprof run" not in r.stderr
    assert [x.name for x in tmp_path.iterdir()] == ["old.duckdb.parts"]
    assert [x.name for x in parts.iterdir()] == ["launcher.pid"]


def test_a_step_ended_by_an_exception_is_committed_at_once(tmp_path):
    """A step cut short by an exception the program catches is committed as it ends, whatever
    the commit interval: a crash right after keeps it and its data_quality row."""
    p = script(tmp_path, """
        import os, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        try:
            with cuptiprof.range("step", step=1):
                raise ValueError("bad batch")
        except ValueError:
            pass
        os._exit(4)
    """)
    r = cli(["run", "--light", "-o", "x.duckdb", "--no-report", "--", PY, p], tmp_path,
            CUPTIPROF_FLUSH_EVERY_S="1000")
    assert r.returncode == 4, r.stderr
    out = tmp_path / "x.duckdb"
    assert q(out, "SELECT step, end_ns IS NULL FROM ranges WHERE kind = 'step' ORDER BY step") == \
        [(0, False), (1, False)]
    assert q(out, "SELECT subject FROM data_quality WHERE check_name = 'step_incomplete'") == \
        [("1",)]


def test_parts_kept_by_a_failed_merge_merge_later_into_the_run_as_it_ended(tmp_path):
    """The merge into OUT failed (a full disk): the launcher had learnt how the command ended,
    and the parts keep it, so merging them later writes that run, not one recovered from a
    killed launcher."""

    p = script(tmp_path, """
        import sys, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        sys.exit(3)
    """)
    patch = """
        import errno, os, sys
        from cuptiprof.store import merge

        def full(*args, **kw):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        merge.merge_files = full
    """
    r = cli_driven(patch, ["run", "-o", "k.duckdb", "--no-report", "--", PY, str(p)], tmp_path)
    assert r.returncode == 3, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("cuptiprof: error:")]
    assert len(errors) == 1 and "k.duckdb.parts" in errors[0], r.stderr
    parts = tmp_path / "k.duckdb.parts"
    m = cli(["merge", *sorted(x.name for x in parts.glob("*.duckdb")), "-o", "../k.duckdb"], parts)
    assert m.returncode == 0, m.stderr
    out = tmp_path / "k.duckdb"
    assert q(out, "SELECT status FROM runs") == [("failed",)]
    assert q(out, "SELECT exit_status, ended_early FROM processes") == [(3, False)]
    assert q(out, "SELECT count(*) FROM data_quality WHERE check_name = 'run_recovered'") == [(0,)]


def test_a_helper_that_outlives_the_command_by_a_moment_is_waited_for(tmp_path):
    """A process the command started that is still closing its part when the command ends (a
    helper, a worker being torn down) gets a moment to finish: its last step is in OUT and it
    did not end early."""
    p = script(tmp_path, """
        import pathlib, subprocess, sys, time, cuptiprof
        helper = '''
        import os, pathlib, time, cuptiprof
        parent = os.getppid()
        with cuptiprof.range("step", step=0):
            pass
        pathlib.Path("helper-ready").touch()
        while os.getppid() == parent:   # the command has ended
            time.sleep(0.01)
        time.sleep(1)
        with cuptiprof.range("step", step=1):
            pass
        '''
        subprocess.Popen([sys.executable, "-c", helper])
        while not pathlib.Path("helper-ready").exists():
            time.sleep(0.01)
    """)
    r = cli(["run", "-o", "h.duckdb", "--no-report", "--light", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "h.duckdb"
    assert q(out, "SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step'") == [([0, 1],)]
    assert q(out, "SELECT count(*), count(*) FILTER (WHERE ended_early) FROM processes") == [(2, 0)]


def test_a_helper_caught_writing_its_end_marker_keeps_how_and_when_it_ended(tmp_path):
    """A process of the run whose end marker the launcher finds as it is being written (there,
    still empty): it took the process for ended, merged, and read nothing of it (no exit
    status, no end). The marker appears whole or not at all, and the launcher waits for it."""
    p = script(tmp_path, """
        import pathlib, subprocess, sys, time, cuptiprof
        helper = '''
        import os, pathlib, time, cuptiprof
        real = pathlib.Path.write_text
        def write_text(self, data, *a, **kw):   # the end marker: created, written a second later
            if ".end.json" not in self.name:
                return real(self, data, *a, **kw)
            with open(self, "w") as fh:
                fh.flush()
                time.sleep(1)
                return fh.write(data)
        pathlib.Path.write_text = write_text
        parent = os.getppid()
        with cuptiprof.range("step", step=0):
            pass
        pathlib.Path("helper-ready").touch()
        while os.getppid() == parent:   # the command has ended
            time.sleep(0.01)
        '''
        h = subprocess.Popen([sys.executable, "-c", helper])
        while not pathlib.Path("helper-ready").exists():
            time.sleep(0.01)
        print("helper", h.pid)
    """)
    r = cli(["run", "-o", "h.duckdb", "--no-report", "--light", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split("helper ", 1)[1].split()[0])
    assert q(tmp_path / "h.duckdb", "SELECT exit_status, end_ns IS NOT NULL, ended_early FROM "
                                    f"processes WHERE pid = {pid}") == [(0, True, False)]


def test_a_run_inside_a_run_passes_a_sigterm_on_to_the_command(tmp_path):
    """A SIGTERM to the outer run reaches the inner one, which passes it on to the command it
    runs rather than dying alone and leaving the command running; the outer run is recorded
    as interrupted."""
    import subprocess

    ready, pidf = tmp_path / "ready", tmp_path / "prog.pid"
    p = script(tmp_path, f"""
        import os, pathlib, time
        pathlib.Path({str(pidf)!r}).write_text(str(os.getpid()))
        pathlib.Path({str(ready)!r}).touch()
        time.sleep(60)
    """)
    proc = subprocess.Popen([PY, "-m", "cuptiprof", "run", "-o", "outer.duckdb", "--no-report",
                             "--", PY, "-m", "cuptiprof", "run", "-o", "inner.duckdb", "--", PY,
                             str(p)], cwd=tmp_path, env=__import__("_run_helpers").env(),
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    prog = None
    try:
        wait_for(ready, proc)
        prog = int(pidf.read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        with pytest.raises(ProcessLookupError):   # ended and reaped, not left running
            os.kill(prog, 0)
        assert not (tmp_path / "inner.duckdb").exists()
        # the inner run exits 128 + SIGTERM for the signal the outer one got: interrupted
        assert q(tmp_path / "outer.duckdb", "SELECT status FROM runs") == [("interrupted",)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if prog is not None:
            with __import__("contextlib").suppress(ProcessLookupError):
                os.kill(prog, signal.SIGKILL)


def test_parts_of_a_run_that_kept_no_record_merge_under_the_output_name(tmp_path):
    """OUT.parts without the launcher's record (a cuptiprof that kept none, killed): the merge
    labels the run after OUT, and says its exit status is unknown."""
    p = script(tmp_path, """
        import cuptiprof
        with cuptiprof.range("step", step=0):
            pass
    """)
    parts = _run_with_launcher_killed_at_the_end(tmp_path, p)
    (parts / "run.json").unlink()
    m = cli(["merge", *sorted(x.name for x in parts.glob("*.duckdb")), "-o", "../k.duckdb"], parts)
    assert m.returncode == 0, m.stderr
    out = tmp_path / "k.duckdb"
    assert q(out, "SELECT label, status FROM runs") == [("k", "interrupted")]
    assert q(out, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]
    (detail,) = q(out, "SELECT detail FROM data_quality WHERE check_name = 'run_recovered'")
    assert "exit status is unknown" in detail[0], detail


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, None])
def test_a_program_that_ends_itself_on_a_signal_is_interrupted_only_when_one_came(tmp_path, sig):
    """A handler of the program's own that exits 128+N: interrupted when the run got signal N
    (passed on to the program); the same status chosen with no signal is the program's failure,
    as any other non-zero status (cuptiprof cannot tell it from a signal sent to the program's
    pid alone, which the program then also chose to end on)."""
    ready = tmp_path / "ready"
    p = script(tmp_path, f"""
        import pathlib, signal, sys, time, cuptiprof
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, lambda n, f: sys.exit(128 + n))
        with cuptiprof.range("step", step=0):
            pass
        pathlib.Path({str(ready)!r}).write_text("x")
        {"time.sleep(60)" if sig else "sys.exit(143)"}
    """)
    proc = popen(["run", "-o", "h.duckdb", "--light", "--no-report", "--", PY, p], tmp_path)
    if sig:
        wait_for(ready, proc)
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + (sig or signal.SIGTERM), err
    assert q(tmp_path / "h.duckdb", "SELECT status FROM runs") == [
        ("interrupted" if sig else "failed",)]


def test_a_program_run_under_nohup_keeps_ignoring_sighup(tmp_path):
    """`nohup python prog.py`: SIGHUP ignored, as the program chose; cuptiprof does not put a
    handler of its own in place of that (one that ended the program)."""
    p = script(tmp_path, """
        import os, signal, cuptiprof
        os.kill(os.getpid(), signal.SIGHUP)
        with cuptiprof.range("step", step=0):
            pass
        print("ran on")
    """)
    r = cli(["run", "-o", "n.duckdb", "--light", "--no-report", "--", "nohup", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ran on" in r.stdout
    assert q(tmp_path / "n.duckdb", "SELECT step FROM ranges WHERE kind = 'step'") == [(0,)]


def test_default_output_name_passes_over_the_parts_of_a_run_that_did_not_finish(tmp_path,
                                                                                 monkeypatch):
    """A default name whose OUT.parts is left from a run that did not finish is taken: the
    next is given, rather than a run refused over a name the user never chose."""
    import datetime as real
    import types
    from pathlib import Path

    from cuptiprof.run import preflight

    class Fixed(real.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 1, 2, 3, 4, 5)

    monkeypatch.setattr(preflight, "_dt", types.SimpleNamespace(datetime=Fixed))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cuptiprof-20260102-030405.duckdb.parts").mkdir()
    assert preflight.output_path(None) == Path("cuptiprof-20260102-030405-2.duckdb")


@pytest.mark.parametrize("who", ["launcher", "process"])
def test_merging_the_parts_of_a_run_still_going_is_refused(tmp_path, who):
    """`cuptiprof merge OUT.parts/*.duckdb` while the run's launcher, or one of its processes
    on this host, still writes there: one line saying so, no OUT, the parts left as they are."""
    import socket

    # alive: this test (else a launcher that has ended)
    parts = left_parts(tmp_path / "r.duckdb.parts", os.getpid() if who == "launcher" else None)
    if who == "process":
        me = f"{socket.gethostname()}-{os.getpid()}"   # started, never ended, alive
        (parts / f"{me}.start.json").write_text(json.dumps({"pid": os.getpid(),
                                                            "host": socket.gethostname()}))
    before = sorted(p.name for p in parts.iterdir())
    r = cli(["merge", "r.duckdb.parts/h-11.duckdb", "-o", "r.duckdb"], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert "still running" in r.stderr
    assert not (tmp_path / "r.duckdb").exists()
    assert sorted(p.name for p in parts.iterdir()) == before


def test_a_command_ended_by_a_signal_gets_no_hint_to_mark_steps(tmp_path):
    """A run cut short by a signal before its first step did not miss its steps: the hint to
    mark them would send the user after the wrong thing."""
    p = script(tmp_path, """
        import os, signal, cuptiprof
        with cuptiprof.range("load"):
            pass
        os.kill(os.getpid(), signal.SIGTERM)
    """)
    r = cli(["run", "-o", "s.duckdb", "--", PY, p], tmp_path)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    assert q(tmp_path / "s.duckdb", "SELECT name FROM ranges") == [("load",)]
    assert "before anything was recorded" not in r.stderr   # the report is printed
    assert "cuptiprof: wrote s.duckdb" in r.stderr
    assert "no steps were marked" not in r.stderr


def test_a_run_left_the_variables_of_a_run_that_has_ended_records_its_command(tmp_path):
    """A shell or daemon started under a `cuptiprof run` that has since ended keeps its
    variables; that run's parts folder is gone, so a `cuptiprof run` from there records its
    command itself instead of standing aside for no one."""
    from cuptiprof.run.settings import ChildSettings

    p = script(tmp_path, "import cuptiprof\nwith cuptiprof.range('step', step=0):\n    pass\n")
    r = cli(["run", "-o", "own.duckdb", "--no-report", "--", PY, p], tmp_path,
            CUPTIPROF_RUN_SETTINGS=ChildSettings().to_env(),
            CUPTIPROF_RUN_PARTS=str(tmp_path / "gone.duckdb.parts"))
    assert r.returncode == 0, r.stderr
    assert "runs under another one" not in r.stderr
    assert q(tmp_path / "own.duckdb", "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]
