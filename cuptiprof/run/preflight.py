"""What `cuptiprof run` checks and claims before the command starts: the options as given, the
output's name, and OUT.parts, reserved as the lock that keeps two runs from writing one output.
"""
from __future__ import annotations

import datetime as _dt
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cuptiprof.collect.cupti_source import ALL_KINDS as KINDS, split_kinds as _split
from cuptiprof.errors import InputError, UsageError, WriterBusy, shell_word
from cuptiprof.outputs import check_output, write_failed
from cuptiprof.run import settings as S
from cuptiprof.store.files import recover_command, running_launcher

if TYPE_CHECKING:
    from cuptiprof.run.launcher import LaunchOptions


def split_kinds(given: list[str] | None) -> list[str] | None:
    """--kinds kernel,memcpy memset: kinds are taken comma- or space-separated, or both; each
    once, in the order given."""
    if given is None:
        return None
    # a quoted list (--kinds "$KINDS") holds its spaces inside one argument
    kinds = _split(given)   # as profile(kinds=...) splits them
    if not kinds:
        raise UsageError(f"--kinds {' '.join(given)!r}: no kind given; choose from {', '.join(KINDS)}")
    return kinds


def validate(cmd: list[str], o: LaunchOptions) -> str:
    """Check everything the user gave before anything starts; returns the resolved executable."""
    if not cmd:
        raise UsageError("run needs a command after --, e.g. cuptiprof run -- python infer.py")
    if not cmd[0].strip():   # `cuptiprof run -- "$CMD"` with CMD unset
        raise UsageError(f"the command is empty ({cmd[0]!r}); give the program to run after --, "
                         "e.g. cuptiprof run -- python infer.py")
    if o.steps is not None and o.steps < 1:
        raise UsageError(f"--steps {o.steps}: must be at least 1 (leave it out to record every step)")
    if o.warmup < 0:
        raise UsageError(f"--warmup {o.warmup}: must be 0 or more")
    for k in o.kinds or []:
        if k not in KINDS:
            raise UsageError(f"--kinds {k}: unknown kind; choose from {', '.join(KINDS)}")
    if o.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise UsageError(f"--log-level {o.log_level}: choose DEBUG, INFO, WARNING, ERROR or CRITICAL")
    # `--step-range "$NAME"` with NAME unset recorded a run without steps, as if left out
    for opt, value, give in (("--step-range", o.step_range, "the name of the range"),
                             ("--step-fn", o.step_fn, "MODULE:QUALNAME")):
        if value is not None and not value.strip():
            raise UsageError(f"{opt} {value!r}: empty; give {give}, or leave it out")
    if o.step_fn:
        _check_step_fn(o.step_fn, cmd)
    exe = shutil.which(cmd[0])
    if exe is None:
        path = Path(cmd[0])
        if os.sep not in cmd[0]:
            what = "command not found"
        elif path.is_dir():
            what = "is a directory, not a command"
        elif path.exists():
            word = shell_word(cmd[0])
            what = (f"not executable; run it with python (cuptiprof run -- python {word}) or "
                    f"chmod +x {word}" if path.suffix == ".py" else f"not executable; chmod +x {word}")
        else:
            what = "no such file"
        raise InputError(f"{shell_word(cmd[0])}: {what}")   # a newline kept to one line
    return exe


def _check_step_fn(spec: str, cmd: list[str]) -> None:
    module, sep, qual = spec.partition(":")
    if not sep or not module or not qual or not all(p.isidentifier() or p == "<locals>"
                                                     for p in qual.split(".")) \
            or not all(p.isidentifier() for p in module.split(".")):
        raise UsageError(f"--step-fn {spec!r}: expected MODULE:QUALNAME, e.g. "
                         "diffusers.models:UNet2DConditionModel.forward")
    # Where the child will look: the script's folder (python script.py), the working folder
    # (python -m), PYTHONPATH, then this interpreter's path. Only the top-level package is looked
    # up here, so no user code runs in the launcher.
    top = module.split(".")[0]
    if module in sys.builtin_module_names and "<locals>" not in qual:
        _check_builtin_step_fn(spec, module, qual)
    extra = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for a in cmd[1:]:
        if a.endswith(".py") and os.path.isfile(a):
            extra.insert(0, os.path.dirname(os.path.abspath(a)))
            break
    saved = list(sys.path)
    try:
        sys.path[:0] = extra
        found = top in sys.modules or importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path[:] = saved
    if not found:
        raise InputError(f"--step-fn {spec}: cannot import {top!r} (not on the command's Python path)")


def _check_builtin_step_fn(spec: str, module: str, qual: str) -> None:
    """A module compiled into Python (builtins, sys) runs no user code on import: what it
    names is looked up here, and a C function refused before the program starts. A name it
    lacks is left to the process, which says so as for any module."""
    from cuptiprof.run import main_hook

    obj = importlib.import_module(module)
    for p in qual.split("."):
        try:
            obj = getattr(obj, p)
        except AttributeError:
            return
    why = main_hook.not_python(spec, qual, obj)
    if why:
        raise UsageError(why)


def warn_knobs() -> None:
    """One warning line per tuning knob set to what is not a number of seconds: each profiled
    process falls back to its default silently (a typo must not stop the program), so the
    launcher says it, once for the run."""
    from cuptiprof.errors import env_seconds_problem

    for name, default in S.KNOBS.items():
        msg = env_seconds_problem(name, default)
        if msg:
            print(f"cuptiprof: warning: {msg}", file=sys.stderr)


def output_path(requested: str | None, force: bool = False, inputs=()) -> Path:
    """inputs: the files the command names (its script, a weights file): -o may not replace
    one, --force or not (`-o infer.py --force -- python infer.py` replaced the script)."""
    if requested is not None and not requested.strip():
        # -o "$OUT" with OUT unset: not a request for the default name
        raise InputError(f"-o {requested!r}: the output path is empty; give a file name, or leave "
                         "-o out for a new default name")
    if requested:
        # only checked here: with force the old file stays until the run's output replaces it
        return check_output(requested, inputs=inputs, force=force)
    if not os.access(".", os.W_OK):
        raise InputError("the current directory is not writable; give an output file with -o")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for i in range(1, 1000):
        out = Path(f"cuptiprof-{stamp}{'' if i == 1 else f'-{i}'}.duckdb")
        if not out.exists() and not parts_dir(out).exists():
            return out
    raise InputError("cannot find a free default output name; give one with -o")


def parts_dir(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def reserve(out: Path, force: bool = False) -> Path:
    """Create OUT.parts exclusively: the lock that says this run writes OUT. A leftover OUT.parts
    is refused, force or not: it holds the steps of a run that did not finish, which only
    a merge of it recovers."""
    parts = parts_dir(out)
    try:
        parts.mkdir()
    except FileExistsError:
        owner = running_launcher(parts)
        if owner:
            raise WriterBusy(f"{out}: another cuptiprof run (pid {owner}) is writing this file; "
                             "wait for it to finish or choose another -o") from None
        kept = " (--force does not remove it)" if force else ""
        raise WriterBusy(f"{out}: {parts} is left from a run that did not finish; merge its "
                         f"parts ({recover_command(parts, out)}) or remove that folder{kept}, "
                         "or choose another -o") from None
    except OSError as exc:   # the user gave OUT: say that, not the internal folder beside it
        raise write_failed(out, exc) from None
    try:
        (parts / "launcher.pid").write_text(str(os.getpid()))
    except OSError as exc:
        shutil.rmtree(parts, ignore_errors=True)
        raise write_failed(out, exc) from None
    return parts
