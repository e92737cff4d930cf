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
