"""The in-process API in the ways programs use it: steps in asyncio tasks, a fork inside
profile(), profile() in a program `cuptiprof run` records, how a run's status is decided, and a
step left open at stop()."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cuptiprof

from _run_helpers import no_leftover_session, q  # noqa: F401 - the fixture is used by name

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


@pytest.fixture(autouse=True)
def _clean(no_leftover_session):
    yield



def run_py(code: str, cwd: Path, *args: str, **env) -> subprocess.CompletedProcess:
    """The script `code` in a fresh interpreter (`args` before it: e.g. `-m cuptiprof run --`)."""
    (cwd / "prog.py").write_text(textwrap.dedent(code))
    e = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    return subprocess.run([PY, *args, "prog.py"], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=180)


ASYNC = """
    import asyncio, cuptiprof
    async def request(i):
        with cuptiprof.step(i):
            with cuptiprof.range("decode"):
                await asyncio.sleep(0.01)
    async def main():
        await asyncio.gather(*(request(i) for i in range(4)))
    {open}
    asyncio.run(main())
"""


@pytest.mark.parametrize("source", ["none", "fake"])
def test_steps_of_concurrent_asyncio_tasks_do_not_nest(tmp_path, source):
    """Each task has its own open ranges: four concurrent requests are four steps, each with its
    own range inside, not one step holding the other three."""
    code = ASYNC.format(open=f"with cuptiprof.profile('a.duckdb', steps=4, source={source!r}, quiet=True):")
    code = code.replace("\n    asyncio.run(main())", "\n        asyncio.run(main())")
    r = run_py(code, tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "a.duckdb"
    assert q(out, "SELECT kind, count(*) FROM ranges GROUP BY 1 ORDER BY 1") == [("step", 4), ("user", 4)]
    assert q(out, "SELECT count(*) FROM ranges d JOIN ranges s ON d.parent_id = s.range_id "
                  "WHERE d.name = 'decode' AND s.kind = 'step' AND d.step = s.step") == [(4,)]
    assert q(out, "SELECT count(*) FROM data_quality WHERE check_name = 'steps_short'") == [(0,)]


def test_steps_of_concurrent_asyncio_tasks_under_run(tmp_path):
    r = run_py(ASYNC.format(open=""), tmp_path, "-m", "cuptiprof", "run", "-o", "r.duckdb",
               "--no-report", "--", PY, CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "r.duckdb", "SELECT kind, count(*) FROM ranges WHERE name IN ('step', 'decode') "
                                    "GROUP BY 1 ORDER BY 1") == [("step", 4), ("user", 4)]


FORK = """
    import cuptiprof, os, sys
    with cuptiprof.profile("f.duckdb", source={source!r}, quiet=True):
        for i in range(3):
            with cuptiprof.step(i): pass
        pid = os.fork()
        if pid == 0:
            for j in range(2):
                with cuptiprof.step(100 + j): pass
            {child_exit}
        _, status = os.waitpid(pid, 0)
        print("child", status)
        for i in range(3, 5):
            with cuptiprof.step(i): pass
"""


@pytest.mark.parametrize("source", ["none", "fake"])
@pytest.mark.parametrize("child_exit", ["sys.exit(0)", "os._exit(0)"])
def test_a_fork_inside_profile_leaves_the_parents_file_alone(tmp_path, source, child_exit):
    """A forked child ends normally (its inherited DuckDB connection is never closed there,
    which crashed it), and writes nothing into the parent's file."""
    r = run_py(FORK.format(source=source, child_exit=child_exit), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "child 0" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "f.duckdb"
    assert q(out, "SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step'") == [([0, 1, 2, 3, 4],)]
    assert q(out, "SELECT count(*), count(DISTINCT range_id) FROM ranges") == [(5, 5)]
    assert q(out, "SELECT status FROM runs") == [("complete",)]



FORK_DURING_FLUSH = """
    import cuptiprof, gc, os, signal, threading
    from cuptiprof.collect.fake import FakeCupti
    f = FakeCupti()
    in_flush, release = threading.Event(), threading.Event()
    def synchronize():   # the flush of a step a worker thread ended waits here
        if threading.current_thread().name == "W":
            in_flush.set()
            release.wait()
    f.synchronize = synchronize
    def worker():
        with cuptiprof.step(0):
            f.launch_kernel("k0")
    with cuptiprof.profile("f.duckdb", source=f, quiet=True, flush_every_s=0):
        w = threading.Thread(target=worker, name="W")
        w.start()
        in_flush.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)   # a child that hangs dies of SIGALRM
            gc_on = gc.isenabled()
        else:
            _, status = os.waitpid(pid, 0)
            release.set()
            w.join()
    if pid == 0:
        print("child gc", gc_on, flush=True)
        os._exit(0)
    print("child status", status)
"""


def test_a_fork_while_another_thread_flushes(tmp_path):
    """The main thread forks while a worker thread's step end flushes (the flush lock held, the
    cyclic GC paused). The child inherited both: its `with` never ended (stop() waited for a
    lock no thread of the child would release), and its GC stayed off for its whole life."""
    r = run_py(FORK_DURING_FLUSH, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "child gc True" in r.stdout and "child status 0" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "f.duckdb"
    assert q(out, "SELECT name, step FROM kernels") == [("k0", 0)]
    assert q(out, "SELECT status FROM runs") == [("complete",)]



FORK_DURING_STOP = """
    import cuptiprof, os, signal, sys, threading
    with cuptiprof.profile("s.duckdb", source={source!r}, quiet=True) as prof:
        with cuptiprof.step(0):
            pass
        in_stop, release = threading.Event(), threading.Event()
        write_quality = prof._write_quality
        def slow(phase):   # stop() on the worker thread waits here, the flush lock held
            if threading.current_thread().name == "W":
                in_stop.set()
                release.wait()
            write_quality(phase)
        prof._write_quality = slow
        w = threading.Thread(target=prof.stop, name="W")
        w.start()
        in_stop.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)   # a child that hangs dies of SIGALRM
        else:
            _, status = os.waitpid(pid, 0)
            release.set()
            w.join()
    if pid == 0:
        print("child left", flush=True)
        sys.exit(0)   # the exit handler runs in the child too
    print("child status", status)
"""


@pytest.mark.parametrize("source", ["none", "fake"])
def test_a_fork_while_another_thread_stops_the_profile(tmp_path, source):
    """The main thread forks while a worker thread's stop() is under way (the profile no longer
    the active one, the flush lock held). The child's `with` never ended: its copy of the
    session was not detached, and stop() waited for a lock no thread of the child releases."""
    r = run_py(FORK_DURING_STOP.format(source=source), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "child left" in r.stdout and "child status 0" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "s.duckdb"
    assert q(out, "SELECT status FROM runs") == [("complete",)]
    assert q(out, "SELECT ended_early FROM processes") == [(False,)]
    assert q(out, "SELECT step FROM ranges") == [(0,)]


STOP_ON_A_DAEMON_THREAD = """
    import cuptiprof, threading, time
    prof = cuptiprof.profile("d.duckdb", source="none", quiet=True).start()
    in_stop = threading.Event()
    write_quality = prof._write_quality
    def slow(phase):   # stop() on the daemon thread is still busy when the program ends
        in_stop.set()
        time.sleep(0.5)
        write_quality(phase)
    prof._write_quality = slow
    with cuptiprof.step(0):
        pass
    threading.Thread(target=prof.stop, daemon=True).start()
    in_stop.wait()
"""


def test_the_program_ending_while_a_daemon_thread_stops_the_profile(tmp_path):
    """stop() on a daemon thread, under way when the main thread ends the program: the exit
    handler found the profile stopped already and let the interpreter end, which froze that
    thread before the file was closed (the run was left 'running')."""
    r = run_py(STOP_ON_A_DAEMON_THREAD, tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "d.duckdb"
    assert q(out, "SELECT status FROM runs") == [("complete",)]
    assert q(out, "SELECT ended_early FROM processes") == [(False,)]
    assert q(out, "SELECT step FROM ranges") == [(0,)]


UNDER_RUN = """
    import cuptiprof
    with cuptiprof.profile("inner.duckdb", steps=2):
        for i in range(2):
            with cuptiprof.step(i): pass
    for i in range(2, 4):
        with cuptiprof.step(i): pass
    print("done")
"""


@pytest.mark.parametrize("env", [{"CUDA_VISIBLE_DEVICES": ""}, {"CUPTIPROF_FAKE_CUPTI": "1"}],
                         ids=["no-gpu", "fake-cupti"])
def test_profile_inside_cuptiprof_run_stands_aside(tmp_path, env):
    """The README's in-code profile() in a program run under `cuptiprof run`: the run records
    every step, the program runs to its end, and the inner profile says it writes nothing."""
    r = run_py(UNDER_RUN, tmp_path, "-m", "cuptiprof", "run", "-o", "o.duckdb", "--no-report", "--",
               PY, **env)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    assert "cuptiprof: notice: profile(" in r.stderr and "runs under `cuptiprof run`" in r.stderr \
        and "writes no file" in r.stderr
    out = tmp_path / "o.duckdb"
    assert q(out, "SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step'") == [([0, 1, 2, 3],)]
    assert q(out, "SELECT status FROM runs") == [("complete",)]
    assert not (tmp_path / "inner.duckdb").exists()


def test_forked_child_of_a_cupti_run_records_its_steps_host_side(tmp_path):
    """Under `cuptiprof run` with CUPTI, a forked child (CUPTI does not survive fork) records its
    steps and ranges host-side into its own part, as its own process, and ends normally."""
    code = """
        import cuptiprof, os
        for i in range(2):
            with cuptiprof.step(i): pass
        pid = os.fork()
        if pid == 0:
            for j in range(2):
                with cuptiprof.step(100 + j): pass
            os._exit(0)
        print("child", os.waitpid(pid, 0)[1])
    """
    r = run_py(code, tmp_path, "-m", "cuptiprof", "run", "-o", "o.duckdb", "--no-report", "--", PY,
               CUPTIPROF_FAKE_CUPTI="1")
    assert r.returncode == 0 and "child 0" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "o.duckdb"
    got = q(out, "SELECT pid, list(step ORDER BY step) FROM ranges WHERE kind = 'step' GROUP BY 1 ORDER BY 2")
    assert [s for _, s in got] == [[0, 1], [100, 101]] and got[0][0] != got[1][0]
    assert q(out, f"SELECT count(*) FROM data_quality WHERE pid = {got[1][0]} AND detail LIKE "
                  "'%forked from one CUPTI profiled%'") == [(1,)]


def test_status_of_a_normal_exit_and_of_a_crash(tmp_path):
    r = run_py("""
        import cuptiprof, sys
        with cuptiprof.profile("a.duckdb", source="none", quiet=True):
            with cuptiprof.step(0): pass
            sys.exit(0)
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "a.duckdb", "SELECT status FROM runs") == [("complete",)]
    r = run_py("""
        import cuptiprof
        cuptiprof.profile("b.duckdb", source="none", quiet=True).start()
        with cuptiprof.step(0): pass
        raise RuntimeError("boom")
    """, tmp_path)
    assert r.returncode == 1 and "boom" in r.stderr
    assert q(tmp_path / "b.duckdb", "SELECT status FROM runs") == [("failed",)]


@pytest.mark.parametrize("source", ["none", "fake"])
def test_steps_of_a_worker_thread_are_committed_as_they_end(tmp_path, source):
    """Only the thread that started profile() committed at a step's end: steps a worker thread
    ran (a server's request threads) waited for stop(), and a crash lost every one of them."""
    r = run_py(f"""
        import cuptiprof, os, threading
        def worker():
            for i in range(3):
                with cuptiprof.step(i):
                    with cuptiprof.range("decode"):
                        pass
        with cuptiprof.profile("w.duckdb", source={source!r}, quiet=True, flush_every_s=0):
            t = threading.Thread(target=worker)
            t.start()
            t.join()
            os._exit(9)
    """, tmp_path)
    assert r.returncode == 9, r.stderr
    out = tmp_path / "w.duckdb"
    assert q(out, "SELECT kind, step FROM ranges WHERE kind = 'step' ORDER BY step") == [
        ("step", 0), ("step", 1), ("step", 2)]
    assert q(out, "SELECT status FROM runs") == [("running",)]
    # the writer died without a word: the quality report says what the file cannot
    with cuptiprof.open(out) as prof:
        assert [r[2:4] for r in prof.report("quality").fetchall()] == [
            ("process_ended_early", str(q(out, "SELECT pid FROM processes")[0][0]))]
    if source == "fake":
        assert q(out, "SELECT DISTINCT step FROM gpu_activities ORDER BY step") == [(0,), (1,), (2,)]


def test_a_step_still_open_at_stop_is_marked_incomplete(tmp_path):
    import cuptiprof

    p = tmp_path / "o.duckdb"
    prof = cuptiprof.profile(p, source="none", quiet=True).start()
    with cuptiprof.step(0):
        pass
    left = cuptiprof.step(1)
    left.__enter__()   # not exited before stop()
    prof.stop()
    left.__exit__(None, None, None)   # after stop(): changes nothing in the file
    assert q(p, "SELECT subject, detail FROM data_quality WHERE check_name = 'step_incomplete'") == [
        ("1", "step 1 was ended early by stop() before the step's end: its numbers cover only the "
              "part of the step that ran")]


def test_forked_child_under_run_that_exits_normally_ends_normally(tmp_path):
    """sys.exit in a forked child of a recorded (no-GPU) run: the parent's writer it inherited
    is never freed there (freeing it at the interpreter's exit aborted the child)."""
    code = """
        import cuptiprof, os, sys
        for i in range(2):
            with cuptiprof.step(i): pass
        pid = os.fork()
        if pid == 0:
            with cuptiprof.step(100): pass
            sys.exit(0)
        print("child", os.waitpid(pid, 0)[1])
    """
    r = run_py(code, tmp_path, "-m", "cuptiprof", "run", "-o", "o.duckdb", "--no-report", "--", PY,
               CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0 and "child 0" in r.stdout, r.stdout + r.stderr
    assert "terminate called" not in r.stderr
    assert q(tmp_path / "o.duckdb", "SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step'"
             ) == [([0, 1, 100],)]


def test_cupti_correlation_stack_follows_ranges_across_threads_and_out_of_order(tmp_path):
    """CUPTI's external-correlation stack is per thread and pops its top: a range ended on
    another thread must not pop that thread's stack (CUPTI refuses, and GPU collection was
    switched off for the rest of the run), and a range ended out of order must take its own id
    off, not the one above it. Both are said in data_quality."""
    import asyncio
    import threading

    import cuptiprof
    from cuptiprof.collect.fake import FakeCupti
    from cuptiprof.collect.session import Session

    f = FakeCupti()
    p = tmp_path / "x.duckdb"

    async def request(name, wait):
        with cuptiprof.range(name):
            f.launch_kernel(f"{name}_first")
            await asyncio.sleep(wait)
            f.launch_kernel(f"{name}_second")

    async def both():
        await asyncio.gather(request("a", 0.01), request("b", 0.05))

    with Session(p, steps=4, source=f, quiet=True):
        with cuptiprof.range("step", step=0):
            r = cuptiprof.range("request")
            t = threading.Thread(target=r.__enter__)
            t.start()
            t.join()
            f.launch_kernel("k0")
            r.__exit__(None, None, None)          # ended on the main thread
        with cuptiprof.range("step", step=1):
            asyncio.run(both())
        for i in (2, 3):
            with cuptiprof.range("step", step=i):
                f.launch_kernel(f"k{i}")
    got = dict(q(p, "SELECT k.name, r.name FROM kernels k LEFT JOIN ranges r USING (range_id)"))
    assert got["k0"] == "step" and got["k2"] == got["k3"] == "step"   # collection went on
    assert got["b_second"] == "b"    # after a ended first, b's own id is on top again
    assert dict(q(p, "SELECT name, step FROM kernels WHERE name LIKE 'k%'")) == {"k0": 0, "k2": 2, "k3": 3}
    assert dict(q(p, "SELECT check_name, count FROM data_quality WHERE check_name IN "
                     "('range_thread_switch', 'ranges_interleaved', 'cupti_error')")) == {
        "range_thread_switch": 1, "ranges_interleaved": 1}


def test_steps_of_asyncio_tasks_that_overlap_and_end_in_order_are_said(tmp_path):
    """A short request's step opened during a long one's and ended before it: the long one's
    GPU work launched meanwhile was credited to the short one's step, and data_quality said
    nothing (only ranges that ended out of order were counted)."""
    import asyncio

    from cuptiprof.collect.fake import FakeCupti
    from cuptiprof.collect.session import Session

    f = FakeCupti()

    async def long(started, go, done):
        with cuptiprof.step(0):
            started.set()
            await go.wait()
            f.launch_kernel("long")        # while step 1 is open
            await done.wait()

    async def short(started, go, done):
        await started.wait()
        with cuptiprof.step(1):
            go.set()
            await asyncio.sleep(0)
            f.launch_kernel("short")
        done.set()

    async def main():
        started, go, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        await asyncio.gather(long(started, go, done), short(started, go, done))

    p = tmp_path / "i.duckdb"
    with Session(p, source=f, quiet=True):
        asyncio.run(main())
    assert q(p, "SELECT step FROM ranges ORDER BY end_ns") == [(1,), (0,)]   # ended in order
    (n, detail), = q(p, "SELECT count, detail FROM data_quality WHERE check_name = 'ranges_interleaved'")
    assert n == 1 and "asyncio" in detail and "opened last" in detail, detail


# -- a range ended by another task or thread does not stay open in this one -----------------------
TASK_IN_STEP = """
    import asyncio, cuptiprof
    async def worker():
        await asyncio.sleep(0.02)          # step 0 has ended by now, in the task that opened it
        for i in range(1, 3):
            with cuptiprof.step(i):
                with cuptiprof.range("work"):
                    await asyncio.sleep(0)
    async def main():
        with cuptiprof.step(0):
            t = asyncio.create_task(worker())   # starts from a copy of this task's open ranges
            await asyncio.sleep(0)
        await t
    {open}
    asyncio.run(main())
"""

AGEN_LEFT_EARLY = """
    import asyncio, cuptiprof, gc
    async def steps():
        for i in range(5):
            with cuptiprof.step(i):
                yield i
    async def main():
        async for i in steps():
            if i == 1:
                break
        gc.collect()
        await asyncio.sleep(0.01)     # asyncio's finalizer closes the generator in a task of its own
        for i in range(10, 13):
            with cuptiprof.step(i):
                await asyncio.sleep(0)
    asyncio.run(main())
"""

THREAD_HANDOFF = """
    import cuptiprof, threading
    r = cuptiprof.range("handoff")
    r.__enter__()
    t = threading.Thread(target=r.__exit__, args=(None, None, None)); t.start(); t.join()
    for i in range(1, 4):
        with cuptiprof.step(i):
            with cuptiprof.range("work"): pass
"""

TOP_LEVEL_STEPS = "SELECT step, depth, parent_id IS NULL FROM ranges WHERE kind = 'step' ORDER BY step"


@pytest.mark.parametrize("env", [{"CUDA_VISIBLE_DEVICES": ""}, {"CUPTIPROF_FAKE_CUPTI": "1"}],
                         ids=["no-gpu", "fake-cupti"])
@pytest.mark.parametrize("code, steps", [(TASK_IN_STEP.format(open=""), [0, 1, 2]),
                                         (AGEN_LEFT_EARLY, [0, 1, 10, 11, 12]),
                                         (THREAD_HANDOFF, [1, 2, 3])],
                         ids=["task-created-in-a-step", "async-generator-left-early",
                              "range-ended-on-another-thread"])
def test_a_range_ended_elsewhere_does_not_hold_later_steps_under_run(tmp_path, env, code, steps):
    """The ended range was still in this task's or thread's copy of the open ranges: every later
    step was recorded inside it, as a user range of the wrong step."""
    r = run_py(code, tmp_path, "-m", "cuptiprof", "run", "-o", "o.duckdb", "--no-report", "--", PY,
               **env)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "o.duckdb"
    assert q(out, TOP_LEVEL_STEPS) == [(s, 0, True) for s in steps]
    assert q(out, "SELECT list(step ORDER BY step) FROM ranges WHERE name = 'work'") == \
        [([s for s in steps if s] if "work" in code else None,)]


@pytest.mark.parametrize("code", [TASK_IN_STEP, THREAD_HANDOFF], ids=["task", "thread"])
def test_a_range_ended_elsewhere_does_not_hold_later_steps_in_profile(tmp_path, code):
    if "{open}" in code:
        code = code.format(open="with cuptiprof.profile('a.duckdb', source='none', quiet=True):")
        code = code.replace("\n    asyncio.run(main())", "\n        asyncio.run(main())")
        steps = [0, 1, 2]
    else:
        code = "import cuptiprof\ncuptiprof.profile('a.duckdb', source='none', quiet=True).start()\n" \
            + textwrap.dedent(code)
        steps = [1, 2, 3]
    r = run_py(code, tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "a.duckdb"
    assert q(out, TOP_LEVEL_STEPS) == [(s, 0, True) for s in steps]
    assert q(out, "SELECT list(step ORDER BY step) FROM ranges WHERE name = 'work'") == \
        [([s for s in steps if s],)]


FORK_IN_STEP = """
    import cuptiprof, os
    with cuptiprof.step(0):
        pid = os.fork()
    if pid == 0:
        for j in range(1, 3):
            with cuptiprof.step(j): pass
        os._exit(0)
    print("child", os.waitpid(pid, 0)[1])
"""


@pytest.mark.parametrize("env", [{"CUDA_VISIBLE_DEVICES": ""}, {"CUPTIPROF_FAKE_CUPTI": "1"}],
                         ids=["no-gpu", "fake-cupti"])
def test_a_fork_inside_an_open_step_under_run(tmp_path, env):
    """The step open at the fork is the parent's: the child does not write it as its own (no
    GPU), and does not stop recording ranges when it ends there (CUPTI: the child's ranges are
    the host-side recorder's, the parent's token is not)."""
    r = run_py(FORK_IN_STEP, tmp_path, "-m", "cuptiprof", "run", "-o", "o.duckdb", "--no-report",
               "--", PY, **env)
    assert r.returncode == 0 and "child 0" in r.stdout, r.stdout + r.stderr
    assert "bookkeeping failed" not in r.stderr, r.stderr
    got = q(tmp_path / "o.duckdb", "SELECT pid, list(step ORDER BY step) FROM ranges "
                                   "WHERE kind = 'step' GROUP BY 1 ORDER BY 2")
    assert [s for _, s in got] == [[0], [1, 2]] and got[0][0] != got[1][0]


@pytest.mark.parametrize("end, rc, status, exit_status", [
    ("sys.exit(3)", 3, "failed", 3),
    ("def main():\n    sys.exit(2)\nif __name__ == '__main__':\n    main()", 2, "failed", 2),
    ("sys.exit(0)", 0, "complete", 0),
    ("sys.exit('bye')", 1, "failed", 1),
    ("raise RuntimeError('boom')", 1, "failed", 1),
    ("raise KeyboardInterrupt", 130, "interrupted", 130),
    # a SystemExit caught, or one that ends a thread, is not the program's exit status
    ("try:\n    sys.exit(5)\nexcept SystemExit:\n    pass", 0, "complete", None),
    ("t = threading.Thread(target=sys.exit, args=(6,)); t.start(); t.join()", 0, "complete", None),
], ids=["exit-3", "exit-in-main", "exit-0", "exit-message", "exception", "ctrl-c", "exit-caught",
        "exit-in-thread"])
def test_a_run_never_stopped_keeps_how_the_program_ended(tmp_path, end, rc, status, exit_status):
    """start() without stop(): the run is closed at exit with the status and the exit status
    the program ended with; sys.exit(1) was recorded as a complete run of unknown status."""
    r = run_py("import cuptiprof, sys, threading\n"
               "cuptiprof.profile('a.duckdb', source='none', quiet=True).start()\n"
               "with cuptiprof.step(0): pass\n" + end + "\n", tmp_path)
    code = 128 - r.returncode if r.returncode < 0 else r.returncode   # -2: ended by SIGINT
    assert code == rc, r.stderr
    assert "cuptiprof" not in r.stderr, r.stderr
    out = tmp_path / "a.duckdb"
    assert q(out, "SELECT status FROM runs") == [(status,)]
    assert q(out, "SELECT exit_status, ended_early FROM processes") == [(exit_status, False)]
    assert q(out, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]


@pytest.mark.parametrize("code, rc, status", [
    ("5", 5, "failed"), ("0", 0, "complete"), ("None", 0, "complete"), ("'bye'", 1, "failed")],
    ids=["exit-5", "exit-0", "exit-none", "exit-message"])
def test_an_exit_inside_the_with_block_is_the_exit_status(tmp_path, code, rc, status):
    """sys.exit(N) inside `with profile(...)`: the block sees the SystemExit, so its code is
    the process's exit status (it was left NULL though the run was marked failed)."""
    r = run_py("import cuptiprof, sys\n"
               "with cuptiprof.profile('a.duckdb', source='none', quiet=True):\n"
               f"    sys.exit({code})\n", tmp_path)
    assert r.returncode == rc, r.stderr
    out = tmp_path / "a.duckdb"
    assert q(out, "SELECT status FROM runs") == [(status,)]
    assert q(out, "SELECT exit_status, ended_early FROM processes") == [(rc, False)]


@pytest.mark.parametrize("raise_, rc, status, exit_status", [
    ("raise RuntimeError('boom')", 1, "failed", 1),
    ("raise KeyboardInterrupt", 130, "interrupted", 130),
], ids=["exception", "ctrl-c"])
def test_an_exception_leaving_the_with_block_is_the_exit_status(tmp_path, raise_, rc, status,
                                                                  exit_status):
    """An exception that leaves `with profile(...)` ends the run with the exit status Python
    gives the process for it, as a run never stopped does (it was left NULL); the exception
    still reaches the program."""
    r = run_py("import cuptiprof\n"
               "with cuptiprof.profile('a.duckdb', source='none', quiet=True):\n"
               "    with cuptiprof.step(0): pass\n"
               f"    {raise_}\n", tmp_path)
    code = 128 - r.returncode if r.returncode < 0 else r.returncode   # -2: ended by SIGINT
    assert code == rc, r.stderr
    out = tmp_path / "a.duckdb"
    assert q(out, "SELECT status FROM runs") == [(status,)]
    assert q(out, "SELECT exit_status, ended_early FROM processes") == [(exit_status, False)]


def test_an_exception_leaving_the_with_block_propagates(tmp_path):
    import cuptiprof
    with pytest.raises(ValueError, match="mine"):
        with cuptiprof.profile(tmp_path / "a.duckdb", source="none", quiet=True):
            raise ValueError("mine")
    assert q(tmp_path / "a.duckdb", "SELECT exit_status FROM processes") == [(1,)]


def test_an_error_printed_before_start_does_not_mark_the_run_failed(tmp_path):
    """An interactive session keeps the last error it printed in sys.last_value: a run started
    after it and never stopped ends complete, not failed."""
    r = run_py("""
        import cuptiprof, sys
        sys.last_value = RuntimeError("an earlier mistake at the prompt")
        cuptiprof.profile("a.duckdb", source="none", quiet=True).start()
        with cuptiprof.step(0): pass
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "a.duckdb", "SELECT status FROM runs") == [("complete",)]


@pytest.mark.parametrize("fd", [1, 2])
def test_profile_in_a_process_started_with_stdout_or_stderr_closed(tmp_path, fd):
    """`python prog.py >&-` (or `2>&-`): the profile's file took descriptor 1 (or 2), and what
    the program or a C library wrote there landed in the DuckDB file. The closed descriptor gets
    /dev/null first, and writes to it go nowhere."""
    from _run_helpers import env
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(f"""
        import os, cuptiprof
        p = cuptiprof.profile("a.duckdb", source="none", quiet=True).start()
        with cuptiprof.step(0):
            pass
        assert os.path.samestat(os.fstat({fd}), os.stat(os.devnull)), "fd {fd} is not /dev/null"
        os.write({fd}, b"written to a closed descriptor " * 4096)
        p.stop()
    """))
    r = subprocess.run([sys.executable, str(prog)], cwd=tmp_path, env=env(), capture_output=True,
                       text=True, timeout=120, preexec_fn=lambda: os.close(fd))
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "a.duckdb", "SELECT status FROM runs") == [("complete",)]


@pytest.mark.parametrize("stderr", ["closed", "/dev/full"])
def test_a_notice_on_a_stderr_that_is_closed_or_full_leaves_the_program_alone(tmp_path, stderr):
    """cuptiprof's own lines go to the program's stderr: where it has none (`2>&-`, where Python
    sets sys.stderr to None) they went to its stdout, and where it cannot be written
    (`2>/dev/full`) the OSError ended the program."""
    from _run_helpers import env
    if stderr != "closed" and not os.path.exists(stderr):
        pytest.skip(f"no {stderr} here")
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import cuptiprof
        with cuptiprof.profile("a.duckdb", source="none"):   # CUPTIPROF_DISABLE: one notice
            with cuptiprof.step(0):
                pass
        print("the program's output")
    """))
    with open(os.devnull if stderr == "closed" else stderr, "w") as err:
        r = subprocess.run([sys.executable, str(prog)], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=err, text=True, timeout=120, env=env(CUPTIPROF_DISABLE="1"),
                           preexec_fn=(lambda: os.close(2)) if stderr == "closed" else None)
    assert (r.returncode, r.stdout) == (0, "the program's output\n")
    assert q(tmp_path / "a.duckdb", "SELECT status FROM runs") == [("complete",)]
