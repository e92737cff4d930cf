"""Typed failures of the collector. Each is an EnvironmentProblem: one line for the user, exit 3.

A Session catches them at start, says so in one line on stderr, records what was not captured
in `data_quality`, and keeps the user's program running with host-side ranges only.
"""
from __future__ import annotations

from cuptiprof.errors import EnvironmentProblem


class CollectorProblem(EnvironmentProblem):
    """Base class; `check` is the data_quality check_name that records it in the file."""

    check = "cupti_error"


class CuptiUnavailable(CollectorProblem):
    """cupti-python is not installed, or libcupti cannot be loaded."""

    check = "cupti_unavailable"


class NoGpu(CuptiUnavailable):
    """No CUDA driver or no GPU: nothing on the device can be recorded."""

    check = "no_gpu"


class SubscriberConflict(CollectorProblem):
    """Another CUPTI client (torch.profiler, nsys, ncu, cuda-gdb) holds the subscriber slot."""

    check = "subscriber_conflict"


class CuptiFailure(CollectorProblem):
    """A CUPTI call failed (status given in the message)."""

    check = "cupti_error"
