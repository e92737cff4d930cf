"""`cuptiprof export FILE --chrome OUT.json.gz [--steps A:B]` / `--parquet DIR`: hand cuptiprof
data to Perfetto UI / chrome://tracing, or to DuckDB, Spark and Trino as Parquet datasets."""
from __future__ import annotations

import sys
from pathlib import Path

from cuptiprof.commands import (FILE_HELP, STEPS_FORMS, STEPS_METAVAR, counted, input_file,
                                output_name)
from cuptiprof.errors import UsageError, shell_word
from cuptiprof.outputs import write_failed


def register(sub) -> None:
    p = sub.add_parser("export", help="export to a Chrome/Perfetto trace or Parquet datasets",
                       description="Export a cuptiprof file: --chrome writes a Kineto-style "
                       "Chrome trace (.json or .json.gz) that Perfetto UI and chrome://tracing "
                       "open; --parquet writes one Parquet dataset per table, hive-partitioned "
                       "by host and pid (runs: one file).")
    p.add_argument("file", metavar="FILE", type=input_file, help=FILE_HELP)
    p.add_argument("--chrome", metavar="OUT.json[.gz]", help="write a Chrome trace")
    p.add_argument("--parquet", metavar="DIR", help="write Parquet datasets under DIR")
    p.add_argument("--steps", metavar=STEPS_METAVAR,
                   help=f"only these steps, {STEPS_FORMS}, in the Chrome trace and in every "
                        "Parquet table with a step column; keeps a Chrome trace small enough for "
                        "a browser (default: every row)")
    p.add_argument("--force", action="store_true", help="replace existing output")
    p.set_defaults(func=run)


def run(args) -> int:
    # `--parquet "$DIR"` with DIR unset: refused, not taken for no --parquet
    if args.chrome == "":
        raise UsageError("--chrome needs a file name, e.g. --chrome trace.json.gz")
    if args.parquet == "":
        raise UsageError("--parquet needs a directory name, e.g. --parquet pq")
    if not args.chrome and not args.parquet:
        raise UsageError("export: say what to write: --chrome OUT.json.gz and/or --parquet DIR")
    if args.chrome:   # written by Python, which takes any name
        output_name(args.chrome, "--chrome", utf8=False)
        _gzip_or_plain(args.chrome)
    if args.parquet:   # written by DuckDB
        output_name(args.parquet, "--parquet", what="directory")
    if args.chrome and args.parquet and Path(args.chrome).resolve() == Path(args.parquet).resolve():
        raise UsageError(f"export: --chrome and --parquet name the same path ({args.chrome}); "
                         "give each its own")
    from cuptiprof.analyse.profile import open_profile
    from cuptiprof.interop.parquet import check_target
    from cuptiprof.outputs import check_output
    # Both outputs are checked before either is written: a refused one leaves nothing behind.
    if args.chrome:
        check_output(args.chrome, inputs=[args.file], force=args.force)
    if args.parquet:
        check_target(args.parquet, [args.file], args.force)
    with open_profile(args.file, args.steps, option="--steps") as prof:
        said = []   # the lines to print, once every output is written

        def parquet() -> None:
            from cuptiprof.interop.parquet import export_parquet
            try:
                c = export_parquet(prof, args.parquet, force=args.force)
            except OSError as exc:   # named by the directory asked for, not the temporary one
                raise write_failed(args.parquet, exc) from None
            said.append(f"cuptiprof: wrote {counted(len(c), 'Parquet dataset')} ("
                        f"{sum(1 for v in c.values() if v)} with rows; "
                        f"{counted(c.get('kernels', 0), 'kernel row')}) -> "
                        f"{shell_word(args.parquet)}")
        if args.chrome:
            from cuptiprof.interop.chrome import export_chrome
            # the datasets are written while the trace is still under its temporary name: a
            # failed Parquet export leaves no trace behind (all the outputs asked for, or none)
            try:
                c = export_chrome(prof, args.chrome, force=args.force,
                                  before_publish=parquet if args.parquet else None)
            except BaseException as exc:
                if said:   # the datasets are written, the trace could not take its name (one
                    # another command made there meanwhile): they go too
                    import shutil
                    shutil.rmtree(args.parquet, ignore_errors=True)
                if isinstance(exc, OSError):   # e.g. a full disk mid-write: name the file the
                    raise write_failed(args.chrome, exc) from None   # user asked for
                raise
            scope = prof.scope if args.steps else "every row"
            said.insert(0, f"cuptiprof: wrote {counted(c['events'], 'trace event')} ("
                        f"{counted(c.get('kernels', 0), 'kernel')}, scope: {scope}) -> "
                        f"{shell_word(args.chrome)}")
        elif args.parquet:
            parquet()
        for line in said:
            print(line, file=sys.stderr)
    return 0


# Compressions a name may promise that the export does not write: it writes gzip (.gz) or plain
# JSON, and plain JSON under trace.json.zst is a file no viewer opens as what it is called.
_OTHER_COMPRESSION = (".bz2", ".xz", ".zst", ".zstd", ".lz4", ".zip", ".7z", ".br", ".lzma")


def _gzip_or_plain(name: str) -> None:
    low = str(name).lower()
    ext = next((e for e in _OTHER_COMPRESSION if low.endswith(e)), None)
    if ext:
        raise UsageError(f"--chrome {name}: a Chrome trace is written as .json or gzipped "
                         f".json.gz (what Perfetto UI and chrome://tracing open), not {ext}; "
                         f"name it {str(name)[:-len(ext)]}.gz or .json")
