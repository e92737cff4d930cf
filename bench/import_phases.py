"""Where one import's time goes: each phase of `import_traces` timed inside one process, over
several rounds (the first round pays for the process's cold caches; the table shows every round).

    python bench/import_phases.py [TRACE.json.gz] [--rounds 4]

Phases, in ms (start-end: when the phase began and ended, from the import's start):
  scan     the C scanner over each piece of text (the gunzip thread runs beside it)
  take     each piece's columns (numpy)
  open     opening the output on its helper thread (DuckDB, the schema), beside the parse
  finish   the columns and links after the parse, and the writer's append
  append   the writer's one transaction: interning, inserts and the COMMIT (its checkpoint)
  commit   the COMMIT alone
  close    the writer's close: run row, busy summary, CHECKPOINT, close, sync, rename
  sync     the sync before the rename, on the import's path (sync_behind: the one a thread
           starts after the commit, beside the rest)
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
DEFAULT = "hta/negative_queue_length_values_check/rank0.json.gz"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(SHARED / DEFAULT))
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from cuptiprof.interop import importing, kineto
    from cuptiprof.interop import pieces as P
    from cuptiprof.store import writer as W

    log: list[tuple[str, float, float]] = []

    def timed(obj, name: str, label) -> None:
        f = getattr(obj, name)

        @functools.wraps(f)
        def g(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                what = label(a) if callable(label) else label
                if what:
                    log.append((what, t, time.perf_counter()))
        setattr(obj, name, g)

    timed(P, "scan", "scan")
    timed(kineto.KinetoFile, "_take", "take")
    timed(kineto.KinetoFile, "_finish", "finish")
    timed(W.Writer, "__init__", "open")
    timed(W.Writer, "append", "append")
    timed(W.Writer, "close", "close")
    main_thread = threading.main_thread()
    timed(W, "sync_file", lambda a: "sync" if threading.current_thread() is main_thread
          else "sync_behind")

    class Con:   # the writer's connection, its COMMIT timed
        def __init__(self, con):
            self._con = con

        def execute(self, sql, *a, **k):
            t = time.perf_counter()
            try:
                return self._con.execute(sql, *a, **k)
            finally:
                if sql == "COMMIT":
                    log.append(("commit", t, time.perf_counter()))

        def __getattr__(self, name):
            return getattr(self._con, name)

    opened = W.Writer._open

    def _open(self, *a):
        opened(self, *a)
        self._con = Con(self._con)
    W.Writer._open = _open

    order = ("scan", "take", "open", "finish", "append", "commit", "close", "sync", "sync_behind")
    print(f"# {Path(args.trace).name}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}")
    print("| round | import ms | " + " | ".join(order) + " |")
    print("|---|---|" + "---|" * len(order))
    for r in range(args.rounds):
        log.clear()
        out = os.path.join(tempfile.mkdtemp(), "o.duckdb")
        t0 = time.perf_counter()
        importing.import_traces([args.trace], out)
        total = 1000 * (time.perf_counter() - t0)
        cells = []
        for name in order:
            spans = [(a, b) for n, a, b in log if n == name]
            if not spans:
                cells.append("")
                continue
            ms = 1000 * sum(b - a for a, b in spans)
            lo, hi = (1000 * (x - t0) for x in (min(a for a, _ in spans), max(b for _, b in spans)))
            cells.append(f"{ms:.1f} ({lo:.0f}-{hi:.0f})")
        print(f"| {r + 1} | {total:.0f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
