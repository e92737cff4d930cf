"""Arrow columns built straight from numpy buffers, never through `pa.array()`.

pyarrow's converter (pa.array, pa.scalar, Array.to_numpy) imports pandas on first use when
pandas is installed: 0.3-0.5 s, more than the rest of a typical import. The importers keep
columns as numpy arrays (plus a validity mask where values may be missing) and wrap them here.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

_NP = {pa.int8(): np.int8, pa.int32(): np.int32, pa.int64(): np.int64, pa.float64(): np.float64}


def ints(values: list) -> tuple[np.ndarray, np.ndarray | None]:
    """A list of ints (None for missing) -> int64 values and a validity mask (None: all valid).
    A number beyond 64 bits raises OverflowError."""
    try:
        return np.array(values, np.int64), None
    except TypeError:  # a None among them
        valid = np.array([v is not None for v in values], bool)
        return np.array([0 if v is None else v for v in values], np.int64), valid


def _bitmap(valid: np.ndarray | None):
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def array(values: np.ndarray, typ: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """Fixed-width numpy values -> Arrow array of `typ`; rows where `valid` is False are NULL.
    Values that do not fit `typ` raise ValueError instead of wrapping around."""
    values = np.asarray(values)
    n = len(values)
    if typ == pa.bool_():
        data = np.packbits(values.astype(bool), bitorder="little")
    else:
        want = _NP[typ]
        if values.dtype != want:
            if n and values.dtype.kind in "iu" and np.dtype(want).kind == "i":
                check = values if valid is None else values[valid]
                info = np.iinfo(want)
                if len(check) and (check.min() < info.min or check.max() > info.max):
                    bad = check[(check < info.min) | (check > info.max)][0]
                    raise ValueError(f"value {bad} does not fit a {typ} column")
            values = values.astype(want)
        data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(typ, n, [_bitmap(valid), pa.py_buffer(data)])


def strings(values: list) -> pa.Array:
    """A list of str (None for NULL) -> Arrow string array."""
    n = len(values)
    enc = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, enc), np.int64, n), out=offsets[1:])
    valid = np.fromiter((v is not None for v in values), bool, n) if None in values else None
    typ = pa.string() if offsets[-1] < (1 << 31) else pa.large_string()
    off = offsets.astype(np.int32) if typ == pa.string() else offsets
    return pa.Array.from_buffers(typ, n, [_bitmap(valid), pa.py_buffer(off),
                                          pa.py_buffer(b"".join(enc))])


def dictionary(codes, values: list) -> pa.DictionaryArray:
    """A string column as integer codes into `values`: no string per row."""
    return pa.DictionaryArray.from_arrays(array(np.asarray(codes), pa.int32()), strings(values))

