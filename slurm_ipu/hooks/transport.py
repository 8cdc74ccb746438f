"""The controller hooks' way into the running slurm-ipu service: one Unix socket, one small C program.

Why: slurmctld forks the hook for every job, and a Python hook costs ~80 ms of CPU before it
does anything; in a storm of short jobs that CPU is taken from slurmctld. The service
(`slurm-ipu service`) runs warm as SlurmUser, and PrologSlurmctld/EpilogSlurmctld is
`slurm-ipu-hook` (spank/hook/hook.c, built with the install), which for an IPU job sends the hook's name and
its environment on STATE_DIR/hooks.sock and exits with the status the service answers:

- prolog: the service runs the very same `prolog.run` in a thread of its own and answers its
  exit status;
- epilog: the service journals the job's partition (the entry is on disk before the answer) and
  answers 0; its removal thread, the state directory's one remover (remover.py), removes it at once;
- reap: an admin's `slurm-ipu reap` while the service is the remover (ask_reap): the removal
  thread reaps at once and sends its lines.

No answer means no service: nothing listens (connect fails), or the connection ends without an
answer (the service died or restarts). slurm-ipu-hook then runs the same hook in Python at once,
which is safe because both hooks are idempotent (the creation record makes a re-run adopt what
the first run made). Only root and the service's own user may send a request (SO_PEERCRED).
"""

from __future__ import annotations

import os
import queue
import select
import shutil
import socket
import struct
import threading
import time
from pathlib import Path

from .. import rules
from ..errors import SlurmIpuError
from . import (  # here, not per request: a package's `from . import` runs Python each time
    jobenv,
    prolog,
    removal,
)
from .controllers import clients_of
from .endpoint import socket_path
from .hooklog import report
from .journal import Journal
from .ledger import Ledger

MAX_REQUEST = 2 << 20  # job_submit.lua bounds what a job brings (slurm/limits.py): far below this
READ_TIMEOUT = 5.0  # a request is written at once by the client, or never
NO_SERVICE = 75


def hook_source() -> Path:
    """hook.c, in the C tree (spank/hook/, shipped in the package as slurm_ipu.csrc)."""
    from ..cbuild import c_tree

    return c_tree() / "hook" / "hook.c"


def source_id() -> str:
    """What `slurm-ipu-hook --check` prints of the source it was built from (spank/Makefile gives
    it the same hash): doctor tells an old build (the package upgraded without `make install`)
    from this one."""
    import hashlib

    return hashlib.sha256(hook_source().read_bytes()).hexdigest()[:12]


def build_hook(dest: Path) -> Path:
    """slurm-ipu-hook into `dest` (spank/Makefile, `make hook`: static, with musl where it is, since
    slurmctld starts it twice per job and a static musl program starts in a third of glibc's CPU)."""
    from ..cbuild import make

    return make("hook", dest, "slurm-ipu-hook, the controller hooks")


def listen(state_dir: str) -> socket.socket:
    """The service's socket. Called with the service lock held, so a socket file left by a dead
    service is stale and replaced."""
    path = socket_path(state_dir)
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)  # the hooks run as the service's user (or root): nobody else connects
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(128)
    return sock


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def read_request(conn: socket.socket) -> tuple[str, dict[str, str]]:
    """(verb, environment) as the client sent them, up to its end of writing."""
    conn.settimeout(READ_TIMEOUT)
    chunks, size = [], 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_REQUEST:
            raise ValueError(f"request over {MAX_REQUEST} bytes")
        chunks.append(chunk)
    verb, _, body = b"".join(chunks).decode("utf-8", "replace").partition("\n")
    env = {}
    for item in body.split("\0"):
        key, sep, value = item.partition("=")
        if sep:
            env[key] = value
    return verb, env


def serve(conn: socket.socket, cfg, client, slurm, queued) -> None:
    """One request, taken and answered. Never raises: a service thread has no one to raise to,
    so every failure is an answer (or none: slurm-ipu-hook then runs the hook in Python) and a
    line in hooks.log. `queued()` wakes the removal thread."""
    request = take(conn, cfg)
    if request is not None:
        dispatch(conn, cfg, client, slurm, queued, *request)


def take(conn: socket.socket, cfg) -> tuple[str, dict[str, str]] | None:
    """(verb, environment) of a request from root or the service's own user; None (the
    connection closed) for anyone else's or one that cannot be read."""
    try:
        uid = peer_uid(conn)
        if uid not in (0, os.getuid()):
            report(cfg.state_dir, f"slurm-ipu service: request from uid {uid} refused")
        else:
            return read_request(conn)
    except (OSError, ValueError) as exc:
        report(cfg.state_dir, f"slurm-ipu service: unreadable request: {exc}")
    conn.close()
    return None


def dispatch(conn: socket.socket, cfg, client, slurm, queued, verb: str, env: dict[str, str], room=None) -> None:
    """A taken request answered, and its connection closed. Never raises (the accept loop runs
    epilogs itself): a failure here (the state directory full, say) closes the connection
    unanswered, and slurm-ipu-hook runs the hook in Python, which says why."""
    with conn:
        try:
            if verb == "prolog":
                code = _prolog(conn, cfg, client, slurm, env, room)
            elif verb == "epilog":
                code = _epilog(cfg, env, queued)
            else:
                report(cfg.state_dir, f"slurm-ipu service: request {verb[:40]!r} ignored")
                return
        except Exception as exc:  # noqa: BLE001 - the service outlives one request's failure
            report(cfg.state_dir, f"job {env.get('SLURM_JOB_ID', '?')}: the slurm-ipu service could not take "
                                     f"the {verb}: {exc!r}; left to the Python hook")
            return
        if code is not None:
            _answer(conn, cfg, env, code)


def _answer(conn: socket.socket, cfg, env: dict, code: int) -> None:
    try:
        conn.sendall(f"{code}\n".encode())
    except OSError:  # the client is gone (Slurm killed it: the job was cancelled)
        job = env.get("SLURM_JOB_ID", "?")
        report(cfg.state_dir, f"job {job}: the hook's client was gone before the answer (exit {code})")
        if code == 0 and env.get("SLURM_SCRIPT_CONTEXT") == "prolog_slurmctld" and job.isdigit():
            _give_back(cfg, int(job))


def _prolog(conn, cfg, client, slurm, env: dict, room=None) -> int | None:
    try:
        ctx = jobenv.from_env(env)
    except SlurmIpuError as exc:
        prolog.refuse_env(env, cfg, slurm, exc)
        return 2
    if ctx.script_context != "prolog_slurmctld":
        report(cfg.state_dir, f"job {ctx.job_id}: prolog request in context {ctx.script_context!r} refused")
        return 2
    try:
        try:
            client = clients_of(cfg, client).of(ctx.nodes)  # the job's controller
        except SlurmIpuError:  # spans two, or none: the prolog fails the job and says why
            return prolog.run(ctx, cfg, clients_of(cfg, client), slurm, room=room)
        return prolog.run(ctx, cfg, client.with_sleep(_watching(conn, client.sleep)), slurm, sleep=client.sleep,
                          room=room)
    except Exception as exc:  # noqa: BLE001 - a bug must still answer the client, not hang it
        report(cfg.state_dir, f"job {ctx.job_id}: prolog failed in the slurm-ipu service: {exc!r}")
        return 1


def _epilog(cfg, env: dict, queued) -> int | None:
    """Queue the job's partition for the removal thread: the entry is in the journal before the
    answer, so the partition goes even if the service dies right after (a crash of the host:
    journal.py). An environment that cannot be read gets no answer: the Python epilog then says
    why."""
    try:
        ctx = jobenv.from_env(env)
    except SlurmIpuError:
        return None
    if removal.owed(cfg, ctx):
        removal.queue(cfg, ctx)
        queued()
    return 0


def _watching(conn: socket.socket, sleep):
    """The prolog's and the V-IPU client's pause, which also ends the prolog once nobody waits
    for it (Slurm killed the client: the job was cancelled): its waits for a slow partition
    would otherwise run on to the deadline. The prolog then removes what it made."""
    def pause(seconds: float) -> None:
        if gone(conn):
            raise prolog.Abandoned("the job ended while its partition was being made")
        sleep(seconds)

    return pause


def gone(conn: socket.socket) -> bool:
    """The client closed its end (it has shut down writing already, so a hang-up means gone)."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLOUT)
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


def _give_back(cfg, job: int) -> None:
    for name in (rules.job_name(prefix, job) for prefix in cfg.job_prefixes):  # the job's hosts are not at hand here
        if Ledger(cfg.state_dir).owns(name, job):
            Journal(cfg.state_dir).add(name, job, "its prolog's client was gone when the partition was ready")


def answer_reap(conn: socket.socket, cfg, run) -> None:
    """The service's side of ask_reap: run(out) reaps, each line goes to the asker as well."""
    def out(line: str) -> None:
        report(cfg.state_dir, line)
        try:
            conn.sendall(f"{line}\n".encode())
        except OSError:
            pass  # the asker gave up: the reap goes on

    with conn:
        code = run(out)
        try:
            conn.sendall(f"exit {code}\n".encode())
        except OSError:
            pass


def remove_legacy(state_dir: str) -> None:
    """What an older service left (its FIFO handoff: requests.fifo, prolog-requests/; the lock
    files the remover's replaced): gone at start."""
    for name in ("requests.fifo", "reaper.lock", "reap.lock", "pending-removal.lock"):
        Path(state_dir, name).unlink(missing_ok=True)
    shutil.rmtree(Path(state_dir, "prolog-requests"), ignore_errors=True)


class Workers:
    """Threads that stay for the next prolog: starting one per job costs the service more CPU than
    handing work to one that waits. A prolog never queues behind another: with none idle, one
    more thread starts. Daemon threads, so a stuck prolog never holds the service's exit."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.cond = threading.Condition()
        self.idle = self.busy = 0

    def submit(self, work, *args) -> None:
        with self.cond:
            self.busy += 1
            start = self.idle == 0
            if not start:
                self.idle -= 1  # that thread takes this job off the queue
        if start:
            threading.Thread(target=self._run, args=(work, args), name="hook-prolog", daemon=True).start()
        else:
            self.jobs.put((work, args))

    def _run(self, work, args) -> None:
        while True:
            done = False
            try:
                work(*args)
                done = True
            finally:  # a job that raised ends its thread, which then never counts as idle
                with self.cond:
                    self.busy -= 1
                    self.idle += done
                    self.cond.notify_all()
            work, args = self.jobs.get()

    def wait(self, deadline: float, clock) -> None:
        """Until no job runs, or the deadline."""
        with self.cond:
            while self.busy and clock() < deadline:
                self.cond.wait(max(0.0, deadline - clock()))


class Listener:
    """The accept loop, in the service's main thread. A request is read here (its client writes
    it whole at once, and only root's or the service user's is read); an epilog, a journal entry,
    is answered here too; a prolog, which waits on V-IPU, goes to a thread of its own."""

    def __init__(self, cfg, client, slurm, queued, observe=None, reap=None, room=None):
        self.cfg, self.client, self.slurm, self.queued = cfg, client, slurm, queued
        self.observe = observe  # observe(verb, seconds): each hook's time here (hooks/stats.py)
        self.reap = reap  # reap(conn): an admin's `slurm-ipu reap`, answered by the removal thread
        self.room = room  # the prologs' way to the remover (prolog.run)
        self.sock = listen(cfg.state_dir)
        self.workers = Workers()

    def serve(self, timeout: float, wake_fd: int | None = None) -> None:
        """One request, or none within `timeout`; a byte on wake_fd (a stop signal) ends the wait."""
        ready = select.select([self.sock] if wake_fd is None else [self.sock, wake_fd], [], [], timeout)[0]
        if wake_fd in ready:
            _drain(wake_fd)
        if self.sock not in ready:
            return
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        request = take(conn, self.cfg)
        if request is None:
            return
        if request[0] == "reap" and self.reap is not None:
            self.reap(conn)
        elif request[0] == "prolog":
            self.workers.submit(self._timed, conn, *request)
        else:
            self._timed(conn, *request)

    def _timed(self, conn, verb: str, env: dict[str, str]) -> None:
        """dispatch, its time counted (hooks/stats.py) before the removal thread is woken: the
        removal's save of the counters then includes the epilog that queued it."""
        woken: list[bool] = []
        started = time.monotonic()
        dispatch(conn, self.cfg, self.client, self.slurm, lambda: woken.append(True), verb, env, self.room)
        if self.observe is not None and verb in ("prolog", "epilog"):
            self.observe(verb, time.monotonic() - started)
        if woken:
            self.queued()

    def close(self) -> None:
        """Stop taking requests: from here on connect fails and the hooks run Python at once."""
        socket_path(self.cfg.state_dir).unlink(missing_ok=True)
        self.sock.close()

    def finish(self, deadline: float, clock) -> None:
        """Requests under way are answered before the service exits (each is bounded by its
        hook's deadline), so no client is left to time out on a partition half made."""
        self.workers.wait(deadline, clock)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
