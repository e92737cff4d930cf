"""cuptiprof.range and cuptiprof.step as a session records them: decorated generators and
coroutines, step numbers of other integer types, one range object used by several threads."""
from __future__ import annotations

import asyncio
import inspect
import sys
import threading

import pytest

import cuptiprof
from cuptiprof.collect.fake import FakeCupti
from cuptiprof.collect.session import Session
from _run_helpers import no_leftover_session, q  # noqa: F401 - the fixture is used by name


@pytest.fixture(autouse=True)
def _clean(no_leftover_session):
    yield



def kernels_by_range(path):
    """kernel name -> name of the range it was launched in."""
    return dict(q(path, "SELECT k.name, r.name FROM kernels k JOIN ranges r USING (range_id)"))


# -- the decorator on generators and coroutines ------------------------------------------------
def test_decorated_generator_range_covers_its_iteration(tmp_path):
    f = FakeCupti()

    @cuptiprof.range("gen")
    def gen(n):
        for i in range(n):
            f.launch_kernel(f"k_item{i}")
            got = yield i
            if got is not None:
                f.launch_kernel(f"k_sent{got}")
        return "done"

    assert inspect.isgeneratorfunction(gen) and gen.__name__ == "gen"
    p = tmp_path / "g.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            g = gen(3)
            assert next(g) == 0 and g.send(7) == 1 and next(g) == 2
            with pytest.raises(StopIteration) as stop:
                next(g)
            assert stop.value.value == "done"
    assert kernels_by_range(p) == {"k_item0": "gen", "k_sent7": "gen", "k_item1": "gen",
                                   "k_item2": "gen"}
    assert q(p, "SELECT name, parent_id IS NOT NULL FROM ranges ORDER BY range_id") == [
        ("step", False), ("gen", True)]


def test_generator_stopped_early_ends_its_range_normally(tmp_path):
    f = FakeCupti()

    @cuptiprof.step(0)
    def steps():
        while True:
            f.launch_kernel("k")
            yield

    p = tmp_path / "e.duckdb"
    with Session(p, source=f, quiet=True):
        for _ in zip(range(2), steps()):
            pass
    assert q(p, "SELECT name, kind, step FROM ranges") == [("step", "step", 0)]
    assert q(p, "SELECT count(*) FROM kernels WHERE step = 0") == [(2,)]
    # a consumer that stops early is no exception that ended the step
    assert q(p, "SELECT count(*) FROM data_quality WHERE check_name = 'step_incomplete'") == [(0,)]


def test_decorated_coroutine_and_async_generator_cover_their_run(tmp_path):
    f = FakeCupti()

    @cuptiprof.range("coro")
    async def coro():
        await asyncio.sleep(0)
        f.launch_kernel("k_coro")
        return 5

    @cuptiprof.range("agen")
    async def agen():
        for i in range(2):
            await asyncio.sleep(0)
            f.launch_kernel(f"k_agen{i}")
            try:
                got = yield i
            except KeyError:
                f.launch_kernel("k_thrown")
                got = yield -1
            if got is not None:
                f.launch_kernel(f"k_sent{got}")

    assert inspect.iscoroutinefunction(coro) and inspect.isasyncgenfunction(agen)

    async def main():
        assert await coro() == 5
        a = agen()
        assert await a.__anext__() == 0
        assert await a.athrow(KeyError("x")) == -1
        assert await a.asend(9) == 1
        with pytest.raises(StopAsyncIteration):
            await a.__anext__()

    p = tmp_path / "a.duckdb"
    with Session(p, source=f, quiet=True):
        with cuptiprof.step(0):
            asyncio.run(main())
    assert kernels_by_range(p) == {"k_coro": "coro", "k_agen0": "agen", "k_thrown": "agen",
                                   "k_sent9": "agen", "k_agen1": "agen"}


# -- one range object entered by several threads at once -------------------------------------
def test_one_range_object_shared_by_threads_closes_each_threads_own(tmp_path):
    f = FakeCupti()
    attn = cuptiprof.range("attn")   # module-level style: one object, both threads
    both_inside = threading.Barrier(2)
    first_out = threading.Event()

    def worker(k):
        for i in range(3):
            with cuptiprof.step(k * 10 + i):
                with attn:
                    f.launch_kernel(f"k{k}_{i}")
                    if i == 0:
                        both_inside.wait()
                        if k == 1:   # thread 0 leaves `attn` while thread 1 is still in it
                            first_out.wait()
                if i == 0 and k == 0:
                    first_out.set()

    p = tmp_path / "t.duckdb"
    with Session(p, source=f, quiet=True):
        ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
        [t.start() for t in ts]
        [t.join() for t in ts]
    rows = q(p, "SELECT a.step, s.step, a.thread_id = s.thread_id, a.end_ns <= s.end_ns "
                "FROM ranges a JOIN ranges s ON a.parent_id = s.range_id "
                "WHERE a.name = 'attn' ORDER BY a.step")
    # every attn range closed inside its own thread's step, under that step
    assert rows == [(s, s, True, True) for s in (0, 1, 2, 10, 11, 12)]
    assert q(p, "SELECT count(*) FROM ranges WHERE name = 'attn' AND parent_id IS NULL") == [(0,)]
    assert q(p, "SELECT k.name, k.step FROM kernels k JOIN ranges r USING (range_id) "
                "WHERE r.name = 'attn' ORDER BY k.step") == [
        ("k0_0", 0), ("k0_1", 1), ("k0_2", 2), ("k1_0", 10), ("k1_1", 11), ("k1_2", 12)]


# -- step numbers of any integer type ----------------------------------------------------------
def integer_steps():
    """(value given to cuptiprof.step, step stored): integers of every kind keep their number
    (a bool, a float or a str is refused at the call: test_markers.py)."""
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    return [(np.int64(999), 999), (np.uint16(979), 979), (np.array(959), 959),
            (torch.tensor(939), 939), (7, 7)]


def test_numpy_and_tensor_step_numbers_are_stored_as_given(tmp_path):
    cases = integer_steps()
    p = tmp_path / "n.duckdb"
    with Session(p, source=FakeCupti(), quiet=True):
        for given, _ in cases:
            with cuptiprof.step(given):
                pass
    assert q(p, "SELECT step FROM ranges WHERE kind = 'step' ORDER BY range_id") == [
        (want,) for _, want in cases]


def test_numpy_step_numbers_without_a_gpu_collector(tmp_path):
    from _run_helpers import cli, script

    p = script(tmp_path, """
        import numpy as np, cuptiprof
        for i, t in enumerate(np.array([999, 979, 959])):
            with cuptiprof.step(t):
                pass
        with cuptiprof.step(True):
            pass
    """)
    r = cli(["run", "-o", "r.duckdb", "--no-report", "--light", "--", sys.executable, p], tmp_path)
    # step(True) was numbered by its position, 3; the program now learns of its mistake
    assert r.returncode == 1, r.stderr
    assert "TypeError: cuptiprof.step: a step's number is an integer" in r.stderr
    assert q(tmp_path / "r.duckdb", "SELECT step FROM ranges WHERE kind = 'step' "
                                     "ORDER BY start_ns") == [(999,), (979,), (959,)]


def test_step_numbers_beyond_the_step_columns_are_said_once(tmp_path, monkeypatch, capsys):
    """A step numbered by a timestamp or a request id (beyond -2**31..2**31-1) is numbered by its
    position: that was done without a word, and the steps in the file were not the numbers the
    program gave. One line says so, for every such step."""
    from cuptiprof import markers

    monkeypatch.setattr(markers, "_beyond_said", False, raising=False)
    p = tmp_path / "b.duckdb"
    with Session(p, source=FakeCupti(), quiet=True):
        for n in (1796396050101877592, 7, -(1 << 40)):
            with cuptiprof.step(n):
                pass
    assert q(p, "SELECT step FROM ranges WHERE kind = 'step' ORDER BY range_id") == [(0,), (7,), (2,)]
    assert capsys.readouterr().err.splitlines() == [
        "cuptiprof: warning: step 1796396050101877592 is no step (steps are numbered from "
        "-2147483648 to 2147483647): it is numbered by its position among the steps, as is every "
        "other such step (said once)"]


def test_a_step_number_that_is_no_integer_under_profile(tmp_path):
    p = tmp_path / "p.duckdb"
    with pytest.raises(TypeError, match="not str '10'"):
        with cuptiprof.profile(p, source=FakeCupti(), quiet=True):
            with cuptiprof.step(1):
                pass
            with cuptiprof.step("10"):
                pass
    assert q(p, "SELECT step FROM ranges WHERE kind = 'step'") == [(1,)]
    assert q(p, "SELECT status FROM runs") == [("failed",)]


class Unprintable:
    def __str__(self):
        raise RuntimeError("no text")

    __repr__ = __str__


def odd_attrs() -> dict:
    """Attributes json.dumps(default=str) cannot write, each what it is stored as."""
    cycle: dict = {}
    cycle["self"] = cycle
    return {"mixed": ({1: "a", "b": 2}, "{1: 'a', 'b': 2}"), "cycle": (cycle, "{'self': {...}}"),
            "bad": (Unprintable(), "<Unprintable>"), "fine": ([1, "x"], [1, "x"])}


def test_attributes_json_cannot_hold_are_stored_as_text_and_ranges_go_on(tmp_path):
    """One such attribute made the range fail, and every range after it was no longer
    recorded (the rest of the run lost its steps)."""
    import json

    attrs = odd_attrs()
    f = FakeCupti()
    p = tmp_path / "a.duckdb"
    with Session(p, source=f, quiet=True):
        for i in range(3):
            with cuptiprof.step(i):
                with cuptiprof.range("odd", **{k: v for k, (v, _) in attrs.items()}):
                    f.launch_kernel(f"k{i}")
    assert q(p, "SELECT step, name FROM kernels ORDER BY step") == [(0, "k0"), (1, "k1"), (2, "k2")]
    stored = q(p, "SELECT attrs FROM ranges WHERE name = 'odd'")
    assert [json.loads(a) for a, in stored] == [{k: want for k, (_, want) in attrs.items()}] * 3
    assert q(p, "SELECT check_name FROM data_quality") == []


def test_odd_attributes_and_huge_step_numbers_without_a_gpu_collector(tmp_path):
    from _run_helpers import cli, script

    p = script(tmp_path, """
        import cuptiprof
        cycle = {}
        cycle["self"] = cycle
        for i in (3, 2 ** 40):
            with cuptiprof.step(i):
                with cuptiprof.range("odd", mixed={1: "a", "b": 2}, cycle=cycle):
                    pass
    """)
    r = cli(["run", "-o", "r.duckdb", "--no-report", "--light", "--", sys.executable, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "failed" not in r.stderr
    assert q(tmp_path / "r.duckdb", "SELECT kind, step, attrs FROM ranges ORDER BY start_ns") == [
        ("step", 3, None), ("user", 3, '{"cycle": "{\'self\': {...}}", "mixed": "{1: \'a\', \'b\': 2}"}'),
        ("step", 1, None), ("user", 1, '{"cycle": "{\'self\': {...}}", "mixed": "{1: \'a\', \'b\': 2}"}')]


def test_a_step_attribute_of_another_range_is_kept_as_an_attribute(tmp_path):
    """profile() dropped `step` from the attributes of every range; `cuptiprof run` kept it for
    ranges that are no step. Now both keep it there (the range is no step: steps are named
    'step', or profile(step_range=...))."""
    import json

    p = tmp_path / "s.duckdb"
    with Session(p, source=FakeCupti(), quiet=True):
        with cuptiprof.step(4, batch=2):
            with cuptiprof.range("denoise", step=9):
                with cuptiprof.step(5):   # a step inside a step: a range of it
                    pass
    rows = q(p, "SELECT name, kind, step, attrs FROM ranges ORDER BY depth")
    assert [(n, k, s, a and json.loads(a)) for n, k, s, a in rows] == [
        ("step", "step", 4, {"batch": 2}), ("denoise", "user", 4, {"step": 9}),
        ("step", "user", 4, None)]


def _strict(text: str):
    import json

    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


NONFINITE = {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"),
             "nested": [1.5, {"x": float("nan")}], "ok": 2.5}
NONFINITE_STORED = {"nan": None, "inf": None, "ninf": None, "nested": [1.5, {"x": None}], "ok": 2.5}


def test_nan_and_infinite_attributes_are_stored_as_strict_json(tmp_path):
    """They were stored as NaN/Infinity, which strict JSON parsers (and DuckDB's JSON) refuse."""
    p = tmp_path / "n.duckdb"
    with Session(p, source=FakeCupti(), quiet=True):
        with cuptiprof.step(0):
            with cuptiprof.range("odd", **NONFINITE):
                pass
    (a,), = q(p, "SELECT attrs FROM ranges WHERE name = 'odd'")
    assert _strict(a) == NONFINITE_STORED


def test_nan_and_infinite_attributes_are_stored_as_strict_json_under_run(tmp_path):
    from _run_helpers import cli, script

    p = script(tmp_path, """
        import cuptiprof
        with cuptiprof.step(0):
            with cuptiprof.range("odd", nan=float("nan"), inf=float("inf"), ninf=float("-inf"),
                                 nested=[1.5, {"x": float("nan")}], ok=2.5):
                pass
    """)
    r = cli(["run", "-o", "r.duckdb", "--no-report", "--light", "--", sys.executable, p], tmp_path)
    assert r.returncode == 0, r.stderr
    (a,), = q(tmp_path / "r.duckdb", "SELECT attrs FROM ranges WHERE name = 'odd'")
    assert _strict(a) == NONFINITE_STORED


def test_a_range_held_across_yield_holds_what_the_consumer_does_meanwhile(tmp_path):
    """What help(cuptiprof.range) and the README say of a range open across a `yield`: the
    consumer's steps and ranges nest in it, its GPU work outside them counts for it, and an
    early stop ends a `with`-held step as incomplete where the decorator's range ends normally."""
    f = FakeCupti()

    @cuptiprof.range("load")
    def batches():
        yield from range(3)

    def held():
        with cuptiprof.step(9):
            yield

    p = tmp_path / "y.duckdb"
    with Session(p, source=f, quiet=True):
        for i in batches():
            f.launch_kernel(f"k_between{i}")
            with cuptiprof.step(i):
                f.launch_kernel(f"k_step{i}")
            if i == 1:
                break
        g = held()
        next(g)
        with cuptiprof.range("consumer"):
            f.launch_kernel("k_consumer")
        g.close()
    assert kernels_by_range(p) == {"k_between0": "load", "k_step0": "step", "k_between1": "load",
                                   "k_step1": "step", "k_consumer": "consumer"}
    assert q(p, "SELECT r.name, r.kind, p.name FROM ranges r LEFT JOIN ranges p "
                "ON r.parent_id = p.range_id ORDER BY r.start_ns") == [
        ("load", "user", None), ("step", "step", "load"), ("step", "step", "load"),
        ("step", "step", None), ("consumer", "user", "step")]
    assert q(p, "SELECT subject, detail LIKE '%GeneratorExit%' FROM data_quality "
                "WHERE check_name = 'step_incomplete'") == [("9", True)]
