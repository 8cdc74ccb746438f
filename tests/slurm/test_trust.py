"""No job adopts a partition slurm-ipu did not create for it, and nothing of ours removes one
(issue 14, item 2): a user who guesses the next job id and makes `slurm_<id>` first."""

from __future__ import annotations

import pytest

from .conftest import wait_for, wait_gone

pytestmark = pytest.mark.usefixtures("users")
VICTIM = "slurmipu-a"


def next_job_id(lab) -> int:
    probe = lab.sbatch("--hold", "-o", "/dev/null", "--wrap", "true")
    lab.run("scancel", str(probe), check=True)
    return probe + 1


def test_a_squatters_partition_is_neither_adopted_nor_removed(clean_lab):
    lab = clean_lab
    target = next_job_id(lab)
    squat = f"slurm_{target}"
    lab.run("vipu", "create", "partition", squat, "--size", "4", "--owner-uid", "4242", check=True)
    try:
        proc = lab.run_as(VICTIM, "sbatch", "--parsable", "--gres=ipu:4", "-o", "/dev/null", "--wrap", "sleep 60")
        assert proc.returncode == 0, proc.stderr
        job = int(proc.stdout.strip())
        assert job == target
        info = wait_for("the victim held for an admin", lambda: (lambda j: j if j.get("Reason") == "JobHeldAdmin"
                        and j.get("JobState") == "PENDING" else None)(lab.job(job)), 60)
        shown = lab.run("scontrol", "show", "job", str(job)).stdout
        assert "slurm-ipu did not create it for this job" in shown and "an admin must remove it" in shown, shown
        assert info.get("JobState") == "PENDING"
        lab.run("scancel", str(job), check=True)
        wait_gone(lab, job)
        reap = lab.run("slurm-ipu", "reap", "--config", lab.config)
        assert f"left alone {squat}" in reap.stdout, reap.stdout + reap.stderr
        part = lab.partitions()[squat]  # still there, still the squatter's
        assert part["spec"]["owner_uid"] == 4242
    finally:
        lab.run("vipu", "remove", "partition", squat)
