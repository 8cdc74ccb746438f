"""`slurm-ipu reap`: remove partitions no running job owns, and work off the epilog's journal.

Safe from cron or a systemd timer: one V-IPU listing, one Slurm query, a lock so runs never
overlap, a deadline, and --dry-run. A partition is ours if its name is prefix + digits; it is
an orphan unless its job is live: its base state is RUNNING (with any flag: CONFIGURING,
SIGNALING, STOPPED, RESIZING; the parser recovers the base state where 22.05 and 23.02 print only
the flag) or SUSPENDED. A job that is gone, finished (squeue --json still lists finished jobs,
with COMPLETING only as a flag), or back to PENDING after a requeue (its epilog ran) owns nothing;
removing a partition its epilog is removing too is harmless, both are idempotent.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import SlurmIpuError
from ..locks import LockTimeout, try_lock
from . import restarts
from .journal import Journal
from .ledger import Ledger
from .removal import remove_vipu

LIVE_STATES = ("RUNNING", "SUSPENDED")


def _settle_records(ledger: Ledger, before: float, existing: set[str], jobs: dict[int, str], kept: set[str]) -> None:
    """Records whose partition is gone and whose job holds nothing any more (the epilog never
    ran: slurmctld died) are settled; a live job's record stays for its own epilog. Only records
    written before the listings count: a prolog that recorded and created after V-IPU's listing
    has a partition the listing cannot show, and its short job may already be over."""
    for path in sorted(ledger.dir.glob("*.json")) if ledger.dir.exists() else []:
        record = ledger.get(path.stem) or {}
        job = record.get("job_id")
        if record.get("time", 0) >= before:
            continue
        if path.stem not in existing and path.stem not in kept and jobs.get(job, "GONE") not in LIVE_STATES \
                and not ledger.busy(path.stem):  # its prolog may be creating it after the listing
            ledger.drop(path.stem)


def _lock(state_dir: str, wait: float) -> int:
    return try_lock(Path(state_dir) / "reap.lock",
                    f"another `slurm-ipu reap` still holds {state_dir}/reap.lock after {wait:g}s; let it finish",
                    wait)


def job_of(name: str, prefixes: str | tuple[str, ...]) -> int | None:
    """The job a V-IPU object is named after (prefix + job id), under any of the prefixes."""
    for prefix in (prefixes,) if isinstance(prefixes, str) else prefixes:
        suffix = name[len(prefix):] if name.startswith(prefix) else ""
        if suffix.isdigit():
            return int(suffix)
    return None


def orphans(names, jobs: dict[int, str], prefix: str | tuple[str, ...]) -> list[tuple[str, int]]:
    out = []
    for name in names:
        job = job_of(name, prefix)
        if job is not None and jobs.get(job, "GONE") not in LIVE_STATES:
            out.append((name, job))
    return out


def job_objects(cfg, client, deadline: float) -> list:
    """What V-IPU holds for jobs, as partitions: every partition (partition model), and the
    allocations named like a job's (allocation model; each as one partition of its IPU-Machines'
    IPUs, the partitions its user made in it going with it)."""
    models = cfg.models
    if "allocation" not in models:
        return client.list_partitions(deadline)
    from ..rules import IPUS_PER_AGENT
    from ..vipu.types import Partition

    prefix = cfg["allocation.prefix"]
    out = [Partition(name, len(agents) * IPUS_PER_AGENT, allocation=name)
           for name, agents in client.list_allocations(deadline).items() if job_of(name, prefix) is not None]
    if "partition" in models:  # Pods of both models: the partition-model jobs' too
        out += [p for p in client.list_partitions(deadline) if job_of(p.allocation or "", prefix) is None]
    return out


def run(cfg, client, slurm, dry_run: bool = False, out=print, clock=time.monotonic, wait: float | None = None) -> int:
    """wait: seconds to wait for a reap already running (the hook service's periodic one)
    to finish; by default as long as one reap may take."""
    lock = _lock(cfg["state_dir"], cfg["epilog.deadline"] * 4 if wait is None else wait)
    try:
        deadline = clock() + cfg["epilog.deadline"] * 4
        journal, ledger = Journal(cfg["state_dir"]), Ledger(cfg["state_dir"])
        # Only entries older than the listings below are settled: one queued after them (a job
        # that ended meanwhile) is the hook service's, or the next run's.
        queued = journal.names()
        recorded = {p.stem for p in ledger.dir.glob("*.json")} if ledger.dir.exists() else set()
        before = time.time()
        parts = [p.name for p in job_objects(cfg, client, deadline)]
        jobs = slurm.active_jobs()
        found = []
        for name, job in orphans(parts, jobs, cfg.job_prefixes):
            if ledger.owns(name, job):
                found.append((name, job))
            elif name in recorded:  # ours, removed meanwhile by its epilog or the hook service
                continue
            else:  # made under our prefix by someone else: not ours to remove
                out(f"reap: left alone {name} (job {job} {jobs.get(job, 'gone').lower()}): slurm-ipu did not create it")
        failed = 0
        for name, job in found:
            state = jobs.get(job, "gone")
            if dry_run:
                out(f"reap: would remove {name} (job {job} {state.lower()})")
                continue
            try:
                with ledger.lock(name, time.monotonic()):  # held: its prolog is still making it
                    remove_vipu(cfg, client, name, deadline)
                    out(f"reap: removed {name} (job {job} {state.lower()})")
                    journal.drop(name)
                    ledger.drop(name)
            except LockTimeout:
                out(f"reap: left {name} for now (job {job} {state.lower()}): its prolog is still running")
            except SlurmIpuError as exc:
                failed += 1
                out(f"reap: could not remove {name}: {exc}")
        # Journal entries whose partition is gone, or now belongs to a running (requeued) job,
        # are settled; orphans that failed to go stay journaled for the next run.
        left = {name for name, _ in found}
        if not dry_run:
            with journal.lock(deadline):
                for name in queued:
                    if name not in left and not ledger.busy(name):
                        journal.drop(name)
        if not dry_run:
            _settle_records(ledger, before, set(parts), jobs, left)
            restarts.prune(cfg["state_dir"], set(jobs), before)
        return 1 if failed else 0
    finally:
        os.close(lock)
