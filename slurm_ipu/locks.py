"""Exclusive locks on files: one holder at a time, released when the fd closes (or the process
dies, so a crash never leaves a stale lock)."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import ConfigError, SlurmIpuError


class LockTimeout(SlurmIpuError):
    """A lock stayed held past the caller's deadline."""


# O_NOFOLLOW: a lock file is written ("pid role", remover.py); never through a link at its path
_LOCK_FLAGS = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC


def open_lock(path: Path) -> int:
    try:  # the directory is there but for the first lock: no mkdir per lock (the hooks' hot path)
        return os.open(path, _LOCK_FLAGS, 0o600)
    except FileNotFoundError:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, _LOCK_FLAGS, 0o600)


def try_lock(path: Path, busy: str, wait: float = 0.0) -> int:
    """The locked fd, or ConfigError(busy) if someone else still holds it after `wait` seconds."""
    fd = open_lock(path)
    deadline = time.monotonic() + wait
    pause = 0.05
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() + pause > deadline:
                os.close(fd)
                raise ConfigError(busy) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def is_held(path: Path) -> bool:
    """Whether some process holds the lock now (a probe: it takes and drops it if free). Read-only:
    flock needs no write access, so a user's doctor can probe root's lock. PermissionError (the
    state directory closed to the caller) is the caller's to report: "not held" would be a guess."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except PermissionError:
        raise
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextmanager
def hold(path: Path, deadline: float, clock=time.monotonic, sleep=time.sleep) -> Iterator[None]:
    """Wait for the lock until `deadline` (clock seconds), hold it for the block."""
    fd = open_lock(path)
    try:
        if not wait_for(fd, deadline, clock, sleep):
            raise LockTimeout(f"{path} stayed locked past the deadline")
        yield
    finally:
        os.close(fd)


def wait_for(fd: int, deadline: float, clock=time.monotonic, sleep=time.sleep, stop=None) -> bool:
    """Take the lock on `fd` by `deadline` (clock seconds): False if it stayed held, or as soon as
    stop() says waiting is pointless. The holders keep it for one V-IPU call at most, so a short
    poll is enough and every wait is bounded."""
    pause = 0.01
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if clock() + pause > deadline or (stop is not None and stop()):
                return False
            sleep(pause)
            pause = min(pause * 2, 0.2)
