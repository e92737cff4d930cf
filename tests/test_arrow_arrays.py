"""cuptiprof.store.arrow builds the same arrays as pa.array() without importing pandas, and a
profiled process (recorder, collector, writer) never imports pandas on its own."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from _run_helpers import ROOT, cli, q, script
from cuptiprof.store import arrow

CASES = [
    (np.arange(5, dtype=np.int64), None, None),
    (np.arange(5, dtype=np.int32), None, None),
    (np.array([3, -1, 7], np.int64), pa.int32(), None),
    (np.array([3, -1, 7], np.int64), None, np.array([False, True, False])),
    (np.array([3, -1, 7], np.int32), pa.int32(), np.array([True, True, True])),
    (np.array([1, 2], np.uint64), None, None),
    (np.array([1, 0, 1], np.int8), None, None),
    (np.array([1.5, np.nan, -2.0]), None, None),
    (np.array([True, False, True, True, False, False, True, True, False]), pa.bool_(), None),
    (np.array([True, False]), None, np.array([False, True])),
    (np.array(["a", "bc", ""]), None, None),
    (np.array([], np.int64), None, None),
    ([1, None, 3], pa.int64(), None),
    ([None], pa.int64(), None),
    ([None], pa.int32(), None),
    ([7], pa.int32(), None),
    ([2 ** 62, -2 ** 62], pa.int64(), None),
    ([1, 2, 3], None, None),
    ([1.5, None], None, None),
    ([True, None, False], pa.bool_(), None),
    (["x", None, "zß€", ""], pa.string(), None),
    (["op"] * 4, None, None),
    ([], pa.string(), None),
    ([], pa.int64(), None),
    (["a", "b", "c"], pa.string(), np.array([False, True, False])),
    ([np.int64(4), np.int32(5)], pa.int64(), None),
    (range(4), pa.int32(), None),
    ([None, "x"], None, None),                               # typed by the first value there is
    ([None, 2.5], None, None),
    (["a", None, "c"], None, np.array([True, False, False])),  # NULLs of both kinds
]


@pytest.mark.parametrize("values, typ, mask", CASES, ids=range(len(CASES)))
def test_same_array_as_pyarrow(values, typ, mask):
    want = pa.array(values if not isinstance(values, range) else list(values), typ, mask=mask)
    got = arrow.array(values, typ, mask=mask)
    assert got.type == want.type
    assert got.null_count == want.null_count
    if pa.types.is_floating(want.type):   # NaN == NaN here
        np.testing.assert_array_equal(got.to_numpy(zero_copy_only=False),
                                      want.to_numpy(zero_copy_only=False))
    else:
        assert got.equals(want), (got, want)
    got.validate(full=True)


def test_an_arrow_array_passes_through_or_is_cast():
    a = pa.array([1, 2], pa.int64())
    assert arrow.array(a) is a
    assert arrow.array(a, pa.int32()).type == pa.int32()


def test_out_of_range_python_ints_raise_like_pyarrow():
    with pytest.raises(OverflowError):
        arrow.array([2 ** 64], pa.int64())
    with pytest.raises((OverflowError, pa.ArrowInvalid)):
        pa.array([2 ** 64], pa.int64())


def test_dictionary():
    d = arrow.dictionary([0, 1, 0], ["p", None])
    assert d.to_pylist() == ["p", None, "p"]


# A stand-in pandas: says when it is imported, then is "not installed" (pyarrow tolerates that).
FAKE_PANDAS = ("import os\n"
               "open(os.environ['PANDAS_MARK'], 'a').write('imported\\n')\n"
               "raise ImportError('stand-in pandas')\n")


@pytest.fixture
def fake_pandas(tmp_path):
    d = tmp_path / "fake"
    d.mkdir()
    (d / "pandas.py").write_text(FAKE_PANDAS)
    return d, tmp_path / "pandas-imported"


@pytest.mark.parametrize("mode", [["--light"], []])
def test_a_profiled_process_does_not_import_pandas(tmp_path, fake_pandas, mode):
    d, mark = fake_pandas
    p = script(tmp_path, """
        import cuptiprof, logging
        for i in range(3):
            with cuptiprof.range("step", step=i):
                logging.getLogger("app").warning("step %d", i)
    """)
    r = cli(["run", "-o", "p.duckdb", "--no-report", *mode, "--", sys.executable, p], tmp_path,
            PYTHONPATH=f"{ROOT}{os.pathsep}{d}", PANDAS_MARK=str(mark))
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "p.duckdb", "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(3,)]
    assert not mark.exists(), "the profiled process imported pandas"


def test_the_collector_does_not_import_pandas(tmp_path, fake_pandas):
    d, mark = fake_pandas
    out = tmp_path / "c.duckdb"
    code = ("import cuptiprof\n"
            f"with cuptiprof.profile({str(out)!r}, warmup=1, steps=2):\n"
            "    for i in range(4):\n"
            "        with cuptiprof.range('step', step=i):\n"
            "            pass\n")
    env = dict(os.environ, CUPTIPROF_FAKE_CUPTI="1", PYTHONPATH=f"{ROOT}{os.pathsep}{d}",
               PANDAS_MARK=str(mark))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert q(out, "SELECT count(*) FROM kernels") == [(4,)]
    assert q(out, "SELECT count(*) FROM memcpys") == [(2,)]
    assert not mark.exists(), "the collector imported pandas"


def test_rows_as_lists_matches_table_take():
    """The writer's interning picks representative rows with numpy; the same rows, NULLs
    included, as Arrow's Table.take gives, across chunks and for an all-NULL column."""
    a = pa.chunked_array([pa.array([5, None, 7], pa.int32()), pa.array([None, 9], pa.int32())])
    b = pa.chunked_array([pa.array([1, 2, 3, 4, 5], pa.int64())])
    c = pa.nulls(5, pa.int32())
    d = pa.array([-3, 0, None, 2**40, 1], pa.int64())
    e = pa.array([0.5, None, 2.0, 3.25, -1.0])   # not integers: taken as they are
    tbl = pa.table({"a": a, "b": b, "c": c, "d": d, "e": e})
    rows = np.array([4, 1, 3, 0, 2, 2])
    want = [tbl.take(pa.array(rows)).column(k).to_pylist() for k in tbl.column_names]
    assert arrow.rows_as_lists(tbl, rows) == want
    assert arrow.rows_as_lists(tbl, rows)[0] == [9, None, None, 5, 7, 7]


def test_interned_names_keep_nulls_of_values_and_indices(tmp_path):
    """A name column whose dictionary holds a NULL, and whose indices hold NULLs, is stored with
    NULL for both and ids for the rest."""
    from cuptiprof.store.writer import RunInfo, Writer
    import duckdb
    names = pa.DictionaryArray.from_arrays(pa.array([2, None, 0, 1, 2, 0], pa.int8()),
                                           pa.array(["x", None, "y"]))
    w = Writer(tmp_path / "o.duckdb", RunInfo(source="test"))
    w.append({"ranges": pa.table({"name": names, "start_ns": pa.array(range(6), pa.int64()),
                                  "end_ns": pa.array(range(1, 7), pa.int64())})})
    path = w.close()
    got = duckdb.connect(str(path)).execute(
        "SELECT name FROM ranges ORDER BY start_ns").fetchall()
    assert [g[0] for g in got] == ["y", None, "x", None, "y", "x"]


def test_ints_gives_values_and_a_validity_mask_only_with_missing_values():
    values, ok = arrow.ints([4, None, -2])
    assert values.dtype == np.int64 and values.tolist() == [4, 0, -2] and ok.tolist() == [True, False, True]
    values, ok = arrow.ints([4, 5])
    assert values.tolist() == [4, 5] and ok is None
    with pytest.raises(OverflowError):
        arrow.ints([1, 2 ** 64])


@pytest.mark.parametrize("typ", [pa.int8(), pa.int32(), pa.int64(), pa.uint64()])
def test_min_max_skips_nulls_and_reads_slices(typ):
    big = (1 << 64) - 2 if typ == pa.uint64() else 100
    a = pa.array([None, 7, big, None, 3, 5], typ)
    assert arrow.min_max(a) == (3, big)
    assert arrow.min_max(a.slice(3)) == (3, 5)        # the offset is honoured
    assert arrow.min_max(a.slice(1, 1)) == (7, 7)
    # NULL slots hold whatever the buffer has: never taken for a value
    bits = pa.array([False, True, False]).buffers()[1]
    masked = pa.Array.from_buffers(typ, 3, [bits, pa.array([0, 4, 99], typ).buffers()[1]])
    assert masked.null_count == 2 and arrow.min_max(masked) == (4, 4)


def test_malloc_pool_holds_inside_and_the_pool_before_comes_back(tmp_path):
    from cuptiprof.errors import InputError
    from cuptiprof.interop.importing import import_traces
    before = pa.default_memory_pool().backend_name
    with arrow.malloc_pool():
        assert pa.default_memory_pool().backend_name == "system"
        kept = pa.chunked_array([pa.array([1, 2]), pa.array([3])]).combine_chunks()
    assert pa.default_memory_pool().backend_name == before
    assert kept.to_pylist() == [1, 2, 3]   # a buffer of the pool left behind stays readable
    with pytest.raises(ZeroDivisionError), arrow.malloc_pool():
        1 / 0
    assert pa.default_memory_pool().backend_name == before
    (tmp_path / "t.json").write_text("{not json")
    with pytest.raises(InputError):   # an import that fails gives it back too
        import_traces([tmp_path / "t.json"], tmp_path / "o.duckdb")
    assert pa.default_memory_pool().backend_name == before


def test_distinct_is_the_sorted_unique_values():
    assert arrow.distinct(np.array([3, 1, 3, -2, 1])).tolist() == [-2, 1, 3]


@pytest.mark.parametrize("values, typ, bad", [
    (np.array([1, 2 ** 31], np.int64), pa.int32(), 2 ** 31),
    (np.array([-2 ** 31 - 1, 0], np.int64), pa.int32(), -2 ** 31 - 1),
    (np.array([0, 7, -1], np.int64), pa.uint8(), -1),
    (np.array([5, 300, 2], np.int32), pa.int8(), 300),
])
def test_narrowing_raises_instead_of_wrapping(values, typ, bad):
    with pytest.raises(ValueError, match=f"value {bad} does not fit a {typ} column"):
        arrow.array(values, typ)


def test_narrowing_ignores_what_null_slots_hold():
    got = arrow.array(np.array([1, 2 ** 40, -2 ** 40, 3], np.int64), pa.int32(),
                      np.array([True, False, False, True]))
    assert got.to_pylist() == [1, None, None, 3]


def test_no_validity_bitmap_when_nothing_is_null():
    """As pa.array: an array without NULLs has no bitmap (readers skip the null checks)."""
    assert arrow.array(np.arange(3), pa.int32(), np.ones(3, bool)).buffers()[0] is None
    assert arrow.array(["a", "b"], pa.string(), np.ones(2, bool)).buffers()[0] is None


def test_ok_and_mask_together_are_null_where_either_says():
    got = arrow.array(np.array([1, 2, 3, 4]), pa.int64(), np.array([False, True, True, True]),
                      mask=np.array([False, False, True, False]))
    assert got.to_pylist() == [None, 2, None, 4]
    got = arrow.array([1, None, 3], pa.int64(), np.array([False, True, True]))
    assert got.to_pylist() == [None, None, 3]


def test_an_unsupported_type_is_refused_in_one_line():
    with pytest.raises(TypeError, match="arrays of date32.* are not built here"):
        arrow.array([1, 2], pa.date32())


def test_valid_reads_the_bitmap_of_slices_and_all_null_arrays():
    a = pa.array([1, None, 3, None, 5, 6, None, 8, 9, None], pa.int64())
    assert arrow.valid(a.slice(3, 5)).tolist() == [False, True, True, False, True]
    assert arrow.valid(pa.nulls(4, pa.int32())).tolist() == [False] * 4
    assert arrow.valid(pa.array([1, 2])).tolist() == [True, True]


def test_rows_as_lists_of_slices_unsigned_and_string_columns():
    """A table sliced (columns at an offset), with unsigned integers past 2**63 and strings."""
    tbl = pa.table({"u": pa.array([1, 2 ** 64 - 1, 3, 2 ** 63, 5], pa.uint64()),
                    "i": pa.array([-1, -2, None, -4, -5], pa.int16()),
                    "s": pa.array(["a", "b", None, "d", "e"])}).slice(1, 4)
    rows = np.array([2, 0, 1])
    want = [tbl.take(pa.array(rows)).column(k).to_pylist() for k in tbl.column_names]
    assert arrow.rows_as_lists(tbl, rows) == want == [[2 ** 63, 2 ** 64 - 1, 3], [-4, -2, None], ["d", "b", None]]
    assert arrow.values(pa.array([7, 8, 9], pa.int32()).slice(1, 1)).tolist() == [8]
