"""Rank, local rank and world size from launcher variables and file names (cuptiprof.ranks),
shared by profiled runs and imports."""
from __future__ import annotations

import pytest

from cuptiprof import ranks


@pytest.mark.parametrize("env, want", [
    ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}, (3, 1, 8)),                 # torchrun
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_SIZE": "16"}, (5, 1, 16)),                                     # Open MPI
    ({"PMI_RANK": "2", "MPI_LOCALRANKID": "0", "PMI_SIZE": "4"}, (2, 0, 4)),          # MPICH/Hydra
    ({"PMIX_RANK": "7"}, (7, None, None)),                                           # PMIx
    ({"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2"}, (1, None, 2)),         # MVAPICH
    ({"SLURM_PROCID": "9", "SLURM_LOCALID": "1", "SLURM_NTASKS": "12"}, (9, 1, 12)),  # srun
    ({}, (None, None, None)),
])
def test_launchers(env, want):
    assert tuple(ranks.from_env(env)) == want


def test_torchrun_wins_over_the_slurm_task_that_started_it():
    """srun starts one torchrun per node (SLURM_PROCID = node); torchrun's RANK is the rank."""
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
           "RANK": "12", "LOCAL_RANK": "4", "WORLD_SIZE": "16"}
    assert ranks.from_env(env) == ranks.Rank(12, 4, 16)


def test_values_that_are_not_ranks_are_skipped():
    assert ranks.from_env({"RANK": "", "PMI_RANK": "x1", "SLURM_PROCID": " 4 "}).rank == 4
    assert ranks.from_env({"RANK": "-1"}).rank is None


def test_numbers_past_the_rank_columns_are_no_ranks():
    """A rank is written to 32-bit columns: RANK=99999999999 made `cuptiprof run` end in a
    traceback as it wrote the file (its records left in OUT.duckdb.parts), and a trace named
    rank99999999999.json (a timestamp after "rank") was refused by `import`. A digit that is
    not ASCII ('²', which str.isdigit takes and int does not) raised ValueError."""
    env = {"RANK": "99999999999", "PMI_RANK": "2147483648", "SLURM_PROCID": "2147483647",
           "LOCAL_RANK": "\u00b2", "SLURM_LOCALID": "\u0663", "WORLD_SIZE": "4294967296"}
    assert ranks.from_env(env) == ranks.Rank(2147483647, None, None)
    assert ranks.from_name("rank99999999999.json") is None
    assert ranks.from_name("rank_2147483647.json") == 2147483647


def test_env_block_as_nsys_stores_it():
    env = ranks.parse_env_block("A=1;PMI_RANK=3;EQ=a=b;PMI_SIZE=4;;NOVALUE;A=2")
    assert env == {"A": "1", "PMI_RANK": "3", "EQ": "a=b", "PMI_SIZE": "4"}
    assert ranks.from_env(env) == ranks.Rank(3, None, 4)
    assert ranks.parse_env_block(None) == {}


def test_env_block_of_older_nsys_is_split_on_nul():
    # nsys 2022.x: NUL between variables; a value with ';' (LS_COLORS) stays one value
    env = ranks.parse_env_block("PMI_RANK=1\0LS_COLORS=di=01;34:ln=01\0PMI_SIZE=2\0SLURM_LOCALID=0\0")
    assert env == {"PMI_RANK": "1", "LS_COLORS": "di=01;34:ln=01", "PMI_SIZE": "2", "SLURM_LOCALID": "0"}
    assert ranks.from_env(env) == ranks.Rank(1, 0, 2)


@pytest.mark.parametrize("name, want", [
    ("rank0.json.gz", 0), ("sampled_rank-1.json.gz", 1), ("job_RANK_12.sqlite", 12),
    ("worker0.1623143089861.pt.trace.json.gz", None), ("perlmutter0.sqlite", None)])
def test_rank_in_a_file_name(name, want):
    assert ranks.from_name(name) == want


def test_torchrun_wins_over_the_mpi_launcher_that_started_it():
    """mpirun starting torchrun (or a script that sets RANK itself): RANK is the job's rank."""
    env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "5", "WORLD_SIZE": "8"}
    assert ranks.from_env(env) == ranks.Rank(5, None, 8)


def test_env_block_keeps_the_first_value_of_a_variable_whatever_the_spaces():
    env = ranks.parse_env_block("PMI_RANK=1; PMI_RANK=2;PMI_SIZE=4 ;PMI_SIZE=8")
    assert env == {"PMI_RANK": "1", "PMI_SIZE": "4 "}
    assert ranks.from_env(env) == ranks.Rank(1, None, 4)
