"""import_kineto: the trace files of one import read in order, each process written once it
is whole (a process exported in several traces, once the last of them is read)."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa

from cuptiprof.errors import InputError
from cuptiprof.interop.kineto.file import KinetoFile
from cuptiprof.interop.kineto.finish import FileSummary
from cuptiprof.interop.kineto.processes import _alike, _merge_parts, _said_processes


def import_kineto(w, paths: list[Path], on_read=None) -> list[FileSummary]:
    """Read each trace file into the writer `w` (one process per file; a trace of cuptiprof's
    export of several processes, one per process). `w` may also be a callable returning the
    writer, called when the first file has been read (so opening the output can overlap the
    parse).

    Several traces of cuptiprof's export of the same process of the same run (exports of some
    of its steps, `export --steps`: the same `cuptiprofRun`, and the same pid, host, rank,
    command, start, end and exit of the process, _process_key) are that one process again:
    imported as one process, under the pid the first of them takes, every row of each, and a
    range that several hold (one around the steps of both) once. Its range ids are numbered
    over all of them, and its steps, launch links and data_quality rows are those of an
    import of one export of all their steps, less what an export of some steps leaves out
    (a range that lies between the steps of two exports, in none of them). Such traces are
    held, read and not written, until the last trace of the import that says that process
    in its head (_said_processes) is read. Where two of them hold the same step (two exports
    whose steps overlap, or an export of every row beside another) or the same API call or
    GPU row, the import is refused in one line: imported together, those rows would count
    twice, as one process or as two. Traces of anything else (other processes, other runs,
    torch.profiler's own traces, whatever their pids) stay processes of their own."""
    paths = [Path(p) for p in paths]
    used: set[int] = set()
    # the processes each trace's head says (only several traces can share one), and the last
    # trace that says each process that more than one says
    said = [_said_processes(p) for p in paths] if len(paths) > 1 else []
    last: dict = {}
    for i, keys in enumerate(said):
        for k in keys:
            last.setdefault(k, []).append(i)
    shared = {k: v[-1] for k, v in last.items() if len(v) > 1}
    held: dict = {}    # process -> [(place, part)]: read, not yet written
    done: list = []    # (place, FileSummary): in the order of the traces and their processes
    for i, p in enumerate(paths):
        with _named(p):
            for j, part in enumerate(KinetoFile(w, p, i, used, on_read).parts()):
                key = part.identity()
                if key in shared and (key in held or shared[key] > i):
                    # its pid now, as a trace not held takes its own
                    if part.pid is None and not part.hollow:
                        part._set_pid(part.proc.pid if part.proc.pid is not None else i)
                    # (a hollow one too: its place is the process's, where it comes first)
                    held.setdefault(key, []).append(((i, j), part))
                elif not part.hollow:
                    done.append(((i, j), part._finish()))
        for key in [k for k in held if shared[k] <= i]:
            group = held.pop(key)
            parts = [m for _, m in group]
            with _named(parts[0].path):
                if all(m.hollow for m in parts):
                    continue   # a process no trace holds a row of
                if _alike(parts):
                    done.append((group[0][0], _merge_parts(parts, used)._finish()))
                else:   # (not as cuptiprof's export writes them) apart, as any other traces
                    done.extend((place, m._finish()) for place, m in group if not m.hollow)
    return [s for _, s in sorted(done, key=lambda d: d[0])]


@contextlib.contextmanager
def _named(path: Path):
    """A shape of trace this importer does not handle: one line naming the file, no
    traceback."""
    try:
        yield
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot import this trace ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
