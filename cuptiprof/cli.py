"""`cuptiprof` / `python -m cuptiprof`: a thin CLI over the library.

Each subcommand lives in cuptiprof/commands/<name>.py with `register(subparsers)`, which adds
its parser and sets `func(args) -> int`. A user's mistake ends as one line on stderr and an
exit status (see cuptiprof.errors), never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys

from cuptiprof._version import __version__
from cuptiprof.errors import CuptiprofError, damage_said, storage_error
from cuptiprof.outputs import closed_std_streams, say, silence

# Order shown in --help.
COMMANDS = ("run", "report", "sql", "schema", "import", "export", "merge", "compare", "diff",
            "doctor")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, begun like every other error
        self.exit(2, f"cuptiprof: error: {message} (see {self.prog} --help)\n")

    def _print_message(self, message, file=None):
        # argparse drops a write that fails: --help or --version into /dev/full said nothing and
        # exited 0. stdout's failure now reaches main as a command's would (sys.stdout is checked
        # by then); stderr drops its own.
        if message:
            (file or sys.stderr).write(message)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of `only` that one (each command module imports
    what it needs: building all of them costs a fraction of a second)."""
    p = _Parser(prog="cuptiprof", description="Per-operator GPU time for inference, "
                "tagged by step, in one DuckDB file.")
    p.add_argument("--version", action="version", version=f"cuptiprof {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    p.set_defaults(_commands=sub.choices)
    for name in COMMANDS if only is None else (only,):
        try:
            mod = importlib.import_module(f"cuptiprof.commands.{name.replace('import', 'import_')}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("cuptiprof.commands"):
                continue  # subcommand not part of this build
            raise
        mod.register(sub)
    return p


# A --steps value that begins with '-' and is no plain number: -3:-1, -2:
_NEGATIVE_STEPS = re.compile(r"-\d+:-?\d*")


def _glue_negative_steps(argv: list[str]) -> list[str]:
    """`--steps -3:-1` as `--steps=-3:-1`: argparse takes such a value for an option of its own
    and stops ("expected one argument"). Not for `run`: its --steps is a count, and the profiled
    command (after `--`, or without it) is left as it is."""
    if argv[:1] == ["run"]:
        return argv
    out: list[str] = []
    for i, a in enumerate(argv):
        if a == "--":
            return out + argv[i:]
        # --steps as written, or shortened as argparse allows (--step, --ste)
        if out and len(out[-1]) > 2 and "--steps".startswith(out[-1]) \
                and _NEGATIVE_STEPS.fullmatch(a):
            out[-1] = f"{out[-1]}={a}"
        else:
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = _glue_negative_steps(sys.argv[1:] if argv is None else list(argv))
    # before parsing: --help and --version print to stdout, checked as a command's output is
    closed_std_streams()
    # `cuptiprof import ...`: only that command's parser (help and mistakes get them all)
    try:
        parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    except ImportError as exc:   # a command module imports duckdb, pyarrow, ... at its top
        return _missing_package(exc)
    args = None
    try:
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit:   # --help and --version exit in there: what they printed, flushed
            sys.stdout.flush()
            raise
        if extra:   # `report FILE --bogus`: the subcommand's help lists the options it has
            name = getattr(args, "command", None) or ""
            # `--bogus report FILE`: given to cuptiprof itself, whose help lists what it takes
            before = argv[:argv.index(name)] if name in argv else argv
            command = parser if any(a in before for a in extra) else \
                args._commands.get(name, parser)
            command.error(f"unrecognized arguments: {' '.join(extra)}")
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            say("cuptiprof: error: no command given; name one of those above, e.g. "
                "`cuptiprof run -- python app.py` (see cuptiprof COMMAND --help)")
            return 2
        code = int(args.func(args) or 0)
        sys.stdout.flush()   # a full disk under `> out.txt` is met here, not at exit
        return code
    except CuptiprofError as exc:
        say(f"cuptiprof: error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:
        # `cuptiprof report ... | head`: the reader went away; not an error.
        silence(sys.stdout)
        return 0
    except OSError as exc:
        say(f"cuptiprof: error: {exc.filename or ''}: {exc.strerror or exc}".replace(": : ", ": "))
        return 1
    except ImportError as exc:   # loaded lazily: compare's pyarrow, import's msgspec
        return _missing_package(exc)
    except Exception as exc:
        if type(exc) is RuntimeError and str(exc) == "Query interrupted":
            return _interrupted()   # DuckDB's form of a Ctrl-C that landed in a statement
        duckdb = sys.modules.get("duckdb")
        if duckdb is None or not isinstance(exc, duckdb.Error):
            raise
        if not damage_said(str(exc)):
            # a table or column of an input edited away: the file, not DuckDB's words about it
            breach = _edited_input(args)
            if breach is not None:
                say(f"cuptiprof: error: {breach}")
                return breach.exit_code
        # DuckDB finds a full disk or a corrupt block only when a statement gets there.
        say(f"cuptiprof: error: {storage_error(exc, _read_from(args, exc), _written_to(args))}")
        return 2 if damage_said(str(exc)) else 1


def _missing_package(exc: ImportError) -> int:
    """A package cuptiprof requires (doctor's REQUIRED) that is missing or broken, in one line
    naming it and the install that fixes it (exit 1, as doctor's problem line); any other
    import error is a bug, raised as it is."""
    from cuptiprof.commands.doctor import REQUIRED

    top = (exc.name or "").split(".")[0]
    if top not in REQUIRED:
        raise exc
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    why = ("is not installed" if isinstance(exc, ModuleNotFoundError) and exc.name == top
           else f"cannot be imported ({first})")
    say(f"cuptiprof: error: the Python package {top}, which cuptiprof needs, {why} in "
        f"{sys.executable}; pip install -U {top} (`cuptiprof doctor` checks every package)")
    return 1


def _read_from(args, exc: Exception) -> str | None:
    """The input a DuckDB error is about: the command's one file, or which of its several
    (compare, diff, merge) a damaged block came from, which DuckDB's message does not say."""
    from cuptiprof.store.files import damaged_among

    paths = _inputs(args)
    if len(paths) < 2 or not damage_said(str(exc)):
        return paths[0] if paths else None
    found = damaged_among(paths)
    return None if found is None else str(found)


def _inputs(args) -> list[str]:
    """The cuptiprof files a command reads (its one file, or compare's, diff's, merge's)."""
    return [p for p in (getattr(args, "files", None) or [getattr(args, "file", None),
            getattr(args, "base", None), getattr(args, "new", None)]) if p]


def _edited_input(args):
    """The refusal of an input whose tables or views are not its schema's (a column dropped,
    a table renamed, a view replaced by hand), or None. Only on a DuckDB error's path."""
    from cuptiprof.store.files import breached_among

    if getattr(args, "command", None) not in ("report", "sql", "export", "compare", "diff",
                                               "merge"):
        return None   # import reads traces, run writes its own file
    return breached_among(_inputs(args))


def _written_to(args) -> str | None:
    """The file or folder a command writes through DuckDB (merge's and import's -o, export's
    --parquet): a full disk is met writing it, under a temporary name the user never gave."""
    for name in ("output", "parquet"):
        out = getattr(args, name, None)
        if isinstance(out, str) and out:
            return out
    return None


def _interrupted() -> int:
    say("cuptiprof: interrupted")
    return 130
