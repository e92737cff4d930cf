"""`cuptiprof run -- CMD`: run CMD as a child with every Python process in it profiled, then
merge the processes' part files into one DuckDB file and print the report.

    launch(["python", "infer.py"], LaunchOptions(output="run.duckdb", warmup=2, steps=5))

Each process writes OUT.parts/<host>-<pid>.duckdb through its own Writer (DuckDB has one writer
per file) plus a start and an end marker; the parts folder doubles as the lock that keeps two
runs from writing the same output. The launcher forwards SIGINT/SIGTERM/SIGHUP and returns the child's
status (128+N when signal N ended it).
"""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cuptiprof.errors import InputError, WriterBusy, command_text, shell_word
from cuptiprof.outputs import silence
from cuptiprof.run import settings as S
from cuptiprof.run.merge_parts import (MergeFailed, _wait_for_stragglers, finish, run_record,
                                       save_record)
from cuptiprof.run.preflight import output_path, reserve, validate, warn_knobs
from cuptiprof.run.forwarding import _Forwarding, _signals_wait, _wait_forwarding
from cuptiprof.run.summary import _none_profiled, print_summary
from cuptiprof.store.files import first_row

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
    # what some processes found wrong with --step-fn while others marked steps: said by the
    # caller of a quiet run (--overhead, once for all its runs), not here
    step_fn_warning: str | None = None
    # --step-range/--step-fn marked no step beside the program's own (_unmatched): said by the
    # caller of a quiet run the same way
    own_steps_warning: str | None = None


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
        if interp and first.rstrip(b"\n").endswith(b"\r"):
            # The kernel looks for "python\r": the file exists, and its interpreter too.
            return InputError(f"{shell_word(cmd[0])}: cannot run: its #! line ends in a carriage "
                              "return (\\r, Windows line ends), so its interpreter is not found; "
                              f"convert the file (dos2unix {shell_word(exe)})")
        if interp and not os.path.exists(interp[0]):
            return InputError(f"{shell_word(cmd[0])}: cannot run: its #! interpreter "
                              f"{shell_word(interp[0])} does not exist")
    if exc.errno == errno.ENOEXEC:   # an executable text file without a #! line, as a rule
        how = f"{'python' if cmd[0].endswith('.py') else 'INTERPRETER'} {shell_word(cmd[0])}"
        return InputError(f"{shell_word(cmd[0])}: cannot run ({exc.strerror}): a script without "
                          "a #! line, or a program for another system; give its interpreter "
                          f"(cuptiprof run -- {how}) or begin the script with a #! line")
    return InputError(f"{shell_word(cmd[0])}: cannot run ({exc.strerror})")


def launch(cmd: list[str], o: LaunchOptions) -> LaunchResult:
    validate(cmd, o)
    inputs = [a for a in cmd if os.path.isfile(a)]
    out = output_path(o.output, o.force, inputs)
    # From here until the command has ended, SIGTERM and the like are passed on to it: one that
    # came while it was being started would otherwise kill the launcher alone, leaving the
    # command running unprofiled and OUT.parts unmerged.
    fwd = _Forwarding().__enter__()
    try:
        for tries in range(100):
            try:
                parts = reserve(out, o.force)
                break
            except WriterBusy:
                # A default name another run reserved since it was chosen (two runs without -o
                # begun in the same second): the next free one, not a refusal over a name the
                # user never gave
                if o.output is not None or tries == 99:
                    raise
                out = output_path(None, o.force, inputs)
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
                         run_label=out.stem, command=command_text(cmd), gpu=gpu)
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
    if not parts.is_dir():   # the command deleted it (a cleanup of its folder): nothing to merge
        print(f"cuptiprof: error: {shell_word(parts)}, where the command's processes were "
              f"recorded, was removed while it ran: {shell_word(out)} was not written; "
              "keep the folder (or use -o elsewhere) and run again", file=sys.stderr)
        return LaunchResult(code or 1, rc, None, parts, wall, command=list(cmd))
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
        # quiet: a run of --overhead, in a file of its own, removed, that the user never named
        ran = (", in --overhead's first run" if o.quiet else
               f"; {result.output} has no steps from it")
        raise InputError(f"{msg} (the command ran{ran})")
    if msg and o.quiet:   # a run of --overhead: it says so once, not with this run's file
        result.step_fn_warning = msg
    elif msg:   # one process could not hook it, others did and marked steps: not a failed run
        print(f"cuptiprof: warning: {msg} (the steps in {result.output} come from the processes "
              "that had it)", file=sys.stderr)
    elif o.quiet and _own_steps_only(parts):   # a run of --overhead: said once, after the runs
        result.own_steps_warning = _unmatched(o, parts)
    elif _own_steps_only(parts):
        print(f"cuptiprof: warning: {_unmatched(o, parts)}; the steps in {result.output} are "
              "the ones it marks itself with cuptiprof.range('step')", file=sys.stderr)
    shutil.rmtree(parts, ignore_errors=True)
    try:
        if o.report:
            print_summary(result, o)
        elif not o.quiet:   # without -o the file's name is one the user has not seen
            if not result.profiled:   # not the report: the file holds nothing of the command
                print(f"cuptiprof: notice: {_none_profiled(cmd, result.exit_code)}",
                      file=sys.stderr)
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
                   "recorded" if result.profiled else _none_profiled(result.command,
                                                                   result.exit_code))
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


def _unmatched(o: LaunchOptions, parts: Path) -> str:
    if (parts / "steps.option-inside").exists():   # seen, each time inside a step of the program's
        what = (f"--step-range {o.step_range}: every range named {o.step_range!r} the program "
                "opened" if o.step_range else f"--step-fn {o.step_fn}: every call of it")
        return (f"{what} was inside a step the program marks itself, where it is a range of "
                "that step")
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
