"""Post-import hooks: a callback runs on a module once it is imported (at once where it is)."""
from __future__ import annotations

import importlib.abc
import sys

from cuptiprof.run.child.shared import warn


# -- post-import hooks ---------------------------------------------------------------------------
_pending: dict[str, list] = {}


class _Finder(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a watched module finished executing."""

    def find_spec(self, name, path=None, target=None):
        if name not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig = loader.exec_module

        def exec_module(module):
            orig(module)
            # A package may put another object in its place (diffusers and transformers
            # install a lazy module): hook what importers will get.
            _fire(name, sys.modules.get(name, module))

        try:
            loader.exec_module = exec_module
        except Exception:
            return spec
        return spec


_finder = _Finder()


def _fire(name: str, module) -> None:
    for cb in _pending.pop(name, []):
        try:
            cb(module)
        except Exception as exc:
            warn(f"could not hook {name}: {exc}")


def _when_imported(name: str, cb) -> None:
    mod = sys.modules.get(name)
    if mod is not None:
        _pending.setdefault(name, []).append(cb)
        _fire(name, mod)
        return
    _pending.setdefault(name, []).append(cb)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
