"""The rows each category of event becomes, appended to the file's columns: API calls,
ranges, [memory] instants and log records (host side), and kernels, copies, memsets and syncs
(GPU side)."""
from __future__ import annotations

import numpy as np

from cuptiprof.store import arrow as AC
from cuptiprof.interop import pieces as P
from cuptiprof.interop.kineto.categories import _EXTRA, _GPU_TABLE, _PH_I
from cuptiprof.interop.kineto.document import _ARG_KEYS


class _EventRows:
    """KinetoFile's rows of each category of the piece at hand (rows: its indices there)."""

    # host side ------------------------------------------------------------------------------
    def _host_pids(self, rows: np.ndarray) -> None:
        """Note the processes host events come from: one file is imported as one process."""
        I = self.piece.I
        v = I[rows, P.C_PID][I[rows, P.C_PIDK] == P.ID_INT]
        if len(v):
            self.host_pids.update(AC.distinct(v).tolist() if (v != v[0]).any() else (int(v[0]),))

    def _call(self, what: str, rows: np.ndarray) -> None:
        self._host_pids(rows)
        start, end = self._times(rows)
        C = self.calls
        C.add(tid=self._ids(rows, P.C_TIDK, P.C_TID), start=start, end=end,
              name=self.piece.I[rows, P.C_NAME].astype(np.int32),
              driver=np.full(len(rows), what == "driver"))
        if self.procs:
            C.add(proc=self._proc_of(rows))
        C.add_col("corr", *self._arg(rows, "correlation"))
        C.add_col("cbid", *self._arg(rows, "cbid"))
        if self.links:
            C.add_col("ext", *self._arg(rows, "ext_id"))
            C.add_col("ret", *self._arg(rows, "xextra", "cuptiprof return code"))

    def _range(self, what: str, rows: np.ndarray) -> None:
        start, end = self._times(rows)
        if what in ("user", "gpu_user") and not self.links:
            v, ok = self._arg(rows, "ext_id")
            if ok.any():
                at = np.flatnonzero(ok)
                self.annots.add(at=len(self.ranges) + at, ext=v[at],
                                gpu=np.full(len(at), what == "gpu_user"))
        names = self.piece.I[rows, P.C_NAME].astype(np.int32)
        code = {"op": 0, "user": 1, "python": 2, "gpu_user": 3}[what]
        if what == "gpu_user":
            # no args needed: Kineto writes its device and stream as its pid and tid too
            dev = self._or_id(rows, "device", P.C_PIDK, P.C_PID)
            stream = self._or_id(rows, "stream", P.C_TIDK, P.C_TID)
            key = -1 - (dev * 100_000 + stream)  # GPU-side annotations nest per stream
        else:
            self._host_pids(rows)
            dev = stream = np.full(len(rows), -1, np.int64)
            key = self._ids(rows, P.C_TIDK, P.C_TID)
        self.ranges.add(key=key, start=start, end=end, name=names,
                        code=np.full(len(rows), code, np.int8), dev=dev, stream=stream)
        if self.links:
            I = self.piece.I
            self.ranges.add_col("ext", *self._arg(rows, "ext_id"))
            self.ranges.add_col("xstep", *self._arg(rows, "xstep"))
            self.ranges.add_col("xopen", *self._arg(rows, "xopen"))
            self.ranges.add(xdomain=I[rows, P.C_XDOMAIN], xkind=I[rows, P.C_XKIND])
        if self.procs:
            self.ranges.add(proc=self._proc_of(rows))

    def _or_id(self, rows: np.ndarray, field: str, kcol: int, vcol: int) -> np.ndarray:
        """An args field, or where it is absent the number in pid / tid."""
        v, ok = self._arg(rows, field)
        if not ok.all():
            v = v.copy()
            v[~ok] = self._ids(rows[~ok], kcol, vcol)
        return v

    def _instants(self, rows: np.ndarray) -> None:
        mem = self.names.find("[memory]")
        if mem < 0:
            return
        R = self.piece.I[rows]
        sel = (R[:, P.C_PH] == _PH_I) & (R[:, P.C_NAME] == mem) & (R[:, P.C_HASARGS] == 1)
        if not sel.any():
            return
        valid = R[:, P.C_VALID]
        t, b = P.A["mem_dev_type"], P.A["mem_bytes"]
        sel &= ((valid >> t) & 1).astype(bool) & (R[:, P.C_ARG0 + t] == 1)
        sel &= (((valid >> b) | (valid >> (P.OVER + b))) & 1).astype(bool)
        rows = rows[sel]
        if not len(rows):
            return
        ts = self.piece.F[rows, 0]
        if np.isnan(ts).any():
            return
        M = self.gpu["memory_events"]
        M.add(time_ns=self._ns(ts, rows), bytes=self._arg(rows, "mem_bytes")[0],
              tid=self._ids(rows, P.C_TIDK, P.C_TID))
        M.add_col("device_id", *self._arg(rows, "mem_dev_id"))
        M.add_col("address", *self._arg(rows, "mem_addr"))
        if self.links:
            M.add_col("xstep", *self._arg(rows, "xstep"))
            M.add_col("pool", *self._arg(rows, "xextra", "cuptiprof pool"))
            M.add_col("correlation_id", *self._arg(rows, "event_id", "cuptiprof correlation"))
            M.add(kind=self.piece.I[rows, P.C_XKIND])   # "cuptiprof kind": other than 'device'
        if self.procs:
            M.add(proc=self._proc_of(rows))
        self.rows["memory_events"] = self.rows.get("memory_events", 0) + len(rows)

    def _logs(self, rows: np.ndarray) -> None:
        """Log records of cuptiprof's export: time, thread, message (the name), level, logger
        and the step recorded (read in _finish where the trace has cuptiprof's links)."""
        if not len(rows):
            return
        self._host_pids(rows)
        I = self.piece.I
        ts = self.piece.F[rows, 0]
        ok = ~np.isnan(ts)
        bad = ok & ~(np.abs(np.where(ok, ts, 0)) < float(1 << 62) / self.scale)
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], "timestamp out of range")
        tid = self._ids(rows, P.C_TIDK, P.C_TID)
        L = self.logs
        L.add_col("time", np.where(ok, self._ns(np.where(ok, ts, 0), rows), 0), ok)
        L.add_col("tid", tid, (I[rows, P.C_TIDK] != P.ID_NONE) & (tid != -1))
        L.add(message=I[rows, P.C_NAME].astype(np.int32), level=I[rows, P.C_XLEVEL].astype(np.int32),
              logger=I[rows, P.C_XLOGGER].astype(np.int32))
        L.add_col("xstep", *self._arg(rows, "xstep"))
        if self.procs:
            L.add(proc=self._proc_of(rows))

    # GPU side -------------------------------------------------------------------------------
    def _gpu(self, what: str, rows: np.ndarray) -> None:
        start, end = self._times(rows)
        self._need_args(rows)
        dev = self._or_id(rows, "device", P.C_PIDK, P.C_PID)
        stream = self._or_id(rows, "stream", P.C_TIDK, P.C_TID)
        self.devices_used.update(AC.distinct(dev).tolist())
        G = self.gpu[_GPU_TABLE[what]]
        G.add(start_ns=start, end_ns=end, name=self.piece.I[rows, P.C_NAME].astype(np.int32))
        if self.procs:
            G.add(proc=self._proc_of(rows))
        ones = np.ones(len(rows), bool)
        G.add_col("device_id", dev, ones)
        G.add_col("stream_id", stream, ones)
        G.add_col("context_id", *self._arg(rows, "context"))
        G.add_col("correlation_id", *self._arg(rows, "correlation"))
        if self.links:
            G.add_col("ext", *self._arg(rows, "ext_id"))
            G.add_col("xstep", *self._arg(rows, "xstep"))
            G.add_col("xrange", *self._arg(rows, "xrange"))
            if what in _EXTRA:
                G.add_col(_EXTRA[what][0], *self._arg(rows, "xextra", _EXTRA[what][1]))
        if what == "memcpy":   # a peer copy's devices (columns a copy's keys share)
            G.add_col("src_device_id", *self._arg(rows, "xdsmem", "fromDevice"))
            G.add_col("dst_device_id", *self._arg(rows, "xopen", "toDevice"))
        if what != "sync":   # the CUDA graph a row was launched from; 0: none (Kineto's)
            for k, a in (("graph_id", "xgraph"), ("graph_node_id", "xgnode")):
                v, ok = self._arg(rows, a, _ARG_KEYS["k" + a[1:]])
                G.add_col(k, v, ok & (v != 0))
        if what == "kernel":
            for k in ("grid", "block"):
                for j, xyz in enumerate("xyz"):
                    G.add_col(f"{k}_{xyz}", *self._arg(rows, f"{k}{j}"))
            G.add_col("registers", *self._arg(rows, "registers"))
            G.add_col("smem", *self._arg(rows, "smem"))
            if self.links:
                G.add_col("xdsmem", *self._arg(rows, "xdsmem"))
        elif what in ("memcpy", "memset"):
            G.add_col("bytes", *self._arg(rows, "bytes"))
        else:   # a sync: the CUDA event it waited on (Kineto's event syncs say it)
            G.add_col("cuda_event_id", *self._arg(rows, "event_id"))
        self.rows[_GPU_TABLE[what]] = self.rows.get(_GPU_TABLE[what], 0) + len(rows)
