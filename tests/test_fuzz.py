"""Property-based fuzzing (hypothesis) of the importers and of the report CLI.

Properties: an import either succeeds with a file that opens, or fails with a CuptiprofError
(one line for the user) leaving no file behind; never any other exception. Any kernel name a
trace can carry survives import -> report in every format: exact in JSON and CSV, without
control characters on the terminal and in Markdown, as inert text in HTML.
"""
from __future__ import annotations

import contextlib
import copy
import csv
import gzip
import io
import json
import re
import sqlite3
import tempfile
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import hostile_corpus as H
from conftest import report_tally
from cuptiprof.errors import CuptiprofError

FUZZ = settings(max_examples=25, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
TALLY = {"tried": 0, "clean": 0}


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    yield
    report_tally(request, TALLY, "fuzzed inputs through import/report", "ended cleanly")


def import_or_error(data: bytes, name: str = "t.json") -> tuple[Path | None, str | None, Path]:
    """Import `data` in a fresh folder: (output, None) or (None, error line). Anything other
    than a CuptiprofError fails the property."""
    from cuptiprof.interop.importing import import_traces

    TALLY["tried"] += 1
    d = Path(tempfile.mkdtemp(prefix="fuzz-"))
    src = d / name
    src.write_bytes(data)
    out = d / "out" / "o.duckdb"
    out.parent.mkdir()
    try:
        import_traces([src], out)
    except CuptiprofError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg.strip(), msg
        assert list(out.parent.iterdir()) == [], "a failed import left files behind"
        TALLY["clean"] += 1
        return None, msg, d
    con = duckdb.connect(str(out), read_only=True)
    try:
        assert con.execute("SELECT status FROM runs").fetchall() == [("complete",)]
        con.execute("SELECT count(*) FROM gpu_activities").fetchone()
    finally:
        con.close()
    assert sorted(p.name for p in out.parent.iterdir()) == ["o.duckdb"]
    TALLY["clean"] += 1
    return out, None, d


# -- importers: structure-aware fuzzing of Kineto traces ------------------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70),
                    st.floats(allow_nan=False), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
ARGS = ["device", "stream", "correlation", "bytes", "grid", "block", "External id", "cbid"]


@st.composite
def mutated_trace(draw) -> dict:
    """The good trace with a few fields of a few events replaced, dropped or added."""
    doc = H.good_trace()
    evs = doc["traceEvents"]
    for _ in range(draw(st.integers(1, 4))):
        e = evs[draw(st.integers(0, len(evs) - 1))]
        what = draw(st.sampled_from(["set", "drop", "arg", "dup"]))
        key = draw(st.sampled_from(FIELDS))
        if what == "set":
            e[key] = draw(values)
        elif what == "drop":
            e.pop(key, None)
        elif what == "arg" and isinstance(e.get("args"), dict):
            e["args"][draw(st.sampled_from(ARGS))] = draw(values)
        else:
            evs.append(copy.deepcopy(e))
    if draw(st.booleans()):
        doc[draw(st.sampled_from(["deviceProperties", "baseTimeNanoseconds",
                                  "distributedInfo", "traceEvents"]))] = draw(values)
    return doc


@FUZZ
@given(mutated_trace(), st.booleans())
def test_import_mutated_kineto(doc, gz):
    data = json.dumps(doc).encode()
    import_or_error(gzip.compress(data) if gz else data, "t.json.gz" if gz else "t.json")


@FUZZ
@given(st.data())
def test_import_mutated_bytes(data):
    """Byte-level damage to a valid trace: flips, cuts and insertions."""
    raw = bytearray(json.dumps(H.good_trace()).encode())
    for _ in range(data.draw(st.integers(1, 5))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip":
            raw[pos] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del raw[pos:pos + data.draw(st.integers(1, 40))]
        else:
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    assume(raw)
    import_or_error(bytes(raw))


@settings(max_examples=10, deadline=None, database=None)
@given(st.lists(st.sampled_from(["StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "TARGET_INFO_GPU",
                                 "CUPTI_ACTIVITY_KIND_RUNTIME", "recipes"]),
                min_size=1, max_size=4, unique=True),
       st.lists(st.tuples(st.integers(-5, 5), st.text(max_size=5)), max_size=4))
def test_import_sqlite_that_is_not_quite_nsys(tables, rows):
    """SQLite files with some of the Nsight Systems table names but the wrong columns."""
    d = Path(tempfile.mkdtemp(prefix="fuzz-nsys-"))
    db = d / "x.sqlite"
    con = sqlite3.connect(db)
    for t in tables:
        con.execute(f'CREATE TABLE "{t}" (id INTEGER, value TEXT)')
        con.executemany(f'INSERT INTO "{t}" VALUES (?, ?)', rows)
    con.commit()
    con.close()
    import_or_error(db.read_bytes(), "x.sqlite")


# -- the report CLI over arbitrary kernel names ---------------------------------------------------
names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    from cuptiprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def trace_with_kernels(kernel_names: list[str]) -> dict:
    doc = H.good_trace(kernel=kernel_names[0])
    k = doc["traceEvents"][3]
    for i, n in enumerate(kernel_names[1:], 1):
        doc["traceEvents"].append(dict(k, name=n, ts=k["ts"] + 5 * i))
    return doc


# Each example carries several names (one kernel each): import -> report costs ~1 s per example.
@settings(max_examples=8, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(names, names), min_size=1, max_size=6))
def test_any_kernel_name_through_import_and_report(pairs):
    kernel_names = list(dict.fromkeys(a + "<i>z</i>" + b for a, b in pairs))  # inert markup
    out, err, d = import_or_error(json.dumps(trace_with_kernels(kernel_names)).encode())
    assert out is not None, err
    for fmt in ("table", "markdown"):
        rc, text, _ = run_cli(["report", out, "--by", "op", "--format", fmt])
        assert rc == 0
        assert not CONTROL.search(text.replace("\n", "")), (fmt, repr(text))
    rc, text, _ = run_cli(["report", out, "--by", "op", "--format", "json", "--top", "50"])
    assert rc == 0 and set(kernel_names) <= {r["name"] for r in json.loads(text)}
    rc, text, _ = run_cli(["sql", out, "SELECT name FROM kernels ORDER BY start_ns", "--format",
                           "csv"])
    rows = list(csv.reader(io.StringIO(text.replace("\x00", "\\0"), newline="")))
    assert rc == 0 and rows[1:] == [[n.replace("\x00", "\\0")] for n in kernel_names], rows
    html = d / "r.html"
    rc, _, err = run_cli(["report", out, "--html", html])
    assert rc == 0, err
    page = html.read_text()
    assert "<i>z</i>" not in page and "&lt;i&gt;z&lt;/i&gt;" in page
    assert not CONTROL.search(page.replace("\n", "").replace("\t", ""))


@settings(max_examples=40, deadline=None, database=None)
@given(st.lists(st.fixed_dictionaries({"ph": st.just("X"), "name": st.text(max_size=8),
                                       "ts": st.integers(0, 10**6)}), min_size=1, max_size=60),
       st.sampled_from([(",", ":"), (", ", ": "), (",\n  ", ": ")]),
       st.integers(8, 400), st.integers(1, 97))
def test_streamed_decode_keeps_every_event(events, seps, piece_bytes, block):
    """The reader cuts the text into pieces at event boundaries, whatever the JSON spacing,
    piece size and read-block size: every event comes out once, in order."""
    from cuptiprof.interop.kineto import iter_docs

    text = json.dumps({"traceEvents": events}, separators=seps).encode()
    blocks = [text[i:i + block] for i in range(0, len(text), block)]
    got = [e.name for d in iter_docs(blocks, piece_bytes) for e in (d.traceEvents or [])]
    assert got == [e["name"] for e in events]
