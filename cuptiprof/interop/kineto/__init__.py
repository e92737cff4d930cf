"""Import torch.profiler / Kineto Chrome-trace JSON (.json, .json.gz) into a cuptiprof file.

Every dialect from 2021 on: capitalised categories (`Kernel`, `Runtime`, `Operator`) and
modern ones (`kernel`, `cuda_runtime`, `cpu_op`, ...), string thread ids ("stream 7"), integer
or fractional microsecond timestamps, `baseTimeNanoseconds`.

How it stays fast and bounded: the uncompressed text is cut at event boundaries into pieces of
~2 MB (PIECE_BYTES), each read by the native scanner (`_kineto_scan.c`) straight into per-event
columns, or, where it declines a piece (anything unusual) or is not built, decoded by msgspec
into small typed Structs that are then turned into the same columns (pieces.py). Everything
after that works on columns, category by category (no Python object per event). Rows are kept
as compact columns until the file ends, because a launch is attributed to the innermost op open
on its thread, and a GPU row to the step of the call that launched it, which needs the whole
host timeline (a trace cuptiprof exported says each call's range and each GPU row's op by
External id, `cuptiprofLinks`: those links are kept as they were, not found by time); then the
file's rows go to the writer: in one append, or for a large trace APPEND_ROWS rows of each
table per append, so that its Arrow and DuckDB copies exist for one part at a time.

    importer    import_kineto: the files of one import, each process written once whole
    file        KinetoFile: one trace file, its state and main loop (file.py lists its parts)
    text        the text cut at event boundaries into pieces, each decoded (iter_docs)
    document    the msgspec Structs a piece is decoded into where the scanner declines it
    categories  Kineto's categories and what each becomes; names parsed (copy kinds, tids)
    columns     the numpy columns rows are kept in until the file ends, and their Arrow arrays

The names other modules use are imported here. A test or benchmark that replaces one (a
constant, a function) replaces it in the module that reads it: PIECE_BYTES in file,
APPEND_ROWS, steps_at and _release_freed_memory in finish, _DECODER in text and file.
"""
from __future__ import annotations

from cuptiprof.interop.kineto.categories import CATEGORIES, FLOW, IGNORED, LOG_CATEGORY
from cuptiprof.interop.kineto.document import (Args, DevProp, DistInfo, Doc, Ev, NegativeIds,
                                               ProcEntry, ProcInfo, QualityEntry, QuietEntry,
                                               RunEntry)
from cuptiprof.interop.kineto.file import KinetoFile, claim_pid
from cuptiprof.interop.kineto.finish import APPEND_ROWS, FileSummary
from cuptiprof.interop.kineto.importer import import_kineto
from cuptiprof.interop.kineto.text import PIECE_BYTES, iter_docs

# private names that the chrome package, the tests and bench scripts import from here
from cuptiprof.interop.kineto.categories import _tid_number  # noqa: F401
from cuptiprof.interop.kineto.document import _DECODER  # noqa: F401
from cuptiprof.interop.kineto.processes import _said_processes  # noqa: F401
from cuptiprof.interop.kineto.text import _Malformed  # noqa: F401
from cuptiprof.interop.nesting import steps_at  # noqa: F401

__all__ = ["import_kineto", "claim_pid", "FileSummary", "KinetoFile", "iter_docs",
           "PIECE_BYTES", "APPEND_ROWS", "CATEGORIES", "FLOW", "IGNORED", "LOG_CATEGORY",
           "Args", "DevProp", "DistInfo", "Doc", "Ev", "NegativeIds", "ProcEntry", "ProcInfo", "QualityEntry", "QuietEntry", "RunEntry"]
