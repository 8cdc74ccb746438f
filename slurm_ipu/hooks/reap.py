"""`slurm-ipu reap`: remove partitions no running job owns, and work off the epilog's journal.

The slurm-ipu service runs it every reap.interval; by hand it is safe at any time: one V-IPU
listing, one Slurm query, a deadline, --dry-run, and it runs only as the remover (remover.py),
so never beside another reap or the service (which then reaps on its behalf). A partition is
ours if its name is prefix + digits; it is an orphan unless its job is live: its base state is
RUNNING (with any flag: CONFIGURING, SIGNALING, STOPPED, RESIZING; the parser recovers the base
state where 22.05 and 23.02 print only the flag) or SUSPENDED. A job that is gone, finished
(squeue --json still lists finished jobs, with COMPLETING only as a flag), or back to PENDING
after a requeue (its epilog ran) owns nothing; removing a partition its epilog is removing too is
harmless, both are idempotent.
"""

from __future__ import annotations

import os
import socket
import time

from .. import rules
from ..errors import ConfigError, SlurmIpuError
from ..locks import LockTimeout
from . import remover, restarts
from .controllers import clients_of
from .endpoint import socket_path
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


def job_of(name: str, prefixes: str | tuple[str, ...]) -> int | None:
    """The job a V-IPU object is named after (prefix + job id), under any of the prefixes."""
    for prefix in (prefixes,) if isinstance(prefixes, str) else prefixes:
        parsed = rules.parse_name(name, prefix)
        if parsed is not None and parsed[1] is None:
            return parsed[0]
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

    prefix = cfg.allocation.prefix
    # each IPU numbered by its machine's place in the site (4 to a machine, 64 to an ILD), as V-IPU
    # numbers a partition's: status and metrics count an allocation in the Pods of its machines
    place = {agent: k for k, agent in enumerate(a for _, agents in cfg.pod_agents() for a in agents)}
    out = [Partition(name, len(agents) * IPUS_PER_AGENT, allocation=name,
                     ipus=tuple(place[a] * IPUS_PER_AGENT + j for a in agents if a in place
                                for j in range(IPUS_PER_AGENT)))
           for name, agents in client.list_allocations(deadline).items() if job_of(name, prefix) is not None]
    if "partition" in models:  # Pods of both models: the partition-model jobs' too
        out += [p for p in client.list_partitions(deadline) if job_of(p.allocation or "", prefix) is None]
    return out


def run(cfg, client, slurm, dry_run: bool = False, out=print, clock=time.monotonic, wait: float | None = None) -> int:
    """`slurm-ipu reap` by hand. A dry run only reads. Otherwise it becomes the remover
    (remover.py) for its run, waiting `wait` seconds (by default as long as one reap may take)
    for an epilog or another reap that is; while the slurm-ipu service is the remover, the service
    reaps now on its behalf (ask_reap, below) and its lines are printed here."""
    try:
        if dry_run:
            return sweep(cfg, client, slurm, True, out, clock)
        return _as_remover(cfg, client, slurm, out, clock, wait)
    except PermissionError as exc:  # the state directory is root's and SlurmUser's alone
        raise ConfigError(f"reap: {exc.filename or cfg.state_dir}: permission denied to uid {os.getuid()}; run "
                          f"it as root or slurm.user ({cfg.slurm.user})") from None


def _as_remover(cfg, client, slurm, out, clock, wait: float | None) -> int:
    try:
        fd = remover.take(cfg.state_dir, "reap", cfg.epilog.deadline * 4 if wait is None else wait)
    except remover.Busy as busy:
        if not remover.is_service(busy.holder):
            raise ConfigError(f"reap: {busy}; let it finish, or run `slurm-ipu reap --dry-run`") from None
        return ask_reap(cfg, out, busy)
    try:
        return sweep(cfg, client, slurm, False, out, clock)
    finally:
        remover.give_up(fd)


def ask_reap(cfg, out, busy) -> int:
    """`slurm-ipu reap` while the slurm-ipu service is the remover: it reaps now and sends each line,
    then "exit N" (transport.answer_reap). Only root and the service's own user are answered (as
    for the hooks)."""
    path, wait = socket_path(cfg.state_dir), cfg.epilog.deadline * 4 + 30
    who = remover.describe(busy.holder)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(wait)
        try:
            sock.connect(str(path))
            sock.sendall(b"reap\n")
            sock.shutdown(socket.SHUT_WR)
            lines = sock.makefile("r", encoding="utf-8", errors="replace")
            for line in lines:
                if line.startswith("exit ") and line[5:].strip().isdigit():
                    return int(line[5:])
                out(line.rstrip("\n"))
        except TimeoutError:
            raise ConfigError(f"reap: {who} did not finish its reap within {wait:g}s; see its log "
                              f"({cfg.state_dir}/hooks.log)") from None
        except OSError as exc:
            raise ConfigError(f"reap: {who} removes for {cfg.state_dir} but does not take requests on {path} "
                              f"({exc.strerror or exc}): it starts or stops; run again in a moment") from None
    raise ConfigError(f"reap: {who} closed {path} without an answer: only root and the service's own user may ask "
                      "it; run `slurm-ipu reap` as one of them")


def sweep(cfg, client, slurm, dry_run: bool = False, out=print, clock=time.monotonic) -> int:
    """One reap, by the remover (the slurm-ipu service every reap.interval, or `run` above)."""
    deadline = clock() + cfg.epilog.deadline * 4
    journal, ledger = Journal(cfg.state_dir), Ledger(cfg.state_dir)
    # Only entries older than the listings below are settled: one queued after them (a job
    # that ended meanwhile) is the slurm-ipu service's, or the next run's.
    queued = journal.names()
    recorded = {p.stem for p in ledger.dir.glob("*.json")} if ledger.dir.exists() else set()
    before = time.time()
    clients = clients_of(cfg, client)
    listed, down = _listings(cfg, clients, deadline, out)
    parts = [name for names in listed.values() for name in names]
    jobs = slurm.active_jobs()
    found = []
    for controller, names in listed.items():
        for name, job in orphans(names, jobs, cfg.job_prefixes):
            if ledger.owns(name, job):
                found.append((name, job, clients.by_name[controller]))
            elif name in recorded:  # ours, removed meanwhile by its epilog or the slurm-ipu service
                continue
            else:  # made under our prefix by someone else: not ours to remove
                out(f"reap: left alone {name} (job {job} {jobs.get(job, 'gone').lower()}): slurm-ipu did not "
                    "create it")
    failed = sum(not _remove(cfg, one, name, job, jobs.get(job, "gone").lower(), dry_run, out, deadline)
                 for name, job, one in found)
    # Journal entries whose partition is gone, or now belongs to a running (requeued) job,
    # are settled; orphans that failed to go stay journaled for the next run; so do the records
    # and entries of a controller that did not answer (its listing cannot say they are gone).
    left = {name for name, _, _ in found} | _of_controllers(clients, ledger, recorded | set(queued), down)
    if not dry_run:
        _settle_entries(journal, ledger, queued, left, before)
        _settle_records(ledger, before, set(parts), jobs, left)
        restarts.prune(cfg.state_dir, set(jobs), before)
    return 1 if failed or down else 0


def _listings(cfg, clients, deadline: float, out) -> tuple[dict[str, list[str]], set[str]]:
    """Each controller's job objects' names, and the controllers that did not answer: on a site of
    one, its failure is the reap's (raised); of several, that one is named and skipped."""
    listed: dict[str, list[str]] = {}
    down: set[str] = set()
    for name, one in clients.items():
        try:
            listed[name] = [p.name for p in job_objects(cfg, one, deadline)]
        except SlurmIpuError as exc:
            if len(clients) == 1:
                raise
            out(f"reap: V-IPU controller {name} skipped: {exc}")
            down.add(name)
    return listed, down


def _of_controllers(clients, ledger: Ledger, names: set[str], down: set[str]) -> set[str]:
    """Of `names`, those whose creation record puts them under a controller in `down`."""
    if not down:
        return set()
    return {n for n in names if (owner := clients.owner(ledger.get(n))) is None or owner in down}


def _remove(cfg, client, name: str, job: int, state: str, dry_run: bool, out, deadline: float) -> bool:
    """One orphan of ours; False when V-IPU failed (it stays for the next run)."""
    if dry_run:
        out(f"reap: would remove {name} (job {job} {state})")
        return True
    ledger = Ledger(cfg.state_dir)
    try:
        with ledger.lock(name, time.monotonic()):  # held: its prolog is still making it
            remove_vipu(cfg, client, name, deadline)
            out(f"reap: removed {name} (job {job} {state})")
            Journal(cfg.state_dir).drop(name)
            ledger.drop(name)
    except LockTimeout:
        out(f"reap: left {name} for now (job {job} {state}): its prolog is still running")
    except SlurmIpuError as exc:
        out(f"reap: could not remove {name}: {exc}")
        return False
    return True


def _settle_entries(journal: Journal, ledger: Ledger, queued: list[str], left: set[str], before: float) -> None:
    """Entries older than the listings whose partition is gone, or now belongs to a running
    (requeued) job, are settled; orphans that failed to go stay for the next run. An entry queued
    after the listings (the job ended meanwhile) is the next pass's."""
    for name in queued:
        entry = journal.get(name) or {}
        if name not in left and entry.get("time", 0) < before and not ledger.busy(name):
            journal.drop(name)
