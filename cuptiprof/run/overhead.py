"""`cuptiprof run --overhead [--repeat R] -- CMD`: what profiling costs, measured by the tool.

First CMD runs once, profiled and untimed: the first run of a command pays for cold caches (its
files, Python's imports, cuptiprof's own), which would make profiling look cheaper than no
profiling, and a profiled run warms what both kinds read. Then CMD runs R times without
profiling (only its steps are timed, in memory, no DuckDB) and R times with it, interleaved
(base, profiled, profiled, base, ...) so that drift in the machine hits both alike. Per-step
latency is the median host duration of the recorded steps of each run; end to end is the wall
time of the whole command. The table shows the median of the runs and their spread (min-max).
"""
from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from cuptiprof.errors import CuptiprofError
from cuptiprof.render.table import plain_table
from cuptiprof.run.launcher import LaunchOptions, launch
from cuptiprof.store.files import first_row


def _median_steps_base(parts: Path) -> float | None:
    durs = []
    for f in parts.glob("*.steps.json"):
        try:
            durs += [d for _, d in json.loads(f.read_text())["steps"]]
        except (OSError, ValueError, KeyError):
            continue
    return statistics.median(durs) / 1e6 if durs else None


def _median_steps_profiled(path: Path) -> float | None:
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        row = first_row(con.execute("SELECT median(end_ns - start_ns) FROM ranges WHERE kind = 'step' "
                                    "AND end_ns IS NOT NULL"))
    finally:
        con.close()
    return row[0] / 1e6 if row and row[0] is not None else None


def measure(cmd: list[str], opts: LaunchOptions, repeat: int, out=None) -> int:
    out = out or sys.stdout
    tmp = Path(tempfile.mkdtemp(prefix="cuptiprof-overhead-"))
    runs = {"base": [], "prof": []}
    warnings: list[str] = []   # of --step-fn, said once after the runs (the same in each)
    own: list[str] = []        # --step-range/--step-fn marked no step: the program's own
    runs_made = [("warm", 0)] + [(kind, r) for r in range(repeat) for kind in
                                 (("base", "prof") if r % 2 == 0 else ("prof", "base"))]
    try:
        for kind, r in runs_made:
            o = replace(opts, output=str(tmp / f"{kind}-{r}.duckdb"), report=False, quiet=True,
                        mode="time" if kind == "base" else opts.mode)
            res = launch(cmd, o)
            if res.step_fn_warning and res.step_fn_warning not in warnings:
                warnings.append(res.step_fn_warning)
            if res.own_steps_warning and res.own_steps_warning not in own:
                own.append(res.own_steps_warning)
            if res.exit_code != 0:
                which = {"base": "an unprofiled run", "prof": "a profiled run",
                         "warm": "the warm-up run"}[kind]
                raise CuptiprofError(f"{cmd[0]} exited with status {res.exit_code} in "
                                     f"{which}; --overhead needs a command that succeeds")
            if kind == "warm":
                shutil.rmtree(res.parts, ignore_errors=True)
                print(f"cuptiprof: overhead warm-up run, with profiling, untimed (it pays for "
                      f"cold caches): {res.wall_s:.2f} s", file=sys.stderr)
                continue
            step = _median_steps_base(res.parts) if kind == "base" else _median_steps_profiled(res.output)
            shutil.rmtree(res.parts, ignore_errors=True)
            runs[kind].append((step, res.wall_s))
            print(f"cuptiprof: overhead run {r + 1}/{repeat} {'without' if kind == 'base' else 'with'} "
                  f"profiling: {res.wall_s:.2f} s" + (f", {step:.3f} ms/step" if step else ""),
                  file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for w in warnings:
        print(f"cuptiprof: warning: {w} (the steps measured come from the processes that had "
              "it)", file=sys.stderr)
    for w in own:
        print(f"cuptiprof: warning: {w}; the steps measured are the ones it marks itself with "
              "cuptiprof.range('step')", file=sys.stderr)
    rows = []
    for label, idx, unit in (("per step (median of recorded steps)", 0, "ms"), ("end to end", 1, "s")):
        b = [x[idx] for x in runs["base"] if x[idx] is not None]
        p = [x[idx] for x in runs["prof"] if x[idx] is not None]
        if not b or not p:
            # with a warm-up, steps may be marked and every one of them warm-up
            rows.append([label, "", "", "", "", "no steps marked" if not opts.warmup else
                         f"no step recorded (none marked, or all within --warmup {opts.warmup})"])
            continue
        mb, mp = statistics.median(b), statistics.median(p)
        rows.append([label, f"{mb:.3f} {unit}", f"{mp:.3f} {unit}", f"{100 * (mp - mb) / mb:+.1f}",
                     f"{min(b):.3f}-{max(b):.3f}", f"{min(p):.3f}-{max(p):.3f}"])
    out.write(f"cuptiprof overhead: {repeat} run{'' if repeat == 1 else 's'} each, interleaved, "
              f"after one untimed warm-up run: {' '.join(cmd)}\n")
    out.write(plain_table(["metric", "without", "with", "diff_pct", "spread_without", "spread_with"],
                          rows, [False, True, True, True, True, True]))
    for note in noise_notes(runs):
        out.write(note + "\n")
    return 0


def noise_notes(runs: dict) -> list[str]:
    """Lines saying when a difference cannot be told from run-to-run noise: one run of each
    kind (no spread to judge by), or spreads with and without profiling that overlap (on a
    busy machine profiling can even read as faster)."""
    if min(len(runs["base"]), len(runs["prof"])) < 2:
        return ["note: one run of each kind: run-to-run noise is unknown; --repeat 3 or more "
                "tells the cost of profiling from noise"]
    out = []
    for label, idx in (("per step", 0), ("end to end", 1)):
        b = [x[idx] for x in runs["base"] if x[idx] is not None]
        p = [x[idx] for x in runs["prof"] if x[idx] is not None]
        if b and p and max(min(b), min(p)) <= min(max(b), max(p)):
            out.append(f"note: {label}: the spreads with and without profiling overlap, so the "
                       "difference is within run-to-run noise (a quieter machine or a higher "
                       "--repeat narrows them)")
    return out
