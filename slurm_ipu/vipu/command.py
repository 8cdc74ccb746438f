"""One `vipu` call: the child started with posix_spawn, its output read to the end, bounded.

Why not subprocess.run: the slurm-ipu service makes two `vipu` calls per IPU job, and subprocess.run's
own Python (Popen's setup, its selector-based communicate) cost more CPU than the native `vipu`
it starts (measured: a third of the service's CPU per job, docs/performance.md). This does the
same for the one case the client needs: an argument list (PATH searched, no shell), stdin from
/dev/null, stdout and stderr read whole, a timeout that kills the child. Same signature and
results as subprocess.run for those arguments, so a test's fake takes its place unchanged.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Sequence

_CHUNK = 65536


def run(argv: Sequence[str], *, timeout: float, **_: object) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=DEVNULL).
    FileNotFoundError when argv[0] is not found; subprocess.TimeoutExpired (the child killed
    and reaped) when it runs past `timeout` seconds."""
    argv = list(argv)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid = os.posix_spawnp(argv[0], argv, _environment(), file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)])
    except BaseException:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    os.close(out_w)
    os.close(err_w)
    try:
        chunks = _read_all({out_r: [], err_r: []}, time.monotonic() + timeout)
    except subprocess.TimeoutExpired:
        _kill(pid)
        raise subprocess.TimeoutExpired(argv, timeout) from None
    finally:
        os.close(out_r)
        os.close(err_r)
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(status), _text(chunks[out_r]),
                                       _text(chunks[err_r]))


def _environment():
    """This process's environment as posix_spawn takes it. os.environ itself would be read key by
    key through its Python-level decoding on every call (a few microseconds per variable); its
    underlying bytes mapping is the same environment, read in C."""
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) else os.environ


def _read_all(chunks: dict[int, list[bytes]], deadline: float) -> dict[int, list[bytes]]:
    """Both pipes read until the child closes them (it exits), or TimeoutExpired at deadline."""
    poller = select.poll()
    for fd in chunks:
        poller.register(fd, select.POLLIN)
    open_fds = len(chunks)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired("vipu", 0)
        for fd, _ in poller.poll(left * 1000):
            data = os.read(fd, _CHUNK)
            if data:
                chunks[fd].append(data)
            else:
                poller.unregister(fd)
                open_fds -= 1
    return chunks


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def _text(parts: list[bytes]) -> str:
    return b"".join(parts).decode("utf-8", "replace")
