"""The file a Session writes, made when it starts (or, in a process `cuptiprof run` records,
once there is something to write), and the rows it begins with: the run's source and versions,
the process, and the CPU as the device of a run without a GPU."""
from __future__ import annotations

import os
import socket
import sys
from typing import Any

import pyarrow as pa

from cuptiprof import ranks
from cuptiprof.cpu_device import cpu_name
from cuptiprof.store import arrow


class _StartRows:
    """Session's methods that make its file and write the rows it starts with."""

    def _file(self) -> Any:
        """The Writer; in a process `cuptiprof run` records (its part file), made once there is
        something to write: the first step's flush, a range, a data_quality row, GPU work. A
        process that reaches no step and records nothing (a helper script, a compile worker)
        leaves no part file, as the Recorder does without a GPU. Under the flush lock."""
        if self.writer is None:
            from cuptiprof.store.writer import Writer

            self.writer = Writer(self.path, self._run, mode=self.mode, pid=self.pid,
                                 synced=False)
            self._write_start()
        return self.writer

    def _write_start(self) -> None:
        from cuptiprof.collect import device_info, libcuda

        src = self.source
        source_name = {"cupti": "cupti", "fake": "synthetic"}.get(src.name, "cpu")
        self.writer.execute(
            "UPDATE runs SET source = ?, cuda_driver_version = ?, cupti_version = ?, "
            "torch_version = coalesce(torch_version, ?) WHERE run_id = ?",
            [source_name, libcuda.driver_version() if src.name == "cupti" else None,
             device_info.cupti_version() if src.name == "cupti" else
             ("fake cupti" if src.name == "fake" else None),
             device_info.torch_version(), self.writer.run_id])
        self.writer.append({"processes": {
            "pid": [self.pid], "host": [socket.gethostname()],
            **{k: arrow.array([v], pa.int32()) for k, v in ranks.from_env(os.environ)._asdict().items()},
            "command": [_command_line()], "start_ns": [self._start_ns],
            "end_ns": arrow.array([None], pa.int64()), "exit_status": arrow.array([None], pa.int32()),
            # TRUE until stop() says otherwise: a killed process leaves it TRUE.
            "ended_early": [True]}})
        if not src.gpu:
            self.writer.append({"devices": {"device_id": [-1], "kind": ["cpu"],
                                            "name": [cpu_name()], "source": ["cpu"]}})
            self._devices_written = True


def _command_line() -> str:
    """The process's command line as started (sys.argv is what runpy or multiprocessing made
    of it: pkg/__main__.py for `python -m pkg`, the parent's argv in a spawned worker)."""
    from cuptiprof.errors import command_text

    return command_text(getattr(sys, "orig_argv", None) or sys.argv)
