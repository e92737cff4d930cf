"""`cuptiprof run [options] -- CMD ARGS...`: profile an unmodified command."""
from __future__ import annotations

import argparse

from cuptiprof.commands import output_name, step_count, whole_number
from cuptiprof.errors import UsageError


class _Once(argparse.Action):
    """An option that names one thing per run: given again with another value, it is refused
    (argparse kept the last: `--step-fn m:prefill --step-fn m:decode` dropped prefill's steps
    without a word)."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest)
        if before is not None and before != values:
            what = "function" if self.dest == "step_fn" else "range name"
            raise argparse.ArgumentError(self, f"given twice ({before}, then {values}): a run "
                                               f"takes one {what} as its steps; give one")
        setattr(namespace, self.dest, values)


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="profile a command (every Python process in it) into one DuckDB file",
        description="Run CMD with every Python process in it profiled; write one DuckDB file "
                    "and print the per-op and per-step report. Without a CUDA GPU, CPU op times "
                    "are recorded through torch.profiler instead.",
        usage="cuptiprof run [options] -- CMD [ARGS...]")
    p.add_argument("-o", "--output", metavar="OUT.duckdb",
                   help="output file, which must not exist, unless --force (default: a new "
                        "cuptiprof-DATE-TIME.duckdb in the current folder)")
    p.add_argument("--force", action="store_true",
                   help="replace OUT.duckdb if it exists, once the run's output is written (a "
                        "command that fails before anything is recorded, or of which no process "
                        "was profiled, leaves it; a leftover "
                        "OUT.duckdb.parts of a run that did not finish is still refused)")
    p.add_argument("--warmup", type=step_count, default=0, metavar="K", help="steps to skip before recording (default 0)")
    p.add_argument("--steps", type=step_count, default=None, metavar="N",
                   help="how many steps to record after the warm-up, then collection stops "
                        "(default: all); a count, where report --steps takes step numbers")
    p.add_argument("--step-range", metavar="NAME", action=_Once,
                   help="an NVTX range the program opens (torch.cuda.nvtx.range_push) that is the step")
    p.add_argument("--step-fn", metavar="MODULE:QUALNAME", action=_Once,
                   help="a function whose every call is one step, e.g. mypkg.model:Denoiser.forward, or "
                        "__main__:denoise for one the script itself defines, __main__:main.denoise for one "
                        "defined inside main()")
    p.add_argument("--kinds", nargs="+", metavar="KIND",
                   help="activity kinds to collect, space- or comma-separated: kernel memcpy memset sync "
                        "api nvtx memory overhead (default: all; overhead is CUPTI's own overhead "
                        "records, not --overhead)")
    p.add_argument("--light", action="store_true",
                   help="ranges and logs only: no CUPTI, and no CPU ops without a GPU")
    p.add_argument("--log-level", default="INFO", metavar="LEVEL",
                   help="record Python logging records at or above LEVEL in the logs table (default INFO)")
    p.add_argument("--overhead", action="store_true",
                   help="run CMD with and without profiling, interleaved, and print the difference "
                        "(writes no file)")
    p.add_argument("--repeat", type=whole_number, default=None, metavar="R",
                   help="runs of each kind for --overhead (default 3)")
    p.add_argument("--no-report", action="store_true", help="do not print the report at the end "
                   "(only the line naming the file written, after a notice where no process of "
                   "the command was profiled)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the command to profile, with its arguments, after --")
    p.set_defaults(func=run)


def run(args) -> int:
    from cuptiprof.run.launcher import LaunchOptions, launch, outer_run, stand_aside
    from cuptiprof.run.preflight import split_kinds, validate, warn_knobs

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("run needs a command after --, e.g. cuptiprof run -- python infer.py")
    if args.repeat is not None and not args.overhead:
        raise UsageError(f"--repeat {args.repeat} goes with --overhead (the runs of each kind it "
                         "measures); add --overhead or leave out --repeat")
    if args.output:
        output_name(args.output, "-o")
    if args.force and args.output is None and not args.overhead:   # --overhead: refused below
        raise UsageError("--force replaces the file -o names, and without -o the output is a new "
                         "file; add -o OUT.duckdb or leave out --force")
    args.kinds = split_kinds(args.kinds)
    if args.light and args.kinds:
        raise UsageError(f"--kinds {' '.join(args.kinds)} chooses CUPTI activity kinds and --light "
                         "collects none (ranges and logs only); leave out one of them")
    opts = LaunchOptions(output=args.output, warmup=args.warmup, steps=args.steps,
                         step_range=args.step_range, step_fn=args.step_fn, kinds=args.kinds,
                         light=args.light, log_level=args.log_level, report=not args.no_report,
                         force=args.force)
    outer = outer_run()
    if outer is not None:
        validate(cmd, opts)
        return stand_aside(cmd, outer, args.output)   # the outer run warned of its knobs
    if args.overhead:
        from cuptiprof.run.overhead import measure

        if args.output is not None or args.force:
            given = "-o" if args.output is not None else "--force"
            raise UsageError("--overhead measures runs with and without profiling and writes no "
                             f"file; leave out {given}")
        if args.no_report:
            raise UsageError("--overhead prints its measurement and no report, so --no-report "
                             "changes nothing; leave it out")
        repeat = 3 if args.repeat is None else args.repeat
        if repeat < 1:
            raise UsageError(f"--repeat {repeat}: must be at least 1")
        validate(cmd, opts)   # a mistake gets its one error line, before any warning
        warn_knobs()   # once, not for each of its runs (launch() says it for a run)
        return measure(cmd, opts, repeat)
    return launch(cmd, opts).exit_code
