"""Mistakes in calls of cuptiprof.profile() and cuptiprof.open(): one clear message naming what
is wrong, nothing left behind or held open, and the corrected call works."""
from __future__ import annotations

import pytest

import cuptiprof
from cuptiprof import markers
from cuptiprof.collect import session as session_mod
from cuptiprof.errors import UsageError


@pytest.fixture(autouse=True)
def _no_leftover_session():
    yield
    assert session_mod.current() is None, "a test left a session active"
    assert markers._session is None


def test_unknown_source_leaves_no_file_and_the_retry_works(tmp_path):
    p = tmp_path / "s.duckdb"
    with pytest.raises(UsageError, match="unknown source 'gpu'; use 'cupti', 'fake' or 'none'"):
        cuptiprof.profile(p, source="gpu").start()
    assert list(tmp_path.iterdir()) == []
    cuptiprof.profile(p, source="none", quiet=True).start().stop()
    with cuptiprof.open(p) as prof:
        assert prof.sql("SELECT status FROM runs").fetchall() == [("complete",)]


def record(path, steps=3):
    with cuptiprof.profile(path, source="none", quiet=True):
        for i in range(steps):
            with cuptiprof.step(i):
                pass


@pytest.mark.parametrize("bad", [
    {"steps": "5"},                  # no such step
    {"steps": "x"},                  # not a step range
])
def test_failed_open_keeps_nothing_open(tmp_path, bad):
    p = tmp_path / "o.duckdb"
    record(p)
    with pytest.raises(UsageError) as err:
        cuptiprof.open(p, **bad)
    # what a notebook keeps of the failure (the traceback and its frames) holds no connection:
    # the same process can profile into the path again and open it with other settings
    kept = err  # noqa: F841
    p.unlink()
    record(p, steps=2)
    with cuptiprof.open(p) as prof:
        assert prof.sql("SELECT count(*) FROM ranges WHERE kind = 'step'").fetchall() == [(2,)]


def test_open_while_this_process_writes_says_so(tmp_path):
    from cuptiprof.errors import StoreError

    p = tmp_path / "w.duckdb"
    with cuptiprof.profile(p, source="none", quiet=True):
        with pytest.raises(StoreError) as err:
            cuptiprof.open(p)
    msg = str(err.value)
    assert "already open in this process" in msg and "profile()" in msg, msg
    assert "not a readable" not in msg and "\n" not in msg


def test_profile_into_a_file_open_for_reading_says_so(tmp_path):
    from cuptiprof.errors import StoreError

    p = tmp_path / "r.duckdb"
    record(p)
    prof = cuptiprof.open(p)
    try:
        with pytest.raises(StoreError) as err:
            cuptiprof.profile(p, source="none", quiet=True, mode="overwrite").start()
        msg = str(err.value)
        assert msg.startswith(f"{p}: already open in this process"), msg
        assert "prof.close()" in msg and "not a readable" not in msg
    finally:
        prof.close()
    assert session_mod.current() is None
