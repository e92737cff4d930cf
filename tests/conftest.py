"""Shared fixtures. GPU tests carry the `gpu` marker and skip cleanly without a GPU."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
from pathlib import Path

import pytest
from hypothesis import settings as hyp_settings

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"

# The signal tests end programs by SIGINT, SIGTERM and SIGHUP, as a terminal or a scheduler
# does. A suite started with one of them ignored (nohup, a background job of a script) hands
# that on to every program it starts, and an ignored signal stays ignored there (cuptiprof keeps
# nohup's choice, as Python keeps an ignored SIGINT): the tests hung or ran on. Restore them.
for _sig, _default in ((signal.SIGINT, signal.default_int_handler),
                       (signal.SIGTERM, signal.SIG_DFL), (signal.SIGHUP, signal.SIG_DFL)):
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, _default)

# Property tests draw the same examples on every run (a seed derived from each test), so a run
# of the suite passes or fails by the code alone; CUPTIPROF_HYPOTHESIS=explore draws new ones
# each run, to look for counterexamples on purpose.
hyp_settings.register_profile("fixed", derandomize=True, database=None)
hyp_settings.register_profile("explore", derandomize=False)
hyp_settings.load_profile("explore" if os.environ.get("CUPTIPROF_HYPOTHESIS") == "explore"
                          else "fixed")


def _has_gpu() -> bool:
    if os.environ.get("CUPTIPROF_TEST_NO_GPU"):
        return False
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)[:1]
        if int(err) != 0:
            return False
        err, n = driver.cuDeviceGetCount()
        return int(err) == 0 and n > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU on this machine")
    skip_browser = pytest.mark.skip(reason="no headless chromium on this machine")
    has_browser = bool(shutil.which("chromium") or shutil.which("chromium-browser"))
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)
        if "browser" in item.keywords and not has_browser:
            item.add_marker(skip_browser)


@pytest.fixture
def shared_traces() -> Path:
    """../shared/traces (real traces recorded by others); the test skips when absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is not present")
    return SHARED_TRACES


def report_tally(request, tally: dict, what: str, outcome: str) -> None:
    """The reliability line of a test module that counts its cases in `tally` (tried, clean)."""
    if tally["tried"]:
        report_line(request, f"reliability: {tally['tried']} {what}, {tally['clean']} {outcome}")


def report_line(request, line: str) -> None:
    """Print one line into pytest's output, outside capture (the reliability counts)."""
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    cap = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None:
        with cap.global_and_fixture_disabled() if cap else contextlib.nullcontext():
            tr.write_line(line)

# The collector flushes at a step's end at most once a second (CUPTIPROF_FLUSH_EVERY_S): tests
# that kill or interrupt a run after some steps count on every step having been flushed at its
# end, so the suite flushes at every step; tests of the time floor itself set it again.
os.environ.setdefault("CUPTIPROF_FLUSH_EVERY_S", "0")
