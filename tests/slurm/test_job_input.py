"""What a job brings to the controller hooks, sent through Slurm's API around sbatch and the
SPANK plugin (tests/slurm/rawsubmit.c), as a hostile user or a REST client can (issue 23,
items 4 and 5)."""

from __future__ import annotations

import pytest

from .conftest import wait_for

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
