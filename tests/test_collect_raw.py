"""decode's raw struct copy: the same rows as reading every field through the record object."""
from __future__ import annotations

import ctypes
import operator

import numpy as np
from cupti import cupti

from cuptiprof.collect import decode
from cuptiprof.collect.fake import FakeCupti

K = cupti.ActivityKind


def _mixed_buffer(keep: list) -> list:
    shared = ctypes.create_string_buffer(b"_Z4gemmPf")
    keep.append(shared)
    recs = []
    for i in range(6):
        recs.append(FakeCupti.build("api", dict(kind=int(K.RUNTIME), cbid=211, start=10 * i,
                                                end=10 * i + 5, thread_id=0xFFFFFFF0 + i,
                                                correlation_id=i + 1, return_value=i), keep))
        recs.append(FakeCupti.build("extcorr", dict(kind=int(K.EXTERNAL_CORRELATION),
                                                    external_kind=2, external_id=(1 << 62) + i,
                                                    correlation_id=i + 1), keep))
        name = ctypes.addressof(shared) if i % 2 else f"k{i % 3}"
        recs.append(FakeCupti.build("kernel", dict(kind=int(K.CONCURRENT_KERNEL), start=100 + i,
                                                   end=200 + i, correlation_id=i + 1, name=name,
                                                   stream_id=0xFFFFFFFF, grid_x=i,
                                                   graph_node_id=(1 << 40) + i), keep))
    recs.append(FakeCupti.build("memory", {"kind": int(K.MEMORY2), "memory_operation_type": 2,
                                           "address": (1 << 64) - 4096, "bytes": 64,
                                           "memory_pool_config.memory_pool_type": 1}, keep))
    recs.append(FakeCupti.build("memcpy", dict(kind=int(K.MEMCPY), copy_kind=2, bytes=1 << 40,
                                               flags_=1, correlation_id=9), keep))
    return recs


def _slow_rows(recs: list) -> dict[str, list]:
    """What one attrgetter per record reads, per table."""
    by_kind = {int(getattr(K, m)): (t, operator.attrgetter(*f))
               for t, (ms, f) in decode.RECORDS.items() for m in ms if hasattr(K, m)}
    out: dict[str, list] = {}
    for r in recs:
        t, g = by_kind[r.kind]
        out.setdefault(t, []).append(g(r))
    return out


def test_raw_copy_reads_what_the_accessors_read():
    keep: list = []
    recs = _mixed_buffer(keep)
    sink = decode.Sink(K)
    sink.add(recs[:7])
    sink.add(recs[7:])  # two buffers in one flush: chunks concatenate
    rows = sink.drain()
    for table, expected in _slow_rows(recs).items():
        got = rows[table]
        assert isinstance(got, decode.Rows) and got.chunks and not got.tuples, table
        assert list(got) == expected, table
    assert sink.records == len(recs)


def test_kernel_names_read_once_per_pointer_keep_row_order():
    keep: list = []
    sink = decode.Sink(K)
    sink.add(_mixed_buffer(keep))
    c = sink.drain()["kernel"].cols()
    assert c.strings("name") == ["k0", "_Z4gemmPf", "k2", "_Z4gemmPf", "k1", "_Z4gemmPf"]
    assert c.dicts["name"].count("_Z4gemmPf") == 1  # one read for the shared pointer
    assert c["graph_node_id"].tolist() == [(1 << 40) + i for i in range(6)]


def test_classes_without_a_dtype_fall_back_to_row_tuples(monkeypatch):
    keep: list = []
    recs = _mixed_buffer(keep)
    raw = decode.Sink(K)
    raw.add(recs)
    monkeypatch.setattr(decode, "raw_dtype", lambda cls, table: None)
    sink = decode.Sink(K)
    sink.add(recs)
    rows = sink.drain()
    for table, expected in _slow_rows(recs).items():
        assert not rows[table].chunks and rows[table].tuples == expected, table
    # both representations give the same columns
    a, b = raw.drain()["api"].cols(), rows["api"].cols()
    assert a.n == b.n == 6
    for name in a.data:
        assert np.array_equal(a[name].astype(np.int64), b[name].astype(np.int64)), name


def test_raw_copy_can_be_turned_off(monkeypatch):
    keep: list = []
    monkeypatch.setenv("CUPTIPROF_RAW_RECORDS", "0")
    sink = decode.Sink(K)
    sink.add(_mixed_buffer(keep))
    kernels = sink.drain()["kernel"]
    assert not kernels.chunks and len(kernels.tuples) == 6


def test_a_class_lacking_a_field_of_its_kind_is_not_copied_raw():
    """A record whose class lacks a field its kind's rows read (a plain MEMCPY struct delivered
    as MEMCPY2, which has no source and destination devices) is not copied raw, which would only
    fail later, at the flush, losing the flush: it is read field by field and counted as
    unreadable in the callback."""
    keep: list = []
    rec = FakeCupti.build("memcpy", dict(kind=int(K.MEMCPY2), bytes=64, correlation_id=1), keep)
    assert decode.raw_dtype(type(rec), "memcpy_p2p") is None
    assert decode.raw_dtype(type(rec), "memcpy") is not None
    sink = decode.Sink(K)
    sink.add([rec])
    rows = sink.drain()
    assert not rows["memcpy_p2p"] and rows["decode_error"] == {"memcpy_p2p": 1}
