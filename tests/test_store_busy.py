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
import pytest

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


# -- the native islands (cuptiprof/store/_islands.c) and the numpy path ----------------------

def test_the_islands_extension_is_built():
    """CI has a compiler and Python headers: a missing extension is a failed build, not a
    silent fallback to the numpy path."""
    from cuptiprof.store import _islands, summary
    assert _islands.API == 1 and summary._islands is _islands


def brute_islands(starts, ends) -> list[tuple[int, int]]:
    """The union of closed intervals (touching ones merge), plainly."""
    out: list[list[int]] = []
    for s, e in sorted(zip(starts, ends)):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(x) for x in out]


def wrapped(x: int) -> int:
    """x as int64 arithmetic leaves it: busy time past 2**63 (garbage timestamps) wraps, as
    _islands.c documents."""
    return (x + 2**63) % 2**64 - 2**63


I64 = np.iinfo(np.int64)
# int64's ends, where comparisons and lengths go wrong first, and small values that touch
EDGES = np.array([I64.min, I64.min + 1, -7, -1, 0, 1, 3, 5, 10, I64.max - 1, I64.max], np.int64)


def small_rows(rng, n: int, k: int):
    """(codes, starts, ends) of n intervals in k groups: at int64's ends, small ones (touching,
    identical starts, zero-length), or many small islands (past the first array's room)."""
    how = rng.random()
    if how < 0.4:
        v = rng.choice(EDGES, (n, 2))
    elif how < 0.7:
        v = rng.integers(-3, 12, (n, 2))
    else:
        s = rng.integers(0, 60, n) * 2
        v = np.stack([s, s + rng.choice([0, 1, 2], n)], axis=1)
    v = np.sort(v.astype(np.int64), axis=1)
    return rng.integers(0, k, n).astype(np.int64), v[:, 0].copy(), v[:, 1].copy()


def make_rows(rng, kind: str, n: int, k: int):
    """(codes, starts, ends) of n rows in k groups, in the given kind of order."""
    codes = rng.integers(0, k, n).astype(np.int64)
    if kind == "random":
        starts = rng.integers(-10**6, 10**6, n)
        ends = starts + rng.integers(0, 5_000, n)
    elif kind == "nearly":  # launch order on a few streams: starts nearly sorted
        starts = np.cumsum(rng.integers(0, 3_000, n)) + rng.integers(0, 4_000, n)
        ends = starts + rng.integers(1_000, 6_000, n)
    elif kind == "reverse":  # disjoint intervals, latest first: the walk back gives up
        starts = np.arange(n, 0, -1, dtype=np.int64) * 10
        ends = starts + 5
    elif kind == "touching":  # islands that touch end to start, and zero-length intervals
        starts = rng.integers(0, 200, n) * 10
        ends = starts + rng.choice([0, 0, 10, 20], n)
    else:
        raise ValueError(kind)
    return codes, starts.astype(np.int64), ends.astype(np.int64)


KINDS = ("random", "nearly", "reverse", "touching")


@pytest.fixture(params=["native", "numpy"])
def busy_path(request, monkeypatch):
    """BusySummary with the native islands, or with the module away (the numpy path)."""
    from cuptiprof.store import summary
    monkeypatch.delenv("CUPTIPROF_NATIVE", raising=False)
    if request.param == "numpy":
        monkeypatch.setattr(summary, "_islands", None)
    elif summary._islands is None:
        pytest.skip("the islands extension is not built (see test_the_islands_extension_is_built)")
    return request.param


def unpack(res, k):
    store, summary = res
    count, busy, first, last = np.frombuffer(summary, np.int64).reshape(4, k).tolist()
    got = {}
    for g in range(k):
        s, e = (np.frombuffer(x, np.int64).tolist() for x in store.get(g))
        assert len(s) == count[g] and len(store) == k
        if s:
            assert busy[g] == wrapped(sum(b - a for a, b in zip(s, e)))
            assert (first[g], last[g]) == (s[0], e[-1])
            got[g] = list(zip(s, e))
    return got


@pytest.mark.parametrize("kind", ("random", "nearly", "touching"))
def test_native_islands_equal_a_plain_union(kind):
    from cuptiprof.store import _islands
    rng = np.random.default_rng(KINDS.index(kind))
    for trial in range(30):
        n, k = int(rng.integers(1, 4000)), int(rng.integers(1, 7))
        codes, starts, ends = make_rows(rng, kind, n, k)
        want = {g: brute_islands(starts[codes == g].tolist(), ends[codes == g].tolist())
                for g in range(k) if (codes == g).any()}
        for c in (codes, codes.astype(np.int32)):
            assert unpack(_islands.islands([(c, starts, ends)], k), k) == want
        # Cut into parts (one with its own numbering through a remap, one of a single group),
        # and the islands of a first call continued by a second: the same union.
        cut = int(rng.integers(0, n + 1))
        perm = rng.permutation(k)
        first = _islands.islands([(codes[:cut], starts[:cut], ends[:cut])], k)
        single = codes[cut:] == 0
        c, s, e = codes[cut:], starts[cut:], ends[cut:]
        rest = [(perm.argsort()[c[~single]], s[~single], e[~single], perm),
                (0, s[single], e[single])]
        seeds = [(g, first[0], g) for g in range(k)]
        assert unpack(_islands.islands(seeds + rest, k), k) == want


def test_native_islands_give_up_far_from_start_order():
    from cuptiprof.store import _islands
    rng = np.random.default_rng(5)
    codes, starts, ends = make_rows(rng, "reverse", 3000, 1)
    assert _islands.islands([(codes, starts, ends)], 1) is None
    # A few rows out of order are cheap, unless the bound is tiny.
    codes, starts, ends = make_rows(rng, "nearly", 3000, 2)
    assert _islands.islands([(codes, starts, ends)], 2) is not None
    assert _islands.islands([(codes, starts, ends)], 2, limit=0) is None
    assert _islands.islands([(codes, starts[::-1].copy(), ends[::-1].copy())], 2, limit=10**9)


def test_native_islands_reject_bad_input():
    from cuptiprof.store import _islands
    s = np.arange(5, dtype=np.int64)
    c = np.zeros(5, np.int64)
    assert unpack(_islands.islands([], 3), 3) == {}
    with pytest.raises(ValueError, match="out of range"):
        _islands.islands([(c + 3, s, s)], 3)
    with pytest.raises(ValueError, match="out of range"):
        _islands.islands([(c - 1, s, s)], 3)
    with pytest.raises(ValueError, match="out of range"):
        _islands.islands([(c + 1, s, s, np.array([0], np.int64))], 3)
    with pytest.raises(ValueError, match="out of range"):
        _islands.islands([(7, s, s)], 3)
    with pytest.raises(ValueError, match="ends before"):
        _islands.islands([(c, s, s - 1)], 3)
    with pytest.raises(ValueError, match="length"):
        _islands.islands([(c, s, s[:4])], 3)
    with pytest.raises(TypeError):
        _islands.islands([(c, s.astype(np.float64), s)], 3)
    with pytest.raises(TypeError):
        _islands.islands([(c.astype(np.int16), s, s)], 3)
    with pytest.raises((TypeError, ValueError)):
        _islands.islands([(c, s[::2], s[::2])], 3)  # not contiguous
    with pytest.raises(TypeError):
        _islands.islands([(c, s)], 3)


def test_native_islands_from_threads():
    """The loop runs without the GIL; calls in threads (sharing the arrays kept for reuse) give
    the same islands."""
    import threading
    from cuptiprof.store import _islands
    rng = np.random.default_rng(9)
    codes, starts, ends = make_rows(rng, "nearly", 200_000, 3)
    want = unpack(_islands.islands([(codes, starts, ends)], 3), 3)
    got, errors = [], []

    def work():
        try:
            for _ in range(5):
                got.append(unpack(_islands.islands([(codes, starts, ends)], 3), 3) == want)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == [True] * 15
    _islands.trim()


def test_native_islands_take_seeds_and_rows_in_any_order():
    """Parts are read in order: islands of an earlier result may come after rows, several into
    one group; the islands are the plain union all the same (int64's ends, touching, identical
    and zero-length intervals, more islands than a group's first array holds)."""
    isl = pytest.importorskip("cuptiprof.store._islands")
    rng = np.random.default_rng(31)
    for _ in range(500):
        n, k = int(rng.integers(0, 50)), int(rng.integers(1, 4))
        codes, starts, ends = small_rows(rng, n, k)
        want = {g: brute_islands(starts[codes == g].tolist(), ends[codes == g].tolist())
                for g in range(k) if (codes == g).any()}
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 4))))
        parts = []
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n]):
            c, s, e = codes[lo:hi], starts[lo:hi], ends[lo:hi]
            if rng.random() < 0.5:
                parts.append((c, s, e))
            else:  # these rows as islands of an earlier call, a seed per group
                store = isl.islands([(c, s, e)], k)[0]
                parts += [(g, store, g) for g in range(k)]
        parts = [parts[i] for i in rng.permutation(len(parts))]
        assert unpack(isl.islands(parts, k), k) == want


def test_native_islands_exact_cases():
    isl = pytest.importorskip("cuptiprof.store._islands")
    c = np.zeros(5, np.int64)
    s, e = np.array([0, 10, 5, 30, 30], np.int64), np.array([10, 20, 5, 30, 40], np.int64)
    store, summary = isl.islands([(c, s, e)], 1)  # touching intervals merge, a point inside too
    assert np.frombuffer(summary, np.int64).tolist() == [2, 30, 0, 40]
    assert unpack((store, summary), 1) == {0: [(0, 20), (30, 40)]}
    # A late row that bridges islands is merged back from the end: work that counts toward
    # giving up, whether it comes as a row or as a seed.
    s, e = np.array([0, 10, 20, 30, 5], np.int64), np.array([1, 11, 21, 31, 25], np.int64)
    assert unpack(isl.islands([(c, s, e)], 1), 1) == {0: [(0, 1), (5, 25), (30, 31)]}
    assert isl.islands([(c, s, e)], 1, limit=0) is None
    late = isl.islands([(0, s[4:], e[4:])], 1)[0]
    assert unpack(isl.islands([(0, s[:4], e[:4]), (0, late, 0)], 1), 1) == \
        {0: [(0, 1), (5, 25), (30, 31)]}
    assert isl.islands([(0, s[:4], e[:4]), (0, late, 0)], 1, limit=0) is None
    # Spans past int64 wrap: [MIN, -7] and [-1, MAX] are 2**64 - 7 long.
    s, e = np.array([-1, I64.min], np.int64), np.array([I64.max, -7], np.int64)
    got = np.frombuffer(isl.islands([(0, s, e)], 1)[1], np.int64).tolist()
    assert got == [2, -7, I64.min, I64.max]
    # A group whose island array is full (16 after trim()): a seed that touches its last
    # island extends it, the next one is appended.
    s16 = np.arange(16, dtype=np.int64) * 10
    more = isl.islands([(0, np.array([151, 160], np.int64), np.array([155, 161], np.int64))], 1)[0]
    isl.trim()
    got = unpack(isl.islands([(0, s16, s16 + 1), (0, more, 0)], 1), 1)[0]
    assert got == [(x, x + 1) for x in range(0, 150, 10)] + [(150, 155), (160, 161)]


def test_native_islands_reject_a_group_or_index_just_out_of_range():
    isl = pytest.importorskip("cuptiprof.store._islands")
    s, c = np.arange(5, dtype=np.int64), np.zeros(5, np.int64)
    store = isl.islands([(c, s, s)], 2)[0]
    for bad in ([(2, s, s)], [(2, store, 0)], [(c + 2, s, s)], [(c + 2, s, s, None)]):
        with pytest.raises(ValueError, match="out of range"):
            isl.islands(bad, 2)
    with pytest.raises(ValueError, match="seed"):
        isl.islands([(0, store, 2)], 2)
    for g in (2, -1):
        with pytest.raises(IndexError):
            store.get(g)
    for codes in (c[:4], c[:4].astype(np.int32)):
        with pytest.raises(ValueError, match="length"):
            isl.islands([(codes, s, s)], 2)


def test_busy_past_int64_wraps_the_same_on_both_paths(busy_path):
    """Garbage timestamps at int64's ends: busy time wraps as int64 does, on both paths and
    whatever the batching (never a number too large for step_busy's BIGINT)."""
    rng = np.random.default_rng(41)
    allkeys = [(1, g, None) for g in range(3)]
    for _ in range(300):
        n, k = int(rng.integers(1, 12)), int(rng.integers(1, 4))
        codes, starts, ends = small_rows(rng, n, k)
        codes = np.sort(codes)  # groups one after another, cut into batches below
        batches = []
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 3))))
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n]):
            if hi > lo:
                present = sorted(set(codes[lo:hi].tolist()))
                local = np.searchsorted(present, codes[lo:hi]).astype(np.int32)
                batches.append([([allkeys[g] for g in present], local, starts[lo:hi],
                                 ends[lo:hi])])
        want_done, want_dirty = expected_finish(batches)
        done, dirty, _ = run_summary(batches)
        assert (done, dirty) == (want_done, want_dirty)


def expected_finish(batches) -> tuple[dict, set]:
    """What BusySummary.finish() must give for these batches (lists of (keys, codes, starts,
    ends) parts): busy/start/end from a plain union per group, and the groups seen again after
    a batch without them (recomputed from the table instead)."""
    seen: dict[tuple, list[int]] = {}
    rows: dict[tuple, tuple[list, list]] = {}
    for b, parts in enumerate(batches):
        for keys, codes, starts, ends in parts:
            for g, key in enumerate(keys):
                m = codes == g
                if not m.any():
                    continue
                if seen.setdefault(key, [])[-1:] != [b]:
                    seen[key].append(b)
                r = rows.setdefault(key, ([], []))
                r[0].extend(starts[m].tolist())
                r[1].extend(ends[m].tolist())
    dirty = {key for key, bs in seen.items() if bs != list(range(bs[0], bs[-1] + 1))}
    done = {}
    for key, (s, e) in rows.items():
        if key not in dirty:
            isl = brute_islands(s, e)
            done[key] = (wrapped(sum(b - a for a, b in isl)), isl[0][0], isl[-1][1])
    return done, dirty


def run_summary(batches):
    from cuptiprof.store.summary import BusySummary
    summary = BusySummary()
    for parts in batches:
        summary.add(parts)
    rows, dirty = summary.finish()
    return {r[:3]: r[3:] for r in rows}, set(dirty), (rows, dirty)


def random_batches(rng, kind: str, nbatches: int):
    """Batches of one or two parts (kernels, memcpys) whose groups (pid, device, step) span
    batches: each group's rows are cut at random batch boundaries."""
    n, k = int(rng.integers(500, 4000)), int(rng.integers(1, 6))
    codes, starts, ends = make_rows(rng, kind, n, k)
    order = np.argsort(codes, kind="stable")  # groups one after another, as steps come
    codes, starts, ends = codes[order], starts[order], ends[order]
    allkeys = [(7, d % 2, d // 2 if d else None) for d in range(k)]
    cuts = np.sort(rng.integers(0, n + 1, nbatches - 1))
    batches = []
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n]):
        c, s, e = codes[lo:hi], starts[lo:hi], ends[lo:hi]
        present = sorted(set(c.tolist()))
        if not present:
            continue
        parts = []
        two = rng.random() < 0.5 and len(c) > 1
        for sel in ((slice(None),) if not two else (slice(0, None, 2), slice(1, None, 2))):
            cc, ss, ee = c[sel], s[sel], e[sel]
            used = sorted(set(cc.tolist()))
            order_keys = list(rng.permutation(used)) if two else used
            keys = [allkeys[g] for g in order_keys]
            local = {g: i for i, g in enumerate(order_keys)}
            parts.append((keys, np.array([local[g] for g in cc.tolist()], np.int32),
                          ss.copy(), ee.copy()))
        batches.append(parts)
    return batches


class Spy:
    """The islands module, counting the calls that gave up."""

    def __init__(self, module):
        self.module, self.API, self.calls, self.gave_up = module, module.API, 0, 0

    def islands(self, *a, **kw):
        r = self.module.islands(*a, **kw)
        self.calls += 1
        self.gave_up += r is None
        return r

    def trim(self):
        self.module.trim()


@pytest.mark.parametrize("kind", KINDS)
def test_busy_summary_equals_a_plain_union_across_batches(busy_path, kind, monkeypatch):
    from cuptiprof.store import summary as S
    spy = None
    if busy_path == "native":
        spy = Spy(S._islands)
        monkeypatch.setattr(S, "_islands", spy)
    rng = np.random.default_rng(100 + KINDS.index(kind))
    for trial in range(12):
        batches = random_batches(rng, kind, int(rng.integers(1, 6)))
        if trial % 3 == 2 and len(batches) > 2:  # a piece of an early group arrives late
            batches.append(batches[0])
        want_done, want_dirty = expected_finish(batches)
        done, dirty, _ = run_summary(batches)
        assert dirty == want_dirty
        assert done == want_done
    if spy:  # the reversed rows take the numpy path (the native walk back gives up)
        assert spy.calls and (spy.gave_up > 0) == (kind == "reverse")


def test_both_paths_finish_the_same_also_when_the_native_gives_up_midway(monkeypatch):
    """The same batches, native and numpy, give the same finish() (row order included); a
    batch where the native call gives up (reversed rows) hands its groups to the numpy path and
    the next batch back to the native one."""
    from cuptiprof.store import summary as S
    if S._islands is None:
        pytest.skip("the islands extension is not built")
    monkeypatch.delenv("CUPTIPROF_NATIVE", raising=False)
    module = S._islands
    rng = np.random.default_rng(21)
    for trial in range(8):
        kinds = [("nearly", "reverse", "nearly", "touching")[(trial + i) % 4] for i in range(4)]
        batches = []
        for b, kind in enumerate(kinds):  # the same three groups in most batches (spanning
            codes, starts, ends = make_rows(rng, kind, int(rng.integers(1500, 3000)), 3)
            keys = [(1, 0, 5), (1, 1, 5), (1, 0, None)]  # them all), later batches later in time
            if kind == "reverse":  # one group only (the other two are still open after it)
                codes, keys = np.zeros_like(codes), keys[:1]
            at = b * 10**8 - int(rng.integers(0, 10**4))  # a little overlap with the batch before
            batches.append([(keys, codes, starts + at, ends + at)])
        want_done, want_dirty = expected_finish(batches)
        spy = Spy(module)
        monkeypatch.setattr(S, "_islands", spy)
        native = run_summary(batches)
        assert spy.gave_up == 1 and spy.calls == 4
        monkeypatch.setattr(S, "_islands", None)
        numpy = run_summary(batches)
        assert native[2] == numpy[2]
        assert native[0] == want_done and native[1] == want_dirty


def test_cuptiprof_native_0_takes_the_numpy_path(monkeypatch):
    from cuptiprof.store import summary as S
    if S._islands is None:
        pytest.skip("the islands extension is not built")
    spy = Spy(S._islands)
    monkeypatch.setattr(S, "_islands", spy)
    monkeypatch.setenv("CUPTIPROF_NATIVE", "0")
    rng = np.random.default_rng(2)
    batches = random_batches(rng, "nearly", 3)
    assert run_summary(batches)[:2] == expected_finish(batches)
    assert spy.calls == 0


def test_a_row_that_ends_before_it_starts_is_in_no_window_stored_or_folded(tmp_path, monkeypatch):
    """A damaged row (end before start) is no work: the steps report's GPU window and busy time
    are those of the other rows, whether read from step_busy or folded from the rows."""
    import cuptiprof.analyse.profile as profile

    t, us = 1_700_000_000_000_000_000, 1_000
    path = tmp_path / "a.duckdb"
    with Writer(path, RunInfo(source="synthetic"), pid=5) as w:
        w.append({"kernels": {"device_id": pa.array([0, 0, 0], pa.int32()),
                              "stream_id": pa.array([7, 7, 7], pa.int32()), "name": ["a", "b", "bad"],
                              "step": pa.array([1, 1, 1], pa.int32()),
                              "start_ns": [t + 100 * us, t + 300 * us, t],
                              "end_ns": [t + 200 * us, t + 400 * us, t - 50 * us]}})

    def window_busy():
        with cuptiprof.open(path) as prof:
            rel = prof.steps()
            (row,) = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
            return prof.stored_busy, round(row["gpu_window_ms"], 6), round(row["busy_ms"], 6)

    assert window_busy() == (True, 0.3, 0.2)
    monkeypatch.setattr(profile, "has_stored_busy", lambda con, db="": False)
    assert window_busy() == (False, 0.3, 0.2)


def test_zero_length_work_and_rows_without_times_are_stored_as_the_rows_fold_them(tmp_path):
    """A zero-length kernel is work of its step (busy 0, its window a point); a copy without a
    start or an end (or a memset without an end column) is no work. The stored summary says what the fold of the rows says."""
    i32 = lambda v: pa.array(v, pa.int32())  # noqa: E731
    for through_con in (False, True):   # kept while appending, or recomputed at close
        path = tmp_path / f"z{through_con}.duckdb"
        with Writer(path, RunInfo(source="synthetic"), pid=3) as w:
            w.append({"kernels": {"device_id": i32([0, 0]), "stream_id": i32([1, 1]),
                                  "name": ["a", "b"], "step": i32([1, 2]),
                                  "start_ns": [100, 500], "end_ns": [100, 900]},
                      "memcpys": {"device_id": i32([0, 0]), "step": i32([2, 2]),
                                  "copy_kind": ["HtoD"] * 2, "bytes": [8, 8],
                                  "start_ns": pa.array([None, 950], pa.int64()),
                                  "end_ns": pa.array([2_000, None], pa.int64())},
                      # no end_ns column at all: no work either
                      "memsets": {"device_id": i32([0]), "step": i32([2]), "bytes": [4],
                                  "start_ns": [300]}})
            if through_con:
                w.con.execute("UPDATE memcpys SET bytes = 16")
        with cuptiprof.open(path) as prof:
            assert prof.stored_busy
            assert stored(prof) == computed(prof) == \
                [(1, 3, 0, 1, 0, 100, 100), (1, 3, 0, 2, 400, 500, 900)]


def test_rows_of_many_groups_go_to_their_own_group():
    """More groups in one batch than a 16-bit code holds (the group codes are sorted as int16
    only below that): every group still gets exactly its own rows."""
    from cuptiprof.store.summary import _in_start_order

    k = 40_000
    rng = np.random.default_rng(5)
    codes = rng.permutation(np.repeat(np.arange(k, dtype=np.int32), 2))
    starts = codes.astype(np.int64) * 10
    ends = starts + 1 + codes % 3
    got = [(c, s.tolist(), e.tolist()) for c, s, e in _in_start_order(starts, ends, codes, k)]
    assert got == [(c, [10 * c] * 2, [10 * c + 1 + c % 3] * 2) for c in range(k)]


def test_work_without_a_step_or_device_column_is_stored_under_null(tmp_path):
    """A batch without the step (or device_id) column: its rows have none, and the stored busy
    time is under step NULL, not under step 0."""
    path = tmp_path / "n.duckdb"
    with Writer(path, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"kernels": {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([1], pa.int32()),
                              "name": ["a"], "step": pa.array([0], pa.int32()),
                              "start_ns": [100], "end_ns": [200]},
                  "memsets": {"start_ns": [300], "end_ns": [350], "bytes": [8]}})
    with cuptiprof.open(path) as prof:
        assert stored(prof) == computed(prof) == \
            [(1, 3, 0, 0, 100, 100, 200), (1, 3, None, None, 50, 300, 350)]


def test_kernels_without_a_step_among_kernels_with_one_are_stored_under_null(tmp_path):
    path = tmp_path / "s.duckdb"
    with Writer(path, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"kernels": {"device_id": pa.array([0, 0, 0], pa.int32()),
                              "stream_id": pa.array([1, 1, 1], pa.int32()), "name": ["a", "b", "c"],
                              "step": pa.array([0, 1, None], pa.int32()),
                              "start_ns": [100, 300, 600], "end_ns": [200, 450, 1_000]}})
    with cuptiprof.open(path) as prof:
        assert prof.stored_busy
        assert stored(prof) == computed(prof) == \
            [(1, 3, 0, 0, 100, 100, 200), (1, 3, 0, 1, 150, 300, 450), (1, 3, 0, None, 400, 600, 1_000)]


def test_a_group_whose_rows_all_end_before_they_start_is_no_group_of_the_batch(tmp_path, busy_path):
    """Step 1's only kernel ends before it starts: it is left out, and the steps on either side
    of it keep their own rows (the groups of the batch are numbered without it)."""
    from cuptiprof.store.summary import work_part
    t = pa.table({"pid": pa.array([3] * 4, pa.int32()), "device_id": pa.array([0] * 4, pa.int32()),
                  "step": pa.array([0, 1, 2, 2], pa.int32()),
                  "start_ns": pa.array([100, 500, 900, 950], pa.int64()),
                  "end_ns": pa.array([200, 400, 1_000, 1_200], pa.int64())})
    keys, codes, s, e = work_part(t)
    assert [keys[c] for c in codes.tolist()] == [(3, 0, 0), (3, 0, 2), (3, 0, 2)] and len(keys) == 2
    assert s.tolist() == [100, 900, 950] and e.tolist() == [200, 1_000, 1_200]
    path = tmp_path / "r.duckdb"
    with Writer(path, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"kernels": {"device_id": t["device_id"], "stream_id": pa.array([1] * 4, pa.int32()),
                              "name": ["a", "b", "c", "d"], "step": t["step"],
                              "start_ns": t["start_ns"], "end_ns": t["end_ns"]}})
    with cuptiprof.open(path) as prof:
        assert prof.stored_busy
        assert stored(prof) == computed(prof) == [(1, 3, 0, 0, 100, 100, 200), (1, 3, 0, 2, 300, 900, 1_200)]


def test_a_batch_without_work_ends_what_the_previous_batch_left_open(busy_path):
    """A group is kept open for the next batch only: after a batch without work, the group's
    next rows are recomputed from the table, not added to islands it no longer keeps."""
    from cuptiprof.store.summary import BusySummary
    g = (3, 0, 0)
    part = lambda a, b: ([g], np.zeros(1, np.int64), np.array([a], np.int64), np.array([b], np.int64))  # noqa: E731
    s = BusySummary()
    s.add([part(100, 200)])
    s.add([])
    s.add([part(300, 400)])
    assert s.finish() == ([], [g])
    s = BusySummary()
    s.add([part(100, 200)])
    s.add([part(300, 400)])   # the next batch: the same group, still open
    assert s.finish() == ([(*g, 200, 100, 400)], [])
