"""What `cuptiprof run` prints once OUT is written: the report (on stderr), and the notices for a
run that profiled no process, captured no GPU activity or marked no steps.
"""
from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

from cuptiprof.errors import CuptiprofError, shell_word
from cuptiprof.store.files import first_row

if TYPE_CHECKING:
    from cuptiprof.run.launcher import LaunchOptions, LaunchResult


def _none_profiled(cmd: list[str], code: int = 0) -> str:
    """Why no process of the command was profiled: CUPTIPROF_DISABLE left set in the shell
    keeps out every process, not only the ones it was meant for; a command that sets
    PYTHONPATH (`env PYTHONPATH=src python ...`) drops the bootstrap folder cuptiprof put there."""
    from cuptiprof.run.settings import DISABLE

    value = os.environ.get(DISABLE, "")
    if value not in ("", "0"):
        return (f"no process of the command was profiled: {DISABLE}={value} is set in the "
                f"environment, which keeps every process out; unset it (unset {DISABLE}) and run "
                "again")
    if any(re.search(r"(?:^|\s)PYTHONPATH=(?!\S*\$\{?PYTHONPATH\b)", a) for a in cmd):
        return ("no process of the command was profiled: the command sets PYTHONPATH, which "
                "replaces the one through which cuptiprof loads in every Python; add to it "
                "instead (PYTHONPATH=src:$PYTHONPATH)")
    if code in (126, 127):   # a shell's: a program it was to run is not there or cannot run
        what = "was not found" if code == 127 else "could not be run"
        return (f"no process of the command was profiled: it exited with status {code}, a "
                f"program it started {what} (the shell or env said which, before this)")
    flag = _python_flag(cmd)
    if flag:
        what = ("skips the site module, which loads cuptiprof" if flag == "-S" else
                "ignores PYTHONPATH, through which cuptiprof loads")
        return (f"no process of the command was profiled: python {flag} {what} in every Python; "
                f"leave out {flag}")
    return ("no process of the command was profiled: cuptiprof records the Python processes a "
            "command starts, with a Python that can import cuptiprof and its libraries (see any "
            "warning above)")


def _python_flag(cmd: list[str]) -> str | None:
    """-I, -E or -S given to a Python of the command (`python -I app.py`, `sh -c 'python3 -E
    ...'`): each keeps cuptiprof from loading there."""
    words = [w for a in cmd for w in a.split()]
    for i, w in enumerate(words):
        if not re.fullmatch(r"python[\d.]*", os.path.basename(w)):
            continue
        skip = False
        for opt in words[i + 1:]:
            if skip:
                skip = False
                continue
            if not opt.startswith("-") or opt == "-" or opt.startswith("--"):
                break
            for j, c in enumerate(opt[1:]):
                if c in "IES":
                    return "-" + c
                if c in "cm":   # the code or module follows: the rest is the program's
                    return None
                if c in "WX":   # its value is the rest of the word, or the next word
                    skip = j == len(opt) - 2
                    break
    return None


def _no_steps(o: LaunchOptions, named: list[str]) -> str:
    """Why a run has no steps, in terms of the step option the user gave (telling them to
    give the option they gave would not help)."""
    if o.step_range:
        seen = f"; the ranges it opened: {', '.join(named)}" if named else ""
        return (f"no steps were marked: the program opened no range named {o.step_range!r} "
                f"(--step-range){seen}")
    if o.step_fn:
        return (f"no steps were marked: the program never called {o.step_fn} (--step-fn); give "
                "the function that does a step's work")
    return ("no steps were marked; mark them with cuptiprof.range('step'), --step-range NAME or "
            "--step-fn MODULE:QUALNAME")


def print_summary(res: LaunchResult, o: LaunchOptions) -> None:
    from cuptiprof.analyse.profile import open_profile
    from cuptiprof.commands.report import SUMMARY, print_reports

    sys.stdout.flush()
    try:   # on stderr: the program's stdout (a result file, a pipe) stays its own
        with open_profile(res.output) as prof:
            if res.recorded_nothing:
                # the program failed before it did anything (a missing script, a bad argument):
                # empty tables and hints about marking steps would hide its own error
                print(f"cuptiprof: notice: the command exited with status {res.exit_code} before "
                      "anything was recorded; no report", file=sys.stderr)
                print(f"cuptiprof: wrote {shell_word(res.output)}", file=sys.stderr)
                return
            print("", file=sys.stderr, flush=True)
            print_reports(prof, list(SUMMARY), out=sys.stderr)
            steps, warm = first_row(prof.con.execute(
                "SELECT count(DISTINCT step) FILTER (WHERE kind = 'step'), "
                "count(*) FILTER (WHERE kind = 'warmup') FROM ranges"))
            early = first_row(prof.con.execute("SELECT count(*) FROM processes WHERE ended_early"))[0]
            ops = first_row(prof.con.execute("SELECT EXISTS (SELECT 1 FROM kernel_rows)"))[0]
            named = [] if steps or not o.step_range else [
                n for (n,) in prof.con.execute(   # the program's own ranges, most called first
                    "SELECT name FROM ranges WHERE kind = 'user' GROUP BY name "
                    "ORDER BY count(*) DESC, name LIMIT 5").fetchall()]
    except CuptiprofError as exc:
        print(f"cuptiprof: warning: cannot print the report: {exc}", file=sys.stderr)
        steps = early = warm = ops = None
        named = []
    sys.stdout.flush()
    if not res.profiled:
        print(f"cuptiprof: notice: {_none_profiled(res.command, res.exit_code)}", file=sys.stderr)
    elif res.no_gpu:
        if ops is False and steps == 0 and warm:   # torch ops ran, in the warm-up alone
            from cuptiprof.run.recorder import WARM_UP_ONLY   # as the file says it

            print(f"cuptiprof: notice: {WARM_UP_ONLY}", file=sys.stderr)
        elif ops is False:   # a program that ran no torch op: no CPU op times to show either
            print("cuptiprof: notice: no GPU activity was captured (no CUDA GPU found), and no "
                  "CPU op: without a GPU, run records the torch ops a program runs "
                  "(torch.profiler)", file=sys.stderr)
        else:
            print("cuptiprof: notice: no GPU activity was captured (no CUDA GPU found); the "
                  "report shows CPU op times from torch.profiler (device -1)", file=sys.stderr)
        if o.kinds:
            print(f"cuptiprof: notice: --kinds {' '.join(o.kinds)} chooses CUPTI activity kinds; "
                  "without a GPU it has no effect", file=sys.stderr)
    if steps == 0 and warm:
        print(f"cuptiprof: notice: every step the program marked ({warm}) was warm-up "
              f"(--warmup {o.warmup}); lower --warmup or run more steps", file=sys.stderr)
    elif steps == 0 and res.profiled and res.exit_code < 128:   # not cut short by a signal
        print(f"cuptiprof: notice: {_no_steps(o, named)}", file=sys.stderr)
    if early:
        from cuptiprof.commands import counted

        whose = "its collector" if early == 1 else "their collectors"
        print(f"cuptiprof: notice: {counted(early, 'process', 'processes')} ended before {whose} "
              "closed (see processes.ended_early)", file=sys.stderr)
    print(f"cuptiprof: wrote {shell_word(res.output)}", file=sys.stderr)
