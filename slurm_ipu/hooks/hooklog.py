"""Where controller-hook messages go: one line on stderr (slurmctld's log) and in
STATE_DIR/hooks.log, each prefixed `slurm-ipu:` and naming the job. Logging never fails a hook."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def report(state_dir: str, line: str, echo: bool = True) -> None:
    """echo=False: the caller prints the line itself (a command's one-line error)."""
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
    fd = os.open(os.path.join(state_dir, "hooks.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
