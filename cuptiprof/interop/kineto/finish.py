"""The end of a file: each row's step, innermost range and op resolved (by time, or where
cuptiprof's export says them, by External id), and the rows written: in one append, or for a
large trace APPEND_ROWS rows of each table per append."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from cuptiprof.store import arrow as AC
from cuptiprof.interop import pieces as P
from cuptiprof.interop.kineto.categories import _step_of
from cuptiprof.interop.kineto.columns import (STEP0, _Cols, _int32, _names, _null_neg, _opt,
                                              _step_arg, _step_col)
from cuptiprof.interop.kineto.document import RunEntry
from cuptiprof.interop.nesting import nest, steps_at
from cuptiprof.work_ops import intervals_work

# Rows of each table per transaction (two DuckDB row groups): the Arrow columns, the writer's
# copies and DuckDB's uncommitted rows of a large trace exist for one part at a time.
APPEND_ROWS = 2 * 122_880


@dataclass
class FileSummary:
    path: str
    pid: int
    rank: int | None
    events: int = 0
    rows: dict = field(default_factory=dict)
    unknown: dict = field(default_factory=dict)
    steps: int = 0
    run: RunEntry | None = None   # the run it was exported from (cuptiprof's export)
    # cuptiprof's export: the exported file's data_quality rows (with the first process of a
    # trace), each as (the trace that carried it, QualityEntry), and this process's pid there
    quality: list = field(default_factory=list)
    original_pid: int | None = None
    quiet: list = field(default_factory=list)   # (with quality) its processes of no row



class _Finish:
    """KinetoFile's end: the rows read, linked and written (_finish)."""

    def _finish(self) -> FileSummary:
        if self.pid is None:   # a trace without host events: cuptiprof's export says its pid
            self._set_pid(self.proc.pid if self.proc.pid is not None else self.index)
        pid = self.pid
        base = self.base
        w = self.w() if callable(self.w) else self.w

        longest = max(len(self.ranges), len(self.calls), len(self.logs),
                      *map(len, self.gpu.values()))
        large = longest > APPEND_ROWS  # written in parts
        if large:  # the text pieces are gone: their pages go back before the next phase
            _release_freed_memory()
        R, C = self.ranges, self.calls
        # Times move to the trace's base in place: no second copy of the largest columns.
        r_start, r_end, c_start, c_end = R.get("start"), R.get("end"), C.get("start"), C.get("end")
        for v in (r_start, r_end, c_start, c_end):
            v += base
        r_code, r_name, r_key = R.get("code", np.int8), R.get("name", np.int32), R.get("key")
        c_tid = C.get("tid")
        c_corr_ok = C.get("corr?", bool)
        c_corr = np.where(c_corr_ok, C.get("corr"), -1)
        names = self.name_list
        # ProfilerStep#N ranges are the steps.
        # (one more entry, for id -1: a range without a name, which is no step)
        step_of_name = np.full(len(names) + 1, -1, np.int64)
        for i, n in enumerate(names):
            step_of_name[i] = _step_of(n)
        r_stepn = step_of_name[r_name] if len(r_name) else np.zeros(0, np.int64)
        # torch's own record_function annotations ('Optimizer.step#SGD.step',
        # 'enumerate(DataLoader)#...') came as operators in 2021 traces (category Operator);
        # later torch writes them as user_annotation, and they are not ops (cuptiprof's export
        # writes a range's kind as recorded: an op stays one)
        annot = np.fromiter((type(n) is str and "#" in n and not n.startswith("aten::")
                             and step_of_name[i] < 0 for i, n in enumerate([*names, None])),
                            bool, len(names) + 1)
        if len(r_name) and annot.any() and not self.links:
            r_code = np.where((r_code == 0) & annot[r_name], np.int8(1), r_code)
        is_step = (r_stepn >= 0) & (r_code != 3)
        # a warm-up step of cuptiprof's export: kind 'warmup' with its own number, not a step
        warm = np.zeros(len(r_start), bool)
        if self.links and len(r_start) and self.small.find("warmup") >= 0:
            warm = R.get("xkind") == self.small.find("warmup")
            is_step &= ~warm
        # a range cuptiprof's export says was still open: it nests what ran inside it (its
        # end in the trace is the export's last time) and is written without an end
        r_open = (R.get("xopen?", bool) & (R.get("xopen") == 1)) if self.links and len(r_start) \
            else np.zeros(len(r_start), bool)

        # nesting and steps, an open range never ends: one opened inside it at the export's
        # last time (where its end in the trace falls) is still inside it, as recorded, and
        # in its step where it is (or is inside) a step still open
        n_end = np.where(r_open, np.iinfo(np.int64).max, r_end) if r_open.any() else r_end
        s_start, s_end, s_n, s_key = r_start[is_step], n_end[is_step], r_stepn[is_step], r_key[is_step]
        parent, depth, c_range, c_op = nest(r_key, r_start, n_end, r_code == 0,
                                            c_tid, c_start, c_end)
        if not self.links and not self._has_gpu_work():
            self._cpu_kernels(r_code <= 1, ~(is_step | warm), parent, depth, r_name, r_key,
                              r_start, r_end)
            longest = max(longest, len(self.gpu["kernels"]))
            large = longest > APPEND_ROWS
        # what runs inside a warm-up is in it, as recorded: a warm-up holds rows as a step does
        held = is_step | warm
        held_n = np.where(warm, _step_arg(R), r_stepn) if warm.any() else r_stepn
        at = (r_start[held], n_end[held], held_n[held])
        # the warm-up or step each range began in (its index among them): its step, and below
        # whether it began in a warm-up
        r_in = steps_at(r_start, *at[:2], np.arange(len(at[0])), r_key, r_key[held])
        r_step = np.where(r_in >= 0, at[2][np.maximum(r_in, 0)], -1) if len(at[0]) else r_in
        r_step[held] = held_n[held]
        # A GPU-side annotation runs when the GPU gets to its work, often in a later step of
        # the host's: it takes the step of the host annotation it mirrors (its External id).
        A = self.annots
        if len(A) and len(r_step):
            a_at, a_ext, a_gpu = A.get("at"), A.get("ext"), A.get("gpu", bool)
            h_ext, first = np.unique(a_ext[~a_gpu], return_index=True)
            if len(h_ext):
                g_at, g_ext = a_at[a_gpu], a_ext[a_gpu]
                pos = np.minimum(np.searchsorted(h_ext, g_ext), len(h_ext) - 1)
                hit = h_ext[pos] == g_ext
                r_step[g_at[hit]] = r_step[a_at[~a_gpu][first[pos[hit]]]]
        if self.links and len(r_step):
            # cuptiprof's export says a GPU-side annotation's step as recorded, where it had one
            said = _step_arg(R)
            gpu_ann = (r_code == 3) & (said >= 0)
            r_step[gpu_ann] = said[gpu_ann]
        # a call takes a step, never a warm-up (whose work has no step, as recorded): as the
        # collector gives it, its own thread's step or warm-up first (in a warm-up: none), else
        # the latest-started step of any thread that holds it
        c_step = steps_at(c_start, s_start, s_end, s_n, c_tid, s_key)
        if warm.any() and len(c_start):
            w_key = r_key[warm]
            c_w = steps_at(c_start, r_start[warm], n_end[warm], np.arange(len(w_key)), c_tid,
                           w_key)
            in_own = c_w >= 0
            in_own[in_own] = w_key[c_w[in_own]] == c_tid[in_own]
            c_step[in_own] = -1
        by_ext = self._by_ext(R) if self.links else None
        if by_ext is not None and len(c_start):
            # cuptiprof's export: each call's External id is its innermost range (as recorded),
            # which gives its range and step; not by time (a call stamped on another clock, or
            # just before its range began, would fall outside the step it ran in). A range in
            # no step (one that began outside every step, or before the steps of an export of
            # some) gives none: its call takes the step open in its process by time, as the
            # collector gives it. A range begun in a warm-up gives none either (by time too: in
            # the warm-up none, after it the step then open).
            cr = by_ext(C.get("ext"), C.get("ext?", bool))
            hit = cr >= 0
            c_range[hit] = cr[hit]
            rs = r_step[cr[hit]]
            if warm.any():
                hidx = np.flatnonzero(held)
                r_warm = np.where(r_in >= 0, warm[hidx[np.maximum(r_in, 0)]], False) | warm
                rs = np.where(r_warm[cr[hit]], -1, rs)
            c_step[hit] = np.where(rs >= 0, rs, c_step[hit])

        L = self.logs
        n_l = len(L)
        if n_l:   # log records: the step recorded (cuptiprof's export), else the step by time
            l_ok, l_tid = L.get("time?", bool), L.get("tid")
            l_time = np.where(l_ok, L.get("time") + base, 0)
            if self.links:
                l_step = _step_arg(L)
            else:
                l_step = np.where(l_ok, steps_at(l_time, s_start, s_end, s_n, l_tid, s_key), -1)

        # memory events (torch's [memory] instants): the step recorded (cuptiprof's export),
        # else the step open on their thread at their time, as the allocating call's would be
        M = self.gpu["memory_events"]
        if self.links:
            m_step = _step_arg(M)
        else:
            m_step = steps_at(M.get("time_ns") + base, *at, M.get("tid"), r_key[held])

        # Link GPU rows to the call that launched them (the first call with that correlation
        # id): its step, innermost range and op.
        has = np.flatnonzero(c_corr >= 0)
        corr_sorted, first = np.unique(c_corr[has], return_index=True)
        first = has[first]

        launched = np.zeros(len(c_step), bool)   # calls with GPU rows: their steps are not empty
        ops_at: dict | None = None

        def link(g: np.ndarray, cpu: tuple | None = None, ext: tuple | None = None,
                 xstep: np.ndarray | None = None, xrange: tuple | None = None) -> dict:
            nonlocal ops_at
            call = np.full(len(g), -1, np.int64)
            if len(corr_sorted):
                pos = np.minimum(np.searchsorted(corr_sorted, g), len(corr_sorted) - 1)
                call = np.where((corr_sorted[pos] == g) & (g >= 0), first[pos], -1)
            found = call >= 0
            call = np.where(found, call, 0)
            pick = lambda v: np.where(found, v[call], -1) if len(v) else call - 1  # noqa: E731
            launched[call[found]] = True
            step, rng, op = pick(c_step), pick(c_range), pick(c_op)
            if cpu is not None:
                # A run without a GPU records each CPU op that does the work as a kernel on
                # device -1 (stream = thread) over the op's own interval; no call launched it,
                # so it takes the step and links of the range with that thread, interval and
                # name: a cpu_op, or a record_function label (a user range: its op is the
                # innermost op around it, if any).
                if ops_at is None:
                    o = np.flatnonzero((r_code <= 1) & ~held)
                    o = o[np.argsort(depth[o], kind="stable")]
                    ops_at = {}
                    for i, k, a, b, nm in zip(o.tolist(), r_key[o].tolist(), r_start[o].tolist(),
                                              r_end[o].tolist(), r_name[o].tolist()):
                        ops_at.setdefault((k, a, b, nm), i)   # of equal ones, the outermost
                mask, thread, start, end, kname = cpu
                up = None
                for j in np.flatnonzero(mask & ~found).tolist():
                    i = ops_at.get((int(thread[j]), int(start[j]), int(end[j]), int(kname[j])), -1)
                    if i >= 0:
                        if r_code[i] != 0 and up is None:
                            up = _nearest(parent, depth, r_code == 0)
                        step[j], rng[j], op[j] = r_step[i], i, i if r_code[i] == 0 else up[i]
            if ext is not None and by_ext is not None:
                # cuptiprof's export: a GPU row's External id is its op as recorded (none: none)
                v, ok = ext
                o = by_ext(v, ok)
                op = np.where(o >= 0, o, np.where(ok, op, -1))
            if xstep is not None:
                # cuptiprof's export: the step as recorded, written on a row whose launching
                # call is not in the trace (where the call is, its step is the row's)
                step = np.where(found | (xstep < 0), step, xstep)
            if xrange is not None and by_ext is not None:
                # and its innermost range as recorded, by that range's External id (written
                # too where it is not the launching call's)
                r = by_ext(*xrange)
                rng = np.where(r >= 0, r, rng)
            return {"step": _step_col(step),
                    "range_id": _opt(rng), "op_id": _opt(op)}

        # Written APPEND_ROWS rows of each table at a time: the Arrow columns, the writer's
        # copies and DuckDB's uncommitted rows of a large trace exist for one part at a time.
        i32 = lambda v: AC.array(np.full(len(v), v, np.int32) if np.ndim(v) == 0 else v, pa.int32())  # noqa: E731
        n_r, n_c = len(r_start), len(c_start)
        dev, stream = R.get("dev"), R.get("stream")
        # a GPU annotation's stream as its kernels' (gpu_rows): unsigned -1 is -1, and a
        # negative one is none (NULL, as the collector stores a row of no stream)
        stream = np.where(stream >= 1 << 31, stream - (1 << 32), stream)
        gpu_ranges = bool((dev >= 0).any())
        unclaimed: dict[str, int] = {}
        for lo in range(0, max(longest, 1), APPEND_ROWS):
            hi = lo + APPEND_ROWS
            batch: dict = self._gpu_tables(w.run_id, pid, base, link, m_step, lo, hi)
            for t in ("kernels", "memcpys", "memsets"):
                if t in batch:
                    unclaimed[t] = unclaimed.get(t, 0) + batch[t]["step"].null_count
            if lo < n_r:
                sl = slice(lo, min(hi, n_r))
                n = sl.stop - lo
                code = r_code[sl]
                attrs = (AC.strings([None if d < 0 else json.dumps(
                                         {"device": d, "stream": s if s >= 0 else None})
                                     for d, s in zip(dev[sl].tolist(), stream[sl].tolist())])
                         if gpu_ranges else pa.nulls(n, pa.string()))
                batch["ranges"] = {
                    "run_id": i32(np.full(n, w.run_id)), "pid": i32(np.full(n, pid)),
                    "range_id": AC.array(np.arange(lo + 1, sl.stop + 1), pa.int64()),
                    "parent_id": _opt(parent[sl]), "depth": i32(depth[sl]),
                    "name": _names(r_name[sl], names),
                    "domain": self._domains(code, R.get("xdomain")[sl] if self.links else None),
                    "thread_id": AC.array(np.where(code == 3, stream[sl], r_key[sl]), pa.int64(),
                                          (code != 3) | (stream[sl] >= 0)),
                    "start_ns": AC.array(r_start[sl], pa.int64()),
                    "end_ns": AC.array(r_end[sl], pa.int64(), ~r_open[sl]),
                    "kind": AC.dictionary(np.where(warm[sl], 3, np.where(is_step[sl], 2,
                                                                         np.minimum(code, 1))),
                                          ["op", "user", "step", "warmup"]),
                    "step": _step_col(r_step[sl]), "attrs": attrs}
            if lo < n_c:
                sl = slice(lo, min(hi, n_c))
                n = sl.stop - lo
                batch["api_calls"] = {
                    "run_id": i32(np.full(n, w.run_id)), "pid": i32(np.full(n, pid)),
                    "thread_id": AC.array(c_tid[sl], pa.int64()),
                    "api_kind": AC.dictionary(C.get("driver", bool)[sl], ["runtime", "driver"]),
                    "cbid": _null_neg(np.where(C.get("cbid?", bool)[sl], C.get("cbid")[sl], -1),
                                      pa.int32()),
                    "name": _names(C.get("name", np.int32)[sl], names),
                    "correlation_id": _null_neg(c_corr[sl], pa.int64()),
                    "start_ns": AC.array(c_start[sl], pa.int64()),
                    "end_ns": AC.array(c_end[sl], pa.int64()),
                    "step": _step_col(c_step[sl]), "range_id": _opt(c_range[sl])}
                if self.links:
                    batch["api_calls"]["return_code"] = _int32(C.get("ret")[sl],
                                                               C.get("ret?", bool)[sl])
            if lo < n_l:
                sl = slice(lo, min(hi, n_l))
                n = sl.stop - lo
                small = self.small.strings
                text = lambda k, s: AC.strings([s[i] if i >= 0 else None  # noqa: E731
                                                for i in L.get(k, np.int32)[sl].tolist()])
                batch["logs"] = {
                    "run_id": i32(np.full(n, w.run_id)), "pid": i32(np.full(n, pid)),
                    "thread_id": AC.array(l_tid[sl], pa.int64(), L.get("tid?", bool)[sl]),
                    "time_ns": AC.array(l_time[sl], pa.int64(), l_ok[sl]),
                    "level": text("level", small), "logger": text("logger", small),
                    "message": text("message", names), "step": _step_col(l_step[sl])}
            if hi >= longest:  # the last part: one row per process, devices, data quality
                worked = set(AC.distinct(c_step[launched & (c_step >= 0)]).tolist()) \
                    if launched.any() else set()
                empty = [s - STEP0 for s in sorted(set(s_n.tolist()) - worked)] if worked else []
                self._meta_rows(batch, w.run_id, pid, len(s_n), unclaimed, empty,
                                r_start, r_end, c_start, c_end)
            if large:
                _release_freed_memory()  # the previous part's copies
            w.append(batch)
        original = self.original_pid if self.original_pid is not None else self.proc.pid
        if original is None and len(self.host_pids) == 1:
            original = next(iter(self.host_pids))
        return FileSummary(str(self.path), pid, self.dist.rank if self.dist else None,
                           self.events, dict(self.rows), dict(self.unknown), len(s_n),
                           self.from_run, list(self.quality), original, list(self.quiet))

    def _has_gpu_work(self) -> bool:
        """Any kernel, copy or memset read so far."""
        return any(len(self.gpu[t].get("start_ns")) for t in ("kernels", "memcpys", "memsets"))

    def _cpu_kernels(self, is_event, not_step, parent, depth, r_name, r_key, r_start, r_end):
        """A trace recorded without CUDA activity: the CPU ops that do the work become kernels on
        device -1, one stream per thread, as `cuptiprof run` without a GPU stores them (ops and
        record_function labels are torch.profiler's events there; steps and Python frames are not)."""
        event = is_event & not_step
        if not event.any():
            return
        up = _nearest(parent, depth, event)
        idx = np.flatnonzero(event)
        at = np.full(len(event), -1, np.int64)
        at[idx] = np.arange(len(idx))
        names = self.name_list
        work = idx[intervals_work([names[i] if i >= 0 else None for i in r_name[idx].tolist()],
                                  np.where(up[idx] >= 0, at[up[idx]], -1),
                                  r_end[idx] - r_start[idx])]
        n = len(work)
        G = self.gpu["kernels"]
        G.add(start_ns=r_start[work] - self.base, end_ns=r_end[work] - self.base,
              name=r_name[work].astype(np.int32))
        yes, no, zero = np.ones(n, bool), np.zeros(n, bool), np.zeros(n, np.int64)
        G.add_col("device_id", np.full(n, -1, np.int64), yes)
        G.add_col("stream_id", r_key[work].astype(np.int64), yes)
        for k in ("context_id", "correlation_id", "grid_x", "grid_y", "grid_z", "block_x",
                  "block_y", "block_z", "registers", "smem", "graph_id", "graph_node_id"):
            G.add_col(k, zero, no)
        self.devices_used.add(-1)
        self.cpu_ops = n
        self.rows["kernels"] = self.rows.get("kernels", 0) + n

    @staticmethod
    def _by_ext(R: _Cols):
        """For cuptiprof's export: External ids (values, validity) -> the index of the range
        exported with that range_id (-1: none, or not in the trace)."""
        v, ok = R.get("ext"), R.get("ext?", bool)
        keys = np.flatnonzero(ok)
        ids, first = np.unique(v[keys], return_index=True)
        first = keys[first]

        def find(g: np.ndarray, g_ok: np.ndarray) -> np.ndarray:
            if not len(ids):
                return np.full(len(g), -1, np.int64)
            pos = np.minimum(np.searchsorted(ids, g), len(ids) - 1)
            return np.where(g_ok & (ids[pos] == g), first[pos], -1)
        return find

    def _domains(self, code: np.ndarray, xdomain: np.ndarray | None) -> pa.DictionaryArray:
        """Each range's domain: its category's, or where cuptiprof's export wrote one (an NVTX
        domain; null: NVTX's default domain), that."""
        cats = ["cpu_op", "user_annotation", "python_function", "gpu_user_annotation"]
        if xdomain is None or not len(xdomain) or (xdomain == P.XDOMAIN_ABSENT).all():
            return AC.dictionary(code, cats)
        own = np.unique(xdomain[xdomain >= 0])
        codes = np.where(xdomain >= 0, len(cats) + np.searchsorted(own, np.maximum(xdomain, 0)),
                         code)
        values = cats + [self.small.strings[i] for i in own.tolist()]
        return pa.DictionaryArray.from_arrays(
            AC.array(codes, pa.int32(), xdomain != -1), AC.strings(values))


_TRIM: list = []


def _nearest(parent: np.ndarray, depth: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Each row's nearest ancestor where `keep` holds (-1: none), shallow rows first."""
    up = np.full(len(parent), -1, np.int64)
    for d in range(1, int(depth.max()) + 1 if len(depth) else 0):
        i = np.flatnonzero(depth == d)
        p = parent[i]
        up[i] = np.where(keep[p], p, up[p])
    return up


def _release_freed_memory() -> None:
    """Give freed heap pages back to the system (glibc's malloc_trim; nothing elsewhere).
    A large import frees its text pieces, then each part's copies, in bulk; glibc keeps such
    pages, and they would count in the peak of the phase that follows (measured: -19% peak
    on a 560 MB trace, with the parts)."""
    if not _TRIM:
        try:
            import ctypes
            _TRIM.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError):  # not glibc
            _TRIM.append(None)
    if _TRIM[0] is not None:
        _TRIM[0](0)
