"""A heterogeneous job's per-component variables, as Slurm spells them in its tasks and batch
script: SLURM_JOB_ID_HET_GROUP_<n>, and SLURM_JOB_ID_PACK_GROUP_<n> (the only name in 22.05's own
srun allocations). Read by hetjob.py and by partition.py's messages; imports nothing of ours."""

from __future__ import annotations

MAX_COMPONENTS = 128  # slurm/slurm.h MAX_HET_JOB_COMPONENTS


def component_value(env: dict, key: str, group: int) -> str | None:
    """Component `group`'s own value of `key`, in either of Slurm's spellings."""
    return env.get(f"{key}_HET_GROUP_{group}") or env.get(f"{key}_PACK_GROUP_{group}")


def component_of(env: dict, job: str) -> int | None:
    """Which component of the heterogeneous job in `env` has job id `job` (None: none does)."""
    return next((k for k in range(MAX_COMPONENTS) if component_value(env, "SLURM_JOB_ID", k) == job), None)
