"""`cuptiprof run -- CMD`: run CMD as a child with every Python process in it profiled, then
merge the processes' part files into one DuckDB file and print the report.

    launch(["python", "infer.py"], LaunchOptions(output="run.duckdb", warmup=2, steps=5))

Each process writes OUT.parts/<host>-<pid>.duckdb through its own Writer (DuckDB has one writer
per file) plus a start and an end marker; the parts folder doubles as the lock that keeps two
runs from writing the same output. The launcher forwards SIGINT/SIGTERM/SIGHUP and returns the child's
status (128+N when signal N ended it).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cuptiprof.collect.cupti_source import ALL_KINDS as KINDS, split_kinds as _split
from cuptiprof.errors import (CuptiprofError, InputError, UsageError, WriterBusy, shell_word,
                              storage_error)
from cuptiprof.outputs import check_output, silence, temp_beside, write_failed
from cuptiprof.run import settings as S
from cuptiprof.store.files import RECORD, alive, first_row, recover_command, running_launcher

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"


@dataclass
class LaunchOptions:
    output: str | None = None
    warmup: int = 0
    steps: int | None = None
    step_range: str | None = None
    step_fn: str | None = None
    kinds: list[str] | None = None
    light: bool = False
    log_level: str = "INFO"
    mode: str | None = None          # 'time' for the --overhead baseline
    report: bool = True
    quiet: bool = False
    extra_env: dict = field(default_factory=dict)
    force: bool = False              # an existing output is replaced once the run's is written


@dataclass
class LaunchResult:
    exit_code: int
    returncode: int
    output: Path | None
    parts: Path
    wall_s: float
    no_gpu: bool = False
    profiled: int = 0      # processes of the command that cuptiprof recorded
    command: list[str] = field(default_factory=list)
    # the command failed before any process recorded a range or GPU activity (a missing script)
    recorded_nothing: bool = False


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
        raise InputError(f"{cmd[0]}: {what}")
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


def gpu_present() -> bool:
    """A CUDA GPU the driver can see (or the collector's fake CUPTI in tests). Checked here, in
    the launcher, so that no child initialises CUDA before it forks."""
    if os.environ.get(S.FAKE_CUPTI, "") not in ("", "0"):
        return True
    from cuptiprof.collect import libcuda

    return libcuda.gpu_count() > 0


def nvtx_injection_path() -> str | None:
    """libcupti for NVTX_INJECTION64_PATH (the collector's nvtx_setup decides which file)."""
    try:
        from cuptiprof.collect import nvtx_setup
    except ImportError:
        return None   # collector without NVTX capture: NVTX ranges are then not recorded
    for name in ("injection_path", "libcupti_path", "find_libcupti"):
        fn = getattr(nvtx_setup, name, None)
        if callable(fn):
            try:
                return fn()
            except Exception:
                return None
    return None


def outer_run() -> Path | None:
    """The output of the `cuptiprof run` that records this process, if one does."""
    parts = os.environ.get(S.PARTS_DIR, "")
    if S.ChildSettings.from_env() is None or not os.path.isdir(parts):
        return None
    return Path(parts[:-len(".parts")] if parts.endswith(".parts") else parts)


def stand_aside(cmd: list[str], outer: Path, inner: str | None) -> int:
    """A `cuptiprof run` inside another: the outer run records the command's processes (a second
    recorder would leave the outer file empty, as a `profile()` under `run` would fight it for
    CUPTI), so this one only runs the command and passes its exit status on."""
    mine = f" {inner}" if inner else " file"
    print(f"cuptiprof: notice: this `cuptiprof run` runs under another one, which records its "
          f"command into {outer}: it writes no{mine}, prints no report and its settings are not "
          "used", file=sys.stderr)
    try:
        child = subprocess.Popen(cmd)   # the environment is the outer run's: it profiles CMD
    except OSError as exc:
        raise _cannot_run(cmd, exc) from None
    rc = _wait_forwarding(child)
    return 128 - rc if rc < 0 else rc


def _cannot_run(cmd: list[str], exc: OSError) -> InputError:
    """Why the command could not be started. A script whose #! interpreter is missing fails
    with ENOENT, "No such file or directory", for a file that is there: name the missing one."""
    exe = shutil.which(cmd[0])
    if exc.errno == errno.ENOENT and exe:
        try:
            with open(exe, "rb") as fh:
                first = fh.readline(512)
        except OSError:
            first = b""
        interp = first[2:].split(maxsplit=1) if first.startswith(b"#!") else []
        if interp and not os.path.exists(interp[0]):
            return InputError(f"{cmd[0]}: cannot run: its #! interpreter "
                              f"{os.fsdecode(interp[0])} does not exist")
    if exc.errno == errno.ENOEXEC:   # an executable text file without a #! line, as a rule
        how = f"{'python' if cmd[0].endswith('.py') else 'INTERPRETER'} {shell_word(cmd[0])}"
        return InputError(f"{cmd[0]}: cannot run ({exc.strerror}): a script without a #! line, or "
                          f"a program for another system; give its interpreter (cuptiprof run -- "
                          f"{how}) or begin the script with a #! line")
    return InputError(f"{cmd[0]}: cannot run ({exc.strerror})")


def launch(cmd: list[str], o: LaunchOptions) -> LaunchResult:
    validate(cmd, o)
    out = output_path(o.output, o.force, [a for a in cmd if os.path.isfile(a)])
    # From here until the command has ended, SIGTERM and the like are passed on to it: one that
    # came while it was being started would otherwise kill the launcher alone, leaving the
    # command running unprofiled and OUT.parts unmerged.
    fwd = _Forwarding().__enter__()
    try:
        parts = reserve(out, o.force)
    except BaseException:
        fwd.__exit__()
        raise
    if not o.quiet:   # after the checks: a mistake gets its one error line alone
        warn_knobs()
    try:
        return _run(cmd, o, out, parts, fwd)
    except BaseException:
        if parts.is_dir() and not any(p.suffix == ".duckdb" for p in parts.iterdir()):
            shutil.rmtree(parts, ignore_errors=True)
        raise
    finally:
        fwd.__exit__()


def _run(cmd: list[str], o: LaunchOptions, out: Path, parts: Path,
         fwd: _Forwarding | None = None) -> LaunchResult:
    mode = o.mode or ("light" if o.light else "profile")
    gpu = mode == "profile" and gpu_present()
    st = S.ChildSettings(mode=mode, warmup=o.warmup, steps=o.steps, kinds=o.kinds,
                         step_range=o.step_range, step_fn=o.step_fn, log_level=o.log_level.upper(),
                         run_label=out.stem, command=shlex.join(cmd), gpu=gpu)
    env = S.child_env(os.environ, st, str(parts.resolve()), str(BOOTSTRAP),
                      nvtx_injection_path() if gpu else None)
    env.update(o.extra_env)
    start_ns = time.time_ns()
    record = run_record(st, cmd, start_ns)
    save_record(parts, record)
    t0 = time.perf_counter()
    try:
        quiet = subprocess.DEVNULL if o.quiet else None
        child = subprocess.Popen(cmd, env=env, stdout=quiet, stderr=quiet)
    except OSError as exc:
        raise _cannot_run(cmd, exc) from None
    if fwd is not None:
        fwd.started(child)
    record["child_pid"] = child.pid
    save_record(parts, record)
    rc = _wait_forwarding(child, fwd)
    ended_ns = time.time_ns()   # the command's end, as seen here (its only one if not Python)
    if fwd is not None:
        fwd.__exit__()   # the command has ended: the merge below has its own handlers
    wall = time.perf_counter() - t0
    code = 128 - rc if rc < 0 else rc
    if mode == "time":
        return LaunchResult(code, rc, None, parts, wall)
    # A command that ends itself on a signal the launcher got (a `cuptiprof run` inside this
    # one, a shell's trap) exits 128 + the signal: interrupted too, not failed.
    stopped = rc < 0 or (fwd is not None and rc - 128 in fwd.got)
    status = "complete" if rc == 0 else ("interrupted" if stopped else "failed")
    # kept in the parts, so that a merge of them later (a full disk, a killed launcher) says so too
    record.update(status=status, exit_code=code, end_ns=ended_ns)
    save_record(parts, record)
    result = LaunchResult(code, rc, None, parts, wall, no_gpu=mode == "profile" and not gpu,
                          profiled=len(list(parts.glob("*.start.json"))), command=list(cmd))
    if code != 0 and result.profiled:
        _wait_for_stragglers(parts)   # a helper still writing may yet record something
        result.recorded_nothing = not _recorded_anything(parts)
    if (result.recorded_nothing or not result.profiled) and o.force and out.exists():
        # an empty run (a failed start, or no process profiled) is no replacement for the file
        # --force was to replace
        return _keep_old_output(result, o, out, parts)
    try:
        with _signals_wait(out):
            result.output = finish(out, parts, record, overwrite=o.force)
    except MergeFailed as exc:
        print(f"cuptiprof: error: {exc}", file=sys.stderr)
        result.exit_code = exc.exit_code
        return result
    msg = _step_fn_problem(parts) if o.step_fn else None
    hooked = (parts / "step-fn.hooked").exists()
    if msg and not (hooked and _has_steps(result.output)):
        shutil.rmtree(parts, ignore_errors=True)
        raise InputError(f"{msg} (the command ran; {result.output} has no steps from it)")
    if msg:   # one process could not hook it, others did and marked steps: not a failed run
        print(f"cuptiprof: warning: {msg} (the steps in {result.output} come from the processes "
              "that had it)", file=sys.stderr)
    elif not o.quiet and _own_steps_only(parts):
        print(f"cuptiprof: warning: {_unmatched(o)}; the steps in {result.output} are the ones "
              "it marks itself with cuptiprof.range('step')", file=sys.stderr)
    shutil.rmtree(parts, ignore_errors=True)
    try:
        if o.report:
            print_summary(result, o)
        elif not o.quiet:   # without -o the file's name is one the user has not seen
            if not result.profiled:   # not the report: the file holds nothing of the command
                print(f"cuptiprof: notice: {_none_profiled(cmd)}", file=sys.stderr)
            print(f"cuptiprof: wrote {shell_word(result.output)}", file=sys.stderr)
    except OSError as exc:
        # The terminal went away (EIO: the SIGHUP that ended the command), or the reader of
        # the output did: OUT is written, and the exit status stays the command's.
        if exc.errno not in (errno.EIO, errno.EPIPE):
            raise
        for stream in (sys.stdout, sys.stderr):
            silence(stream)
    return result


def _recorded_anything(parts: Path) -> bool:
    """A part file holds a range or a GPU activity (CPU ops without a GPU); one that cannot be
    read counts as recorded: the run's output is written as it would be."""
    import duckdb

    from cuptiprof.store.schema import ACTIVITY_TABLES

    query = "SELECT " + " OR ".join(f"EXISTS (SELECT 1 FROM {t})"
                                    for t in ("range_rows", *ACTIVITY_TABLES))
    for part in sorted(parts.glob("*.duckdb")):
        try:
            con = duckdb.connect(str(part), read_only=True)
            try:
                if first_row(con.execute(query))[0]:
                    return True
            finally:
                con.close()
        except duckdb.Error:
            return True
    return False


def _keep_old_output(result: LaunchResult, o: LaunchOptions, out: Path,
                     parts: Path) -> LaunchResult:
    """--force, and the command failed before anything was recorded, or no process of it was
    profiled: OUT stays as it was."""
    msg = _step_fn_problem(parts) if o.step_fn else None
    shutil.rmtree(parts, ignore_errors=True)
    if msg:
        raise InputError(f"{msg} (the command ran; {out} was left as it was)")
    if not o.quiet:
        try:
            why = (f"the command exited with status {result.exit_code} before anything was "
                   "recorded" if result.profiled else _none_profiled(result.command))
            print(f"cuptiprof: notice: {why}; {out} left as it was", file=sys.stderr)
        except OSError as exc:   # as at the end of _run: the exit status stays the command's
            if exc.errno not in (errno.EIO, errno.EPIPE):
                raise
            for stream in (sys.stdout, sys.stderr):
                silence(stream)
    return result


def _has_steps(out: Path) -> bool:
    """OUT holds steps or warm-up steps (what --step-fn marks)."""
    import duckdb

    try:
        con = duckdb.connect(str(out), read_only=True)
        try:
            return first_row(con.execute("SELECT count(*) FROM ranges WHERE kind IN ('step', 'warmup')"
                                         ))[0] > 0
        finally:
            con.close()
    except duckdb.Error:
        return False


def _own_steps_only(parts: Path) -> bool:
    """--step-range/--step-fn began no step in any process, while the program marked steps of
    its own (child.ending._note_step_option): those are the run's steps, silently, where the user
    asked for others."""
    return (parts / "steps.own-only").exists() and not (parts / "steps.option-marked").exists()


def _unmatched(o: LaunchOptions) -> str:
    if o.step_range:
        return f"--step-range {o.step_range}: the program opened no range named {o.step_range!r}"
    return f"--step-fn {o.step_fn}: the program never called it"


def _step_fn_problem(parts: Path) -> str | None:
    """What the processes found of --step-fn: a module without the function, or a main script
    watched in every process (a torchrun parent has its own) and defined in none."""
    for name in ("step-fn.error", "step-fn.main-missing"):
        f = parts / name
        if f.exists() and (name == "step-fn.error" or not (parts / "step-fn.hooked").exists()):
            return f.read_text().strip()
    return None


@contextlib.contextmanager
def _signals_wait(out: Path):
    """While OUT is written from the parts, a second Ctrl-C, a SIGTERM (a scheduler following
    up the first) or a SIGHUP must not cost the recording: it is noted, and OUT is finished first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def note(signum, frame):
        try:
            print(f"cuptiprof: writing {out} first; it takes a moment", file=sys.stderr)
        except OSError:   # the terminal went away (SIGHUP): write OUT all the same
            pass

    old = {s: signal.signal(s, note) for s in _not_ignored()}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# Signals that end the run: passed on to the command, and never cost the merge. SIGHUP (the
# terminal or ssh session went away) used to kill the launcher alone, leaving OUT.parts.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _not_ignored() -> list:
    return [s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN]


def _interactive() -> bool:
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


class _Forwarding:
    """SIGINT, SIGTERM and SIGHUP handlers that pass the signal on to the command. Installed
    before the command starts: a signal that comes before it exists is kept and passed on by
    started(). A Ctrl-C typed in the terminal already reaches a running child (same process
    group), so SIGINT is passed on only when not from there."""

    def __init__(self):
        self.child: subprocess.Popen | None = None
        self.pending: list[int] = []
        self.got: set[int] = set()   # every signal that came, passed on or not
        self.old: dict = {}

    def __enter__(self) -> _Forwarding:
        if threading.current_thread() is threading.main_thread():
            # One ignored as the run starts (nohup's SIGHUP, a script's background job's SIGINT)
            # stays so: the command inherits the ignore and survives it, as without cuptiprof.
            self.old = {s: signal.signal(s, self._on) for s in _not_ignored()}
        return self

    def __exit__(self, *exc) -> None:
        old, self.old = self.old, {}
        for s, h in old.items():
            signal.signal(s, h)

    def _on(self, signum, frame):
        self.got.add(signum)
        if self.child is None:
            self.pending.append(signum)
        elif not (signum == signal.SIGINT and _interactive()):
            self._send(signum)

    def started(self, child: subprocess.Popen) -> None:
        self.child = child
        # the command did not exist when these came, so not even a typed Ctrl-C reached it
        pending, self.pending = self.pending, []
        for s in pending:
            self._send(s)

    def _send(self, signum: int) -> None:
        try:
            self.child.send_signal(signum)
        except ProcessLookupError:
            pass


def _wait_forwarding(child: subprocess.Popen, fwd: _Forwarding | None = None) -> int:
    """Wait for the child, passing SIGINT, SIGTERM and SIGHUP on (see _Forwarding)."""
    own = fwd is None
    if own:
        fwd = _Forwarding().__enter__()
    try:
        fwd.started(child)
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:   # pragma: no cover - the handler above replaces it
                continue
    finally:
        if own:
            fwd.__exit__()


# What the launcher knows of its run, kept in OUT.parts/run.json (RECORD) from the start:
# `cuptiprof merge` of the parts of a run whose launcher was killed writes the same `runs` row
# from it.


def run_record(st: S.ChildSettings, cmd: list[str], start_ns: int) -> dict:
    source = "light" if st.mode == "light" else "cupti" if st.gpu else "cpu"
    return {"label": st.run_label, "source": source, "command": shlex.join(cmd),
            "start_ns": start_ns,
            "settings": {"warmup": st.warmup, "steps": st.steps, "kinds": st.kinds,
                         "step_range": st.step_range, "step_fn": st.step_fn, "mode": st.mode,
                         "log_level": st.log_level, "gpu": st.gpu}}


def save_record(parts: Path, record: dict) -> None:
    tmp = parts / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, parts / RECORD)   # a kill leaves the old record or the new, never half


def load_record(parts: Path) -> dict:
    try:
        d = json.loads((parts / RECORD).read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def recover(parts: Path, sources: list[Path], out: str, overwrite: bool = False) -> Path:
    """Write OUT from the part files of a run whose launcher did not finish (killed, or its
    merge failed), as the launcher would have: one run, processes that never closed marked
    ended early. A run whose launcher was killed says so in data_quality."""
    owner = running_launcher(parts)
    if owner:
        raise WriterBusy(f"{parts}: the cuptiprof run (pid {owner}) that writes these parts is "
                         "still running; wait for it to end, it writes its output itself")
    pid = _unfinished_alive(parts)
    if pid:
        raise WriterBusy(f"{parts}: process {pid} of that run is still running and writing its "
                         "part; wait for it to end (or end it), then merge again")
    record = load_record(parts)
    if not record:   # parts of a cuptiprof that kept no record: what the markers tell
        record = {"label": parts.name[:-len(".parts")].rsplit(".duckdb", 1)[0],
                  "source": None, "command": None}
    notes = []
    end = None if "status" in record else _root_end(parts, record.get("child_pid"))
    if end is not None:   # the command's own process kept how it ended
        code = end["exit_status"]
        record.update(status="complete" if code == 0 else "interrupted"
                      if end.get("status") == "interrupted" else "failed", exit_code=code)
        notes.append((None, "run_recovered", parts.name, None,
                      f"exit status {code}, as the program's own process recorded it when it "
                      f"ended: the cuptiprof run writing {Path(out).name} was killed before it "
                      f"kept it; this file was merged afterwards from {parts.name}: each "
                      "process holds the steps it had flushed"))
    elif "status" not in record:
        record.update(status="interrupted", exit_code=None)
        # What is unknown first: reports cut a long detail short, and a NULL
        # processes.exit_status alone reads as nothing wrong.
        notes.append((None, "run_recovered", parts.name, None,
                      f"exit status is unknown: the cuptiprof run writing {Path(out).name} was "
                      f"killed before it learnt how its program ended; this file was merged "
                      f"afterwards from {parts.name}: each process holds the steps it had "
                      "flushed"))
    return finish(Path(out), parts, record, sources=sources, notes=notes, wait=False,
                  overwrite=overwrite)


def _root_end(parts: Path, child_pid: int | None) -> dict | None:
    """The end marker of the command's own process (the launcher's child) where it says with
    which status that process exited: the marker of its last program image, written as it
    ended. None where nothing says so (killed, exec'd a program that is not Python, or a
    cuptiprof that kept no exit status)."""
    try:
        launcher_pid = int((parts / "launcher.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    images = []
    for m in parts.glob("*.start.json"):
        try:
            d = json.loads(m.read_text())
            if d["pid"] == child_pid:
                images.append((int(d.get("image") or 0), d["host"], d.get("ppid"), m))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    # the launcher's child on the launcher's host (a process elsewhere may have its pid)
    hosts = {host for image, host, ppid, _ in images if image == 0 and ppid == launcher_pid}
    last = max(((image, m) for image, host, _, m in images if host in hosts), default=None)
    if len(hosts) != 1 or last is None:
        return None
    key = _marker_key(last[1].name)
    try:
        end = json.loads(last[1].with_name(key + ".end.json").read_text())
    except (OSError, ValueError):
        return None
    return _with_exit(parts, key, end)


def _with_exit(parts: Path, key: str, end) -> dict | None:
    """The end marker `end` of program image `key`, with the status the C library wrote as
    that image's exit() ran where it did (what exit() was given, which the marker may not
    know); None where neither says an integer status."""
    if not isinstance(end, dict):
        return None
    code = _exit_written(parts / (key + ".exit"))
    if code is not None:
        end = dict(end, exit_status=code)
    code = end.get("exit_status")
    return end if isinstance(code, int) and not isinstance(code, bool) else None


def _waited(parts: Path, host, pid: int) -> int | None:
    """The exit status process `pid`'s parent saw as it reaped it, where that parent was
    profiled too (child.processes._note_reaped): that of the last program the process ran."""
    return _exit_written(parts / f"{host}-{pid}.waited") if isinstance(host, str) else None


def _exit_written(path: Path) -> int | None:
    """The exit status the C library wrote as the process ended (child.recording._watch_exit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) < 256 else None


def finish(out: Path, parts: Path, record: dict, sources: list[Path] | None = None,
           notes: list[tuple] = (), wait: bool = True, overwrite: bool = False) -> Path:
    """Merge the part files into OUT as one run; add processes that wrote no part and say which
    processes ended early; `overwrite` replaces an OUT that is there. `record` is run_record()'s
    with the command's child_pid, status and exit_code; `notes` are more data_quality rows (pid,
    check_name, subject, count, detail)."""
    from cuptiprof.store.merge import merge_files
    from cuptiprof.store.writer import RunInfo

    if wait:
        _wait_for_stragglers(parts)
    sources = sorted(parts.glob("*.duckdb")) if sources is None else sources
    child_pid, exit_code = record.get("child_pid"), record.get("exit_code")
    # One start marker per program image: a process that exec'd has several, one pid.
    images: dict[int, list] = {}
    ended = _end_markers(parts)
    for m in parts.glob("*.start.json"):
        try:
            d = json.loads(m.read_text())
            key = _marker_key(m.name)
            images.setdefault(int(d["pid"]), []).append((int(d.get("image") or 0), d,
                                                         ended.get(key), key))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    starts = {pid: min(ims, key=lambda x: x[0])[1] for pid, ims in images.items()}
    early = sorted(pid for pid, ims in images.items()
                   if not all(e is not None for _, _, e, _ in ims))
    # When each process ended, as its last program wrote as it ended (a process that wrote no
    # part has no other record of it); the command's own, when the launcher saw it end.
    ends = {pid: max((_ns(e.get("end_ns")) or 0 for _, _, e, _ in ims), default=0) or None
            for pid, ims in images.items() if pid not in early}
    # How the other processes exited, as their last program kept it; where it could not (killed
    # by a signal it could not catch, os._exit outside a multiprocessing worker), as a profiled
    # parent saw it as it reaped the process (NULL where none did); the command's is the
    # launcher's to say.
    statuses = {}
    for pid, ims in images.items():
        if pid != child_pid:
            _, _, e, key = max(ims, key=lambda x: x[0])
            end = _with_exit(parts, key, e) if pid not in early else None
            statuses[pid] = end["exit_status"] if end is not None else \
                _waited(parts, starts[pid].get("host"), pid)
    if record.get("end_ns") is not None and child_pid is not None:
        ends[child_pid] = ends.get(child_pid) or record["end_ns"]
    # the programs each process ran (an image after an exec that failed is the same program)
    progs = {pid: [d for _, d, _, _ in sorted(ims, key=lambda x: x[0]) if not d.get("exec_failed")]
             for pid, ims in images.items()}
    execs = {pid: ds for pid, ds in progs.items() if len(ds) > 1}
    rows = {k: [] for k in ("pid", "host", "rank", "local_rank", "world_size", "command", "start_ns",
                            "end_ns", "exit_status", "ended_early")}
    for pid, d in sorted(starts.items()):
        rows["pid"].append(pid)
        rows["host"].append(d.get("host"))
        rows["rank"].append(d.get("rank"))
        rows["local_rank"].append(d.get("local_rank"))
        rows["world_size"].append(d.get("world_size"))
        rows["command"].append(d.get("command") or shlex.join(d.get("argv") or []))
        rows["start_ns"].append(d.get("start_ns"))
        rows["end_ns"].append(ends.get(pid))
        rows["exit_status"].append(exit_code if pid == child_pid else statuses.get(pid))
        rows["ended_early"].append(pid in early)
    if child_pid is not None and child_pid not in starts:   # not Python (a shell script, a binary)
        for k, v in (("pid", child_pid), ("host", socket.gethostname()),
                     ("command", record.get("command")), ("start_ns", record.get("start_ns")),
                     ("end_ns", record.get("end_ns")), ("exit_status", exit_code),
                     ("ended_early", None)):
            rows[k].append(v)
        for k in ("rank", "local_rank", "world_size"):
            rows[k].append(None)
    import pyarrow as pa

    from cuptiprof.store import arrow

    types = {"pid": pa.int32(), "host": pa.string(), "rank": pa.int32(), "local_rank": pa.int32(),
             "world_size": pa.int32(), "command": pa.string(), "start_ns": pa.int64(),
             "end_ns": pa.int64(), "exit_status": pa.int32(), "ended_early": pa.bool_()}
    procs = pa.table({k: arrow.array(rows[k], t) for k, t in types.items()})
    extra = {"processes": procs}
    quality = list(notes)
    for pid, ds in sorted(execs.items()):
        quality.append((pid, "process_exec", str(pid), len(ds) - 1,
                        f"process {pid} replaced its program "
                        f"{'once' if len(ds) == 2 else f'{len(ds) - 1} times'} (exec): "
                        + " -> ".join(d.get("command") or shlex.join(d.get("argv") or [])
                                      for d in ds)
                        + "; one process: its steps and ranges are those of every program it ran"))
    if quality:
        pids, checks, subjects, counts, details = zip(*quality)
        extra["data_quality"] = pa.table({
            "pid": arrow.array(list(pids), pa.int32()), "check_name": list(checks),
            "subject": list(subjects), "count": arrow.array(list(counts), pa.int64()),
            "detail": list(details)})
    first = min(starts.values(), key=lambda d: d.get("start_ns") or 0, default={})
    info = RunInfo(label=record.get("label"), source=record.get("source"),
                   command=record.get("command") or first.get("command"), start_ns=record.get("start_ns"),
                   settings=record.get("settings") or {})
    status = record.get("status")
    try:
        return merge_files(sources, out, one_run=True, run_info=info, status=status,
                           extra=extra, ended_early=early, overwrite=overwrite)
    except Exception as exc:
        duckdb = sys.modules.get("duckdb")
        if isinstance(exc, CuptiprofError):
            reason = str(exc)
        elif isinstance(exc, OSError) or (duckdb and isinstance(exc, duckdb.Error)):
            reason = storage_error(exc, str(out))
        else:
            raise
        tmp = temp_beside(out)
        reason = reason.replace(str(tmp), str(out)).replace(tmp.name, out.name)
        raise MergeFailed(
            f"{reason}; the part files are kept in {parts} (later: "
            f"{recover_command(parts, out)})", exit_code or 0) from None


class MergeFailed(CuptiprofError):
    """The command ran but its parts could not be merged into OUT (e.g. a full disk)."""

    def __init__(self, msg: str, child_code: int):
        super().__init__(msg)
        # The profiled command's own failure wins; a clean command whose profile could not be
        # written still fails (1), so CI does not take a missing file for success.
        self.exit_code = child_code or 1


def _wait_for_stragglers(parts: Path, timeout_s: float = 3.0) -> None:
    """Helpers the command started (multiprocessing's resource tracker, workers being torn down)
    may outlive it by a moment; give them time to close their part files."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _unfinished_alive(parts):
        time.sleep(0.05)


def _unfinished_alive(parts: Path) -> int | None:
    """A process of the run on this host that has not closed its part yet and is still alive."""
    from cuptiprof.store.merge import pid_from_stem

    ended = {_marker_key(p.name) for p in parts.glob("*.end.json")}
    here = socket.gethostname()
    for m in parts.glob("*.start.json"):
        key = _marker_key(m.name)
        pid = pid_from_stem(key)
        if key not in ended and pid is not None and key.startswith(here + "-") and alive(pid) \
                and not _zombie(pid):
            return pid
    return None


def _ns(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _end_markers(parts: Path) -> dict[str, dict]:
    """<host>-<pid>[.exec<N>] -> its end marker (empty where it cannot be read: it ended all
    the same)."""
    out = {}
    for p in parts.glob("*.end.json"):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            d = {}
        out[_marker_key(p.name)] = d if isinstance(d, dict) else {}
    return out


def _marker_key(name: str) -> str:
    """<host>-<pid>[.exec<N>] of a marker file name: one per program image of a process."""
    for suffix in (".start.json", ".end.json"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _none_profiled(cmd: list[str]) -> str:
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
    return ("no process of the command was profiled: cuptiprof records the Python processes a "
            "command starts, with a Python that can import cuptiprof and its libraries (see any "
            "warning above)")


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
        print(f"cuptiprof: notice: {_none_profiled(res.command)}", file=sys.stderr)
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
