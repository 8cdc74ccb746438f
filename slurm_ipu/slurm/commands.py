"""Slurm through its own commands, behind one interface (SlurmBackend). No pyslurm backend: no
pyslurm release builds against a Slurm Debian ships (docs/slurm.md). Hooks run with a bare
environment, so SLURM_CONF and absolute paths are set here; every call has a timeout."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import SlurmError


class SlurmBackend(Protocol):
    def active_jobs(self) -> dict[int, str]: ...
    def admin_comment(self, job_id: int, text: str) -> None: ...
    def hold(self, job_id: int, text: str) -> None: ...
    def cancel(self, job_id: int, text: str) -> None: ...
    def notify(self, job_id: int, text: str) -> None: ...


# Up to data_parser v0.0.39 (23.02) job_state is one word, and a flag hides the base state
# (job_state_string() in src/common/slurm_protocol_defs.c): these flags are set only on a job
# whose base state is RUNNING. From v0.0.40 it is a list, base state first, then the flags.
_RUNNING_FLAGS = frozenset({"CONFIGURING", "SIGNALING", "RESIZING", "STOPPED"})


@dataclass(frozen=True)
class SqueueJob:
    job_id: int
    state: str           # the base state: PENDING, RUNNING, SUSPENDED, COMPLETED, ...
    flags: tuple[str, ...]
    user: str | None
    nodes: str | None
    start: int | None    # epoch seconds, None when unset


def _number(value):
    """A number: plain up to v0.0.39, {"set": .., "infinite": .., "number": ..} from v0.0.40."""
    if isinstance(value, dict):
        return value.get("number") if value.get("set", True) and not value.get("infinite") else None
    return value


def _state(value) -> tuple[str, tuple[str, ...]]:
    if isinstance(value, list):
        words = [str(w) for w in value]
        return (words[0], tuple(words[1:])) if words else ("UNKNOWN", ())
    word = str(value or "UNKNOWN")
    return ("RUNNING", (word,)) if word in _RUNNING_FLAGS else (word, ())


def parse_squeue(text: str) -> dict[int, SqueueJob]:
    """`squeue --json` of every release from 22.05 (data_parser v0.0.39 to v0.0.45 and 22.05's
    own format; samples of each in tests/unit/fixtures/squeue)."""
    try:
        jobs = json.loads(text)["jobs"]
        out = {}
        for job in jobs:
            job_id = int(_number(job["job_id"]))
            state, flags = _state(job.get("job_state"))
            start = _number(job.get("start_time"))
            out[job_id] = SqueueJob(job_id, state, flags, job.get("user_name") or None, job.get("nodes") or None,
                                    int(start) if start else None)
        return out
    except (ValueError, KeyError, TypeError):
        raise SlurmError(f"`squeue --json` printed something unexpected: {text[:120]!r}") from None


def parse_squeue_json(text: str) -> dict[int, str]:
    """{job_id: base state}."""
    return {job_id: job.state for job_id, job in parse_squeue(text).items()}


@dataclass
class SlurmCli:
    conf: str
    bin_dir: str = "/usr/bin"
    timeout: float = 10.0

    def _run(self, tool: str, *args: str) -> str:
        argv = [str(Path(self.bin_dir) / tool), *args]
        env = {"SLURM_CONF": self.conf, "PATH": f"{self.bin_dir}:/usr/bin:/bin"}
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found; set slurm.bin_dir in the slurm-ipu config") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"`{tool} {' '.join(args[:2])}` timed out after {self.timeout:g}s") from None
        if proc.returncode != 0:
            raise SlurmError(f"`{tool} {' '.join(args[:3])}` failed: {(proc.stderr or proc.stdout).strip()[:200]}")
        return proc.stdout

    def active_jobs(self) -> dict[int, str]:
        return parse_squeue_json(self._run("squeue", "--json"))

    # AdminComment, not Comment: the user's own --comment stays theirs, and every user still
    # sees ours in `scontrol show job` (measured on 22.05).
    def admin_comment(self, job_id: int, text: str) -> None:
        self._run("scontrol", "update", f"JobId={job_id}", f"AdminComment={text[:250]}")

    def hold(self, job_id: int, text: str) -> None:
        self.admin_comment(job_id, text)
        self._run("scontrol", "hold", str(job_id))

    def notify(self, job_id: int, text: str) -> None:
        """A line on the stderr of the job's srun or salloc (SRUN_USER_MSG), which otherwise
        prints only "Nodes ... are still not ready" when PrologSlurmctld fails."""
        self._run("scontrol", "notify", str(job_id), text[:400])

    def cancel(self, job_id: int, text: str) -> None:
        """The reason first: slurmctld kills the prolog that cancels its own job."""
        self.admin_comment(job_id, text)
        self._run("scancel", str(job_id))
