"""`make demo`: the lab up, an IPU job end to end, and the partition gone after it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import lab
from ..errors import LabError, SlurmIpuError
from ..fsutil import poll
from .spec import EXAMPLES

EXAMPLE = EXAMPLES / "hello-ipu.sbatch"


def _show(shown: str, run) -> str:
    """Print a command as a user types it, then what it printed; run() runs it (through the
    product's Slurm and V-IPU interfaces)."""
    print(f"+ {shown}", flush=True)
    try:
        text = run()
    except SlurmIpuError as exc:
        raise LabError(f"demo: `{shown}` failed: {exc}") from None
    if text.rstrip():
        print(text.rstrip(), flush=True)
    return text


def _wait_done(spec, job: int, timeout: float = 120.0) -> str:
    def ended() -> str | None:
        text = lab._slurm(spec, "scontrol", "show", "job", "-o", str(job)) or ""
        state = next((w.split("=", 1)[1] for w in text.split() if w.startswith("JobState=")), "GONE")
        return None if state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING") else state

    state = poll(ended, timeout)
    if not state:
        raise LabError(f"demo: job {job} did not finish within {timeout:g}s; see `scontrol show job {job}`")
    return state


def _wait_removed(vipu, name: str, timeout: float = 15.0) -> None:
    """The slurm-ipu service takes the partition within a poll interval of the job's end; the
    listing below shows the result (and fails the demo if it is still there)."""
    def gone() -> bool:
        try:
            return name not in {p.name for p in vipu.list_partitions()}
        except SlurmIpuError:
            return False

    poll(gone, timeout)


def main() -> int:
    spec = lab.LabSpec()
    lab.up(spec)
    from ..vipu import VipuClient

    env = spec.env()  # the job's tasks find python3 beside the lab's commands, as a user's would
    env["PATH"] = f"{spec.path('bin')}:{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    slurm = lab.slurm_cli(spec, timeout=60.0, environ=env)
    vipu = VipuClient(command=[str(spec.path("bin", "vipu"))], timeout=30.0)
    out = spec.path("demo", "hello-ipu-%j.out")
    out.parent.mkdir(exist_ok=True)
    print(f"\n# {EXAMPLE.name}: 2 nodes x --gres=ipu:4, two srun steps", flush=True)
    job = int(_show(f"sbatch examples/{EXAMPLE.name}",
                    lambda: slurm.output("sbatch", "--parsable", "-o", str(out), str(EXAMPLE))).strip().split(";")[0])
    state = _wait_done(spec, job)
    print(f"\n# job {job} {state}; its output:", flush=True)
    print(Path(str(out).replace("%j", str(job))).read_text().rstrip(), flush=True)
    print(f"\n# after the job: the partition slurm_{job} is gone", flush=True)
    _wait_removed(vipu, f"slurm_{job}")
    listing = _show("vipu list partitions", lambda: vipu.run(["list", "partitions"]))
    if f"slurm_{job}" in listing or state != "COMPLETED":
        raise LabError(f"demo: job {job} ended {state} and left: {listing.strip()}")
    print("\nThe lab is still up. To use it:  eval \"$(slurm-ipu lab up)\"   To stop it:  slurm-ipu lab down")
    return 0
