"""Distinct rows of integer columns (distinct_rows: a code per row), as the writer interns
launch configurations and lanes and groups kernel rows for busy time: the native pass where it
was built, else numpy's mixed-radix keys."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from cuptiprof.native import extensions_enabled, load_extension
from cuptiprof.store import arrow
from cuptiprof.store.arrow import valid as _valid, values as _values

_LOOKUP_MAX = 1 << 18   # key spaces up to this size are deduplicated with a lookup table
                        # (larger tables leave the cache: hashing is faster)
_KEY_MAX = 1 << 62      # mixed-radix keys stay below this (int64, no overflow)
_I64 = np.dtype(np.int64)


def _int_array(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """An int32 (for int32 input) or int64 Arrow array; `valid`: False where the value is NULL."""
    typ = pa.int32() if values.dtype == np.int32 else pa.int64()
    return arrow.array(values, typ, valid)


def _one_row_each(codes: np.ndarray, k: int) -> np.ndarray:
    """The first row of each code 0..k-1 (every code occurs). The first rows usually hold them
    all; the whole array is scanned only when they do not. (Assigned in reverse: the last
    assignment to an index wins.)"""
    rep = np.full(k, -1, np.int64)
    head = min(len(codes), max(4096, 64 * k))
    rep[codes[:head][::-1]] = np.arange(head - 1, -1, -1)
    if (rep < 0).any():
        rep[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
    return rep


def _kernel_groups(lanes: dict[str, list], codes: np.ndarray, step) -> tuple[list[tuple], np.ndarray]:
    """Busy-time groups (pid, device_id, step) of kernel rows, from their lane codes (`lanes`:
    each lane column's values per code) and their step column: a few numpy passes, no search
    for distinct rows."""
    pd_index: dict[tuple, int] = {}
    lane_pd = np.array([pd_index.setdefault(pd, len(pd_index))
                        for pd in zip(lanes["pid"], lanes["device_id"])], np.int64)
    pds = list(pd_index)
    if step is None or step.null_count == len(step):
        return [(*pd, None) for pd in pds], (lane_pd[codes] if len(pds) > 1
                                             else np.zeros(len(codes), np.int64))
    st = step.combine_chunks() if isinstance(step, pa.ChunkedArray) else step
    if st.type != pa.int32():
        st = st.cast(pa.int32())
    lo, hi = arrow.min_max(st)
    span = hi - lo + 2  # code hi - lo + 1: NULL
    key = np.subtract(_values(st), _wrap(lo), dtype=_I64, casting="unsafe")
    if st.null_count:
        key[~_valid(st)] = hi - lo + 1
    if len(pds) > 1:
        key += np.multiply(np.take(lane_pd, codes), span, dtype=_I64)
    gcodes, _, kf = _dense(key, len(pds) * span, distinct=True)
    keys = [(*pds[pk], None if sk == hi - lo + 1 else lo + sk)
            for pk, sk in zip((kf // span).tolist(), (kf % span).tolist())]
    return keys, gcodes


def distinct_rows(tbl: pa.Table) -> tuple[np.ndarray, int]:
    """Exact deduplication of rows of integer columns: (code per row in 0..k-1, k; k = 0 for no
    rows). NULL is a value of its own. Codes are int32, in no particular order.

    The native pass (`_dedupe.c`: one pass over the rows, codes in order of first appearance)
    runs when it was built and CUPTIPROF_NATIVE is not 0; otherwise numpy: each varying column
    becomes small non-negative integers (value - min, or dictionary codes when its range is
    wide) and the columns combine into one mixed-radix key, which is exact; the key is then
    renumbered through a lookup table (small key spaces) or a hash. Two numpy passes per
    varying column: the minima are subtracted once, at the end (integer arithmetic wraps, so
    the result is exact whenever the final key fits). The key is int64 throughout: numpy
    indexes with intp, narrower keys are converted on every lookup. Constant and all-NULL
    columns cost nothing either way.
    """
    native = _native_distinct(tbl)
    if native is not None:
        return native
    n = tbl.num_rows
    key: np.ndarray | None = None
    radix = 1
    offset = 0  # sum of min * radix over the columns added after the first
    for col in tbl.columns:
        a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if not pa.types.is_integer(a.type):
            a = a.cast(pa.int64())
        nulls = a.null_count
        if nulls == n:
            continue
        lo, hi = arrow.min_max(a)
        if lo == hi and not nulls:
            continue
        span = hi - lo + 1 + (1 if nulls else 0)  # NULL takes the code hi - lo + 1
        if radix * span < _KEY_MAX:
            v, base = (_filled(a, _wrap(hi + 1)) if nulls else _values(a)), lo  # wraps: exact
        else:  # a wide range: dictionary codes instead (at most n + 1 of them)
            enc = a.dictionary_encode(null_encoding="encode")
            v, base = _values(enc.indices), 0
            span = len(enc.dictionary)
            if key is not None and radix * span >= _KEY_MAX:  # renumber the key so far first
                codes, radix = _dense(_wrap_sub(key, offset), radix)
                key, offset = codes.astype(np.int64), 0
        if key is None:
            key = np.subtract(v, _wrap(base), dtype=_I64, casting="unsafe")
        else:
            key += np.multiply(v, radix, dtype=_I64, casting="unsafe")
            offset += base * radix
        radix *= span
    if key is None:
        return np.zeros(n, np.int32), min(n, 1)
    return _dense(_wrap_sub(key, offset), radix)


_dedupe = load_extension("cuptiprof.store._dedupe", api=1)  # None: the numpy path does it all
# Arrow integer type id -> (itemsize, signed), as the native module takes columns
_INT_KINDS = {t.id: (t.bit_width // 8, pa.types.is_signed_integer(t))
              for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(),
                        pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())}


def _native_distinct(tbl: pa.Table, how: int = 0) -> tuple[np.ndarray, int] | None:
    """distinct_rows by the native module; None when it is missing, turned off
    (CUPTIPROF_NATIVE=0) or declines. Arrow chunks go in as they are (no concatenation);
    columns of other types are cast to int64 as on the numpy path. `how` (tests): 1 the exact
    way only, 2 ranges guessed from the first row (see _dedupe.c)."""
    if _dedupe is None or not extensions_enabled():
        return None
    n = tbl.num_rows
    cols = []
    for col in tbl.columns:
        kind = _INT_KINDS.get(col.type.id)
        if kind is None:
            col = col.cast(pa.int64())
            kind = (8, True)
        cols.append((*kind, [(b[1], b[0], a.offset, len(a), a.null_count)
                             for a in col.chunks for b in (a.buffers(),)]))
    codes = np.empty(n, np.int32)
    got = _dedupe.distinct(n, cols, codes, how)
    return None if got is None else (codes, got[0])


def _wrap(x: int) -> np.int64:
    """x as an int64, wrapped around (two's complement)."""
    return np.int64(((x + (1 << 63)) % (1 << 64)) - (1 << 63))


def _wrap_sub(key: np.ndarray, offset: int) -> np.ndarray:
    """key - offset in wrapping int64 arithmetic (in place)."""
    if offset:
        key -= _wrap(offset)
    return key


def _dense(key: np.ndarray, radix: int, distinct: bool = False):
    """Renumber the distinct values of a non-negative int64 key 0..k-1 (any order): (codes, k),
    and with `distinct` also the key value of each code."""
    if radix <= _LOOKUP_MAX:
        present = np.zeros(radix, bool)
        present[key] = True
        rank = np.cumsum(present, dtype=np.int32)
        rank -= 1
        out = np.take(rank, key), int(rank[-1]) + 1  # np.take: a tighter loop than rank[key]
        return (*out, np.flatnonzero(present)) if distinct else out
    enc = _int_array(key).dictionary_encode()
    out = _values(enc.indices), len(enc.dictionary)
    return (*out, _values(enc.dictionary)) if distinct else out


def _filled(col, value: int) -> np.ndarray:
    """An integer column as int64 numpy values with NULL replaced by `value` (pc.fill_null
    makes a pyarrow scalar, which imports pandas when installed)."""
    a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if a.null_count == len(a):
        return np.full(len(a), value, np.int64)
    v = _values(a).astype(np.int64)
    v[~_valid(a)] = value
    return v
