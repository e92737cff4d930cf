"""Arrow arrays built from buffers, never through `pa.array()`.

`pa.array()` (and `pa.table()` of lists or numpy arrays, which calls it) imports pandas on its
first call when pandas is installed: 0.6 s and ~33 MB in a process cuptiprof profiles, landing
between two of the program's steps. Everything that runs inside a profiled process (the
collector, the recorder, the writer) builds its arrays here instead.

    array(np.arange(3), pa.int32())                 # numeric numpy, cast like numpy's astype
    array([1, None, 3], pa.int64())                 # Python values, None = NULL
    array(["a", None], pa.string())
    array(values, mask=values < 0)                  # mask True = NULL, as in pa.array
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pyarrow as pa

_NUMERIC = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
            pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32,
            pa.uint64(): np.uint64, pa.float32(): np.float32, pa.float64(): np.float64}
_FROM_NUMPY = {np.dtype(v): k for k, v in _NUMERIC.items()}


def _bitmap(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _numeric(values: np.ndarray, typ: pa.DataType | None, valid: np.ndarray | None) -> pa.Array:
    if typ is None:
        typ = _FROM_NUMPY.get(values.dtype) if values.dtype != np.bool_ else pa.bool_()
        if typ is None:
            raise TypeError(f"no Arrow type for numpy {values.dtype}")
    if typ == pa.bool_():
        data = pa.py_buffer(np.packbits(values.astype(bool, copy=False), bitorder="little"))
    else:
        if typ not in _NUMERIC:
            raise TypeError(f"arrays of {typ} are not built here")
        values = np.ascontiguousarray(values, dtype=_NUMERIC[typ])
        if valid is not None and not valid.all():
            values = np.where(valid, values, 0)   # NULL slots hold 0, as pa.array writes them
        data = pa.py_buffer(values)
    return pa.Array.from_buffers(typ, len(values), [_bitmap(valid), data])


def _strings(values: list, typ: pa.DataType) -> pa.Array:
    valid = np.fromiter((v is not None for v in values), bool, len(values))
    parts = [v.encode("utf-8") if v is not None else b"" for v in values]
    ends = np.fromiter((len(p) for p in parts), np.int64, len(parts)).cumsum()
    big = typ == pa.large_string() or (len(ends) and ends[-1] >= 2 ** 31)
    if big and typ == pa.string():
        raise OverflowError("more than 2 GiB of text in one string array")
    offsets = np.zeros(len(parts) + 1, np.int64 if big else np.int32)
    offsets[1:] = ends
    return pa.Array.from_buffers(typ, len(parts), [_bitmap(valid), pa.py_buffer(offsets),
                                                   pa.py_buffer(b"".join(parts))])


def array(values: Any, type: pa.DataType | None = None,  # noqa: A002 - pa.array's name
          mask: np.ndarray | None = None) -> pa.Array:
    """pa.array() without pandas: an Arrow array of `values` (numpy array, Arrow array or
    Python sequence) of `type` (inferred when None: from the numpy dtype, or from the first
    non-None Python value). `mask`: True where the value is NULL."""
    typ = type
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if typ is None or values.type == typ else values.cast(typ)
    valid = None if mask is None else ~np.asarray(mask, bool)
    if isinstance(values, np.ndarray) and values.dtype != object:
        if values.dtype.kind in "US":
            return _with_mask(_strings(values.tolist(), typ or pa.string()), valid)
        return _numeric(values, typ, valid)
    values = list(values) if not isinstance(values, list) else values
    if typ is None:
        first = next((v for v in values if v is not None), None)
        typ = (pa.string() if isinstance(first, str) else pa.bool_() if isinstance(first, (bool, np.bool_))
               else pa.float64() if isinstance(first, (float, np.floating)) else pa.int64())
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return _with_mask(_strings(values, typ), valid)
    nulls = np.fromiter((v is None for v in values), bool, len(values))
    if nulls.any():
        valid = ~nulls if valid is None else valid & ~nulls
        zero = False if typ == pa.bool_() else 0
        values = [zero if v is None else v for v in values]
    if typ == pa.bool_():
        return _numeric(np.array(values, bool), typ, valid)
    dtype = _NUMERIC.get(typ)
    if dtype is None:
        raise TypeError(f"arrays of {typ} are not built here")
    # Python ints beyond the type raise OverflowError here, as pa.array does.
    return _numeric(np.array(values, dtype=dtype), typ, valid)


def _with_mask(a: pa.Array, ok: np.ndarray | None) -> pa.Array:
    if ok is None or ok.all():
        return a
    both = ok if a.null_count == 0 else ok & valid(a)
    return pa.Array.from_buffers(a.type, len(a), [_bitmap(both)] + a.buffers()[1:])


def valid(a: pa.Array) -> np.ndarray:
    """Where an Arrow array is not NULL, as numpy bools, from its validity bitmap (pyarrow's
    own conversions to numpy import pandas)."""
    n = len(a)
    if not a.null_count:
        return np.ones(n, bool)
    if a.null_count == n:
        return np.zeros(n, bool)
    bits = np.unpackbits(np.frombuffer(a.buffers()[0], np.uint8), bitorder="little")
    return bits[a.offset:a.offset + n].view(bool)


def values(a: pa.Array) -> np.ndarray:
    """The value buffer of an integer Arrow array as numpy, without a copy (NULL slots hold
    whatever the buffer has); Array.to_numpy() imports pandas."""
    dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(a.type) else 'u'}{a.type.bit_width // 8}")
    return np.frombuffer(a.buffers()[1], dtype, len(a), a.offset * dtype.itemsize)  # bytes


def table(columns: dict[str, Any]) -> pa.Table:
    """pa.table() over `array()` columns."""
    return pa.table({k: array(v) for k, v in columns.items()})


def dictionary(codes: Iterable, names: Iterable[str | None]) -> pa.DictionaryArray:
    """Dictionary-encoded strings: int32 codes into `names`."""
    return pa.DictionaryArray.from_arrays(array(np.asarray(codes, np.int32)),
                                          array(list(names), pa.string()))
