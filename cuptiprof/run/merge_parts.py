"""Writing OUT from the part files of a run: the record the launcher keeps in OUT.parts, the
merge at the end of the run (finish), and the same merge later for a run whose launcher did not
finish (recover, for `cuptiprof merge`).
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from cuptiprof.errors import CuptiprofError, WriterBusy, command_text, storage_error
from cuptiprof.outputs import temp_beside
from cuptiprof.run import settings as S
from cuptiprof.store.files import RECORD, alive, recover_command, running_launcher


# What the launcher knows of its run, kept in OUT.parts/run.json (RECORD) from the start:
# `cuptiprof merge` of the parts of a run whose launcher was killed writes the same `runs` row
# from it.


def run_record(st: S.ChildSettings, cmd: list[str], start_ns: int) -> dict:
    source = "light" if st.mode == "light" else "cupti" if st.gpu else "cpu"
    return {"label": st.run_label, "source": source, "command": command_text(cmd),
            "start_ns": start_ns,
            "settings": {"warmup": st.warmup, "steps": st.steps, "kinds": st.kinds,
                         "step_range": st.step_range, "step_fn": st.step_fn, "mode": st.mode,
                         "log_level": st.log_level, "gpu": st.gpu}}


def save_record(parts: Path, record: dict) -> None:
    tmp = parts / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, parts / RECORD)   # a kill leaves the old record or the new, never half


def load_record(parts: Path) -> dict:
    try:
        d = json.loads((parts / RECORD).read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def recover(parts: Path, sources: list[Path], out: str, overwrite: bool = False) -> Path:
    """Write OUT from the part files of a run whose launcher did not finish (killed, or its
    merge failed), as the launcher would have: one run, processes that never closed marked
    ended early. A run whose launcher was killed says so in data_quality."""
    owner = running_launcher(parts)
    if owner:
        raise WriterBusy(f"{parts}: the cuptiprof run (pid {owner}) that writes these parts is "
                         "still running; wait for it to end, it writes its output itself")
    pid = _unfinished_alive(parts)
    if pid:
        raise WriterBusy(f"{parts}: process {pid} of that run is still running and writing its "
                         "part; wait for it to end (or end it), then merge again")
    record = load_record(parts)
    if not record:   # parts of a cuptiprof that kept no record: what the markers tell
        record = {"label": parts.name[:-len(".parts")].rsplit(".duckdb", 1)[0],
                  "source": None, "command": None}
    notes = []
    end = None if "status" in record else _root_end(parts, record.get("child_pid"))
    if end is not None:   # the command's own process kept how it ended
        code = end["exit_status"]
        record.update(status="complete" if code == 0 else "interrupted"
                      if end.get("status") == "interrupted" else "failed", exit_code=code)
        notes.append((None, "run_recovered", parts.name, None,
                      f"exit status {code}, as the program's own process recorded it when it "
                      f"ended: the cuptiprof run writing {Path(out).name} was killed before it "
                      f"kept it; this file was merged afterwards from {parts.name}: each "
                      "process holds the steps it had flushed"))
    elif "status" not in record:
        record.update(status="interrupted", exit_code=None)
        # What is unknown first: reports cut a long detail short, and a NULL
        # processes.exit_status alone reads as nothing wrong.
        notes.append((None, "run_recovered", parts.name, None,
                      f"exit status is unknown: the cuptiprof run writing {Path(out).name} was "
                      f"killed before it learnt how its program ended; this file was merged "
                      f"afterwards from {parts.name}: each process holds the steps it had "
                      "flushed"))
    return finish(Path(out), parts, record, sources=sources, notes=notes, wait=False,
                  overwrite=overwrite)


def _root_end(parts: Path, child_pid: int | None) -> dict | None:
    """The end marker of the command's own process (the launcher's child) where it says with
    which status that process exited: the marker of its last program image, written as it
    ended. None where nothing says so (killed, exec'd a program that is not Python, or a
    cuptiprof that kept no exit status)."""
    try:
        launcher_pid = int((parts / "launcher.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    images = []
    for m in parts.glob("*.start.json"):
        try:
            d = json.loads(m.read_text())
            if d["pid"] == child_pid:
                images.append((int(d.get("image") or 0), d["host"], d.get("ppid"), m))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    # the launcher's child on the launcher's host (a process elsewhere may have its pid)
    hosts = {host for image, host, ppid, _ in images if image == 0 and ppid == launcher_pid}
    last = max(((image, m) for image, host, _, m in images if host in hosts), default=None)
    if len(hosts) != 1 or last is None:
        return None
    key = _marker_key(last[1].name)
    try:
        end = json.loads(last[1].with_name(key + ".end.json").read_text())
    except (OSError, ValueError):
        return None
    return _with_exit(parts, key, end)


def _with_exit(parts: Path, key: str, end) -> dict | None:
    """The end marker `end` of program image `key`, with the status the C library wrote as
    that image's exit() ran where it did (what exit() was given, which the marker may not
    know); None where neither says an integer status."""
    if not isinstance(end, dict):
        return None
    code = _exit_written(parts / (key + ".exit"))
    if code is not None:
        end = dict(end, exit_status=code)
    code = end.get("exit_status")
    return end if isinstance(code, int) and not isinstance(code, bool) else None


def _waited(parts: Path, host, pid: int) -> int | None:
    """The exit status process `pid`'s parent saw as it reaped it, where that parent was
    profiled too (child.processes._note_reaped): that of the last program the process ran."""
    return _exit_written(parts / f"{host}-{pid}.waited") if isinstance(host, str) else None


def _exit_written(path: Path) -> int | None:
    """The exit status the C library wrote as the process ended (child.recording._watch_exit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) < 256 else None


def finish(out: Path, parts: Path, record: dict, sources: list[Path] | None = None,
           notes: list[tuple] = (), wait: bool = True, overwrite: bool = False) -> Path:
    """Merge the part files into OUT as one run; add processes that wrote no part and say which
    processes ended early; `overwrite` replaces an OUT that is there. `record` is run_record()'s
    with the command's child_pid, status and exit_code; `notes` are more data_quality rows (pid,
    check_name, subject, count, detail)."""
    from cuptiprof.store.merge import merge_files
    from cuptiprof.store.writer import RunInfo

    if wait:
        _wait_for_stragglers(parts)
    sources = sorted(parts.glob("*.duckdb")) if sources is None else sources
    child_pid, exit_code = record.get("child_pid"), record.get("exit_code")
    # One start marker per program image: a process that exec'd has several, one pid.
    images: dict[int, list] = {}
    ended = _end_markers(parts)
    for m in parts.glob("*.start.json"):
        try:
            d = json.loads(m.read_text())
            key = _marker_key(m.name)
            images.setdefault(int(d["pid"]), []).append((int(d.get("image") or 0), d,
                                                         ended.get(key), key))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    starts = {pid: min(ims, key=lambda x: x[0])[1] for pid, ims in images.items()}
    early = sorted(pid for pid, ims in images.items()
                   if not all(e is not None for _, _, e, _ in ims))
    # When each process ended, as its last program wrote as it ended (a process that wrote no
    # part has no other record of it); the command's own, when the launcher saw it end.
    ends = {pid: max((_ns(e.get("end_ns")) or 0 for _, _, e, _ in ims), default=0) or None
            for pid, ims in images.items() if pid not in early}
    # How the other processes exited, as their last program kept it; where it could not (killed
    # by a signal it could not catch, os._exit outside a multiprocessing worker), as a profiled
    # parent saw it as it reaped the process (NULL where none did); the command's is the
    # launcher's to say.
    statuses = {}
    for pid, ims in images.items():
        if pid != child_pid:
            _, _, e, key = max(ims, key=lambda x: x[0])
            end = _with_exit(parts, key, e) if pid not in early else None
            statuses[pid] = end["exit_status"] if end is not None else \
                _waited(parts, starts[pid].get("host"), pid)
    if record.get("end_ns") is not None and child_pid is not None:
        ends[child_pid] = ends.get(child_pid) or record["end_ns"]
    # the programs each process ran (an image after an exec that failed is the same program)
    progs = {pid: [d for _, d, _, _ in sorted(ims, key=lambda x: x[0]) if not d.get("exec_failed")]
             for pid, ims in images.items()}
    execs = {pid: ds for pid, ds in progs.items() if len(ds) > 1}
    rows = {k: [] for k in ("pid", "host", "rank", "local_rank", "world_size", "command", "start_ns",
                            "end_ns", "exit_status", "ended_early")}
    for pid, d in sorted(starts.items()):
        rows["pid"].append(pid)
        rows["host"].append(d.get("host"))
        rows["rank"].append(d.get("rank"))
        rows["local_rank"].append(d.get("local_rank"))
        rows["world_size"].append(d.get("world_size"))
        rows["command"].append(d.get("command") or command_text(d.get("argv") or []))
        rows["start_ns"].append(d.get("start_ns"))
        rows["end_ns"].append(ends.get(pid))
        rows["exit_status"].append(exit_code if pid == child_pid else statuses.get(pid))
        rows["ended_early"].append(pid in early)
    if child_pid is not None and child_pid not in starts:   # not Python (a shell script, a binary)
        for k, v in (("pid", child_pid), ("host", socket.gethostname()),
                     ("command", record.get("command")), ("start_ns", record.get("start_ns")),
                     ("end_ns", record.get("end_ns")), ("exit_status", exit_code),
                     ("ended_early", None)):
            rows[k].append(v)
        for k in ("rank", "local_rank", "world_size"):
            rows[k].append(None)
    import pyarrow as pa

    from cuptiprof.store import arrow

    types = {"pid": pa.int32(), "host": pa.string(), "rank": pa.int32(), "local_rank": pa.int32(),
             "world_size": pa.int32(), "command": pa.string(), "start_ns": pa.int64(),
             "end_ns": pa.int64(), "exit_status": pa.int32(), "ended_early": pa.bool_()}
    procs = pa.table({k: arrow.array(rows[k], t) for k, t in types.items()})
    extra = {"processes": procs}
    quality = list(notes)
    for pid, ds in sorted(execs.items()):
        quality.append((pid, "process_exec", str(pid), len(ds) - 1,
                        f"process {pid} replaced its program "
                        f"{'once' if len(ds) == 2 else f'{len(ds) - 1} times'} (exec): "
                        + " -> ".join(d.get("command") or command_text(d.get("argv") or [])
                                      for d in ds)
                        + "; one process: its steps and ranges are those of every program it ran"))
    if quality:
        pids, checks, subjects, counts, details = zip(*quality)
        extra["data_quality"] = pa.table({
            "pid": arrow.array(list(pids), pa.int32()), "check_name": list(checks),
            "subject": list(subjects), "count": arrow.array(list(counts), pa.int64()),
            "detail": list(details)})
    first = min(starts.values(), key=lambda d: d.get("start_ns") or 0, default={})
    info = RunInfo(label=record.get("label"), source=record.get("source"),
                   command=record.get("command") or first.get("command"), start_ns=record.get("start_ns"),
                   settings=record.get("settings") or {})
    status = record.get("status")
    try:
        return merge_files(sources, out, one_run=True, run_info=info, status=status,
                           extra=extra, ended_early=early, overwrite=overwrite)
    except Exception as exc:
        duckdb = sys.modules.get("duckdb")
        if isinstance(exc, CuptiprofError):
            reason = str(exc)
        elif isinstance(exc, OSError) or (duckdb and isinstance(exc, duckdb.Error)):
            reason = storage_error(exc, str(out))
        else:
            raise
        tmp = temp_beside(out)
        reason = reason.replace(str(tmp), str(out)).replace(tmp.name, out.name)
        raise MergeFailed(
            f"{reason}; the part files are kept in {parts} (later: "
            f"{recover_command(parts, out)})", exit_code or 0) from None


class MergeFailed(CuptiprofError):
    """The command ran but its parts could not be merged into OUT (e.g. a full disk)."""

    def __init__(self, msg: str, child_code: int):
        super().__init__(msg)
        # The profiled command's own failure wins; a clean command whose profile could not be
        # written still fails (1), so CI does not take a missing file for success.
        self.exit_code = child_code or 1


def _wait_for_stragglers(parts: Path, timeout_s: float = 3.0) -> None:
    """Helpers the command started (multiprocessing's resource tracker, workers being torn down)
    may outlive it by a moment; give them time to close their part files."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _unfinished_alive(parts):
        time.sleep(0.05)


def _unfinished_alive(parts: Path) -> int | None:
    """A process of the run on this host that is still alive and has not closed its part yet,
    or has, as it ends, but not yet had its exit status written (<key>.exit: by the C library's
    exit(), after the end marker, or by _keep_exit): merged meanwhile, a `raise SystemExit(n)`
    was taken for the end marker's 0."""
    from cuptiprof.store.merge import pid_from_stem

    ended = _end_markers(parts)
    here = socket.gethostname()
    for m in parts.glob("*.start.json"):
        key = _marker_key(m.name)
        pid = pid_from_stem(key)
        if pid is None or not key.startswith(here + "-"):
            continue
        # exit_status in the end marker: it was written as the process ended (not at an
        # exec, nor when the recording stopped before the end)
        ending = key in ended and ended[key].get("exit_status") is not None and \
            not (parts / (key + ".exit")).exists()
        if (key not in ended or ending) and alive(pid) and not _zombie(pid):
            return pid
    return None


def _ns(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _end_markers(parts: Path) -> dict[str, dict]:
    """<host>-<pid>[.exec<N>] -> its end marker (empty where it cannot be read: it ended all
    the same)."""
    out = {}
    for p in parts.glob("*.end.json"):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            d = {}
        out[_marker_key(p.name)] = d if isinstance(d, dict) else {}
    return out


def _marker_key(name: str) -> str:
    """<host>-<pid>[.exec<N>] of a marker file name: one per program image of a process."""
    for suffix in (".start.json", ".end.json"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False
