"""A storm with everything going wrong at once: 200 jobs of mixed sizes, with
cancels while pending, while the prolog waits on a slow create and while running, jobs that fail,
jobs that hit their time limit, V-IPU refusing creates, and a V-IPU outage in the middle.
Afterwards, and after one `slurm-ipu reap`: no partition, no drained node, no journal entry and
no job left in the queue."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import subprocess

import pytest

from slurm_ipu import lab as labmod
from slurm_ipu.lab import daemons

from .conftest import started_lab, wait_for, wait_idle, wait_no_partitions

SHAPES = [(1, 1), (1, 2), (1, 4), (2, 4), (2, 8), (1, 16), (4, 4), (2, 1), (1, 0), (2, 0)]  # (nodes, ipus/node)


def queue(lab, *states: str) -> list[int]:
    argv = ["squeue", "-h", "-o", "%A"] + (["-t", ",".join(states)] if states else [])
    return [int(j) for j in lab.run(*argv, check=True).stdout.split()]


def submit(lab, rng: random.Random, *extra: str, script: str | None = None) -> int:
    nodes, per = rng.choice(SHAPES)
    gres = [f"--gres=ipu:{per}"] if per else []
    body = script or f"sleep {rng.uniform(0, 2):.1f}"
    return lab.sbatch("-N", str(nodes), *gres, "-o", "/dev/null", *extra, "--wrap", body)


def cancel_some(lab, rng: random.Random, states: tuple[str, ...], count: int, timeout: float,
                spare: tuple[int, ...] = ()) -> int:
    """Cancel up to `count` jobs seen in `states` (never those in `spare`), looking until `timeout`
    runs out; how many were cancelled."""
    done: set[int] = set()

    def enough() -> bool:
        seen = [j for j in queue(lab, *states) if j not in done and j not in spare]
        for job in rng.sample(seen, min(len(seen), count - len(done))):
            lab.run("scancel", str(job))
            done.add(job)
        return len(done) >= count

    with contextlib.suppress(AssertionError):  # fewer than `count` is an answer, not a failure
        wait_for(f"{count} jobs in {','.join(states)} to cancel", enough, timeout)
    return len(done)


def test_two_hundred_jobs_through_cancels_failures_timeouts_and_an_outage_leave_nothing(clean_lab):
    lab = clean_lab
    admin = lab.admin()
    rng = random.Random(11)
    jobs = []
    # jobs that run into their one-minute limit (slurmctld ends them within its check interval)
    jobs += [submit(lab, rng, "--time=1", script="sleep 600") for _ in range(3)]
    # jobs whose script fails
    jobs += [submit(lab, rng, script="exit 3") for _ in range(8)]
    # held, then cancelled while pending
    held = [submit(lab, rng, "--hold") for _ in range(10)]
    for job in held:
        lab.run("scancel", str(job), check=True)
    jobs += held
    # creates that take 2 s: cancel jobs while their prolog waits on the PENDING partition
    admin.faults(create_delay=2)
    jobs += [submit(lab, rng) for _ in range(50)]
    cancelled_in_prolog = cancel_some(lab, rng, ("CF",), 6, 30, spare=tuple(jobs[:3]))
    admin.faults(create_delay=0)
    # V-IPU refuses: a shape it calls invalid (the job is cancelled) and a short unavailability
    # (the job is requeued and runs on its next attempt)
    admin.faults(fail={"count": 1, "code": "INVALID_ARGUMENT", "op": "create"})
    jobs += [submit(lab, rng) for _ in range(40)]
    admin.faults(fail={"count": 2, "code": "UNAVAILABLE", "op": "create"})
    jobs += [submit(lab, rng) for _ in range(40)]
    # V-IPU down for 5 s in the middle of it all; running jobs cancelled meanwhile
    admin.down(seconds=5)
    jobs += [submit(lab, rng) for _ in range(49)]
    cancelled_running = cancel_some(lab, rng, ("R",), 10, 30, spare=tuple(jobs[:3]))
    assert len(jobs) == 200
    assert cancelled_in_prolog >= 1 and cancelled_running >= 1, (cancelled_in_prolog, cancelled_running)

    wait_for("every job out of the queue (a requeued one waits 30 s to start again)", lambda: not queue(lab), 420,
             interval=1.0)
    admin.up()
    admin.clear_faults()
    lab.run("slurm-ipu", "reap", "--site", lab.site, check=True)
    wait_no_partitions(lab, 30, "no partition left")
    journal = lab.spec.path("state", "pending-removal")
    wait_for("nothing queued for removal", lambda: sorted(p.name for p in journal.glob("*.json")), 30,
             until=lambda queued: queued == [])
    states = lab.node_states()
    assert not [n for n, s in states.items() if s.startswith(("drain", "down", "fail"))], states
    wait_idle(lab, 60, "every node idle")
    def ends() -> list[str]:
        return lab.run("sacct", "-X", "-n", "-P", "-o", "State", "-j", ",".join(map(str, jobs[:3])),
                       check=True).stdout.split()

    # slurmdbd hears of a job's end after slurmctld does, and of a job at all only once it starts:
    # wait for a row of each of the three and none unfinished, then check how they ended
    final = wait_for("accounting has the time-limited jobs' ends", ends, 60,
                     until=lambda states: len(states) == 3 and not {"RUNNING", "PENDING"} & set(states))
    assert final == ["TIMEOUT"] * 3


@pytest.fixture
def small_state_lab():
    """A lab whose state directory is a tmpfs of its own (8 MiB), so a test can fill it to the last
    block: mounted before the lab starts, unmounted after it is down."""
    mounted = []

    def mount(spec):
        where = spec.path("state")
        where.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "slurm-ipu-storm", str(where)],
                       check=True, timeout=30)
        mounted.append(where)

    try:
        with started_lab(prepare=mount) as lab:
            yield lab
    finally:  # started_lab removed what it could: the mount point stays until unmounted
        for where in mounted:
            subprocess.run(["umount", str(where)], timeout=30)
            shutil.rmtree(where.parents[1], ignore_errors=True)


def restarts(lab, jobs: list[int]) -> dict[int, int]:
    """Each job's Restarts while slurmctld still shows it (MinJobAge: 120 s in the lab)."""
    out = {}
    for line in lab.run("scontrol", "show", "job", "-o", check=True).stdout.splitlines():
        job, count = re.search(r"JobId=(\d+)", line), re.search(r" Restarts=(\d+)", line)
        if job and count and int(job.group(1)) in jobs:
            out[int(job.group(1))] = int(count.group(1))
    return out


FULL = "the hooks cannot write their state directory"


def shown(lab, job: int) -> str:
    """`scontrol show job` as printed: its AdminComment holds blanks, which lab.job() splits."""
    return lab.run("scontrol", "show", "job", str(job)).stdout


def running(lab, jobs: list[int]) -> bool:
    return all(lab.state(j) == "RUNNING" for j in jobs)


def test_a_storm_with_every_fault_and_a_full_disk_holds_or_ends_every_job_and_loses_nothing(small_state_lab):
    """A storm of hostile timing: while 80 jobs start and end, a running IPU job is suspended and resumed,
    another requeued, a pending one held and released, the slurm-ipu service SIGKILLed and restarted
    while V-IPU is slow, a slurmd SIGKILLed under its running job and started again, and at last
    the hooks' state directory fills to the last block. A prolog that cannot write its creation
    record holds its job at once, with the reason (never a requeue loop past
    prolog.max_attempts); an epilog that cannot journal leaves the partition to the service's
    reap. The admin frees space and releases the held jobs, as their AdminComment says: every job
    ends, none restarted more than max_attempts, nothing is left in V-IPU or the journal."""
    lab = small_state_lab
    admin = lab.admin()
    rng = random.Random(35)
    suspended = lab.sbatch("-N1", "-w", "node1", "--gres=ipu:4", "-o", "/dev/null", "--wrap", "sleep 15")
    on_node4 = lab.sbatch("-N1", "-w", "node4", "--gres=ipu:4", "-o", "/dev/null", "--wrap", "sleep 15")
    requeued = lab.sbatch("-N1", "--gres=ipu:2", "-o", "/dev/null", "--wrap", "sleep 15")
    held = lab.sbatch("--hold", "-N1", "--gres=ipu:1", "-o", "/dev/null", "--wrap", "true")
    jobs = [suspended, on_node4, requeued, held] + [submit(lab, rng) for _ in range(20)]
    wait_for("the jobs to be faulted running", lambda: running(lab, [suspended, on_node4, requeued]), 60)
    lab.run("scontrol", "suspend", str(suspended), check=True)
    assert f"slurm_{suspended}" in lab.partitions()  # a suspended job keeps its IPUs
    lab.run("scontrol", "requeue", str(requeued), check=True)
    # the slurm-ipu service killed under the storm while V-IPU is slow, then started again
    labmod.stop_service(lab.spec, signal.SIGKILL)
    admin.faults(create_delay=1)
    jobs += [submit(lab, rng) for _ in range(10)]
    labmod.restart_service(lab.spec)
    admin.clear_faults()
    # node4's slurmd killed under its running job, then started again (its slurmstepd goes on)
    pids = labmod.load_pids(lab.spec)
    os.kill(pids["slurmd-node4"]["pid"], signal.SIGKILL)
    jobs += [submit(lab, rng) for _ in range(10)]
    daemons.start_slurm(lab.spec, pids)
    labmod.save_pids(lab.spec, pids)
    # the state directory full
    filler = lab.spec.path("state", "filler")
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True, timeout=60)
    try:
        jobs += [submit(lab, rng, script="sleep 1") for _ in range(30)]
        told = wait_for("an IPU job held for the full disk", lambda: queue(lab, "PD"), 120, interval=0.5,
                        until=lambda pending: any(FULL in shown(lab, j) for j in pending))
    finally:
        filler.unlink()  # the admin frees space
    told = [j for j in told if FULL in shown(lab, j)]
    assert all(lab.job(j).get("Reason") == "JobHeldAdmin" for j in told), [lab.job(j) for j in told]
    lab.run("scontrol", "resume", str(suspended), check=True)
    wait_for("every job ended or held", lambda: [(j, lab.job(j).get("JobState"), lab.job(j).get("Reason"))
                                                 for j in queue(lab)
                                                 if lab.job(j).get("Reason") not in ("JobHeldAdmin", "JobHeldUser")],
             300, interval=1.0, until=lambda left: left == [])
    for job in queue(lab):  # held for the disk, and the one held at submit
        lab.run("scontrol", "release", str(job), check=True)
    wait_for("every job out of the queue", lambda: not queue(lab), 300, interval=1.0)
    limit = 3  # prolog.max_attempts, the lab's default
    counts = restarts(lab, jobs)
    assert len(counts) == len(jobs) and max(counts.values()) <= limit, counts
    assert counts[requeued] >= 1 and held in counts
    lab.run("slurm-ipu", "reap", "--site", lab.site, check=True)
    wait_no_partitions(lab, 60, "no partition left")
    journal = lab.spec.path("state", "pending-removal")
    assert sorted(p.name for p in journal.glob("*.json")) == []
    wait_idle(lab, 60, "every node idle")
