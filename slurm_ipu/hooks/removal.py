"""Removing ended jobs' partitions: the rule the epilog, the removal service and the prolog's
capacity path share, and the service itself (`slurm-ipu reap --watch`).

Why a service: Slurm (22.05 at least) returns a job's licences only when EpilogSlurmctld exits,
and schedules again at that moment only if the nodes' epilogs finished *after* it; otherwise
the next IPU job waits for the next periodic pass (seconds). A Python epilog that calls V-IPU
always finishes after the nodes. So while this service holds its lock, the hook wrapper's
epilog path starts no Python: it queues the partition in the journal and exits, and the
service removes it within a poll interval. Without the service (lock free) the wrapper runs
the epilog in Python as before, and nothing waits on the service.

Only a partition with slurm-ipu's creation record for that job is removed; anything else
under our prefix is left alone and logged.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ..errors import SlurmIpuError
from .hooklog import report
from .journal import Journal
from .ledger import Ledger

POLL_S = 0.1  # how soon a queued partition goes; one directory scan per poll
BACKOFF_MAX_S = 60.0


def service_lock(state_dir: str) -> Path:
    """Held by the running service; the hook wrapper probes it (flock -n) to choose its path."""
    return Path(state_dir) / "reaper.lock"


def remove_recorded(cfg, client, name: str, job_id, deadline: float) -> str:
    """'removed', 'already gone', or 'not ours' (no creation record for this job: left alone).
    V-IPU failures raise; the record stays so the partition is retried."""
    ledger = Ledger(cfg["state_dir"])
    if not ledger.owns(name, job_id):
        return "not ours"
    removed = client.remove_partition(name, missing_ok=True, deadline=deadline)
    ledger.drop(name)
    return "removed" if removed else "already gone"


def describe(job_id, name: str, outcome: str) -> str:
    if outcome == "not ours":
        return f"job {job_id}: no partition of slurm-ipu's to remove ({name} is not ours, if it exists)"
    return f"job {job_id}: partition {name} {outcome}"


def work_off(cfg, client, names: list[str], deadline: float,
             clock=time.monotonic) -> tuple[list[str], Exception | None]:
    """Work the journal's entries for `names` off, each under the journal lock (a prolog taking
    its own job's name back waits for it, and then finds the entry gone). Returns the names
    settled, and the V-IPU error that stopped the pass (the rest wait for the next one)."""
    journal, done = Journal(cfg["state_dir"]), []
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
            except SlurmIpuError as exc:
                journal.add(name, job, str(exc))
                return done, exc
            journal.drop(name)
        report(cfg["state_dir"], describe(job, name, outcome))
        done.append(name)
    return done, None


class Service:
    """The long-running removal service: the journal within POLL_S, a full `reap` (orphans
    whose job is gone; one squeue) every reap.interval seconds as the backstop."""

    def __init__(self, cfg, client, slurm, clock=time.monotonic, sleep=time.sleep):
        self.cfg, self.client, self.slurm, self.clock, self.sleep = cfg, client, slurm, clock, sleep
        self.retry_at = 0.0
        self.backoff = 1.0
        self.next_reap = clock()  # a full reap at start: whatever happened while we were down
        self.stopping = False

    def step(self) -> None:
        now = self.clock()
        names = Journal(self.cfg["state_dir"]).names()
        if names and now >= self.retry_at:
            _, failed = work_off(self.cfg, self.client, names, now + self.cfg["epilog.deadline"], self.clock)
            if failed is None:
                self.backoff = 1.0
            else:  # V-IPU trouble: no hammering; every entry stays queued
                self.retry_at = self.clock() + self.backoff
                report(self.cfg["state_dir"], f"removal service: V-IPU failed ({failed}); "
                                              f"retrying in {self.backoff:g}s")
                self.backoff = min(self.backoff * 2, BACKOFF_MAX_S)
        if now >= self.next_reap:
            self.next_reap = now + self.cfg["reap.interval"]
            self._reap()

    def _reap(self) -> None:
        from . import reap

        try:
            reap.run(self.cfg, self.client, self.slurm, out=lambda line: report(self.cfg["state_dir"], line),
                     wait=0)  # an admin's reap is running: it does the same work
        except SlurmIpuError as exc:  # slurmctld or V-IPU down, or a cron reap running: next time
            report(self.cfg["state_dir"], f"removal service: periodic reap skipped: {exc}")

    def run(self) -> int:
        from ..locks import try_lock

        lock = try_lock(service_lock(self.cfg["state_dir"]),
                        f"a removal service already runs for {self.cfg['state_dir']} (it holds reaper.lock)")
        Journal(self.cfg["state_dir"]).dir.mkdir(parents=True, exist_ok=True)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        os.write(lock, f"{os.getpid()}\n".encode())
        report(self.cfg["state_dir"], f"removal service: started, pid {os.getpid()}")
        try:
            while not self.stopping:
                self.step()
                self.sleep(POLL_S)
        finally:
            os.close(lock)
            report(self.cfg["state_dir"], "removal service: stopped")
        return 0

    def _stop(self, *_):
        self.stopping = True
