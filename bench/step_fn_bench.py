"""What `--step-fn __main__:fn` costs the program: the main script's imports (run before its def,
while the watch is on) and a Python loop after the def (the watch is gone by then), with and
without the watch, alternating, in fresh interpreters.

    python bench/step_fn_bench.py [--rounds 5] [--python EXE ...] [--root CHECKOUT]

On Python 3.12+ the watch sees only the main script's own lines (sys.monitoring); on 3.10/3.11
a trace function runs until the def, so imports before it are slower there.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SITE = """
import sys
sys.path.insert(0, {root!r})
if {watch!r}:
    from cuptiprof.run import main_hook
    main_hook.watch("step", lambda mod: None)
"""

SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
try:
    import torch
    what = "import torch"
except ImportError:
    import asyncio, decimal, email.parser, http.client, logging, unittest, xml.dom.minidom
    what = "import stdlib modules"
t1 = time.perf_counter()

class Item:                          # Python calls before the def (building a model, a config)
    def __init__(self, i):
        self.i = i
    def value(self):
        return self.i * 2
total = 0
for i in range(200_000):
    total += Item(i).value()
t1b = time.perf_counter()

def step(n):
    return sum(i * i for i in range(n))

t2 = time.perf_counter()
for _ in range(200):
    step(10_000)
t3 = time.perf_counter()
print(json.dumps({{"what": what, "imports": t1 - t0, "calls": t1b - t1, "loop": t3 - t2}}))
"""


def one(exe: str, watch: bool, tmp: Path, root: str = str(ROOT)) -> dict:
    site = tmp / ("on" if watch else "off")
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITE.format(root=root, watch=watch))
    script = tmp / "prog.py"
    script.write_text(textwrap.dedent(SCRIPT.format()))
    out = subprocess.run([exe, str(script)], env={**os.environ, "PYTHONPATH": str(site)},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--python", nargs="+", default=[sys.executable])
    ap.add_argument("--root", default=str(ROOT), help="the cuptiprof checkout to measure")
    args = ap.parse_args()
    print("| python | measured | without watch s | with watch s | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for exe in args.python:
            ver = subprocess.run([exe, "-c", "import sys; print(sys.version.split()[0])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            res = {False: [], True: []}
            for _ in range(args.rounds):
                for watch in (False, True):
                    res[watch].append(one(exe, watch, tmp, args.root))
            what = res[False][0]["what"]
            for key, label in (("imports", what + " (before the def)"),
                               ("calls", "400 k Python calls before the def"),
                               ("loop", "loop after the def")):
                off = statistics.median(r[key] for r in res[False])
                on = statistics.median(r[key] for r in res[True])
                print(f"| {ver} | {label} | {off:.3f} | {on:.3f} | {on / off:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
