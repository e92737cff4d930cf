"""What cuptiprof adds to a profiled process: its peak RSS, the wall time of its step loop and
of the whole `cuptiprof run`, and which large libraries it loaded that the program did not ask
for (pandas). A tiny program with 20 steps, under `cuptiprof run --light` and the default mode.

    python bench/child_footprint.py [--rounds 5] [--before TREE]

--before TREE also runs another checkout's cuptiprof (e.g. a `git worktree` of an earlier
commit), alternating with this one in every round.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import json, resource, sys, time
import cuptiprof
t0 = time.perf_counter()
for i in range(20):
    with cuptiprof.range("step", step=i):
        time.sleep(0.002)
t1 = time.perf_counter()
print(json.dumps({"loop_s": t1 - t0, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "pandas": "pandas" in sys.modules}))
"""


def one(tree: Path, mode: list[str], tmp: Path) -> dict:
    prog = tmp / "prog.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    out = tmp / "o.duckdb"
    if out.exists():
        out.unlink()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "cuptiprof", "run", "-o", str(out), "--no-report",
                        *mode, "--", sys.executable, str(prog)], env=env, capture_output=True,
                       text=True, check=True, cwd=tmp)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["run_s"] = time.perf_counter() - t
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", type=Path)
    args = ap.parse_args()
    trees = [("now", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    try:
        import pandas  # noqa: F401
        print(f"pandas {pandas.__version__} is installed")
    except ImportError:
        print("pandas is not installed: the pandas column can only say False")
    print("| code | mode | child peak RSS MB | step loop s | whole run s | child imported pandas |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for mode in (["--light"], []):
            res = {name: [] for name, _ in trees}
            for _ in range(args.rounds):
                for name, tree in trees:
                    res[name].append(one(tree, mode, tmp))
            for name, _ in trees:
                rs = res[name]
                med = {k: statistics.median(r[k] for r in rs) for k in ("peak_mb", "loop_s", "run_s")}
                print(f"| {name} | {' '.join(mode) or 'default (no GPU: torch.profiler)'} | "
                      f"{med['peak_mb']:.1f} | {med['loop_s']:.3f} | {med['run_s']:.2f} | "
                      f"{'yes' if any(r['pandas'] for r in rs) else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
