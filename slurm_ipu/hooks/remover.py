"""Who removes, for one state directory: whoever holds STATE_DIR/remover.lock.

Epilogs only add to the journal (each entry its own file, written whole), and prologs only
write creation records under their name's lock (ledger.py). Acting on an entry (the V-IPU
removal, dropping the entry and the record, re-queueing a refusal) is the remover's alone:
- the slurm-ipu service, for as long as it runs (its removal thread; its prologs short of IPUs
  wake that thread instead of removing themselves);
- without it, a Python epilog for its own job's entry, a Python prolog short of IPUs (only if
  no one else removes: it never waits), or `slurm-ipu reap`, each for the length of its work.

So the journal has one writer of everything but new entries, and two lock kinds are left: this
one, and a name's (a removal never runs between a prolog's record and its create).

The holder writes "pid role" into the lock file, so doctor and the uninstall tell a running
service from an epilog holding it for a moment, and a Python epilog never waits on a service
(which removes its entry within a second: service.JOURNAL_POLL_S).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import locks
from ..fsutil import pid_alive
from ..locks import LockTimeout

SERVICE = "service"  # the slurm-ipu service's role; the others name the command holding it for a while


class Busy(LockTimeout):
    """Someone else removes now: `holder` is its (pid, role), or None when it could not be read."""

    def __init__(self, message: str, holder: tuple[int, str] | None):
        super().__init__(message)
        self.holder = holder


def lock_path(state_dir: str) -> Path:
    return Path(state_dir) / "remover.lock"


def holder(state_dir: str) -> tuple[int, str] | None:
    """(pid, role) of the remover now, None when nobody holds the lock. Read-only (flock needs no
    write access, so a user's doctor can probe root's lock); PermissionError is the caller's."""
    path = lock_path(state_dir)
    if not locks.is_held(path):
        return None
    try:
        return _words(path.read_bytes()) or (0, "")
    except FileNotFoundError:
        return None


def _words(text: bytes) -> tuple[int, str] | None:
    """What the holder wrote; None if unreadable, or if the process it names is gone (a holder
    killed between taking the lock and writing this leaves the last holder's words there)."""
    try:
        pid, role = text.decode("ascii", "replace").split()[:2]
        who = int(pid), role
    except ValueError:
        return None
    return who if pid_alive(who[0]) else None


def describe(who: tuple[int, str] | None) -> str:
    if not who or not who[0]:
        return "another remover"
    pid, role = who
    if role == SERVICE:
        return f"the slurm-ipu service (pid {pid})"
    return f"`slurm-ipu reap` (pid {pid})" if role == "reap" else f"a Python {role} (pid {pid})"


def is_service(who: tuple[int, str] | None) -> bool:
    return bool(who) and who[1] == SERVICE


def take(state_dir: str, role: str, wait: float, clock=time.monotonic, sleep=time.sleep) -> int:
    """The lock's fd, once held (close it with give_up to give the role up). Busy after `wait`
    seconds, or at once when the holder is the slurm-ipu service."""
    path = lock_path(state_dir)
    fd = locks.open_lock(path)
    if not locks.wait_for(fd, clock() + wait, clock, sleep, stop=lambda: is_service(_words(os.pread(fd, 128, 0)))):
        who = _words(os.pread(fd, 128, 0))
        os.close(fd)
        raise Busy(f"{describe(who)} removes for {state_dir} (it holds {path})", who)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {role}\n".encode(), 0)
    return fd


@contextmanager
def held(state_dir: str, role: str, wait: float, clock=time.monotonic, sleep=time.sleep) -> Iterator[None]:
    fd = take(state_dir, role, wait, clock=clock, sleep=sleep)
    try:
        yield
    finally:
        give_up(fd)


def give_up(fd: int) -> None:
    """Nobody's words are left for the next reader (a holder that dies leaves them: _words checks)."""
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
