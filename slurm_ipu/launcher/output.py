"""Running srun (or local instances) and reading their output: forwarded as it comes, tagged
on request, with each instance's last lines kept for one root-cause report.

os.posix_spawn and select.poll rather than subprocess and selectors: same behaviour, a
fraction of the import time, and ipurun's start-up is paid on every launch.
"""

from __future__ import annotations

import os
import select
import signal
import sys

KEEP = 10  # lines per instance kept for the report


class Output:
    """Demultiplexes srun's `--label`led lines ("3: text") and srun's own messages."""

    def __init__(self, tag: bool, keep: int = KEEP):
        self.tag, self.keep = tag, keep
        self.tails: dict[int, list[str]] = {}
        self.first_failure: tuple[int, str] | None = None

    def line(self, text: str, err: bool) -> None:
        stream = sys.stderr if err else sys.stdout
        label, sep, rest = text.partition(": ")
        if sep and label.strip().isdigit():
            k = int(label)
            tail = self.tails.setdefault(k, [])
            tail.append(rest)
            del tail[:-self.keep]
            stream.write(f"[1,{k}]<{'stderr' if err else 'stdout'}>:{rest}\n" if self.tag else rest + "\n")
        else:
            self._srun_message(text)
            stream.write(text + "\n")
        stream.flush()

    def _srun_message(self, text: str) -> None:
        # srun: error: node2: task 3: Exited with exit code 1  /  task 3: Killed
        if self.first_failure is None and ": task " in text:
            num, _, what = text.split(": task ", 1)[1].partition(": ")
            if num.isdigit() and any(w in what for w in ("Exited", "Killed", "Terminated", "signal")):
                self.first_failure = (int(num), text.split("error: ", 1)[-1])


def spawn(argv: list[str], env: dict) -> tuple[int, int, int]:
    """(pid, stdout fd, stderr fd) of argv started with stdin from /dev/null."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2),
               (os.POSIX_SPAWN_CLOSE, out_r), (os.POSIX_SPAWN_CLOSE, err_r)]
    try:
        pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions)
    finally:
        os.close(out_w)
        os.close(err_w)
    return pid, out_r, err_r


def forward_signals(pids: list[int]) -> None:
    """SIGINT/SIGTERM to ipurun reach srun (which passes them to the step) or the instances."""
    def handler(sig, _frame):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def pump(streams: dict[int, tuple[object, bool]], emit, raw: bool = False) -> None:
    """Read every fd to its end, calling emit(key, line, is_stderr) per complete line (bytes if
    raw, else text)."""
    poller = select.poll()
    for fd in streams:
        poller.register(fd, select.POLLIN)
    buffers: dict[int, bytes] = {}
    open_fds = set(streams)
    while open_fds:
        for fd, _ in poller.poll():
            chunk = os.read(fd, 65536)
            key, err = streams[fd]
            if not chunk:
                poller.unregister(fd)
                open_fds.discard(fd)
                os.close(fd)
                rest = buffers.pop(fd, b"")
                if rest:
                    emit(key, rest if raw else rest.decode(errors="replace"), err)
                continue
            *lines, buffers[fd] = (buffers.get(fd, b"") + chunk).split(b"\n")
            for line in lines:
                emit(key, line if raw else line.decode(errors="replace"), err)


def wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])  # EINTR is retried for us (PEP 475)


# slurmstepd sends a task's output line by line, but at most this many bytes in one message
# (SLURM_IO_MAX_MSG_LEN, src/common/io_hdr.h): a longer line goes in pieces of exactly this size,
# and srun's --label ends each piece with a newline of its own (write_labelled_message).
SRUN_PIECE = 1024


class Rejoin:
    """srun's labelled lines with a long line's pieces joined again, per task and stream: a piece
    of exactly SRUN_PIECE bytes waits for the rest of its line (the next line of the same label).
    A line of exactly that length is joined with the next one only if the task sent no newline
    after it, which Slurm cannot tell apart either."""

    def __init__(self, emit):
        self.emit = emit
        self.held: dict[tuple[bytes, bool], bytes] = {}

    def line(self, raw: bytes, err: bool) -> None:
        label, sep, rest = raw.partition(b": ")
        if not (sep and label.strip().isdigit()):
            self.emit(raw.decode(errors="replace"), err)
            return
        key = (label.strip(), err)
        whole = self.held.pop(key, b"") + rest
        if len(rest) == SRUN_PIECE:
            self.held[key] = whole
            return
        self.emit((label + sep + whole).decode(errors="replace"), err)

    def flush(self) -> None:
        for (label, err), rest in sorted(self.held.items()):
            self.emit((label + b": " + rest).decode(errors="replace"), err)
        self.held.clear()


def run_srun(argv: list[str], env: dict, out: Output) -> int:
    pid, fd_out, fd_err = spawn(argv, env)
    forward_signals([pid])
    joined = Rejoin(out.line)
    pump({fd_out: (None, False), fd_err: (None, True)}, lambda _k, raw, err: joined.line(raw, err), raw=True)
    joined.flush()
    return report(out, wait(pid))


def run_instances(argvs: list[list[str]], envs: list[dict], out: Output) -> int:
    """The local backend: one process per instance on this machine, output labelled as srun does."""
    streams, pids = {}, []
    for k, (argv, env) in enumerate(zip(argvs, envs, strict=True)):
        pid, fd_out, fd_err = spawn(argv, env)
        pids.append(pid)
        streams[fd_out], streams[fd_err] = (k, False), (k, True)
    forward_signals(pids)
    pump(streams, lambda k, text, err: out.line(f"{k}: {text}", err))
    codes = [wait(pid) for pid in pids]
    failed = [(k, c) for k, c in enumerate(codes) if c != 0]
    if failed and out.first_failure is None:
        k, code = failed[0]
        out.first_failure = (k, f"exit code {code}" if code > 0 else f"killed by signal {-code}")
    return report(out, failed[0][1] if failed else 0)


def report(out: Output, rc: int) -> int:
    """The root-cause block for the first failing instance; its code becomes ipurun's."""
    if rc == 0:
        return 0
    if out.first_failure is None:
        return rc if rc > 0 else 128 - rc
    k, what = out.first_failure
    print(f"ipurun: instance {k} failed first: {what}", file=sys.stderr)
    tail = out.tails.get(k, [])
    if tail:
        print(f"ipurun: last {len(tail)} line(s) of instance {k}:", file=sys.stderr)
        for line in tail:
            print(f"    {line}", file=sys.stderr)
    code = code_of(what)
    return code if code is not None else (rc if rc > 0 else 128 - rc)


def code_of(what: str) -> int | None:
    if "exit code" in what:
        tail = what.rsplit("exit code", 1)[1].strip().split()
        return int(tail[0]) if tail and tail[0].isdigit() else None
    if "signal" in what:
        tail = what.rsplit("signal", 1)[1].strip().split()
        return 128 + int(tail[0]) if tail and tail[0].isdigit() else None
    for name, sig in (("Killed", signal.SIGKILL), ("Terminated", signal.SIGTERM)):
        if name in what:
            return 128 + sig
    return None
