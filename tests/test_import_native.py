"""The native Kineto scanner (cuptiprof/interop/_kineto_scan.c) against the msgspec path: the
same columns for every text it takes, a decline for every text it does not handle, and the same
import either way (CUPTIPROF_NATIVE=0 forces the msgspec path)."""
from __future__ import annotations

import json
import random

import msgspec
import numpy as np
import pytest

from cuptiprof.interop import kineto
from cuptiprof.interop import pieces as P
from cuptiprof.interop.kineto import _DECODER, iter_docs


def test_the_extension_is_built():
    """CI has a compiler and Python headers: a missing extension is a failed build, not a
    silent fallback to the slow path."""
    from cuptiprof.interop import _kineto_scan
    assert _kineto_scan.NI == P.NI
    assert P.native_available()


def both(text: bytes):
    """The native columns and msgspec's, with shared interners (so ids agree); None for the
    native side where it declines."""
    from cuptiprof.interop import _kineto_scan as K
    names, small = K.Interner(), K.Interner()
    got = P.scan(text, names, small, _DECODER.decode)
    doc = _DECODER.decode(text)
    ref = P.from_events(doc.traceEvents or [], names, small, doc)
    return got, ref, names, small


def assert_same(got: P.Piece, ref: P.Piece, small) -> None:
    assert got.events == ref.events
    assert got.has_events == ref.has_events
    idx = got.I[:, P.C_IDX]
    np.testing.assert_array_equal(got.I, ref.I[idx])
    np.testing.assert_array_equal(got.F, ref.F[idx])  # NaN == NaN here
    # rows the scanner leaves out carry nothing the importer reads: events without any field
    # it reads, and flow arrows (a flow category, ph other than "X")
    rest = np.setdiff1d(np.arange(ref.events), idx)
    if len(rest):
        R = ref.I[rest]
        text = lambda i: small.strings[i].lower() if i >= 0 else None  # noqa: E731
        flow = np.array([text(c) in kineto.FLOW and text(ph) != "x"
                         for c, ph in zip(R[:, P.C_CAT].tolist(), R[:, P.C_PH].tolist())], bool)
        R, F = R[~flow], ref.F[rest[~flow]]
        assert (R[:, [P.C_CAT, P.C_NAME, P.C_LABELS]] == -1).all()
        assert (R[:, [P.C_PIDK, P.C_TIDK, P.C_HASARGS]] == 0).all()
        assert np.isnan(F).all()
    kept_flow = [small.strings[c].lower() in kineto.FLOW and small.strings[ph] != "X"
                 for c, ph in zip(got.I[:, P.C_CAT].tolist(), got.I[:, P.C_PH].tolist())
                 if c >= 0 and ph >= 0]
    assert not any(kept_flow), "a flow arrow was kept"
    want = msgspec.structs.replace(ref.meta, traceEvents=None)
    assert (got.meta if got.meta is not None else type(want)()) == want


def doc(*events, **top) -> bytes:
    return json.dumps({**top, "traceEvents": list(events)}).encode()


KERNEL = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": "stream 7", "ts": 10.5,
          "dur": 3, "args": {"device": 0, "stream": 7, "correlation": 77, "grid": [1, 2, 3],
                             "block": [4, 5, 6], "registers per thread": 32,
                             "shared memory": 0, "context": 1, "queued": 0}}

TAKEN = {
    "plain": doc(KERNEL),
    "escapes in names": doc({**KERNEL, "name": 'a"b\\c/\u00e9\u4e2d\U0001f600\x01\n\t'}),
    "escaped solidus and unicode escapes": (
        b'{"traceEvents":[{"ph":"X","name":"\\/\\u00e9\\ud83d\\ude00\\u0041\\b\\f\\r"}]}'),
    "raw utf-8": '{"traceEvents":[{"ph":"X","name":"\u00e9\u4e2d\U0001f600"}]}'.encode(),
    "ints and floats": doc({"ph": "X", "ts": 1623143089861123, "dur": 0.001},
                           {"ph": "X", "ts": 1.5e3, "dur": 2E-2}, {"ph": "X", "ts": -12, "dur": 0}),
    "nanosecond timestamps": doc({"ph": "X", "cat": "cpu_op", "ts": 1712195495520922750,
                                  "dur": 99}),
    "many digits": b'{"traceEvents":[{"ts":0.1000000000000000055511151231257827021181583404541015625,"dur":123456789012345678}]}',
    "missing fields": doc({"ph": "X"}, {"cat": "kernel"}, {"name": "n"}, {"args": {}}),
    "nulls": doc({"ph": "X", "cat": None, "name": None, "pid": None, "tid": None, "ts": None,
                  "dur": None, "args": None},
                 {"ph": "i", "args": {"correlation": None, "grid": None, "name": None,
                                      "labels": None}}),
    "nested unknown args": doc({**KERNEL, "args": {**KERNEL["args"], "Input Dims": [[1, 2], []],
                                                  "obj": {"a": [True, False, None, {"b": "c"}]},
                                                  "x": -1.5e-7, "big": 10 ** 30}}),
    "string and int ids": doc({"ph": "X", "pid": "Spans", "tid": "25738"},
                              {"ph": "X", "pid": -3, "tid": 9223372036854775807},
                              {"ph": "X", "pid": -9223372036854775808}),
    "memory instants": doc({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 5,
                            "args": {"Device Type": 1, "Device Id": 0, "Bytes": -512,
                                     "Addr": 140000000000000}}),
    "process labels": doc({"ph": "M", "name": "process_labels", "pid": 42,
                           "args": {"labels": "CPU", "name": "x"}}),
    "log records": doc({"ph": "i", "s": "t", "cat": "cuptiprof_log", "name": "m \u00e9", "pid": 3,
                        "tid": 4, "ts": 5, "args": {"level": "INFO", "logger": "a.b",
                                                    "cuptiprof step": 2}},
                       {"ph": "i", "cat": "cuptiprof_log", "name": None, "ts": 6,
                        "args": {"level": None, "logger": "a\"b"}},
                       # other writers' args of these names, of any type: not a level or logger
                       {"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1, "dur": 2,
                        "args": {"level": 7, "logger": {"x": [1, None]}}},
                       {"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 2,
                        "args": {"logger": [], "level": 1.5}}),
    "cuptiprof's args on GPU rows": doc({**KERNEL, "args": {**KERNEL["args"], "External id": 4,
                                                           "cuptiprof step": 3,
                                                           "cuptiprof range": 12,
                                                           "cuptiprof dynamic smem": 256}},
                                        {**KERNEL, "args": {"cuptiprof range": None}},
                                        {"ph": "X", "cat": "user_annotation", "name": "serve",
                                         "ts": 1, "dur": 2, "args": {"cuptiprof open": 1}},
                                        {"ph": "X", "cat": "cuda_sync", "name": "Event Sync",
                                         "ts": 3, "dur": 1, "args": {"cuda_sync_kind": "Event Sync",
                                                                     "wait_on_cuda_event_id": 9}},
                                        # what Kineto has no key for
                                        {**KERNEL, "args": {**KERNEL["args"], "cuptiprof graph": 3,
                                                            "cuptiprof graph node": 1 << 40}},
                                        {"ph": "X", "cat": "gpu_memcpy", "ts": 4, "dur": 1,
                                         "args": {"cuptiprof async": 1, "cuptiprof graph": None}},
                                        {"ph": "X", "cat": "gpu_memset", "ts": 5, "dur": 1,
                                         "args": {"cuptiprof value": 255}},
                                        {"ph": "X", "cat": "cuda_runtime", "ts": 6, "dur": 1,
                                         "args": {"cuptiprof return code": 700}},
                                        {"ph": "i", "name": "[memory]", "ts": 7,
                                         "args": {"cuptiprof pool": 0}},
                                        {"ph": "X", "cat": "cuda_runtime", "ts": 8, "dur": 1,
                                         "args": {"cuptiprof return code": None}}),
    # keys of cuptiprof's export in the column of a key their category never says
    "cuptiprof's args in shared columns": doc({"ph": "X", "cat": "gpu_memcpy", "ts": 1, "dur": 1,
                                               "args": {"cuptiprof src device": 1,
                                                        "cuptiprof dst device": 0}},
                                              {"ph": "i", "name": "[memory]", "ts": 2,
                                               "args": {"cuptiprof correlation": 1 << 40,
                                                        "cuptiprof kind": "pinned"}},
                                              {"ph": "X", "cat": "gpu_memcpy", "ts": 3, "dur": 1,
                                               "args": {"cuptiprof src device": None}}),
    # Kineto's graph ids (CUDA 12 on), in the columns of cuptiprof's earlier keys
    "Kineto's graph ids and peer devices": doc({**KERNEL, "args": {**KERNEL["args"], "graph id": 3,
                                                  "graph node id": 1 << 40}},
                              {"ph": "X", "cat": "gpu_memcpy", "ts": 4, "dur": 1,
                               "args": {"graph id": 0, "graph node id": 0}},
                              {"ph": "X", "cat": "gpu_memset", "ts": 5, "dur": 1,
                               "args": {"graph id": None, "graph node id": 9}},
                              # and a peer copy's devices
                              {"ph": "X", "cat": "gpu_memcpy", "ts": 6, "dur": 1,
                               "args": {"fromDevice": 1, "inDevice": 0, "toDevice": 2}}),
    "empty events are counted, not kept": doc({}, {}, {"unknown": 1}, {"ph": "X"}, {}),
    # flow arrows: left out; an "X" event of a flow category is kept (it counts as complete)
    "flow arrows are counted, not kept": doc(
        {"ph": "s", "id": 1, "pid": 1, "tid": 2, "ts": 1, "cat": "ac2g", "name": "ac2g"},
        KERNEL, {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 2, "cat": "ac2g", "name": "ac2g",
                 "bp": "e"},
        {"ph": "t", "cat": "Async_CPU_to_GPU", "ts": 3}, {"ph": "s", "cat": "fwdbwd", "ts": 4},
        {"ph": "f", "cat": "async", "ts": 5}, {"ph": "X", "cat": "ac2g", "ts": 6, "dur": 1},
        {"ph": "s", "cat": "ac2gx", "ts": 7}, {"cat": "ac2g", "ts": 8}),
    "empty array": doc(),
    "other top-level keys": doc(KERNEL, deviceProperties=[{"id": 0, "name": "V100", "numSms": 80}],
                                distributedInfo={"rank": 1, "world_size": 2},
                                baseTimeNanoseconds=1700000000000000000, schemaVersion=1,
                                traceName="t", host_name="h",
                                # cuptiprof's export: a process, its run, data_quality rows
                                cuptiprofProcess={"pid": 5, "command": "python t.py",
                                                  "startNs": 1, "endNs": None},
                                cuptiprofRun={"id": 1, "label": "eager", "status": "complete",
                                              "startTime": "2026-12-01T08:00:00.000000+00:00"},
                                cuptiprofDataQuality=[{"run": 1, "pid": 5, "check": "dropped_records",
                                                       "count": 3, "detail": "dropped"}]),
}


def pretty(b: bytes) -> bytes:
    return json.dumps(json.loads(b), indent=4).encode().replace(b": ", b" :\t ")


@pytest.mark.parametrize("name", sorted(TAKEN))
def test_scanner_takes_and_matches_msgspec(name):
    for text in (TAKEN[name], pretty(TAKEN[name])):
        got, ref, _, small = both(text)
        assert got is not None, f"{name}: declined"
        assert_same(got, ref, small)


def test_strings_are_decoded_like_msgspec():
    got, ref, names, small = both(TAKEN["escaped solidus and unicode escapes"])
    assert names.strings == ["/\u00e9\U0001f600A\b\f\r"]
    got, ref, names, small = both(TAKEN["string and int ids"])
    assert got.I[0, P.C_PIDK] == P.ID_STR and small.strings[got.I[0, P.C_PID]] == "Spans"
    assert got.I[1, P.C_TID] == 9223372036854775807
    assert got.F.shape == (3, 2) and np.isnan(got.F).all()


def test_a_gpu_rows_recorded_range_is_read_into_its_column():
    got, ref, _, _ = both(TAKEN["cuptiprof's args on GPU rows"])
    a = P.A["xrange"]
    assert got.I[:, P.C_ARG0 + a].tolist() == [12] + [0] * 9
    assert ((got.I[:, P.C_VALID] >> a) & 1).tolist() == [1] + [0] * 9
    assert got.I[0, P.C_ARG0 + P.A["xdsmem"]] == 256
    assert got.I[2, P.C_ARG0 + P.A["xopen"]] == 1
    assert got.I[3, P.C_ARG0 + P.A["event_id"]] == 9
    assert got.I[4, [P.C_ARG0 + P.A["xgraph"], P.C_ARG0 + P.A["xgnode"]]].tolist() == [3, 1 << 40]
    x = P.A["xextra"]   # one column: a copy's asynchrony, a memset's value, a return code, a pool
    assert got.I[5:, P.C_ARG0 + x].tolist() == [1, 255, 700, 0, 0]
    assert ((got.I[5:, P.C_VALID] >> x) & 1).tolist() == [1, 1, 1, 1, 0]


def test_keys_of_a_shared_column_are_read_into_it():
    """A peer copy's devices and a [memory] instant's correlation id go to the columns of
    keys their category never says (pieces.SHARED); a memory kind to C_XKIND."""
    got, ref, _, small = both(TAKEN["cuptiprof's args in shared columns"])
    cols = [P.C_ARG0 + P.A[k] for k in ("xdsmem", "xopen", "event_id")]
    assert got.I[:, cols].tolist() == [[1, 0, 0], [0, 0, 1 << 40], [0, 0, 0]]
    bits = [(got.I[:, P.C_VALID] >> P.A[k]) & 1 for k in ("xdsmem", "xopen", "event_id")]
    assert np.array(bits).T.tolist() == [[1, 1, 0], [0, 0, 1], [0, 0, 0]]
    assert small.strings[got.I[1, P.C_XKIND]] == "pinned"


def test_numbers_are_rounded_like_msgspec():
    rng = random.Random(5)
    vals = [rng.uniform(-1e6, 1e18) for _ in range(300)] + [rng.randrange(10 ** 17) for _ in range(100)]
    vals += [0.1, 1e-300, 2.2250738585072014e-308, 5e-324, 1.7976931348623157e308, 123.456e5]
    texts = [repr(v) for v in vals] + ["1.00000000000000011102230246251565404236316680908203125",
                                       "9007199254740993", "0.30000000000000004", "1E5", "1e+5"]
    text = b'{"traceEvents":[' + b",".join(b'{"ts":%s}' % t.encode() for t in texts) + b"]}"
    got, ref, _, small = both(text)
    assert got is not None
    assert_same(got, ref, small)


def test_timestamps_are_read_exactly_like_msgspec():
    """"ts" in exact thousandths of its unit (C_TSX) beside its double, the same from the scanner
    and the msgspec path; none where the text says more than three decimals or uses an exponent."""
    texts = {"1712195495505582.988": 1712195495505582988, "-0.5": -500, "12.3400": 12340,
             "100": 100000, "0.001": 1, "9223372036854775": 9223372036854775000,
             "1.0005": P.TSX_NONE, "1E5": P.TSX_NONE, "1.5e3": P.TSX_NONE,
             "9223372036854776": P.TSX_NONE, "12345678901234567.5": P.TSX_NONE, "null": P.TSX_NONE}
    text = b'{"traceEvents":[' + b",".join(b'{"ts":%s}' % t.encode() for t in texts) + b',{"ph":"X"}]}'
    got, ref, _, small = both(text)
    assert got is not None
    assert_same(got, ref, small)
    assert ref.I[:, P.C_TSX].tolist() == [*texts.values(), P.TSX_NONE]


DECLINED = {
    "duplicate field": b'{"traceEvents":[{"ph":"X","ph":"i"}]}',
    "duplicate arg": b'{"traceEvents":[{"args":{"device":1,"device":2}}]}',
    "duplicate top-level key": b'{"a":1,"traceEvents":[],"a":2}',
    "two event arrays": b'{"traceEvents":[],"traceEvents":[{"ph":"X"}]}',
    "escaped key": b'{"traceEvents":[{"na\\u006de":"x"}]}',
    "lone surrogate": b'{"traceEvents":[{"name":"\\ud800"}]}',
    "lone low surrogate": b'{"traceEvents":[{"x":"\\udc00"}]}',
    "invalid utf-8": b'{"traceEvents":[{"x":"\xff"}]}',
    "overlong utf-8": b'{"traceEvents":[{"name":"\xc0\xaf"}]}',
    "encoded surrogate": b'{"traceEvents":[{"name":"\xed\xa0\x80"}]}',
    "control character": b'{"traceEvents":[{"name":"a\x01b"}]}',
    "bad escape": b'{"traceEvents":[{"name":"\\x41"}]}',
    "float pid": b'{"traceEvents":[{"pid":1.0}]}',
    "bool tid": b'{"traceEvents":[{"tid":true}]}',
    "uint64 pid": b'{"traceEvents":[{"pid":18446744073709551615}]}',
    "int64 overflow arg": b'{"traceEvents":[{"args":{"correlation":9223372036854775808}}]}',
    "huge int ts": b'{"traceEvents":[{"ts":123456789012345678901234567890}]}',
    "negative zero": b'{"traceEvents":[{"ts":-0}]}',
    "underflow": b'{"traceEvents":[{"ts":1e-400}]}',
    "overflow": b'{"traceEvents":[{"ts":1e400}]}',
    "leading zero": b'{"traceEvents":[{"ts":01}]}',
    "bare dot": b'{"traceEvents":[{"ts":1.}]}',
    "NaN literal": b'{"traceEvents":[{"ts":NaN}]}',
    "ts as string": b'{"traceEvents":[{"ts":"5"}]}',
    "null ph": b'{"traceEvents":[{"ph":null}]}',
    "grid of two": b'{"traceEvents":[{"args":{"grid":[1,2]}}]}',
    "grid of four": b'{"traceEvents":[{"args":{"grid":[1,2,3,4]}}]}',
    "grid with null": b'{"traceEvents":[{"args":{"grid":[1,null,3]}}]}',
    "grid of strings": b'{"traceEvents":[{"args":{"grid":["a",1,1]}}]}',
    "args a string": b'{"traceEvents":[{"args":"none"}]}',
    "labels an int": b'{"traceEvents":[{"args":{"labels":1}}]}',
    "two values of one column": b'{"traceEvents":[{"args":{"cuptiprof async":1,"cuptiprof value":2}}]}',
    "a graph as a string": b'{"traceEvents":[{"args":{"cuptiprof graph":"7"}}]}',
    "a graph under both keys": b'{"traceEvents":[{"args":{"graph id":7,"cuptiprof graph":7}}]}',
    "a peer device under both keys": b'{"traceEvents":[{"args":{"toDevice":1,'
                                     b'"cuptiprof dst device":1}}]}',
    "two keys of a shared column": b'{"traceEvents":[{"args":{"cuptiprof open":1,'
                                   b'"cuptiprof dst device":2}}]}',
    "a correlation as a string": b'{"traceEvents":[{"args":{"cuptiprof correlation":"7"}}]}',
    "arg name a list": b'{"traceEvents":[{"args":{"name":[]}}]}',
    "event a list": b'{"traceEvents":[[1,2,3]]}',
    "events not a list": b'{"traceEvents":5}',
    "events null": b'{"traceEvents":null}',
    "trailing comma": b'{"traceEvents":[{"ph":"X"},]}',
    "trailing garbage": b'{"traceEvents":[]} x',
    "missing colon": b'{"traceEvents":[{"ph" "X"}]}',
    "truncated": b'{"traceEvents":[{"ph":"X"',
    "deep nesting": b'{"traceEvents":[{"x":' + b"[" * 300 + b"]" * 300 + b"}]}",
    "not an object": b'[{"ph":"X"}]',
    "true misspelt": b'{"traceEvents":[{"x":tru}]}',
}


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_scanner_declines_what_it_does_not_handle(name):
    from cuptiprof.interop import _kineto_scan as K
    assert K.scan(DECLINED[name], K.Interner(), K.Interner()) is None


def test_scanner_never_takes_what_msgspec_rejects():
    """Random one-byte edits of valid traces: whatever the scanner takes, msgspec takes too and
    decodes into the same columns."""
    from cuptiprof.interop import _kineto_scan as K
    rng = random.Random(7)
    seeds = [TAKEN[k] for k in ("plain", "nested unknown args", "nulls", "string and int ids",
                                "other top-level keys", "escapes in names")]
    alphabet = b' \t\n{}[]:,"\\-+.0123456789eEtrufalsnXu\xc3\xa9\xff\x00'
    taken = 0
    for i in range(4000):
        b = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(b))
            op = rng.random()
            if op < 0.4:
                b[pos] = rng.choice(alphabet)
            elif op < 0.7:
                del b[pos]
            else:
                b.insert(pos, rng.choice(alphabet))
        text = bytes(b)
        names, small = K.Interner(), K.Interner()
        got = P.scan(text, names, small, _DECODER.decode)
        if got is None:
            continue
        taken += 1
        try:
            d = _DECODER.decode(text)
        except msgspec.MsgspecError as exc:
            raise AssertionError(f"the scanner took text msgspec rejects ({exc}): {text!r}")
        assert_same(got, P.from_events(d.traceEvents or [], names, small, d), small)
    assert taken > 200  # the edits also leave plenty of valid text


@pytest.mark.parametrize("piece_bytes", [40, 200, 1000])
def test_pieces_cut_for_the_scanner(piece_bytes):
    """Pieces cut at a separator inside a string are declined and cut again, as with msgspec;
    every event comes out once, in order."""
    from cuptiprof.interop import _kineto_scan as K
    events = [{"ph": "X", "name": f"k}}, {{weird{i}", "ts": i, "dur": 1} for i in range(200)]
    text = json.dumps({"traceEvents": events}, indent=1).encode()
    names, small = K.Interner(), K.Interner()
    scan = lambda t: P.scan(t, names, small, _DECODER.decode)  # noqa: E731
    blocks = [text[i:i + 97] for i in range(0, len(text), 97)]
    got = []
    native = 0
    for d in iter_docs(blocks, piece_bytes, scan=scan):
        if isinstance(d, P.Piece):
            native += 1
            got += [names.strings[i] for i in d.I[:, P.C_NAME]]
        else:
            got += [e.name for e in d.traceEvents or []]
    assert got == [e["name"] for e in events]
    assert native >= 1


# -- whole imports: the native path and CUPTIPROF_NATIVE=0 write the same file ----------------
SHARED = __import__("pathlib").Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def tables(path) -> dict:
    """Every table's full content in stored order (timestamps of the import itself left out)."""
    import duckdb
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name <> 'meta' "
                                "ORDER BY 1").fetchall():
            cols = [c for c, typ, *_ in con.execute(f"DESCRIBE {t}").fetchall()
                    if not typ.startswith("TIMESTAMP")]
            rows = con.execute(f"SELECT {', '.join(cols)} FROM {t}").fetchall()
            # the writer's own per-step summary comes out of a parallel aggregation: no order
            out[t] = sorted(rows, key=repr) if t.startswith("step_busy") else rows
        return out
    finally:
        con.close()


def import_both(paths, tmp_path, monkeypatch, calls=None):
    from cuptiprof.interop.importing import import_traces
    res = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("CUPTIPROF_NATIVE", mode)
        out = tmp_path / f"native{mode}" / "out.duckdb"  # the label is the file's name
        out.parent.mkdir(parents=True)
        if calls is not None:
            calls.clear()
        import_traces(paths, out)
        res[mode] = tables(out)
        if calls is not None:
            res[mode + "calls"] = list(calls)
    monkeypatch.delenv("CUPTIPROF_NATIVE")
    assert res["1"] == res["0"]
    return res


def _shared_traces():
    if not SHARED.is_dir():
        return []
    return sorted(str(p.relative_to(SHARED)) for p in SHARED.rglob("*.json.gz")
                  if p.name != "gpu_metrics_input.json") + ["param-dlrm-v100x8/dlrm_kineto.tar.gz"]


@pytest.mark.parametrize("rel", _shared_traces() or ["(none)"])
def test_shared_traces_import_identically(rel, tmp_path, monkeypatch):
    if rel == "(none)":
        pytest.skip("../shared/traces is not present")
    src = SHARED / rel
    if rel.endswith(".tar.gz"):
        import tarfile
        with tarfile.open(src) as tf:
            tf.extractall(tmp_path / "x", filter="data")
        paths = sorted((tmp_path / "x").rglob("*.json"))
    else:
        paths = [src]
    res = import_both(paths, tmp_path, monkeypatch)
    assert sum(len(v) for k, v in res["1"].items() if k in ("kernel_rows", "range_rows")) > 0


def test_crafted_trace_imports_identically(tmp_path, monkeypatch):
    """Escapes, pretty JSON, ints and floats, nulls, string ids, unknown nested args, memory
    instants, metadata and pieces the scanner declines (a grid of two, a uint64 id in a flow
    event, an escaped key): the same tables from both paths."""
    ev = []
    for i in range(400):
        t = 1000 + i * 10
        ev += [{"ph": "X", "cat": "cpu_op", "name": f"aten::op\"{i % 7}\\\u00e9", "pid": 11,
                "tid": "25738", "ts": t, "dur": 8.25, "args": {"Input Dims": [[1, 2]], "x": None}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11,
                "tid": 25738, "ts": t + 1, "dur": 2, "args": {"correlation": i, "cbid": 211}},
               {"ph": "X", "cat": "kernel", "name": f"k\U0001f600{i % 5}", "pid": 0,
                "tid": "stream 7", "ts": t + 3.5, "dur": 4,
                "args": {"device": 0, "stream": 7, "correlation": i, "grid": [i, 1, 1],
                         "block": [128, 1, 1], "registers per thread": 32, "context": None}},
               {"ph": "f", "cat": "ac2g", "id": i, "pid": 0, "tid": 0, "ts": t},
               {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 11, "ts": t,
                "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512 if i % 2 else -512}}]
        if i % 50 == 0:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i // 50}",
                       "pid": 11, "tid": 25738, "ts": t - 0.5, "dur": 500})
    ev.append({"ph": "M", "name": "process_labels", "pid": 11, "args": {"labels": "CPU"}})
    ev.append({"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
               "tid": 7, "ts": 1500, "dur": 3, "args": {"bytes": 4096, "device": 0}})
    ev.append({"ph": "X", "cat": "mystery", "name": "m", "ts": 1, "dur": 1})
    base = {"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "A100", "numSms": 108}],
            "baseTimeNanoseconds": 1700000000000000000, "schemaVersion": 1}
    compact = json.dumps(base).encode()
    declined = compact.replace(b'"grid": [7, 1, 1]', b'"grid": [7, 1]', 1).replace(
        b'"id": 9,', b'"id": 18446744073709551615, "n\\u0061me": "flow",', 1)
    assert declined != compact
    for i, text in enumerate((compact, json.dumps(base, indent=2).encode(), declined)):
        src = tmp_path / f"t{i}.json"
        src.write_bytes(text)
        res = import_both([src], tmp_path / f"o{i}", monkeypatch)
        assert len(res["1"]["kernel_rows"]) == 400


def test_declined_pieces_fall_back_to_msgspec(tmp_path, monkeypatch):
    """A trace cut into many pieces, some of which the scanner declines: only those go to
    msgspec, and the import is the same."""
    from cuptiprof.interop.kineto import file, text
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 1,
           "args": {"device": 0, "stream": 7, "correlation": i,
                    "grid": [1, 1] if i % 1000 == 999 else [1, 1, 1]}} for i in range(5000)]
    src = tmp_path / "t.json"
    src.write_bytes(json.dumps({"traceEvents": ev}).encode())
    seen = []
    real = text._DECODER
    monkeypatch.setattr(file, "PIECE_BYTES", 64 << 10)
    monkeypatch.setattr("cuptiprof.interop.textsource.BLOCK", 50_000)

    class Counting:
        def decode(self, b):
            seen.append(len(b))
            return real.decode(b)
    counting = Counting()   # every piece msgspec decodes, and the top-level keys of the scanner's
    monkeypatch.setattr(text, "_DECODER", counting)
    monkeypatch.setattr(file, "_DECODER", counting)
    res = import_both([src], tmp_path / "o", monkeypatch, calls=seen)
    assert 0 < len(res["1calls"]) < len(res["0calls"])  # some pieces native, some not
    assert len(res["1"]["kernel_rows"]) == 5000


def test_native_sweep_nests_like_python(monkeypatch):
    """nesting.nest's sweep in C against the Python one: random ranges and calls on a few
    threads, with equal starts and ends, touching and nested."""
    from cuptiprof.interop import nesting
    rng = np.random.default_rng(3)
    for n, m in ((0, 0), (0, 5), (5, 0), (300, 500), (3000, 2000)):
        r_key, c_key = rng.integers(0, 4, n), rng.integers(0, 4, m)
        r_start = rng.integers(0, 1000, n)
        r_end = r_start + rng.integers(0, 200, n)
        c_start = rng.integers(0, 1000, m)
        c_end = c_start + rng.integers(0, 5, m)
        is_op = rng.random(n) < 0.5
        args = (r_key, r_start, r_end, is_op, c_key, c_start, c_end)
        monkeypatch.setenv("CUPTIPROF_NATIVE", "1")
        native = nesting.nest(*args)
        monkeypatch.setenv("CUPTIPROF_NATIVE", "0")
        python = nesting.nest(*args)
        for a, b in zip(native, python):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        if n > 100:
            assert (python[0] >= 0).any() and (python[2] >= 0).any()


def resolved(path) -> dict:
    """Every view and table with interned ids replaced by what they stand for (names, lanes,
    configurations), rows sorted: what a reader sees, whatever order ids were handed out in."""
    import duckdb
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        rels = [r for (r,) in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal UNION ALL "
            "SELECT table_name FROM duckdb_tables() WHERE table_name NOT IN "
            "('meta', 'strings', 'lanes', 'launch_configs') AND table_name NOT LIKE '%_rows'"
        ).fetchall()]
        for t in sorted(rels):
            cols = [c for c, typ, *_ in con.execute(f"DESCRIBE {t}").fetchall()
                    if not typ.startswith("TIMESTAMP") and c not in ("name_id", "lane_id",
                                                                    "config_id")]
            out[t] = con.execute(f"SELECT {', '.join(cols)} FROM {t} ORDER BY ALL").fetchall()
        return out
    finally:
        con.close()


def test_import_in_parts_writes_the_same_rows(tmp_path, monkeypatch):
    """A large trace is written APPEND_ROWS rows of each table per transaction (and hands freed
    memory back between parts); a reader sees the same rows as with one append: ranges and
    their ids, parents, steps, op links, names, data quality and busy time per step."""
    if not SHARED.is_dir():
        pytest.skip("../shared/traces is not present")
    from cuptiprof.interop.importing import import_traces
    from cuptiprof.interop.kineto import finish
    # kernels launched outside every step: their count in data_quality adds up over parts
    src = [SHARED / "hta/negative_queue_length_values_check/rank0.json.gz"]
    trims = []
    monkeypatch.setattr(finish, "_release_freed_memory", lambda: trims.append(1))
    res = {}
    for rows in (1 << 30, 997):
        monkeypatch.setattr(finish, "APPEND_ROWS", rows)
        trims.clear()
        out = tmp_path / str(rows) / "out.duckdb"
        out.parent.mkdir()
        import_traces(src, out)
        res[rows] = resolved(out)
        assert (len(trims) > 10) == (rows == 997)  # only a trace larger than a part
    assert len(res[997]["ranges"]) > 10 * 997  # many parts, not one
    assert sum(1 for r in res[997]["kernels"] if r[8] is not None) > 1000  # steps linked
    assert ("unclaimed_records", "kernel", 705) in [r[2:5] for r in res[997]["data_quality"]]
    assert set(res[997]) == set(res[1 << 30])
    for t in res[997]:
        assert res[997][t] == res[1 << 30][t], t


def test_log_records_import_identically(tmp_path, monkeypatch):
    """Log records (cuptiprof's export: instants of category cuptiprof_log) come back into
    `logs` alike from both paths: in a trace with cuptiprof's links each keeps the step it was
    written with, in one without each takes the step open at its time; another
    writer's "level" or "logger" arg of any type declines nothing."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 9, "tid": 5,
           "ts": 100 * k, "dur": 50} for k in range(3)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 9, "tid": 5, "ts": 10, "dur": 5,
            "args": {"level": 3, "logger": {"a": [1]}, "External id": 1}}]
    ev += [{"ph": "i", "s": "t", "cat": "cuptiprof_log", "name": f"msg {k} \u00e9", "pid": 9,
            "tid": 5 if k % 2 else 6, "ts": 30 * k + 0.5,
            "args": {"level": ["INFO", "WARNING", None][k % 3], "logger": f"log{k % 2}",
                     **({"cuptiprof step": 7} if k % 4 else {})}} for k in range(10)]
    rows = "SELECT pid, thread_id, time_ns, level, logger, message, step FROM logs ORDER BY time_ns"
    import duckdb
    got = {}
    for links in (False, True):
        src = tmp_path / f"l{links}.json"
        src.write_text(json.dumps({"traceEvents": ev, **({"cuptiprofLinks": "range_id"} if links else {})}))
        from cuptiprof.interop import _kineto_scan as K
        assert P.scan(src.read_bytes(), K.Interner(), K.Interner(), _DECODER.decode) is not None
        import_both([src], tmp_path / f"o{links}", monkeypatch)
        con = duckdb.connect(str(tmp_path / f"o{links}" / "native1" / "out.duckdb"), read_only=True)
        got[links] = con.execute(rows).fetchall()
        assert con.execute("SELECT count(*) FROM data_quality WHERE check_name = 'unknown_category'"
                           ).fetchone() == (0,)
        con.close()
    assert [r[6] for r in got[True]] == [None if k % 4 == 0 else 7 for k in range(10)]
    # by time, as calls are: steps 0-2 hold [0, 50), [100, 150), [200, 250) us
    assert [r[6] for r in got[False]] == [0, 0, None, None, 1, None, None, 2, 2, None]
    assert got[True][2][1:6] == (6, 60_500, None, "log0", "msg 2 \u00e9")


def test_a_ranges_recorded_domain_null_and_absent_are_told_apart():
    """"cuptiprof domain": a name is that NVTX domain, null NVTX's default domain (-1), and no
    such key the category's own (XDOMAIN_ABSENT): alike in both decoders."""
    text = doc({"ph": "X", "cat": "user_annotation", "name": "a", "ts": 1, "dur": 1,
                "args": {"cuptiprof domain": "nccl"}},
               {"ph": "X", "cat": "user_annotation", "name": "b", "ts": 2, "dur": 1,
                "args": {"cuptiprof domain": None}},
               {"ph": "X", "cat": "user_annotation", "name": "c", "ts": 3, "dur": 1,
                "args": {"External id": 4}},
               {"ph": "X", "cat": "user_annotation", "name": "d", "ts": 4, "dur": 1,
                "args": {"cuptiprof kind": "warmup"}})
    got, ref, _, small = both(text)
    for p in (got, ref) if got is not None else (ref,):
        rows = p.I[np.argsort(p.I[:, P.C_IDX])]
        assert [small.strings[rows[0, P.C_XDOMAIN]]] == ["nccl"]
        assert rows[1:, P.C_XDOMAIN].tolist() == [-1, P.XDOMAIN_ABSENT, P.XDOMAIN_ABSENT]
    if got is not None:
        assert_same(got, ref, small)


def test_a_loose_arg_that_is_a_bool_is_absent():
    """Args another writer may fill with anything ("External id", "Addr", ...) are read where
    they are integers: true or false there is no value, in both decoders."""
    text = doc({**KERNEL, "args": {**KERNEL["args"], "External id": True, "Addr": False,
                                   "cuptiprof step": True, "graph id": True}},
               {**KERNEL, "args": {**KERNEL["args"], "External id": 3}})
    got, ref, _, small = both(text)
    for p in (got, ref) if got is not None else (ref,):
        rows = p.I[np.argsort(p.I[:, P.C_IDX])]
        for k in ("ext_id", "mem_addr", "xstep", "xgraph"):
            assert ((rows[:, P.C_VALID] >> P.A[k]) & 1).tolist() == [0, k == "ext_id"], k
    if got is not None:
        assert_same(got, ref, small)


def test_flow_arrows_are_left_out_and_counted():
    """A third of a modern trace's events are flow arrows (ac2g s/f), of which the importer reads
    nothing: the scanner keeps no row for them, and still counts them."""
    got, ref, _, small = both(TAKEN["flow arrows are counted, not kept"])
    assert got.events == ref.events == 9
    kept = sorted(got.I[:, P.C_IDX].tolist())
    assert kept == [1, 6, 7]   # the kernel, the "X" of a flow category, an unknown category
    # the scanner's list of flow categories is the importer's
    for cat in sorted(kineto.FLOW) + ["AC2G"]:
        got, _, _, _ = both(doc({"ph": "s", "cat": cat, "ts": 1}, KERNEL))
        assert got.events == 2 and got.I[:, P.C_IDX].tolist() == [1], cat
