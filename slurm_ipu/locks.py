"""A non-blocking exclusive lock on a file: one holder at a time, released when the fd closes
(or the process dies, so a crash never leaves a stale lock)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .errors import ConfigError


def try_lock(path: Path, busy: str) -> int:
    """The locked fd, or ConfigError(busy) if someone else holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(busy) from None
    return fd
