"""Arrow arrays built straight from numpy buffers, never through `pa.array()`.

pyarrow's converters (`pa.array()`, `pa.table()` of lists or numpy arrays, `Array.to_numpy()`)
import pandas on first use when pandas is installed (`bench/child_footprint.py`: 33 MB more in a
profiled process and 0.28 s more in its 20-step loop). In a process cuptiprof profiles that
lands between two of the program's steps. The collector, the recorder, the writer, the merge and
the importers build their arrays here instead.

    array(np.arange(3), pa.int32())                 # numeric numpy; narrowing is range-checked
    array(values, pa.int64(), ok)                   # ok: False where the value is NULL
    array(values, mask=values < 0)                  # mask: True where NULL, as in pa.array
    array([1, None, 3], pa.int64())                 # Python values, None = NULL
    array(["a", None])                              # strings
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

_NUMERIC = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
            pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32,
            pa.uint64(): np.uint64, pa.float32(): np.float32, pa.float64(): np.float64}
_FROM_NUMPY = {np.dtype(v): k for k, v in _NUMERIC.items()}


def ints(values: list) -> tuple[np.ndarray, np.ndarray | None]:
    """A list of ints (None for missing) -> int64 values and a validity mask (None: all valid).
    A number beyond 64 bits raises OverflowError."""
    try:
        return np.array(values, np.int64), None
    except TypeError:  # a None among them
        ok = np.array([v is not None for v in values], bool)
        return np.array([0 if v is None else v for v in values], np.int64), ok


def distinct(values) -> np.ndarray:
    """np.unique(values), sorted, without numpy.ma: plain np.unique imports it (20-30 ms, once
    per process) to check for a masked array; asking for the indices skips that check."""
    return np.unique(values, return_index=True)[0]


def _bitmap(ok: np.ndarray | None) -> pa.Buffer | None:
    if ok is None or ok.all():
        return None
    return pa.py_buffer(np.packbits(ok, bitorder="little"))


def _numeric(values: np.ndarray, typ: pa.DataType | None, ok: np.ndarray | None) -> pa.Array:
    """Fixed-width numpy values -> Arrow array of `typ`; rows where `ok` is False are NULL.
    Integers that do not fit a narrower integer `typ` raise ValueError instead of wrapping."""
    n = len(values)
    if typ is None:
        typ = pa.bool_() if values.dtype == np.bool_ else _FROM_NUMPY.get(values.dtype)
        if typ is None:
            raise TypeError(f"no Arrow type for numpy {values.dtype}")
    if typ == pa.bool_():
        data = np.packbits(values.astype(bool, copy=False), bitorder="little")
        return pa.Array.from_buffers(typ, n, [_bitmap(ok), pa.py_buffer(data)])
    want = _NUMERIC.get(typ)
    if want is None:
        raise TypeError(f"arrays of {typ} are not built here")
    if values.dtype != want:
        if n and values.dtype.kind in "iu" and np.dtype(want).kind in "iu":
            check = values if ok is None else values[ok]
            info = np.iinfo(want)
            if len(check) and (check.min() < info.min or check.max() > info.max):
                bad = check[(check < info.min) | (check > info.max)][0]
                raise ValueError(f"value {bad} does not fit a {typ} column")
        values = values.astype(want)
    return pa.Array.from_buffers(typ, n, [_bitmap(ok), pa.py_buffer(np.ascontiguousarray(values))])


def _utf8(v: str) -> bytes:
    """UTF-8 of a str holding lone surrogates, which UTF-8 cannot hold: bytes that were no UTF-8
    (os.fsdecode's \\udcff) as \\xff, another surrogate as \\ud800."""
    try:
        return v.encode()
    except UnicodeEncodeError:
        pass
    try:
        return v.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace").encode()
    except UnicodeEncodeError:
        return v.encode("utf-8", "backslashreplace")


def strings(values: list) -> pa.Array:
    """A list of str (None for NULL) -> Arrow string array (large_string past 2 GiB of text)."""
    n = len(values)
    try:
        enc = [b"" if v is None else v.encode() for v in values]
    except UnicodeEncodeError:   # lone surrogates: a name made of bytes that are no UTF-8
        enc = [b"" if v is None else _utf8(v) for v in values]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, enc), np.int64, n), out=offsets[1:])
    ok = np.fromiter((v is not None for v in values), bool, n) if None in values else None
    typ = pa.string() if offsets[-1] < (1 << 31) else pa.large_string()
    off = offsets.astype(np.int32) if typ == pa.string() else offsets
    return pa.Array.from_buffers(typ, n, [_bitmap(ok), pa.py_buffer(off),
                                          pa.py_buffer(b"".join(enc))])


def dictionary(codes, values: list) -> pa.DictionaryArray:
    """A string column as integer codes into `values`: no string per row."""
    return pa.DictionaryArray.from_arrays(array(np.asarray(codes), pa.int32()), strings(values))


def array(values: Any, type: pa.DataType | None = None,  # noqa: A002 - pa.array's name
          ok: np.ndarray | None = None, *, mask: np.ndarray | None = None) -> pa.Array:
    """An Arrow array of `values` (numpy array, Arrow array or Python sequence) of `type`
    (inferred when None: from the numpy dtype, or from the first non-None Python value).
    `ok`: False where the value is NULL; `mask`: True where it is NULL (pa.array's)."""
    typ = type
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if typ is None or values.type == typ else values.cast(typ)
    if mask is not None:
        keep = ~np.asarray(mask, bool)
        ok = keep if ok is None else ok & keep
    if isinstance(values, np.ndarray) and values.dtype != object:
        if values.dtype.kind in "US":
            return _with_nulls(strings(values.tolist()), ok)
        return _numeric(values, typ, ok)
    values = list(values) if not isinstance(values, list) else values
    if typ is None:
        first = next((v for v in values if v is not None), None)
        typ = (pa.string() if isinstance(first, str) else pa.bool_() if isinstance(first, (bool, np.bool_))
               else pa.float64() if isinstance(first, (float, np.floating)) else pa.int64())
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return _with_nulls(strings(values), ok)
    if None in values:
        present = np.fromiter((v is not None for v in values), bool, len(values))
        ok = present if ok is None else ok & present
        zero = False if typ == pa.bool_() else 0
        values = [zero if v is None else v for v in values]
    if typ != pa.bool_() and typ not in _NUMERIC:
        raise TypeError(f"arrays of {typ} are not built here")
    # Python ints beyond the type raise OverflowError here, as pa.array does.
    return _numeric(np.array(values, dtype=bool if typ == pa.bool_() else _NUMERIC[typ]), typ, ok)


def _with_nulls(a: pa.Array, ok: np.ndarray | None) -> pa.Array:
    if ok is None or ok.all():
        return a
    both = ok if a.null_count == 0 else ok & valid(a)
    return pa.Array.from_buffers(a.type, len(a), [_bitmap(both)] + a.buffers()[1:])


def valid(a: pa.Array) -> np.ndarray:
    """Where an Arrow array is not NULL, as numpy bools, from its validity bitmap."""
    n = len(a)
    if not a.null_count:
        return np.ones(n, bool)
    if a.null_count == n:
        return np.zeros(n, bool)
    bits = np.unpackbits(np.frombuffer(a.buffers()[0], np.uint8), bitorder="little")
    return bits[a.offset:a.offset + n].view(bool)


@contextmanager
def malloc_pool() -> Iterator[None]:
    """Arrow's allocations from the C library's malloc while the block runs, then from the pool
    they came from before. pyarrow's default pool (mimalloc) pays for its first allocation in
    a process inside an import's last, single-threaded phase, and keeps ~8 MB more at the peak
    of an import of 54 MB of JSON (bench/import_knobs.py: fresh processes, side by side).
    Buffers keep the pool they were taken from."""
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def min_max(a: pa.Array) -> tuple[int, int]:
    """The least and greatest value of an integer Arrow array with a value that is not NULL,
    in numpy: pyarrow.compute's min_max would load that module (~25 ms of an import's start,
    `python -X importtime`) for two numbers."""
    v = values(a)
    if a.null_count:
        v = v[valid(a)]
    return int(v.min()), int(v.max())


def rows_as_lists(tbl: pa.Table, rows: np.ndarray) -> list[list]:
    """The given rows of a table, one Python list per column (None for NULL). Integer columns
    (the writer's) are read with numpy, which every import and merge has loaded already:
    Table.take's compute kernels are loaded on a process's first call (0.3-0.5 ms of CPU with
    libarrow's pages in memory, bench/import_knobs.py; more when they are not)."""
    out = []
    for col in tbl.columns:
        a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if a.null_count == len(a):
            out.append([None] * len(rows))
            continue
        if not pa.types.is_integer(a.type):   # any other type: Arrow's take (not on a hot path)
            out.append(a.take(array(np.asarray(rows, np.int64))).to_pylist())
            continue
        picked = values(a)[rows].tolist()
        if a.null_count:
            ok = valid(a)[rows].tolist()
            picked = [v if k else None for v, k in zip(picked, ok)]
        out.append(picked)
    return out


def values(a: pa.Array) -> np.ndarray:
    """The value buffer of an integer Arrow array as numpy, without a copy (NULL slots hold
    whatever the buffer has)."""
    dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(a.type) else 'u'}{a.type.bit_width // 8}")
    return np.frombuffer(a.buffers()[1], dtype, len(a), a.offset * dtype.itemsize)  # bytes
