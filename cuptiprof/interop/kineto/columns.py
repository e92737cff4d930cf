"""The columns a file's rows are kept in until it ends (_Cols: numpy arrays appended piece
by piece), and the Arrow arrays they become (names as dictionaries, -1 as NULL)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from cuptiprof.store import arrow as AC


class _Cols:
    """numpy columns appended piece by piece, concatenated at the end. A nullable column `k`
    keeps its validity mask under `k?`."""

    def __init__(self):
        self.parts: dict[str, list] = {}

    def add(self, **cols):
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(v)

    def add_col(self, k: str, values: np.ndarray, ok: np.ndarray) -> None:
        self.add(**{k: values, k + "?": ok})

    def get(self, k, dtype=np.int64):
        p = self.parts.get(k)
        if not p:
            return np.zeros(0, dtype)
        if len(p) > 1:  # joined once: the pieces go, and later gets cost nothing
            p[:] = [np.concatenate(p)]
        return p[0]

    def subset(self, keep: np.ndarray) -> "_Cols":
        """The rows where `keep` holds, every column."""
        out = _Cols()
        for k in list(self.parts):
            out.parts[k] = [self.get(k)[keep]]
        return out

    def put(self, k: str, values: np.ndarray) -> None:
        """Replace column `k`."""
        self.parts[k] = [values]

    def keys(self) -> set:
        """The columns, less "proc" (which process of the trace a row is: read by _split)."""
        return set(self.parts) - {"proc"}

    def extend(self, other: "_Cols") -> None:
        """Append `other`'s rows (the same columns, unless either holds no row); "proc" goes."""
        if not len(other):
            return
        if not len(self):
            self.parts = {k: list(v) for k, v in other.parts.items() if k != "proc"}
            return
        if self.keys() != other.keys():
            raise RuntimeError("kineto import: rows of two traces with other columns")
        self.parts = {k: self.parts[k] + other.parts[k] for k in self.keys()}

    def arrow(self, k, typ) -> pa.Array:
        """A nullable column as one Arrow array."""
        return AC.array(self.get(k), typ, self.get(k + "?", bool))

    def __len__(self):
        p = next(iter(self.parts.values()), None)
        return sum(len(x) for x in p) if p else 0


def _same(x):
    return x


def _per_name(ids: np.ndarray, names: list, fn) -> tuple[np.ndarray, list]:
    """Apply `fn` once per distinct name id; codes into the distinct results. (Also keeps a
    table's dictionary to the names it uses: the writer interns every dictionary value.)"""
    uniq, inv = _dense_unique(ids, len(names))
    return inv, [fn(names[u] if u >= 0 else None) for u in uniq.tolist()]   # -1: no name


def _dense_unique(ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(ids, return_inverse=True) for ids in -1..size-1 (names, categories): marks
    and a running count instead of a sort (a few ms per table of a large trace)."""
    seen = np.zeros(size + 1, bool)
    seen[ids + 1] = True
    code = np.cumsum(seen, dtype=np.int32) - 1
    return np.flatnonzero(seen) - 1, code[ids + 1]


def _names(ids: np.ndarray, names: list) -> pa.DictionaryArray:
    """Names by id; an event without one (null or absent: id -1) has none (NULL)."""
    inv, values = _per_name(ids, names, _same)
    if None not in values:
        return AC.dictionary(inv, values)
    none = values.index(None)
    return pa.DictionaryArray.from_arrays(AC.array(np.where(inv == none, 0, inv), pa.int32(),
                                                   inv != none), AC.strings(values))


# Steps are numbered from STEP0 while a trace is read (step N is STEP0 + N), so that every
# step a 32-bit column holds is a number >= 0, a step below 0 too (warm-up steps numbered -2,
# -1 by the program), and -1 stays "no step"; _step_col numbers them back as written.
STEP0 = 1 << 31


def _step_arg(cols: "_Cols", lo: int = 0, hi: int | None = None) -> np.ndarray:
    """The "cuptiprof step" arg of each row (of rows lo:hi), from STEP0, -1 where absent: a
    value no step column holds (beyond 32 bits, from another writer or an edit) is taken as
    absent, not a failed import."""
    v = cols.get("xstep")[lo:hi]
    return np.where(cols.get("xstep?", bool)[lo:hi] & (v >= -2**31) & (v < 2**31), v + STEP0, -1)


def _step_col(v) -> pa.Array:
    """Steps numbered from STEP0 (-1: none) as the step column (NULL for none)."""
    v = np.asarray(v)
    ok = v >= 0
    return AC.array(np.where(ok, v - STEP0, 0), pa.int32(), ok)


def _int32(v: np.ndarray, ok: np.ndarray) -> pa.Array:
    """Args as an INTEGER column (NULL where absent or beyond 32 bits)."""
    return AC.array(v, pa.int32(), ok & (v >= -2**31) & (v < 2**31))


def _opt(ix) -> pa.Array:
    """Row index -> 1-based id; -1 -> NULL."""
    ix = np.asarray(ix)
    return AC.array(ix + 1, pa.int64(), ix >= 0)


def _null_neg(v, typ) -> pa.Array:
    v = np.asarray(v)
    return AC.array(v, typ, v >= 0)
