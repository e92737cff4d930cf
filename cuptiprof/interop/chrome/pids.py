"""The pid each row is written under (_Pids), and the id columns moved apart per process."""
from __future__ import annotations

from cuptiprof.interop.chrome.json_sql import _lit


class _Pids:
    """Kineto's pid of each row. One process: its own pid for CPU rows, the device ordinal for
    GPU rows (as torch.profiler writes), or where its pid is one of its devices' ordinals (a
    container's PID 1 on GPU 1: one process, and threads and streams of one number one track,
    in a viewer) GPU_APART + the ordinal, and rows of no device GPU_APART - 1 (an imported
    process of pid -1 would share theirs, -1, otherwise); the importer reads a GPU row's
    device from its args (-1 written there for no device where the pid does not say it).
    Several: numbers by the process's index (in run, pid order) so that two processes'
    devices 0 stay apart: GPU_APART + 1000 * index + ordinal for GPU rows, and for CPU rows
    pids above all of those (2_000_000 + index up to 1000 processes)."""

    GPU_APART = 1_000_000
    flow_stride = 1 << 32   # flow ids: see scope.py; export_chrome sets it above the export's ids

    def __init__(self, procs: list[tuple], devices=()):
        self.single = len(procs) <= 1
        self.index = {p: i for i, p in enumerate(procs)}
        # past 1000 processes the GPU pids of the 1001st reach 2_000_000: the CPU pids go above
        self.cpu_base = self.GPU_APART + 1000 * max(len(procs), 1000)
        self.own = procs[0][1] if self.single and procs else None
        self.gpu_base = self.GPU_APART if self.own is not None and self.own in devices else 0
        # Perfetto UI reads a negative pid as none (pid 0): one that would be negative (the CPU
        # ops of a run without a GPU, device -1, and rows of no device; an imported process of
        # a negative pid) is written as an unused positive one, which `written` maps back to
        # what it stands for (the trace's cuptiprofNegativeIds, read back by the importer)
        self.written: dict[int, int] = {}
        taken = {d + self.gpu_base for d in devices if d is not None and d + self.gpu_base >= 0}
        if self.own is not None and self.own >= 0:
            taken.add(self.own)
        free = (p for p in range(self.GPU_APART - 1, 0, -1) if p not in taken)
        self.no_gpu = next(free) if self.single and not self.gpu_base else None
        if self.no_gpu is not None:
            self.written[self.no_gpu] = -1
        self.own_out = self.own
        if self.own is not None and self.own < 0:
            self.own_out = next(free)
            self.written[self.own_out] = self.own

    def gpu(self, run_id, pid, dev) -> int:
        if self.single:
            p = (-1 if dev is None else dev) + self.gpu_base
            return self.no_gpu if p < 0 and self.no_gpu is not None else p
        dev = -1 if dev is None else dev
        return 1_000_000 + self.index.get((run_id, pid), 0) * 1000 + dev

    def cpu(self, run_id, pid) -> int:
        return self.own_out if self.single else self.cpu_base + self.index.get((run_id, pid), 0)

    # The same in SQL, over a row that has run_id, pid and (after `join`) p_idx.
    def gpu_sql(self, dev: str) -> str:
        dev = f"coalesce({dev}, -1)"
        if self.single and self.gpu_base:
            return f"({self.gpu_base} + {dev})"
        if self.single:
            return f"CASE WHEN {dev} < 0 THEN {self.no_gpu} ELSE {dev} END"
        return f"(1000000 + coalesce(p_idx, 0) * 1000 + {dev})"

    def cpu_sql(self) -> str:
        if self.single:
            return "pid" if self.own_out == self.own else _lit(self.own_out)
        return f"({self.cpu_base} + coalesce(p_idx, 0))"

    def join(self) -> str:
        if self.single:
            return ""
        rows = ", ".join(f"({_lit(r)}, {_lit(p)}, {i})" for (r, p), i in self.index.items())
        # IS NOT DISTINCT FROM: a NULL run_id or pid finds its index, as in `gpu` and `cpu`
        return (f" LEFT JOIN (VALUES {rows}) _p(p_run, p_pid, p_idx) "
                "ON _p.p_run IS NOT DISTINCT FROM _t.run_id AND _p.p_pid IS NOT DISTINCT FROM _t.pid")


# Id columns each table writes: correlation ids tie calls to their GPU work (flows, and the
# importer's links), External ids tie both to ranges; all are numbered per process.
_IDS = {"ranges": ("range_id",), "api_calls": ("correlation_id", "range_id"),
        "memory_events": ("correlation_id",), "logs": ()}
_GPU_IDS = ("correlation_id", "op_id", "range_id")
_ID_STRIDE = 1 << 32   # CUPTI correlation ids are 32-bit
