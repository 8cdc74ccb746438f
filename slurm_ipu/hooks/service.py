"""The slurm-ipu service (`slurm-ipu service`, systemd's slurm-ipu.service): one long-running
process, as SlurmUser, that takes the controller hooks slurm-ipu-hook hands it (transport.py) and
removes ended jobs' partitions.

Why: Slurm (22.05 at least) returns a job's licences only when EpilogSlurmctld exits, and
schedules again at that moment only if the nodes' epilogs finished *after* it; otherwise the next
IPU job waits for the next periodic pass (seconds). A Python epilog that calls V-IPU always
finishes after the nodes. So while this service runs, the epilog starts no Python: slurm-ipu-hook
hands the job over, the service journals the partition and answers at once, and removes
it at once. The prologs it runs the same way save a Python start per job. Without
the service slurm-ipu-hook runs both hooks in Python, and nothing waits on the service.
"""

from __future__ import annotations

import os
import queue
import signal
import stat
import threading
import time
import traceback

from ..errors import ConfigError, ServiceDied, SlurmIpuError
from . import remover, transport
from .controllers import clients_of
from .endpoint import reap_request_path
from .hooklog import report
from .journal import Journal
from .notes import BatchedNotes
from .removal import entry_only, work_off
from .stats import Stats

# The service wakes for work, not on a clock: an epilog it queues wakes the removal thread, a
# request or a stop signal wakes the accept loop. The journal is still scanned once a second
# for what a Python hook queued there (while the service was restarting).
JOURNAL_POLL_S = 1.0
BUSY_POLL_S = 0.1  # an entry whose prolog still holds its name: soon again
BACKOFF_MAX_S = 60.0
REAP_RETRY_S = 5.0  # a reap skipped (slurmctld not answering: a takeover under way) is tried again this soon
NOTES_S = 1.0  # started jobs' notes (notes.py) wait at most this long: one scontrol for all of them


class Service:
    """The long-running slurm-ipu service: the journal as soon as an epilog queues a removal, a full
    `reap` (orphans whose job is gone; one squeue) every reap.interval seconds as the backstop,
    and the prologs slurm-ipu-hook hands over (transport.py), each in a thread of its own."""

    def __init__(self, cfg, client, slurm, clock=time.monotonic, after_health=None):
        self.cfg, self.clock = cfg, clock
        self.clients = clients_of(cfg, client)  # one per V-IPU controller: a job's by its hosts
        self.slurm = BatchedNotes(slurm)  # what the prologs, reap and health pass use
        self.after_health = after_health  # e.g. the metrics textfile (cli.py: deploy is above the hooks)
        self.retry_at = 0.0  # V-IPU unreachable: no entry is tried before then
        self.backoff = 1.0
        self.later: dict[str, tuple[float, float]] = {}  # an entry V-IPU refused: (retry at, its backoff)
        self.next_reap = clock()  # a full reap at start: whatever happened while we were down
        self.next_health = clock() if cfg.health.interval > 0 else float("inf")
        self.next_notes = clock()
        self.stopping = False
        self.died = ""  # the name of a thread that died of an exception: the service then exits 1
        self.stop_w = -1
        self.wake = threading.Event()  # an epilog queued a removal: work the journal off now
        self.hurry = False  # a prolog is short of IPUs: every entry is due, backoffs or not
        self.asked: queue.SimpleQueue = queue.SimpleQueue()  # admins' `slurm-ipu reap`, for the removal thread
        self.stats = Stats(cfg.state_dir)  # for `slurm-ipu metrics`: saved after removals and each pass
        self.clients.set_observer(self.stats.vipu_error)

    def step(self) -> float:
        """One pass; returns how long the removal thread may sleep unless woken."""
        now = self.clock()
        names = Journal(self.cfg.state_dir).names()
        queued = set(names)
        self.later = {n: v for n, v in self.later.items() if n in queued}  # settled by a prolog or reap
        hurry, self.hurry = self.hurry, False
        due = [n for n in names if hurry or n not in self.later or self.later[n][0] <= now]
        pause = JOURNAL_POLL_S
        if due and now < self.retry_at and not hurry:
            pause = self.retry_at - now  # backing off: V-IPU was unreachable on the last pass
        elif due:
            pause = self._work_off(due, now)
        if self.later:
            pause = min(pause, min(at for at, _ in self.later.values()) - self.clock())
        asked = self._reap_asked()
        if now >= self.next_reap or asked is not None:
            done = self._reap() == 0
            self.next_reap = now + (self.cfg.reap.interval if done else min(REAP_RETRY_S, self.cfg.reap.interval))
            if done and asked is not None:
                _drop_asked(self.cfg.state_dir, asked)
        while not self.asked.empty():  # an admin's reap: at once, in this thread (the one remover)
            transport.answer_reap(self.asked.get(), self.cfg, self._sweep)
        if now >= self.next_health:
            self.next_health = now + self.cfg.health.interval
            self._health()
        if now >= self.next_notes:  # not at every epilog's wake: a storm's notes then go in one scontrol
            self.next_notes = now + NOTES_S
            self._notes()
        now = self.clock()
        return max(0.0, min(pause, self.next_reap - now, self.next_health - now, self.next_notes - now))

    def _notes(self) -> None:
        try:
            self.slurm.flush()
        except SlurmIpuError as exc:  # a job ended before its note: the others were written
            report(self.cfg.state_dir, f"slurm-ipu service: a job's partition note not written: {exc}")

    def _work_off(self, names: list[str], now: float, by: float = float("inf")) -> float:
        done, failed = work_off(self.cfg, self.clients, names, min(by, now + self.cfg.epilog.deadline), self.clock,
                                lambda seconds: self.stats.observe("removal", seconds))
        for name in done:
            self.later.pop(name, None)
        if done:
            self._save_stats()  # one small write per pass: `slurm-ipu metrics` sees each ended job
        for name, exc in failed.items():
            # that removal alone waits, the others go on: V-IPU refused it, or (on a site of several
            # controllers) its controller is down, which must not hold up the others' removals
            if entry_only(exc) or len(self.clients) > 1:
                backoff = min(self.later.get(name, (0.0, 0.5))[1] * 2, BACKOFF_MAX_S)
                self.later[name] = (self.clock() + backoff, backoff)
                report(self.cfg.state_dir, f"slurm-ipu service: {name} not removed ({exc}); retrying in {backoff:g}s")
                continue
            self.retry_at = self.clock() + self.backoff  # V-IPU unreachable: no hammering; all stay queued
            report(self.cfg.state_dir, f"slurm-ipu service: V-IPU failed ({exc}); retrying in {self.backoff:g}s")
            self.backoff = min(self.backoff * 2, BACKOFF_MAX_S)
            return self.retry_at - self.clock()
        self.backoff = 1.0
        # An entry left (its prolog still holds the name) is tried again soon.
        return BUSY_POLL_S if len(done) + len(failed) < len(names) else JOURNAL_POLL_S

    def _reap(self) -> int:
        return self._sweep(lambda line: report(self.cfg.state_dir, line))

    def _reap_asked(self) -> tuple[int, int] | None:
        """(inode, mtime) of a reap asked at a takeover (endpoint.reap_request_path), or None: one
        stat per pass, on a file slurm-ipu-hook makes (a link or another kind is no request)."""
        try:
            st = os.lstat(reap_request_path(self.cfg.state_dir))
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None

    def _sweep(self, out) -> int:
        from . import reap

        try:
            return reap.sweep(self.cfg, self.clients, self.slurm, out=out)
        except SlurmIpuError as exc:  # slurmctld or V-IPU down: next time
            out(f"slurm-ipu service: reap skipped: {exc}")
            return 1
        finally:
            self.stats.passed("reap")
            self._save_stats()

    def room(self, name: str, deadline: float) -> int:
        """A prolog short of IPUs (prolog.run's room): the removal thread retries every entry now.
        Nothing is settled here (the prolog waits and retries its create)."""
        self.hurry = True
        self.wake.set()
        return 0

    def _save_stats(self) -> None:
        try:
            self.stats.save()
        except OSError as exc:
            report(self.cfg.state_dir, f"slurm-ipu service: counters not written: {exc}")

    def _health(self) -> None:
        from . import health

        try:
            health.run(self.cfg, self.clients, self.slurm, out=lambda line: report(self.cfg.state_dir, line),
                       deadline=self.clock() + self.cfg.epilog.deadline)
        except SlurmIpuError as exc:  # V-IPU or slurmctld unreachable: not a machine failure, nothing changes
            report(self.cfg.state_dir, f"slurm-ipu service: health pass skipped: {exc}")
        self.stats.passed("health")
        self._save_stats()
        if self.after_health is not None:
            try:
                self.after_health()
            except (SlurmIpuError, OSError) as exc:
                report(self.cfg.state_dir, f"slurm-ipu service: metrics not written: {exc}")

    def run(self) -> int:
        lock = self._become_remover()
        Journal(self.cfg.state_dir).dir.mkdir(parents=True, exist_ok=True)
        transport.remove_legacy(self.cfg.state_dir)
        listener = transport.Listener(self.cfg, self.clients, self.slurm, self.wake.set, self.stats.observe,
                                      self._ask, self.room)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        # A stop signal writes here, which ends the accept loop's wait at once.
        stop_r, stop_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(stop_w)
        self.stop_w = stop_w
        before, threading.excepthook = threading.excepthook, self._died
        report(self.cfg.state_dir, f"slurm-ipu service: started, pid {os.getpid()}")
        # Removals in their own thread: a slow V-IPU removal never delays a waiting prolog.
        removals = threading.Thread(target=self._removals, name="removals", daemon=True)
        removals.start()
        try:
            while not self.stopping:
                listener.serve(JOURNAL_POLL_S, wake_fd=stop_r)
        finally:
            signal.set_wakeup_fd(-1)
            self.stopping = True
            # Within the unit's TimeoutStopSec (prolog.deadline + epilog.deadline + 15).
            stop_by = self.clock() + self.cfg.prolog.deadline + self.cfg.epilog.deadline + 12
            listener.close()  # from here on slurm-ipu-hook runs the Python hooks itself
            self.wake.set()
            removals.join(self.cfg.epilog.deadline + 5)
            listener.finish(self.clock() + self.cfg.prolog.deadline + 5, self.clock)
            self._last_pass(stop_by)
            remover.give_up(lock)
            threading.excepthook, self.stop_w = before, -1
            os.close(stop_r)
            os.close(stop_w)
            report(self.cfg.state_dir, "slurm-ipu service: stopped" if not self.died else
                   f"slurm-ipu service: stopped, exit 1: its {self.died} thread died (traceback above)")
        if self.died:  # a non-zero exit: systemd (Restart=always) and the lab start it again
            raise ServiceDied(f"slurm-ipu service: its {self.died} thread died; see {self.cfg.state_dir}/hooks.log")
        return 0

    def _become_remover(self) -> int:
        """The remover role for the service's life. An epilog or a reap holding it finishes first
        (within a reap's deadline); another service holding it is an error at once."""
        state = self.cfg.state_dir
        wait = self.cfg.epilog.deadline * 4 + 5
        try:
            return remover.take(state, remover.SERVICE, wait)
        except remover.Busy as busy:
            if remover.is_service(busy.holder):
                raise ConfigError(f"slurm-ipu service: one already runs for {state} (pid {busy.holder[0]})") from None
            raise ConfigError(f"slurm-ipu service: {busy}, and still after {wait:g}s; stop it, then start the "
                              "service again") from None

    def _last_pass(self, stop_by: float) -> None:
        """What Python epilogs queued while this service stopped (they leave it to the service,
        which holds the role until here), as far as `stop_by` allows; the last notes and counters."""
        while not self.asked.empty():  # asked as it stopped: the asker runs again, and removes itself
            transport.answer_reap(self.asked.get(), self.cfg, _stopping)
        self.retry_at, self.later = 0.0, {}
        names = Journal(self.cfg.state_dir).names()
        if names and self.clock() < stop_by:
            self._work_off(names, self.clock(), stop_by)
        self._notes()
        self._save_stats()

    def _ask(self, conn) -> None:
        self.asked.put(conn)
        self.wake.set()

    def _removals(self) -> None:
        while not self.stopping:
            self.wake.clear()  # before the pass: an epilog queued during it wakes the next one
            pause = self.step()
            self.wake.wait(pause)

    def _stop(self, *_):
        self.stopping = True

    def _died(self, args) -> None:
        """threading.excepthook: a thread that dies of an exception (a bug: every expected failure
        is caught where it happens) ends the whole service, loudly, rather than leaving it up and
        holding the remover's role with nothing removed, drained or counted any more."""
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "unknown"
        trace = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
        report(self.cfg.state_dir, f"slurm-ipu service: the {name} thread died; stopping (exit 1) to be "
               f"started again:\n{trace.rstrip()}")
        self.died = self.died or name
        self.stopping = True
        self.wake.set()
        try:
            os.write(self.stop_w, b"!")  # the accept loop's wait ends now
        except OSError:
            pass


def _stopping(out) -> int:
    """The answer to a reap asked while the service stops."""
    out("slurm-ipu service: stopping; run `slurm-ipu reap` again once it has stopped")
    return 1


def _drop_asked(state_dir: str, asked: tuple[int, int]) -> None:
    """The request a reap answered, unless a new one replaced it meanwhile (that one stays, for
    the next pass)."""
    path = reap_request_path(state_dir)
    try:
        st = os.lstat(path)
        if (st.st_ino, st.st_mtime_ns) == asked:
            path.unlink()
    except OSError:
        pass
