"""Import Nsight Systems SQLite exports (`nsys export --type sqlite`) into a cuptiprof file.

Reads the CUPTI activity tables (KERNEL, MEMCPY, MEMSET, SYNCHRONIZATION, RUNTIME), StringIds,
NVTX_EVENTS and TARGET_INFO_GPU through Python's sqlite3 in batches of rows, handed to the
writer as Arrow columns. Columns and tables that older exports lack (or name differently) are
read as NULL. NVTX ranges reach GPU rows the way Nsight Systems projects them: through the
runtime call that launched the work, on its thread, at its time (start/end ranges, which need
not nest, by the rule in `NsysFile._nest`).

The ranges torch.autograd.profiler.emit_nvtx() pushes ('aten::mm, seq = 3, op_id = 17, sizes =
[[4, 8], [8, 16]]') are named by their op, torch's other parts kept as JSON in attrs, and an
operator is a range of kind 'op', as a torch.profiler trace gives it: the op of the GPU rows its
thread launched inside it (the innermost such op, as the Kineto importer links them).

Times stay on the export's own clock (nanoseconds since the capture started). Several exports
imported together (one per rank) are put on one clock: each is shifted by the time its capture
began after the earliest one's (TARGET_INFO_SESSION_START_TIME, UTC), so their ranks line up
as they ran; without that table in every file, each keeps its own clock and data_quality says
so (clock_unaligned).

A GPU row's process is its globalPid. One without it (NULL, or a table without that column:
no export nsys writes, an edited file) belongs to the only process the export's records name
(in any GPU table's globalPid, or the globalTid of a runtime or driver call or an NVTX range);
where they name several, or none, which process it ran for is unknown and the import is
refused, naming the table and row, as for any other value the importer cannot do without. It is
never written as a process 0.
"""
from __future__ import annotations

import json
import re
import sqlite3
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa

from cuptiprof import ranks
from cuptiprof.errors import InputError
from cuptiprof.interop.kineto import FileSummary, claim_pid
from cuptiprof.interop.nesting import nest, steps_at
from cuptiprof.store import arrow as AC

BATCH_ROWS = 200_000
# Used when the export carries no ENUM_* tables (schema 2.x).
COPY_KIND = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
             7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
MEM_KIND = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed",
            5: "device_static", 6: "managed_static", 7: "unknown"}
SYNC_TYPE = {0: "unknown", 1: "event_synchronize", 2: "stream_wait_event",
             3: "stream_synchronize", 4: "context_synchronize"}
NVTX_RANGE_TYPES = (59, 60, 70, 71)   # push/pop and start/end ranges (NVTX and NVTXT)
NVTX_START_END = (60, 71)
NVTX_DOMAIN_CREATE = 75
# columns the importer cannot do without: no row is placed in time, a thread or a device without
# them (any other integer column read may be NULL, as older exports lack some)
_NOT_NULL = ("start", "end", "globalTid", "deviceId")
# ranges of every kind, ended or not: one the program never ended (a crash or a stop inside it,
# `end` NULL) holds what its thread launched until the capture's end, as Nsight Systems draws it
_NVTX_READ = f"eventType IN ({', '.join(map(str, NVTX_RANGE_TYPES))})"
# torch.autograd.profiler.emit_nvtx() names each range it pushes after its record_function,
# then ", seq = N", ", op_id = N", ", sizes = [...]" (torch's getNvtxStr): "ProfilerStep#3,
# op_id = 17" is step 3
_STEP_RE = re.compile(r"^(?:ProfilerStep#|step[ _#:=]?)(\d+)(?:, (?:seq|op_id|sizes) = .*)?$",
                      re.IGNORECASE | re.DOTALL)
# The rest of torch's getNvtxStr, in its order, each part only where torch has it: ", seq = N"
# (N >= 0), ", op_id = N" (N > 0), ", sizes = [[2, 3], []]" and ", input_op_ids = [(17,0),
# (18,1)]" (both with record_shapes=True)
_OP_SUFFIX = re.compile(r", (?:seq|op_id|sizes|input_op_ids) = ")
_INTS = r"(?:-?\d+(?:, -?\d+)*)?"
_OP_FIELDS = re.compile(
    r"(?:, seq = (?P<seq>\d+))?(?:, op_id = (?P<op_id>\d+))?"
    rf"(?:, sizes = (?P<sizes>\[(?:\[{_INTS}\](?:, \[{_INTS}\])*)?\]))?"
    r"(?:, input_op_ids = (?P<input_op_ids>\[(?:\(\d+,-?\d+\)(?:, \(\d+,-?\d+\))*)?\]))?")
# torch's operators are named by namespace ("aten::mm", "c10d::allreduce_", a library's own
# "mylib::op", "autograd::engine::evaluate_function: AddmmBackward0") or are backward nodes
# ("AddmmBackward0", "CopyBackwards"); record_function labels ("## forward ##",
# "Optimizer.step#SGD.step") come in the same form and are the program's own ranges
_OP_NAME = re.compile(r".*::.*|\w+Backwards?\d*", re.DOTALL)


def _nvtx_text(name: str, f: dict) -> str:
    """The text torch's getNvtxStr writes for these parts."""
    out = name
    if "seq" in f:
        out += f", seq = {f['seq']}"
    if "op_id" in f:
        out += f", op_id = {f['op_id']}"
    if "sizes" in f:
        out += ", sizes = [" + ", ".join(
            "[" + ", ".join(map(str, s)) + "]" for s in f["sizes"]) + "]"
    if "input_op_ids" in f:
        out += ", input_op_ids = [" + ", ".join(f"({a},{b})" for a, b in f["input_op_ids"]) + "]"
    return out


def _torch_range(text: str | None) -> tuple[str, dict] | None:
    """(NAME, its parts) of a range torch.autograd.profiler.emit_nvtx() pushed, None for any
    other text: one without those parts ('aten::mm' alone, as anyone may name a range), or one
    whose parts do not read back as exactly the text (nothing of it is lost: it stays whole)."""
    m = _OP_SUFFIX.search(text or "")
    if m is None or m.start() == 0:
        return None
    f = _OP_FIELDS.fullmatch(text, m.start())
    if f is None:
        return None
    got: dict = {}
    for k in ("seq", "op_id"):
        if f[k] is not None:
            got[k] = int(f[k])
    if f["sizes"] is not None:
        got["sizes"] = json.loads(f["sizes"])
    if f["input_op_ids"] is not None:
        got["input_op_ids"] = json.loads(f["input_op_ids"].replace("(", "[").replace(")", "]"))
    name = text[:m.start()]
    return (name, got) if _nvtx_text(name, got) == text else None


def _step_number(text: str | None, payload) -> int:
    """The step an NVTX range marks, -1 for none: 'ProfilerStep#N' or 'step N' in its text, or
    'step' with N as its integer payload (as cuptiprof.range("step", step=N) pushes it). An N
    past the 32-bit step column ('step_1714567890123', a time in its name) marks none: the
    range stays a range of that name, not a failed import."""
    m = _STEP_RE.match(text or "")
    if m:
        return int(m.group(1)) if int(m.group(1)) < 1 << 31 else -1
    if (text or "").lower() == "step" and type(payload) is int and 0 <= payload < 1 << 31:
        return payload
    return -1


_GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
_ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
             "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME")


def _graph(ids: list) -> pa.Array:
    """graphId / graphNodeId: 0 is CUPTI's "not launched from a graph" (nsys writes it, or NULL),
    NULL as the collector stores it (collect/resolve.py)."""
    return AC.array([None if v == 0 else v for v in ids], pa.int64())


def _pid(global_id: int | None) -> int:
    return (int(global_id) >> 24) & 0xFFFFFF if global_id is not None else 0


# what to do about a value no export writes (a damaged or hand-edited file)
EDITED = ("the export is damaged or was edited: export it again "
          "(nsys export --type sqlite REPORT.nsys-rep)")


class NsysFile:
    def __init__(self, w, path: Path, used_pids: set[int], shift_ns: int = 0):
        self.w, self.path, self.used = w, path, used_pids
        self.shift = int(shift_ns)   # added to every time read: where this capture began
        try:
            self.db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        except sqlite3.Error as exc:
            raise InputError(f"{path}: not a readable SQLite file ({exc})") from None
        try:
            try:
                self.tables = {r[0] for r in self.db.execute(
                    "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
            except sqlite3.Error as exc:
                raise InputError(f"{path}: not a readable SQLite file ({exc})") from None
            if "StringIds" not in self.tables or not any(t in self.tables for t in _ACTIVITY):
                raise InputError(f"{path}: an SQLite file, but not an Nsight Systems export with "
                                 "CUDA activity (no StringIds / CUPTI_ACTIVITY_KIND_* tables); "
                                 "export one with `nsys export --type sqlite REPORT.nsys-rep`")
            with self._reading():
                self.strings = self._strings()
        except BaseException:
            self.db.close()
            raise
        self.rows: dict[str, int] = {}
        self.steps_by_pid: dict[int, int] = {}   # step ranges per process
        self.step_nums: dict[int, set[int]] = {}   # the step numbers of each process
        self.devices: dict[int, set[int]] = {}
        self.spans: dict[int, list[int]] = {}
        self.pid_of: dict[int, int] = {}   # the export's pid -> the pid its rows are written with
        self.read: dict[str, list[str]] = {}   # table -> the integer columns read from it
        self._sole: int | None = None   # the only process the export names (_sole_process)

    # helpers --------------------------------------------------------------------------------
    def _own(self, pid: int) -> int:
        """The pid this file's process is written with (kineto.claim_pid), the same for every
        row of that process."""
        p = self.pid_of.get(pid)
        if p is None:
            p = self.pid_of[pid] = claim_pid(self.used, pid)
        return p

    def _own_all(self, pids: np.ndarray) -> np.ndarray:
        u, _, inv = np.unique(pids, return_index=True, return_inverse=True)
        return np.array([self._own(int(x)) for x in u], np.int64)[inv.reshape(-1)]

    @contextmanager
    def _reading(self):
        """Every read of the export goes through here: a damaged page (or any other SQLite
        failure) anywhere in the file is the file's fault, named in one line."""
        try:
            yield
        except sqlite3.Error as exc:
            raise InputError(f"{self.path}: cannot read the Nsight Systems export ({exc})") from None

    def _strings(self) -> pa.Array:
        """StringIds' values in the order of their ids (`self.string_ids`, sorted): ids are
        looked up, not used as positions, so an id far beyond the others (a damaged or edited
        export) costs nothing."""
        by_id = {}
        for i, v in self.db.execute("SELECT id, value FROM StringIds"):
            if type(v) is bytes:   # a BLOB: refused as text that is not UTF-8 is (_reading)
                raise InputError(f"{self.path}: cannot read the Nsight Systems export (StringIds "
                                 f"id {i} holds bytes, not text)")
            if type(i) is not int:   # a table declared without INTEGER (edited)
                raise InputError(f"{self.path}: StringIds: the id {str(i)[:40]!r} is not an "
                                 f"integer; {EDITED}")
            by_id[i] = v
        ids = sorted(by_id)
        self.string_ids = np.array(ids, np.int64)
        return AC.array([by_id[i] for i in ids], pa.string())

    def _cols(self, table: str) -> set[str]:
        return {r[1] for r in self.db.execute(f'PRAGMA table_info("{table}")')}

    def _enum(self, table: str, default: dict, fmt) -> dict:
        if table not in self.tables:
            return default
        out = dict(default)
        for i, name in self.db.execute(f"SELECT id, name FROM {table}"):
            out[i] = fmt(name)
        return out

    def _select(self, table: str, wanted: list[str]):
        """Batches of column lists; a column the table lacks reads as NULL."""
        have = self._cols(table)
        exprs = []
        for c in wanted:
            alts = [a for a in c.split("|") if a in have]
            shift = f" + {self.shift}" if self.shift and c in ("start", "end") and alts else ""
            exprs.append(f'"{alts[0]}"{shift}' if alts else "NULL")
            self.read.setdefault(table, []).extend(alts[:1])
        cur = self.db.execute(f"SELECT {', '.join(exprs)} FROM {table} ORDER BY 1")
        while True:
            rows = cur.fetchmany(BATCH_ROWS)
            if not rows:
                return
            cols = [list(c) for c in zip(*rows)]
            if wanted[:2] == ["start", "end"]:
                self._check_spans(table, cols[0], cols[1])
            yield cols

    def _check_spans(self, table: str, start: list, end: list) -> None:
        """A row that ends before it starts is no span of time (a damaged export): refused, as
        the Kineto importer refuses a negative duration, not summed into every total."""
        try:
            (s, s_ok), (e, e_ok) = AC.ints(start), AC.ints(end)
        except (TypeError, ValueError, OverflowError):
            return   # not integers: the columns' conversion says so
        bad = e < s
        for ok in (s_ok, e_ok):
            if ok is not None:
                bad &= ok
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"{self.path}: {table}: a row ends before it starts (start {s[i]}, "
                             f"end {e[i]}); the export is damaged")

    def _bad_value(self) -> InputError | None:
        """The first value read that is not what its column holds (a NULL time or thread, text
        where an integer belongs), named by table, rowid and column; None where none is."""
        for table, cols in self.read.items():
            only = f" AND {_NVTX_READ}" if table == "NVTX_EVENTS" else ""
            for c in cols:
                allowed = "'integer'" if c in _NOT_NULL and not (
                    table == "NVTX_EVENTS" and c == "end") else "'integer', 'null'"
                try:
                    rows = self.db.execute(
                        f'SELECT rowid, typeof("{c}"), substr(quote("{c}"), 1, 40) FROM "{table}" '
                        f'WHERE typeof("{c}") NOT IN ({allowed}){only} LIMIT 1').fetchall()
                except sqlite3.Error:
                    continue
                if rows:
                    row = rows[0]
                    what = {"null": "NULL", "text": f"the text {row[2]}", "real": f"the number {row[2]}",
                            "blob": "bytes"}.get(row[1], row[1])
                    return InputError(
                        f"{self.path}: {table} rowid {row[0]}: {c} is {what}, where an integer "
                        f"belongs; {EDITED}")
        return None

    def _names(self, ids) -> pa.Array:
        arr, ok = AC.ints(ids)
        known = self.string_ids
        pos = np.minimum(np.searchsorted(known, arr), max(len(known) - 1, 0))
        bad = known[pos] != arr if len(known) else np.ones(len(arr), bool)
        if ok is not None:
            bad |= ~ok
        idx = AC.array(np.where(bad, 0, pos), pa.int32(), mask=bad)
        return pa.DictionaryArray.from_arrays(idx, self.strings)

    def _note(self, pids, dev, start, end):
        p = np.asarray(pids)
        d = np.asarray(dev)
        for pid in AC.distinct(p).tolist():
            m = p == pid
            self.devices.setdefault(pid, set()).update(AC.distinct(d[m]).tolist())
        self._span(p, start, end)

    def _span(self, pids, start, end) -> None:
        """Widen each process's span (its first and last record) over these rows."""
        p = np.asarray(pids)
        start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
        for pid in AC.distinct(p).tolist():
            m = p == pid
            s = self.spans.setdefault(pid, [np.iinfo(np.int64).max, np.iinfo(np.int64).min])
            s[0] = min(s[0], int(np.min(start[m])))
            s[1] = max(s[1], int(np.max(end[m])))

    def _count(self, table: str, n: int) -> None:
        self.rows[table] = self.rows.get(table, 0) + n

    # tables ---------------------------------------------------------------------------------
    def run(self) -> list[FileSummary]:
        try:
            with self._reading():
                self._gpu()
                calls = self._calls()
                ranges = self._nvtx()
                self._link(calls, ranges)
                self._meta()
        except (TypeError, ValueError, OverflowError):
            # Python's own words say what failed, not where in the file: find the value
            bad = self._bad_value()
            if bad is None:
                raise
            raise bad from None
        finally:
            self.db.close()
        return [FileSummary(str(self.path), pid, None, 0, dict(self.rows), {},
                            self.steps_by_pid.get(pid, 0)) for pid in self._pids()]

    def _pids(self) -> list[int]:
        """The file's processes: those with GPU work or host records."""
        return sorted(set(self.devices) | set(self.spans))

    def _gpu(self) -> None:
        w = self.w
        copy = self._enum("ENUM_CUDA_MEMCPY_OPER", COPY_KIND, lambda n: _COPY_FROM_ENUM.get(
            n.replace("CUDA_MEMCPY_KIND_", "").replace("UVM_", ""), "unknown"))
        memk = self._enum("ENUM_CUDA_MEM_KIND", MEM_KIND,
                          lambda n: n.replace("CUDA_MEMOPR_MEMORY_KIND_", "").lower())
        sync = self._enum("ENUM_CUPTI_SYNC_TYPE", SYNC_TYPE,
                          lambda n: n.replace("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_", "").lower())
        common = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid"]

        def base(c, table):
            owner = self._sole_process(table) if None in c[6] else 0
            pid = self._own_all(np.array([owner if g is None else _pid(g) for g in c[6]],
                                         np.int64))
            self._note(pid, c[2], c[0], c[1])
            return {"pid": AC.array(pid, pa.int32()), "start_ns": AC.array(c[0], pa.int64()),
                    "end_ns": AC.array(c[1], pa.int64()), "device_id": AC.array(c[2], pa.int32()),
                    "context_id": AC.array(c[3], pa.int32()),
                    "stream_id": AC.array([s if s is None or s < 1 << 31 else None for s in c[4]],
                                          pa.int32()),
                    "correlation_id": AC.array(c[5], pa.int64())}

        t = "CUPTI_ACTIVITY_KIND_KERNEL"
        if t in self.tables:
            for c in self._select(t, common + [
                    "mangledName", "demangledName", "gridX", "gridY", "gridZ", "blockX", "blockY",
                    "blockZ", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory",
                    "graphId", "graphNodeId"]):
                cols = base(c, t)
                name = [m if m is not None else d for m, d in zip(c[7], c[8])]
                cols["name"] = self._names(name)
                for k, v in zip(("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                                 "registers", "static_smem", "dynamic_smem"), c[9:18]):
                    cols[k] = AC.array(v, pa.int32())
                cols.update(graph_id=_graph(c[18]), graph_node_id=_graph(c[19]))
                w.append({"kernels": cols})
                self._count("kernel_rows", len(c[0]))
        t = "CUPTI_ACTIVITY_KIND_MEMCPY"
        if t in self.tables:
            for c in self._select(t, common + ["bytes", "copyKind", "srcKind", "dstKind", "srcDeviceId",
                                               "dstDeviceId", "graphId", "graphNodeId"]):
                cols = base(c, t)
                cols.update(bytes=AC.array(c[7], pa.int64()),
                            copy_kind=[copy.get(k, "unknown") for k in c[8]],
                            src_kind=[memk.get(k, "unknown") for k in c[9]],
                            dst_kind=[memk.get(k, "unknown") for k in c[10]],
                            src_device_id=AC.array(c[11], pa.int32()),
                            dst_device_id=AC.array(c[12], pa.int32()),
                            graph_id=_graph(c[13]), graph_node_id=_graph(c[14]))
                w.append({"memcpys": cols})
                self._count("memcpys", len(c[0]))
        t = "CUPTI_ACTIVITY_KIND_MEMSET"
        if t in self.tables:
            for c in self._select(t, common + ["bytes", "value", "memKind|memoryKind", "graphId",
                                               "graphNodeId"]):
                cols = base(c, t)
                cols.update(bytes=AC.array(c[7], pa.int64()), value=AC.array(c[8], pa.int32()),
                            memory_kind=[memk.get(k, "unknown") for k in c[9]],
                            graph_id=_graph(c[10]), graph_node_id=_graph(c[11]))
                w.append({"memsets": cols})
                self._count("memsets", len(c[0]))
        t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        if t in self.tables:
            for c in self._select(t, common + ["syncType", "eventId"]):
                cols = base(c, t)
                # 0xFFFFFFFF: CUPTI's "no event" (a sync of another type), NULL as the
                # collector stores it
                event = [e if e is not None and e != 0xFFFFFFFF else None for e in c[8]]
                cols.update(sync_type=[sync.get(k, "unknown") for k in c[7]],
                            cuda_event_id=AC.array(event, pa.int64()))
                w.append({"syncs": cols})
                self._count("syncs", len(c[0]))

    def _sole_process(self, table: str) -> int:
        """The process of a GPU row of `table` without a globalPid: the only one the export's
        records name (module docstring); refused where they name several or none."""
        if self._sole is not None:
            return self._sole
        named: set[int] = set()
        for t, col in [(t, "globalPid") for t in _GPU_TABLES] + [
                ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
                ("CUPTI_ACTIVITY_KIND_DRIVER", "globalTid"), ("NVTX_EVENTS", "globalTid")]:
            if t not in self.tables or col not in self._cols(t):
                continue
            only = f" AND {_NVTX_READ}" if t == "NVTX_EVENTS" else ""
            named.update(r[0] for r in self.db.execute(
                f'SELECT DISTINCT ("{col}" >> 24) & {0xFFFFFF} FROM "{t}" '
                f'WHERE typeof("{col}") = \'integer\'{only}'))
        if len(named) == 1:
            self._sole = named.pop()
            return self._sole
        if "globalPid" in self._cols(table):
            row, = self.db.execute(f'SELECT rowid FROM "{table}" WHERE "globalPid" IS NULL '
                                   "LIMIT 1").fetchall()
            where = f"{table} rowid {row[0]}: globalPid is NULL"
        else:
            where = f"{table} has no globalPid column"
        shown = ", ".join(map(str, sorted(named)[:4])) + (" ..." if len(named) > 4 else "")
        whom = (f"{len(named)} processes ({shown})" if named else "no process")
        raise InputError(f"{self.path}: {where}, and the export's records name {whom}, so which "
                         f"process its GPU work ran for is unknown; {EDITED}")

    def _calls(self) -> dict:
        out = {k: [] for k in ("start", "end", "gtid", "corr", "name", "ret", "driver")}
        for t, driver in (("CUPTI_ACTIVITY_KIND_RUNTIME", False), ("CUPTI_ACTIVITY_KIND_DRIVER", True)):
            if t not in self.tables:
                continue
            for c in self._select(t, ["start", "end", "globalTid", "correlationId", "nameId",
                                      "returnValue"]):
                for k, v in zip(("start", "end", "gtid", "corr", "name", "ret"), c):
                    out[k].extend(v)
                out["driver"].extend([driver] * len(c[0]))
        return out

    def _nvtx(self) -> dict:
        out = {k: [] for k in ("start", "end", "gtid", "text", "domain", "type", "payload")}
        if "NVTX_EVENTS" not in self.tables:
            return out
        have = self._cols("NVTX_EVENTS")
        self.read["NVTX_EVENTS"] = ["start", "end", "globalTid"]   # a payload of text is no step
        # a range's integer payload: cuptiprof.range("step", step=N) pushes "step" with N there
        ints = [f"e.{c}" for c in ("int64Value", "uint64Value", "int32Value", "uint32Value")
                if c in have]
        payload = f"coalesce({', '.join(ints)})" if len(ints) > 1 else (ints or ["NULL"])[0]
        text = "coalesce(e.text, s.value)" if "textId" in have else "e.text"
        join = "LEFT JOIN StringIds s ON s.id = e.textId" if "textId" in have else ""
        dom = "e.domainId" if "domainId" in have else "NULL"
        # domain ids are numbered per process (as Nsight Systems' own reports join them): a
        # domain is its process's, keyed by (pid, domain id); no domainId column, no domains
        domains = {}
        if "domainId" in have:
            for g, d, t in self.db.execute("SELECT globalTid, domainId, text FROM NVTX_EVENTS "
                                           "WHERE eventType = ?", [NVTX_DOMAIN_CREATE]):
                domains[(_pid(g), d)] = t
        shift = f" + {self.shift}" if self.shift else ""
        q = (f"SELECT e.start{shift}, e.\"end\"{shift}, e.globalTid, {text}, {dom}, e.eventType, "
             f"{payload} "
             f"FROM NVTX_EVENTS e {join} "
             f"WHERE {_NVTX_READ}")
        for row in self.db.execute(q):
            if type(row[3]) is bytes:   # a BLOB: refused as text that is not UTF-8 is
                raise InputError(f"{self.path}: cannot read the Nsight Systems export (an "
                                 "NVTX_EVENTS range's text holds bytes, not text)")
            for k, v in zip(("start", "end", "gtid", "text"), row):
                out[k].append(v)
            out["domain"].append(domains.get((_pid(row[2]), row[4])))
            out["type"].append(row[5])
            out["payload"].append(row[6])
        self._check_spans("NVTX_EVENTS", out["start"], out["end"])
        return out

    @staticmethod
    def _nest(types, c_gtid, c_start, c_end, r_gtid, r_start, r_end, r_op):
        """Parent and depth of each range, and the range and op of each call (indices, -1 for
        none): a call's op is the innermost push/pop range of kind 'op' (r_op) open on its
        thread when it started, as the Kineto importer gives it.

        Push/pop ranges nest on their thread, and a call belongs to the innermost one open on
        its thread when it started. Start/end ranges need not nest (one may end before a
        push/pop range opened inside it does, or on another thread), so they stay out of that
        sweep: a start/end range is the child of the innermost push/pop range on its starting
        thread that holds all of it (none: top level) and the parent of no range. A call is
        credited to a start/end range only when it started inside it, on that thread, and the
        range is a child of the call's own push/pop range (the latest-started such range wins):
        work launched after the range ended never counts for it, and the ranges around it
        still count the call through its parent.
        """
        n, n_c = len(r_start), len(c_start)
        se = np.isin(np.asarray(types, np.int64), NVTX_START_END)
        pp_i, se_i = np.flatnonzero(~se), np.flatnonzero(se)
        # the start of each start/end range is asked like a call: which push/pop range holds it
        p_parent, p_depth, q_range, q_op = nest(
            r_gtid[pp_i], r_start[pp_i], r_end[pp_i], r_op[pp_i],
            np.concatenate([c_gtid, r_gtid[se_i]]), np.concatenate([c_start, r_start[se_i]]),
            np.concatenate([c_end, r_end[se_i]]))

        def full(ix):   # positions among the push/pop ranges -> positions among all ranges
            ix = np.asarray(ix, np.int64)
            if not len(pp_i):
                return ix.copy()
            return np.where(ix >= 0, pp_i[np.maximum(ix, 0)], -1)

        parent = np.full(n, -1, np.int64)
        depth = np.zeros(n, np.int32)
        parent[pp_i] = full(p_parent)
        depth[pp_i] = p_depth
        c_range = full(q_range[:n_c])
        c_op = full(q_op[:n_c])
        if not len(se_i):
            return parent, depth, c_range, c_op
        up = full(q_range[n_c:])
        while True:   # up to the innermost push/pop range that holds the whole start/end range
            short = np.flatnonzero((up >= 0) & (r_end[np.maximum(up, 0)] < r_end[se_i]))
            if not len(short):
                break
            up[short] = parent[up[short]]
        parent[se_i] = up
        depth[se_i] = np.where(up >= 0, depth[np.maximum(up, 0)] + 1, 0)
        by_start = se_i[np.argsort(r_start[se_i], kind="stable")]
        for k in AC.distinct(r_gtid[se_i]).tolist():
            cs = np.flatnonzero(c_gtid == k)
            if not len(cs):
                continue
            cs = cs[np.argsort(c_start[cs], kind="stable")]
            own = c_range[cs]   # each call's push/pop range
            us = by_start[r_gtid[by_start] == k]
            lo = np.searchsorted(c_start[cs], r_start[us], "left")
            hi = np.searchsorted(c_start[cs], r_end[us], "left")
            for u, a, b in zip(us.tolist(), lo.tolist(), hi.tolist()):
                if a < b:   # later-started ranges overwrite earlier ones
                    c_range[cs[a:b][own[a:b] == parent[u]]] = u
        return parent, depth, c_range, c_op

    def _link(self, calls: dict, ranges: dict) -> None:
        w = self.w
        c_gtid = np.array(calls["gtid"], np.int64)
        r_gtid = np.array(ranges["gtid"], np.int64)
        c_start, c_end = np.array(calls["start"], np.int64), np.array(calls["end"], np.int64)
        r_start = np.array(ranges["start"], np.int64)
        r_open = np.array([e is None for e in ranges["end"]], bool)
        # a range never ended never ends: it nests, holds and is the step of all its thread ran
        # after it began (one pushed inside it last, too), and is written without an end
        never = np.iinfo(np.int64).max
        r_end = np.array([never if e is None else e for e in ranges["end"]], np.int64)
        c_pid = self._own_all((c_gtid >> 24) & 0xFFFFFF)
        r_pid = self._own_all((r_gtid >> 24) & 0xFFFFFF)
        # a process's span holds its calls and ranges too; one with no GPU work (a helper
        # process with NVTX ranges, say) is a process of the file all the same
        if len(c_start):
            self._span(c_pid, c_start, c_end)
        if len(r_start):
            self._span(r_pid, r_start, np.where(r_open, r_start, np.maximum(r_start, r_end)))
        texts = ranges["text"]
        step_n = np.array([_step_number(t, p) for t, p in zip(texts, ranges["payload"])], np.int64)
        is_step = step_n >= 0
        # the ranges torch.autograd.profiler.emit_nvtx() pushed (push/pop, never a step): named
        # by their op (or record_function label), their other parts kept in attrs; an operator
        # is of kind 'op', the op of what its thread launched inside it
        names, attrs = list(texts), [None] * len(texts)
        r_op = np.zeros(len(texts), bool)
        for i, (t, typ) in enumerate(zip(texts, ranges["type"])):
            got = None if is_step[i] or typ in NVTX_START_END else _torch_range(t)
            if got is not None:
                names[i], attrs[i] = got[0], json.dumps(got[1])
                r_op[i] = _OP_NAME.fullmatch(got[0]) is not None
        parent, depth, c_range, c_op = self._nest(ranges["type"], c_gtid, c_start, c_end, r_gtid,
                                                  r_start, r_end, r_op)
        r_step = np.full(len(r_start), -1, np.int64)
        c_step = np.full(len(c_start), -1, np.int64)
        # range ids are per process: number each process's ranges from 1
        range_id = np.zeros(len(r_start), np.int64)
        for pid in AC.distinct(r_pid).tolist():
            m = r_pid == pid
            range_id[m] = np.arange(1, int(m.sum()) + 1)
            sm = m & is_step
            self.steps_by_pid[pid] = int(sm.sum())
            self.step_nums[pid] = set(step_n[sm].tolist())
            # steps of several threads may overlap (workers each running their own): a call or
            # range takes the step of its own thread first, as Nsight Systems projects ranges
            r_step[m] = steps_at(r_start[m], r_start[sm], r_end[sm], step_n[sm], r_gtid[m],
                                 r_gtid[sm])
            cm = c_pid == pid
            c_step[cm] = steps_at(c_start[cm], r_start[sm], r_end[sm], step_n[sm], c_gtid[cm],
                                  r_gtid[sm])
        r_step[is_step] = step_n[is_step]
        from cuptiprof.store.quality import STEP_INCOMPLETE
        for i in np.flatnonzero(is_step & r_open).tolist():
            w.add_quality(STEP_INCOMPLETE, str(int(step_n[i])), None,
                          f"step {int(step_n[i])}'s NVTX range was never ended: it holds what its "
                          "process ran from its start to the end of the capture",
                          pid=int(r_pid[i]))

        def ids(ix):
            ix = np.asarray(ix)
            v = np.where(ix >= 0, range_id[np.maximum(ix, 0)] if len(range_id) else 0, 0)
            return AC.array(v, pa.int64(), mask=ix < 0)

        def neg_null(v, typ=pa.int32()):
            v = np.asarray(v)
            return AC.array(v, typ, mask=v < 0)

        for lo in range(0, len(r_start), BATCH_ROWS):
            sl = slice(lo, lo + BATCH_ROWS)
            w.append({"ranges": {
                "pid": AC.array(r_pid[sl], pa.int32()), "range_id": range_id[sl],
                "parent_id": ids(parent[sl]), "depth": depth[sl], "name": names[sl],
                "domain": ranges["domain"][sl], "thread_id": r_gtid[sl] & 0xFFFFFF,
                "start_ns": r_start[sl], "end_ns": AC.array(r_end[sl], pa.int64(), mask=r_open[sl]),
                "kind": np.where(is_step[sl], "step", np.where(r_op[sl], "op", "user")).tolist(),
                "step": neg_null(r_step[sl]), "attrs": AC.strings(attrs[sl])}})
        self._count("range_rows", len(r_start))
        for lo in range(0, len(c_start), BATCH_ROWS):
            sl = slice(lo, lo + BATCH_ROWS)
            w.append({"api_calls": {
                "pid": AC.array(c_pid[sl], pa.int32()), "thread_id": c_gtid[sl] & 0xFFFFFF,
                "api_kind": ["driver" if d else "runtime" for d in calls["driver"][sl]],
                "name": self._names(calls["name"][sl]),
                "correlation_id": AC.array(calls["corr"][sl], pa.int64()),
                "start_ns": c_start[sl], "end_ns": c_end[sl],
                "return_code": AC.array(calls["ret"][sl], pa.int32()),
                "step": neg_null(c_step[sl]), "range_id": ids(c_range[sl])}})
        self._count("api_call_rows", len(c_start))
        corr = np.array([c if c is not None else -1 for c in calls["corr"]], np.int64)
        keep = corr >= 0
        if not keep.any():
            return
        link = pa.table({"pid": AC.array(c_pid[keep], pa.int32()), "correlation_id": AC.array(corr[keep]),
                         "step": neg_null(c_step[keep]), "range_id": ids(c_range[keep]),
                         "op_id": ids(c_op[keep])})
        con = w.con
        con.register("_cuptiprof_link", link)
        try:
            con.execute("BEGIN")
            for t in ("kernel_rows", "memcpys", "memsets", "syncs"):
                # kernel rows keep run and pid in their lane
                src, where = ((", lanes n", "kernel_rows.lane_id = n.lane_id AND n.run_id = ? AND n.pid")
                              if t == "kernel_rows" else ("", f"{t}.run_id = ? AND {t}.pid"))
                con.execute(f"UPDATE {t} SET step = l.step, range_id = l.range_id, "
                            "op_id = l.op_id "
                            f"FROM _cuptiprof_link l{src} WHERE {where} = l.pid "
                            f"AND {t}.correlation_id = l.correlation_id", [w.run_id])
            con.execute("COMMIT")
        finally:
            con.unregister("_cuptiprof_link")

    def _system_env(self) -> tuple[str | None, dict[str, str]]:
        """The capturing host's name and the profiled environment, from TARGET_INFO_SYSTEM_ENV
        (absent from some exports: then nothing)."""
        if "TARGET_INFO_SYSTEM_ENV" not in self.tables or not {"name", "value"} <= self._cols(
                "TARGET_INFO_SYSTEM_ENV"):
            return None, {}
        got = dict(self.db.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV WHERE name IN "
                                   "('Hostname', 'DeviceEnvironment')").fetchall())
        host = got.get("Hostname")
        return (host if isinstance(host, str) and host else None,
                ranks.parse_env_block(got.get("DeviceEnvironment")
                                      if isinstance(got.get("DeviceEnvironment"), str) else None))

    def _meta(self) -> None:
        w = self.w
        names = {}
        if "PROCESSES" in self.tables:
            for gp, pid, name in self.db.execute("SELECT globalPid, pid, name FROM PROCESSES"):
                if pid in self.pid_of:
                    names[self.pid_of[pid]] = name
        pids = self._pids()
        if pids:
            host, env = self._system_env()
            # The environment is the one nsys was started in: it names the rank when nsys ran
            # under the launcher (srun/mpirun nsys profile ...), one profiled process per file:
            # the one with GPU work (its helper processes have no rank of their own).
            ranked = sorted(self.devices) or pids
            rank = ranks.from_env(env) if len(ranked) == 1 else ranks.Rank(None, None, None)
            if rank.rank is None and len(ranked) == 1:
                rank = rank._replace(rank=ranks.from_name(self.path.name))
            own = [p in ranked[:1] if len(ranked) == 1 else False for p in pids]
            w.append({"processes": {
                "pid": AC.array(pids, pa.int32()), "host": [host] * len(pids),
                **{k: AC.array([v if o else None for o in own], pa.int32())
                   for k, v in rank._asdict().items()},
                "command": [names.get(p) or str(self.path) for p in pids],
                "start_ns": [self.spans[p][0] for p in pids], "end_ns": [self.spans[p][1] for p in pids]}})
        gpus = {}
        if "TARGET_INFO_GPU" in self.tables:
            have = self._cols("TARGET_INFO_GPU")
            want = ["id", "name", "uuid", "computeMajor", "computeMinor", "smCount", "clockRate",
                    "totalMemory", "l2CacheSize", "memoryBandwidth"]
            q = ", ".join(f'"{c}"' if c in have else "NULL" for c in want)
            for row in self.db.execute(f"SELECT {q} FROM TARGET_INFO_GPU"):
                gpus[row[0]] = row
        rows = [(p, d) for p in pids for d in sorted(self.devices.get(p, ())) if d is not None]
        if rows:
            g = [gpus.get(d) or (d,) + (None,) * 9 for _, d in rows]
            w.append({"devices": {
                "pid": AC.array([p for p, _ in rows], pa.int32()),
                "device_id": AC.array([d for _, d in rows], pa.int32()),
                "kind": ["gpu"] * len(rows), "name": [x[1] for x in g], "uuid": [x[2] for x in g],
                "compute_capability": [f"{x[3]}.{x[4]}" if x[3] is not None else None for x in g],
                "sm_count": AC.array([x[5] for x in g], pa.int32()),
                "core_clock_mhz": AC.array([x[6] / 1e6 if x[6] else None for x in g], pa.float64()),
                "memory_bytes": AC.array([x[7] for x in g], pa.int64()),
                "l2_bytes": AC.array([x[8] for x in g], pa.int64()),
                "peak_memory_bw_gbps": AC.array([x[9] / 1e9 if x[9] else None for x in g], pa.float64()),
                "source": ["trace"] * len(rows)}})
        # A fact of the file is said for each of its processes (the writer's own pid is the
        # importing process's, no process of the trace); a file with none has no pid for it.
        who = pids or [-1]
        if not self.rows.get("kernel_rows") and not self.rows.get("memcpys"):
            for p in who:
                w.add_quality("missing_kind", "kernel", 0,
                              f"{self.path.name} holds no kernel or memcpy records", pid=p)
        elif any(self.steps_by_pid.values()):
            # GPU rows of a process with steps that no step holds (launched outside every step
            # range, or by no call in the export): said, as the Kineto importer says them
            stepped = sorted(p for p, n in self.steps_by_pid.items() if n)
            for kind, p, n in w.query(
                    "SELECT kind, pid, count(*) FROM gpu_activities WHERE run_id = ? AND kind <> "
                    f"'sync' AND step IS NULL AND pid IN ({', '.join(map(str, stepped))}) "
                    "GROUP BY ALL ORDER BY ALL", [w.run_id]):
                w.add_quality("unclaimed_records", kind, n,
                              f"{n} {kind} rows in {self.path.name} were launched outside every "
                              "step range (or by no call in the export); they have no step", pid=p)
            # a step that holds no GPU row while others do (its launches missed the capture,
            # or it launched none), as the Kineto importer says it
            worked: dict[int, set[int]] = {}
            for p, n in w.query(
                    "SELECT DISTINCT pid, step FROM gpu_activities WHERE run_id = ? AND step IS "
                    f"NOT NULL AND pid IN ({', '.join(map(str, stepped))})", [w.run_id]):
                worked.setdefault(p, set()).add(n)
            for p in stepped:
                for n in sorted(self.step_nums.get(p, set()) - worked[p]) if p in worked else ():
                    w.add_quality("empty_step", str(n), 0,
                                  f"step {n} has no GPU activity in {self.path.name} (nothing "
                                  "launched, or not captured)", pid=p)
        # each process without step ranges is said under its own pid (every process of the
        # file, or those beside one that marks steps): its rows carry no step
        stepless = [p for p in who if not self.steps_by_pid.get(p)]
        if self.rows.get("kernel_rows") or self.rows.get("memcpys"):
            for p in stepless:
                whose = (self.path.name if len(stepless) == len(who)
                         else f"process {p} in {self.path.name}")
                w.add_quality("missing_kind", "step", 0,
                              f"{whose} has no step ranges (NVTX ranges named 'step N' "
                              "or 'ProfilerStep#N', or 'step' with N as payload, as "
                              "cuptiprof.range('step', step=N) marks them); rows carry no step",
                              pid=p)


_COPY_FROM_ENUM = {v.upper(): v for v in COPY_KIND.values()}


def session_start(path: Path) -> int | None:
    """When the capture of an export began (ns since the Unix epoch, UTC), or None where the
    export does not say (older exports, an edited file)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchall()
    except sqlite3.Error:
        return None   # no such table (or no readable file: NsysFile says so)
    finally:
        db.close()
    return row[0][0] if len(row) == 1 and type(row[0][0]) is int and row[0][0] > 0 else None


def _shifts(w, paths: list[Path]) -> list[int]:
    """Each export's shift onto one clock: its capture's start after the earliest one's. One
    file keeps its own clock; where some file does not say when its capture began, each keeps
    its own, said in data_quality (its ranks' times cannot be set side by side)."""
    if len(paths) < 2:
        return [0] * len(paths)
    starts = [session_start(Path(p)) for p in paths]
    if None in starts:
        lacking = [Path(p).name for p, t in zip(paths, starts) if t is None]
        w.add_quality("clock_unaligned", None, len(lacking),
                      f"{', '.join(lacking)} {'does' if len(lacking) == 1 else 'do'} not say when "
                      "its capture began (no TARGET_INFO_SESSION_START_TIME): each export keeps "
                      "its own clock (ns since its capture began), so times of different files "
                      "are not comparable")
        return [0] * len(paths)
    first = min(starts)
    return [t - first for t in starts]


def import_nsys(w, paths: list[Path], on_read=None) -> list[FileSummary]:
    used: set[int] = set()
    out = []
    for p, shift in zip(paths, _shifts(w, paths)):
        try:
            out += NsysFile(w, Path(p), used, shift).run()
        except (ValueError, TypeError, KeyError, IndexError, OverflowError, pa.ArrowException) as exc:
            raise InputError(f"{p}: cannot import this export ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
        if on_read:
            on_read(Path(p).stat().st_size)
    return out
