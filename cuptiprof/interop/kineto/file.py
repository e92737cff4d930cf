"""KinetoFile: one trace file read as one process. This module holds its state, its main
loop over the pieces of text, the trace's top-level keys and the errors that name what is
wrong; the rest of it, by what each part does:

    piece       a piece's events by category, read field by field (args, ids, times)
    event_rows  the rows each category of event becomes (API calls, ranges, GPU rows, ...)
    processes   cuptiprof's exports: a trace of several processes, a process in several traces
    finish      at the end: steps, ranges and launch links resolved, the rows written
    gpu_rows    the GPU tables' Arrow columns
    meta_rows   the processes, devices and data_quality rows of a process
"""
from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec
import numpy as np

from cuptiprof.errors import InputError
from cuptiprof.interop import pieces as P
from cuptiprof.interop.kineto.categories import _READ
from cuptiprof.interop.kineto.columns import _Cols
from cuptiprof.interop.kineto.document import (_DECODER, _INT32_KEYS, DevProp, DistInfo, Doc,
                                               NegativeIds, ProcEntry, ProcInfo, QuietEntry,
                                               RunEntry)
from cuptiprof.interop.kineto.event_rows import _EventRows
from cuptiprof.interop.kineto.finish import FileSummary, _Finish
from cuptiprof.interop.kineto.gpu_rows import _GpuRows
from cuptiprof.interop.kineto.meta_rows import _MetaRows
from cuptiprof.interop.kineto.piece import _PieceReader
from cuptiprof.interop.kineto.processes import _Processes
from cuptiprof.interop.kineto.text import PIECE_BYTES, _Malformed, iter_docs
from cuptiprof.interop.textsource import read_blocks


class KinetoFile(_PieceReader, _EventRows, _Processes, _Finish, _GpuRows, _MetaRows):
    """Reads one trace file as one process: the whole timeline is kept as compact columns
    (never a dict per event) and written at the end (in parts when large), with every launch
    link (step, innermost range, op) already resolved."""

    def __init__(self, w, path: Path, index: int, used_pids: set[int],
                 on_read: Callable[[int], None] | None = None):
        self.w, self.path, self.index = w, path, index
        self.used_pids = used_pids
        self.on_read = on_read
        self.pid: int | None = None
        self.host_pids: set = set()   # processes of the host events (more than one: merged)
        self.scale = 1000          # ns per trace time unit (microseconds)
        self.base = 0
        self.native = P.native_enabled()
        self.names = P.interner()  # event names
        self.small = P.interner()  # categories, ph, string pids/tids, labels
        self.small.ids(["X", "i", "M"])  # ids 0, 1, 2
        self.tid_cache: dict = {}
        self.ranges = _Cols()
        self.calls = _Cols()
        self.gpu = {t: _Cols() for t in ("kernels", "memcpys", "memsets", "syncs", "memory_events")}
        self.logs = _Cols()
        self.unknown: dict[str, int] = {}
        self.complete = 0          # complete ('X') events, and those of no category or none
        self.uncategorised = 0     # cuptiprof reads (unknown counts those of a category)
        self.devprops: list[DevProp] = []
        self.dist: DistInfo | None = None
        self.host: str | None = None
        self.devices_used: set[int] = set()
        self.events = 0
        self.piece: P.Piece | None = None
        self.rows: dict[str, int] = {}
        self.procs: list[ProcEntry] | None = None   # several processes: rows carry "proc"
        self.from_run: RunEntry | None = None   # cuptiprof's export: the run exported
        self.quality: list[tuple] = []   # and the exported file's data_quality rows (FileSummary)
        self.quiet: list[QuietEntry] = []       # and its processes that recorded no row
        self.original_pid: int | None = None    # the process's pid in the exported file
        self.hollow = False   # a process the export names that the trace holds no row of
        self.local_rank: int | None = None
        self.proc = ProcInfo()     # what cuptiprof's export says of the process
        self.rank_known = False    # a rank of None is the answer (not: read the file name)
        # A trace cuptiprof exported (`cuptiprofLinks`): its External ids are range ids, and
        # calls and GPU rows are linked by them (as recorded), not by time; its ranges may say
        # their domain and a warm-up in args of cuptiprof's own.
        self.links = False
        self.negative: NegativeIds | None = None   # its pids and tids written for negative ones
        self.cpu_ops = 0           # CPU ops made kernels (a trace without CUDA activity)
        # Kineto's user annotations by External id (range index, id, GPU-side): a GPU-side
        # annotation says the id of the host annotation it mirrors
        self.annots = _Cols()
        self.big_args: dict[str, int] = {}   # args key -> values beyond 64 bits taken as absent

    @property
    def name_list(self) -> list:
        return self.names.strings

    # errors ---------------------------------------------------------------------------------
    def _bad(self, r: int, what: str) -> InputError:
        """An error naming the event in row `r` of the current piece."""
        I = self.piece.I
        c, n = int(I[r, P.C_CAT]), int(I[r, P.C_NAME])
        cat = self.small.strings[c] if c >= 0 else None
        name = self.names.strings[n] if n >= 0 else None
        return InputError(f"{self.path}: event #{self.events + int(I[r, P.C_IDX])} "
                          f"({cat} {str(name)[:60]!r}): {what}")

    def _err(self, exc: _Malformed) -> InputError:
        msg = str(exc)
        if exc.index is not None:
            # msgspec's path counts from its piece: the event's own part of it is kept
            detail = re.sub(r"\s*-\s*at `\$\.traceEvents\[\d+\]", " at `", msg)
            detail = detail.replace(" at ``", "")
            return InputError(f"{self.path}: event #{exc.index}: {detail}; the trace is damaged "
                              "there (fix or delete that event to import the rest)")
        if msg == "the file is empty":
            return InputError(f"{self.path}: the file is empty; expected a torch.profiler trace")
        m = re.fullmatch(r"(.+) - at `\$\.([^`]+)`", msg, re.S)
        if m and exc.offset is None:   # valid JSON; a top-level key of the wrong type or shape
            what, key = m.group(1), m.group(2)
            if key == "traceEvents":
                return InputError(f"{self.path}: \"traceEvents\" is not a list of events "
                                  f"({what[:1].lower()}{what[1:]}); expected a torch.profiler / "
                                  "Kineto Chrome trace")
            own = key.startswith("cuptiprof") or key.startswith("distributedInfo.local_rank")
            fix = "export it again, or delete" if own else "delete"
            return InputError(f"{self.path}: {key}: {what[:1].lower()}{what[1:]}; the trace's "
                              f"{'cuptiprof ' if own else ''}metadata is damaged ({fix} the key "
                              "to import the events without it)")
        if msg == "Input data was truncated":   # plain text cut off (gzip says so in textsource)
            return InputError(f"{self.path}: truncated JSON (the text ends inside the trace); "
                              "the file was cut off while being written or copied")
        where = f" near byte {exc.offset:,} of the uncompressed text" if exc.offset is not None else ""
        return InputError(f"{self.path}: invalid JSON{where}: {msg}")

    # main loop ------------------------------------------------------------------------------
    def _scan(self, text) -> P.Piece | None:
        return P.scan(text, self.names, self.small, _DECODER.decode)

    def run(self) -> list[FileSummary]:
        """Read the file and write each process it holds."""
        return [part._finish() for part in self.parts()]

    def parts(self) -> Iterator["KinetoFile"]:
        """Read the file; then the processes it holds, read and not yet written (_finish), one
        at a time: itself, or for cuptiprof's export of several processes one per process."""
        seen_events, n_events = False, 0
        poll = getattr(self.w, "poll", None)  # an output still opening: fail early if it failed
        try:
            for doc in iter_docs(read_blocks(self.path, self.on_read), PIECE_BYTES,
                                 scan=self._scan if self.native else None):
                try:
                    piece = doc if isinstance(doc, P.Piece) else \
                        P.from_events(doc.traceEvents or [], self.names, self.small, doc)
                except P.BadTs as exc:
                    raise _Malformed(str(exc), None, n_events + exc.index) from None
                if piece.has_events:
                    seen_events = True
                n_events += piece.events
                if piece.meta is not None:
                    self._meta(piece.meta)
                self._take(piece)
                if poll is not None:
                    poll()
        except _Malformed as exc:
            raise self._err(exc) from None
        if not seen_events:
            raise InputError(f"{self.path}: valid JSON but not a trace (no \"traceEvents\" array); "
                             "expected a torch.profiler / Kineto Chrome trace")
        if n_events == 0:
            raise InputError(f"{self.path}: a trace without events (\"traceEvents\" is empty); "
                             "nothing to import (was the profiler's schedule ever active?)")
        if self.complete and self.complete == self.uncategorised + sum(self.unknown.values()):
            raise self._foreign()
        if self.procs and all(len(c.get("proc")) == len(c) for c in (self.ranges, self.calls,
                                                                     self.logs, *self.gpu.values())):
            yield from self._split()
        else:
            yield self

    def _foreign(self) -> InputError:
        """The refusal of a Chrome trace none of whose complete events is of a category the
        importer reads (an XLA/JAX or other tool's trace): imported, it would be an empty run."""
        seen = sorted(self.unknown.items(), key=lambda kv: -kv[1])
        shown = [f"{c!r} ({n:,})" for c, n in seen[:4]]
        if self.uncategorised:
            shown.append(f"no category ({self.uncategorised:,})")
        more = f" and {len(seen) - 4} more" if len(seen) > 4 else ""
        return InputError(
            f"{self.path}: a Chrome trace but not a torch.profiler/Kineto one: none of its "
            f"{self.complete:,} complete events is of a category cuptiprof reads (seen: "
            f"{', '.join(shown)}{more}); the importer reads torch.profiler's categories "
            f"({', '.join(_READ)})")

    # the trace's top-level keys -------------------------------------------------------------
    def _meta(self, doc: Doc) -> None:
        if doc.deviceProperties:
            self.devprops.extend(doc.deviceProperties)
        elif doc.computeProperties and not self.devprops:
            self.devprops.extend(msgspec.structs.replace(
                p, computeMajor=p.major, computeMinor=p.minor, numSms=p.multiProcessorCount)
                for p in doc.computeProperties)
        if doc.distributedInfo is not None:
            self.dist = doc.distributedInfo
            if self.dist.local_rank is not None:
                self.local_rank = self.dist.local_rank
        if doc.baseTimeNanoseconds:
            self.base = doc.baseTimeNanoseconds
        if doc.host_name:
            self.host = doc.host_name
        self._check_own_keys(doc)
        if doc.cuptiprofProcess is not None:
            self.proc = doc.cuptiprofProcess
        if doc.cuptiprofRun is not None:
            self.from_run = doc.cuptiprofRun
        if doc.cuptiprofDataQuality:
            self.quality = [(str(self.path), q) for q in doc.cuptiprofDataQuality]
        if doc.cuptiprofQuietProcesses:
            self.quiet = doc.cuptiprofQuietProcesses
        if doc.cuptiprofLinks == "range_id" and self.events == 0:
            self.links = True
        if doc.cuptiprofNegativeIds is not None and self.events == 0:
            self.negative = doc.cuptiprofNegativeIds
        if doc.cuptiprofProcesses and len(doc.cuptiprofProcesses) > 1 and self.events == 0:
            self.procs = doc.cuptiprofProcesses
            cpu = sorted((e.pid, i) for i, e in enumerate(self.procs))
            gpu = sorted((e.gpuPids, i) for i, e in enumerate(self.procs))
            self._cpu_pids, self._cpu_idx = (np.array(x, np.int64) for x in zip(*cpu))
            self._gpu_pids, self._gpu_idx = (np.array(x, np.int64) for x in zip(*gpu))

    def _check_own_keys(self, doc: Doc) -> None:
        """cuptiprof's own keys as its export writes them, or a one-line refusal naming the
        key (a hand-edited or damaged trace): integers that fit the columns they go to, a
        run's startTime in ISO 8601 with its UTC offset (without one, the time it names is
        not known), a data_quality entry that names its check."""
        keyed: list[tuple[str, Any]] = []
        if doc.distributedInfo is not None:   # Kineto's, with cuptiprof's local_rank
            keyed.append(("distributedInfo", doc.distributedInfo))
        if doc.cuptiprofRun is not None:
            keyed.append(("cuptiprofRun", doc.cuptiprofRun))
        if doc.cuptiprofProcess is not None:
            keyed.append(("cuptiprofProcess", doc.cuptiprofProcess))
        for i, e in enumerate(doc.cuptiprofProcesses or ()):
            keyed.append((f"cuptiprofProcesses[{i}]", e))
            if e.run is not None:
                keyed.append((f"cuptiprofProcesses[{i}].run", e.run))
        for i, e in enumerate(doc.cuptiprofQuietProcesses or ()):
            keyed.append((f"cuptiprofQuietProcesses[{i}]", e))
        for i, q in enumerate(doc.cuptiprofDataQuality or ()):
            keyed.append((f"cuptiprofDataQuality[{i}]", q))
            if q.check is None:
                raise InputError(f"{self.path}: {keyed[-1][0]} has no \"check\" (the name of "
                                 "the data_quality check it records); the trace is damaged")
        for key, entry in keyed:
            small = _INT32_KEYS.get(type(entry), ())
            for name in entry.__struct_fields__:
                v = getattr(entry, name)
                if type(v) is not int:   # (not a bool: endedEarly)
                    continue
                bits = 32 if name in small else 64
                if not -(1 << bits - 1) <= v < (1 << bits - 1):
                    shown = str(v) if v.bit_length() < 128 else f"a {v.bit_length()}-bit number"
                    raise InputError(f"{self.path}: {key}.{name} is {shown}, out of range (a "
                                     f"signed {bits}-bit integer); the trace is damaged")
            when = getattr(entry, "startTime", None)
            if when is not None:
                try:
                    offset = _dt.datetime.fromisoformat(when).utcoffset()
                except ValueError:
                    raise InputError(f"{self.path}: {key}.startTime {when[:40]!r} is not an ISO "
                                     "8601 time; the trace is damaged") from None
                if offset is None:
                    raise InputError(f"{self.path}: {key}.startTime {when[:40]!r} has no UTC "
                                     "offset, so the time it names is not known; add it as "
                                     "cuptiprof's export writes it (+00:00)")

    def _set_pid(self, pid: int) -> None:
        self.pid = claim_pid(self.used_pids, pid)


def claim_pid(used: set[int], pid: int) -> int:
    """The pid a process of an import is written with: its own, unless an earlier file of the
    import used it already (two ranks on different hosts or containers with the same pid), then
    one above every real pid (pid + k * 2**22), so that no two files' rows, ranges or launch
    links ever mix. Marks it used. The Kineto and nsys importers share this rule. A pid past
    the 32-bit pid column (no OS pid; another tool's number) is read as a 32-bit value, as a
    thread id is."""
    pid = (pid + (1 << 31)) % (1 << 32) - (1 << 31)
    p, k = pid, 0
    while p in used:
        k += 1
        # a 32-bit pid column: past 2**31 - 1 (over 511 files of one pid, the ranks of a large
        # job each pid 1 in a container of its own) on from -2**31, no real pid either; one
        # more every 1024, where pid + k * 2**22 comes round to pid again
        p = (pid + k * (1 << 22) + k // 1024 + (1 << 31)) % (1 << 32) - (1 << 31)
    used.add(p)
    return p
