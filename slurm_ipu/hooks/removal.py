"""Removing ended jobs' partitions (or, in the allocation model, their allocations): the one rule
the epilog, the hook service (service.py), the prolog's capacity path and `slurm-ipu reap` share.

Only a partition with slurm-ipu's creation record for that job is removed; anything else
under our prefix is left alone and logged.
"""

from __future__ import annotations

import time

from ..errors import SlurmIpuError, VipuError
from ..locks import LockTimeout
from .hooklog import report
from .journal import Journal
from .ledger import Ledger

QUEUED = "queued by the epilog"


def queue(cfg, ctx) -> str:
    """A job's end, as the hook service and the Python epilog both take it: its V-IPU object's
    removal in the durable journal, for work_off. Returns the object's name."""
    name = cfg.job_name(ctx.job_id, ctx.nodes)
    Journal(cfg["state_dir"]).add(name, ctx.job_id, QUEUED)
    return name


def remove_recorded(cfg, client, name: str, job_id, deadline: float) -> str:
    """'removed', 'already gone', or 'not ours' (no creation record for this job: left alone).
    V-IPU failures raise; the record stays so the partition is retried. A prolog still making
    the partition holds its name: LockTimeout at once (the caller holds the journal lock, and
    must never wait on a prolog that may want it; the entry stays queued for the next pass)."""
    ledger = Ledger(cfg["state_dir"])
    with ledger.lock(name, time.monotonic()):
        if not ledger.owns(name, job_id):
            return "not ours"
        removed = remove_vipu(cfg, client, name, deadline)
        ledger.drop(name)
    return "removed" if removed else "already gone"


def remove_vipu(cfg, client, name: str, deadline: float) -> bool:
    """The job's V-IPU object, whichever the site's model makes: its partition, or its allocation
    with every partition its user made in it. False: it was gone already."""
    if cfg.kind_of(name) == "allocation":
        return client.remove_allocation(name, missing_ok=True, deadline=deadline)
    return client.remove_partition(name, missing_ok=True, deadline=deadline)


def describe(job_id, name: str, outcome: str, what: str = "partition") -> str:
    if outcome == "not ours":
        return f"job {job_id}: no {what} of slurm-ipu's to remove ({name} is not ours, if it exists)"
    return f"job {job_id}: {what} {name} {outcome}"


def entry_only(exc: SlurmIpuError) -> bool:
    """V-IPU answered, and refused this one removal: the controller is up and other entries may
    go. Unreachable, timed out, no `vipu` command: everything else would fail the same way."""
    return isinstance(exc, VipuError) and not exc.transient


def work_off(cfg, client, names: list[str], deadline: float, clock=time.monotonic,
             observe=None) -> tuple[list[str], dict[str, SlurmIpuError]]:
    """Work the journal's entries for `names` off, each under the journal lock (a prolog taking
    its own job's name back waits for it, and then finds the entry gone). Returns the names
    settled, and those V-IPU failed with each one's error (they stay queued). A transient failure
    (V-IPU unreachable) ends the pass: the rest would fail the same way. V-IPU refusing one
    removal does not hold up the others. observe(seconds): told how long each settled entry
    waited since it was first queued (the hook service's removal histogram)."""
    journal, done, failed = Journal(cfg["state_dir"]), [], {}
    for name in names:
        if clock() >= deadline:
            break
        with journal.lock(deadline):
            entry = journal.get(name)
            if entry is None:  # settled meanwhile (a prolog took the name back, or reap)
                continue
            job = entry.get("job_id")
            try:
                outcome = remove_recorded(cfg, client, name, job, deadline)
            except LockTimeout:  # its prolog is still making it: the next pass
                continue
            except SlurmIpuError as exc:
                journal.add(name, job, str(exc), since=entry.get("time"))
                failed[name] = exc
                if not entry_only(exc):
                    break
                continue
            journal.drop(name)
        report(cfg["state_dir"], describe(job, name, outcome, cfg.kind_of(name)))
        if observe is not None and isinstance(entry.get("time"), (int, float)):
            observe(time.time() - entry["time"])
        done.append(name)
    return done, failed
