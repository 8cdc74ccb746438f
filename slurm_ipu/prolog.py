"""PrologSlurmctld: create the job's V-IPU partition before any task starts.

Sized from SLURM_JOB_LICENSES (trusted), named prefix + job id, shaped by the user's
--ipu-* options (validated), owned by the job's user and attachable from the job's nodes.
Idempotent: a requeued or re-run prolog finds its own partition and waits for it. Bounded:
prolog.deadline covers every V-IPU call. On failure: no partition is left behind, one line
says why, and exit 1 makes Slurm requeue a batch job (srun/salloc jobs are cancelled). A job
that failed prolog.max_attempts times is held instead of requeued forever.
"""

from __future__ import annotations

import time

from . import rules
from .errors import SlurmIpuError
from .hooklog import report
from .jobenv import JobContext


def run(ctx: JobContext, cfg, client, slurm=None, clock=time.monotonic) -> int:
    if ctx.ipus == 0:
        return 0  # not an IPU job: no V-IPU call, no Slurm query
    started = clock()
    deadline = started + cfg["prolog.deadline"]
    name = ctx.partition(cfg["partition.prefix"])
    try:
        pod = cfg["pod.ipus"]
        rules.check_shape(ctx.ipus, ctx.gcds, ctx.ilds, cluster_ilds=max(1, pod // rules.IPUS_PER_ILD))
        part = client.ensure_partition(
            name, ctx.ipus, deadline, num_gcds=ctx.gcds, num_ilds=ctx.ilds, reconfigurable=ctx.reconfigurable,
            allocation=cfg["partition.allocation"], hosts=list(ctx.nodes), owner_uid=ctx.uid)
    except SlurmIpuError as exc:
        _undo(client, name, clock() + min(5.0, cfg["prolog.deadline"]))
        why = f"job {ctx.job_id}: V-IPU partition {name} ({ctx.ipus} IPUs) not created: {exc}"
        attempts = ctx.restart_count + 1
        if slurm is not None and attempts >= cfg["prolog.max_attempts"]:
            why += f"; held after {attempts} attempts (scontrol release {ctx.job_id} once V-IPU is fixed)"
            slurm.hold(ctx.job_id, f"slurm-ipu: {why}")
        elif slurm is not None:
            slurm.comment(ctx.job_id, f"slurm-ipu: {why}")
        report(cfg["state_dir"], why)
        return 1
    report(cfg["state_dir"], f"job {ctx.job_id}: partition {name} ACTIVE, {part.size} IPUs, "
                             f"{part.num_gcds} GCD(s), hosts {','.join(ctx.nodes)} ({clock() - started:.2f}s)")
    return 0


def _undo(client, name: str, deadline: float) -> None:
    """Remove whatever a failed attempt left (a PENDING or ERROR partition). The job is not
    running, so a failure here is left to `slurm-ipu reap`."""
    try:
        client.remove_partition(name, missing_ok=True, deadline=deadline)
    except SlurmIpuError:
        pass
