"""decode: real cupti-python record objects -> primitive row tuples (no record object kept)."""
from __future__ import annotations

from cupti import cupti

from cuptiprof.collect import decode
from cuptiprof.collect.fake import CLASSES, FakeCupti


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
