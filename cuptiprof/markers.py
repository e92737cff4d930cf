"""`cuptiprof.range(name, **attrs)` and `cuptiprof.step(i)`: mark the loop you care about.

    with cuptiprof.range("step", step=i):       # a step (counted for warm-up / steps)
        ...
    @cuptiprof.range("decode")                  # or as a decorator
    def decode(...): ...

A range pushes an NVTX range in the "cuptiprof" domain (visible in Nsight Systems too) and,
while a collector session is active, a CUPTI external correlation id (CUSTOM2) so that every
CUDA launch inside it is tied to it. Ranges nest, close on exceptions, and cost under a
microsecond when nothing profiles (0.8 us on a 2-CPU VM; NVTX is skipped when no tool is
attached, and the environment is read once).
CUPTIPROF_DISABLE=1 turns all of it off.
"""
from __future__ import annotations

import builtins
import contextvars
import functools
import inspect
import json
import math
import operator
import os
import sys
from typing import Any, Callable, SupportsIndex

from cuptiprof.errors import UsageError, stderr_line

DOMAIN = "cuptiprof"

_disabled = os.environ.get("CUPTIPROF_DISABLE", "") not in ("", "0")
_session: Any = None          # the active collect.session.Session (set by Session.start/stop)
_nvtx: Any = False            # False: not resolved yet; None: no NVTX tool; else the Domain
_attrs_cache: dict = {}
# (range object, what its __exit__ closes) of the ranges entered and not yet exited, innermost
# last. A context variable, so that one object (a module-level `ATTN = cuptiprof.range("attn")`)
# entered in several threads or asyncio tasks at once closes each its own entry.
_entered: contextvars.ContextVar[tuple] = contextvars.ContextVar("cuptiprof_entered", default=())
# Every open entry by object, whatever its context: a range entered on one thread and left on
# another (a request span opened in a callback, closed on the event loop) still closes.
_anywhere: dict[int, list] = {}
_failed = False


def reload_env() -> None:
    """Re-read CUPTIPROF_DISABLE and the NVTX tool state (tests, and after a session starts)."""
    global _disabled, _nvtx
    _disabled = os.environ.get("CUPTIPROF_DISABLE", "") not in ("", "0")
    _nvtx = False
    _attrs_cache.clear()


def _set_session(session: Any) -> None:
    global _session
    _session = session


def _domain() -> Any:
    """The NVTX domain, or None when no tool listens (then NVTX calls would be no-ops anyway).

    Without NVTX_INJECTION64_PATH no tool can attach, and resolving the domain would be the
    process's first NVTX call, which would stop a later profile() from injecting; so skip it.
    """
    global _nvtx
    if _nvtx is False:
        if not os.environ.get("NVTX_INJECTION64_PATH"):
            _nvtx = None   # until reload_env(): a session that sets the variable calls it
            return None
        try:
            import nvtx

            d = nvtx.get_domain(DOMAIN)
            _nvtx = None if type(d).__name__ == "DummyDomain" else d
        except Exception:
            _nvtx = None
    return _nvtx


def _nvtx_attrs(domain: Any, name: str, payload: Any) -> Any:
    key = (name, payload)
    a = _attrs_cache.get(key)
    if a is None:
        a = domain.get_event_attributes(message=name, color="green", payload=payload)
        if len(_attrs_cache) < 4096:
            _attrs_cache[key] = a
    return a


def step_index(value: Any) -> int | None:
    """The integer `value` stands for: an int, a numpy integer, a 0-d integer array or tensor
    (what operator.index() takes); None for anything else, bool included, and an array or
    tensor of one element or more dimensions (torch's index() takes a one-element tensor,
    numpy's refuses a one-element array: neither is taken, alike)."""
    if type(value) is int:
        return value
    if value is None or isinstance(value, bool) or "bool" in str(getattr(value, "dtype", "")):
        return None
    try:
        if getattr(value, "ndim", 0) != 0:
            return None
        return operator.index(value)
    except Exception:
        return None


def _check_step(value: Any) -> None:
    """A step's number that is no integer ("10", 3.0, True) was numbered by its position, and
    the step the program meant was not the one recorded: a mistake in the program, refused at
    its call whether profiled or not. None is no number (as if not given)."""
    if value is None or type(value) is int or step_index(value) is not None:
        return
    try:
        shown = repr(value) if isinstance(value, (str, bytes)) else str(value)
    except Exception:
        shown = "?"
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    raise TypeError(f"cuptiprof.step: a step's number is an integer (int, numpy integer, 0-d "
                    f"integer array or tensor), not {type(value).__name__} {shown}; give int(...) "
                    "of it, or no number to number steps by their position")


# The step columns are INTEGER: a larger number would fail the whole commit it is in.
STEP_MIN, STEP_MAX = -(1 << 31), (1 << 31) - 1


def steps_beyond(value: int | str, count: bool = False) -> str | None:
    """Why `value`, a step number (or with `count`, a number of steps: a warm-up, how many to
    record) does not fit the step columns, or None where it does: the one bound of every
    option that names steps (report --steps, run --steps and --warmup, profile(warmup=,
    steps=)). A str is ASCII digits with an optional leading '-', measured before int() (which
    refuses more than 4,300 digits)."""
    text = str(value).strip()
    digits = text.lstrip("-").lstrip("0")
    if count and text.startswith("-"):   # below 0: refused by each option's own least
        return None
    if len(digits) <= 10 and STEP_MIN <= int(text) <= STEP_MAX:
        return None
    numbered = f"steps are numbered from {STEP_MIN} to {STEP_MAX}"
    if count:
        shown = f"a count of {len(digits)} digits" if len(digits) > 20 else text
        return f"{shown} is more steps than can be numbered; give at most {STEP_MAX} ({numbered})"
    shown = f"a step number of {len(digits)} digits" if len(digits) > 10 else f"step {text}"
    return f"{shown} is no step ({numbered})"


def step_number(value: Any) -> int | None:
    """The step number a range's `step` attribute stands for: step_index(value) from -2**31 to
    2**31 - 1; None otherwise (the step is then numbered by its position). The one check of
    every place that takes a step number from a range."""
    n = step_index(value)
    return n if n is not None and STEP_MIN <= n <= STEP_MAX else None


def given_step(value: Any) -> int | None:
    """step_number(value) of a step being begun; an integer beyond the step columns (a request
    id, a timestamp) is said once, in one line: the step is numbered by its position, and the
    number given is in no table."""
    n = step_number(value)
    if n is None and not _beyond_said:
        big = step_index(value)
        if big is not None:
            _say_beyond(big)
    return n


_beyond_said = False


def _say_beyond(n: int) -> None:
    global _beyond_said
    _beyond_said = True
    text = str(n)
    shown = f"step {text}" if len(text) <= 24 else f"a step number of {len(text)} digits"
    stderr_line(f"cuptiprof: warning: {shown} is no step (steps are numbered from {STEP_MIN} to "
                f"{STEP_MAX}): it is numbered by its position among the steps, as is every other "
                "such step (said once)")


def attrs_json(attrs: dict) -> str | None:
    """The JSON stored for a range's extra attributes (None for none), strict JSON that any
    parser reads: a float that is NaN or infinite is stored as null, as JavaScript's
    JSON.stringify writes it. A value JSON cannot hold is stored as its str(); one that cannot
    be written even so (a dict with keys of mixed types, a cycle, a __str__ that raises) as its
    repr() or its type's name: an odd attribute must not stop the recording."""
    if not attrs:
        return None
    try:
        return _dumps(attrs)
    except Exception:
        return _dumps({str(k): _storable(v) for k, v in attrs.items()})


def left_inside(var: contextvars.ContextVar, stack: tuple, item: Any) -> tuple:
    """Ending `item`, an open range of this thread's or task's `stack` (held in `var`): the
    stack is cut below it, and the ranges still open inside it (their end never ran: forgotten,
    or an exception skipped it) are returned innermost first, for the caller to end with it;
    () where it is not on the stack. The collector and the run's recorder both end them so."""
    at = [i for i, t in enumerate(stack) if t is item]
    if not at:
        return ()
    var.set(stack[:at[-1]])
    return stack[at[-1] + 1:][::-1]


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, default=str, sort_keys=True, allow_nan=False)
    except ValueError:   # a NaN or infinite float in it: walked only then (ranges' hot path)
        return json.dumps(finite(value), default=str, sort_keys=True, allow_nan=False)


def finite(value: Any, key: Callable[[Any], Any] | None = None) -> Any:
    """`value` with every NaN or infinite float in it (in dicts, lists and tuples) as None;
    `key`, where given, maps each dict key (a JSON writer's: object keys must be strings)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {(k if key is None else key(k)): finite(v, key) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v, key) for v in value]
    return value


def _storable(value: Any) -> Any:
    try:
        _dumps(value)
        return finite(value)
    except Exception:
        pass
    for text in (str, repr):
        try:
            return text(value)
        except Exception:
            pass
    return f"<{type(value).__name__}>"


def _compiling() -> bool:
    """True while torch.compile traces the code a range is in. The range then stays out of the
    graph (no graph break, no recompile): code compiled with ranges in it runs as it would
    without them, and its kernels count for the enclosing range."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return is_compiling is not None and is_compiling()


def _report(exc: BaseException) -> None:
    """Profiling must never break the program: say it once, stop profiling ranges."""
    global _failed, _session
    if not _failed:
        _failed = True
        stderr_line(f"cuptiprof: warning: range bookkeeping failed ({type(exc).__name__}: {exc}); "
                    "ranges are no longer recorded")
    s, _session = _session, None
    if s is not None:
        try:
            s._detach_ranges(exc)
        except Exception:
            pass


class range:  # noqa: N801 - lower-case like the builtin it mirrors: cuptiprof.range(...)
    """A named range: context manager and decorator.

    name: a str; 'step' marks a step (give step=i), 'warmup' marks warm-up, anything else is a
    user range (another type, None or bytes, raises TypeError). Steps do not nest: a 'step'
    opened inside a step is a user range of that step.
    Inside code that torch.compile traces a range does nothing, so the compiled code is the same
    with or without it; its kernels count for the enclosing range.

    attrs: extra attributes stored with the range as strict JSON (ranges.attrs): a NaN or
    infinite float is stored as null, a value JSON cannot hold as its text. `step` may be any
    integer (int, numpy integer, 0-d integer tensor) from -2**31 to 2**31 - 1 and is also sent as
    the NVTX payload (a larger one, or none: the step is numbered by its position, and a larger
    one is said once on stderr); another type (a str, a float, a bool) raises TypeError. On a
    range that is no step it is one more attribute.

    One object may be entered again after it exits (and recursively); as a decorator every call
    opens its own range (above @staticmethod or @classmethod too, which it stays). A callable
    object (a model, a functools.partial, an lru_cache wrapper) is refused: decorate its class's
    forward or __call__ (or the function inside), or use `with` around its calls. Several
    threads or asyncio tasks may be inside one object at once: each closes its own entry. On a
    generator function the range covers the whole iteration (first next() to exhaustion or
    close(), the consumer's time between items included); on an `async def` function the whole
    await, on an async generator likewise.

    A range open across a `yield` (that decorator, or a `with` around a `yield` inside a
    generator) stays open in the consumer while the generator waits: ranges and steps the
    consumer opens meanwhile nest inside it (a step then becomes a range of it when it is a
    step itself), and GPU work the consumer launches outside them counts for it. A consumer that
    stops early (break, close(), or the generator dropped and collected) ends it there: the
    decorator's range ends normally, a step of a `with` inside the generator is marked
    incomplete (GeneratorExit ended it).
    """

    __slots__ = ("name", "attrs")

    def __init__(self, name: str, **attrs: Any):
        if callable(name) and not isinstance(name, str):
            # `@cuptiprof.range` without a name made the function a range object: calling it
            # returned a wrapper of its argument and never ran the function
            raise UsageError(f"cuptiprof.range needs a name: @cuptiprof.range(\"...\") above "
                             f"{getattr(name, '__qualname__', name)!s}, not @cuptiprof.range")
        if not isinstance(name, str):
            # str() of it stored None as 'None' and b"x" as "b'x'", without a word
            raise TypeError(f"cuptiprof.range: a range's name is a str, not "
                            f"{type(name).__name__} {name!r}; give the name as text")
        self.name = str.__str__(name)   # a str subclass (numpy.str_, a str Enum) as its text
        self.attrs = attrs
        if self.name == "step":
            _check_step(attrs.get("step"))

    def _open(self) -> Any:
        """Open the range; returns what _close needs, or None when ranges are off."""
        if _disabled or _compiling():
            return None
        s = _session
        tok = None
        if s is not None:
            try:
                tok = s._enter(self.name, self.attrs)
            except Exception as exc:  # pragma: no cover - defensive
                _report(exc)
        d = _nvtx if _nvtx is not False else _domain()
        if d is not None:
            try:
                d.push_range(_nvtx_attrs(d, self.name, step_number(self.attrs.get("step"))))
            except Exception:
                d = None
        return tok, d

    @staticmethod
    def _close(opened: Any, exc_type: type | None) -> None:
        tok, d = opened
        if d is not None:
            try:
                d.pop_range()
            except Exception:
                pass
        if tok is not None:
            s = _session
            if s is not None:
                try:
                    s._exit(tok, exc_type)
                except Exception as e:  # pragma: no cover - defensive
                    _report(e)

    def __enter__(self) -> "range":
        opened = self._open()
        # Nothing to close later when nothing profiles: keep that path free of bookkeeping.
        if opened is not None and opened != (None, None):
            _entered.set(_entered.get() + ((self, opened),))
            _anywhere.setdefault(id(self), []).append(opened)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if _disabled or _compiling():
            return False
        entered = _entered.get()
        opened = None
        for i in builtins.range(len(entered) - 1, -1, -1):   # the latest entry of this object
            if entered[i][0] is self:
                _entered.set(entered[:i] + entered[i + 1:])
                opened = entered[i][1]
                break
        mine = _anywhere.get(id(self))
        if opened is None and mine:
            opened = mine[-1]   # entered in another thread or task: close the latest of those
        if opened is not None:
            if mine:
                for j in builtins.range(len(mine) - 1, -1, -1):
                    if mine[j] is opened:
                        del mine[j]
                        break
                if not mine:
                    _anywhere.pop(id(self), None)
            self._close(opened, exc_type)
        return False  # never swallow the user's exception

    def __call__(self, func: Callable) -> Callable:
        if isinstance(func, (staticmethod, classmethod)):
            # above @staticmethod or @classmethod: the function inside is wrapped, and stays
            # one of those (a plain wrapper made a staticmethod take the instance as its first
            # argument; a classmethod, not callable before Python 3.10's, was refused)
            return type(func)(self(func.__func__))
        if not callable(func):
            raise UsageError(f"{self!r} decorates a function; {func!r} is none")
        if isinstance(func, type):   # a function in its place broke isinstance() and subclasses
            raise UsageError(f"{self!r} decorates a function; {func.__qualname__} is a class: "
                             "decorate one of its methods (forward, __call__)")
        if not inspect.isroutine(func) or (hasattr(func, "__wrapped__") and not (
                inspect.isfunction(func) or inspect.ismethod(func))):
            # a model instance, a functools.partial or an lru_cache wrapper: the function put in
            # its place had none of its methods or attributes (model.eval(), .cache_info())
            raise UsageError(_not_a_function(self, func))
        name, attrs = self.name, self.attrs
        if inspect.isgeneratorfunction(func):
            return wrap_generator(func, lambda: _WholeRun(name, attrs))
        if inspect.isasyncgenfunction(func):
            return wrap_async_generator(func, lambda: _WholeRun(name, attrs))
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def coroutine_wrapper(*args: Any, **kwargs: Any) -> Any:
                with range(name, **attrs):
                    return await func(*args, **kwargs)

            return coroutine_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with range(name, **attrs):
                return func(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        return f"cuptiprof.range({self.name!r}{''.join(f', {k}={v!r}' for k, v in self.attrs.items())})"


def _not_a_function(r: range, obj: Any) -> str:
    """The refusal of a range decorating a callable object, with what to decorate instead."""
    def where(f: Any) -> str:
        return f"{getattr(f, '__module__', '?')}:{getattr(f, '__qualname__', f)}"

    cls = type(obj)
    if isinstance(obj, functools.partial):
        instead = f"decorate the function it calls ({where(obj.func)})"
    elif getattr(obj, "__wrapped__", None) is not None:
        instead = ("put it below that decorator, on the function it wraps "
                   f"({where(obj.__wrapped__)})")
    else:
        method = next((m for m in ("forward", "__call__")
                       if inspect.isfunction(getattr(cls, m, None))), None)
        instead = f"decorate its class's {method} ({where(cls)}.{method})" if method else ""
    a = "an" if cls.__name__[:1].lower() in "aeiou" else "a"
    return (f"{r!r} decorates a function, not {a} {cls.__name__} object: a function in its "
            f"place would have none of its methods and attributes; "
            f"{instead + ', or ' if instead else ''}use `with {r!r}:` around its calls")


def wrap_generator(func: Callable, whole: Callable) -> Callable:
    """`whole()` (a context manager: a range, a step) around a generator's whole iteration: it
    is entered at the first next() and left when the generator is exhausted, raises or is
    closed (time the consumer spends between items counts too). A consumer that stops early
    (break, close()) leaves it with GeneratorExit, which _WholeRun takes as a normal end."""
    @functools.wraps(func)
    def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
        with whole():
            return (yield from func(*args, **kwargs))

    return generator_wrapper


class _WholeRun:
    """A range around a generator's whole run, opened where the `with` starts. A consumer that
    stops it early (GeneratorExit) ends it normally; any other exception ends it as failed."""

    __slots__ = ("opened",)

    def __init__(self, name: str, attrs: dict):
        self.opened = range(name, **attrs)._open()

    def __enter__(self) -> "_WholeRun":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.opened is not None:
            ended = None if exc_type is None or issubclass(exc_type, GeneratorExit) else exc_type
            range._close(self.opened, ended)
        return False


def wrap_async_generator(func: Callable, whole: Callable) -> Callable:
    """As wrap_generator, for an async generator (no `yield from` there: asend, athrow and
    aclose are passed on by hand)."""
    @functools.wraps(func)
    async def async_generator_wrapper(*args: Any, **kwargs: Any) -> Any:
        agen = func(*args, **kwargs)
        with whole():
            try:
                item = await agen.__anext__()
                while True:
                    try:
                        sent = yield item
                    except GeneratorExit:
                        await agen.aclose()
                        raise
                    except BaseException as exc:
                        item = await agen.athrow(exc)
                    else:
                        item = await (agen.__anext__() if sent is None else agen.asend(sent))
            except StopAsyncIteration:
                pass

    return async_generator_wrapper


def step(i: SupportsIndex | None, **attrs: Any) -> range:
    """`cuptiprof.range("step", step=i)`: one step of the loop (counted for warmup/steps); i
    None numbers it by its position among the steps."""
    if callable(i):   # `@cuptiprof.step` above a function: see range.__init__
        raise UsageError(f"cuptiprof.step needs the step's number: cuptiprof.step(i), not "
                         f"@cuptiprof.step above {getattr(i, '__qualname__', i)!s}")
    return range("step", step=i, **attrs)
