"""Every environment variable that carries `cuptiprof run` settings to the profiled processes.

The launcher writes them once into the child's environment; every Python process started below
it (the command itself, multiprocessing/torchrun workers) inherits them and reads them here.
Nothing else in cuptiprof reads or writes these names.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Mapping

# JSON of ChildSettings; its presence is what turns profiling on in a child.
SETTINGS = "CUPTIPROF_RUN_SETTINGS"
# Folder where each process writes its part file (<host>-<pid>.duckdb) and start marker.
PARTS_DIR = "CUPTIPROF_RUN_PARTS"
# The folder holding the bootstrap sitecustomize.py, so it can step aside and chain to the
# sitecustomize that would have loaded without cuptiprof.
BOOTSTRAP_DIR = "CUPTIPROF_RUN_BOOTSTRAP"
# Set by a profiled process just before it replaces its program (os.exec*): JSON of its pid,
# the new program image's number and the step counts so far, so that the new image writes its
# own part file (<host>-<pid>.exec<N>.duckdb) and goes on counting steps where the old one
# stopped. Read and removed by that image.
EXEC_STATE = "CUPTIPROF_RUN_EXEC"
# Set to 1 (by the user) to load nothing in the children: a kill switch.
DISABLE = "CUPTIPROF_DISABLE"
# Read by NVTX at its first call in a process: libcupti, so NVTX ranges become CUPTI records.
NVTX_INJECTION = "NVTX_INJECTION64_PATH"
# The collector's fake CUPTI (tests): passed through untouched.
FAKE_CUPTI = "CUPTIPROF_FAKE_CUPTI"
# Kineto's log level: the CPU fallback uses torch.profiler, whose start/stop lines are noise.
KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"

# Tuning knobs the user may set, read by each profiled process (recorder.py), with their
# defaults in seconds: how often torch.profiler hands its ops over without a GPU, and how often
# a step's end commits. A value that is not a number falls back to the default; the launcher
# says so once (preflight.warn_knobs).
OPS_EVERY_S = "CUPTIPROF_OPS_EVERY_S"
FLUSH_EVERY_S = "CUPTIPROF_FLUSH_EVERY_S"
KNOBS = {OPS_EVERY_S: 1.0, FLUSH_EVERY_S: 1.0}

# Modes of a child: 'profile' records (CUPTI, or the CPU fallback); 'light' records ranges and
# logs only; 'time' only times the steps (the baseline of --overhead).
MODES = ("profile", "light", "time")


@dataclass
class ChildSettings:
    """What each profiled process needs to know. Serialised as JSON into SETTINGS."""

    mode: str = "profile"
    warmup: int = 0
    steps: int | None = None
    kinds: list[str] | None = None
    step_range: str | None = None
    step_fn: str | None = None
    log_level: str = "INFO"
    run_label: str | None = None
    # the command, shortened to COMMAND_CHARS (the run record keeps it whole): one variable of
    # the environment holds at most 128 KiB, and a longer one fails the command's start (E2BIG)
    command: str | None = None
    gpu: bool | None = None          # None: each child checks for itself
    extra: dict = field(default_factory=dict)

    def to_env(self) -> str:
        d = asdict(self)
        if d["command"] is not None and len(d["command"]) > COMMAND_CHARS:
            d["command"] = d["command"][:COMMAND_CHARS - 1] + "\u2026"
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ChildSettings | None":
        env = os.environ if env is None else env
        raw = env.get(SETTINGS)
        if not raw or env.get(DISABLE, "") not in ("", "0"):
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict):   # not the launcher's: exported by hand, or damaged
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


COMMAND_CHARS = 4096


def child_env(base: Mapping[str, str], settings: ChildSettings, parts_dir: str,
              bootstrap_dir: str, nvtx_injection: str | None = None) -> dict[str, str]:
    """The environment of the profiled command: the user's, plus cuptiprof's variables and the
    bootstrap folder first on PYTHONPATH."""
    env = dict(base)
    env[SETTINGS] = settings.to_env()
    env[PARTS_DIR] = parts_dir
    env[BOOTSTRAP_DIR] = bootstrap_dir
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = bootstrap_dir + (os.pathsep + old if old else "")
    if nvtx_injection and NVTX_INJECTION not in env:
        env[NVTX_INJECTION] = nvtx_injection
    if settings.gpu is False and KINETO_LOG_LEVEL not in env:
        env[KINETO_LOG_LEVEL] = "6"
    return env


def carry_env(env: Mapping) -> Mapping:
    """The environment a profiled process gives a program it starts (subprocess's env=,
    os.execve), with cuptiprof's variables and the bootstrap on PYTHONPATH added where it left
    them out: a Python started with an environment of its own is profiled as every other one.
    Unchanged where nothing profiles this process, or where the environment chooses for itself
    (it carries cuptiprof's settings, or DISABLE)."""
    boot = os.environ.get(BOOTSTRAP_DIR)
    if not boot or SETTINGS not in os.environ or SETTINGS in env or DISABLE in env \
            or any(isinstance(k, bytes) for k in env):   # bytes keys: left as the program made them
        return env
    out = dict(env)
    for key in (SETTINGS, PARTS_DIR, BOOTSTRAP_DIR, NVTX_INJECTION, FAKE_CUPTI, KINETO_LOG_LEVEL):
        if key in os.environ and key not in out:
            out[key] = os.environ[key]
    paths = out.get("PYTHONPATH", "")
    if boot not in paths.split(os.pathsep):
        out["PYTHONPATH"] = boot + (os.pathsep + paths if paths else "")
    return out
