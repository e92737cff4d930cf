"""A piece's events into a file's columns: sorted by category (_take; each category's rows
to event_rows.py), and read field by field: args, pids and tids, times."""
from __future__ import annotations

import numpy as np

from cuptiprof.interop import pieces as P
from cuptiprof.interop.kineto.categories import (CATEGORIES, IGNORED, LOG_CATEGORY, _PH_I,
                                                 _PH_M, _PH_X, _tid_number)
from cuptiprof.interop.kineto.columns import _dense_unique
from cuptiprof.interop.kineto.document import _ARG_KEYS


class _PieceReader:
    """KinetoFile's reading of the piece of text at hand (self.piece): its events category by
    category, and the fields of any of its rows."""

    def _take(self, piece: P.Piece) -> None:
        """One piece's events, category by category (in the order each first appears)."""
        self.piece = piece
        I = piece.I
        if self.negative is not None:
            self._unmap(I)
        cat = I[:, P.C_CAT]
        uniq, inv = _dense_unique(cat, self.small.size())
        if len(uniq) == 1:
            cats = [(int(uniq[0]), np.arange(len(I)))]
        elif len(uniq) <= 32:   # a trace's few categories: one pass each, no sort
            cats = sorted(((c, np.flatnonzero(inv == i)) for i, c in enumerate(uniq.tolist())),
                          key=lambda x: x[1][0])
        else:
            srt = np.argsort(inv, kind="stable")
            split = np.split(srt, np.cumsum(np.bincount(inv))[:-1])
            cats = sorted(zip(uniq.tolist(), split), key=lambda x: x[1][0])
        if self.pid is None and self.events == 0:
            if len(I):
                ts = piece.F[:, 0]
                nz = np.flatnonzero(ts != 0)  # NaN (no ts) compares unequal: skip those too
                nz = nz[~np.isnan(ts[nz])]
                if len(nz) and ts[nz[0]] > 1e17:  # nanosecond timestamps
                    self.scale = 1
            self._decide_pid(cats)
        strings = self.small.strings
        ph = I[:, P.C_PH]
        for c, rows in cats:
            name = strings[c] if c >= 0 else None
            low = name.lower() if name else None
            what = CATEGORIES.get(low)
            x = ph[rows] == _PH_X   # complete events: every category but instants reads these
            n = int(np.count_nonzero(x))
            self.complete += n
            if what is None:
                if low is None or low == "cpu_instant_event":
                    self._instants(rows)
                    if low is None:
                        self.uncategorised += n
                elif low == LOG_CATEGORY:
                    self._logs(rows[ph[rows] == _PH_I])
                elif low not in IGNORED and n:
                    self.unknown[name] = self.unknown.get(name, 0) + n
                continue
            if not n:
                continue
            rows = rows[x]
            if what in ("kernel", "memcpy", "memset", "sync"):
                self._gpu(what, rows)
            elif what in ("runtime", "driver"):
                self._call(what, rows)
            else:
                self._range(what, rows)
        self.events += piece.events
        self.piece = None

    # columns of the current piece -----------------------------------------------------------
    def _arg(self, rows: np.ndarray, field: str,
             key: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Values and validity of one args field for `rows` (an integer beyond int64 raises
        OverflowError here, where it is read; in a field of LOOSE_ARGS it is taken as absent,
        and counted in data_quality under its key in the trace: `key`, or the field's)."""
        I, a = self.piece.I, P.A[field]
        bits = I[rows, P.C_VALID]
        if self.piece.overflow:
            big = int(((bits >> (P.OVER + a)) & 1).sum())
            if big and field not in P.LOOSE_ARGS:
                raise OverflowError(f"{field} beyond 64 bits")
            if big:   # a value another writer or an edit put there: absent, and counted
                key = key or _ARG_KEYS[field]
                self.big_args[key] = self.big_args.get(key, 0) + big
        return I[rows, P.C_ARG0 + a], ((bits >> a) & 1).astype(bool)

    def _ids(self, rows: np.ndarray, kcol: int, vcol: int) -> np.ndarray:
        """pid / tid numbers: 25738, "25738" or "stream 7" (parsed once per distinct string);
        0 where absent."""
        I = self.piece.I
        kind, v = I[rows, kcol], I[rows, vcol]
        if (kind == P.ID_BIG).any():
            raise OverflowError("thread or process id beyond 64 bits")
        out = np.where(kind == P.ID_INT, v, 0)
        s = kind == P.ID_STR
        if s.any():
            uniq, inv = _dense_unique(v[s], self.small.size())
            c, strings = self.tid_cache, self.small.strings
            nums = []
            for u in uniq.tolist():
                t = strings[u]
                x = c.get(t)
                if x is None:
                    x = c[t] = _tid_number(t)
                nums.append(x)
            out[s] = np.array(nums, np.int64)[inv]
        return out

    def _times(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        F = self.piece.F
        ts, du = F[rows, 0], F[rows, 1]
        bad = np.isnan(ts)
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], "no timestamp (\"ts\")")
        bad = np.isnan(du)
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], "no duration (\"dur\")")
        # Out-of-range numbers would wrap around silently in int64; negative spans are not time.
        limit = float(1 << 62) / self.scale
        bad = ~((np.abs(ts) < limit) & (np.abs(du) < limit))
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], "timestamp or duration out of range")
        bad = du < 0
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], f"negative duration ({du[bad][0]:g})")
        start = self._ns(ts, rows)
        return start, start + np.rint(du * self.scale).astype(np.int64)

    def _ns(self, ts: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Timestamps of `rows` (their "ts" values `ts`) in ns: exact where the text is
        (microseconds with at most three decimals), else from the double."""
        whole = np.floor(ts)
        ns = whole.astype(np.int64) * self.scale + np.rint((ts - whole) * self.scale).astype(np.int64)
        if self.scale == 1000:
            x = self.piece.I[rows, P.C_TSX]
            ns = np.where(x != P.TSX_NONE, x, ns)
        return ns

    def _need_args(self, rows: np.ndarray) -> None:
        no = self.piece.I[rows, P.C_HASARGS] == 0
        if no.any():
            raise self._bad(rows[int(np.argmax(no))], "no \"args\" (device, stream, correlation)")

    def _unmap(self, I: np.ndarray) -> None:
        """cuptiprof's export: the negative pids and tids it wrote as positive numbers (device
        -1's pid, the track of no thread) back to what was recorded, before anything reads them."""
        neg = self.negative
        if neg.pids:
            is_int, col = I[:, P.C_PIDK] == P.ID_INT, I[:, P.C_PID]
            hits = [(is_int & (col == w), v) for w, v in neg.pids.items()]
            for hit, v in hits:
                I[hit, P.C_PID] = v
        if neg.tids == "uint32":
            col = I[:, P.C_TID]
            hit = (I[:, P.C_TIDK] == P.ID_INT) & (col >= 1 << 31) & (col < 1 << 32)
            I[hit, P.C_TID] -= 1 << 32

    def _decide_pid(self, cats: list) -> None:
        I = self.piece.I
        for c, rows in cats:
            cat = self.small.strings[c] if c >= 0 else None
            if cat and (CATEGORIES.get(cat.lower()) in ("op", "user", "runtime", "driver", "python")
                        or cat.lower() == LOG_CATEGORY):
                kind = I[rows, P.C_PIDK]
                hit = np.flatnonzero((kind == P.ID_INT) | (kind == P.ID_BIG))
                if len(hit):
                    if kind[hit[0]] == P.ID_BIG:
                        raise OverflowError("process id beyond 64 bits")
                    self._set_pid(int(I[rows[hit[0]], P.C_PID]))
                    return
        rows = next((r for c, r in cats if c == -1), None)
        labels = self.names.find("process_labels")
        cpu = self.small.find("CPU")
        if rows is None or labels < 0 or cpu < 0:
            return
        R = I[rows]
        hit = np.flatnonzero((R[:, P.C_PH] == _PH_M) & (R[:, P.C_NAME] == labels)
                             & (R[:, P.C_HASARGS] == 1) & (R[:, P.C_LABELS] == cpu)
                             & ((R[:, P.C_PIDK] == P.ID_INT) | (R[:, P.C_PIDK] == P.ID_BIG)))
        if len(hit):
            if R[hit[0], P.C_PIDK] == P.ID_BIG:
                raise OverflowError("process id beyond 64 bits")
            self._set_pid(int(R[hit[0], P.C_PID]))

    def _proc_of(self, rows: np.ndarray) -> np.ndarray:
        """Index in self.procs of each row's process (by its pid in the trace: the CPU pid, or
        a GPU pid gpuPids + device); rows of any other pid go with the first process."""
        pid = self._ids(rows, P.C_PIDK, P.C_PID)
        out = np.zeros(len(rows), np.int32)
        k = self._cpu_pids
        pos = np.minimum(np.searchsorted(k, pid), len(k) - 1)
        hit = k[pos] == pid
        out[hit] = self._cpu_idx[pos[hit]]
        q = pid + 1   # device -1 (a run without a GPU) is gpuPids - 1
        j = np.searchsorted(self._gpu_pids, q, "right") - 1
        ok = ~hit & (j >= 0) & (q - self._gpu_pids[np.maximum(j, 0)] < 1000)
        out[ok] = self._gpu_idx[j[ok]]
        return out
