"""Pods of both V-IPU models on one cluster (the model chosen per Pod group), on
real Slurm: `slurm-ipu lab up --nodes 8 --pods 2 --model mixed` gives Pod a (node[1-4]) the
allocation-per-job model and Pod b (node[5-8]) the partition-per-job model, with a Slurm
partition of each model's hosts (ipu-alloc, ipu-part) beside the default one of all. Each
dialect's script runs on its Pods, a request is raised to whole hosts only where it may meet an
allocation-model host, a job over both kinds of Pod is refused at submit, and nothing is left."""

from __future__ import annotations

import pytest

from slurm_ipu.lab.spec import MODEL_PARTITIONS

from ..waiting import wait_for
from .conftest import ensure_users, started_lab, wait_gone, wait_idle
from .test_allocation_model import SLURM_UTILS, allocations

FILE_ALLOCATIONS = {"all", "poda", "podb"}  # the cluster file's: the whole and each Pod's


@pytest.fixture(scope="module")
def mlab():
    with started_lab(nodes=8, pods=2, model="mixed") as handle:
        yield handle


def nothing_left(lab) -> None:
    wait_for("no job's allocation or partition left", lambda: (allocations(lab), sorted(lab.partitions())), 60,
             until=lambda seen: seen == (FILE_ALLOCATIONS, []))


def test_each_model_s_pods_run_their_dialect_and_nothing_is_left(mlab):
    lab = mlab
    alloc, part = MODEL_PARTITIONS["allocation"], MODEL_PARTITIONS["partition"]
    user = ensure_users()[0]
    script = lab.spec.path("users", "slurm_utils.sh")
    script.write_text(SLURM_UTILS)
    script.chmod(0o755)

    # Graphcore's allocation-per-job script, as a user, on the allocation-model Pod.
    proc = lab.run_as(user, "sbatch", "--parsable", "-p", alloc, "--gres=ipu:4", "-o", "su-%j.out", str(script))
    assert proc.returncode == 0 and "4 IPUs per node raised to 16" in proc.stderr, proc.stderr
    job = int(proc.stdout.strip().split(";")[0])
    wait_gone(lab, job)
    out = lab.spec.path("users", f"su-{job}.out").read_text()
    assert f"create partition (p{job}): success." in out, out

    # A partition-per-job job on the other Pod keeps the size it asked for.
    proc = lab.run("sbatch", "--parsable", "-p", part, "--gres=ipu:4", "-o", "/dev/null",
                   stdin="#!/bin/sh\nsleep 300\n")
    assert proc.returncode == 0 and "raised" not in proc.stderr, proc.stderr
    job = int(proc.stdout.strip())
    wait_for(f"slurm_{job} made", lambda: f"slurm_{job}" in lab.partitions(), 60)
    spec = lab.partitions()[f"slurm_{job}"]["spec"]
    assert (spec["size"], spec["allocation"]) == (4, "podb"), spec
    # doctor tries what a job of each model does (and leaves the running job alone).
    doctor = lab.run("slurm-ipu", "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "a 1-IPU-Machine allocation and a 1-IPU partition" in doctor.stdout, doctor.stdout
    status = lab.run("slurm-ipu", "status", check=True).stdout
    assert any(line.startswith(f"slurm_{job} ") for line in status.splitlines()), status
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job)

    # The default partition holds both kinds: a request is raised (it may land on Pod a), and a
    # job over both Pods is refused at submit with one line.
    proc = lab.run("srun", "--gres=ipu:4", "-N1", "printenv", "SLURM_JOB_ID", timeout=120)
    assert proc.returncode == 0 and "4 IPUs per node raised to 16" in proc.stderr, proc.stderr
    proc = lab.run("sbatch", "-N8", "--gres=ipu:16", "-o", "/dev/null", stdin="#!/bin/sh\ntrue\n")
    assert proc.returncode != 0, proc.stdout
    assert "takes 2 Pods, but its Slurm partition(s) (the default) hold Pods of both V-IPU models" in proc.stderr
    nothing_left(lab)
    # The srun above returned before its job's epilog ended: node1 may still be COMPLETING.
    wait_idle(lab)
