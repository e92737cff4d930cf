"""decode: real cupti-python record objects -> primitive row tuples (no record object kept)."""
from __future__ import annotations

import gc

import duckdb
import numpy as np
from cupti import cupti

import cuptiprof
from cuptiprof.collect import decode
from cuptiprof.collect.fake import CLASSES, FakeCupti
from cuptiprof.collect.session import Session


def records(**kinds):
    keep = []
    return [FakeCupti.build(t, f, keep) for t, f in kinds.items()], keep


def test_every_decoded_field_exists_on_the_record_classes():
    for table, (members, fields) in decode.RECORDS.items():
        cls, dt = CLASSES["memcpy" if table == "memcpy_p2p" else table]
        if table == "memcpy_p2p":
            cls, dt = cupti.ActivityMemcpyPtoP4, cupti.activity_memcpy_pto_p4_dtype
        for f in fields:
            assert f.split(".")[0] in dt.names, (table, f)


def test_kernel_fields_copied_as_primitives():
    keep = []
    rec = FakeCupti.build("kernel", dict(kind=int(cupti.ActivityKind.CONCURRENT_KERNEL), start=10,
                                         end=25, correlation_id=7, stream_id=13, grid_x=128,
                                         name="_Z6kernelPfi", graph_id=0), keep)
    sink = decode.Sink(cupti.ActivityKind)
    sink.add([rec])
    rows = sink.drain()
    assert sink.drain()["kernel"] == []  # drained rows are gone from the sink
    (row,) = rows["kernel"]
    assert all(isinstance(v, (int, str)) for v in row)
    cols = decode.columns("kernel", rows["kernel"])
    assert (cols["start"], cols["end"], cols["correlation_id"], cols["stream_id"],
            cols["grid_x"], cols["name"]) == ((10,), (25,), (7,), (13,), (128,), ("_Z6kernelPfi",))


def test_dotted_fields_and_unknown_kinds():
    keep = []
    m = FakeCupti.build("marker", {"kind": int(cupti.ActivityKind.MARKER), "flags_": 2, "id": 4,
                                   "object_id.pt.thread_id": 99, "name": "attn",
                                   "domain": "torch"}, keep)
    other = FakeCupti.build("context", {"kind": int(cupti.ActivityKind.STREAM)}, keep)
    sink = decode.Sink(cupti.ActivityKind)
    sink.add([m, other])
    cols = decode.columns("marker", sink.drain()["marker"])
    assert (cols["thread_id"], cols["name"], cols["domain"]) == ((99,), ("attn",), ("torch",))
    assert sink.other == {int(cupti.ActivityKind.STREAM): 1}
    assert sink.records == 2


def test_names_that_are_not_utf8_are_decoded_with_replacement_characters():
    keep = []
    k = cupti.ActivityKind
    recs = [FakeCupti.build("marker", {"kind": int(k.MARKER), "flags_": 2, "id": 1,
                                       "name": b"caf\xe9", "domain": b"lib\xff"}, keep),
            FakeCupti.build("kernel", {"kind": int(k.CONCURRENT_KERNEL), "start": 1, "end": 2,
                                       "name": b"k\xe9rnel"}, keep),
            FakeCupti.build("device", {"kind": int(k.DEVICE), "id": 0,
                                       "name": b"GPU \xe9"}, keep)]
    for raw in ("1", "0"):  # the raw struct copy and the record-by-record path
        sink = decode.Sink(k)
        sink._raw = raw == "1"
        sink.add(recs)
        rows = sink.drain()
        m = decode.columns("marker", rows["marker"])
        assert (m["name"], m["domain"]) == (("caf\ufffd",), ("lib\ufffd",))
        assert decode.columns("kernel", rows["kernel"])["name"] == ("k\ufffdrnel",)
        assert decode.columns("device", rows["device"])["name"] == ("GPU \ufffd",)
        assert rows["decode_error"] == {}


class _Unreadable:
    """A record whose bindings raise on one field (a layout the bindings misread)."""

    def __init__(self, rec):
        self._rec = rec

    def __getattr__(self, name):
        if name == "name":
            raise RuntimeError("cannot read this record")
        return getattr(self._rec, name)


class _Fake(FakeCupti):
    """Delivers kernels named 'unreadable' as records the bindings cannot read."""

    def build(self, table, fields, keep):
        rec = FakeCupti.build(table, fields, keep)
        return _Unreadable(rec) if fields.get("name") == "unreadable" else rec


def _profile(tmp_path, fake, body):
    path = tmp_path / "d.duckdb"
    with Session(path, steps=3, source=fake, quiet=True):
        for i in range(3):
            with cuptiprof.range("step", step=i):
                body(fake, i)
    return duckdb.connect(str(path), read_only=True)


def test_a_marker_name_that_is_not_utf8_loses_nothing_of_its_buffer(tmp_path):
    def body(f, i):
        f.launch_kernel(f"k{i}")
        if i == 1:  # a C library's Latin-1 NVTX message and domain, in step 1's buffer
            f.nvtx_push(b"caf\xe9", domain=b"lib\xe9")
            f.launch_kernel("in_cafe")
            f.nvtx_pop()
        f.stream_synchronize()
    con = _profile(tmp_path, FakeCupti(), body)
    assert con.execute("SELECT name, step FROM kernels ORDER BY start_ns").fetchall() == [
        ("k0", 0), ("k1", 1), ("in_cafe", 1), ("k2", 2)]
    assert con.execute("SELECT step, count(*) FROM syncs GROUP BY step ORDER BY step"
                       ).fetchall() == [(0, 1), (1, 1), (2, 1)]
    assert con.execute("SELECT name, domain, step FROM ranges WHERE kind = 'user'").fetchall() == [
        ("caf\ufffd", "lib\ufffd", 1)]
    assert con.execute("SELECT check_name FROM data_quality").fetchall() == []


def test_an_unreadable_record_loses_only_itself_and_is_counted(tmp_path):
    def body(f, i):
        f.launch_kernel(f"k{i}")
        if i == 1:
            f.launch_kernel("unreadable")
            f.launch_kernel("after")
        f.stream_synchronize()
    con = _profile(tmp_path, _Fake(), body)
    assert con.execute("SELECT name, step FROM kernels ORDER BY start_ns").fetchall() == [
        ("k0", 0), ("k1", 1), ("after", 1), ("k2", 2)]
    assert con.execute("SELECT step, count(*) FROM syncs GROUP BY step ORDER BY step"
                       ).fetchall() == [(0, 1), (1, 1), (2, 1)]
    dq = con.execute("SELECT check_name, subject, count, detail FROM data_quality").fetchall()
    assert [r[:3] for r in dq] == [("decode_error", "kernel", 1)]
    assert "could not be read" in dq[0][3]


def test_device_uuid_is_written_in_nvidia_smis_form_and_a_zero_uuid_is_none():
    keep = []
    k = cupti.ActivityKind
    uuid = bytes(range(0xA0, 0xB0))
    recs = [FakeCupti.build("device", {"kind": int(k.DEVICE), "id": 0, "name": "GPU",
                                       "uuid": np.void(uuid)}, keep),
            FakeCupti.build("device", {"kind": int(k.DEVICE), "id": 1, "name": "GPU"}, keep)]
    for raw in ("1", "0"):
        sink = decode.Sink(k)
        sink._raw = raw == "1"
        sink.add(recs)
        rows = sink.drain()
        assert decode.columns("device", rows["device"])["id"] == (0, 1)
        assert rows["device_uuid"] == ["GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf", None]


def _unreadable_kernel(keep):
    return _Unreadable(FakeCupti.build("kernel", {"kind": int(cupti.ActivityKind.CONCURRENT_KERNEL),
                                                  "start": 9, "end": 10, "name": "x"}, keep))


def test_every_unreadable_record_of_a_buffer_is_counted():
    keep = []
    k = cupti.ActivityKind
    good = [FakeCupti.build("kernel", {"kind": int(k.CONCURRENT_KERNEL), "start": i + 1,
                                       "end": i + 2, "correlation_id": i, "name": f"k{i}"}, keep)
            for i in range(3)]
    bad = [_unreadable_kernel(keep) for _ in range(2)]
    sink = decode.Sink(k)
    sink.add([good[0], bad[0], good[1], bad[1], good[2]])
    rows = sink.drain()
    assert decode.columns("kernel", rows["kernel"])["name"] == ("k0", "k1", "k2")
    assert rows["decode_error"] == {"kernel": 2}
    assert sink.drain()["decode_error"] == {}


def test_unreadable_records_of_every_buffer_before_a_drain_are_counted():
    """CUPTI may hand over several buffers between two flushes: data_quality's 'decode_error'
    count is the sum of every buffer's unreadable records, not the last buffer's."""
    keep = []
    sink = decode.Sink(cupti.ActivityKind)
    sink.add([_unreadable_kernel(keep) for _ in range(2)])
    sink.add([_unreadable_kernel(keep)])
    assert sink.drain()["decode_error"] == {"kernel": 3}


def test_a_buffer_leaves_the_cyclic_gc_as_the_program_set_it():
    """The callback pauses the cyclic GC while it copies a buffer; a program that turned the
    GC off itself finds it off afterwards, one that had it on finds it on."""
    keep = []
    recs = [FakeCupti.build("kernel", {"kind": int(cupti.ActivityKind.CONCURRENT_KERNEL),
                                       "start": 1, "end": 2, "name": "k"}, keep)]
    sink = decode.Sink(cupti.ActivityKind)
    was = gc.isenabled()
    try:
        for on in (False, True):
            (gc.enable if on else gc.disable)()
            sink.add(recs)
            assert gc.isenabled() is on
    finally:
        (gc.enable if was else gc.disable)()
