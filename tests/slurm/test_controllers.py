"""Two V-IPU controllers under one Slurm, a tenant each (`slurm-ipu lab up --controllers 2`: two
emulators, each a vPOD of four IPU-Machines and two hosts of 8 IPUs; a Slurm partition of each
controller's hosts, open to its tenant's group alone, as docs/admin.md tells an admin to write).

What the tenants and their admin see: both tenants' jobs run at once, each task told its own
controller; a tenant cannot submit to the other's hosts, nor reach the other's partitions with its
job's variables; a request no controller can hold is refused at submit; one controller stopped
stops only its tenant's jobs (requeued with a reason naming it), drains nothing, doctor names it,
and once it is back nothing of either tenant is left; a requeued job's adopted partition is reset."""

from __future__ import annotations

import os
import signal

import pytest

from slurm_ipu import lab as labmod
from slurm_ipu.emulator.api import Api

from ..waiting import wait_for
from .conftest import ensure_users, started_lab, wait_gone, wait_idle, wait_queue_empty

TENANT = {"ctla": "slurmipu-a", "ctlb": "slurmipu-b"}
PROBE = "#!/bin/bash\nsrun bash -c 'echo TASK $SLURMD_NODENAME $IPUOF_VIPU_API_HOST:$IPUOF_VIPU_API_PORT " \
        "$IPUOF_VIPU_API_PARTITION_ID'\nsleep {sleep}\n"


@pytest.fixture(scope="module")
def tenants_lab():
    ensure_users()
    with started_lab(nodes=4, ipus_per_node=8, controllers=2) as lab:
        # the tenancy an admin writes (docs/admin.md): each controller's partition for its tenant's
        # group, the partition over all hosts for admins alone
        lab.run("scontrol", "update", "PartitionName=ipu", "AllowGroups=root", check=True)
        for part, group in TENANT.items():
            lab.run("scontrol", "update", f"PartitionName={part}", f"AllowGroups={group}", check=True)
        yield lab


@pytest.fixture
def lab2(tenants_lab):
    lab = tenants_lab
    labmod.up(lab.spec)  # a test may have stopped an emulator
    wait_queue_empty(lab, 90, "no jobs left")
    wait_idle(lab, 60, "all nodes idle")
    for name in TENANT:
        wait_for(f"no partition left on {name}", lambda name=name: partitions(lab, name), 60, until=lambda p: not p)
    return lab


def emulator(lab, name: str) -> Api:
    k = lab.spec.controller_names.index(name)
    return Api(admin_socket=str(lab.spec.path(lab.spec.emulator_key(k), "admin.sock")), timeout=10)


def partitions(lab, name: str) -> set[str]:
    api = emulator(lab, name)
    try:
        return {p["partition"]["id"] for p in api.list_partitions()}
    finally:
        api.close()


def port(lab, name: str) -> int:
    return lab.spec.controller_ports[lab.spec.controller_names.index(name)]


def submit(lab, part: str, *args: str, sleep: int = 0) -> int:
    out = str(lab.spec.path("users", f"{part}-%j.out"))
    proc = lab.run_as(TENANT[part], "sbatch", "--parsable", "-p", part, "-o", out, *args,
                      stdin=PROBE.format(sleep=sleep))
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().split(";")[0])


def tasks(lab, part: str, job: int) -> list[list[str]]:
    text = lab.spec.path("users", f"{part}-{job}.out").read_text()
    return [line.split()[1:] for line in text.splitlines() if line.startswith("TASK ")]


def test_both_tenants_run_at_once_each_task_on_its_own_controller(lab2):
    lab = lab2
    jobs = {part: submit(lab, part, "-N2", "--gres=ipu:8", sleep=5) for part in TENANT}
    for job in jobs.values():
        wait_for(f"job {job} running", lambda job=job: lab.job(job), 60, until=lambda j: j.get("JobState") == "RUNNING")
    for part, job in jobs.items():  # at once: each partition on its own controller alone
        assert partitions(lab, part) == {f"slurm_{job}"}
    for part, job in jobs.items():
        wait_gone(lab, job, 90)
        seen = tasks(lab, part, job)
        assert sorted(t[0] for t in seen) == (["node1", "node2"] if part == "ctla" else ["node3", "node4"]), seen
        assert {tuple(t[1:]) for t in seen} == {(f"127.0.0.1:{port(lab, part)}", f"slurm_{job}")}, seen


def test_a_tenant_reaches_neither_the_other_s_hosts_nor_its_controller(lab2):
    lab = lab2
    theirs = lab.run_as(TENANT["ctla"], "sbatch", "-p", "ctlb", "--gres=ipu:8", "--wrap", "true")
    assert theirs.returncode != 0 and "not permitted to use this partition" in theirs.stderr, theirs.stderr
    job = submit(lab, "ctlb", "-N1", "--gres=ipu:8", sleep=60)
    wait_for(f"job {job} running", lambda: lab.job(job), 60, until=lambda j: j.get("JobState") == "RUNNING")
    # tenant A's job, with its own variables, asks its controller for B's partition: not there
    mine = submit(lab, "ctla", "-N1", "--gres=ipu:8", sleep=0)
    wait_gone(lab, mine, 90)
    probe = lab.run_as(TENANT["ctla"], "srun", "-p", "ctla", "--gres=ipu:1", "bash", "-c",
                       f'vipu --api-host "$IPUOF_VIPU_API_HOST" --api-port "$IPUOF_VIPU_API_PORT" remove partition '
                       f"slurm_{job}", timeout=60)
    assert probe.returncode != 0 and f"slurm_{job}" in partitions(lab, "ctlb"), probe.stdout + probe.stderr
    # a request no single controller can hold, refused at submit in one line
    big = lab.run("sbatch", "-p", "ipu", "-N4", "--gres=ipu:8", "--wrap", "true")
    assert big.returncode != 0 and "32 IPUs, more than one V-IPU controller's 16" in big.stderr, big.stderr
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job, 90)


def test_one_controller_stopped_stops_only_its_tenant_and_nothing_is_left_once_it_is_back(lab2):
    lab = lab2
    pids = labmod.load_pids(lab.spec)
    os.kill(pids["vipu-emu-ctlb"]["pid"], signal.SIGTERM)
    wait_for("ctlb's emulator stopped", lambda: not labmod._running(pids["vipu-emu-ctlb"]), 20)
    b = submit(lab, "ctlb", "-N1", "--gres=ipu:8", sleep=0)
    shown = wait_for(f"job {b} requeued naming its controller",
                     lambda: lab.run("scontrol", "show", "job", str(b)).stdout, 60,
                     until=lambda text: "AdminComment=slurm-ipu: job" in text)
    assert "V-IPU controller ctlb: unable to connect" in shown and "requeued (attempt 1 of 3)" in shown, shown
    a = submit(lab, "ctla", "-N2", "--gres=ipu:8", sleep=0)  # the other tenant's jobs start and end
    wait_gone(lab, a, 90)
    assert [t[1] for t in tasks(lab, "ctla", a)] == [f"127.0.0.1:{port(lab, 'ctla')}"] * 2
    states = lab.node_states()
    assert not [n for n, s in states.items() if s.startswith(("drain", "down"))], states
    doctor = lab.run("slurm-ipu", "doctor", timeout=180)
    line = next(ln for ln in doctor.stdout.splitlines() if ln.split()[1:2] == ["vipu"])
    assert doctor.returncode == 1 and line.startswith("PROBLEM") and "V-IPU controller ctlb (127.0.0.1:" in line, line
    labmod.up(lab.spec)  # starts ctlb's emulator again, and nothing else
    lab.run("scontrol", "update", f"JobId={b}", "StartTime=now")  # what an admin does rather than wait
    wait_gone(lab, b, 120)  # its next attempt runs now that ctlb is back
    assert lab.job(b).get("JobState", "COMPLETED") == "COMPLETED"
    for name in TENANT:
        wait_for(f"nothing left on {name}", lambda name=name: partitions(lab, name), 60, until=lambda p: not p)


def test_a_requeued_job_s_adopted_partition_is_reset_on_its_controller(lab2):
    """A job requeued while its partition could not be removed (V-IPU refusing the removal): its
    next attempt adopts the partition its first made, and resets it first (`vipu reset partition`,
    counted by that controller's emulator), so the job restarts on clean IPUs."""
    lab = lab2
    job = submit(lab, "ctla", "-N1", "--gres=ipu:8", sleep=300)
    wait_for(f"job {job} running", lambda: lab.job(job), 60, until=lambda j: j.get("JobState") == "RUNNING")
    api = emulator(lab, "ctla")
    try:
        before = api.stats().get("reset", 0)
        api.faults(fail={"count": 1000, "code": "UNAVAILABLE", "op": "remove"})  # the removal keeps failing
        lab.run("scontrol", "requeue", str(job), check=True)
        wait_for(f"job {job} requeued", lambda: lab.job(job), 60,
                 until=lambda j: j.get("Restarts") == "1" and j.get("JobState") == "PENDING")
        assert f"slurm_{job}" in partitions(lab, "ctla")  # still there: its removal failed
        lab.run("scontrol", "update", f"JobId={job}", "StartTime=now", check=True)  # not Slurm's requeue delay
        wait_for(f"job {job} running again", lambda: lab.job(job), 90, until=lambda j: j.get("JobState") == "RUNNING")
        assert api.stats().get("reset", 0) == before + 1  # adopted, and reset first
        assert partitions(lab, "ctla") == {f"slurm_{job}"} and partitions(lab, "ctlb") == set()
    finally:
        api.clear_faults()
        api.close()
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job, 90)
    wait_for("nothing left on ctla", lambda: partitions(lab, "ctla"), 60, until=lambda p: not p)
