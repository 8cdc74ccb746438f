"""ipurun in a heterogeneous job: the component it runs in, as ipurun's job.

A heterogeneous job's batch script (and every task) sees SLURM_JOB_ID and SLURM_JOB_NODELIST of
its first component, and each component's own as SLURM_JOB_ID_HET_GROUP_<n> and
SLURM_JOB_NODELIST_HET_GROUP_<n> (srun's own 22.05 allocations say _PACK_GROUP_<n>). Each
component's IPUs are its own partition, named after its own job id (docs/slurm.md). ipurun's
instances run in one component: srun's --het-group=N, passed through, else the first. So ipurun
reads that component's variables as the job's, and leaves aside the partition variable the
plugin set for the batch script, which names the first component's.
"""

from __future__ import annotations

from ..errors import ConfigError
from .hetenv import component_value as _of
from .partition import named_after

# Per-component variables ipurun reads as the job's (cli.py).
KEYS = ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_CPUS_PER_NODE")


def group_of(srun_extra: list[str]) -> int | None:
    """The component --het-group names (passed through to srun), or None when none is given."""
    value = None
    for arg in srun_extra:  # passed through as --het-group=N (options.py), the last one winning
        if arg.startswith("--het-group="):
            value = arg.split("=", 1)[1]
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()):
        raise ConfigError(f"--het-group={value}: ipurun runs its instances in one component of a heterogeneous "
                          "job; give one component's number, e.g. --het-group=1")
    return int(value)


def component_env(env: dict, srun_extra: list[str]) -> dict:
    """`env` as the chosen component sees itself; `env` itself outside a heterogeneous job."""
    group = group_of(srun_extra)
    if not env.get("SLURM_HET_SIZE") and not env.get("SLURM_PACK_SIZE"):
        if group is not None and env.get("SLURM_JOB_ID"):
            raise ConfigError(f"--het-group={group}: job {env['SLURM_JOB_ID']} is not a heterogeneous job; leave "
                              "--het-group out")
        return env
    group = group or 0
    view = dict(env)
    for key in KEYS:
        value = _of(env, key, group)
        if value is not None:
            view[key] = value
    if _of(env, "SLURM_JOB_ID", group) is None:
        size = env.get("SLURM_HET_SIZE") or env.get("SLURM_PACK_SIZE")
        raise ConfigError(f"--het-group={group}: job {env.get('SLURM_JOB_ID', '?')} has {size} components (0 to "
                          f"{int(size) - 1 if size.isdigit() else '?'}); give one of them")
    leader = env.get("SLURM_JOB_ID", "")
    if view["SLURM_JOB_ID"] != leader and named_after(env.get("IPUOF_VIPU_API_PARTITION_ID", ""), leader):
        del view["IPUOF_VIPU_API_PARTITION_ID"]  # the plugin's, for the first component
    return view
