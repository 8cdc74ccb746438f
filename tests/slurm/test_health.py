"""A failed IPU-Machine keeps jobs off it by itself, on the partition model:
the acceptance's `-N4 --gres=ipu:16` job on the 4-node lab while ag0 is down waits in Slurm's
queue (no prolog, no restart) and runs once ag0 is back. (The allocation model's drains:
test_allocation_model.py.)"""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from ..waiting import wait_for
from .conftest import wait_gone, wait_no_partitions


def metrics(lab) -> dict[tuple, float]:
    """`slurm-ipu metrics` read by Prometheus's own parser: (name, sorted labels) -> value."""
    text = lab.run("slurm-ipu", "metrics", check=True).stdout
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def hooks_counted(lab, before: dict) -> None:
    """The job's prolog, epilog and removal are in the slurm-ipu service's histograms: written after
    the removal, so polled (the removal's V-IPU call precedes the write)."""
    def count(seen, name):
        return seen.get((f"slurm_ipu_{name}_duration_seconds_count", ()), 0)

    after = wait_for("the slurm-ipu service's counters", lambda: metrics(lab), 30,
                     until=lambda seen: count(seen, "removal") >= count(before, "removal") + 1)
    for name in ("prolog", "epilog"):
        assert count(after, name) >= count(before, name) + 1, (name, before, after)
    assert after[("slurm_ipu_prolog_duration_seconds_bucket", (("le", "+Inf"),))] == count(after, "prolog")


def health_pass(lab) -> list[str]:
    """What a health pass says, run now: this command's lines, and those of the slurm-ipu service's
    own pass (every health.interval) if it ran meanwhile and got there first. Both passes act on
    the same state, so whichever acts first says it, in the same words; the other says nothing."""
    log = lab.spec.path("state", "hooks.log")
    mark = log.stat().st_size if log.exists() else 0
    own = lab.run("slurm-ipu", "health", check=True).stdout.splitlines()
    with open(log, "rb") as f:
        f.seek(mark)
        new = f.read().decode(errors="replace").splitlines()
    service = [line.split(" slurm-ipu: ", 1)[1] for line in new if " slurm-ipu: health: " in line]
    return list(dict.fromkeys(own + service))


def test_a_failed_machine_shrinks_the_pool_until_it_is_back(clean_lab):
    lab = clean_lab
    emu = ["vipu-emu", "fault", "--state-dir", str(lab.spec.path("vipu-emu")), "agent", "ag0"]
    before = metrics(lab)
    lab.run(*emu, "down", check=True)
    try:
        said = health_pass(lab)
        assert said == ["health: reserve 4 IPU licence(s) as slurm-ipu-ag0: IPU-Machine ag0 is not Up"]
        shown = lab.run("scontrol", "show", "reservation", "slurm-ipu-ag0", check=True).stdout
        assert "Licenses=ipu:4" in shown.replace("*", ":"), shown
        job = lab.sbatch("-N4", "--gres=ipu:16", "-o", "/dev/null", script="#!/bin/bash\ntrue\n")
        wait_for(f"job {job} waiting for licences", lambda: lab.job(job).get("Reason"), 30,
                 until=lambda reason: reason == "Licenses")
        assert lab.state(job) == "PENDING" and lab.job(job).get("Restarts") == "0", lab.job(job)
        assert not lab.partitions()  # no prolog ran: nothing was asked of V-IPU
        # Slurm's Reason says `Licenses`; the next pass names the machine in the job's AdminComment
        told = ("waiting for IPUs: IPU-Machine ag0 not Up: 4 IPUs held out of Slurm's pool until back "
                "(scontrol show reservation slurm-ipu-ag0)")
        assert f"health: job {job}: {told}" in health_pass(lab)
        shown = lab.run("scontrol", "show", "job", str(job), check=True).stdout  # AdminComment has spaces
        assert f"AdminComment=slurm-ipu: {told}" in shown, shown
        seen, status = metrics(lab), json.loads(lab.run("slurm-ipu", "status", "--json", check=True).stdout)
        agents = lab.admin().agents()
        pod = (("pod", status["cluster"]),)
        assert seen[("slurm_ipu_machines", (("state", "down"),))] == 1 == sum(a["status"] == "Down" for a in agents)
        assert seen[("slurm_ipu_machines", (("state", "up"),))] == 15
        assert seen[("slurm_ipu_pod_ipus", pod)] == status["pod_ipus"] == 64
        assert seen[("slurm_ipu_ipus", (*pod, ("state", "allocated")))] == status["vipu"]["used"] == 0
        assert seen[("slurm_ipu_ipus", (*pod, ("state", "unavailable")))] == 4
        assert seen[("slurm_ipu_ipus", (*pod, ("state", "idle")))] == 60
        assert seen[("slurm_ipu_health_reserved_ipus", ())] == 4
        assert seen[("slurm_ipu_jobs", (("state", "pending"),))] == 1
        assert seen[("slurm_ipu_licence_ipus", (("state", "total"),))] == status["slurm"]["total"]
        assert all(v == 1 for (name, _), v in seen.items() if name == "slurm_ipu_source_up"), seen
        lab.run(*emu, "up", check=True)
        back = health_pass(lab)
        assert back[0] == "health: release slurm-ipu-ag0: IPU-Machine ag0 is Up again", back
        assert back[1:] in ([], [f"health: job {job}: waiting line cleared"]), back  # [] if it ended already
        done = wait_for(f"job {job} completed", lambda: lab.job(job), 120,
                        until=lambda info: info.get("JobState", "COMPLETED") == "COMPLETED")
        assert done.get("Restarts", "0") == "0", done  # {} once slurmctld forgot it: it never restarted
        wait_gone(lab, job, 120)
        hooks_counted(lab, before)
    finally:
        lab.run(*emu, "up")
        lab.run("scontrol", "delete", "ReservationName=slurm-ipu-ag0")
    wait_no_partitions(lab, 30, "its partition removed")


def test_a_batch_job_on_a_machine_that_fails_is_requeued_and_waits_until_it_is_back(clean_lab):
    """Its partition (all 64 IPUs, ag0 among them) loses a machine; the pass
    requeues it with the reason, its epilog removes the partition, and the reservation keeps it
    waiting until ag0 is back (that it then runs is the test above; a requeued job's own restart
    waits Slurm's cred_expire, 30 s in the lab, which this test does not spend)."""
    lab = clean_lab
    emu = ["vipu-emu", "fault", "--state-dir", str(lab.spec.path("vipu-emu")), "agent", "ag0"]
    job = lab.sbatch("-N4", "--gres=ipu:16", "-o", "/dev/null", script="#!/bin/bash\nsleep 300\n")
    wait_for(f"job {job} running", lambda: lab.state(job) == "RUNNING", 60)
    # the slurm-ipu service names its partition within a second; the reason the pass writes after it stays
    wait_for(f"job {job}'s partition note", lambda: lab.job(job).get("AdminComment"), 30,
             until=lambda note: note == f"slurm-ipu:partition=slurm_{job},ipus=64")
    lab.run(*emu, "down", check=True)
    try:
        said = health_pass(lab)
        assert f"health: job {job}: IPU-Machine ag0 failed under its V-IPU partition; requeued" in said, said
        wait_for(f"job {job} requeued", lambda: lab.job(job), 60,
                 until=lambda j: j.get("JobState") == "PENDING" and j.get("Restarts") == "1")
        shown = lab.run("scontrol", "show", "job", str(job), check=True).stdout  # AdminComment has spaces
        assert f"AdminComment=slurm-ipu: job {job}: IPU-Machine ag0 failed under its V-IPU partition; requeued" \
            in shown, shown
        wait_no_partitions(lab, 60, "its partition removed by its epilog")
        assert "Licenses=ipu:4" in lab.run("scontrol", "show", "reservation", "slurm-ipu-ag0",
                                           check=True).stdout.replace("*", ":")
        assert lab.state(job) == "PENDING"
        lab.run(*emu, "up", check=True)
        assert any(line.startswith("health: release slurm-ipu-ag0") for line in health_pass(lab))
    finally:
        lab.run(*emu, "up")
        lab.run("scontrol", "delete", "ReservationName=slurm-ipu-ag0")
        lab.run("scancel", str(job))
    wait_gone(lab, job)
    wait_no_partitions(lab, 60, "its partition removed")
