"""Where controller-hook messages go: one line on stderr (slurmctld's log) and in
STATE_DIR/hooks.log, each prefixed `slurm-ipu:` and naming the job. Logging never fails a hook."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def report(state_dir: str, line: str, echo: bool = True) -> None:
    """echo=False: the caller prints the line itself (a command's one-line error)."""
    text = f"slurm-ipu: {line}"
    if echo:
        print(text, file=sys.stderr, flush=True)
    try:
        path = Path(state_dir)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / "hooks.log", "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")
    except OSError:
        pass
