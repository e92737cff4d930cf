"""Launch configurations and lanes: the writer interns them into launch_configs and lanes, the
kernels view joins them back, appends and merges keep ids consistent, and the row deduplication
is exact."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cuptiprof.store import distinct as W
from cuptiprof.store.merge import merge_files
from cuptiprof.store.schema import LAUNCH_CONFIG
from cuptiprof.store.distinct import distinct_rows
from cuptiprof.store.writer import Writer
from _run_helpers import q as rows

CFG_COLS = ", ".join(LAUNCH_CONFIG)
KERNEL_COLS = "name_id, " + CFG_COLS  # what launch_configs holds per row

def kernels(n: int, seed: int = 0, graph: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 5, n)
    cols = {"start_ns": pa.array(np.arange(n, dtype=np.int64) * 10),
            "end_ns": pa.array(np.arange(n, dtype=np.int64) * 10 + 5),
            "name": pa.array([f"k{i % 3}" for i in range(n)]),
            "grid_x": pa.array((g * 64 + 1).astype(np.int32)),
            "grid_y": pa.array(np.ones(n, np.int32)),
            "block_x": pa.array(np.where(g % 2 == 0, 128, 256).astype(np.int32)),
            "registers": pa.array((g % 3 * 8 + 32).astype(np.int32), mask=g == 4),
            "static_smem": pa.array((g % 2 * 49152).astype(np.int32))}
    if graph:
        cols["graph_id"] = pa.array(np.full(n, 7, np.int64))
        cols["graph_node_id"] = pa.array((g + (1 << 40)).astype(np.int64))
    return cols


def expected(cols: dict) -> list[tuple]:
    """(start_ns, name, every config column) per row, as the kernels view must return them."""
    n = len(cols["start_ns"])
    vals = [cols[c].to_pylist() if c in cols else [None] * n for c in LAUNCH_CONFIG]
    return sorted(zip(cols["start_ns"].to_pylist(), cols["name"].to_pylist(), *vals),
                  key=lambda r: tuple((v is None, v or 0) for v in r))


def distinct_kernels(*batches: dict) -> int:
    """Distinct (name, launch configuration) combinations of the given batches."""
    return len({r[1:] for b in batches for r in expected(b)})


def test_kernels_view_returns_what_was_given_and_configs_are_stored_once(tmp_path):
    path = tmp_path / "a.duckdb"
    a, b = kernels(500, seed=1), kernels(300, seed=2, graph=True)
    b["start_ns"] = pa.array(np.arange(300, dtype=np.int64) * 10 + 100_000)
    with Writer(path) as w:
        w.append({"kernels": a})
        w.append({"kernels": b})
    got = rows(path, f"SELECT start_ns, name, {CFG_COLS} FROM kernels ORDER BY start_ns")
    assert got == expected(a) + expected(b)
    # Each (name, configuration) once: 3 names x 5 configurations, without and with graph ids.
    n = distinct_kernels(a, b)
    assert 20 <= n <= 30
    assert rows(path, f"SELECT count(*), count(DISTINCT config_id), count(DISTINCT ({KERNEL_COLS})) "
                      "FROM launch_configs") == [(n, n, n)]
    assert rows(path, "SELECT count(*) FROM kernel_rows WHERE config_id IS NULL") == [(0,)]
    cols = {c for (c,) in rows(path, "SELECT column_name FROM information_schema.columns "
                                      "WHERE table_name = 'kernel_rows'")}
    assert "config_id" in cols and not cols & (set(LAUNCH_CONFIG) | {"name_id"})


def test_no_config_given_or_all_null_keeps_the_name_and_nothing_leaves_config_id_null(tmp_path):
    path = tmp_path / "a.duckdb"
    with Writer(path) as w:
        w.append({"kernels": {"start_ns": [1, 2], "end_ns": [3, 4], "name": ["a", "b"]}})
        w.append({"kernels": {"start_ns": [5], "end_ns": [6], "name": ["a"],
                              "grid_x": pa.array([None], pa.int32())}})
        w.append({"kernels": {"start_ns": [7], "end_ns": [8], "name": pa.array([None], pa.string())}})
    assert rows(path, "SELECT count(*) FROM kernel_rows WHERE config_id IS NULL") == [(1,)]
    assert rows(path, "SELECT count(*) FROM launch_configs") == [(2,)]  # names a and b only
    assert rows(path, "SELECT start_ns, name, grid_x, block_x FROM kernels ORDER BY start_ns") == \
        [(1, "a", None, None), (2, "b", None, None), (5, "a", None, None), (7, None, None, None)]


def test_append_mode_reuses_ids_and_a_failed_batch_leaves_no_config(tmp_path):
    path = tmp_path / "a.duckdb"
    cols = kernels(200, seed=3)
    with Writer(path) as w:
        w.append({"kernels": cols})
        bad = dict(kernels(10, seed=4), grid_z=pa.array(np.full(10, 9, np.int32)), bogus=[0] * 10)
        with pytest.raises(ValueError, match="unknown columns"):
            w.append({"kernels": bad})
        with pytest.raises(Exception):  # a NOT-a-number end_ns fails inside the transaction
            w.append({"kernels": dict(kernels(10, seed=4), grid_z=pa.array(np.full(10, 9, np.int32)),
                                      end_ns=pa.array(["x"] * 10))})
        w.append({"kernels": dict(kernels(10, seed=4), grid_z=pa.array(np.full(10, 9, np.int32)))})
    with Writer(path, mode="append") as w:
        w.append({"kernels": cols})
    n_cfg = rows(path, "SELECT count(*) FROM launch_configs")[0][0]
    assert n_cfg == distinct_kernels(cols) + rows(
        path, "SELECT count(DISTINCT config_id) FROM kernel_rows k "
              "JOIN launch_configs USING (config_id) WHERE grid_z = 9")[0][0]
    assert rows(path, f"SELECT count(*) FROM (SELECT DISTINCT {KERNEL_COLS} FROM launch_configs)") == [(n_cfg,)]
    assert rows(path, "SELECT count(*) FROM kernels WHERE grid_z = 9") == [(10,)]
    by_run = rows(path, f"SELECT run_id, start_ns, name, {CFG_COLS} FROM kernels WHERE grid_z IS NULL "
                        "ORDER BY run_id, start_ns")
    assert [r[1:] for r in by_run if r[0] == 1] == [r[1:] for r in by_run if r[0] == 2] == expected(cols)


def test_merge_maps_config_ids_by_value(tmp_path):
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    ka, kb = kernels(100, seed=5), kernels(100, seed=6, graph=True)
    kb["start_ns"] = pa.array(np.arange(100, dtype=np.int64) * 10 + 100_000)
    with Writer(a) as w:
        w.append({"kernels": ka})
    with Writer(b) as w:
        w.append({"kernels": kb})
        w.append({"kernels": ka})
    out = merge_files([a, b], tmp_path / "m.duckdb")
    got = rows(out, f"SELECT run_id, start_ns, name, {CFG_COLS} FROM kernels")
    want = [(1,) + r for r in expected(ka)] + [(2,) + r for r in expected(ka) + expected(kb)]
    key = lambda r: tuple((v is None, v or 0) for v in r)  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    n = distinct_kernels(ka, kb)
    assert rows(out, f"SELECT count(*), count(DISTINCT ({KERNEL_COLS})) FROM launch_configs") == [(n, n)]


LANE_COLS = "run_id, pid, device_id, context_id, stream_id"


def lanes_batch(n: int, seed: int, pid: int | None = None) -> dict:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 4, n)
    cols = {"start_ns": pa.array(np.arange(n, dtype=np.int64) * 10 + seed * 1_000_000),
            "end_ns": pa.array(np.arange(n, dtype=np.int64) * 10 + seed * 1_000_000 + 5),
            "name": pa.array(["k"] * n),
            "device_id": pa.array((s % 2).astype(np.int32), mask=s == 3),
            "context_id": pa.array(np.ones(n, np.int32)),
            "stream_id": pa.array((s + 7).astype(np.int32))}
    if pid is not None:
        cols["pid"] = pa.array(np.full(n, pid, np.int32))
    return cols


def nulls_last(rs) -> list[tuple]:
    return sorted(rs, key=lambda r: tuple((v is None, v or 0) for v in r))


def lane_rows(cols: dict, run: int, pid: int) -> list[tuple]:
    n = len(cols["start_ns"])
    pids = cols["pid"].to_pylist() if "pid" in cols else [pid] * n
    return list(zip([run] * n, pids, cols["device_id"].to_pylist(), cols["context_id"].to_pylist(),
                      cols["stream_id"].to_pylist(), cols["start_ns"].to_pylist()))


def test_lanes_are_interned_once_and_the_view_gives_every_row_back(tmp_path):
    path = tmp_path / "a.duckdb"
    a, b = lanes_batch(400, seed=1), lanes_batch(300, seed=2, pid=4242)
    with Writer(path, pid=77) as w:
        w.append({"kernels": a})
        w.append({"kernels": b})
        w.append({"kernels": {"start_ns": [5], "end_ns": [9], "name": ["z"]}})  # no lane columns
    got = rows(path, f"SELECT {LANE_COLS}, start_ns FROM kernels WHERE name <> 'z'")
    assert nulls_last(got) == nulls_last(lane_rows(a, 1, 77) + lane_rows(b, 1, 4242))
    assert rows(path, f"SELECT {LANE_COLS} FROM kernels WHERE name = 'z'") == [(1, 77, None, None, None)]
    # 4 device/stream combinations per pid, plus the row without lane columns; none repeated.
    assert rows(path, f"SELECT count(*), count(DISTINCT ({LANE_COLS})) FROM lanes") == [(9, 9)]
    cols = {c for (c,) in rows(path, "SELECT column_name FROM information_schema.columns "
                                      "WHERE table_name = 'kernel_rows'")}
    assert "lane_id" in cols and not cols & {"run_id", "pid", "device_id", "stream_id"}


def test_lanes_of_a_failed_batch_are_forgotten_and_merge_maps_them(tmp_path):
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    ka, kb = lanes_batch(100, seed=3), lanes_batch(100, seed=4)
    with Writer(a, pid=1) as w:
        w.append({"kernels": ka})
        with pytest.raises(Exception):  # fails inside the transaction, after lanes were interned
            w.append({"kernels": dict(lanes_batch(10, seed=5, pid=999), end_ns=pa.array(["x"] * 10))})
        assert all(k[1] != 999 for k in w._combos["lanes"])
    with Writer(b, pid=2) as w:
        w.append({"kernels": kb})
    with Writer(b, mode="append", pid=2) as w:  # a second run: same places, new lanes
        w.append({"kernels": ka})
    assert rows(b, "SELECT count(*), count(DISTINCT run_id) FROM lanes") == [(8, 2)]
    assert rows(a, "SELECT count(*) FROM lanes WHERE pid = 999") == [(0,)]
    out = merge_files([a, b], tmp_path / "m.duckdb")
    got = rows(out, f"SELECT {LANE_COLS}, start_ns FROM kernels")
    assert nulls_last(got) == nulls_last(lane_rows(ka, 1, 1) + lane_rows(kb, 2, 2) + lane_rows(ka, 3, 2))
    assert rows(out, f"SELECT count(*), count(DISTINCT ({LANE_COLS})) FROM lanes") == [(12, 12)]


@pytest.mark.parametrize("native", ["1", "0"])
def test_distinct_rows_is_exact(native, monkeypatch):
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(1, 2000))
        cols = {}
        for j in range(int(rng.integers(1, 6))):
            kind = int(rng.integers(0, 6))
            if kind == 0:
                v = pa.array(rng.integers(0, 4, n + 1).astype(np.int32))
            elif kind == 1:   # full int32 range, NULLs
                v = pa.array(rng.integers(-2**31, 2**31 - 1, n + 1).astype(np.int32),
                             mask=rng.random(n + 1) < 0.3)
            elif kind == 2:   # ranges too wide for a mixed-radix key
                v = pa.array(rng.integers(-2**62, 2**62, n + 1).astype(np.int64))
            elif kind == 3:
                v = pa.nulls(n + 1, pa.int64())
            elif kind == 4:
                v = pa.array(np.full(n + 1, 7, np.int32))
            else:
                v = pa.array(rng.integers(0, 3, n + 1).astype(np.int64), mask=rng.random(n + 1) < 0.5)
            cols[f"c{j}"] = v.slice(1) if rng.random() < 0.5 else v.slice(0, n)  # offsets too
        tbl = pa.table(cols)
        codes, k = distinct_rows(tbl)
        seen: dict[tuple, int] = {}
        for r, c in zip(zip(*(c.to_pylist() for c in tbl.columns)), codes.tolist()):
            assert seen.setdefault(r, c) == c
        assert len(seen) == k == len(set(seen.values()))
        assert codes.min() >= 0 and codes.max() < k


# -- the native deduplication (cuptiprof/store/_dedupe.c) against the numpy path ---------------

def test_the_dedupe_extension_is_built():
    """CI has a compiler and Python headers: a missing extension is a failed build, not a
    silent fallback to the numpy path."""
    from cuptiprof.store import _dedupe
    assert _dedupe.API == 1
    before = sum(v for k, v in _dedupe.stats().items() if k not in ("fell_back", "widened"))
    distinct_rows(pa.table({"a": pa.array([1, 2, 1], pa.int32())}))
    assert sum(v for k, v in _dedupe.stats().items() if k not in ("fell_back", "widened")) == before + 1


INT_TYPES = [pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.int32(), pa.uint32(), pa.int64(),
             pa.uint64()]


def numpy_rows(tbl: pa.Table, monkeypatch) -> tuple[np.ndarray, int]:
    with monkeypatch.context() as m:
        m.setenv("CUPTIPROF_NATIVE", "0")
        return distinct_rows(tbl)


def assert_agree(tbl: pa.Table, monkeypatch) -> None:
    """The native codes, every way (as it comes, exact only, ranges guessed from one row), and
    the numpy codes: the same partition of the rows, the same k; native codes numbered in order
    of first appearance."""
    want, k = numpy_rows(tbl, monkeypatch)
    assert len(want) == tbl.num_rows and (tbl.num_rows == 0) == (k == 0)
    for how in (0, 1, 2):
        codes, got_k = W._native_distinct(tbl, how)
        assert codes.dtype == np.int32 and len(codes) == tbl.num_rows
        assert got_k == k, (how, got_k, k)
        if k:
            pairs = np.unique(np.stack([codes.astype(np.int64), want.astype(np.int64)]), axis=1)
            assert pairs.shape[1] == k  # a one-to-one map between the two numberings
            first = np.unique(codes, return_index=True)[1]  # each code's first row, by code
            assert first[0] == 0 and (np.diff(first) > 0).all()


def random_column(rng, n: int, typ: pa.DataType) -> pa.Array | pa.ChunkedArray:
    dt = np.dtype(typ.to_pandas_dtype())
    info = np.iinfo(dt)
    kind = int(rng.integers(0, 8))
    if kind == 0:    # a few small values
        v = rng.integers(0, 4, n + 2).astype(dt)
    elif kind == 1:  # the type's whole range: extremes, k ~ n
        v = rng.integers(info.min, info.max, n + 2, dtype=dt, endpoint=True)
    elif kind == 2:  # constant at an extreme
        v = np.full(n + 2, info.max if rng.random() < 0.5 else info.min, dt)
    elif kind == 3:  # rare values far away (missed by any sample)
        v = np.full(n + 2, 3, dt)
        v[rng.integers(0, n + 2, 3)] = info.max if rng.random() < 0.5 else info.min
    elif kind == 4:  # as many distinct values as rows
        v = (np.arange(n + 2) % max(1, min(n, int(info.max)))).astype(dt)
    elif kind == 5:  # ids that grow along the rows
        v = (np.arange(n + 2) * min(int(info.max), 200) // (n + 2) + 100 % int(info.max)).astype(dt)
    elif kind == 6:  # spread-out values
        v = (rng.integers(0, 100, n + 2) * (int(info.max) // 100)).astype(dt)
    else:
        v = rng.integers(0, 3, n + 2).astype(dt)
    p_null = float(rng.choice([0, 0, 0.001, 0.3, 1.0]))
    mask = rng.random(n + 2) < p_null if p_null else None
    a = pa.array(v, type=typ, mask=mask).slice(int(rng.integers(0, 3)), n)  # offsets too
    if n > 3 and rng.random() < 0.5:  # chunked, boundaries differing between columns
        cuts = sorted({0, n, *(int(x) for x in rng.integers(0, n, int(rng.integers(1, 6))))})
        return pa.chunked_array([a.slice(c0, c1 - c0) for c0, c1 in zip(cuts, cuts[1:])], typ)
    return a


def test_native_and_numpy_agree_on_random_tables(monkeypatch):
    rng = np.random.default_rng(1)
    for _ in range(80):
        n = int(rng.choice([0, 1, 2, 7, 1000, 5000, 20000, 60000]))
        cols = {f"c{j}": random_column(rng, n, INT_TYPES[int(rng.integers(0, len(INT_TYPES)))])
                for j in range(int(rng.integers(1, 7)))}
        assert_agree(pa.table(cols), monkeypatch)


def test_native_and_numpy_agree_on_special_tables(monkeypatch):
    n = 50_000
    rng = np.random.default_rng(2)
    i64 = np.iinfo(np.int64)
    ext = np.where(rng.random(n) < 0.5, i64.min, i64.max)
    tables = [
        # empty: no rows, no chunks
        pa.table({"a": pa.chunked_array([], pa.int32()), "b": pa.chunked_array([], pa.int64())}),
        pa.table({"a": pa.array([], pa.int32())}),
        # constant and all-NULL columns only (k = 1)
        pa.table({"a": pa.array(np.full(n, 5, np.int32)), "b": pa.nulls(n, pa.int64()),
                  "c": pa.nulls(n)}),
        # int64 extremes with NULLs, next to a small column
        pa.table({"a": pa.array(ext, mask=rng.random(n) < 0.1),
                  "b": pa.array(rng.integers(0, 3, n).astype(np.int32))}),
        # every row distinct, values wide apart (no 63-bit key: rows compared value by value)
        pa.table({"a": pa.array(rng.integers(i64.min, i64.max, n)),
                  "b": pa.array(rng.integers(i64.min, i64.max, n))}),
        # every row distinct, narrow (k = n)
        pa.table({"a": pa.array(np.arange(n, dtype=np.int32)[::-1].copy())}),
        # new values late in the rows (guessed ranges widened or given up)
        pa.table({"a": pa.array(np.where(np.arange(n) < n - 10, 1, np.arange(n) * 1000).astype(np.int32)),
                  "b": pa.array(np.where(np.arange(n) % 9999 == 1, -7, 0).astype(np.int16))}),
        pa.table({"a": pa.array(np.where(np.arange(n) < n - 10, 1, 1 << 40).astype(np.int64))}),
        # other types go through int64, as on the numpy path
        pa.table({"a": pa.array(rng.random(n) < 0.5), "b": pa.array(rng.integers(0, 9, n))}),
        # 64 varying columns, the most the native pass takes
        pa.table({f"c{j}": pa.array(rng.integers(0, 2, n).astype(np.int8)) for j in range(64)}),
    ]
    for tbl in tables:
        assert_agree(tbl, monkeypatch)
    # more varying columns than that, and no 63-bit key: the numpy path takes them
    many = pa.table({f"c{j}": pa.array(rng.integers(0, 2, n).astype(np.int8)) for j in range(70)})
    assert W._native_distinct(many) is None
    codes, k = distinct_rows(many)
    want, want_k = numpy_rows(many, monkeypatch)
    assert k == want_k and (codes == want).all()


def edge_column(rng, n: int, typ: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """n values of typ: the type's ends, or values of some bit width around an offset (ranges
    that just fit or just miss a window of the native guess), with NULLs, offsets and chunks."""
    info = np.iinfo(np.dtype(typ.to_pandas_dtype()))
    if rng.random() < 0.2:  # ids that grow along the rows: past each widened window
        at, step = int(rng.integers(0, 1000)), int(rng.choice([1, 3, 100]))
        v = [min(at + i * step, int(info.max)) for i in range(n + 2)]
    elif rng.random() < 0.3:
        pool = [info.min, info.min + 1, info.max - 1, info.max, 0, 1]
        v = [int(x) for x in rng.choice(np.array(pool, info.dtype), n + 2)]
    else:
        width = int(rng.choice([0, 1, 3, 8, 9, 13, 20, 31, 33, 62]))
        at = int(info.min) + int(rng.random() * (int(info.max) - int(info.min)))
        v = [min(max(at + int(x), int(info.min)), int(info.max))
             for x in rng.integers(0, 2 ** min(width, 62), n + 2)]
    p_null = float(rng.choice([0, 0, 0.2, 1.0]))
    mask = rng.random(n + 2) < p_null if p_null else None
    a = pa.array(v, type=typ, mask=mask)
    a = a.slice(int(rng.integers(0, 3)), n)
    if n > 3 and rng.random() < 0.5:
        cuts = sorted({0, n, *(int(x) for x in rng.integers(0, n, int(rng.integers(1, 4))))})
        own = rng.random() < 0.5  # chunks in buffers of their own, not slices of one
        return pa.chunked_array([a.slice(c0, c1 - c0).take(np.arange(c1 - c0)) if own
                                 else a.slice(c0, c1 - c0) for c0, c1 in zip(cuts, cuts[1:])], typ)
    return a


def test_native_codes_are_the_rows_numbered_in_order_of_first_appearance(monkeypatch):
    """Against a plain dict of the rows: the native codes, every way (as it comes, exact only,
    guessed from the first row), are exactly the first-appearance numbering; the numpy codes
    the same partition. Sizes around the block and the guess threshold."""
    if W._dedupe is None:
        pytest.skip("the dedupe extension is not built")
    monkeypatch.delenv("CUPTIPROF_NATIVE", raising=False)
    rng = np.random.default_rng(7)
    for _ in range(150):
        n = int(rng.choice([0, 1, 2, 3, 17, 300, 2047, 2049, 4096, 7000]))
        tbl = pa.table({f"c{j}": edge_column(rng, n, INT_TYPES[int(rng.integers(0, 8))])
                        for j in range(int(rng.integers(1, 5)))})
        seen: dict[tuple, int] = {}
        want = [seen.setdefault(r, len(seen)) for r in zip(*(c.to_pylist() for c in tbl.columns))]
        for how in (0, 1, 2):
            codes, k = W._native_distinct(tbl, how)
            assert (codes.tolist(), k) == (want, len(seen)), how
        codes, k = numpy_rows(tbl, monkeypatch)
        assert k == len(seen) and len(set(zip(codes.tolist(), want))) == k
    # An id that grows past every window guessed from the first row: each block is widened,
    # its values checked against the window (not against one twice its size).
    n = 20_000
    tbl = pa.table({"a": pa.array(np.arange(n, dtype=np.int32)),
                    "b": pa.array(rng.integers(0, 4, n).astype(np.int8))})
    seen = {}
    want = [seen.setdefault(r, len(seen)) for r in zip(*(c.to_pylist() for c in tbl.columns))]
    for how in (0, 1, 2):
        assert W._native_distinct(tbl, how)[0].tolist() == want, how


def test_native_distinct_checks_what_it_is_given():
    """Chunks that do not hold n rows, buffers shorter than their chunk: an error, not a read
    past the end."""
    ded = pytest.importorskip("cuptiprof.store._dedupe")
    vals, codes = np.array([5, 6, 5], np.int32), np.empty(3, np.int32)
    k, reps = ded.distinct(3, [(4, True, [(vals, None, 0, 3, 0)])], codes)
    assert (k, np.frombuffer(reps, np.int64).tolist(), codes.tolist()) == (2, [0, 1], [0, 1, 0])
    bad = {"n rows": [(vals, None, 0, 2, 0)], "shorter": [(vals, None, 1, 3, 0)],
           "bitmap": [(vals, None, 0, 3, 1)]}
    for match, chunks in bad.items():
        with pytest.raises(ValueError, match=match):
            ded.distinct(3, [(4, True, chunks)], codes)
    with pytest.raises(ValueError, match="shorter"):  # a bitmap of 3 bits from bit 7: 2 bytes
        ded.distinct(3, [(4, True, [(np.zeros(10, np.int32), b"\xff", 7, 3, 1)])], codes)
    with pytest.raises(ValueError, match="codes"):
        ded.distinct(3, [(4, True, [(vals, None, 0, 3, 0)])], np.empty(2, np.int32))


def test_cuptiprof_native_0_takes_the_numpy_path_for_distinct_rows(monkeypatch):
    if W._dedupe is None:
        pytest.skip("the dedupe extension is not built")
    tbl = pa.table({"a": pa.array([1, 2, 1], pa.int32())})
    monkeypatch.setenv("CUPTIPROF_NATIVE", "0")
    before = W._dedupe.stats()
    codes, k = distinct_rows(tbl)
    assert W._native_distinct(tbl) is None and W._dedupe.stats() == before
    assert k == 2 and codes[0] == codes[2] != codes[1]


def test_native_guesses_are_widened_and_given_up_on(monkeypatch):
    from cuptiprof.store import _dedupe
    n = 200_000
    rows_ = np.arange(n)
    before = _dedupe.stats()
    # one kernel name that only turns up late: outside every window the sample suggested
    late = pa.table({"name_id": pa.array(np.where(rows_ == n - 5, 5000, rows_ % 30).astype(np.int32)),
                     "grid_x": pa.array(np.where(rows_ == 3 * n // 4, 7, 1).astype(np.int32))})
    assert_agree(late, monkeypatch)
    mid = _dedupe.stats()
    assert mid["widened"] > before["widened"]
    # a range too wide for a window: the exact way after the guess
    wide = pa.table({"a": pa.array(np.where(rows_ == n - 5, 1 << 50, rows_ % 3))})
    assert_agree(wide, monkeypatch)
    assert _dedupe.stats()["fell_back"] > mid["fell_back"]


def test_values_of_a_sliced_array_are_its_own():
    """A slice of an Arrow array starts `offset` elements (not bytes) into its buffer."""
    from cuptiprof.store.distinct import _filled, _values
    for typ in (pa.int32(), pa.int64(), pa.uint64()):
        a = pa.array(list(range(10)), typ).slice(3, 4)
        assert _values(a).tolist() == [3, 4, 5, 6]
    b = pa.array([0, 1, None, 3, 4], pa.int64()).slice(1, 3)
    assert _filled(b, -1).tolist() == [1, -1, 3]


@pytest.mark.parametrize("native", ["1", "0"])
def test_ids_are_numbered_in_order_of_first_appearance(tmp_path, monkeypatch, native):
    """Config and lane ids follow the rows' order, whichever deduplication numbered the codes,
    so a file is the same with and without the native parts."""
    monkeypatch.setenv("CUPTIPROF_NATIVE", native)
    rng = np.random.default_rng(5)
    n = 6000
    grid = rng.choice([7, 300, 12, 5000, 64], n).astype(np.int32)   # not in value order
    stream = rng.choice([40, 3, 17], n).astype(np.int32)
    batch = {"start_ns": np.arange(n, dtype=np.int64) * 10, "name": ["k"] * n,
             "end_ns": np.arange(n, dtype=np.int64) * 10 + 5, "grid_x": grid,
             "device_id": np.zeros(n, np.int32), "stream_id": stream}
    path = tmp_path / "a.duckdb"
    with Writer(path, pid=7) as w:
        w.append({"kernels": batch})
    for col in ("config_id", "lane_id"):
        firsts = rows(path, f"SELECT {col}, min(start_ns) FROM kernel_rows GROUP BY {col} "
                            f"ORDER BY {col}")
        assert [c for c, _ in firsts] == list(range(1, len(firsts) + 1))
        assert [t for _, t in firsts] == sorted(t for _, t in firsts), col
