"""cuptiprof.range / cuptiprof.step without a session: context manager, decorator, kill switch."""
from __future__ import annotations

import pytest

import cuptiprof
from cuptiprof import markers


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("CUPTIPROF_DISABLE", raising=False)
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    markers.reload_env()
    yield
    markers.reload_env()


def test_public_names():
    assert cuptiprof.range is markers.range
    assert cuptiprof.step is markers.step
    r = cuptiprof.step(3)
    assert (r.name, r.attrs) == ("step", {"step": 3})


class Recording:
    """Stands in for a session: hands out one token per range and records what closes."""

    def __init__(self):
        self.n = 0
        self.events = []

    def _enter(self, name, attrs):
        self.n += 1
        self.events.append(("enter", name, self.n))
        return self.n

    def _exit(self, tok, exc_type=None):
        self.events.append(("exit", tok, exc_type))


@pytest.fixture
def recording(monkeypatch):
    rec = Recording()
    monkeypatch.setattr(markers, "_session", rec)
    return rec


def test_context_manager_nests_and_reenters(recording):
    outer = cuptiprof.range("outer", k=1)
    with outer as got:
        assert got is outer
        with cuptiprof.range("inner"):
            with outer:  # the same object, recursively
                assert len(markers._entered.get()) == 3
    assert markers._entered.get() == ()
    assert recording.events == [("enter", "outer", 1), ("enter", "inner", 2), ("enter", "outer", 3),
                                ("exit", 3, None), ("exit", 2, None), ("exit", 1, None)]


def test_exception_propagates_and_range_closes(recording):
    r = cuptiprof.range("boom")
    with pytest.raises(KeyError):
        with r:
            raise KeyError("x")
    assert markers._entered.get() == ()
    assert recording.events == [("enter", "boom", 1), ("exit", 1, KeyError)]


def test_decorator_keeps_function_and_opens_one_range_per_call():
    calls = []

    @cuptiprof.range("fib")
    def fib(n):
        calls.append(n)
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    assert fib(6) == 8 and fib.__name__ == "fib" and len(calls) == 25


def test_decorator_above_staticmethod_and_classmethod(recording):
    """Above @staticmethod, the wrapper was a plain function, so a call on an instance passed
    the instance as its first argument (TypeError); above @classmethod it was refused as no
    function. Each stays what it was, and every call opens its range."""
    class Model:
        @cuptiprof.range("norm")
        @staticmethod
        def norm(x):
            return x + 1

        @cuptiprof.range("build")
        @classmethod
        def build(cls, x):
            return cls, x

    m = Model()
    assert (Model.norm(1), m.norm(2)) == (2, 3)
    assert Model.build(1) == (Model, 1) and m.build(2) == (Model, 2)
    assert [e[1] for e in recording.events if e[0] == "enter"] == ["norm", "norm", "build", "build"]


def test_decorator_above_a_class_is_refused():
    """Above a class, the decorator put a function in its place: isinstance() with it and
    subclasses of it failed with TypeError, far from the decorator."""
    with pytest.raises(markers.UsageError) as e:
        @cuptiprof.range("model")
        class Model:
            pass
    assert str(e.value) == ("cuptiprof.range('model') decorates a function; "
                            "test_decorator_above_a_class_is_refused.<locals>.Model is a class: "
                            "decorate one of its methods (forward, __call__)")


def test_no_nvtx_call_without_a_tool(monkeypatch):
    import nvtx

    def boom(*a, **k):
        raise AssertionError("NVTX touched although no tool can listen")
    monkeypatch.setattr(nvtx, "get_domain", boom)
    with cuptiprof.range("quiet"):
        pass
    with cuptiprof.range("quiet"):   # the environment is read once, not on every range
        pass
    assert markers._nvtx is None
    markers.reload_env()   # what a session that sets up injection calls: look again
    assert markers._nvtx is False


def test_nvtx_push_pop_in_cuptiprof_domain_when_a_tool_listens(monkeypatch):
    import nvtx

    events = []

    class Dom:
        def get_event_attributes(self, message=None, color=None, payload=None):
            return (message, payload)

        def push_range(self, attrs):
            events.append(("push", attrs))

        def pop_range(self):
            events.append(("pop",))

    seen = []
    monkeypatch.setattr(nvtx, "get_domain", lambda name: seen.append(name) or Dom())
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/some/libcupti.so")
    markers.reload_env()
    with pytest.raises(RuntimeError):
        with cuptiprof.step(4):
            with cuptiprof.range("attn"):
                raise RuntimeError
    assert seen == ["cuptiprof"]
    assert events == [("push", ("step", 4)), ("push", ("attn", None)), ("pop",), ("pop",)]

    np = pytest.importorskip("numpy")
    events.clear()
    with cuptiprof.step(np.int64(999)):   # e.g. a scheduler's timestep
        pass
    with cuptiprof.step(5):
        pass
    assert events == [("push", ("step", 999)), ("pop",), ("push", ("step", 5)), ("pop",)]
    assert type(events[0][1][1]) is int


def test_disable_env_is_a_no_op(monkeypatch):
    monkeypatch.setenv("CUPTIPROF_DISABLE", "1")
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/x")
    markers.reload_env()
    r = cuptiprof.range("off")
    with r:
        assert markers._entered.get() == ()
    assert markers._nvtx is False


def test_repr():
    assert repr(cuptiprof.range("a", step=1)) == "cuptiprof.range('a', step=1)"


def test_one_range_object_entered_by_several_asyncio_tasks(recording):
    import asyncio

    shared = cuptiprof.range("shared")

    async def first(second_in, first_out):
        with shared:
            await second_in.wait()
        first_out.set()   # leaves `shared` while the other task is still in it

    async def second(second_in, first_out):
        with shared:
            second_in.set()
            await first_out.wait()

    async def main():
        second_in, first_out = asyncio.Event(), asyncio.Event()
        await asyncio.gather(first(second_in, first_out), second(second_in, first_out))

    asyncio.run(main())
    # each task closes the token it opened, though the first one in is the first one out
    assert recording.events == [("enter", "shared", 1), ("enter", "shared", 2),
                                ("exit", 1, None), ("exit", 2, None)]


def test_a_range_without_a_name_as_decorator_is_refused():
    """`@cuptiprof.range` without its call made the function a range object: calling it
    returned a wrapper of the argument, and the function never ran."""
    from cuptiprof.errors import UsageError

    def decode(x):
        return x * 2

    with pytest.raises(UsageError, match=r'needs a name: @cuptiprof.range\("..."\) above '
                                         r'test_a_range_without_a_name_as_decorator_is_refused'
                                         r'.<locals>.decode, not @cuptiprof.range$'):
        cuptiprof.range(decode)
    with pytest.raises(UsageError, match=r"cuptiprof.range\('decode'\) decorates a function; 3 is none"):
        cuptiprof.range("decode")(3)
    with pytest.raises(UsageError, match=r"cuptiprof.step needs the step's number: "
                                         r"cuptiprof.step\(i\), not @cuptiprof.step above "):
        cuptiprof.step(decode)
    assert cuptiprof.range("decode")(decode)(3) == 6
    assert cuptiprof.range("7").name == "7"   # a name of another type is refused (below)


def not_step_numbers():
    """Values a step's number is refused as, each with how the refusal names it."""
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    return [("10", "str '10'"), (3.0, "float 3.0"), (np.float64(3.0), "float64 3.0"),
            (True, "bool True"), (np.bool_(True), "bool True"),
            (torch.tensor(True), "Tensor tensor(True)"), ([1], "list [1]"),
            # one element is no 0-d integer: numpy and torch alike (torch's was taken)
            (np.array([1]), "ndarray [1]"), (torch.tensor([1]), "Tensor tensor([1])")]


def test_a_step_number_that_is_no_integer_is_refused_at_the_call():
    """step("10"), step(3.0) and step(True) were numbered by their position, silently: the
    step the program meant was not the one recorded. Refused where the mistake is, profiled or
    not, unless the range is no step (there `step` is one more attribute)."""
    for value, shown in not_step_numbers():
        for make in (lambda: cuptiprof.step(value), lambda: cuptiprof.range("step", step=value)):
            with pytest.raises(TypeError) as e:
                make()
            assert str(e.value) == (
                f"cuptiprof.step: a step's number is an integer (int, numpy integer, 0-d integer "
                f"array or tensor), not {shown}; give int(...) of it, or no number to number "
                "steps by their position")
        assert cuptiprof.range("denoise", step=value).attrs == {"step": value}
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    for value in (7, np.int64(7), np.uint16(7), np.array(7), torch.tensor(7)):
        assert cuptiprof.step(value).attrs == {"step": value}
    assert cuptiprof.range("step").attrs == {}
    assert cuptiprof.range("step", step=None).attrs == {"step": None}   # as if not given


def test_step_numbers_are_those_the_step_columns_hold():
    np = pytest.importorskip("numpy")
    lo, hi = -(1 << 31), (1 << 31) - 1
    values = [lo, hi, lo - 1, hi + 1, np.int64(hi), True, 1.0, "3", None, np.array([3])]
    assert [markers.step_number(v) for v in values] == [lo, hi, None, None, hi, None, None,
                                                       None, None, None]


def test_nvtx_attributes_kept_for_reuse_are_bounded(monkeypatch):
    """A long run numbers every step: the attributes of each (name, step) are made once and
    kept for reuse, up to a bound (memory stays flat however many steps there are)."""
    class Dom:
        def get_event_attributes(self, message=None, color=None, payload=None):
            return (message, payload)

        def push_range(self, attrs):
            pass

        def pop_range(self):
            pass

    monkeypatch.setattr(markers, "_nvtx", Dom())
    for i in range(5000):
        with cuptiprof.step(i):
            pass
    assert len(markers._attrs_cache) == 4096 and markers._attrs_cache[("step", 7)] == ("step", 7)


def test_ranges_leave_no_entry_behind(recording):
    r = cuptiprof.range("a")
    with r:
        with r:
            assert len(markers._anywhere[id(r)]) == 2
    assert markers._anywhere == {} and markers._entered.get() == ()


def test_nvtx_of_no_tool_is_not_called(monkeypatch):
    """With the variable set but no tool loaded, nvtx hands out a DummyDomain: ranges then
    make no NVTX call at all."""
    import nvtx

    class DummyDomain:
        pass

    monkeypatch.setattr(nvtx, "get_domain", lambda name: DummyDomain())
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/some/libcupti.so")
    markers.reload_env()
    with cuptiprof.range("a"):
        pass
    assert markers._nvtx is None


def test_a_failure_of_the_range_bookkeeping_is_said_once_and_ranges_stop(monkeypatch, capsys):
    class Broken(Recording):
        def _enter(self, name, attrs):
            raise RuntimeError("lost")

    monkeypatch.setattr(markers, "_failed", False)
    for _ in range(2):
        monkeypatch.setattr(markers, "_session", Broken())
        with cuptiprof.range("a"):
            assert markers._session is None
    assert capsys.readouterr().err == ("cuptiprof: warning: range bookkeeping failed (RuntimeError: "
                                       "lost); ranges are no longer recorded\n")


def test_a_range_left_on_another_thread_closes_the_latest_entry_of_those(recording):
    import threading

    shared = cuptiprof.range("shared")
    for _ in range(2):   # entered on two threads, left open there
        t = threading.Thread(target=shared.__enter__)
        t.start()
        t.join()
    shared.__exit__(None, None, None)
    shared.__exit__(None, None, None)
    assert recording.events[2:] == [("exit", 2, None), ("exit", 1, None)]
    assert markers._anywhere == {}


def test_a_range_name_that_is_no_str_is_refused_at_the_call():
    """range(None) and range(b"x") were stored as names 'None' and "b'x'" without a word.
    A str subclass (numpy.str_, a str Enum) is its text."""
    import enum
    for value, shown in ((None, "NoneType None"), (b"x", "bytes b'x'"), (3, "int 3"),
                         (("a",), "tuple ('a',)")):
        with pytest.raises(TypeError) as e:
            cuptiprof.range(value)
        assert str(e.value) == (f"cuptiprof.range: a range's name is a str, not {shown}; give "
                                "the name as text")

    class Phase(str, enum.Enum):
        DECODE = "decode"

    for value in ("decode", Phase.DECODE):
        r = cuptiprof.range(value)
        assert r.name == "decode" and type(r.name) is str
    np = pytest.importorskip("numpy")
    assert type(cuptiprof.range(np.str_("decode")).name) is str


def test_a_range_decorating_a_callable_object_is_refused_with_what_to_decorate():
    """cuptiprof.range("x")(model) returned a plain function: the model's .eval() and
    .parameters() were gone from the program's name for it. Refused, as --step-fn refuses it."""
    import functools
    import operator

    class Denoiser:
        def forward(self, x):
            return x

        def __call__(self, x):
            return self.forward(x)

    class Step:
        def __call__(self, x):
            return x

    def scale(k, x):
        return k * x

    @functools.lru_cache
    def cached(x):
        return x

    r = cuptiprof.range("denoise")
    mod = __name__
    q = "test_a_range_decorating_a_callable_object_is_refused_with_what_to_decorate.<locals>"
    for obj, cls, instead in (
            (Denoiser(), "a Denoiser", f"decorate its class's forward ({mod}:{q}.Denoiser.forward), or "),
            (Step(), "a Step", f"decorate its class's __call__ ({mod}:{q}.Step.__call__), or "),
            (functools.partial(scale, 2), "a partial",
             f"decorate the function it calls ({mod}:{q}.scale), or "),
            (cached, "a _lru_cache_wrapper",
             f"put it below that decorator, on the function it wraps ({mod}:{q}.cached), or "),
            (operator.itemgetter(0), "an itemgetter", "")):
        with pytest.raises(markers.UsageError) as e:
            r(obj)
        assert str(e.value) == (
            f"cuptiprof.range('denoise') decorates a function, not {cls} object: a function in "
            f"its place would have none of its methods and attributes; {instead}"
            "use `with cuptiprof.range('denoise'):` around its calls")
    # functions, methods and builtins lose nothing
    assert r(scale)(2, 3) == 6
    assert r(Denoiser().forward)(4) == 4
    assert r(len)([1, 2]) == 2
    assert r(str.upper)("a") == "A"
    assert r(functools.wraps(scale)(lambda k, x: k * x))(2, 2) == 4
