"""The small helpers every part shares: an atomic file write, polling to a deadline, and whether
a process is alive. One copy each (the hooks, the lab, the emulator and the installer all use
them); standard library only, so the hooks' start-up stays lean."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def shipped_dir(package: str, top: str) -> Path:
    """A directory of data pyproject.toml maps into the package (templates/ as slurm_ipu.templates,
    spank/ as slurm_ipu.csrc): where the install put it, else the checkout's own `top`. A directory
    of data, not code, is a namespace package, so its spec lists where it lies."""
    from importlib.util import find_spec

    try:
        spec = find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(__file__).resolve().parents[1] / top  # a checkout that was never installed


def atomic_write(path: str | Path, data: bytes | str, mode: int = 0o644, durable: bool = False) -> None:
    """Readers see the old file or the new one, never half of one: write a temporary file in the
    same directory and rename it over.
    The temporary is created exclusively (O_EXCL, O_NOFOLLOW) under a name no one can guess: in a
    directory others can write (an admin's metrics.textfile), a link or a file planted there first
    is never written through, chmodded or published as ours; a name already taken is skipped.
    The rename replaces a link at `path` itself, never its target.
    durable: fsync before the rename (state that must survive a crash: records, the journal)."""
    path = os.fspath(path)  # plain strings and os calls: the slurm-ipu service writes two per IPU job
    head, name = os.path.split(path)
    view = memoryview(data.encode() if isinstance(data, str) else data)
    fd, tmp = _exclusive(head, name, mode)
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


_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TRIES = 16  # names are 64 random bits: a taken one is a planted one, and 16 in a row is no chance


def _exclusive(head: str, name: str, mode: int) -> tuple[int, str]:
    """A new temporary file beside `name`, created here and now, and its path."""
    for _ in range(_TRIES):
        tmp = os.path.join(head, f".{name}.{os.urandom(8).hex()}.tmp")
        try:
            return os.open(tmp, _EXCLUSIVE, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{head}: {_TRIES} temporary names for {name} all taken")


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
    OSError) when it cannot be read. os calls, not open(): the slurm-ipu service reads two per IPU
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


# What root may find in a state directory it made before (the hooks' records, journal, locks,
# socket, counters and log; an older service's FIFO): those kinds, owned by root or SlurmUser.
_OWN_KINDS = (0o100000, 0o040000, 0o140000, 0o010000)  # S_IFREG, S_IFDIR, S_IFSOCK, S_IFIFO
_SCAN_MAX = 100_000


def private_dir(path: str | Path, uid: int, gid: int, mode: int = 0o700) -> bool:
    """`path` as a directory only root and `uid` can use, made here if missing (parents 0755);
    returns whether anything changed. Never follows a link: the mode and owner are set on the
    directory opened with O_NOFOLLOW. Refused (UnsafePath, naming the path and the fix): a link
    or another kind of file at the path, a directory another user owns (made first by someone
    else: it may hold anything), anything in it that is not a file, directory, socket or FIFO of
    root's or uid's, and a parent that others can write without the sticky bit."""
    from .errors import UnsafePath

    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    _safe_parent(parent, path)
    made = False
    try:
        os.mkdir(path, mode)
        made = True
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UnsafePath(f"{path} is not a directory ({exc.strerror}: a link or a file there is not ours to "
                         f"follow); remove it, then run this again") from None
    try:
        st = os.fstat(fd)
        if st.st_uid not in (0, uid):
            raise UnsafePath(f"{path} belongs to uid {st.st_uid}, not root or the hooks' user (uid {uid}): made by "
                             "someone else, it may hold anything; remove it, then run this again")
        if not made:
            _only_ours(path, uid)
        if st.st_mode & 0o7777 != mode:
            os.fchmod(fd, mode)
            made = True
        if (st.st_uid, st.st_gid) != (uid, gid):
            os.fchown(fd, uid, gid)
            made = True
    finally:
        os.close(fd)
    return made


def _safe_parent(parent: str, path: str) -> None:
    from .errors import UnsafePath

    st = os.stat(parent)
    if st.st_mode & 0o022 and not st.st_mode & 0o1000:
        raise UnsafePath(f"{path}: its parent {parent} is writable by others (mode {st.st_mode & 0o7777:o}), who "
                         f"could replace it; use a directory under one only root can write")


def _only_ours(path: str, uid: int) -> None:
    """Everything in an existing directory is of a kind and owner the hooks leave there."""
    from .errors import UnsafePath

    seen = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            seen += 1
            full = os.path.join(root, name)
            st = os.lstat(full)
            if st.st_uid not in (0, uid) or (st.st_mode & 0o170000) not in _OWN_KINDS:
                raise UnsafePath(f"{path} holds {full}, which is not the hooks' (uid {st.st_uid}, mode "
                                 f"{st.st_mode:o}); remove it, then run this again")
            if seen > _SCAN_MAX:
                return
