"""Where controller-hook messages go: one line on stderr (slurmctld's log) and in
STATE_DIR/hooks.log, each prefixed `slurm-ipu:` and naming the job. Logging never fails a hook.

Bounded: a line is cut at LINE_MAX characters, and hooks.log past LOG_MAX bytes becomes
hooks.log.1 (the one before is dropped), so the log never fills the state directory: at most
2 x LOG_MAX on disk. A site that keeps more sets up logrotate on hooks.log.1 (docs/admin.md)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

LINE_MAX = 2000
LOG_MAX = 16 << 20


def report(state_dir: str, line: str, echo: bool = True) -> None:
    """echo=False: the caller prints the line itself (a command's one-line error)."""
    if len(line) > LINE_MAX:
        line = f"{line[:LINE_MAX]}...(cut: {len(line)} characters)"
    text = f"slurm-ipu: {line}"
    if echo:
        print(text, file=sys.stderr, flush=True)
    stamped = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n"
    try:
        try:  # the state directory exists but on a first run: no mkdir per line
            _append(state_dir, stamped)
        except FileNotFoundError:
            Path(state_dir).mkdir(parents=True, exist_ok=True)
            _append(state_dir, stamped)
    except OSError:
        pass


def _append(state_dir: str, text: str) -> None:
    """One write with O_APPEND (lines from the service's threads and the Python hooks never
    interleave), by os calls: a file object costs three system calls more per line."""
    path = os.path.join(state_dir, "hooks.log")
    # O_NOFOLLOW: root (or SlurmUser) never appends through a link planted at the log's path;
    # 0o640: each job's uid and IPU-Machines are no other user's to read.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o640)
    try:
        # a line may carry what a user wrote (undecodable bytes come through os.environ as
        # surrogates): written escaped, never a UnicodeEncodeError that loses the line
        os.write(fd, text.encode("utf-8", "backslashreplace"))
        full = os.lseek(fd, 0, os.SEEK_CUR) > LOG_MAX  # with O_APPEND: the file's size
    finally:
        os.close(fd)
    if full:  # two writers may both rotate: the later rename moves a few fresh lines along, no more
        os.replace(path, path + ".1")
