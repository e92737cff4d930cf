"""Which rank of a distributed job a process is: from its launcher's environment variables, or
from a trace file's name. One place, so that profiled runs and imported traces agree."""
from __future__ import annotations

import re
from typing import Mapping, NamedTuple

# Launchers in the order they are trusted: torchrun / torch.distributed first (what a
# PyTorch job's own rank means), then MPI implementations, then Slurm's task id (srun sets it
# whatever runs inside, so it comes last).
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
             "SLURM_PROCID")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                   "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                   "SLURM_NTASKS")

_NAME_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# a number past the 32-bit rank columns is no rank (a timestamp, a value of another meaning)
_MAX = (1 << 31) - 1


class Rank(NamedTuple):
    rank: int | None
    local_rank: int | None
    world_size: int | None


def _first_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        v = (env.get(name) or "").strip()
        if v.isascii() and v.isdigit() and int(v) <= _MAX:   # isdigit: '²' too, no int
            return int(v)
    return None


def from_env(env: Mapping[str, str]) -> Rank:
    """Rank, local rank and world size as the launcher set them (None where it did not)."""
    return Rank(_first_int(env, RANK_VARS), _first_int(env, LOCAL_RANK_VARS),
                _first_int(env, WORLD_SIZE_VARS))


def parse_env_block(text: str | None, sep: str = ";") -> dict[str, str]:
    """'A=1;B=2' (how Nsight Systems stores the profiled environment) -> {'A': '1', 'B': '2'}.

    Older Nsight Systems (2022.x) separates the variables with NUL characters instead; a block
    holding any NUL is split on NUL only, since its values may themselves contain `sep`.
    """
    out: dict[str, str] = {}
    text = text or ""
    for item in text.split("\0" if "\0" in text else sep):
        key, eq, value = item.partition("=")
        key = key.strip()   # before the check: 'A=1; A=2' keeps the first A, as 'A=1;A=2' does
        if eq and key and key not in out:
            out[key] = value
    return out


def from_name(name: str) -> int | None:
    """The rank in a file name such as rank3.json.gz or trace_rank-3.sqlite."""
    m = _NAME_RANK.search(name)
    return int(m.group(1)) if m and int(m.group(1)) <= _MAX else None
