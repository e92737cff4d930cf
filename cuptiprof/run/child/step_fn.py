"""--step-fn MODULE:QUALNAME: finding the function (in the main script too, or defined inside
another one) and wrapping it, and the markers that tell the launcher how that went.
"""
from __future__ import annotations

import atexit
import functools
import inspect

from cuptiprof.run import main_hook
from cuptiprof.run.child import shared
from cuptiprof.run.child.import_hooks import _when_imported
from cuptiprof.run.child.shared import warn
from cuptiprof.run.child.steps import _wrap_step


def _hook_step_fn(spec: str) -> None:
    module, _, qual = spec.partition(":")

    def wrap(mod, also_main: bool = False) -> None:
        parts = step_fn_parts(qual)
        try:
            owner, rest = main_hook.walk(mod, parts[:-1])
            func = main_hook.as_function(owner)
            if func is not None:   # a function defined inside this one (main.<locals>.step)
                _wrap_inner(func, rest + parts[-1:], spec)
                return
            # As stored (a staticmethod or classmethod, not the function getattr gives), in
            # the class or the one it inherits it from
            where = owner.__mro__ if isinstance(owner, type) else (owner,)
            raw = next((k.__dict__[parts[-1]] for k in where
                        if parts[-1] in getattr(k, "__dict__", {})), None)
            if raw is None:
                raw = getattr(owner, parts[-1])
        except AttributeError:
            msg = f"--step-fn {spec}: module {module} has no {qual}"
            if also_main:   # `python -m pkg`: the package has no f, pkg/__main__.py may have it
                _main_alt.append(msg)
            else:
                _step_fn_error(msg)
            return
        why = main_hook.not_python(spec, qual, raw)
        if why:
            _step_fn_error(why)
            return
        if isinstance(raw, staticmethod):
            new = staticmethod(_wrap_step(raw.__func__))
        elif isinstance(raw, classmethod):
            new = classmethod(_wrap_step(raw.__func__))
        elif isinstance(raw, type):   # a wrapper in its place would break isinstance, subclasses
            _step_fn_error(f"--step-fn {spec}: {qual} is a class: name one of its methods "
                           f"({qual}.forward, {qual}.__call__)")
            return
        elif callable(raw) and not (inspect.isfunction(raw) or inspect.ismethod(raw)):
            # a callable object (a model, a functools.partial): a function in its place had
            # none of its attributes, and the program's model.eval() or part.func failed
            _step_fn_error(_not_a_function(spec, qual, raw))
            return
        elif callable(raw):
            if getattr(raw, "__cuptiprof_wrapped__", None):
                return
            new = _wrap_step(raw)
        else:
            _step_fn_error(f"--step-fn {spec}: {qual} is not a function")
            return
        setattr(owner, parts[-1], new)
        _step_fn_mark("step-fn.hooked", "")

    main = main_hook.main_module_name()
    # `python -m pkg` runs pkg/__main__.py as __main__: pkg.__main__ names it too
    watched = module == "__main__" or (main is not None and module in (main, main + ".__main__"))
    if watched:
        # The main script runs as __main__ and is never imported by its own name: catch the
        # def as it runs. Other processes of the command (a torchrun parent, helper scripts)
        # watch their own main script, and only a run where none of them found it is an error.
        main_hook.watch(qual, wrap)
        atexit.register(_main_missing, spec)
    if module != "__main__":
        # Under `python -m pkg`, runpy imports the package pkg before it runs pkg/__main__.py as
        # __main__: pkg:f names a function of either, and only one without it in both is wrong.
        _when_imported(module, (lambda mod: wrap(mod, also_main=True)) if watched else wrap)


def _not_a_function(spec: str, qual: str, obj) -> str:
    if isinstance(obj, functools.partial):
        of = getattr(obj.func, "__qualname__", None)
        return (f"--step-fn {spec}: {qual} is a functools.partial, not a function: name the "
                f"function it calls{f' ({of})' if of else ''}")
    cls = type(obj)
    a = "an" if cls.__qualname__[:1].lower() in "aeiou" else "a"
    what = f"--step-fn {spec}: {qual} is {a} {cls.__qualname__} object, not a function"
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None:
        # a decorator's wrapper (functools.lru_cache): the method of its class is the wrapping
        # machinery, and the function inside is out of --step-fn's reach under the same name
        of = getattr(wrapped, "__qualname__", None) or repr(wrapped)
        return (f"{what}: it wraps the function {getattr(wrapped, '__module__', '?')}:{of}; "
                f"name a function that calls it, or mark its calls with cuptiprof.step(...)")
    method = next((m for m in ("forward", "__call__") if inspect.isfunction(getattr(cls, m, None))),
                  None)
    if method is None:   # a callable of C code (torch.jit's ScriptFunction): no method to name
        return (f"{what}: name a function that calls it, or mark its calls with "
                f"cuptiprof.step(...)")
    return (f"{what}: name a method of its class ({cls.__module__}:{cls.__qualname__}.{method})")


_main_alt: list[str] = []   # --step-fn's module (also the main module) lacked the function


def step_fn_parts(qual: str) -> list[str]:
    """'main.<locals>.step' and 'main.step' -> ['main', 'step']."""
    return [p for p in qual.split(".") if p != "<locals>"]


def _wrap_inner(func, path: list[str], spec: str) -> None:
    from cuptiprof.run import nested

    try:
        nested.decorate_inner(func, path, _wrap_step, "__cuptiprof_step__")
    except nested.NotReachable as exc:
        _step_fn_error(f"--step-fn {spec}: {exc}")
        return
    _step_fn_mark("step-fn.hooked", "")


def _main_missing(spec: str) -> None:
    if main_hook.state() != "found" and _main_alt:
        _step_fn_error(_main_alt[0])
    elif main_hook.state() != "found":
        _step_fn_mark("step-fn.main-missing",
                      f"--step-fn {spec}: the main script defined no {spec.partition(':')[2]} "
                      "at module level (for a function defined inside another one, name both: "
                      "__main__:main.denoise_step)")


def _step_fn_mark(name: str, text: str) -> bool:
    """Leave a marker for the launcher; False where none could be written."""
    if shared._rec is not None:
        try:
            (shared._rec.parts / name).write_text(text)
            return True
        except OSError:
            pass
    return False


def _step_fn_error(msg: str) -> None:
    # The launcher reads the marker and says it once, after the run: as its error, or as a
    # warning where other processes marked steps. Said here only where it cannot be.
    if not _step_fn_mark("step-fn.error", msg):
        warn(msg)
