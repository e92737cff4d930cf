"""Traces and processes that are not one to one, both of cuptiprof's export: a trace of
several processes (`cuptiprofProcesses`), read as one and then split into one KinetoFile per
process; and one process exported in several traces (`export --steps`), whose traces are
taken into one before it is written (import_kineto)."""
from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import msgspec
import numpy as np

from cuptiprof.errors import InputError
from cuptiprof.store import arrow as AC
from cuptiprof.interop import pieces as P
from cuptiprof.interop.kineto.categories import STEP0, _step_of
from cuptiprof.interop.kineto.document import _DECODER, DistInfo, ProcInfo, RunEntry
from cuptiprof.interop.kineto.text import _ARRAY_START
from cuptiprof.interop.textsource import blocks as text_blocks, text_start

if TYPE_CHECKING:
    from cuptiprof.interop.kineto.file import KinetoFile


class _Processes:
    """KinetoFile's splitting of a trace of several processes, and its taking in of another
    trace of its own process."""

    # one trace of several processes ---------------------------------------------------------
    def _split(self) -> Iterator["KinetoFile"]:
        """One KinetoFile per process of a trace cuptiprof exported from a file of several: each
        with its own rows, correlation ids moved back, and its host, rank and devices (made one
        at a time: one process's copies of the columns exist at once). A process the trace
        holds no row of (an export of steps it has none in) is `hollow`: it says the process
        (what ties exports of one file together, and their order), but is no process of the
        import; what the trace says of itself goes with its first process of rows."""
        tables = (self.ranges, self.calls, self.logs, *self.gpu.values())
        held = set(np.unique(np.concatenate([c.get("proc", np.int32) for c in tables])).tolist())
        first = min(held, default=0)
        for i, e in enumerate(self.procs):
            part = copy.copy(self)
            part.procs = None
            part.hollow = bool(held) and i not in held
            part.ranges = self.ranges.subset(self.ranges.get("proc", np.int32) == i)
            part.calls = self.calls.subset(self.calls.get("proc", np.int32) == i)
            part.logs = self.logs.subset(self.logs.get("proc", np.int32) == i)
            part.gpu = {t: G.subset(G.get("proc", np.int32) == i) for t, G in self.gpu.items()}
            for cols, k in ((part.calls, "corr"), *((G, "correlation_id") for G in part.gpu.values())):
                if e.idShift and k in cols.parts:
                    v, ok = cols.get(k), cols.get(k + "?", bool)
                    v[ok] -= e.idShift
            part.rows = {t: len(G) for t, G in part.gpu.items() if len(G)}
            part.devices_used = {d for G in part.gpu.values() if len(G)
                                 for d in AC.distinct(G.get("device_id")).tolist()}
            part.devprops = list(e.devices or [])
            part.host, part.local_rank, part.rank_known = e.host, e.localRank, True
            part.dist = DistInfo(rank=e.rank, world_size=e.worldSize)
            part.unknown = self.unknown if i == first else {}   # counted once, with the first
            part.big_args = self.big_args if i == first else {}
            part.host_pids = set() if e.originalPid is None else {e.originalPid}
            part.from_run = e.run
            part.quality = self.quality if i == first else []   # added back once
            part.quiet = self.quiet if i == first else []
            part.original_pid = e.originalPid
            part.proc = ProcInfo(exitStatus=e.exitStatus, endedEarly=e.endedEarly,
                                 command=e.command, startNs=e.startNs, endNs=e.endNs)
            part.pid = None
            if e.originalPid is not None and not part.hollow:   # (a hollow one takes none)
                part._set_pid(e.originalPid)
            yield part

    # one process exported in several traces (export --steps) ------------------------------
    def identity(self) -> tuple | None:
        """The process of cuptiprof's export this is (_process_key): the same in each trace
        exported of that process of that run; None for a trace of anything else."""
        if not self.links or self.from_run is None:
            return None
        pid = self.original_pid if self.original_pid is not None else self.proc.pid
        if pid is None:
            return None
        return _process_key(self.from_run, pid, self.host,
                            self.dist.rank if self.dist is not None else None, self.proc)

    def _holds(self) -> tuple[set, np.ndarray, bool]:
        """What the rows read hold: the numbers of their steps and warm-ups, the correlation
        ids of their API calls and GPU rows, and whether there is any row at all."""
        R = self.ranges
        nums: set = set()
        if len(R):
            names = self.name_list
            host = R.get("code", np.int8) != 3
            for n in np.unique(R.get("name", np.int32)[host]).tolist():
                if n >= 0 and (step := _step_of(names[n])) >= 0:
                    nums.add(step)
            warm = self.small.find("warmup")
            if self.links and warm >= 0 and "xkind" in R.parts:
                v, ok = R.get("xstep"), R.get("xstep?", bool)
                nums.update((np.unique(v[ok & (R.get("xkind") == warm)]) + STEP0).tolist())
        corr = [self.calls.get("corr")[self.calls.get("corr?", bool)]]
        corr += [G.get("correlation_id")[G.get("correlation_id?", bool)]
                 for t, G in self.gpu.items() if t != "memory_events"]
        rows = any(len(c) for c in (R, self.calls, self.logs, *self.gpu.values()))
        return nums, np.unique(np.concatenate(corr)), rows

    def _absorb(self, other: "KinetoFile") -> None:
        """Take in the rows read of `other`, another trace's export of this process (of other
        steps): their times moved to this trace's base, their names and strings to this
        file's ids; a range both exports hold (one around the steps of both, by its External
        id, which is its range_id as recorded; one without, by every field) once, ending
        where the later export ends it (a range still open ends at each export's last time).
        What is said of the rows is summed (GPU rows, unknown categories, ...)."""
        shift = other.base - self.base
        names = P.ids(self.names, list(other.names.strings))
        small = P.ids(self.small, list(other.small.strings))
        G = other.gpu
        for cols, times, named, strings in (
                (other.ranges, ("start", "end"), ("name",), ("xdomain", "xkind")),
                (other.calls, ("start", "end"), ("name",), ()),
                *((G[t], ("start_ns", "end_ns"), ("name",), ()) for t in G if t != "memory_events"),
                (G["memory_events"], ("time_ns",), (), ("kind",)),
                (other.logs, ("time",), ("message",), ("level", "logger"))):
            if not len(cols):
                continue
            for k in times:
                cols.put(k, cols.get(k) + shift)
            for ks, table in ((named, names), (strings, small)):
                for k in ks:
                    if k in cols.parts:
                        cols.put(k, _remap(cols.get(k), table))
        R, Q = self.ranges, other.ranges
        if len(R) and len(Q):
            keep = np.ones(len(Q), bool)
            ok, q_ok = R.get("ext?", bool), Q.get("ext?", bool)
            at = np.flatnonzero(ok)
            known, first = np.unique(R.get("ext")[at], return_index=True)
            if len(known):
                q_ext = Q.get("ext")
                pos = np.minimum(np.searchsorted(known, q_ext), len(known) - 1)
                hit = q_ok & (known[pos] == q_ext)
                np.maximum.at(R.get("end"), at[first[pos[hit]]], Q.get("end")[hit])
                keep &= ~hit
            fields = ("code", "key", "start", "end", "name", "dev", "stream")
            mine = Counter(zip(*(R.get(k)[~ok].tolist() for k in fields)))
            if mine and not q_ok.all():
                for i, row in zip(np.flatnonzero(~q_ok).tolist(),
                                  zip(*(Q.get(k)[~q_ok].tolist() for k in fields))):
                    if mine[row] > 0:
                        mine[row] -= 1
                        keep[i] = False
            if not keep.all():
                other.ranges = Q.subset(keep)
        for mine_, theirs in ((self.ranges, other.ranges), (self.calls, other.calls),
                              (self.logs, other.logs), *((self.gpu[t], G[t]) for t in G)):
            mine_.extend(theirs)
        self.events += other.events
        self.rows, self.unknown, self.big_args = (
            {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}}
            for a, b in ((self.rows, other.rows), (self.unknown, other.unknown),
                         (self.big_args, other.big_args)))
        self.devices_used = self.devices_used | other.devices_used
        have = {d.id for d in self.devprops}
        self.devprops = self.devprops + [d for d in other.devprops if d.id not in have]
        self.host_pids = self.host_pids | other.host_pids
        # each export carries the rows of the processes it holds: both traces' (_quality_rows
        # adds a row two traces carry once)
        self.quality = self.quality + other.quality
        self.quiet = self.quiet or other.quiet


def _process_key(run: RunEntry, pid: int, host, rank, proc) -> tuple:
    """What tells a process of cuptiprof's export from every other: its run as exported (every
    field: its id alone is a number each file gives its own runs), its pid in the exported
    file, and its host, rank, command, start, end and how it ended. (`proc`: a ProcInfo or
    ProcEntry.)"""
    return (msgspec.structs.astuple(run), pid, host, rank, proc.exitStatus, proc.endedEarly,
            proc.command, proc.startNs, proc.endNs)


_HEAD_BYTES = 8 << 20   # text read, at most, for the keys before "traceEvents"


def _said_processes(path: Path) -> set:
    """The processes a trace of cuptiprof's export says it holds (their _process_key), from its
    head: the keys the export writes before "traceEvents" (the events are not read). Empty for
    a trace of another writer, one whose head says no process, or one that cannot be read here
    (reading it is left to KinetoFile, which names what is wrong)."""
    buf = bytearray()
    blocks = text_blocks(path)
    try:
        for block in blocks:
            buf += block
            at = text_start(buf)   # (past a byte-order mark and whitespace)
            if at is not None:
                if buf[at:at + 1] != b"{":
                    return set()
                m = _ARRAY_START.search(buf, at)
                if m is not None:
                    break
            if len(buf) > _HEAD_BYTES:
                return set()
        else:
            return set()
        doc = _DECODER.decode(bytes(buf[at:m.start()]) + b'"traceEvents": []}')
    except (OSError, InputError, msgspec.DecodeError, RecursionError):
        return set()
    finally:
        blocks.close()
    if doc.cuptiprofLinks != "range_id":
        return set()
    if doc.cuptiprofProcesses and len(doc.cuptiprofProcesses) > 1:
        return {_process_key(e.run, e.originalPid, e.host, e.rank, e)
                for e in doc.cuptiprofProcesses if e.run is not None and e.originalPid is not None}
    proc = doc.cuptiprofProcess
    if doc.cuptiprofRun is None or proc is None or proc.pid is None:
        return set()
    rank = doc.distributedInfo.rank if doc.distributedInfo is not None else None
    return {_process_key(doc.cuptiprofRun, proc.pid, doc.host_name or None, rank, proc)}


def _merge_parts(parts: list[KinetoFile], used: set[int]) -> KinetoFile:
    """Several traces' exports of one process (import_kineto) as one: the first, holding the
    rows of all, with the pid the first of them took (the others' go back to `used`).
    Refused (InputError) where two hold the same step or the same API call or GPU row."""
    held = [(m, *m._holds()) for m in parts]
    for j, (b, b_steps, b_corr, b_rows) in enumerate(held):
        for a, a_steps, a_corr, a_rows in held[:j]:
            if not (a_rows and b_rows):
                continue   # (a process the trace names without a row of it)
            both = a_steps & b_steps
            if both:
                why = f"both hold step{'s' if len(both) > 1 else ''} {_numbers(both)}"
            elif not (a_steps and b_steps):
                why = (f"{(b if a_steps else a).path.name} holds rows in no step (an export of "
                       "every row)")
            elif len(np.intersect1d(a_corr, b_corr)):
                why = "both hold the same API calls or GPU rows (their correlation ids)"
            else:
                continue
            run = a.from_run
            run = repr(run.label) if run.label else run.id
            pid = a.original_pid if a.original_pid is not None else a.proc.pid
            raise InputError(
                f"{b.path}: an export of the same process as {a.path} (pid {pid} of run {run}), "
                f"and {why}: imported together, those rows would count twice; import exports "
                "of steps that do not overlap (cuptiprof export --steps A:B), or import these "
                "into separate files")
    first = parts[0]
    pid = next((m.pid for m in parts if m.pid is not None), None)
    for m in parts:
        if m.pid is not None and m.pid != pid:
            used.discard(m.pid)
    first.pid = pid
    for m in parts[1:]:
        first._absorb(m)
    first.hollow = all(m.hollow for m in parts)
    return first


def _alike(parts: list[KinetoFile]) -> bool:
    """Whether the rows read of each part have the same columns, table by table (as every
    trace of cuptiprof's export gives them), so that one part can take in the others'."""
    def tables(m: KinetoFile) -> list:
        return [m.ranges, m.calls, m.logs, *(m.gpu[t] for t in sorted(m.gpu))]
    for cols in zip(*map(tables, parts)):
        if len({frozenset(c.keys()) for c in cols if len(c)}) > 1:
            return False
    return True


def _numbers(nums: set) -> str:
    """Step numbers as 'N', 'A:B' (consecutive) or the first few."""
    v = [n - STEP0 for n in sorted(nums)]   # (numbered from STEP0: _step_of)
    if len(v) == 1:
        return str(v[0])
    if v[-1] - v[0] == len(v) - 1:
        return f"{v[0]}:{v[-1]}"
    return ", ".join(map(str, v[:5])) + (" ..." if len(v) > 5 else "")


def _remap(v: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Interned ids as those of another interner (`table`: id -> its id there); a negative one
    (none, absent) stays."""
    if not len(v) or not len(table):
        return v
    return np.where(v >= 0, table[np.maximum(v, 0)], v).astype(v.dtype)
