"""cuptiprof's bootstrap: `cuptiprof run` puts this folder first on PYTHONPATH, so every Python
process of the profiled command loads the collector before its own code runs.

It first imports the sitecustomize that would have loaded without cuptiprof (this folder is
taken off sys.path for that), then hands over to cuptiprof.run.child. It never stops the program:
a failure is one warning line.
"""
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _activate() -> None:
    try:
        import cuptiprof.run.child as child
    except ImportError:
        # Not installed where this interpreter looks: use the cuptiprof that launched us.
        sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))))
        import cuptiprof.run.child as child
    child.activate()


try:
    _chain()
except Exception as _exc:  # the other sitecustomize failed: Python would only warn, too
    sys.stderr.write(f"cuptiprof: warning: sitecustomize chained by cuptiprof failed: {_exc!r}\n")
try:
    _activate()
except Exception as _exc:
    sys.stderr.write(f"cuptiprof: warning: profiling is off in this process: {_exc!r}\n")
