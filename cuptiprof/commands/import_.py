"""`cuptiprof import TRACE... -o OUT.duckdb`: torch.profiler (Kineto) JSON or Nsight Systems
SQLite exports into one cuptiprof file, so every report, comparison and gate works on them."""
from __future__ import annotations

import sys

from cuptiprof.commands import counted, input_file, named_output
from cuptiprof.errors import shell_word


def register(sub) -> None:
    p = sub.add_parser(
        "import", help="import torch.profiler traces (.json/.json.gz) or Nsight Systems exports",
        description="Import torch.profiler / Kineto Chrome traces (.json, .json.gz; one file per "
        "rank of one job) or Nsight Systems SQLite exports (nsys export --type sqlite) into one "
        "cuptiprof file. The output appears only when every input was read. cuptiprof's "
        "exports of some steps of one process (export --steps) imported together are that "
        "one process again; two that hold the same step are refused.")
    p.add_argument("traces", nargs="+", metavar="TRACE", type=input_file,
                   help="torch.profiler trace files (one per rank) or Nsight Systems SQLite exports")
    p.add_argument("-o", "--output", required=True, metavar="OUT.duckdb",
                   help="the cuptiprof file to write (must not exist, unless --force)")
    p.add_argument("--label", help="run label (default: the output file's name without .duckdb; "
                   "a cuptiprof export's own). A cuptiprof export of a merged file of several "
                   "runs comes back as those runs, each file's apart (torch.profiler's traces beside it: "
                   "one more run); --label names them LABEL/1..N, in the order given")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from cuptiprof.interop.importing import import_traces
    named_output(args.output)
    res = import_traces(args.traces, args.output, label=args.label, overwrite=args.force,
                        progress=False if args.no_progress else None)
    rows = res["rows"]
    parts = [counted(rows.get(t, 0), n) for t, n in (
        ("kernel_rows", "kernel"), ("memcpys", "memcpy"), ("memsets", "memset"),
        ("api_call_rows", "API call"), ("range_rows", "range"))]
    if rows.get("logs"):   # a cuptiprof export's log records
        parts.append(counted(rows["logs"], "log record"))
    # one summary per process: a trace file holds one, an nsys export none or several, and
    # cuptiprof's exports of some steps of one process are that one process
    counts = [getattr(f, "steps", 0) for f in res["files"]]
    n_files = len(args.traces)   # import_traces refuses a file given twice
    one_each = len(counts) == n_files == len({getattr(f, "path", None) for f in res["files"]})
    procs = "" if one_each else f", {counted(len(counts), 'process', 'processes')}"
    # one process per rank: each has the job's steps, so a sum would count every step N times
    steps = (f"{counted(counts[0], 'step')} in each of the {len(counts)} "
             f"{'processes' if procs else 'files'}"
             if len(counts) > 1 and len(set(counts)) == 1 else counted(sum(counts), 'step'))
    print(f"cuptiprof: imported {counted(n_files, 'file')} ({res['source']}{procs}): "
          f"{', '.join(parts)}, "
          f"{steps} -> {shell_word(res['path'])}", file=sys.stderr)
    return 0
