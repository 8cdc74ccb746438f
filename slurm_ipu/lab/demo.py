"""`make demo`: the lab up, an IPU job end to end, and the partition gone after it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .. import lab
from ..errors import LabError
from ..fsutil import poll

EXAMPLE = lab.REPO / "examples" / "hello-ipu.sbatch"


def _show(argv: list[str], env: dict, shown: str | None = None) -> str:
    print(f"+ {shown or ' '.join(argv)}", flush=True)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    text = (proc.stdout + proc.stderr).rstrip()
    if text:
        print(text, flush=True)
    if proc.returncode != 0:
        raise LabError(f"demo: `{shown or ' '.join(argv)}` failed with exit {proc.returncode}")
    return proc.stdout


def _wait_done(job: int, env: dict, timeout: float = 120.0) -> str:
    def ended() -> str | None:
        proc = subprocess.run(["scontrol", "show", "job", "-o", str(job)], env=env, capture_output=True, text=True,
                              timeout=30)
        state = next((w.split("=", 1)[1] for w in proc.stdout.split() if w.startswith("JobState=")), "GONE")
        return None if state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING") else state

    state = poll(ended, timeout)
    if not state:
        raise LabError(f"demo: job {job} did not finish within {timeout:g}s; see `scontrol show job {job}`")
    return state


def _wait_removed(name: str, env: dict, timeout: float = 15.0) -> None:
    """The removal service takes the partition within a poll interval of the job's end; the
    listing below shows the result (and fails the demo if it is still there)."""
    def gone() -> bool:
        proc = subprocess.run(["vipu", "list", "partitions"], env=env, capture_output=True, text=True, timeout=30)
        return proc.returncode == 0 and name not in proc.stdout

    poll(gone, timeout)


def main() -> int:
    spec = lab.LabSpec()
    lab.up(spec)
    env = spec.env()
    env["PATH"] = f"{spec.path('bin')}:{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    out = spec.path("demo", "hello-ipu-%j.out")
    out.parent.mkdir(exist_ok=True)
    print(f"\n# {EXAMPLE.name}: 2 nodes x --gres=ipu:4, two srun steps", flush=True)
    job = int(_show(["sbatch", "--parsable", "-o", str(out), str(EXAMPLE)], env,
                    f"sbatch examples/{EXAMPLE.name}").strip().split(";")[0])
    state = _wait_done(job, env)
    print(f"\n# job {job} {state}; its output:", flush=True)
    print(Path(str(out).replace("%j", str(job))).read_text().rstrip(), flush=True)
    print(f"\n# after the job: the partition slurm_{job} is gone", flush=True)
    _wait_removed(f"slurm_{job}", env)
    listing = _show(["vipu", "list", "partitions"], env)
    if f"slurm_{job}" in listing or state != "COMPLETED":
        raise LabError(f"demo: job {job} ended {state} and left: {listing.strip()}")
    print("\nThe lab is still up. To use it:  eval \"$(slurm-ipu lab up)\"   To stop it:  slurm-ipu lab down")
    return 0
