"""Which V-IPU partition is mine? A started IPU job's AdminComment names it, so `scontrol show job`
(and `sacct -o AdminComment`) answers every user: `AdminComment=slurm-ipu:partition=slurm_55,ipus=8`,
or `slurm-ipu:allocation=c55,ipus=32` in the allocation model (a step's own partition is in its
tasks' IPUOF_VIPU_API_PARTITION_ID).

Why batched: a `scontrol update` per job would add a process start and its config read to every
job start, the costs the slurm-ipu service exists to save (docs/performance.md keeps the hooks' CPU
under half of slurmctld's). The slurm-ipu service queues each note and writes all of them at its next
pass (at most a second later) with one `scontrol` reading its commands from stdin. scontrol's
tokens keep quotes verbatim, so a note holds no blank. Before writing, one `squeue` of just
those jobs: a note goes only to a job still running (or CONFIGURING: its prolog has just ended)
whose AdminComment is empty or one of ours (an earlier attempt's reason, stale now that it
runs). So a site's or admin's own AdminComment stays, and a reason written meanwhile by another
process (an admin's `slurm-ipu health` requeuing the job) is not overwritten, but for the moment
between that squeue and the write. The service's own passes run in the thread that flushes, and
drop a job's queued note when they write its reason.
The Python prolog (no service) writes its one note at once.
"""

from __future__ import annotations

import threading

OURS = "slurm-ipu:"  # every AdminComment slurm-ipu writes starts so: notes, reasons, waiting lines
PREFIXES = tuple(f"{OURS}{kind}=" for kind in ("partition", "allocation"))

# The SlurmBackend calls that write a job's AdminComment themselves: a queued note of that job is
# dropped first, so a later word (a failed attempt's reason) is never overwritten by an older one.
JOB_WRITES = frozenset({"admin_comment", "hold", "requeue", "cancel"})


def text(kind: str, name: str, ipus: int) -> str:
    """The note: `kind` is partition or allocation; `name` is a V-IPU name (no blank)."""
    return f"{OURS}{kind}={name},ipus={ipus}"


def is_note(comment: str | None) -> bool:
    return comment is not None and comment.startswith(PREFIXES)


class BatchedNotes:
    """The SlurmBackend the slurm-ipu service hands its prologs: every call goes to Slurm at once but
    `note`, which waits for `flush` (the removal thread's next pass)."""

    def __init__(self, slurm):
        self._slurm = slurm
        self._lock = threading.Lock()
        self._queued: dict[int, str] = {}

    def note(self, job_id: int, text: str) -> None:
        with self._lock:
            self._queued[job_id] = text

    def flush(self) -> dict[int, str]:
        """Writes what is queued and still due (one squeue of those jobs, one scontrol); returns
        what it wrote. A job that ended between the two fails alone (scontrol goes on with the next
        line) and SlurmError says so."""
        with self._lock:
            queued, self._queued = self._queued, {}
        if not queued:
            return {}
        now = self._slurm.jobs(sorted(queued))
        due = {job: text for job, text in queued.items() if _due(now.get(job))}
        if due:
            self._slurm.admin_comments(due)
        return due

    def __getattr__(self, name: str):
        attr = getattr(self._slurm, name)
        if name not in JOB_WRITES:
            return attr

        def write(job_id: int, *args):
            with self._lock:
                self._queued.pop(job_id, None)
            return attr(job_id, *args)
        return write


# squeue --Format=State shows a job CONFIGURING until slurmctld hears its PrologSlurmctld exit: a
# flush right after the prolog answered (the hook client still exiting) reads that, not RUNNING.
STARTED = ("RUNNING", "CONFIGURING")


def _due(job) -> bool:
    """A started job's note still applies: it runs (or its prolog just ended), and its AdminComment
    is empty or ours."""
    return job is not None and job.state in STARTED and (not job.admin_comment or job.admin_comment.startswith(OURS))
