"""Removing ended jobs' partitions (or, in the allocation model, their allocations): the one rule
whoever is the remover (remover.py: the slurm-ipu service, else a Python epilog, a Python prolog short
of IPUs, or `slurm-ipu reap`) follows.

Only a partition with slurm-ipu's creation record for that job is removed; anything else
under our prefix is left alone and logged.
"""

from __future__ import annotations

import time

from ..errors import SlurmIpuError, VipuError
from ..locks import LockTimeout
from . import remover
from .controllers import clients_of
from .hooklog import report
from .journal import Journal
from .ledger import Ledger

QUEUED = "queued by the epilog"


def owed(cfg, ctx) -> bool:
    """Whether a job's end has a V-IPU object to remove: an IPU job's (its licence), or a
    heterogeneous job's later component's, which has no licence (the prolog read its GRES), when
    the prolog recorded one for it: a file's stat, no V-IPU call."""
    if ctx.ipus > 0:
        return True
    return bool(ctx.het_offset) and Ledger(cfg.state_dir).owns(cfg.job_name(ctx.job_id, ctx.nodes), ctx.job_id)


def queue(cfg, ctx) -> str:
    """A job's end, as the slurm-ipu service and the Python epilog both take it: its V-IPU object's
    removal in the durable journal, for work_off. Returns the object's name."""
    name = cfg.job_name(ctx.job_id, ctx.nodes)
    Journal(cfg.state_dir).add(name, ctx.job_id, QUEUED)
    return name


def settle(cfg, client, journal: Journal, name: str, deadline: float) -> tuple[str, dict] | None:
    """The remover's one step for one entry, under the name's lock (so nothing of this name is
    made meanwhile): (outcome, entry), or None when there was no entry. Outcomes: 'removed',
    'already gone', 'not ours' (no creation record for the entry's job: left alone), 'taken back'
    (the record is of the job's next attempt, whose prolog began after the entry was queued: a
    requeued job keeps what it now runs on). V-IPU failures re-queue the entry with the reason
    and raise; the record stays. A prolog holding the name: LockTimeout at once (the next pass)."""
    ledger, clients = Ledger(cfg.state_dir), clients_of(cfg, client)
    with ledger.lock(name, time.monotonic()):
        entry = journal.get(name)
        if entry is None:
            return None
        job, record = entry.get("job_id"), ledger.get(name)
        client = clients.of_record(record)  # the controller of the job's hosts
        if record is None or record.get("job_id") != job or client is None:
            outcome = "not ours"
        elif _time(record.get("began"), 0.0) > _time(entry.get("time"), float("inf")):
            outcome = "taken back"
        else:
            try:
                outcome = "removed" if remove_vipu(cfg, client, name, deadline) else "already gone"
            except SlurmIpuError as exc:
                journal.add(name, job, str(exc), since=entry.get("time"))
                raise
            ledger.drop(name)
        journal.drop(name)
    return outcome, entry


def _time(value, absent: float) -> float:
    """A time field, or `absent`: a record of an older slurm-ipu has no `began` (older than any
    entry), and an entry without a time cannot be placed after anything (it is worked off)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else absent


def remove_vipu(cfg, client, name: str, deadline: float) -> bool:
    """The job's V-IPU object, whichever the site's model makes: its partition, or its allocation
    with every partition its user made in it. False: it was gone already."""
    if cfg.kind_of(name) == "allocation":
        return client.remove_allocation(name, missing_ok=True, deadline=deadline)
    return client.remove_partition(name, missing_ok=True, deadline=deadline)


def describe(job_id, name: str, outcome: str, what: str = "partition") -> str:
    if outcome == "not ours":
        return f"job {job_id}: no {what} of slurm-ipu's to remove ({name} is not ours, if it exists)"
    if outcome == "taken back":
        return f"job {job_id}: {what} {name} kept: the job's next attempt runs on it"
    return f"job {job_id}: {what} {name} {outcome}"


def entry_only(exc: SlurmIpuError) -> bool:
    """V-IPU answered, and refused this one removal: the controller is up and other entries may
    go. Unreachable, timed out, no `vipu` command: everything else would fail the same way."""
    return isinstance(exc, VipuError) and not exc.transient


def work_off(cfg, client, names: list[str], deadline: float, clock=time.monotonic,
             observe=None) -> tuple[list[str], dict[str, SlurmIpuError]]:
    """The remover (remover.py) works the journal's entries for `names` off. Returns the names
    settled, and those V-IPU failed with each one's error (they stay queued). A transient failure
    (V-IPU unreachable) ends the pass: the rest would fail the same way. V-IPU refusing one
    removal does not hold up the others. An entry whose prolog still holds the name stays for
    the next pass. observe(seconds): told how long each settled entry waited since it was first
    queued (the slurm-ipu service's removal histogram)."""
    journal, done, failed = Journal(cfg.state_dir), [], {}
    clients, ledger = clients_of(cfg, client), Ledger(cfg.state_dir)
    down: dict[str, SlurmIpuError] = {}  # controllers unreachable in this pass: their entries wait
    for name in names:
        if clock() >= deadline:
            break
        record = ledger.get(name) if clients.several else None
        owner = clients.owner(record) if clients.several else ""
        if record is not None and owner not in clients.by_name:
            continue  # another controller's, which this remover was not given (a prolog making room)
        if owner in down:
            failed[name] = down[owner]
            continue
        try:
            settled = settle(cfg, clients, journal, name, deadline)
        except LockTimeout:  # its prolog is still making it: the next pass
            continue
        except SlurmIpuError as exc:
            failed[name] = exc
            if not entry_only(exc):
                if not clients.several:
                    break
                down[owner] = exc  # that controller's other entries wait; the others' go on
            continue
        if settled is None:  # settled meanwhile (reap)
            continue
        outcome, entry = settled
        report(cfg.state_dir, describe(entry.get("job_id"), name, outcome, cfg.kind_of(name)))
        if observe is not None and isinstance(entry.get("time"), (int, float)):
            observe(time.time() - entry["time"])
        done.append(name)
    return done, failed


def make_room(cfg, client, name: str, deadline: float, clock=time.monotonic) -> int:
    """A Python prolog short of IPUs: the journal's other entries worked off, if nobody else
    removes now (never waiting: whoever removes frees the IPUs as well). How many went."""
    try:
        fd = remover.take(cfg.state_dir, "prolog", 0.0)
    except remover.Busy:
        return 0
    try:
        others = [n for n in Journal(cfg.state_dir).names() if n != name]
        freed, _ = work_off(cfg, client, others, deadline, clock)
    finally:
        remover.give_up(fd)
    if freed:
        report(cfg.state_dir, f"removed {len(freed)} journaled partition(s) to make room for {name}")
    return len(freed)
