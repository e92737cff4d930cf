"""Import speed and peak memory: `cuptiprof import` against (a) the usual script (gunzip,
json.loads, sum dur/count per name over kernel and memcpy events) and (b) Holistic Trace
Analysis's trace loader, on the same traces in the same run. Each approach runs in its own
subprocess; time is the work inside it (after imports; wall clock, and CPU seconds of all
its threads), memory its peak RSS (VmHWM) and its growth (peak RSS less the RSS once its
modules are imported: what the work itself adds to the interpreter). Each round runs every approach back to back, so a
speed-up compares runs under the same load; the table shows medians over the rounds.

"end to end" adds the time the approach's imports take (numpy, pyarrow, DuckDB and cuptiprof's
own modules; the script's gzip and json) to its work: what a user waits for at the command line,
less the interpreter's own start, which both pay. Children run with Python's bytecode cache on
(cuptiprof's modules compiled first), as an installed package has it, whatever
PYTHONDONTWRITEBYTECODE says here.

    python bench/import_bench.py [TRACE.json.gz ...] [--big N] [--repeat 3] [--msgspec]
                                 [--before TREE]

--msgspec also runs cuptiprof with CUPTIPROF_NATIVE=0 (msgspec decoding, as without a C
compiler); --before TREE also runs the cuptiprof of another checkout, in the same rounds.

--big N also builds (in a temp dir) a trace N times the largest one, events repeated with
shifted timestamps, to show memory on traces larger than the interpreter's own footprint.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEFAULT = ["hta/df_index_resolver/df_index_resolver.json.gz",
           "kineto-tbplugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
           "hta/negative_queue_length_values_check/rank0.json.gz"]

# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report this
# (large) parent's peak.
PEAK = """
import resource
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def peak(key="VmHWM:"):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
def rss():
    return peak("VmRSS:")
"""
RUNNERS = {
    "cuptiprof": PEAK + """
import time, sys, tempfile, os
t0 = time.perf_counter()
from cuptiprof.interop.importing import import_traces
t1 = time.perf_counter(); c1 = cpu(); r1 = rss()
out = os.path.join(tempfile.mkdtemp(), "o.duckdb")
res = import_traces([sys.argv[1]], out)
t2 = time.perf_counter()
print("pandas_imported", "pandas" in sys.modules)
print(t2 - t1, cpu() - c1, t1 - t0, r1, peak())
""",
    "json_script": PEAK + """
import time, sys
t0 = time.perf_counter()
import gzip, json, collections
t1 = time.perf_counter(); c1 = cpu(); r1 = rss()
with gzip.open(sys.argv[1]) as fh:
    doc = json.loads(fh.read())
tot = collections.defaultdict(float); cnt = collections.Counter()
for e in doc["traceEvents"]:
    if e.get("cat") in ("kernel", "gpu_memcpy", "Kernel", "Memcpy"):
        tot[e["name"]] += e["dur"]; cnt[e["name"]] += 1
t2 = time.perf_counter()
print(t2 - t1, cpu() - c1, t1 - t0, r1, peak())
""",
    "hta": PEAK + """
import time, sys, os, shutil, tempfile
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter(); c1 = cpu(); r1 = rss()
d = tempfile.mkdtemp()
shutil.copy(sys.argv[1], os.path.join(d, "rank-0.json.gz"))
TraceAnalysis(trace_dir=d)
t2 = time.perf_counter()
print(t2 - t1, cpu() - c1, t1 - t0, r1, peak())
""",
}


RUNNERS["cuptiprof_msgspec"] = RUNNERS["cuptiprof"]  # the same, with CUPTIPROF_NATIVE=0
RUNNERS["cuptiprof_before"] = RUNNERS["cuptiprof"]  # the same, from another checkout (--before)
ENV = {"cuptiprof_msgspec": {"CUPTIPROF_NATIVE": "0"}}


def measure(name: str, trace: Path) -> dict:
    env = {**os.environ, **ENV.get(name, {})}
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # see compile_sources
    # `python -c` puts the working directory first on sys.path: run another checkout from it
    cwd = env["PYTHONPATH"] if name == "cuptiprof_before" else None
    r = subprocess.run([sys.executable, "-c", RUNNERS[name], str(trace)], capture_output=True,
                       text=True, timeout=1800, env=env, cwd=cwd)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    work, cpu, imports, base_kb, rss_kb = r.stdout.split()[-5:]
    return {"work_s": float(work), "cpu_s": float(cpu), "import_s": float(imports),
            "peak_mb": int(rss_kb) / 1024, "growth_mb": (int(rss_kb) - int(base_kb)) / 1024,
            "pandas": "pandas_imported True" in r.stdout}


def compile_sources(*trees: Path) -> None:
    """Bytecode for cuptiprof's modules, as `pip install` writes it: without it each child
    compiles them from source again (~35 ms of its imports where PYTHONDONTWRITEBYTECODE is
    set), which no installed cuptiprof does."""
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "cuptiprof")],
                       check=True, env={k: v for k, v in os.environ.items()
                                        if k != "PYTHONDONTWRITEBYTECODE"})


def info(trace: Path) -> tuple[int, int]:
    with gzip.open(trace) as fh:
        raw = fh.read()
    return len(raw), len(json.loads(raw)["traceEvents"])


def make_big(src: Path, n: int, dest: Path) -> Path:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    ev = doc["traceEvents"]
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in ev) - min(e.get("ts", 0) for e in ev if e.get("ts"))
    out = []
    for k in range(n):
        shift = k * (span + 1000)
        for e in ev:
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = e2["ts"] + shift
            if isinstance(e2.get("name"), str) and e2["name"].startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{k * 1000 + int(e2['name'][13:])}"
            out.append(e2)
    doc["traceEvents"] = out
    with gzip.open(dest, "wt", compresslevel=3) as fh:
        json.dump(doc, fh)
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--big", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds; each round runs every approach back to back (medians are shown)")
    ap.add_argument("--no-hta", action="store_true", help="leave Holistic Trace Analysis out")
    ap.add_argument("--msgspec", action="store_true",
                    help="also run cuptiprof with CUPTIPROF_NATIVE=0 (no native scanner)")
    ap.add_argument("--before", metavar="TREE",
                    help="also run cuptiprof from another checkout (e.g. a `git worktree` of an "
                         "earlier commit, its C extensions built), side by side with this one")
    args = ap.parse_args()
    if args.before:
        ENV["cuptiprof_before"] = {"PYTHONPATH": str(Path(args.before).resolve())}
    traces = [Path(t) for t in args.traces] or [SHARED / t for t in DEFAULT]
    compile_sources(Path(__file__).resolve().parents[1],
                    *([Path(args.before).resolve()] if args.before else []))
    tmp = tempfile.mkdtemp()
    if args.big:
        traces.append(make_big(traces[0], args.big, Path(tmp) / f"big{args.big}x.json.gz"))
    names = [n for n in RUNNERS if not (args.no_hta and n == "hta")
             and not (n == "cuptiprof_msgspec" and not args.msgspec)
             and not (n == "cuptiprof_before" and not args.before)]
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"load average {os.getloadavg()[0]:.1f}, median of {args.repeat} rounds")
    print("| trace | events | JSON MB | approach | work s | CPU s | +imports s | peak RSS MB | "
          "growth MB | speed-up | end to end s | speed-up end to end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in traces:
        size, n = info(t)
        rounds: dict[str, list] = {name: [] for name in names}
        for _ in range(args.repeat):  # side by side: every approach under the same load
            for name in names:
                rounds[name].append(measure(name, t))
        ours = [m.get("work_s") for m in rounds["cuptiprof"]]
        ours_all = [m["work_s"] + m["import_s"] if "work_s" in m else None
                    for m in rounds["cuptiprof"]]
        for name, ms in rounds.items():
            bad = next((m for m in ms if "error" in m), None)
            if bad:
                print(f"| {t.name} | {n:,} | {size / 1e6:.1f} | {name} | failed: {bad['error']} | | | | | | | |")
                continue
            med = {k: statistics.median(m[k] for m in ms) for k in ms[0] if k != "pandas"}
            sp = sp_all = ""
            if name != "cuptiprof" and None not in ours:
                sp = f"{statistics.median(m['work_s'] / o for m, o in zip(ms, ours)):.2f}x"
                sp_all = f"{statistics.median((m['work_s'] + m['import_s']) / o for m, o in zip(ms, ours_all)):.2f}x"
            all_s = statistics.median(m["work_s"] + m["import_s"] for m in ms)
            print(f"| {t.name} | {n:,} | {size / 1e6:.1f} | {name} | {med['work_s']:.2f} | "
                  f"{med['cpu_s']:.2f} | {med['import_s']:.2f} | {med['peak_mb']:.0f} | "
                  f"{med['growth_mb']:.0f} | {sp} | {all_s:.2f} | {sp_all} |")
        if any(m.get("pandas") for m in rounds["cuptiprof"]):
            print(f"| {t.name} | | | (cuptiprof's work above includes importing pandas, "
                  "which pyarrow does on its first Array.to_numpy in the writer) | | | | | | | | |")
        sys.stdout.flush()
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
