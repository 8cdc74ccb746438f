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


def parse_squeue_json(text: str) -> dict[int, str]:
    """{job_id: state} from `squeue --json` (22.05: job_state is a string; newer: a list)."""
    try:
        doc = json.loads(text)
        jobs = doc["jobs"]
    except (ValueError, KeyError, TypeError):
        raise SlurmError(f"`squeue --json` printed something unexpected: {text[:120]!r}") from None
    out = {}
    for job in jobs:
        state = job.get("job_state")
        if isinstance(state, list):
            state = state[0] if state else "UNKNOWN"
        out[int(job["job_id"])] = str(state)
    return out


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

    def cancel(self, job_id: int, text: str) -> None:
        """The reason first: slurmctld kills the prolog that cancels its own job."""
        self.admin_comment(job_id, text)
        self._run("scancel", str(job_id))
