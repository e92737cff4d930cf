"""What runs inside every Python process that `cuptiprof run` starts (loaded by the bootstrap
sitecustomize before the program's own code).

It reads the settings from the environment (settings.py), then:
  * marks steps: --step-fn wraps a function (each call is one step), --step-range treats an NVTX
    range the program opens (torch.cuda.nvtx / the nvtx package) as the step;
  * captures Python logging records at or above --log-level into the `logs` table;
  * records: the CUPTI collector's Session on a GPU, or the Recorder (light mode, the no-GPU
    torch.profiler fallback, or step timing only for --overhead);
  * closes its part file at exit, after SIGTERM or SIGHUP, and in forked children.
Nothing here may break the profiled program: failures become one warning line on stderr.
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import sys

from cuptiprof.outputs import hold_closed_std_fds
from cuptiprof.run import settings as S
from cuptiprof.run.child import shared
from cuptiprof.run.child.ending import _at_exit, _chain_excepthook, _note_exit_status
from cuptiprof.run.child.import_hooks import _when_imported
from cuptiprof.run.child.processes import (_after_fork, _carry_env_in_popen, _exec_state,
                                           _install_exec, _patch_mp_bootstrap, _watch_popen_reaping,
                                           _watch_reaping)
from cuptiprof.run.child.range_patches import _patch_markers, _patch_nvtx_package, _patch_torch_nvtx
from cuptiprof.run.child.recording import _install_logging, _open_recording
from cuptiprof.run.child.shared import warn
from cuptiprof.run.child.signals import _install_sigterm
from cuptiprof.run.child.step_fn import _hook_step_fn


def activate() -> None:
    """Entry point from the bootstrap; does nothing unless `cuptiprof run` set the settings."""
    s = S.ChildSettings.from_env()
    parts = os.environ.get(S.PARTS_DIR)
    if s is None or not parts or not os.path.isdir(parts) or shared._rec is not None:
        return
    hold_closed_std_fds()   # before the part file and the SIGTERM watcher's pipe are opened
    # A command may start a Python other than the one cuptiprof is installed in (the bootstrap
    # still finds cuptiprof itself); without the store's libraries it cannot record anything.
    missing = [m for m in ("numpy", "pyarrow", "duckdb") if importlib.util.find_spec(m) is None]
    if missing:
        warn(f"{sys.executable} cannot import {', '.join(missing)}: this process is not profiled; "
             "install cuptiprof into that Python's environment, or run the command with the "
             "Python cuptiprof is installed in")
        return
    _open_recording(s, parts, _exec_state())
    if shared._rec.mode != "time":
        _install_logging(s.log_level)
    if shared._rec.mode == "cpu":
        _when_imported("torch", lambda torch: shared._rec.start_profiler(torch))   # _rec of the time
    if s.step_fn:
        _hook_step_fn(s.step_fn)
    if s.step_range:
        # Python NVTX calls drive the step (warm-up, flush, switch-off) with or without CUPTI.
        _when_imported("torch", _patch_torch_nvtx)
        _when_imported("nvtx", _patch_nvtx_package)
    _when_imported("cuptiprof.markers", _patch_markers)
    _when_imported("multiprocessing.process", _patch_mp_bootstrap)
    atexit.register(_at_exit, True)
    _chain_excepthook()
    _note_exit_status()
    _install_sigterm()
    os.register_at_fork(after_in_child=_after_fork)
    _install_exec()
    _when_imported("subprocess", _carry_env_in_popen)
    # how a child ended, as this process reaps it: from when it can have children
    _when_imported("subprocess", _watch_popen_reaping)
    _when_imported("multiprocessing", _watch_reaping)
    os.register_at_fork(after_in_parent=_watch_reaping)


def holds_process() -> bool:
    """True where `cuptiprof run` records this process (the bootstrap ran)."""
    return shared._rec is not None
