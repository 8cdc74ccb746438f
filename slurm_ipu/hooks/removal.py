"""Removing ended jobs' partitions: the rule the epilog, the removal service and the prolog's
capacity path share, and the service itself (`slurm-ipu reap --watch`).

Why a service: Slurm (22.05 at least) returns a job's licences only when EpilogSlurmctld exits,
and schedules again at that moment only if the nodes' epilogs finished *after* it; otherwise
the next IPU job waits for the next periodic pass (seconds). A Python epilog that calls V-IPU
always finishes after the nodes. So while this service runs, the hook wrapper's epilog starts no
Python: its client hands the job to the service (transport.py), which journals the partition and
answers at once, and removes it within a poll interval. Without the service the wrapper runs the
epilog in Python, and nothing waits on the service. The same service runs the prologs the
wrapper hands over (transport.py), so a job start costs no Python start either.

Only a partition with slurm-ipu's creation record for that job is removed; anything else
under our prefix is left alone and logged.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from ..errors import SlurmIpuError
from ..locks import LockTimeout
from .hooklog import report
from .journal import Journal
from .ledger import Ledger

POLL_S = 0.1  # how soon a queued partition goes at the latest; one directory scan per poll
BACKOFF_MAX_S = 60.0


def service_lock(state_dir: str) -> Path:
    """Held by the running service; the hook wrapper probes it (flock -n) to choose its path."""
    return Path(state_dir) / "reaper.lock"


def remove_recorded(cfg, client, name: str, job_id, deadline: float, wait: bool = True) -> str:
    """'removed', 'already gone', or 'not ours' (no creation record for this job: left alone).
    V-IPU failures raise; the record stays so the partition is retried. A prolog still making
    the partition holds its name: wait for it (until the deadline), or with wait=False raise
    LockTimeout at once (a caller holding the journal lock must never wait on a prolog that
    may want that lock)."""
    ledger = Ledger(cfg["state_dir"])
    with ledger.lock(name, deadline if wait else time.monotonic()):
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
                outcome = remove_recorded(cfg, client, name, job, deadline, wait=False)
            except LockTimeout:  # its prolog is still making it: the next pass
                continue
            except SlurmIpuError as exc:
                journal.add(name, job, str(exc))
                return done, exc
            journal.drop(name)
        report(cfg["state_dir"], describe(job, name, outcome))
        done.append(name)
    return done, None


class Service:
    """The long-running removal service: the journal within POLL_S, a full `reap` (orphans
    whose job is gone; one squeue) every reap.interval seconds as the backstop, and the
    prologs the hook wrapper hands over (transport.py), each in its own thread."""

    def __init__(self, cfg, client, slurm, clock=time.monotonic):
        self.cfg, self.client, self.slurm, self.clock = cfg, client, slurm, clock
        self.retry_at = 0.0
        self.backoff = 1.0
        self.next_reap = clock()  # a full reap at start: whatever happened while we were down
        self.stopping = False
        self.wake = threading.Event()  # an epilog queued a removal: work the journal off now

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
        from . import transport

        lock = try_lock(service_lock(self.cfg["state_dir"]),
                        f"a removal service already runs for {self.cfg['state_dir']} (it holds reaper.lock)")
        Journal(self.cfg["state_dir"]).dir.mkdir(parents=True, exist_ok=True)
        transport.remove_legacy(self.cfg["state_dir"])
        listener = transport.Listener(self.cfg, self.client, self.slurm, self.wake.set)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        os.write(lock, f"{os.getpid()}\n".encode())
        report(self.cfg["state_dir"], f"removal service: started, pid {os.getpid()}")
        # Removals in their own thread: a slow V-IPU removal never delays a waiting prolog.
        removals = threading.Thread(target=self._removals, name="removals", daemon=True)
        removals.start()
        try:
            while not self.stopping:
                listener.serve(POLL_S)
        finally:
            self.stopping = True
            listener.close()  # from here on wrappers run the Python hooks themselves
            self.wake.set()
            removals.join(self.cfg["epilog.deadline"] + 5)
            listener.finish(self.clock() + self.cfg["prolog.deadline"] + 5, self.clock)
            os.close(lock)
            report(self.cfg["state_dir"], "removal service: stopped")
        return 0

    def _removals(self) -> None:
        while not self.stopping:
            self.step()
            self.wake.wait(POLL_S)
            self.wake.clear()

    def _stop(self, *_):
        self.stopping = True
