"""A backup controller in the real lab (`slurm-ipu lab up --backup`): slurmctld ctl1 on 127.0.0.1
and ctl2 on 127.0.0.2, each in namespaces of its own, sharing StateSaveLocation, one slurm-ipu
service (docs/admin.md, Backup controllers). ctl1 is killed under running IPU jobs.

What a user and an admin must see: the jobs ctl2 recovers run on with their partitions and end
cleanly, a new IPU job runs with its partition (the hooks on ctl2), and the partition of a job ctl1
made but ctl2 never knew (lost in the failover) goes at the takeover, not reap.interval later."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from ..waiting import wait_for
from .conftest import started_lab, wait_gone, wait_no_partitions

JOB = "#!/bin/bash\necho \"PARTITION $IPUOF_VIPU_API_PARTITION_ID\"\nsleep 20\necho done\n"


@pytest.fixture(scope="module")
def ha_lab():
    with started_lab(backup=True, reap_interval=600.0) as lab:  # no full reap during the test but the takeover's
        yield lab


def _controllers(lab) -> str:
    return lab.run("scontrol", "ping").stdout


def _saved_after(lab, since: float) -> bool:
    """ctl1 has written the job state (StateSaveLocation) since `since`: what ctl2 recovers."""
    try:
        return os.stat(lab.spec.path("spool", "ctld", "job_state")).st_mtime > since
    except OSError:
        return False


def test_a_takeover_keeps_running_ipu_jobs_and_reaps_what_the_primary_lost(ha_lab):
    lab = ha_lab
    assert "Slurmctld(primary) at ctl1 is UP" in _controllers(lab) and "at ctl2 is UP" in _controllers(lab)
    out = str(lab.spec.path("users", "ha-%j.out"))
    jobs = [lab.sbatch("-N1", "--gres=ipu:16", "-o", out, script=JOB) for _ in range(2)]
    for job in jobs:
        wait_for(f"job {job} running", lambda job=job: lab.state(job), 60, until=lambda s: s == "RUNNING")
    started = time.time()
    wait_for("ctl1 saving the running jobs", lambda: _saved_after(lab, started), 30)
    # A job ctl1 ran the prolog of and then lost (its record never saved): its partition, and the
    # hooks' record of making it, exist; Slurm does not know the job.
    lost = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "99999", "SLURM_JOB_UID": "0",
            "SLURM_JOB_NODELIST": "node3", "SLURM_JOB_LICENSES": "ipu:16"}
    lab.run("slurm-ipu", "hook", env=dict(lab.env, **lost), check=True)
    assert "slurm_99999" in set(lab.partitions())
    ctl1 = json.loads(lab.spec.path("pids.json").read_text())["slurmctld"]["pid"]
    os.kill(ctl1, signal.SIGKILL)  # the lab's own slurmctld, by the pid it recorded
    wait_for("ctl2 in charge", lambda: _controllers(lab), 60,
             until=lambda said: "ctl1 is DOWN" in said and "Slurmctld(backup) at ctl2 is UP" in said)
    # SlurmctldPrimaryOnProg on ctl2 asked for a reap: the lost job's partition goes now
    wait_for("the lost job's partition reaped at the takeover", lambda: set(lab.partitions()), 60,
             until=lambda names: "slurm_99999" not in names)
    log = lab.spec.path("state", "hooks.log").read_text()
    assert "reap: removed slurm_99999 (job 99999 gone)" in log, log
    for job in jobs:  # recovered by ctl2: they run on, with their partitions, and end cleanly
        assert lab.job(job).get("Restarts") == "0", lab.job(job)
    for job in jobs:
        wait_gone(lab, job, timeout=90)
        assert lab.spec.path("users", f"ha-{job}.out").read_text() == f"PARTITION slurm_{job}\ndone\n"
    new = lab.sbatch("-N2", "--gres=ipu:8", "-o", out, script=JOB.replace("sleep 20", "true"))
    wait_gone(lab, new, timeout=90)  # its prolog and epilog on ctl2
    assert lab.spec.path("users", f"ha-{new}.out").read_text() == f"PARTITION slurm_{new}\ndone\n"
    wait_no_partitions(lab, 60, "every partition removed after the takeover")
