"""What a controller hook knows about its job, read from the environment Slurm gives it.

Trusted (set by slurmctld): SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_NODELIST,
SLURM_JOB_LICENSES (job_submit.lua keeps the ipu licence equal to --gres=ipu:N x nodes),
SLURM_JOB_RESTART_COUNT, SLURM_HET_JOB_ID and SLURM_HET_JOB_OFFSET (a heterogeneous job's
components each run the hooks under their own job id; these name the job they belong to and which
component this is; 22.05 also says SLURM_PACK_JOB_*). A component after the first has no licence
(Slurm gives one to the first alone): its IPUs are read from Slurm (prolog.py).
From the user's side (SPANK_*): only the partition's shape options, validated like any user
input, never its size, name or owner.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import rules
from ..errors import ConfigError, shown
from ..slurm.hostlist import expand
from ..slurm.licences import HOOKS, parse
from ..slurm.limits import positive_count


@dataclass(frozen=True)
class JobContext:
    job_id: int
    uid: int
    nodes: tuple[str, ...]
    ipus: int                 # 0: not an IPU job
    restart_count: int = 0
    gcds: int | None = None
    ilds: int | None = None
    reconfigurable: bool = False
    script_context: str = ""
    het_job_id: int | None = None  # a heterogeneous job's component: the job (its first component's id)
    het_offset: int = 0            # which component: 0 the first (or no such job)

    def partition(self, prefix: str) -> str:
        return rules.job_name(prefix, self.job_id)


def licence_count(licences: str, name: str = "ipu") -> int:
    """'matlab:1,ipu:8' -> 8, read as slurmctld reads it (slurm_ipu/slurm/licences.py)."""
    totals = parse(licences, HOOKS)
    if totals is None:
        raise ConfigError(f"SLURM_JOB_LICENSES={shown(licences)} is not a licence list slurmctld accepts")
    return totals.get(name, 0)


def _int(env: dict, key: str, default: int | None = None) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        if default is None:
            raise ConfigError(f"{key} is not set; run this from PrologSlurmctld/EpilogSlurmctld")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{key}={shown(raw)} is not a number") from None


def _shape(env: dict, key: str, option: str) -> int | None:
    raw = env.get(key)
    if raw in (None, ""):
        return None
    if not positive_count(raw):
        raise ConfigError(f"{option}={shown(raw)} is not a positive number; use e.g. {option}=2")
    return int(raw)


def from_env(env: dict) -> JobContext:
    return JobContext(
        job_id=_int(env, "SLURM_JOB_ID"),
        uid=_int(env, "SLURM_JOB_UID", 0),
        nodes=tuple(expand(env.get("SLURM_JOB_NODELIST", ""))),
        ipus=licence_count(env.get("SLURM_JOB_LICENSES", "")),
        restart_count=_int(env, "SLURM_JOB_RESTART_COUNT", 0),
        gcds=_shape(env, "SPANK_IPU_GCDS", "--ipu-gcds"),
        ilds=_shape(env, "SPANK_IPU_ILDS", "--ipu-ilds"),
        reconfigurable=env.get("SPANK_IPU_RECONFIGURABLE", "") == "1",
        script_context=env.get("SLURM_SCRIPT_CONTEXT", ""),
        het_job_id=_het(env, "ID"),
        het_offset=_het(env, "OFFSET") or 0,
    )


def _het(env: dict, what: str) -> int | None:
    for key in (f"SLURM_HET_JOB_{what}", f"SLURM_PACK_JOB_{what}"):
        if env.get(key):
            return _int(env, key)
    return None
