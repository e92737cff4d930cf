"""Per-step latency of examples/denoise.py with no profiler, with cuptiprof and with
torch.profiler, interleaved, at a GPU-busy size and at a small launch-bound size.

    python scripts/overhead.py --json overhead.json [--repeats 3] [--budget-s 170]

Each run is its own process (CUPTI takes one subscriber; a fresh process per run also keeps
one tool's state from leaking into the next). Rounds rotate the order of the three modes so
drift hits all alike. Per run the first --skip timed steps are dropped (allocator, cuDNN and
collector start-up), and so is the step after them, where the profilers start; the rest are pooled per (size, mode): median, p10-p90 and the min-max of
the per-run medians. cuptiprof runs through cuptiprof.profile() in the process with the kinds
kernel, memcpy, memset, sync and api, flushing after every step as `cuptiprof run` does (the
step time includes that flush). torch.profiler collects CPU and CUDA activities over the same
steps (no export: that happens after the loop). The JSON is rewritten after every run, so a
timeout keeps what finished. --budget-s stops starting new rounds once it is spent.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("none", "cuptiprof", "torch")
KINDS = ["kernel", "memcpy", "memset", "sync", "api"]
# name -> example arguments (GPU); the dry run shrinks them to the CPU-sized "tiny" preset
SIZES = {
    "busy": ["--size", "large", "--batch", "4", "--warmup", "2", "--steps", "16"],
    "launch_bound": ["--size", "small", "--batch", "1", "--warmup", "2", "--steps", "40"],
}
DRY_SIZES = {
    "busy": ["--size", "tiny", "--batch", "2", "--warmup", "1", "--steps", "6"],
    "launch_bound": ["--size", "tiny", "--batch", "1", "--warmup", "1", "--steps", "6"],
}


# -- one run (child process) -----------------------------------------------------------------
def child(mode: str, ex_args: list[str], out: str, skip: int) -> int:
    from _denoise import load, timed_markers

    mod = load()
    on_enter = on_exit = None
    inner = None
    ctx = None
    if mode == "cuptiprof":
        import cuptiprof

        inner = lambda name, **kw: cuptiprof.range(name, **kw)  # noqa: E731
        path = Path(tempfile.mkdtemp(prefix="cpoh-")) / "run.duckdb"
        ctx = cuptiprof.profile(path, warmup=skip, kinds=KINDS)
    elif mode == "torch":
        import torch
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        prof = profile(activities=acts)
        state = {"on": False}

        def on_enter(step):  # noqa: F811 - start at the first measured step, like cuptiprof
            if step == skip and not state["on"]:
                prof.start()
                state["on"] = True
    times = timed_markers(mod, inner=inner, on_enter=on_enter, on_exit=on_exit)
    t0 = time.perf_counter()
    if ctx is not None:
        with ctx:
            rc = mod.main(ex_args)
    else:
        rc = mod.main(ex_args)
    if mode == "torch" and state["on"]:
        prof.stop()
    wall = time.perf_counter() - t0
    Path(out).write_text(json.dumps({"mode": mode, "rc": rc, "wall_s": wall,
                                     "steps": [[s, t] for s, t in times]}))
    return rc


# -- the interleaved series (parent) --------------------------------------------------------
def _stats(values: list[float]) -> dict | None:
    if not values:
        return None
    v = sorted(values)
    q = lambda f: v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))]  # noqa: E731
    return {"n": len(v), "median_ms": 1e3 * statistics.median(v), "p10_ms": 1e3 * q(0.1),
            "p90_ms": 1e3 * q(0.9), "min_ms": 1e3 * v[0], "max_ms": 1e3 * v[-1]}


def summarize(runs: list[dict], skip: int) -> dict:
    skip += 1  # the first profiled step also pays the profiler's start (enable, Kineto init)
    out: dict = {}
    for size in {r["size"] for r in runs}:
        res = {}
        for mode in MODES:
            rs = [r for r in runs if r["size"] == size and r["mode"] == mode and r.get("rc") == 0]
            pooled = [t for r in rs for s, t in r["steps"] if s is not None and s >= skip]
            meds = [statistics.median([t for s, t in r["steps"] if s is not None and s >= skip])
                    for r in rs if any(s is not None and s >= skip for s, _ in r["steps"])]
            st = _stats(pooled)
            if st:
                st["runs"] = len(rs)
                st["run_medians_ms"] = [round(1e3 * m, 4) for m in meds]
            res[mode] = st
        base = res.get("none")
        for mode in ("cuptiprof", "torch"):
            if base and res.get(mode):
                res[mode]["overhead_pct"] = 100.0 * (res[mode]["median_ms"] / base["median_ms"] - 1)
        out[size] = res
    return out


def table(summary: dict) -> str:
    lines = [f"{'size':<13} {'mode':<10} {'runs':>4} {'steps':>5} {'median ms':>10} "
             f"{'p10-p90 ms':>17} {'run medians ms':>22} {'overhead':>9}"]
    for size, res in sorted(summary.items()):
        for mode in MODES:
            s = res.get(mode)
            if not s:
                lines.append(f"{size:<13} {mode:<10} (no successful run)")
                continue
            meds = s["run_medians_ms"]
            ov = f"{s['overhead_pct']:+.2f}%" if "overhead_pct" in s else ""
            lines.append(f"{size:<13} {mode:<10} {s['runs']:>4} {s['n']:>5} {s['median_ms']:>10.3f} "
                         f"{s['p10_ms']:>8.3f}-{s['p90_ms']:<8.3f} "
                         f"{(f'{min(meds):.3f}-{max(meds):.3f}' if meds else ''):>22} {ov:>9}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default="overhead.json")
    p.add_argument("--repeats", type=int, default=int(os.environ.get("OVERHEAD_REPEATS", 3)))
    p.add_argument("--budget-s", type=float, default=170.0,
                   help="start no new round after this many seconds")
    p.add_argument("--run-timeout-s", type=float, default=120.0)
    p.add_argument("--skip", type=int, default=2, help="timed steps dropped at the start of each run")
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("example_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        ex = a.example_args[1:] if a.example_args[:1] == ["--"] else a.example_args
        return child(a.child, ex, a.out, a.skip)

    from _denoise import dry_run

    sizes = DRY_SIZES if dry_run() else SIZES
    if dry_run():
        print("overhead: DRY RUN (no GPU): tiny sizes on the CPU, cuptiprof over the fake CUPTI; "
              "the numbers mean nothing")
    t_start = time.monotonic()
    runs: list[dict] = []
    tmp = Path(tempfile.mkdtemp(prefix="overhead-"))
    result = {"repeats_asked": a.repeats, "skip": a.skip, "dry_run": dry_run(),
              "sizes": {s: sizes[s] for s in a.sizes}, "kinds": KINDS}
    for r in range(a.repeats):
        if r and time.monotonic() - t_start > a.budget_s:
            print(f"overhead: budget of {a.budget_s:.0f} s spent after {r} round(s); stopping")
            break
        for size in a.sizes:
            order = MODES[r % 3:] + MODES[:r % 3]
            for mode in order:
                out = tmp / f"{size}-{mode}-{r}.json"
                cmd = [a.python, str(HERE / "overhead.py"), "--child", mode, "--out", str(out),
                       "--skip", str(a.skip), "--", *sizes[size]]
                t0 = time.monotonic()
                try:
                    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=a.run_timeout_s)
                    rc, err = cp.returncode, cp.stderr
                except subprocess.TimeoutExpired:
                    rc, err = 124, f"timed out after {a.run_timeout_s:.0f} s"
                rec = {"size": size, "mode": mode, "round": r, "rc": rc,
                       "proc_s": round(time.monotonic() - t0, 2), "steps": []}
                if rc == 0 and out.is_file():
                    rec.update(json.loads(out.read_text()))
                else:
                    rec["error"] = (err or "").strip().splitlines()[-3:]
                runs.append(rec)
                med = statistics.median([t for s, t in rec["steps"] if s is not None and s > a.skip] or [0])
                print(f"overhead: round {r} {size:<12} {mode:<9} rc={rc} process {rec['proc_s']:.1f} s, "
                      f"median step {1e3 * med:.3f} ms" + (f"  {rec.get('error')}" if rc else ""),
                      flush=True)
                result["runs"] = runs
                result["summary"] = summarize(runs, a.skip)
                Path(a.json).write_text(json.dumps(result, indent=1))
    result["summary"] = summarize(runs, a.skip)
    Path(a.json).write_text(json.dumps(result, indent=1))
    sys.stdout.write(table(result["summary"]))
    return 0 if all(r["rc"] == 0 for r in runs) and runs else 1


if __name__ == "__main__":
    sys.exit(main())
