"""What a job brings to the controller hooks, sent through Slurm's API around sbatch and the
SPANK plugin (spank/tests/rawsubmit.c), as a hostile user or a REST client can."""

from __future__ import annotations

import pytest

from .conftest import wait_logged

pytestmark = pytest.mark.usefixtures("users")
USER = "slurmipu-a"
SCRIPT = "#!/bin/sh\nsleep 30\n"


def raw(lab, rawsubmit, *args: str):
    return lab.run_as(USER, rawsubmit, *args, "--", SCRIPT)


@pytest.mark.parametrize("value,shown", [
    ("2 x", "'2 x'"),
    # 60 KB passed (digits only were read), and the prolog logged it whole per job
    ("x" * 60000, "'" + "x" * 39 + "...(60002 characters)"),
])
def test_a_malformed_spank_value_is_refused_at_submit_in_the_prolog_s_words(clean_lab, rawsubmit, value, shown):
    """`IPU_GCDS=<not a count>` from a libslurm client (no SPANK plugin on its side) is refused by
    job_submit.lua with the rule and the words the prolog applies: no job, nothing logged whole."""
    lab = clean_lab
    proc = raw(lab, rawsubmit, "--gres", "gres:ipu:4", "--spank", f"IPU_GCDS={value}")
    assert proc.returncode != 0, proc.stdout
    assert f"slurm-ipu: --ipu-gcds={shown} is not a positive number; use e.g. --ipu-gcds=2" in proc.stderr, \
        proc.stderr[:400]
    assert lab.run("squeue", "-h", "-o", "%A").stdout.split() == [] and lab.partitions() == {}


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
