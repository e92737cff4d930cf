"""Errors that reach the user as one line on stderr (never a traceback).

Exit statuses (documented in README.md):
  0  success
  1  the check failed (a regression found by `diff`, a doctor problem) or a runtime failure
  2  usage error or bad input (missing/corrupt file, bad argument, unknown report)
  3  the environment cannot do what was asked (no GPU, CUPTI taken by another profiler)
"""
from __future__ import annotations

import os
import re
from pathlib import Path


class CuptiprofError(Exception):
    """Base class: the message is one line that says what is wrong and what to do."""

    exit_code = 1


class UsageError(CuptiprofError):
    exit_code = 2


class InputError(CuptiprofError):
    """A file or argument the user gave cannot be used."""

    exit_code = 2


class StoreError(InputError):
    """A DuckDB file cannot be opened or is not a cuptiprof file."""


class NotCuptiprofFile(StoreError):
    """A DuckDB file without cuptiprof's schema version: some other program's file."""


class SchemaVersionError(StoreError):
    """The file was written by a newer (or unsupported older) schema version."""


class WriterBusy(StoreError):
    """Another writer holds the file."""


class EnvironmentProblem(CuptiprofError):
    exit_code = 3


def stderr_line(line: str) -> None:
    """A line of cuptiprof's own (a notice, a warning) on the profiled program's stderr. None
    where the program has none (`2>&-`: sys.stderr is None, and print() wrote to stdout, the
    program's own) or where it cannot be written (`2>/dev/full`: the OSError ended the program):
    the program runs on as it would without cuptiprof."""
    import sys
    if sys.stderr is None:
        return
    try:
        print(line, file=sys.stderr)
    except Exception:
        pass


def whole_number(name: str, v, least: int, none_ok: bool = False) -> int | None:
    """A count argument of the Python API: an integer of any integer type (numpy's included) at
    least `least`, or None where `none_ok`; a bool, a float or a string is refused in Python
    words (a string failed later with a TypeError, 2.5 was taken as 3)."""
    import numbers

    if v is None and none_ok:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < least:
        raise UsageError(f"{name} must be a whole number >= {least}"
                         f"{' or None' if none_ok else ''}, not {v!r}")
    return int(v)


def file_path(name: str, v) -> Path:
    """A file's path argument of the Python API as a Path: None, a number or bytes are refused
    in Python words (Path() said "expected str, bytes or os.PathLike object"), and so is an
    empty string, which Path() reads as the current directory."""
    if isinstance(v, str) and not v:   # read from an unset variable
        raise UsageError(f"{name} '': empty; give a file's path")
    try:
        return Path(v)
    except TypeError:
        raise UsageError(f"{name} must be a file's path (a str or os.PathLike), not {v!r}") from None


def shell_word(path) -> str:
    """A path as one shell word in a command a message gives to run, or a line names
    (`wrote OUT`): one with a space or a quote, pasted as it was written, ran as several words.
    A name with bytes that are no UTF-8 (lone surrogates in Python, printed as `\\udcff`) or
    with control characters (a newline would break the line) is written in bash's $'...'
    quoting, those bytes as \\xNN: what a user pastes names the same file, and the line holds
    no surrogate, which a stream that is not stderr (a file, /dev/null) fails to encode."""
    import shlex
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not any(_unprintable(c) for c in text):
        return shlex.quote(text)
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:   # a lone surrogate no file name decodes to
        raw = text.encode("utf-8", "surrogatepass")
    out = []
    for c in raw.decode("utf-8", "surrogateescape"):
        if 0xDC80 <= ord(c) <= 0xDCFF:   # a byte that is no UTF-8
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        elif _unprintable(c):
            out.append(f"\\x{ord(c):02x}")
        elif c in "\\'":
            out.append("\\" + c)
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def command_text(argv) -> str:
    """A command line as one line of shell words (shell_word each): an argument with bytes that
    are no UTF-8 (lone surrogates, which DuckDB and Arrow refuse to store) or a newline is
    written in bash's $'...' quoting, so the line can be stored, shown and pasted."""
    return " ".join(shell_word(a) for a in argv)


def _unprintable(c: str) -> bool:
    """A character of a name that a line cannot show as it is: a control character (of one
    byte in UTF-8), or a surrogate (bytes that are no UTF-8)."""
    o = ord(c)
    return o < 0x20 or o == 0x7F or 0xD800 <= o <= 0xDFFF


def damage_said(msg: str) -> bool:
    """A DuckDB error that says the file it read is damaged or cut off."""
    return "orrupt" in msg or "checksum" in msg or "Could not read enough bytes" in msg


def storage_error(exc: Exception, path: str | None = None, output: str | None = None) -> str:
    """One line for a DuckDB failure met mid-command (disk full, damaged file). `path`: the
    input it is about; `output`: what the command writes (merge's and import's -o, export's
    --parquet), which a full disk is said of: DuckDB names its temporary name, or none."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    m = re.search(r'file "([^"]+)"', msg)
    where = f"{m.group(1)}: " if m else (f"{path}: " if isinstance(path, str) else "")
    if "No space left" in msg or "File too large" in msg or "Disk quota" in msg:
        if output is not None:
            where = f"{output}: "
        return f"{where}cannot write: the disk is full (or a file-size limit was reached)"
    if damage_said(msg):
        return (f"{where}the file is damaged ({msg[:200]}); it cannot be read in full: record or "
                "import it again")
    return msg[:300]


def env_seconds(name: str, default: float) -> float:
    """A number of seconds from the environment variable `name`; `default` where it is unset,
    empty, not a number or negative (a tuning knob: a typo must not stop the profiled program;
    `cuptiprof run` says so once, env_seconds_problem)."""
    v = _seconds(os.environ.get(name, ""))
    return default if v is None else v


def env_seconds_problem(name: str, default: float) -> str | None:
    """Why env_seconds(name, default) falls back to its default for a value that is set, or
    None where it is unset, empty or usable."""
    raw = os.environ.get(name, "")
    if not raw.strip() or _seconds(raw) is not None:
        return None
    return (f"{name}={raw!r} is not a number of seconds >= 0; using the default, {default:g} s "
            f"(set it to a number such as {default:g}, or unset it)")


def _seconds(raw: str) -> float | None:
    try:
        v = float(raw)
    except ValueError:
        return None
    return v if v >= 0 else None   # NaN too
