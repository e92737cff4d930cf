"""Stored busy time (step_busy): what the writer keeps while appending, whatever the batching,
equals the union of intervals computed from the rows; files without it fall back to computing."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa

import cuptiprof
from cuptiprof.analyse import catalog
from cuptiprof.store.merge import merge_files
from cuptiprof.store.writer import RunInfo, Writer
from cuptiprof.synthetic import synthetic_batches

KEYS = "run_id, pid, device_id, step"


def computed(prof) -> list[tuple]:
    """Busy per group folded from every row (the view used when nothing is stored)."""
    views = catalog.scope_views("TRUE")   # every row, NULL steps included, as step_busy has
    prof.con.execute(f"CREATE OR REPLACE TEMP VIEW all_work AS {views['sel_work']}")
    sql = views["sel_busy"].replace("sel_work", "all_work")
    return sorted(prof.sql(f"SELECT {KEYS}, busy_ns, start_ns, end_ns FROM ({sql})").fetchall(),
                  key=repr)


def stored(prof) -> list[tuple]:
    return sorted(prof.sql(f"SELECT {KEYS}, busy_ns, start_ns, end_ns FROM step_busy").fetchall(),
                  key=repr)


def split(batch: dict, parts: int, rng) -> list[dict]:
    """Cut each table of a batch into `parts` pieces at random rows (a step spans batches)."""
    out = [dict() for _ in range(parts)]
    for name, cols in batch.items():
        t = cols if isinstance(cols, pa.Table) else pa.table(cols)
        cuts = np.sort(rng.integers(0, t.num_rows + 1, parts - 1))
        for i, (lo, hi) in enumerate(zip(np.r_[0, cuts], np.r_[cuts, t.num_rows])):
            if hi > lo:
                out[i][name] = t.slice(lo, hi - lo)
    return [b for b in out if b]


def test_stored_busy_equals_computed_whatever_the_batching(tmp_path):
    rng = np.random.default_rng(3)
    batches = list(synthetic_batches(steps=6, kernels_per_step=300, devices=2, seed=4))
    pieces = [p for b in batches for p in split(b, 3, rng)]
    late = pieces.pop(4)            # a piece of an early step arrives after later steps
    pieces.insert(len(pieces) - 3, late)
    path = tmp_path / "a.duckdb"
    with Writer(path, RunInfo(source="synthetic")) as w:
        for p in pieces:
            w.append(p)
    with cuptiprof.open(path) as prof:
        assert prof.stored_busy
        want = computed(prof)
        assert len(want) >= 12 and stored(prof) == want
        # Reports read the stored rows: same numbers as the fold.
        assert prof.sql("SELECT sum(busy_ns) FROM sel_busy").fetchall()[0][0] == sum(r[4] for r in want if r[3] is not None)


def test_rows_changed_through_the_connection_are_recomputed(tmp_path):
    path = tmp_path / "a.duckdb"
    with Writer(path, RunInfo(source="synthetic")) as w:
        for b in synthetic_batches(steps=3, kernels_per_step=200):
            w.append(b)
        w.con.execute("UPDATE kernel_rows SET step = 99 WHERE step = 2")
    with cuptiprof.open(path) as prof:
        assert prof.stored_busy and stored(prof) == computed(prof)
        assert any(r[3] == 99 for r in stored(prof))


def test_a_writer_that_died_leaves_no_summary_and_reports_fold_the_rows(tmp_path):
    path = tmp_path / "a.duckdb"
    code = textwrap.dedent(f"""
        import os, signal
        from cuptiprof.store.writer import Writer, RunInfo
        from cuptiprof.synthetic import synthetic_batches
        w = Writer({str(path)!r}, RunInfo(source="synthetic"))
        for b in synthetic_batches(steps=2, kernels_per_step=100):
            w.append(b)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=os.getcwd()),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    with cuptiprof.open(path) as prof:
        assert not prof.stored_busy
        assert prof.sql("SELECT count(*) FROM step_busy").fetchall()[0][0] == 0
        busy = prof.sql("SELECT sum(busy_ms) FROM (SELECT busy_ms FROM ({}))".format(
            catalog.report_sql("steps"))).fetchall()[0][0]
        assert busy > 0
    # Merging the file computes what it lacked.
    out = merge_files([path], tmp_path / "m.duckdb")
    with cuptiprof.open(out) as prof:
        assert prof.stored_busy and stored(prof) == computed(prof) and stored(prof)


def test_merge_copies_or_computes_stored_busy(tmp_path):
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    for path, pid in ((a, 11), (b, 12)):
        with Writer(path, RunInfo(source="synthetic"), pid=pid) as w:
            for batch in synthetic_batches(steps=3, kernels_per_step=150, pid=pid):
                w.append(batch)
    for one_run in (False, True):
        out = merge_files([a, b], tmp_path / f"m{one_run}.duckdb", one_run=one_run)
        with cuptiprof.open(out) as prof:
            assert prof.stored_busy
            assert stored(prof) == computed(prof)
            assert {r[1] for r in stored(prof)} == {11, 12}
    # The same part twice in one run: groups collide, so the merge computes the run again.
    out = merge_files([a, a], tmp_path / "twice.duckdb", one_run=True)
    with cuptiprof.open(out) as prof:
        assert stored(prof) == computed(prof)


def test_islands_equal_a_plain_union_for_any_order_of_groups_and_rows():
    from cuptiprof.store.summary import BusySummary, _in_start_order, _union_sorted
    rng = np.random.default_rng(11)
    for _ in range(60):
        n, k = int(rng.integers(1, 3000)), int(rng.integers(1, 6))
        starts = rng.integers(-10**6, 10**15, n) if rng.random() < 0.2 else rng.integers(0, 50_000, n)
        ends = starts + rng.integers(0, 2_000, n)
        codes = rng.integers(0, k, n).astype(np.int64)
        if rng.random() < 0.5:  # rows in (group, start) order: the no-sort paths
            o = np.lexsort((starts, codes))
            starts, ends, codes = starts[o], ends[o], codes[o]
        got = {c: tuple(x.tolist() for x in _union_sorted(s, np.maximum.accumulate(e)))
               for c, s, e in _in_start_order(starts, ends, codes, k)}
        summary = BusySummary()  # busy time from the running max equals the islands' length
        summary.add([([(c,) for c in range(k)], codes, starts, ends)])
        rows, _ = summary.finish()
        assert {r[0]: r[1:] for r in rows} == {
            c: (sum(e - s for s, e in zip(*v)), v[0][0], v[1][-1]) for c, v in got.items()}
        want = {}
        for c in range(k):
            iv = sorted(zip(starts[codes == c].tolist(), ends[codes == c].tolist()))
            out_s, out_e = [], []
            for s, e in iv:
                if out_e and s <= out_e[-1]:
                    out_e[-1] = max(out_e[-1], e)
                else:
                    out_s.append(s)
                    out_e.append(e)
            if iv:
                want[c] = (out_s, out_e)
        assert got == want
