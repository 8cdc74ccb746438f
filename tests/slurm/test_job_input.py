"""What a job brings to the controller hooks, sent through Slurm's API around sbatch and the
SPANK plugin (tests/slurm/rawsubmit.c), as a hostile user or a REST client can (issue 23,
items 4 and 5)."""

from __future__ import annotations

import pytest

from .conftest import wait_for, wait_logged

pytestmark = pytest.mark.usefixtures("users")
USER = "slurmipu-a"
SCRIPT = "#!/bin/sh\nsleep 30\n"


def raw(lab, rawsubmit, *args: str):
    return lab.run_as(USER, rawsubmit, *args, "--", SCRIPT)


def test_a_malformed_spank_value_holds_the_job_at_once_with_its_reason(clean_lab, rawsubmit):
    """`IPU_GCDS=2 x` passes job_submit.lua (not a count it checks) and reaches the prolog,
    which refuses it: the job is held on its first attempt with the reason, not requeued past
    prolog.max_attempts, and no partition is made."""
    lab = clean_lab
    proc = raw(lab, rawsubmit, "--gres", "gres:ipu:4", "--spank", "IPU_GCDS=2 x")
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout)
    def held():
        info = lab.job(job)
        return info if (info.get("Reason"), info.get("JobState")) == ("JobHeldAdmin", "PENDING") else None

    info = wait_for("the job held and pending", held, 60)
    assert int(info.get("Restarts", "0")) <= 1, info
    shown = lab.run("scontrol", "show", "job", str(job)).stdout
    assert "prolog refused its environment: --ipu-gcds='2 x' is not a positive number" in shown, shown
    assert "held: cancel it and submit again" in shown, shown
    assert lab.partitions() == {}
    lab.run("scancel", str(job), check=True)


@pytest.mark.parametrize("args,words", [
    # The entry that crashes Slurm 22.05's slurmctld on every restart (docs/slurm.md).
    (["--gres", "gres:ipu:4", "--spank-bytes", "BIG=1500000"], "the job's SPANK environment is 1500004 bytes"),
    (["--spank-bytes", "BIG=1500000"], "the job's SPANK environment is 1500004 bytes"),
    (["--comment", "x" * 20000], "job field comment is 20000 bytes"),
])
def test_oversized_job_input_is_refused_at_submit_and_slurmctld_stays_up(clean_lab, rawsubmit, args, words):
    lab = clean_lab
    proc = raw(lab, rawsubmit, *args)
    assert proc.returncode == 1 and words in proc.stderr, proc.stderr
    assert "slurm-ipu: " in proc.stderr and "over slurm-ipu's bound" in proc.stderr, proc.stderr
    assert lab.run("scontrol", "ping").returncode == 0
    assert lab.run("squeue", "-h", "-o", "%A").stdout.split() == []


def test_an_oversized_comment_is_refused_by_sbatch_and_by_modify(clean_lab):
    lab = clean_lab
    proc = lab.run_as(USER, "sbatch", "--comment", "c" * 20000, "-o", "/dev/null", "--wrap", "true")
    assert proc.returncode != 0 and "job field comment is 20000 bytes, over slurm-ipu's bound" in proc.stderr
    job = lab.run_as(USER, "sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true")
    job_id = int(job.stdout.strip())
    proc = lab.run_as(USER, "scontrol", "update", f"JobId={job_id}", "Comment=" + "c" * 20000)
    assert proc.returncode != 0
    wait_logged(lab.spec.path("log", "slurmctld.log"), "refused job modify: job field comment is 20000 bytes")
    lab.run("scancel", str(job_id), check=True)
