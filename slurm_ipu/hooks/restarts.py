"""Restarts that were not the job's fault: STATE_DIR/hardware/<job id> holds how many of a job's
restarts a failed IPU-Machine caused (the health pass requeued it off the machine, or its prolog met
the machine down). The prolog counts a job's attempts as Slurm's restart count less these, so a
machine failing under a job never brings it nearer to being held for an admin.

One small file per job, written whole: a job's prolog and a health pass that requeues it never run
at the same time (the pass requeues only RUNNING jobs), so no lock is needed. `slurm-ipu reap`
removes the files of jobs Slurm no longer lists.
"""

from __future__ import annotations

import os

from ..fsutil import remove, write_into

DIRECTORY = "hardware"


def _dir(state_dir: str) -> str:
    return os.path.join(state_dir, DIRECTORY)


def count(state_dir: str, job_id: int) -> int:
    """How many of the job's restarts a failed machine caused (0 when none or unreadable)."""
    try:
        with open(os.path.join(_dir(state_dir), str(job_id))) as f:
            text = f.read(32).strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def add(state_dir: str, job_id: int) -> bool:
    """One more restart of the job caused by hardware. False when the state directory refused the
    record (a full disk): that restart then counts as any other, so a job never requeues forever."""
    try:
        write_into(_dir(state_dir), str(job_id), f"{count(state_dir, job_id) + 1}\n")
    except OSError:
        return False
    return True


def prune(state_dir: str, listed: set[int], before: float) -> int:
    """Remove the files of jobs Slurm no longer lists (finished and purged), written before
    `before` (a job's file written after the listing is of a job the listing may not show yet)."""
    gone = 0
    try:
        entries = list(os.scandir(_dir(state_dir)))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) in listed:
            continue
        try:
            if entry.stat().st_mtime >= before:
                continue
        except OSError:
            continue
        remove(entry.path)
        gone += 1
    return gone
