"""EpilogSlurmctld in Python (slurm-ipu-hook runs it when the slurm-ipu service does not answer): the
same steps as the service, so a job's end has one semantics whichever runs it. The job's V-IPU
partition (in the allocation model: its allocation, with the partitions its user made in it) is
queued in the durable journal first (removal.queue), then the one remover takes it
(removal.work_off): this epilog becomes the remover for the while (remover.py), unless the hook
service is (it removes the entry within a second), and retries while the job's prolog still
holds the name (a job cancelled while its partition was being made), within epilog.deadline.

Only a partition slurm-ipu created for this job (the ledger's record) is removed: one made by
someone else under the job's name is left alone and logged. Idempotent and never failing: a
missing partition is success; V-IPU being unreachable leaves the entry in the journal for the
slurm-ipu service or `slurm-ipu reap` (the record stays with it), and the epilog still exits 0 (an
EpilogSlurmctld failure is only logged by Slurm, and V-IPU trouble is never a node problem).
"""

from __future__ import annotations

import time

from . import remover
from .hooklog import report
from .jobenv import JobContext
from .journal import Journal
from .removal import owed, queue, work_off


def run(ctx: JobContext, cfg, client, clock=time.monotonic, sleep=time.sleep) -> int:
    if not owed(cfg, ctx):
        return 0
    deadline = clock() + cfg.epilog.deadline
    name = queue(cfg, ctx)
    journal, pause, failed = Journal(cfg.state_dir), 0.05, {}
    while True:
        try:  # the role for one pass, never while waiting: other epilogs remove meanwhile
            with remover.held(cfg.state_dir, "epilog", max(0.0, deadline - clock()), clock, sleep):
                done, failed = work_off(cfg, client, [name], deadline, clock)
        except remover.Busy as busy:
            _left(cfg, ctx, name, f"{remover.describe(busy.holder)} removes it" if remover.is_service(busy.holder)
                  else f"{remover.describe(busy.holder)} was removing; the slurm-ipu service or `slurm-ipu reap` "
                  "removes it")
            return 0
        if done or failed or journal.get(name) is None:  # removed, refused, or settled by another
            break
        if clock() + pause >= deadline:  # its prolog held the name throughout
            _left(cfg, ctx, name, "its prolog still holds the name; the slurm-ipu service or `slurm-ipu reap` "
                  "removes it")
            break
        sleep(pause)
        pause = min(pause * 2, 1.0)
    for exc in failed.values():
        report(cfg.state_dir, f"job {ctx.job_id}: {cfg.kind_of(name)} {name} not removed ({exc}); journaled for "
                                 "the slurm-ipu service or `slurm-ipu reap`")
    return 0


def _left(cfg, ctx: JobContext, name: str, why: str) -> None:
    report(cfg.state_dir, f"job {ctx.job_id}: {cfg.kind_of(name)} {name} left queued: {why}")
