"""The small helpers every part shares: an atomic file write, polling to a deadline, and whether
a process is alive. One copy each (the hooks, the lab, the emulator and the installer all use
them); standard library only, so the hooks' start-up stays lean."""

from __future__ import annotations

import _thread
import json
import os
import time
from pathlib import Path


def atomic_write(path: str | Path, data: bytes | str, mode: int = 0o644, durable: bool = False) -> None:
    """Readers see the old file or the new one, never half of one: write a temporary file in the
    same directory (one per process and thread, so concurrent writers, the hook service's
    threads among them, do not share it) and rename it over.
    durable: fsync before the rename (state that must survive a crash: records, the journal)."""
    path = os.fspath(path)  # plain strings and os calls: the hook service writes two per IPU job
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.{_thread.get_ident()}.tmp")
    view = memoryview(data.encode() if isinstance(data, str) else data)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        try:
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
            os.fchmod(fd, mode)  # the umask narrowed O_CREAT's mode
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_into(directory: str | Path, name: str, data: str, durable: bool = True) -> None:
    """A root-only state file (a creation record, a journal entry), fsynced unless not `durable`:
    the directory is made on first use only, not checked on every write (the hooks' hot path)."""
    path = os.path.join(directory, name)
    try:
        atomic_write(path, data, 0o600, durable=durable)
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        atomic_write(path, data, 0o600, durable=durable)


def read_json(path: str):
    """A state file's document; FileNotFoundError when there is none, ValueError (or another
    OSError) when it cannot be read. os calls, not open(): the hook service reads two per IPU
    job, and a file object costs three system calls more (fstat, ioctl, lseek) each."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return json.loads(b"".join(chunks))


def remove(path: str) -> None:
    """Gone, whether it was there or not."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def poll(check, timeout: float, interval: float = 0.05, max_interval: float = 0.5):
    """Call check() until it returns something truthy or timeout seconds pass; returns its last
    value. The interval grows (x1.5) to max_interval: prompt when it is quick, cheap when not."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        left = deadline - time.monotonic()
        if value or left <= 0:
            return value
        time.sleep(min(interval, left))
        interval = min(interval * 1.5, max_interval)


def pid_alive(pid: int | None) -> bool:
    """The process exists and is not a zombie (a child we have not reaped yet is dead to us)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's, but alive
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def process_token(pid: int) -> str | None:
    """What tells this process from a later one given the same pid (after it exits, or after a
    reboot): the boot's id and the process's start time in clock ticks since boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
        with open(f"/proc/{pid}/stat", "rb") as fh:
            start = fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None
    return f"{boot}:{start}"


def same_process(pid: int | None, token: str | None) -> bool:
    """pid is alive and is still the process that token was taken from."""
    return pid_alive(pid) and (token is None or process_token(pid) == token)
