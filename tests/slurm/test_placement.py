"""Where Slurm starts a multi-host job of the allocation model: only on hosts whose IPU-Machines
V-IPU can make one partition of. The lab's Pod has four hosts of 16 IPUs; a 32-IPU partition is an
aligned block of 8 IPU-Machines, so a 2-host job needs node[1-2] or node[3-4] (docs/vipu.md). The
site's render gives each such run of hosts a node feature and job_submit.lua a matching OR of them
(slurm_ipu/pods.py), so whichever hosts other jobs hold, a 2-host job lands on a run, its step
gets a partition of its hosts' 32 IPUs and every task attaches; with no run free it waits.
Judged by what Slurm (the job's nodes, its reason) and V-IPU (the attach) report."""

from __future__ import annotations

import pytest

from ..waiting import wait_for
from .conftest import ensure_users, parse_probe, queue, started_lab, wait_queue_empty

RUNS = (("node1", "node2"), ("node3", "node4"))
PROBE = """#!/bin/bash
echo "PROBE $SLURMD_NODENAME ${SLURM_PROCID:-b} $IPUOF_VIPU_API_HOST $IPUOF_VIPU_API_PORT \\
$IPUOF_VIPU_API_PARTITION_ID cfg=${IPUOF_CONFIG_PATH:-unset}"
echo "ATTACH $(vipu-emu attach 2>&1)"
"""
# Graphcore's own idiom inside the job (its allocation c<job>): fails on hosts of no run.
GRAPHCORE = """#!/bin/bash
#SBATCH -N2 --gres=ipu:16 -o {out}
vipu create partition p$SLURM_JOB_ID --allocation c$SLURM_JOB_ID --size 32 && echo MADE
IPUOF_VIPU_API_PARTITION_ID=p$SLURM_JOB_ID srun {probe}
"""


@pytest.fixture(scope="module")
def alab():
    users = ensure_users()
    with started_lab(nodes=4, model="allocation") as handle:
        path = handle.spec.path("users", "place-probe")
        path.write_text(PROBE)
        path.chmod(0o755)
        yield handle, users, str(path)


@pytest.fixture
def clean(alab):
    lab = alab[0]
    wait_queue_empty(lab)
    yield alab
    jobs = queue(lab)
    if jobs:
        lab.run("scancel", *jobs)


def hold(lab, user: str, node: str) -> int:
    """A one-host IPU job of another user on `node`, running."""
    proc = lab.run_as(user, "sbatch", "--parsable", "-w", node, "--gres=ipu:16", "-o", "/dev/null", "--wrap",
                      "sleep 600")
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip())
    wait_for(f"job {job} to run on {node}", lambda: lab.state(job), 60, until=lambda s: s == "RUNNING")
    return job


def nodes_of(text: str) -> tuple[str, ...]:
    return tuple(sorted(p[0] for p in parse_probe(text)[0]))


def attaches_of(text: str) -> list[tuple[str, int]]:
    return [(a.get("partition"), len(a["ipus"])) for a in parse_probe(text)[1]]


@pytest.mark.parametrize("busy", [None, "node1", "node2", "node3", "node4"])
def test_a_two_host_job_lands_on_a_run_whatever_another_job_holds(clean, busy):
    lab, (user, other), probe = clean
    held = hold(lab, other, busy) if busy else None
    proc = lab.run_as(user, "srun", "--ipus=8", "-N2", probe, timeout=120)
    assert proc.returncode == 0, proc.stderr
    where = nodes_of(proc.stdout)
    assert where in RUNS and busy not in where, proc.stdout
    step = {p[4] for p in parse_probe(proc.stdout)[0]}
    assert len(step) == 1 and attaches_of(proc.stdout) == [(step.pop(), 32)] * 2, proc.stdout + proc.stderr
    assert "no partition made" not in proc.stderr, proc.stderr
    if held:
        lab.run("scancel", str(held))


def test_with_no_run_free_a_two_host_job_waits_then_starts_on_one(clean):
    """node2 and node3 held: node1 and node4 are free but no run. The job waits (Slurm says
    Resources) and starts on node[3-4] once node3 is free; Graphcore's own `vipu create partition`
    in c<job> then works."""
    lab, (user, other), probe = clean
    two, three = hold(lab, other, "node2"), hold(lab, other, "node3")
    out = lab.spec.path("users", "place-%j.out")
    path = lab.spec.path("users", "place.sh")
    path.write_text(GRAPHCORE.format(out=out, probe=probe))
    path.chmod(0o755)
    proc = lab.run_as(user, "sbatch", "--parsable", str(path))
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip())
    wait_for(f"job {job} to wait for Resources", lambda: lab.job(job), 60,
             until=lambda j: j.get("JobState") == "PENDING" and j.get("Reason") == "Resources")
    lab.run("scancel", str(three))
    wait_for(f"job {job} to end", lambda: lab.state(job), 120,
             until=lambda s: s in ("COMPLETED", "FAILED", "CANCELLED", "GONE", "TIMEOUT"))
    text = lab.spec.path("users", f"place-{job}.out").read_text()
    assert "MADE" in text and nodes_of(text) == RUNS[1], text
    assert attaches_of(text) == [(f"p{job}", 32)] * 2, text
    lab.run("scancel", str(two))


def test_a_user_s_constraint_is_kept_beside_the_run(clean):
    """A constraint of the user's own is ANDed with the run: features no host has get Slurm's own
    answer, brackets (which cannot be combined) our one line, and a feature of the hosts is kept."""
    lab, (user, _), probe = clean
    proc = lab.run_as(user, "sbatch", "-N2", "--gres=ipu:16", "--constraint=[rack1|rack2]", "--wrap", "true")
    assert proc.returncode != 0 and "brackets or counts cannot be combined" in proc.stderr, proc.stderr
    proc = lab.run_as(user, "sbatch", "--parsable", "--hold", "-N2", "--gres=ipu:16", "--constraint=intel|amd",
                      "-o", "/dev/null", "--wrap", "true")
    assert proc.returncode != 0 and "Invalid feature specification" in proc.stderr, proc.stderr
    proc = lab.run_as(user, "srun", "-N2", "--gres=ipu:16", "--constraint=ipugroup2_1", probe, timeout=120)
    assert proc.returncode == 0 and nodes_of(proc.stdout) == RUNS[1], proc.stdout + proc.stderr
