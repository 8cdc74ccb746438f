"""A storm with hardware faults: 300 jobs on both V-IPU models while two
IPU-Machines fail and come back, on the mixed lab (Pod a, node[1-4]: the allocation model, ag0-ag15;
Pod b, node[5-8]: the partition model, ag16-ag31). ag1 (node1's) goes down; ag17 gets IPU 2 in
error. An admin drained node3 before it all.

What must hold: no job restarted more than once (the only faults are the two machines, which fail
once each); once the health pass has run, no job runs on node1 (drained) or on a partition over a
failed IPU; the reservation and the drain go when the machines are back, the admin's drain of
node3 stays as the admin left it; nothing is left in V-IPU, the journal or Slurm's queue."""

from __future__ import annotations

import random
import time

import pytest

from slurm_ipu.lab.spec import MODEL_PARTITIONS
from slurm_ipu.slurm.hostlist import expand

from ..waiting import wait_for
from .conftest import started_lab, wait_idle, wait_no_partitions
from .test_allocation_model import allocations
from .test_mixed_models import FILE_ALLOCATIONS

ADMIN_REASON = "admin: new DIMMs"
# (Slurm partition, nodes, IPUs per node); the allocation model raises a request to whole hosts
ALLOC, PART = MODEL_PARTITIONS["allocation"], MODEL_PARTITIONS["partition"]
SHAPES = [(PART, 1, 1), (PART, 1, 4), (PART, 2, 4), (PART, 1, 16), (PART, 2, 8), (PART, 4, 4), (ALLOC, 1, 4),
          (ALLOC, 1, 16), (ALLOC, 2, 16), (PART, 1, 0)]
FAILED_IPU = 17 * 4 + 2  # ag17's IPU 2, in the emulator's numbering (IPU i on agent i // 4)


@pytest.fixture(scope="module")
def mlab():
    with started_lab(nodes=8, pods=2, model="mixed") as handle:
        yield handle


class Watch:
    """What the storm's jobs did, sampled from slurmctld and V-IPU as it runs."""

    def __init__(self, lab):
        self.lab = lab
        self.restarts: dict[int, int] = {}
        self.broken: list[str] = []  # what ran where it must not, once the health pass had run

    def jobs(self) -> dict[int, dict[str, str]]:
        """Every job slurmctld holds, from one `scontrol show job -o`, each sampled for its restarts."""
        out = {}
        for line in self.lab.run("scontrol", "show", "job", "-o", timeout=60).stdout.splitlines():
            fields = dict(w.partition("=")[::2] for w in line.split() if "=" in w)
            if fields.get("JobId", "").isdigit():
                job = int(fields["JobId"])
                out[job] = fields
                self.restarts[job] = max(self.restarts.get(job, 0), int(fields.get("Restarts", "0") or 0))
        return out

    def check(self, failed_agents: set[str]) -> None:
        """No running job on node1 (drained) or on V-IPU objects over the failed machines."""
        jobs = self.jobs()
        running = {j for j, f in jobs.items() if f.get("JobState") == "RUNNING"}
        for job in running:
            if "node1" in expand(jobs[job].get("NodeList", "") or "") and jobs[job].get("NodeList") != "(null)":
                self.broken.append(f"job {job} running on node1 ({jobs[job].get('NodeList')})")
        api = self.lab.admin()
        try:
            for part in api.list_partitions():
                p = part["partition"]
                owner = _job(p["id"], "slurm_")
                ipus = {i["id"] for i in p["spec"].get("ipus", [])}
                if owner in running and FAILED_IPU in ipus:
                    self.broken.append(f"job {owner} running on {p['id']} over ag17's IPU 2")
            for alloc in api.allocations():
                owner = _job(alloc["id"], "c")
                if owner in running and set(alloc.get("agents", [])) & failed_agents:
                    self.broken.append(f"job {owner} running on allocation {alloc['id']} over {failed_agents}")
        finally:
            api.close()


def _job(name: str, prefix: str) -> int | None:
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def submit(lab, rng: random.Random, count: int) -> list[int]:
    out = []
    for _ in range(count):
        part, nodes, per = rng.choice(SHAPES)
        gres = [f"--gres=ipu:{per}"] if per else []
        out.append(lab.sbatch("-p", part, "-N", str(nodes), *gres, "-o", "/dev/null",
                              "--wrap", f"sleep {rng.uniform(1, 4):.1f}"))
    return out


def test_three_hundred_jobs_while_two_machines_fail_and_come_back(mlab):
    lab = mlab
    emu = ["vipu-emu", "fault", "--state-dir", str(lab.spec.path("vipu-emu")), "agent"]
    rng = random.Random(40)
    watch, jobs = Watch(lab), []
    lab.run("scontrol", "update", "NodeName=node3", "State=DRAIN", f"Reason={ADMIN_REASON}", check=True)
    try:
        jobs += submit(lab, rng, 100)
        wait_for("IPU jobs running on node1 and on Pod b", lambda: watch.jobs(), 120, interval=0.5,
                 until=lambda seen: _running_on(seen, "node1") and _running_on(seen, "node5", "node6", "node7",
                                                                               "node8"))
        lab.run(*emu, "ag1", "down", check=True)
        lab.run(*emu, "ag17", "ipu-error", "2", check=True)
        said = lab.run("slurm-ipu", "health", check=True).stdout  # the service's pass, now rather than within 60 s
        assert "health: drain node1: slurm-ipu: IPU-Machine ag1 down" in said, said
        assert "health: reserve 4 IPU licence(s) as slurm-ipu-ag17" in said, said
        assert "requeued" in said, said  # node1's running job at least
        jobs += submit(lab, rng, 100)
        settle = time.monotonic() + 10  # a prolog under way when the pass ran fails at once (MachineDown)
        end = time.monotonic() + 60
        while time.monotonic() < end:  # the failure window, bounded; each sample is a few Slurm and V-IPU reads
            if time.monotonic() > settle:
                watch.check({"ag1"})
            else:
                watch.jobs()
        assert watch.broken == [], watch.broken[:10]
        lab.run(*emu, "ag1", "up", check=True)
        lab.run(*emu, "ag17", "up", check=True)
        back = lab.run("slurm-ipu", "health", check=True).stdout
        assert "health: resume node1" in back and "health: release slurm-ipu-ag17" in back, back
        jobs += submit(lab, rng, 100)
        wait_for("every job out of the queue (a requeued one waits 30 s to start again)",
                 lambda: [j for j in watch.jobs() if j in set(jobs)], 600, interval=1.0, until=lambda left: not left)
    finally:
        lab.run(*emu, "ag1", "up")
        lab.run(*emu, "ag17", "up")
        if jobs:
            lab.run("scancel", *map(str, jobs))
    assert len(jobs) == 300
    restarted = {j: n for j, n in watch.restarts.items() if n}
    assert restarted, "no job was on a failed machine: the storm tested nothing"
    assert max(restarted.values()) <= 1, {j: n for j, n in restarted.items() if n > 1}
    nodes = dict(line.split("|", 1) for line in lab.run("sinfo", "-N", "-h", "-o", "%N|%E", check=True)
                 .stdout.splitlines())
    assert nodes["node3"] == ADMIN_REASON, nodes  # the admin's drain, as the admin left it
    assert not [n for n, r in nodes.items() if r.startswith("slurm-ipu")], nodes
    assert "slurm-ipu-" not in lab.run("scontrol", "show", "reservation", check=True).stdout
    wait_no_partitions(lab, 60, "no partition left")
    wait_for("no job's allocation left", lambda: allocations(lab), 60, until=lambda seen: seen == FILE_ALLOCATIONS)
    journal = lab.spec.path("state", "pending-removal")
    assert sorted(p.name for p in journal.glob("*.json")) == []
    lab.run("scontrol", "update", "NodeName=node3", "State=RESUME", check=True)
    wait_idle(lab, 60, "every node idle")


def _running_on(jobs: dict[int, dict[str, str]], *nodes: str) -> bool:
    return any(f.get("JobState") == "RUNNING" and "ipu" in f.get("TresPerNode", "") + f.get("Licenses", "")
               and set(nodes) & set(expand(f.get("NodeList", "") or ""))
               for f in jobs.values() if f.get("NodeList") not in (None, "(null)"))
