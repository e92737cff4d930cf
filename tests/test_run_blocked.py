"""A profiled program whose main thread is blocked in C (a library wait that no signal
interrupts) still ends on SIGTERM or SIGHUP, as it would without cuptiprof, with what it had
recorded: `timeout N cuptiprof run -- CMD` and a scheduler's cancel must not hang."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _run_helpers import cli, popen, q, script, written

PY = sys.executable

# A wait in C that signals do not interrupt (the C library retries it), as a collective or a
# device wait inside a library: the interpreter gets no chance to run a Python handler.
BLOCK = """
import ctypes
_libc = ctypes.CDLL(None)
_mutex = ctypes.create_string_buffer(64)
_libc.pthread_mutex_lock(_mutex)
def block():
    _libc.pthread_mutex_lock(_mutex)
"""


def _ends(proc: subprocess.Popen, timeout: float = 40) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        subprocess.run(["pkill", "-9", "-f", "blocked_prog.py"], check=False)
        proc.communicate()
        raise AssertionError("the profiled program outlived the signal") from None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("to", ["launcher", "program"])
def test_a_program_blocked_in_c_ends_by_the_signal(tmp_path, sig, to):
    ready = tmp_path / "ready"
    p = script(tmp_path, BLOCK + f"""
import os, pathlib, cuptiprof
with cuptiprof.range("step", step=0):
    pass
pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))
block()
""", name="blocked_prog.py")
    proc = popen(["run", "-o", "b.duckdb", "--no-report", "--", PY, p], tmp_path)
    pid = int(written(ready, proc))
    t0 = time.monotonic()
    os.kill(proc.pid if to == "launcher" else pid, sig)
    _, err = _ends(proc)
    assert proc.returncode == 128 + sig, err
    assert time.monotonic() - t0 < 20, "ended, but late"
    out = tmp_path / "b.duckdb"
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]
    assert q(out, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]
    assert q(out, "SELECT exit_status FROM processes") == [(128 + sig,)]


def test_a_program_with_its_own_handler_is_left_to_it(tmp_path):
    """The program's own SIGTERM handler decides: it runs once the C call returns, however
    long after the signal, and the program ends as it chooses."""
    ready = tmp_path / "ready"
    p = script(tmp_path, f"""
import ctypes, os, pathlib, signal, time
got = []
signal.signal(signal.SIGTERM, lambda *a: got.append(1))
libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)
libc.pthread_mutex_lock(mutex)
class timespec(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))
# blocked in C for 3 s, longer than cuptiprof waits for a handler of its own to start
libc.pthread_mutex_timedlock(mutex, ctypes.byref(timespec(int(time.time()) + 4, 0)))
print("handled", got, flush=True)
""")
    proc = popen(["run", "-o", "h.duckdb", "--no-report", "--", PY, p], tmp_path)
    os.kill(int(written(ready, proc)), signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "handled [1]" in out, out


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_a_blocked_multiprocessing_worker_dies_of_terminate(tmp_path, method):
    """Process.terminate() of a worker blocked in C ends it, as without cuptiprof."""
    p = script(tmp_path, BLOCK + f"""
import multiprocessing as mp, pathlib, time
def work(ready):
    pathlib.Path(ready).touch()
    block()
if __name__ == "__main__":
    w = mp.get_context("{method}").Process(target=work, args=("ready",))
    w.start()
    while not pathlib.Path("ready").exists():
        time.sleep(0.01)
    time.sleep(0.2)
    w.terminate(); w.join(30)
    print("worker", w.pid, w.is_alive(), w.exitcode, flush=True)
    if w.is_alive():
        w.kill()
""")
    r = cli(["run", "-o", "w.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    pid, alive, code = r.stdout.split("worker ", 1)[1].split()
    assert (alive, code) == ("False", str(-signal.SIGTERM)), r.stdout
    assert q(tmp_path / "w.duckdb", f"SELECT exit_status FROM processes WHERE pid = {pid}") == \
        [(128 + signal.SIGTERM,)]


# The watcher's OS thread ends 300 ms after its Python part (a loaded machine that runs it
# late): a thread-specific value whose destructor, usleep, runs as the thread exits.
LINGER = """
import ctypes
libc = ctypes.CDLL(None)
key = ctypes.c_uint()
assert libc.pthread_key_create(ctypes.byref(key), libc.usleep) == 0
listen = TermWatch._listen
def _listen(self, r):
    libc.pthread_setspecific(key, ctypes.c_void_p(300_000))
    return listen(self, r)
TermWatch._listen = _listen
"""


@pytest.mark.parametrize("linger", [False, True], ids=["thread-ends-at-once", "thread-ends-late"])
def test_the_watcher_thread_is_stopped_across_a_fork(tmp_path, linger):
    """A fork sees no thread of cuptiprof's (Python 3.12+ warns of a process that forks with
    threads), and the thread listens again after it, in the parent and in the child; also where
    the OS thread ends well after its Python part (the fork waited a count of tries, ~50 ms)."""
    p = script(tmp_path, """
import os, signal, sys
from cuptiprof.run.term_watch import TermWatch
tasks = lambda: len(os.listdir("/proc/self/task"))
""" + (LINGER if linger else "") + """
at_fork = []
os.register_at_fork(before=lambda: at_fork.append(tasks()))   # runs after cuptiprof's own
w = TermWatch(lambda sig: True, lambda: False, lambda sig: None)
assert w.start()
before = tasks()
pid = os.fork()
if pid == 0:
    w.after_fork()
    os._exit(tasks())
_, status = os.waitpid(pid, 0)
print(before, at_fork, tasks(), os.waitstatus_to_exitcode(status))
""")
    r = subprocess.run([PY, p], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(maxsplit=1) == ["2", "[1] 2 2\n"], r.stdout


def test_a_forked_child_blocked_in_c_ends_by_sigterm(tmp_path):
    """After an os.fork, the parent's watcher listens again and the child has its own."""
    ready = tmp_path / "ready"
    p = script(tmp_path, BLOCK + f"""
import os, pathlib, signal, time
pid = os.fork()
if pid == 0:
    block()
time.sleep(0.5)
t0 = time.monotonic()
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), time.monotonic() - t0 < 20, flush=True)
pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))
block()
""", name="blocked_prog.py")
    proc = popen(["run", "-o", "f.duckdb", "--no-report", "--", PY, p], tmp_path)
    os.kill(int(written(ready, proc)), signal.SIGTERM)
    out, err = _ends(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert f"child {-signal.SIGTERM} True" in out, out
    codes = q(tmp_path / "f.duckdb", "SELECT exit_status FROM processes ORDER BY pid")
    assert codes == [(128 + signal.SIGTERM,), (128 + signal.SIGTERM,)], (codes, out)


def test_the_program_finds_signals_as_it_would_without_cuptiprof(tmp_path):
    """cuptiprof's SIGTERM handler and wakeup fd are not the program's to see: a handler that
    chains to the one it found (`if callable(prev): prev(...)`) ran cuptiprof's, which ended
    the process by SIGTERM instead of the program's own exit; a library that checks that no
    wakeup fd was set before its own (trio warns) found one."""
    ready = tmp_path / "ready"
    p = script(tmp_path, f"""
import os, pathlib, signal, socket, sys, time
prev = signal.getsignal(signal.SIGTERM)
r, w = socket.socketpair()
w.setblocking(False)
old_fd = signal.set_wakeup_fd(w.fileno())
def on_term(signum, frame):
    if callable(prev):
        prev(signum, frame)
    sys.exit(3)
old = signal.signal(signal.SIGTERM, on_term)
print(prev is signal.SIG_DFL, old is signal.SIG_DFL, old_fd, flush=True)
pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))
time.sleep(60)
""")
    proc = popen(["run", "-o", "c.duckdb", "--no-report", "--", PY, p], tmp_path)
    os.kill(int(written(ready, proc)), signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (3, "True True -1\n"), err


@pytest.mark.parametrize("how", ["asyncio", "reraise"])
def test_a_program_that_sets_the_default_back_is_still_flushed(tmp_path, how):
    """SIG_DFL set back by the program (asyncio's loop removing its signal handlers as it
    closes; a handler that cleans up, then re-raises the signal to die of it) is cuptiprof's
    flush-then-die again, and its wakeup fd hears the signal again: the steps recorded before
    are kept, a main thread blocked in C ends too."""
    ready = tmp_path / "ready"
    before = {
        "asyncio": """
import asyncio
async def main():
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: None)
    await asyncio.sleep(0)
asyncio.run(main())
""",
        "reraise": """
def on_term(signum, frame):
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)
signal.signal(signal.SIGTERM, on_term)
""",
    }[how]
    p = script(tmp_path, BLOCK + "import os, pathlib, signal, cuptiprof\n" + before + f"""
for i in range(3):
    with cuptiprof.range("step", step=i):
        pass
pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))
{"block()" if how == "asyncio" else "import time; time.sleep(60)"}
""", name="blocked_prog.py")
    # steps committed only as the process ends: what is kept is what the signal flushed
    proc = popen(["run", "-o", "d.duckdb", "--no-report", "--", PY, p], tmp_path,
                 CUPTIPROF_FLUSH_EVERY_S="600")
    os.kill(int(written(ready, proc)), signal.SIGTERM)
    _, err = _ends(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err
    out = tmp_path / "d.duckdb"
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]
    assert q(out, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(3,)]
    assert q(out, "SELECT exit_status FROM processes") == [(128 + signal.SIGTERM,)]


def test_a_signal_the_main_thread_blocks_waits_until_it_unblocks_it(tmp_path):
    """A program that blocks SIGTERM in its main thread (pthread_sigmask around a critical
    section) gets it once it unblocks it, as without cuptiprof; another thread (the watcher, a
    library's) took it at once and the process died inside the critical section."""
    ready = tmp_path / "ready"
    p = script(tmp_path, f"""
import os, pathlib, signal, time, cuptiprof
for i in range(3):
    with cuptiprof.range("step", step=i):
        pass
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM}})
pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))
time.sleep(2)   # longer than cuptiprof waits for its handler to start
print("critical section done", flush=True)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGTERM}})
print("not reached", flush=True)
""")
    proc = popen(["run", "-o", "m.duckdb", "--no-report", "--", PY, p], tmp_path,
                 CUPTIPROF_FLUSH_EVERY_S="600")
    os.kill(int(written(ready, proc)), signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (128 + signal.SIGTERM, "critical section done\n"), err
    db = tmp_path / "m.duckdb"
    assert q(db, "SELECT status FROM runs") == [("interrupted",)]
    assert q(db, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(3,)]
    assert q(db, "SELECT exit_status FROM processes") == [(128 + signal.SIGTERM,)]


@pytest.mark.parametrize("second", [signal.SIGHUP, signal.SIGTERM])
def test_a_second_signal_as_the_handler_claims_the_ending_is_ignored(tmp_path, second):
    """A hang-up reaches a process twice (the launcher forwards the one its process group also
    got): the second ran the handler again inside the first's claim of the ending, found the
    ending taken by a thread it did not know yet, and waited for the watcher to end the
    process, forever. Here the second signal comes in exactly that window."""
    ready = tmp_path / "ready"
    p = script(tmp_path, f"""
import os, pathlib, cuptiprof
from cuptiprof.run.child import shared
w = shared._term_watch
def claim():
    if not w._claim.acquire(blocking=False):
        return False
    os.kill(os.getpid(), {int(second)})   # its handler runs before claim() returns
    return True
w.claim = claim
with cuptiprof.range("step", step=0):
    pass
pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))
import time; time.sleep(60)
""", name="blocked_prog.py")
    proc = popen(["run", "-o", "b.duckdb", "--no-report", "--", PY, p], tmp_path)
    os.kill(int(written(ready, proc)), signal.SIGHUP)
    _, err = _ends(proc)
    assert proc.returncode == 128 + signal.SIGHUP, err
    assert q(tmp_path / "b.duckdb", "SELECT status FROM runs") == [("interrupted",)]
