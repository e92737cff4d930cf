"""Where commands write. Every output path passes the same checks before any work is done (its
directory exists and is writable, it is not one of the inputs, it does not replace what it
should not), and is written under a temporary name beside it that is renamed into place at the
end, so that a crash or Ctrl-C leaves no partial output.
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Callable, Iterable

from cuptiprof.errors import CuptiprofError, InputError, UsageError


def temp_beside(out: Path) -> Path:
    """The temporary name an output is written under (hidden, per process)."""
    return out.with_name(f".{out.name}.tmp-{os.getpid()}")


def publish(tmp: Path, out: Path, *, replace: bool, taken_hint: str | None = None) -> None:
    """Rename the finished temporary file `tmp` to `out`. replace=False: never over a file that
    appeared at `out` since the up-front check said it was free (another import or merge of
    the same output at once, whose file that was): `out` is made by a hard link, which fails
    where a name is taken, and the refusal names it in the up-front check's words. A file
    system without hard links gets the rename, once `out` is seen to be free still."""
    if replace:
        os.replace(tmp, out)
        return
    taken = InputError(f"{out}: already exists (written by another command since this one "
                       f"began); {taken_hint or FORCE_HINT}")
    try:
        os.link(tmp, out, follow_symlinks=False)
    except FileExistsError:
        raise taken from None
    except OSError:   # no hard links here (FAT, some network file systems)
        if os.path.lexists(out):
            raise taken from None
        os.replace(tmp, out)
        return
    os.unlink(tmp)


def write_failed(out, exc: OSError) -> CuptiprofError:
    """One line for an output whose write failed after the up-front check passed, naming the
    path the user gave (not the temporary one): a full disk is a runtime failure (exit 1); any
    other failure, a path that cannot hold the output (/proc/x as root, a read-only or refused
    place), is a bad argument (exit 2)."""
    import errno
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return CuptiprofError(f"{out}: cannot write: the disk is full (or a file-size limit was "
                              "reached)")
    return InputError(f"{out}: cannot write ({exc.strerror or exc}); give a path in a directory "
                      "you can write to")


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


# what the commands say of an output that exists already
FORCE_HINT = "choose another path or pass --force"


def check_output(out: str | os.PathLike, *, inputs: Iterable = (), force: bool = False,
                 directory: bool = False, replaceable: Callable[[Path], str | None] | None = None,
                 taken_hint: str = FORCE_HINT) -> Path:
    """Refuse an output path before anything is computed. `inputs`: files the command reads (an
    output may not replace one, nor, for a directory, hold one). `directory`: the output is a
    directory (an empty one is no conflict). An existing output needs `force`; `replaceable`,
    given, may refuse it even then: it returns why, or None."""
    given = os.fspath(out)
    out = Path(out)
    if not directory and given.endswith(("/", os.sep)):   # Path() drops the slash: `newdir/`
        raise InputError(f"{given}: names a directory; give a file name")
    if directory and out.resolve() in (Path.cwd(), *Path.cwd().parents):
        raise InputError(f"{out}: is the current directory or above it; give a new directory name")
    parent = out.parent if str(out.parent) else Path(".")
    if parent.exists() and not parent.is_dir():   # `run.duckdb/r.html`: the folder is a file
        raise InputError(f"{out}: {parent} is a file, not a directory; give a path in a directory")
    if not parent.is_dir():
        raise InputError(f"{out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{out}: directory {parent} is not writable")
    for i in map(Path, inputs):
        if _same(out, i):
            raise InputError(f"{out}: is also an input; write to another path")
        if directory and out.is_dir() and i.exists() and out.resolve() in i.resolve().parents:
            raise InputError(f"{out}: holds the input {i}; write to another directory")
    if not directory and out.is_dir():
        raise InputError(f"{out}: is a directory; give a file name")
    if directory and out.exists() and not out.is_dir():
        raise InputError(f"{out}: is a file; give a directory")
    if not directory and out.exists() and not out.is_file():
        # /dev/null, a FIFO, a socket: the rename into place would put a regular file where it
        # was (as root, a device node gone), --force or not
        raise InputError(f"{out}: is not a regular file (a device, a pipe or a socket); give the "
                         "path of a file to write")
    # a link to nothing is there all the same: the output would replace it (never write
    # through it), as it replaces a file, with --force only
    dangling = out.is_symlink() and not out.exists()
    taken = dangling or (out.exists() and not (directory and not any(out.iterdir())))
    if taken and not force:
        if dangling:
            raise InputError(f"{out}: already exists, a symbolic link to {os.readlink(out)} "
                             f"(which does not exist); {taken_hint}")
        raise InputError(f"{out}: already exists; {taken_hint}")
    if taken and replaceable is not None and not dangling:
        why = replaceable(out)
        if why:
            raise InputError(f"{out}: {why}")
    if taken and not directory:
        _not_being_written(out)
    return out


def _not_being_written(out: Path) -> None:
    """Refuse to replace a DuckDB file another process is writing (a profile() in a notebook):
    it would go on writing into a file no longer there, and lose all it records, as
    Writer(mode="overwrite") refuses it."""
    from cuptiprof.store.files import is_duckdb_head
    try:
        with open(out, "rb") as fh:
            if not is_duckdb_head(fh.read(16)):
                return
    except OSError:
        return
    import duckdb

    from cuptiprof.store.files import connect_error
    try:
        duckdb.connect(str(out), read_only=True).close()
    except duckdb.Error as exc:   # held (its lock), or anything else: replaceable
        if "lock" in str(exc).lower():
            raise connect_error(out, exc, writing=True) from None


def silence(stream) -> None:
    """Point `stream` at /dev/null: its reader has gone (`cuptiprof ... | head`), and a write
    or Python's flush at exit would raise again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def say(line: str, stream=None) -> None:
    """Print a line (on stderr by default) whose reader may be gone (`cuptiprof diff ... 2>&1 |
    head -1`): the line is dropped and the exit status stays the command's verdict; an uncaught
    BrokenPipeError reached the CLI's handler, which exits 0, and passed a CI gate."""
    stream = sys.stderr if stream is None else stream
    try:
        print(line, file=stream, flush=True)
    except BrokenPipeError:
        silence(stream)


class _ClosedStdout(io.TextIOBase):
    """sys.stdout of a command started with its stdout closed (`>&-`), where Python leaves
    None: the first line of a report, a query's rows or the schema failed with an
    AttributeError traceback. A write says what is wrong, in one line."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise UsageError("standard output is closed, so the output has nowhere to go; "
                         "redirect it to a file, or to /dev/null to discard it")


class _CheckedStdout:
    """sys.stdout, whose write or flush that fails (`> /dev/full`, `> out.txt` on a full disk,
    an I/O error) ends the command with one line naming stdout: it said "No space left on
    device", as if the profile or an output file could not be written, and a failure at
    Python's flush at exit printed a traceback-like "Exception ignored" and exit status 120.
    A reader gone (BrokenPipeError) is left to the CLI, which takes it as no error."""

    def __init__(self, stream):
        self._stream = stream

    def _failed(self, exc: OSError) -> CuptiprofError:
        try:   # what is still buffered is dropped, not written again (and failing) at exit
            silence(self._stream)
        except (OSError, ValueError):
            pass
        return CuptiprofError(f"cannot write to stdout: {exc.strerror or exc}")

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


class _DroppingStderr:
    """sys.stderr that cannot be written (`2> /dev/full`, a reader gone): a message that cannot
    be shown is dropped, as with a closed stderr, and the exit status stays the command's. A
    note or a `wrote` line that failed ended a command whose work was done with exit 1 (an
    unseen traceback), or 120 from Python's flush at exit."""

    def __init__(self, stream):
        self._stream = stream

    def _drop(self) -> None:
        try:   # what is still buffered goes to /dev/null, not again (and failing) at exit
            silence(self._stream)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            self._drop()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._drop()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def hold_closed_std_fds() -> None:
    """Give each of descriptors 0, 1 and 2 that is closed (`>&-`, a job started without them)
    /dev/null, not inherited (a command started from here finds it closed, as it would without
    cuptiprof). Left free, the next file or pipe opened takes that number, and what the program
    or a C library writes to stdout or stderr lands in it: a DuckDB file being written, or the
    wakeup pipe of `cuptiprof run`'s SIGTERM watcher, where a byte 15 read as a SIGTERM and
    ended the program."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)   # the lowest free number: fd itself, as a rule
        if null != fd:
            os.dup2(null, fd, inheritable=False)
            os.close(null)


def _escape_unencodable(stream) -> None:
    """A stdout whose encoding cannot write every character (PYTHONIOENCODING=ascii, a latin-1
    locale) writes what it cannot encode as a backslash escape, as stderr does: a file or kernel
    name outside it raised UnicodeEncodeError, a traceback and exit 1, which `diff` gives a
    regression. UTF-8 output is unchanged."""
    try:
        if stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass   # not a TextIOWrapper (a test's capture), or one that cannot change: as it is


def closed_std_streams() -> None:
    """stdout or stderr closed when the command started: hold_closed_std_fds, and what goes to
    stderr is dropped (one that read sys.stderr.isatty() failed with a traceback, and messages
    went to stdout); a write to stdout is refused by _ClosedStdout. An open stdout that cannot
    be written (a full disk) is checked by _CheckedStdout; an open stderr that cannot be
    written drops its messages (_DroppingStderr)."""
    hold_closed_std_fds()
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    elif not isinstance(sys.stdout, _CheckedStdout):
        _escape_unencodable(sys.stdout)
        sys.stdout = _CheckedStdout(sys.stdout)
    if sys.stderr is None:   # (a name that is no UTF-8 in a message: as stderr writes it)
        sys.stderr = open(os.devnull, "w", errors="backslashreplace")
    elif not isinstance(sys.stderr, _DroppingStderr):
        sys.stderr = _DroppingStderr(sys.stderr)


@contextlib.contextmanager
def ctrl_c_after():
    """A Ctrl-C (SIGINT, to Python's own handler) that comes inside this section is raised as it
    ends: raised inside a step's flush, or the CPU op profiler's cycle, what was taken and not
    yet written (every step's since the last one) was lost, or the profiler left stopped for
    good. The program stops as asked all the same. Elsewhere than on the main thread, or with
    a handler of the program's own, nothing changes."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    came: list = []
    signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if came:
            stop = KeyboardInterrupt()
            if hasattr(stop, "add_note"):   # the traceback ends in cuptiprof: say why
                stop.add_note("(the Ctrl-C came while cuptiprof was writing recorded data to "
                              "its file; the program was stopped as asked)")
            raise stop
