"""A profiled program whose main thread is blocked in C (a library wait that no signal
interrupts) still ends on SIGTERM or SIGHUP, as it would without cuptiprof, with what it had
recorded: `timeout N cuptiprof run -- CMD` and a scheduler's cancel must not hang."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from _run_helpers import cli, popen, q, script, wait_for

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


def _ends(proc: subprocess.Popen, timeout: float = 40) -> str:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        subprocess.run(["pkill", "-9", "-f", "blocked_prog.py"], check=False)
        proc.communicate()
        raise AssertionError("the profiled program outlived the signal") from None
    return err


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
    wait_for(ready, proc)
    t0 = time.monotonic()
    os.kill(proc.pid if to == "launcher" else int(ready.read_text()), sig)
    err = _ends(proc)
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
    wait_for(ready, proc)
    os.kill(int(ready.read_text()), signal.SIGTERM)
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
