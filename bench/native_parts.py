"""CPU time of the parts that have a native (C) and a numpy/msgspec path, each both ways in one
run: the Writer's distinct-row pass (lanes, launch configurations) and busy-time summary on the
ingest benchmark's kernel batches, and the decoding of Kineto trace pieces.

    python bench/native_parts.py [--rows 4000000] [--repeat 7] [TRACE.json.gz ...]

Store parts: the batches of bench/ingest.py (1 M rows each) go through a Writer once, which
records the tables `distinct_rows` and the work parts `BusySummary.add` were given; each is then
timed alone, ns per kernel row, median [min] of --repeat runs. Decoding: each trace's text cut
into pieces as the importer cuts it, then every piece decoded by the native scanner and by
msgspec (into the same columns), ms per trace, median [min]. The script checks that both paths
find the same number of distinct rows and events and the same busy times (the tests compare
everything).
"""
from __future__ import annotations

import argparse
import gzip
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import kernel_batches  # noqa: E402

import cuptiprof.store.summary as S  # noqa: E402
import cuptiprof.store.writer as W  # noqa: E402
from cuptiprof.interop import pieces as P  # noqa: E402
# iter_docs and the _decode it calls (replaced in decoding(): the pieces it decodes are kept)
from cuptiprof.interop.kineto import text as K  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
TRACES = ["hta/df_index_resolver/df_index_resolver.json.gz",
          "kineto-tbplugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
          "hta/negative_queue_length_values_check/rank0.json.gz"]


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        c = time.process_time()
        fn()
        out.append(time.process_time() - c)
    return out


def both_ways(fn, repeat: int) -> dict[str, tuple[list[float], object]]:
    """fn timed with the native parts on and off (CUPTIPROF_NATIVE), with its last result."""
    got = {}
    for way, flag in (("native", "1"), ("numpy", "0")):
        os.environ["CUPTIPROF_NATIVE"] = flag
        result = fn()
        got[way] = (timed(fn, repeat), result)
    os.environ.pop("CUPTIPROF_NATIVE")
    return got


def line(label: str, got: dict, scale: float, unit: str) -> None:
    print(f"{label:34s} " + "   ".join(
        f"{way} {statistics.median(t) * scale:7.1f} [{min(t) * scale:.1f}] {unit}"
        for way, (t, _) in got.items()))


def store_parts(rows: int, repeat: int) -> None:
    batches = kernel_batches(rows, 1_000_000)
    n = sum(b.num_rows for b in batches)
    tables, parts = [], []
    orig_distinct, orig_add = W.distinct_rows, S.BusySummary.add
    W.distinct_rows = lambda t: (tables.append(t), orig_distinct(t))[1]
    S.BusySummary.add = lambda self, p: (parts.append(p), orig_add(self, p))[1]
    try:
        with W.Writer(Path(tempfile.mkdtemp()) / "x.duckdb", W.RunInfo(source="synthetic")) as w:
            for b in batches:
                w.append({"kernels": b})
    finally:
        W.distinct_rows, S.BusySummary.add = orig_distinct, orig_add
    print(f"store parts: {n:,} kernel rows in {len(batches)} batches, ns per row, "
          f"median [min] of {repeat}")
    for label, pick in (("distinct_rows, lanes", tables[0::2]), ("distinct_rows, configs", tables[1::2])):
        got = both_ways(lambda: [orig_distinct(t)[1] for t in pick], repeat)
        assert got["native"][1] == got["numpy"][1], "the two paths found different row counts"
        line(label, got, 1e9 / n, "ns")

    def busy():
        s = S.BusySummary()
        for p in parts:
            s.add(p)
        return s.finish()
    got = both_ways(busy, repeat)
    assert got["native"][1] == got["numpy"][1], "the two paths gave different busy times"
    line("BusySummary.add", got, 1e9 / n, "ns")


def decoding(traces: list[Path], repeat: int) -> None:
    print(f"decoding: CPU ms per trace, median [min] of {repeat}")
    for path in traces:
        with gzip.open(path) if path.suffix == ".gz" else open(path, "rb") as fh:
            text = fh.read()
        pieces = []
        orig = K._decode
        K._decode = lambda piece, *a: (pieces.append(bytes(piece)), orig(piece, *a))[1]
        try:
            for _ in K.iter_docs([text]):
                pass
        finally:
            K._decode = orig

        def decode():
            names, small = P.interner(), P.interner()
            if P.native_enabled():
                out = [P.scan(t, names, small, K._DECODER.decode) for t in pieces]
            else:
                out = [P.from_events(d.traceEvents or [], names, small, d)
                       for d in map(K._DECODER.decode, pieces)]
            return sum(p.events for p in out if p is not None)
        got = both_ways(decode, repeat)
        assert got["native"][1] == got["numpy"][1], f"{path.name}: the two paths differ"
        line(f"{path.name[:34]}", got, 1e3, "ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; native parts built: "
          f"scanner {P._native is not None}, islands {S._islands is not None}, "
          f"distinct rows {W._dedupe is not None}")
    store_parts(a.rows, a.repeat)
    traces = a.traces or [SHARED / t for t in TRACES if (SHARED / t).exists()]
    if traces:
        decoding(traces, a.repeat)


if __name__ == "__main__":
    main()
