"""--step-range NAME over the program's NVTX ranges (torch.cuda.nvtx, the nvtx package and its
annotate), and cuptiprof.range() reaching the Recorder where no collector records.
"""
from __future__ import annotations

import functools
import importlib
import threading

from cuptiprof.run.child import shared
from cuptiprof.run.child.import_hooks import _when_imported
from cuptiprof.run.child.shared import warn
from cuptiprof.run.child.steps import _Step, _eager


def _patch_torch_nvtx(torch) -> None:
    """--step-range NAME over torch.cuda.nvtx.range_push/range_pop (and torch.cuda.nvtx.range,
    which calls them). On a CPU build they raise; the patched ones keep counting depth."""
    try:
        nv = importlib.import_module("torch.cuda.nvtx")
    except Exception:
        return
    push, pop = nv.range_push, nv.range_pop
    stack = threading.local()

    def range_push(msg):
        st = stack.__dict__.setdefault("s", [])
        st.append(_Step(msg).__enter__() if msg == shared._rec.s.step_range else None)
        try:
            return push(msg)
        except RuntimeError:
            return len(st) - 1

    def range_pop():
        st = stack.__dict__.setdefault("s", [])
        h = st.pop() if st else None
        try:
            r = pop()
        except RuntimeError:
            r = len(st)
        if h is not None:
            h.__exit__(None, None, None)
        return r

    # A push inside code torch.compile traces happens when the compiled code runs, as without
    # cuptiprof (dynamo breaks the graph there either way), never while it is traced.
    nv.range_push, nv.range_pop = _eager(range_push), _eager(range_pop)


def _patch_nvtx_package(nvtx) -> None:
    push, pop = getattr(nvtx, "push_range", None), getattr(nvtx, "pop_range", None)
    if push is None or pop is None:
        return
    stack = threading.local()

    def push_range(message=None, *a, **kw):
        stack.__dict__.setdefault("s", []).append(
            _Step(message).__enter__() if message == shared._rec.s.step_range else None)
        return push(message, *a, **kw)

    def pop_range(*a, **kw):
        st = stack.__dict__.setdefault("s", [])
        r = pop(*a, **kw)
        h = st.pop() if st else None
        if h is not None:
            h.__exit__(None, None, None)
        return r

    nvtx.push_range, nvtx.pop_range = push_range, pop_range

    def once_torch_is_there(_torch):   # as for torch.cuda.nvtx: eager under torch.compile
        if nvtx.push_range is push_range and nvtx.pop_range is pop_range:
            nvtx.push_range, nvtx.pop_range = _eager(push_range), _eager(pop_range)
    _when_imported("torch", once_torch_is_there)
    _patch_nvtx_annotate(nvtx)


def _patch_nvtx_annotate(nvtx) -> None:
    """--step-range NAME over nvtx.annotate("NAME") as a context manager or a decorator (it
    pushes through the C library, past nvtx.push_range)."""
    base = getattr(nvtx, "annotate", None)
    if not isinstance(base, type):
        return
    name = shared._rec.s.step_range

    def begin():
        return _Step(name).__enter__()

    def end(h, exc):
        h.__exit__(*exc)

    def message(a):   # the range's message, as given to nvtx.annotate
        return getattr(a, "init_args", (None,))[0]

    class annotate(base):
        __doc__ = base.__doc__

        def __enter__(self):
            if message(self) == name:
                self.__dict__.setdefault("_cuptiprof_steps", []).append(_eager(begin)())
            return super().__enter__()

        def __exit__(self, *exc):
            out = super().__exit__(*exc)
            steps = self.__dict__.get("_cuptiprof_steps")
            if steps:
                _eager(end)(steps.pop(), exc)
            return out

        def __call__(self, func):
            inner = super().__call__(func)
            if (message(self) or func.__name__) != name:
                return inner

            @functools.wraps(func)
            def step(*args, **kwargs):
                h = _eager(begin)()
                try:
                    out = inner(*args, **kwargs)
                except BaseException as e:
                    _eager(end)(h, (type(e), e, e.__traceback__))
                    raise
                _eager(end)(h, (None, None, None))
                return out
            return step

    annotate.__name__ = annotate.__qualname__ = "annotate"
    annotate.__module__ = base.__module__
    nvtx.annotate = annotate


def _patch_markers(markers) -> None:
    """Without the collector, cuptiprof.range() in user code reaches the Recorder."""
    if shared._collector is not None or shared._rec is None:
        return
    try:
        from cuptiprof.run.markers_bridge import install

        install(markers, shared._rec)
    except Exception as exc:
        warn(f"cuptiprof.range cannot be recorded without the collector ({exc})")
