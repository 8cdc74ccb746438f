"""The prolog handed to the running service: PrologSlurmctld without a Python start per job.

Why: slurmctld forks the hook for every IPU job, and a Python prolog costs ~80 ms of CPU
(interpreter and imports) before it does anything; in a storm of short jobs that CPU is taken
from slurmctld and the job steps, and IPU jobs schedule at ~0.6 of plain ones. The removal
service (`slurm-ipu reap --watch`) already runs, warm, as SlurmUser; so while it holds its lock
the hook wrapper (a few lines of /bin/sh) hands the job to it:

1. writes its environment, NUL-separated (`env -0`), to SPOOL/<job>.<pid>.env;
2. makes a FIFO SPOOL/<job>.<pid>.reply and writes `prolog <job>.<pid>` to the service's
   request FIFO (one write below PIPE_BUF: never interleaved with another hook's);
3. waits, bounded, for one line on its reply FIFO: the exit status the Python prolog would
   have returned, and exits with it.

The service runs the very same `prolog.run` in a thread per request (V-IPU calls overlap as
separate prologs would), so the outcome, the records and the reasons are identical. The
wrapper falls back to the Python prolog when the service is not running; a service that takes
the request and then dies leaves the wrapper to time out and exit 1 (Slurm requeues; the
creation record lets the epilog or `reap` remove whatever was half made).
"""

from __future__ import annotations

import os
import re
import select
from pathlib import Path

from ..errors import SlurmIpuError
from .hooklog import report

TOKEN = re.compile(r"[0-9]{1,12}\.[0-9]{1,10}")  # <job id>.<wrapper pid>, as the wrapper writes it
MAX_ENV_BYTES = 1 << 20  # a job's environment as slurmctld gives it is a few KB


def request_fifo(state_dir: str) -> Path:
    """Where the wrapper writes `prolog <token>` lines; the service reads it."""
    return Path(state_dir) / "requests.fifo"


def spool_dir(state_dir: str) -> Path:
    """The waiting wrappers' environment files and reply FIFOs."""
    return Path(state_dir) / "prolog-requests"


def open_requests(state_dir: str) -> int:
    """The request FIFO, made if missing, opened read-write and non-blocking: the service never
    sees end-of-file when wrappers close it, and a wrapper's write never blocks on an absent
    reader (it then times out waiting for its reply). Whatever is already queued is kept."""
    path = request_fifo(state_dir)
    spool_dir(state_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if not _is_fifo(path):
            path.unlink()  # a plain file where the FIFO belongs (a wrapper racing a stopped service)
    except FileNotFoundError:
        pass
    try:
        os.mkfifo(path, 0o600)
    except FileExistsError:
        pass
    return os.open(path, os.O_RDWR | os.O_NONBLOCK)


def _is_fifo(path: Path) -> bool:
    import stat

    return stat.S_ISFIFO(path.lstat().st_mode)


class Lines:
    """Whole lines from a non-blocking fd; a partial line waits for the rest."""

    def __init__(self, fd: int):
        self.fd, self.rest = fd, b""

    def read(self) -> list[str]:
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        *lines, self.rest = (self.rest + chunk).split(b"\n")
        if len(self.rest) > 4096:  # no wrapper writes that: junk, dropped
            self.rest = b""
        return [line.decode("ascii", "replace").strip() for line in lines]


def read_env(path: Path) -> dict:
    with open(path, "rb") as fh:
        data = fh.read(MAX_ENV_BYTES + 1)
    if len(data) > MAX_ENV_BYTES:
        raise ValueError(f"{path.name}: over {MAX_ENV_BYTES} bytes")
    env = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def serve_prolog(cfg, client, slurm, token: str) -> int:
    """Run one handed-over prolog and answer the waiting wrapper. Never raises: a service thread
    has no one to raise to, so every failure is an exit status and a line in hooks.log.

    The reply FIFO is opened first and held: a wrapper already gone (Slurm killed it: the job
    was cancelled, or it timed out) is not served at all, and one that goes while its prolog
    runs is noticed when the answer cannot be delivered; then a partition made for it is queued
    for removal (as the epilog would: the journal's claim rule keeps a requeued attempt's)."""
    spool = spool_dir(cfg["state_dir"])
    job = token.partition(".")[0]
    env_path = spool / f"{token}.env"
    reply = spool / f"{token}.reply"
    fd = _open_reply(reply)
    if fd is None:  # Slurm killed the wrapper (its trap never ran): its files are ours to remove
        env_path.unlink(missing_ok=True)
        reply.unlink(missing_ok=True)
        report(cfg["state_dir"], f"job {job}: the prolog's wrapper was gone before the removal service "
                                 "got to it; nothing done")
        return 1
    watched = client.with_sleep(_watching(fd, client.sleep))
    try:
        code = _run(cfg, watched, slurm, env_path, job)
    except Exception as exc:  # noqa: BLE001 - a bug must still answer the wrapper, not hang it
        report(cfg["state_dir"], f"job {job}: prolog failed in the removal service: {exc!r}")
        code = 1
    if not _answer(fd, code):
        reply.unlink(missing_ok=True)
        report(cfg["state_dir"], f"job {job}: the prolog's wrapper stopped waiting before the answer (exit {code})")
        if code == 0:
            _give_back(cfg, int(job))
    return code


def _run(cfg, client, slurm, env_path: Path, job: str) -> int:
    from . import jobenv, prolog

    try:
        env = read_env(env_path)
    except (OSError, ValueError) as exc:
        report(cfg["state_dir"], f"job {job}: prolog request unreadable: {exc}")
        return 1
    finally:
        env_path.unlink(missing_ok=True)
    try:
        ctx = jobenv.from_env(env)
    except SlurmIpuError as exc:
        if env.get("SLURM_JOB_ID") == job:  # never hold another job than the request's
            prolog.refuse_env(env, cfg, slurm, exc)
        else:
            report(cfg["state_dir"], f"job {job}: prolog refused its environment: {exc}")
        return 2
    if str(ctx.job_id) != job or ctx.script_context != "prolog_slurmctld":
        report(cfg["state_dir"], f"job {job}: prolog request for job {ctx.job_id} in context "
                                 f"{ctx.script_context!r} refused")
        return 2
    return prolog.run(ctx, cfg, client, slurm, sleep=client.sleep)


def _watching(fd: int, sleep):
    """The prolog's and the V-IPU client's pause, which also ends the prolog once nobody waits
    for it (Slurm killed the wrapper: the job was cancelled): its waits for a slow partition
    would otherwise run on to the deadline. The prolog then removes what it made."""
    from .prolog import Abandoned

    def pause(seconds: float) -> None:
        if _gone(fd):
            raise Abandoned("the job ended while its partition was being made")
        sleep(seconds)

    return pause


def _gone(fd: int) -> bool:
    """The reply FIFO's reader is gone: poll reports POLLERR on a pipe's write end then."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _open_reply(path: Path) -> int | None:
    try:  # non-blocking: without a reader (the wrapper is gone) this fails instead of waiting
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None


def _answer(fd: int, code: int) -> bool:
    try:
        os.write(fd, f"{code}\n".encode())
        return True
    except OSError:  # EPIPE: the wrapper (the reader) is gone
        return False
    finally:
        os.close(fd)


def _give_back(cfg, job: int) -> None:
    from .journal import Journal
    from .ledger import Ledger

    name = f"{cfg['partition.prefix']}{job}"
    if Ledger(cfg["state_dir"]).owns(name, job):
        Journal(cfg["state_dir"]).add(name, job, "its prolog's wrapper was gone when the partition was ready")


def sweep(state_dir: str, older_than: float, now: float) -> int:
    """Remove what killed wrappers left in the spool (their trap never ran). Returns the count."""
    gone = 0
    try:
        entries = list(os.scandir(spool_dir(state_dir)))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > older_than:
                os.unlink(entry.path)
                gone += 1
        except OSError:
            continue
    return gone
