"""Steps that --step-fn and --step-range mark: the step marker, the count that tells them from
the program's own cuptiprof.range('step') (steps_mixed), the wrapper of a step function.
"""
from __future__ import annotations

import contextvars
import functools
import sys

from cuptiprof.run.child import shared
from cuptiprof.run.child.shared import warn


# -- steps --------------------------------------------------------------------------------------
class _Step:
    """A step marker: the Recorder's step, or a cuptiprof.range('step') for the collector."""

    __slots__ = ("name", "step", "h")

    def __init__(self, name: str, step: int | None = None):
        self.name, self.step, self.h = name, step, None

    def __enter__(self):
        try:
            if shared._collector is not None:
                import cuptiprof

                self.h = cuptiprof.range("step") if self.step is None else cuptiprof.range("step", step=self.step)
                _count_marked(self.h.__enter__)
            elif shared._rec is not None:
                self.h = _count_marked(lambda: shared._rec.begin(self.name, is_step=True, step=self.step))
        except Exception as exc:  # the program's step runs whatever happens here
            self.h = None
            _steps_failed(exc)
        return self

    def __exit__(self, *exc):
        if self.h is None:
            return False
        try:
            if shared._collector is not None:
                self.h.__exit__(*exc)
            elif shared._rec is not None:
                shared._rec.end(self.h, exc[0] if exc else None)
        except Exception as err:
            _steps_failed(err)
        return False


_steps_warned = False


def _count_marked(begin):
    """begin() a step of --step-fn/--step-range, counted in _marked (0 where it opened inside a
    step: not a step). Under the lock: a step another thread began meanwhile would count twice,
    and an update of _marked lost to a thread switch would read as the program's own step (a
    spurious steps_mixed). Well under 1 us a step, nothing for other ranges."""
    with shared._marked_lock:
        shared._option_hit = True   # a call inside the program's own step is still one
        before = _steps_seen()
        h = begin()
        shared._marked += _steps_seen() - before
    return h


def _steps_seen() -> int:
    """Steps (warm-up included) that whoever records this process has begun so far."""
    if shared._collector is not None:
        return shared._collector.steps_seen
    return shared._rec.seen if shared._rec is not None else 0


MIXED_STEPS = "steps_mixed"


def _mixed_steps() -> str | None:
    """When --step-fn/--step-range and the program's own cuptiprof.range('step') both began
    steps (neither inside the other), the two are numbered as one sequence: say so."""
    # the collector counts the cuptiprof.range(NAME) steps of --step-range NAME itself
    marked = shared._marked + getattr(shared._collector, "range_steps_seen", 0)
    own = _steps_seen() - shared._seen_base - marked
    if not marked or own <= 0:
        return None
    how = "--step-fn" if shared._rec is not None and shared._rec.s.step_fn else "--step-range"
    steps = f"{marked} step" + ("" if marked == 1 else "s")
    return (f"{steps} came from {how} and {own} from the program's own "
            "cuptiprof.range('step') outside them; they are counted (warm-up included) and "
            "numbered as one sequence: mark steps one way")


def _steps_failed(exc: Exception) -> None:
    global _steps_warned
    if not _steps_warned:
        _steps_warned = True
        warn(f"marking a step failed ({exc!r}); the program goes on")


# Whether a --step-fn step is open here: per thread and per asyncio task (a task starts from a
# copy of its creator's context), as the ranges are, so that tasks running the step function at
# once each get a step of their own, and one ending its step does not end another's.
_in_step: contextvars.ContextVar[bool] = contextvars.ContextVar("cuptiprof_in_step", default=False)


def _begin_step() -> _Step:
    _in_step.set(True)
    return _Step("step").__enter__()


def _end_step(st: _Step, exc_type) -> None:
    try:
        st.__exit__(exc_type, None, None)
    finally:
        _in_step.set(False)


def _wrap_step(fn):
    # Under torch.compile, dynamo would trace the wrapper and the step bookkeeping into the
    # program's graph (graph breaks, or errors on the recorder's numpy): the bookkeeping runs
    # eagerly and the wrapper's own frame is skipped, while `fn` is compiled as before.
    begin, end = _eager(_begin_step), _eager(_end_step)
    code = getattr(fn, "__code__", None)
    flags = code.co_flags if code is not None else 0
    if flags & (_CO_COROUTINE | _CO_GENERATOR | _CO_ASYNC_GENERATOR):
        # a call only creates the coroutine or generator: the step is its run, to the end
        step_fn_wrapper = _wrap_step_run(fn, flags, begin, end)
    else:
        @functools.wraps(fn)
        def step_fn_wrapper(*args, **kwargs):
            if _in_step.get():   # a recursive call is part of the same step
                return fn(*args, **kwargs)
            st = begin()
            try:
                out = fn(*args, **kwargs)
            except BaseException as exc:
                end(st, type(exc))
                raise
            end(st, None)
            return out
    step_fn_wrapper.__cuptiprof_wrapped__ = fn
    return _eager(step_fn_wrapper, recursive=False)


_CO_GENERATOR, _CO_COROUTINE, _CO_ASYNC_GENERATOR = 0x20, 0x80, 0x200   # inspect.CO_*


def _wrap_step_run(fn, flags: int, begin, end):
    """The step of an async def holds its run until it returns; that of a generator (sync or
    async) its whole iteration, from the first next() until it is exhausted, raises or is
    closed (a consumer stopping early ends it normally), as cuptiprof.range's decorator does."""
    from cuptiprof import markers

    whole = lambda: _StepRun(begin, end)   # noqa: E731
    if flags & _CO_GENERATOR:
        return markers.wrap_generator(fn, whole)
    if flags & _CO_ASYNC_GENERATOR:
        return markers.wrap_async_generator(fn, whole)

    @functools.wraps(fn)
    async def step_fn_wrapper(*args, **kwargs):
        with whole():
            return await fn(*args, **kwargs)
    return step_fn_wrapper


class _StepRun:
    """A --step-fn step around a run that outlives the call (a coroutine's, a generator's);
    none where it runs inside a step already. A consumer stopping a generator early
    (GeneratorExit) ends it normally; any other exception ends it as incomplete."""

    __slots__ = ("begin", "end", "st")

    def __init__(self, begin, end):
        self.begin, self.end, self.st = begin, end, None

    def __enter__(self):
        if not _in_step.get():
            self.st = self.begin()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.st is not None:
            self.end(self.st, None if exc_type is None or issubclass(exc_type, GeneratorExit)
                     else exc_type)
        return False


def _eager(fn, recursive: bool = True):
    """`fn` run eagerly where torch.compile meets it (torch.compiler.disable), so step
    bookkeeping never enters a compiled graph; `fn` itself where torch is not loaded.
    recursive=False: only fn's own frame, not what it calls."""
    disable = getattr(getattr(sys.modules.get("torch"), "compiler", None), "disable", None)
    if disable is None:
        return fn
    try:
        return disable(fn) if recursive else disable(fn, recursive=False)
    except Exception:
        return fn
