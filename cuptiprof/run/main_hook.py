"""Catch a function of the program's main script right after its `def` ran, before the script's
next statement: what `--step-fn __main__:denoise` (or `--step-fn infer:denoise` for
`python infer.py`) needs, since the script runs as `__main__` and is never imported by name.

How: Python hands the main script's module code to audit hooks ("exec") just before running it.
From then on, each of that code's own lines (not the lines of functions it calls) is preceded by
a check of `__main__`'s globals for the name:
  * Python 3.12+: LINE events of that one code object (sys.monitoring); nothing else is slowed;
  * Python 3.10/3.11: a trace function until the name appears, off while the script's own
    import statements run. Other calls the script makes before the def still run traced (the
    interpreter makes a frame object for each; a C callable answers them, not Python code).
    Once found it is removed.
Standard library only: this module is imported in every process `cuptiprof run` starts.
"""
from __future__ import annotations

import builtins
import os
import sys
import types
from typing import Callable

# sys.monitoring tool ids that the standard tools leave free (0 debugger, 1 coverage,
# 2 profiler, 5 optimizer).
_TOOL_IDS = (3, 4)


def main_module_name(orig_argv: list[str] | None = None) -> str | None:
    """The name the main script would have if imported: `infer` for `python path/infer.py`,
    `pkg.app` for `python -m pkg.app`; None for `python -c` and interactive sessions."""
    argv = list(sys.orig_argv if orig_argv is None else orig_argv)[1:]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--check-hash-based-pycs":
            i += 2
            continue
        if a == "-":
            return None
        if a.startswith("-") and not a.startswith("--"):
            # Short options, several to a word as Python takes them (`-um pkg`, `-uW ignore`):
            # -c and -m end the options, -W and -X take a value (the word's rest, or the next).
            for j, ch in enumerate(a[1:], 2):
                if ch == "c":
                    return None
                if ch == "m":
                    return a[j:] or (argv[i + 1] if i + 1 < len(argv) else None)
                if ch in "WX":
                    i += 0 if a[j:] else 1
                    break
        if a.startswith("-"):
            i += 1
            continue
        name = os.path.basename(a)
        return name[:-3] if name.endswith(".py") else None
    return None


def as_function(obj) -> types.FunctionType | None:
    """The Python function `obj` is (a classmethod's through its __func__), else None."""
    f = getattr(obj, "__func__", obj)
    return f if isinstance(f, types.FunctionType) else None


# C callables (builtins, methods of C types): no Python code of a step in them, and wrapping one
# (builtins:len) wraps every call of it in the process, cuptiprof's own included
_C_CALLABLES = (types.BuiltinFunctionType, types.MethodDescriptorType,
                types.WrapperDescriptorType, types.MethodWrapperType,
                types.ClassMethodDescriptorType)


def not_python(spec: str, qual: str, obj) -> str | None:
    """Why --step-fn cannot wrap `obj` (as stored: a staticmethod's function counts): a C
    function; None for anything else."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if not isinstance(obj, _C_CALLABLES):
        return None
    return (f"--step-fn {spec}: {qual} is a built-in (C) function: --step-fn needs a Python "
            "function (a step's function, e.g. a model's forward)")


def walk(obj, parts: list[str]) -> tuple[object, list[str]]:
    """Follow attribute names from `obj`, stopping early at a function: the names left over
    name functions defined inside it (main.denoise_step). Raises AttributeError."""
    for i, p in enumerate(parts):
        if as_function(obj) is not None:
            return obj, parts[i:]
        obj = getattr(obj, p)
    return obj, []


def _is_main_code(co) -> bool:
    if getattr(co, "co_name", None) != "<module>":
        return False
    main = sys.argv[0] if sys.argv else ""
    if main == "-c":
        return co.co_filename == "<string>"
    if main in ("-", ""):   # `python - < app.py`, or a script piped to a bare `python`
        return co.co_filename == "<stdin>"
    try:
        return os.path.realpath(co.co_filename) == os.path.realpath(main)
    except (TypeError, ValueError, OSError):
        return False


class _Watch:
    """One watch of `__main__` for `qualname`; `found()` runs once, when it resolves."""

    def __init__(self, qualname: str, found: Callable[[object], None]):
        self.parts = [p for p in qualname.split(".") if p != "<locals>"]
        self.found = found
        self.armed = False      # the main script started running
        self.done = False       # found, or the main script's code returned
        self.ok = False         # found
        self.code = None
        self.tool: int | None = None

    # -- the check --------------------------------------------------------------------------
    def _ready(self) -> bool:
        main = sys.modules.get("__main__")
        obj = getattr(main, "__dict__", {}).get(self.parts[0])
        try:
            obj, _ = walk(obj, self.parts[1:])
        except AttributeError:
            return False
        return obj is not None

    def _check(self) -> bool:
        if self.done or not self._ready():
            return False
        self.done = self.ok = True
        try:
            self.found(sys.modules["__main__"])
        except Exception as exc:  # never into the program's own frame
            sys.stderr.write(f"cuptiprof: warning: could not hook __main__: {exc!r}\n")
        return True

    # -- the audit hook ---------------------------------------------------------------------
    def audit(self, event: str, args) -> None:
        if self.armed or event != "exec" or not args or not _is_main_code(args[0]):
            return
        self.armed = True
        self.code = args[0]
        # The namespace the script runs in: __main__'s (runpy hands -m modules that same dict).
        self.globals = getattr(sys.modules.get("__main__"), "__dict__", None)
        if self.globals is None:
            self.globals = {self.parts[0]: None}   # no fast path: check every line
        if not self._start_monitoring():
            self._start_tracing()

    # -- Python 3.12+ -----------------------------------------------------------------------
    def _start_monitoring(self) -> bool:
        mon = getattr(sys, "monitoring", None)
        if mon is None:
            return False
        for tool in _TOOL_IDS:
            if mon.get_tool(tool) is None:
                break
        else:
            return False
        mon.use_tool_id(tool, "cuptiprof")
        self.tool = tool
        ev = mon.events
        mon.register_callback(tool, ev.LINE, self._on_line)
        mon.register_callback(tool, ev.PY_RETURN, self._on_return)
        mon.set_local_events(tool, self.code, ev.LINE | ev.PY_RETURN)
        return True

    def _on_line(self, code, line):
        # The full check only once the top-level name exists (a dict lookup per line).
        if self.parts[0] in self.globals and self._check():
            self._stop_monitoring()

    def _on_return(self, code, offset, value):
        self.done = True
        self._stop_monitoring()

    def _stop_monitoring(self) -> None:
        mon, tool = sys.monitoring, self.tool
        if tool is None:
            return
        self.tool = None
        mon.set_local_events(tool, self.code, 0)
        mon.register_callback(tool, mon.events.LINE, None)
        mon.register_callback(tool, mon.events.PY_RETURN, None)
        mon.free_tool_id(tool)

    # -- Python 3.10/3.11 -------------------------------------------------------------------
    def _start_tracing(self) -> None:
        prev = sys.gettrace()
        code = self.code
        prev_local = None
        real_import = builtins.__import__
        name = self.parts[0]
        # Once the main script's frame has its local trace function, every other frame only
        # needs "no local tracing": a C callable that returns None for (frame, event, arg)
        # costs far less per call than a Python one. With a trace function of another tool
        # (a debugger, coverage) already set, that one is chained instead.
        others = None

        def stop(frame) -> None:
            self.done = True
            sys.settrace(prev)
            frame.f_trace = prev_local
            if builtins.__import__ is quiet_import:
                builtins.__import__ = real_import

        def local(frame, event, arg):
            nonlocal prev_local
            if prev_local is not None:
                prev_local = prev_local(frame, event, arg)
            # The full check only once the top-level name exists (a dict lookup per line).
            if event == "line" and name in frame.f_globals and self._check() or event == "return":
                stop(frame)
                return prev_local
            return local

        def on_call(frame, event, arg):
            nonlocal prev_local, others
            if frame.f_code is code:
                if prev is not None:
                    prev_local = prev(frame, event, arg)
                else:
                    others = _NO_LOCAL_TRACE
                    sys.settrace(others)
                return local
            return prev(frame, event, arg) if prev is not None else None

        def quiet_import(*args, **kwargs):
            # The script's own import statements (most of what runs before a def) run with
            # the trace function off: it would be called for every Python call they make
            # (`import torch` took 1.7x as long under it). The script's next line is traced again.
            if prev is not None or self.done or sys._getframe(1).f_code is not code:
                return real_import(*args, **kwargs)
            sys.settrace(None)
            try:
                return real_import(*args, **kwargs)
            finally:
                if not self.done:
                    sys.settrace(others or on_call)

        builtins.__import__ = quiet_import
        sys.settrace(on_call)


# object.__init__(frame, event, arg) returns None and does nothing: frames cannot be created
# from Python, so object's __init__ accepts and ignores the extra arguments.
_NO_LOCAL_TRACE = object.__init__

_watch: _Watch | None = None


def watch(qualname: str, found: Callable[[object], None]) -> None:
    """Call found(__main__ module) as soon as `qualname` resolves in the main script's globals
    (checked before each of the script's own top-level lines). Call before the script starts
    (from sitecustomize); one watch per process."""
    global _watch
    if _watch is not None:
        return
    _watch = _Watch(qualname, found)
    sys.addaudithook(_watch.audit)


def state() -> str:
    """'found', 'missing' (the main script ran to its end without defining it), 'running'
    (it has not finished), or 'idle' (no watch, or the main script never started)."""
    w = _watch
    if w is None or not w.armed:
        return "idle"
    if w.ok:
        return "found"
    return "missing" if w.done else "running"
