"""The CPU's name for its row in `devices` (device_id -1), which a profiled run and the
collector's own runs both write. Light on imports: the profiled process loads it."""
from __future__ import annotations


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"
