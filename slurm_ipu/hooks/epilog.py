"""EpilogSlurmctld: remove the job's V-IPU partition (in the allocation model: its allocation, with
the partitions its user made in it), whatever state the job ended in.

Only a partition slurm-ipu created for this job (the ledger's record) is removed: one made by
someone else under the job's name is left alone and logged. Idempotent and never failing: a
missing partition is success; a half-created one (the job was cancelled while the prolog ran)
is removed like any other; V-IPU being unreachable puts the partition in the durable journal
for `slurm-ipu reap` (the record stays with it), and the epilog still exits 0 (an
EpilogSlurmctld failure is only logged by Slurm, and V-IPU trouble is never a node problem).
"""

from __future__ import annotations

import time

from ..errors import SlurmIpuError
from .hooklog import report
from .jobenv import JobContext
from .journal import Journal
from .removal import describe, remove_recorded


def run(ctx: JobContext, cfg, client, clock=time.monotonic) -> int:
    if ctx.ipus == 0:
        return 0
    name = cfg.job_name(ctx.job_id, ctx.nodes)
    what = cfg.kind_of(name)
    try:
        outcome = remove_recorded(cfg, client, name, ctx.job_id, clock() + cfg["epilog.deadline"])
    except SlurmIpuError as exc:
        Journal(cfg["state_dir"]).add(name, ctx.job_id, str(exc))
        report(cfg["state_dir"], f"job {ctx.job_id}: {what} {name} not removed ({exc}); "
                                 "journaled for `slurm-ipu reap`")
        return 0
    report(cfg["state_dir"], describe(ctx.job_id, name, outcome, what))
    return 0
