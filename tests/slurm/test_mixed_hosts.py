"""Hosts of different IPU counts in the real lab: three POD64s cabled to four, two and one host
servers (node[1-4] of 16 IPUs, node[5-6] of 32, node7 of 64; `slurm-ipu lab up --pod-hosts 4,2,1`).

What a user and an admin must see: every job on hosts of one size that hold its IPUs per node,
its partition in the ILD of those hosts' Pod, a size no mix of hosts gives refused at submit in
one line, doctor content with each host's own GRES, and on the allocation model whole hosts of the
smallest size that holds the job, its steps and a failed machine's drain on the right host."""

from __future__ import annotations

import json
import sys

import pytest

from slurm_ipu.slurm.hostlist import expand

from ..waiting import wait_for
from .conftest import started_lab, wait_gone, wait_idle, wait_no_partitions, wait_queue_empty
from .test_pods import REPORT, _report  # the job's nodes and its partition's IPUs and ILDs, seen from the job

SIZE = {**{f"node{k}": 16 for k in range(1, 5)}, "node5": 32, "node6": 32, "node7": 64}
ILD = {**{f"node{k}": 0 for k in range(1, 5)}, "node5": 1, "node6": 1, "node7": 2}  # each Pod its own ILD

@pytest.fixture(scope="module")
def sizes_lab():
    with started_lab(nodes=7, pods=3, pod_hosts=(4, 2, 1)) as lab:
        yield lab


@pytest.fixture
def lab3(sizes_lab):
    lab = sizes_lab
    wait_queue_empty(lab, 90, "no jobs left")
    wait_idle(lab, 60, "all nodes idle")
    wait_no_partitions(lab, 60, "no partition left by the last test")
    return lab


def test_each_job_runs_on_hosts_of_one_size_with_its_partition_in_their_pod(lab3):
    """Six jobs at once: the first three fill each size's Pod (the only hosts that hold them), the
    rest wait and land on any size that holds them, every node of a job of one size."""
    lab = lab3
    shapes = [(1, 64, ["node7"]), (2, 32, ["node5", "node6"]), (4, 16, ["node1", "node2", "node3", "node4"]),
              (1, 8, None), (2, 16, None), (1, 32, None)]
    jobs = {lab.sbatch("-N", str(nodes), f"--gres=ipu:{per}", "-o", str(lab.spec.path("users", "pods-%j.out")),
                       script=REPORT): (nodes, per, where) for nodes, per, where in shapes}
    for job in jobs:
        wait_gone(lab, job, timeout=120)
    for job, (nodes, per, where) in jobs.items():
        report = _report(lab, job)
        hosts = expand(report["nodes"])
        assert len(hosts) == nodes and len({SIZE[h] for h in hosts}) == 1 and SIZE[hosts[0]] >= per, report
        assert where is None or hosts == where, report
        assert report["ipus"] == nodes * per and report["ilds"] == [ILD[hosts[0]]], report
    wait_no_partitions(lab, 60, "every partition removed")


@pytest.mark.parametrize("args,words", [
    (["-N2", "--gres=ipu:64"], "--gres=ipu:64 on 2 node(s) asks for 128 IPUs, more than the Pod's 64"),
    (["-N1", "--gres=ipu:128"], "--gres=ipu:128 on 1 node(s) asks for 128 IPUs"),
    (["-N3", "--gres=ipu:16"], "asks for 48 IPUs, not a valid partition size"),
    (["-N1", "--gres=ipu:16", "-C", "ipuhost8"], "--constraint=ipuhost8 names no size of host this cluster has"),
])
def test_a_size_no_mix_of_hosts_gives_is_refused_at_submit(lab3, args, words):
    proc = lab3.run("sbatch", *args, "-o", "/dev/null", "--wrap", "true")
    said = [line for line in proc.stderr.splitlines() if "slurm-ipu:" in line]
    assert proc.returncode != 0 and len(said) == 1 and words in said[0], proc.stderr


def test_doctor_holds_each_host_to_its_own_size(lab3):
    lab = lab3
    out = lab.run("slurm-ipu", "doctor").stdout
    nodes = "ok       nodes        7 nodes with Gres=ipu:<its Pod's ipus_per_host> and their Features of slurm-ipu"
    assert "PROBLEM" not in out and nodes in out, out
    lab.run("scontrol", "update", "NodeName=node7", "Gres=ipu:16", check=True)  # as a stale NodeName line would say
    try:
        out = lab.run("slurm-ipu", "doctor").stdout
        assert "PROBLEM  nodes        node7 has Gres=ipu:16, not ipu:64" in out, out
    finally:
        lab.run("scontrol", "update", "NodeName=node7", "Gres=ipu:64", check=True)


# --- the allocation model: whole hosts -------------------------------------------------------------

@pytest.fixture(scope="module")
def whole_lab():
    with started_lab(nodes=7, pods=3, pod_hosts=(4, 2, 1), model="allocation") as lab:
        yield lab


# A step's own partition, as V-IPU has it while the step runs (one short line: srun --label, under
# ipurun, breaks a line at each 1024-byte message of the task's output).
SIZE_OF = (f"{sys.executable} -c 'import json, os, subprocess; name = os.environ[\"IPUOF_VIPU_API_PARTITION_ID\"]; "
           "out = subprocess.run([\"vipu\", \"list\", \"partitions\", \"--showjson\"], capture_output=True).stdout; "
           "print(\"STEP\", name, next(len(p[\"partition\"][\"spec\"][\"ipus\"]) for p in json.loads(out) "
           "if p[\"partition\"][\"id\"] == name))'")
STEPS = f"""#!/bin/bash
echo "NODES $SLURM_JOB_NODELIST"
ipurun --num-instances 1 {SIZE_OF}
"""


def test_whole_hosts_of_the_smallest_size_that_holds_the_job_and_its_steps(whole_lab):
    """Three jobs at once, each raised to its hosts' every IPU: the smallest hosts that hold it
    (a pair of 16-IPU hosts that hold one aligned block, the 32s, the 64), and a one-instance
    ipurun step's partition of that host's every IPU."""
    lab = whole_lab
    wait_queue_empty(lab, 90, "no jobs left")
    shapes = {(2, 4): ([["node1", "node2"], ["node3", "node4"]], 16), (2, 32): ([["node5", "node6"]], 32),
              (1, 64): ([["node7"]], 64)}
    jobs = {lab.sbatch("-N", str(nodes), f"--gres=ipu:{per}", "-o", str(lab.spec.path("users", "whole-%j.out")),
                       script=STEPS): (nodes, per) for nodes, per in shapes}
    for job, (nodes, per) in jobs.items():
        size = shapes[(nodes, per)][1]
        assert lab.job(job)["Licenses"].replace("*", ":") == f"ipu:{nodes * size}"  # whole hosts
    for job in jobs:
        wait_gone(lab, job, timeout=90)
    for job, (nodes, per) in jobs.items():
        where, size = shapes[(nodes, per)]
        text = lab.spec.path("users", f"whole-{job}.out").read_text()
        hosts = expand(text.split("NODES ", 1)[1].split("\n", 1)[0])
        assert hosts in where and f"\nSTEP slurm_{job}_0 {size}\n" in text, text


def test_a_failed_machine_drains_the_host_of_its_size(whole_lab):
    """node7's IPU-Machines are ag32-ag47 (poda's ag0-15, four to each 16-IPU host; podb's ag16-31,
    eight to each 32-IPU host): one of them down drains node7 alone."""
    lab = whole_lab
    wait_queue_empty(lab, 90, "no jobs left")
    emu = ["vipu-emu", "fault", "--state-dir", str(lab.spec.path("vipu-emu")), "agent", "ag40"]
    lab.run(*emu, "down", check=True)
    try:
        drained = wait_for("node7 drained by the health pass", lambda: _drained(lab), 60,
                           until=lambda nodes: bool(nodes))
        assert drained == ["node7"]
        lab.run(*emu, "up", check=True)
        wait_for("node7 resumed", lambda: _drained(lab), 60, until=lambda nodes: not nodes)
    finally:
        lab.run(*emu, "up")
        lab.run("scontrol", "update", "NodeName=node7", "State=RESUME")


def _drained(lab) -> list[str]:
    lab.run("slurm-ipu", "health")  # a pass now, rather than waiting for the service's
    out = lab.run("sinfo", "-h", "-N", "-t", "drain,drained,draining", "-o", "%N %E").stdout
    return sorted({line.split()[0] for line in out.splitlines() if "slurm-ipu: IPU-Machine ag40" in line})


def test_status_and_metrics_count_each_job_in_the_pod_of_its_hosts(whole_lab):
    lab = whole_lab
    wait_queue_empty(lab, 90, "no jobs left")
    jobs = [lab.sbatch("-N1", "--gres=ipu:64", "-o", "/dev/null", script="#!/bin/bash\nsleep 120\n"),
            lab.sbatch("-N1", "--gres=ipu:32", "-o", "/dev/null", script="#!/bin/bash\nsleep 120\n")]
    try:
        for job in jobs:
            wait_for(f"job {job} running", lambda job=job: lab.state(job), 60, until=lambda s: s == "RUNNING")
        status = json.loads(lab.run("slurm-ipu", "status", "--json", check=True).stdout)
        assert {p["name"]: p["used"] for p in status["pods"]} == {"poda": 0, "podb": 32, "podc": 64}, status
        text = lab.run("slurm-ipu", "metrics", check=True).stdout
        for pod, used in (("poda", 0), ("podb", 32), ("podc", 64)):
            assert f'slurm_ipu_ipus{{pod="{pod}",state="allocated"}} {used}' in text, text
    finally:
        lab.run("scancel", *map(str, jobs))
