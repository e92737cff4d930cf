"""`cuptiprof merge A.duckdb B.duckdb ... -o ALL.duckdb`: runs from several hosts or ranks in one
file; every row keeps its run (renumbered in input order) and pid."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from cuptiprof.commands import FILES_HELP, counted, input_file, named_output
from cuptiprof.errors import InputError, UsageError, shell_word


def register(sub) -> None:
    p = sub.add_parser("merge", help="merge cuptiprof files (hosts, ranks, runs) into one file",
                       description="Merge cuptiprof files into one: each input's runs stay "
                       "runs of their own (renumbered in input order), every row keeps its pid. "
                       "A run that another input already holds is refused. The part files of a run that did "
                       "not finish (OUT.duckdb.parts/*.duckdb) are merged as that one run.")
    p.add_argument("files", nargs="+", metavar="FILE", type=input_file, help=FILES_HELP)
    p.add_argument("-o", "--output", required=True, metavar="ALL.duckdb",
                   help="the merged file (must not exist, unless --force; written atomically)")
    p.add_argument("--force", action="store_true", help="replace ALL.duckdb if it exists")
    p.set_defaults(func=run)


def run(args) -> int:
    from cuptiprof.store.merge import merge_files_result
    named_output(args.output)

    seen: dict = {}
    for f in args.files:
        # one file however it is spelled: ./a.duckdb, an absolute path, a symlink, a hard link
        try:
            st = os.stat(f)
            key = (st.st_dev, st.st_ino)
        except OSError:   # missing: the merge itself names it
            key = Path(f).resolve()
        if key in seen:   # by key: main() may be handed one str object twice
            raise UsageError(f"{f}: the same input file is given twice ({seen[key]}); its rows "
                             "would count twice")
        seen[key] = f
    parts = _run_parts(args.files)
    if parts is not None:
        return _recover(parts, args.files, args.output, args.force)
    res = merge_files_result(args.files, args.output, overwrite=args.force)
    rows = sum(res.rows.values())
    print(f"cuptiprof: merged {counted(len(args.files), 'file')} ({counted(res.runs, 'run')}, "
          f"{counted(rows, 'row')}) into {shell_word(res.path)}", file=sys.stderr)
    return 0


def _run_parts(files: list[str]) -> Path | None:
    """The OUT.parts folder of a `cuptiprof run` when the inputs are its part files: they are
    merged as that run. Mixed with other files, they are refused."""
    from cuptiprof.store.files import is_run_parts

    # in the order given (a set's order changes from one call to the next): the folder named
    # below is the first given
    folders = list(dict.fromkeys(Path(f).absolute().parent for f in files))
    parts = [d for d in folders if is_run_parts(d)]
    if not parts:
        return None
    if len(folders) > 1:
        d = parts[0]
        raise UsageError(f"{d}: the part files of one cuptiprof run are merged alone, as that run "
                         f"(cuptiprof merge {shell_word(d)}/*.duckdb -o OUT.duckdb); then merge "
                         "OUT.duckdb with the other files")
    return parts[0]


def _recover(parts: Path, files: list[str], output: str, force: bool) -> int:
    from cuptiprof.outputs import check_output
    from cuptiprof.run.merge_parts import recover

    for f in files:   # `PARTS/*.duckdb` that matched nothing reaches us as that very name
        if not Path(f).exists():
            why = "" if any(parts.glob("*.duckdb")) else (
                f" ({parts.name} holds no part file: no process of that run wrote anything)")
            raise InputError(f"{f}: no such file{why}")
    # refused here in its own line, not as a failed merge of the run's parts
    check_output(output, inputs=files, force=force)
    out = recover(parts, [Path(f) for f in files], output, overwrite=force)
    print(f"cuptiprof: wrote {shell_word(out)}, the run of the "
          f"{counted(len(files), 'part file')} in {shell_word(parts)}; that folder can be removed",
          file=sys.stderr)
    return 0
