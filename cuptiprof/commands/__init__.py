"""One module per subcommand; each has `register(subparsers)`."""

import argparse
import os
import re

from cuptiprof.errors import UsageError

# The positional FILE of the commands that read one cuptiprof file (report, sql, export).
FILE_HELP = "a cuptiprof .duckdb file (from run, import or merge)"
# The FILE... of the commands that read several (compare, merge).
FILES_HELP = "cuptiprof .duckdb files (from run, import or merge)"
# --format: FORMATS in this order; what csv writes is said by each command.
FORMAT_HELP = "table (default), csv, json or markdown"
# --steps of the commands that read a file: step numbers (run --steps is a count of steps).
STEPS_METAVAR = "A:B"
STEPS_FORMS = "step numbers A:B (inclusive), A:, :B or N (step N alone)"


def whole_number(text: str) -> int:
    """An option's whole number, in ASCII digits: int() also reads every script's digits
    (Arabic-Indic, full-width) and underscores, which no one types for a count."""
    if not re.fullmatch(r"\s*-?[0-9]+\s*", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number in ASCII digits (0-9)")
    try:
        return int(text)
    except ValueError:   # more digits than int() converts
        raise argparse.ArgumentTypeError(f"a number of {len(text.strip().lstrip('-'))} digits "
                                         "is beyond any count") from None


def step_count(text: str) -> int:
    """A number of steps (run --steps, --warmup): a whole number the step numbers can reach,
    as report --steps takes (a larger count is never reached, and was taken as given)."""
    from cuptiprof.markers import steps_beyond   # markers loads inspect: not every command's cost
    n = whole_number(text)
    why = steps_beyond(text, count=True)
    if why:
        raise argparse.ArgumentTypeError(why)
    return n


def top_rows(text: str) -> int:
    """--top N: rows per table, 1 to a billion (a larger N would overflow the SQL LIMIT)."""
    n = whole_number(text)
    if not 1 <= n <= 1_000_000_000:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1 and at most 1000000000")
    return n


def input_file(text: str) -> str:
    """A file a command reads: an empty name (`"$FILE"` with FILE unset) is refused as such, not
    taken for the current directory."""
    if not text:
        raise argparse.ArgumentTypeError("the file name is empty; give the path of a file")
    if not _utf8(text):
        raise argparse.ArgumentTypeError(f"{_shown(text)}: the file name is not UTF-8, which "
                                         "DuckDB cannot take; rename the file")
    return text


def named_output(path: str) -> str:
    """-o of import and merge: `-o "$OUT"` with OUT unset is refused, not taken for the
    current folder."""
    if not path.strip():
        raise UsageError(f"-o {path!r}: the output path is empty; give a file name")
    return output_name(path, "-o")


def output_name(path: str, option: str, *, utf8: bool = True, what: str = "file") -> str:
    """An output path given to `option`, a `what` (file, or directory for --parquet). `-` reads
    as stdout, which cuptiprof never writes to: refused, not written as a file named -. One that
    DuckDB writes (utf8: a .duckdb file, Parquet datasets) must have a UTF-8 name: DuckDB takes
    no other (std::bad_cast)."""
    if path == "-":
        raise UsageError(f"{option} -: cuptiprof writes a {what}, not stdout; give a {what} name "
                         f"(./- for a {what} named -)")
    if utf8 and not _utf8(path):
        raise UsageError(f"{option} {_shown(path)}: the output path is not UTF-8, which DuckDB "
                         "cannot write; give a UTF-8 name")
    if utf8 and "\\" in path:
        from cuptiprof.store.files import BACKSLASH
        raise UsageError(f"{option} {_shown(path)}: {BACKSLASH}; give a path without one")
    return path


def _utf8(path: str) -> bool:
    try:
        path.encode("utf-8")   # bytes that are no UTF-8 come from argv as lone surrogates
    except UnicodeEncodeError:
        return False
    return True


def _shown(path: str) -> str:
    """The name as its bytes, those that are no UTF-8 as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def counted(n: int, one: str, many: str | None = None) -> str:
    """'1 file', '2 files', '1,201 rows': a count in a command's status line."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"
