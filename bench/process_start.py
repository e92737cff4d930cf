"""What `cuptiprof run` adds to each profiled process for its exit status, its signals and its
steps: loading the exit-status watch (cuptiprof/run/_exit_status.c) and calling watch() once per
process, starting the SIGTERM/SIGHUP watcher (cuptiprof/run/term_watch.py: a pipe, the wakeup
fd, a thread) and what it adds to each os.fork() (the thread is stopped across it), and the
lock a `--step-fn` / `--step-range` step's start takes.

    python bench/process_start.py [--rounds 5] [--n 200000]

Each round loads the extension in a fresh interpreter (so the load is the real first one);
the lock is timed in this process (timeit, best of 5, the loop's own cost subtracted).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import timeit
from pathlib import Path

_ONE = """
import signal, sys, threading, time, typing   # loaded by cuptiprof.run.child before any of these
from cuptiprof.native import load_extension
t0 = time.perf_counter()
mod = load_extension("cuptiprof.run._exit_status", api=1)
t1 = time.perf_counter()
mod.watch(sys.argv[1])
t2 = time.perf_counter()
from cuptiprof.run.term_watch import TermWatch
TermWatch(lambda sig: True, lambda: False, lambda sig: None).start()
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""

# os.fork() + waitpid of a child that exits at once, median of 50, with and without the watcher
_FORK = """
import os, signal, sys, threading, time, typing
if sys.argv[1] == "1":
    from cuptiprof.run.term_watch import TermWatch
    TermWatch(lambda sig: True, lambda: False, lambda sig: None).start()
ts = []
for i in range(50):
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    ts.append(time.perf_counter() - t)
print(sorted(ts)[len(ts) // 2])
"""


def fork_ms(rounds: int) -> tuple[list[float], list[float]]:
    """Median fork times without and with the watcher, alternating, one fresh process each."""
    bare, watched = [], []
    for _ in range(rounds):
        for flag, into in (("0", bare), ("1", watched)):
            out = subprocess.run([sys.executable, "-c", _FORK, flag], capture_output=True,
                                 text=True, check=True).stdout
            into.append(float(out) * 1e3)
    return bare, watched


def load_and_watch(rounds: int) -> tuple[list[float], list[float], list[float]]:
    loads, watches, terms = [], [], []
    with tempfile.TemporaryDirectory() as d:
        for i in range(rounds):
            out = subprocess.run([sys.executable, "-c", _ONE, str(Path(d) / f"{i}.exit")],
                                 capture_output=True, text=True, check=True).stdout.split()
            loads.append(float(out[0]))
            watches.append(float(out[1]))
            terms.append(float(out[2]))
    return loads, watches, terms


def lock_ns(n: int) -> float:
    lock = threading.RLock()

    def locked():
        with lock:
            pass

    def bare():
        pass
    best = lambda f: min(timeit.repeat(f, number=n, repeat=5)) / n * 1e9  # noqa: E731
    return best(locked) - best(bare)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=200_000)
    a = ap.parse_args()
    loads, watches, terms = load_and_watch(a.rounds)
    print(f"extension load: median {statistics.median(loads) * 1e3:.3f} ms "
          f"(min {min(loads) * 1e3:.3f}, max {max(loads) * 1e3:.3f}) over {a.rounds} fresh processes")
    print(f"watch(): median {statistics.median(watches) * 1e6:.1f} us")
    print(f"signal watcher (import and start): median {statistics.median(terms) * 1e6:.1f} us "
          f"(max {max(terms) * 1e6:.1f})")
    bare, watched = fork_ms(a.rounds)
    print(f"os.fork() + waitpid: median {statistics.median(bare):.2f} ms without the signal "
          f"watcher, {statistics.median(watched):.2f} ms with it")
    print(f"step lock: {lock_ns(a.n):.0f} ns per step start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
