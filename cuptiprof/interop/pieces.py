"""One decoded piece of a Kineto trace as columns: what both decoders produce.

The native scanner (`_kineto_scan.c`) reads trace text straight into these columns; when it
declines a piece (anything unusual), msgspec decodes it into `Ev` structs and `from_events`
turns those into the same columns. Everything after decoding (kineto.KinetoFile) reads only
columns, so both paths import alike.

Layout: `I` is an (events, NI) int64 matrix, `F` an (events, 2) float64 one (ts, dur; NaN for
null or absent). Strings are ids into per-file interners: event names in `names` (first seen,
first numbered, the same in both paths), categories, ph, string pids/tids and labels in
`small`. Argument values carry a validity bit each in C_VALID; the msgspec path also marks
integers beyond int64 there (bit 32 + field), which raise OverflowError only where read, as
the per-event code did.

`CUPTIPROF_NATIVE=0` turns the native scanner off (tests, or a suspected scanner bug).
"""
from __future__ import annotations

from operator import attrgetter

from msgspec import UNSET

import numpy as np

from cuptiprof.native import extensions_enabled, load_extension

_native = load_extension("cuptiprof.interop._kineto_scan")  # None: the msgspec path does it all

# int64 columns (the C enum, in order)
(C_IDX, C_CAT, C_PH, C_NAME, C_PIDK, C_PID, C_TIDK, C_TID, C_HASARGS, C_LABELS,
 C_XDOMAIN, C_XKIND, C_XLEVEL, C_XLOGGER, C_VALID, C_TSX) = range(16)
C_ARG0 = 16
# C_TSX: "ts" in thousandths of its unit, read exactly from its decimal text (a double holds 16
# digits: microseconds since the epoch lose their nanoseconds); TSX_NONE where the text says
# more (an exponent, a fourth significant decimal) or holds no number
TSX_NONE = -(1 << 63)
# C_XDOMAIN, C_XKIND: the "cuptiprof domain" and "cuptiprof kind" args of cuptiprof's own
# export (string ids in `small`; -1 null, and for the domain -2 where the key is absent);
# C_XLEVEL, C_XLOGGER: the "level" and "logger" args of its log records (-1: absent, null or
# not a string)
XDOMAIN_ABSENT = -2
# Args fields (kineto.Args), grid and block spread over three columns each
ARGS = ("correlation", "device", "context", "stream", "bytes", "grid0", "grid1", "grid2",
        "block0", "block1", "block2", "registers", "smem", "cbid", "mem_dev_type", "mem_dev_id",
        "mem_bytes", "ext_id", "xstep", "xrange", "xdsmem", "mem_addr", "xopen", "event_id",
        "xgraph", "xgnode", "xextra")
A = {k: i for i, k in enumerate(ARGS)}
assert len(ARGS) <= 32   # a validity bit each below OVER (and the scanner's 32-bit masks)
NI = C_ARG0 + len(ARGS)
OVER = 32  # bit OVER + a: the msgspec path saw an integer beyond int64 in field a
# pid / tid kinds
ID_NONE, ID_INT, ID_STR, ID_BIG = 0, 1, 2, 3
# Columns several args keys share (kineto.Args fields, the column's own first): "xextra", the
# one value of its category that Kineto has no key for in cuptiprof's export; and columns of
# keys no event of another category says, which that category's key of cuptiprof's export
# reuses (no column more per event): a peer copy's source and destination devices, a
# [memory] instant's correlation id. A GPU row's graph and graph node, and a peer copy's
# devices, are Kineto's keys or those of cuptiprof's export before it wrote Kineto's. An
# event that says two keys of one column the scanner declines; the msgspec path takes the
# first that is not null.
SHARED = {"xextra": ("xasync", "xvalue", "xret", "xpool"),
          "xdsmem": ("xdsmem", "xsrcdev", "ksrcdev"), "xopen": ("xopen", "xdstdev", "kdstdev"),
          "event_id": ("event_id", "xcorr"),
          "xgraph": ("xgraph", "kgraph"), "xgnode": ("xgnode", "kgnode")}
_SCALAR_ARGS = [a for a in ARGS if a[:4] not in ("grid", "bloc") and a not in SHARED]
# args whose value may be anything in other writers' traces (not validated, read where int)
LOOSE_ARGS = {"ext_id", "xstep", "xrange", "xdsmem", "mem_addr", "xopen", "event_id", "xgraph",
              "xgnode", "xextra"}

if _native is not None and getattr(_native, "NI", None) != NI:
    _native = None  # a stale build with another column layout: not used (tests fail on it)


def native_available() -> bool:
    return _native is not None


def native():
    """The native module (_kineto_scan), or None when it was not built."""
    return _native


def native_enabled() -> bool:
    """The native scanner is built and not turned off with CUPTIPROF_NATIVE=0."""
    return _native is not None and extensions_enabled()


class PyInterner:
    """Strings numbered in the order first seen (the native Interner's interface)."""

    def __init__(self):
        self._d: dict = {None: -1}
        self.strings: list = []

    def ids(self, values: list) -> np.ndarray:
        d, lst = self._d, self.strings
        out = list(map(d.get, values))
        if None in out:  # new strings: numbered in order of first appearance
            for v in dict.fromkeys(values):
                if v not in d:
                    d[v] = len(lst)
                    lst.append(v)
            out = list(map(d.__getitem__, values))
        return np.array(out, np.int32)

    def find(self, value: str) -> int:
        """The id of `value` if it was seen, else -1 (nothing is added)."""
        return self._d.get(value, -1)

    def size(self) -> int:
        return len(self.strings)


def ids(it, values: list) -> np.ndarray:
    """Ids of `values` (str or None -> -1) in interner `it`, numbering new strings in order."""
    r = it.ids(values)
    return r if isinstance(r, np.ndarray) else np.frombuffer(r, np.int32)


def interner():
    return _native.Interner() if native_enabled() else PyInterner()


class Piece:
    """The events of one piece as columns (`events` counts them all; `I` and `F` may leave
    out events that carry no field the importer reads, `I[:, C_IDX]` keeps positions)."""

    __slots__ = ("I", "F", "events", "has_events", "meta", "overflow")

    def __init__(self, I, F, events, has_events, meta, overflow=False):
        self.I, self.F, self.events, self.has_events = I, F, events, has_events
        self.meta = meta          # a kineto.Doc with the piece's other top-level keys
        self.overflow = overflow  # some integer beyond int64 is marked in C_VALID


def scan(text, names, small, decode_meta) -> Piece | None:
    """The native scanner on one piece of text; None where it declines. `decode_meta` turns
    the text of the other top-level keys (a JSON object) into a Doc, or raises."""
    r = _native.scan(text, names, small)
    if r is None:
        return None
    ib, fb, kept, events, meta, has_events = r
    doc = None
    if meta:
        with memoryview(text) as mv:
            body = b",".join(b'"' + k + b'":' + bytes(mv[a:b]) for k, a, b in meta)
        try:
            doc = decode_meta(b"{" + body + b"}")
        except Exception:  # leave every error of these keys to the msgspec path
            return None
    return Piece(np.frombuffer(ib, np.int64).reshape(kept, NI),
                 np.frombuffer(fb, np.float64).reshape(kept, 2), events, has_events, doc)


def _ints(values: list) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """int|None values -> int64 values, validity, and where a value is beyond int64."""
    n = len(values)
    nones = values.count(None)
    if nones == n:
        return np.zeros(n, np.int64), np.zeros(n, bool), None
    if not nones:
        try:
            return np.array(values, np.int64), np.ones(n, bool), None
        except OverflowError:
            pass
    o = np.array(values, object)
    ok = np.not_equal(o, None).astype(bool)
    try:
        return np.where(ok, o, 0).astype(np.int64), ok, None
    except OverflowError:
        pass
    lo, hi = -(1 << 63), (1 << 63) - 1
    ok = [x is not None and lo <= x <= hi for x in values]
    big = [x is not None and not (lo <= x <= hi) for x in values]
    v = np.array([x if k else 0 for x, k in zip(values, ok)], np.int64)
    return v, np.array(ok, bool), (np.array(big, bool) if True in big else None)


class BadTs(ValueError):
    """A "ts" that is no number (or null): msgspec's words for it, and the event's position."""

    def __init__(self, index: int, got: str):
        super().__init__(f"Expected `float | null`, got `{got}` - at `$.traceEvents[{index}].ts`")
        self.index = index


_NOT_NUMBER = {ord("t"): "bool", ord("f"): "bool", ord('"'): "str", ord("["): "array",
               ord("{"): "object"}


def _ts_columns(raws: list) -> tuple[np.ndarray, np.ndarray]:
    """The "ts" texts (msgspec.Raw or bytes) of a piece: their values (NaN where null or
    absent), and their exact thousandths (C_TSX). Whole columns at a time: a loop per event
    made the msgspec path a quarter slower."""
    texts = b"\n".join(raws).split(b"\n")
    if len(texts) != len(raws):   # a newline inside a value: no number, found one by one
        texts = [bytes(r) for r in raws]
    a = np.array(texts, dtype=f"S{max(1, max(map(len, texts)))}")
    M = a.view(np.uint8).reshape(len(a), -1)
    first = M[:, 0]
    bad = np.isin(first, list(_NOT_NUMBER))
    if bad.any():
        i = int(np.argmax(bad))
        raise BadTs(i, _NOT_NUMBER[int(first[i])])
    null = (first == 0) | (first == ord("n"))
    ts = np.where(null, b"nan", a).astype(np.float64)
    tsx = _milli(M)
    tsx[null] = TSX_NONE
    return ts, tsx


# byte -> class in a number's text: 0 padding, 1 digit, 2 the point, 3 the sign, 4 other
_CLASS = np.full(256, 4, np.uint8)
_CLASS[0], _CLASS[ord("0"):ord("9") + 1], _CLASS[ord(".")], _CLASS[ord("-")] = 0, 1, 2, 3


def _milli(M: np.ndarray) -> np.ndarray:
    """Rows of number texts (bytes, 0-padded) in exact thousandths, or TSX_NONE: the scanner's
    exact_milli, a column at a time (the integer part parsed by numpy, three decimals added)."""
    n, width = M.shape
    rows, col = np.arange(n), np.arange(width)[None, :]
    cls = _CLASS[M]
    neg = cls[:, 0] == 3
    dot = cls == 2
    at = np.where(dot.any(axis=1), dot.argmax(axis=1), (cls != 0).sum(axis=1))  # the point
    ok = ((cls <= 2) | ((col == 0) & neg[:, None])).all(axis=1)   # no exponent, no word
    ok &= (at > neg) & (at - neg <= 16)   # 1 to 16 integer digits
    ok &= ~((col > (at + 3)[:, None]) & (cls == 1) & (M != ord("0"))).any(axis=1)
    whole = M.copy()
    whole[(col >= at[:, None]) | ~ok[:, None]] = 0
    whole[~ok, 0] = ord("0")
    v = np.abs(np.ascontiguousarray(whole).view(f"S{width}").ravel().astype(np.int64))
    v = v.astype(np.uint64) * np.uint64(1000)
    for k, scale in ((1, 100), (2, 10), (3, 1)):   # the decimals (absent: 0)
        c = M[rows, np.minimum(at + k, width - 1)]
        v += np.where((at + k < width) & (cls[rows, np.minimum(at + k, width - 1)] == 1),
                      (c - ord("0")).astype(np.uint64) * np.uint64(scale), np.uint64(0))
    ok &= v <= np.uint64((1 << 63) - 1)
    s = v.astype(np.int64)
    return np.where(ok, np.where(neg, -s, s), TSX_NONE)


def milli(text: bytes) -> int:
    """One number text in exact thousandths, or TSX_NONE (see _milli)."""
    return int(_milli(np.frombuffer(text, np.uint8)[None, :])[0])


_KIND = {type(None): ID_NONE, int: ID_INT, str: ID_STR}


def _id_column(vals: list, small) -> tuple[np.ndarray, np.ndarray]:
    """pid / tid values (int, str or None) -> kinds and values (string ids for strings)."""
    n = len(vals)
    kind = np.fromiter(map(_KIND.__getitem__, map(type, vals)), np.int64, n)
    strs = kind == ID_STR
    if not strs.any() and not (kind == ID_NONE).any():
        v, _, big = _ints(vals)
    else:
        o = np.array(vals, object)
        o[kind != ID_INT] = None
        v, _, big = _ints(o.tolist())
        if strs.any():
            v[strs] = ids(small, np.array(vals, object)[strs].tolist())
    if big is not None:
        kind[big] = ID_BIG
    return kind, v


def _dims(dims: list) -> list[list]:
    """grid / block lists -> three lists of int|None (x, y, z; None where absent)."""
    k = len(dims) - dims.count(None)
    if k == 0:
        return [dims, dims, dims]  # all None
    if k == len(dims) and all(len(g) == 3 for g in dims):
        return [list(c) for c in zip(*dims)]
    return [[g[j] if g is not None and len(g) > j else None for g in dims] for j in range(3)]


def from_events(evs: list, names, small, doc) -> Piece:
    """msgspec's Ev structs -> the columns the native scanner makes."""
    n = len(evs)
    I = np.zeros((n, NI), np.int64)
    F = np.empty((n, 2), np.float64)
    overflow = False
    col = lambda k: list(map(attrgetter(k), evs))  # noqa: E731
    I[:, C_IDX] = np.arange(n)
    I[:, C_NAME] = ids(names, col("name"))
    I[:, C_CAT] = ids(small, col("cat"))
    I[:, C_PH] = ids(small, [p or None for p in col("ph")])  # "" (the default) -> -1
    I[:, C_PIDK], I[:, C_PID] = _id_column(col("pid"), small)
    I[:, C_TIDK], I[:, C_TID] = _id_column(col("tid"), small)
    if n:
        F[:, 0], I[:, C_TSX] = _ts_columns(col("ts"))
        F[:, 1] = np.array(col("dur"), np.float64)  # None -> NaN
    else:
        I[:, C_TSX] = TSX_NONE
    args = col("args")
    has = np.not_equal(np.array(args, object), None).astype(bool) if n else np.zeros(0, bool)
    I[:, C_HASARGS] = has
    I[:, C_LABELS] = -1
    I[:, C_XDOMAIN] = XDOMAIN_ABSENT
    I[:, C_XKIND] = -1
    I[:, C_XLEVEL] = -1
    I[:, C_XLOGGER] = -1
    a = [x for x in args if x is not None]
    if a:
        # most args (a CPU op's "External id" and the like) hold none of the fields kept: only
        # the others go through the per-field passes below
        kept = np.fromiter(map(type(a[0])().__ne__, a), bool, len(a))
        rows = np.flatnonzero(has)[kept]
        a = [x for x, k in zip(a, kept.tolist()) if k]
    if a:
        I[rows, C_LABELS] = ids(small, list(map(attrgetter("labels"), a)))
        dom = list(map(attrgetter("xdomain"), a))
        if any(d is not UNSET for d in dom):
            I[rows, C_XDOMAIN] = np.where([d is UNSET for d in dom], XDOMAIN_ABSENT,
                                          ids(small, [d if type(d) is str else None for d in dom]))
        I[rows, C_XKIND] = ids(small, [k if type(k) is str else None
                                       for k in map(attrgetter("xkind"), a)])
        for c, k in ((C_XLEVEL, "xlevel"), (C_XLOGGER, "xlogger")):
            values = list(map(attrgetter(k), a))
            if values.count(None) < len(values):
                I[rows, c] = ids(small, [v if type(v) is str else None for v in values])
        valid = np.zeros(len(a), np.int64)

        def put(j: int, values: list) -> None:
            nonlocal valid, overflow
            v, ok, big = _ints(values)
            I[rows, C_ARG0 + j] = v
            valid |= ok.astype(np.int64) << j
            if big is not None:
                overflow = True
                valid |= big.astype(np.int64) << (OVER + j)

        for k in _SCALAR_ARGS:
            values = list(map(attrgetter(k), a))
            if values.count(None) == len(values):   # absent everywhere: the zeros stay
                continue
            if k in LOOSE_ARGS:   # any JSON value: only an integer is one (as the scanner reads)
                values = [v if type(v) is int else None for v in values]
            put(A[k], values)
        for column, fields in SHARED.items():   # all loose: read where an integer
            merged = None
            for k in fields:
                values = list(map(attrgetter(k), a))
                if values.count(None) < len(values):
                    merged = values if merged is None else [x if x is not None else v
                                                            for x, v in zip(merged, values)]
            if merged is not None:
                put(A[column], [v if type(v) is int else None for v in merged])
        for k in ("grid", "block"):
            for j, values in enumerate(_dims(list(map(attrgetter(k), a)))):
                put(A[f"{k}{j}"], values)
        I[rows, C_VALID] = valid
    return Piece(I, F, n, doc.traceEvents is not None, doc, overflow)
