"""Arrow columns built from numpy buffers (cuptiprof/store/arrow.py), and the import path
that relies on them never importing pandas (nor numpy.ma)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cuptiprof.store import arrow as AC


def test_ints_with_and_without_missing_values():
    v, ok = AC.ints([3, 1 << 40, -2])
    assert v.tolist() == [3, 1 << 40, -2] and ok is None
    v, ok = AC.ints([5, None, 7])
    assert v.tolist() == [5, 0, 7] and ok.tolist() == [True, False, True]
    with pytest.raises(OverflowError):
        AC.ints([1 << 70])


def test_array_nulls_types_and_range_check():
    a = AC.array(np.array([1, 2, 3]), pa.int32(), np.array([True, False, True]))
    assert a.type == pa.int32() and a.to_pylist() == [1, None, 3]
    assert AC.array(np.array([True, False]), pa.bool_()).to_pylist() == [True, False]
    # a NULL slot may hold anything; a real value that does not fit is refused, not wrapped
    assert AC.array(np.array([1 << 40, 1]), pa.int32(), np.array([False, True])).to_pylist() == [None, 1]
    with pytest.raises(ValueError, match="does not fit"):
        AC.array(np.array([1 << 40]), pa.int32())


def test_strings_and_dictionary():
    s = AC.strings(["aten::mm", None, "", "ünï\x00"])
    assert s.to_pylist() == ["aten::mm", None, "", "ünï\x00"]
    d = AC.dictionary(np.array([1, 0, 1]), ["alloc", "free"])
    assert d.to_pylist() == ["free", "alloc", "free"]


def test_import_never_imports_pandas(tmp_path):
    """pyarrow's converter imports pandas on first use when it is installed (~0.4 s, more than
    a small import takes); the Kineto import path must not reach it."""
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
           "args": {"device": 0, "stream": 7, "correlation": 1, "grid": [1, 1, 1]}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 5,
           "ts": 0.5, "dur": 1.0, "args": {"correlation": 1}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 5, "ts": 0.0,
           "dur": 3.0, "args": {}},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 5, "tid": 5,
           "ts": 0.0, "dur": 4.0, "args": {}}]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": ev}))
    _import_without_pandas(src, tmp_path)


NSYS = Path(__file__).resolve().parents[2] / "shared/traces/pipit-nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


@pytest.mark.skipif(not NSYS.exists(), reason="../shared/traces is not here")
def test_nsys_import_never_imports_pandas(tmp_path):
    _import_without_pandas(NSYS, tmp_path)


def _import_without_pandas(src, tmp_path):
    """Import `src` in a fresh process beside a stand-in pandas that says when it is imported
    (and then is "not installed"), so the check holds whether pandas is installed or not."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "pandas.py").write_text("import os\nopen(os.environ['PANDAS_MARK'], 'a').write('x')\n"
                                    "raise ImportError('stand-in')\n")
    mark = tmp_path / "pandas-imported"
    root = Path(__file__).resolve().parents[1]
    code = ("import sys; from cuptiprof.interop.importing import import_traces; "
            f"import_traces([{str(src)!r}], {str(tmp_path / 'o.duckdb')!r}); "
            "print('numpy.ma' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{fake}", PANDAS_MARK=str(mark))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert not mark.exists(), f"importing {src.name} imported pandas"
    # plain np.unique imports numpy.ma (20-30 ms) to check for a masked array
    assert r.stdout.split() == ["False"], f"importing {src.name} imported numpy.ma"
