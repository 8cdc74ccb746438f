"""Two Pods in the real lab: 8 nodes, node[1-4] cabled to ILD 0 (Pod a), node[5-8] to ILD 1
(Pod b), one switch per Pod in topology.conf, the emulator refusing a host another Pod's IPUs.

What a user and an admin must see: every partition in the ILDs of its job's hosts, a job that
fits one Pod inside one Pod, a bigger one on exactly the Pods it needs, a job whose Pod is full
waiting in the queue (Slurm's view) instead of failing in the prolog, and nothing left over."""

from __future__ import annotations

import json
import random
import sys

import pytest

from slurm_ipu.slurm.hostlist import expand

from ..waiting import wait_for
from .conftest import queue, started_lab, wait_gone, wait_idle, wait_no_partitions, wait_queue_empty

POD_OF = {f"node{k}": 0 if k <= 4 else 1 for k in range(1, 9)}  # node -> ILD (the lab's cabling)

# The job's own view, written while it runs: its nodes and the ILDs V-IPU put its partition in.
REPORT = f"""#!/bin/bash
{sys.executable} - <<'EOF'
import json, os, subprocess
name = os.environ["IPUOF_VIPU_API_PARTITION_ID"]
parts = json.loads(subprocess.run(["vipu", "list", "partitions", "--showjson"], capture_output=True, text=True,
                                  check=True).stdout)
spec = next(p["partition"]["spec"] for p in parts if p["partition"]["id"] == name)
print("REPORT " + json.dumps({{"nodes": os.environ["SLURM_JOB_NODELIST"], "allocation": spec["allocation"],
                              "ilds": sorted({{i["ild"] for i in spec["ipus"]}}), "ipus": len(spec["ipus"])}}))
EOF
srun --ntasks-per-node=1 sleep "$1"
"""


@pytest.fixture(scope="module")
def pods_lab():
    with started_lab(nodes=8, pods=2) as lab:
        yield lab


@pytest.fixture
def lab2(pods_lab):
    lab = pods_lab
    wait_queue_empty(lab, 90, "no jobs left")
    wait_idle(lab, 60, "all nodes idle")
    # the slurm-ipu service removes a cancelled job's partition a moment after its epilog answers: a
    # test that counts the Pods' IPUs (doctor, status) must not see the last test's
    wait_no_partitions(lab, 60, "no partition left by the last test")
    yield lab
    jobs = queue(lab)
    if jobs:
        lab.run("scancel", *jobs)


def _report(lab, job: int) -> dict:
    text = lab.spec.path("users", f"pods-{job}.out").read_text()
    line = next((w for w in text.splitlines() if w.startswith("REPORT ")), None)
    assert line, f"job {job} wrote no report:\n{text}"
    return json.loads(line[len("REPORT "):])


def _submit(lab, nodes: int, per: int, seconds: float, *extra: str) -> int:
    script = lab.spec.path("users", "report.sh")
    if not script.exists():
        script.write_text(REPORT)
        script.chmod(0o755)
    return lab.sbatch("-N", str(nodes), f"--gres=ipu:{per}", "-o", str(lab.spec.path("users", "pods-%j.out")),
                      *extra, str(script), f"{seconds:.1f}")


def test_twenty_jobs_each_partition_in_the_ilds_of_its_hosts(lab2):
    lab = lab2
    rng = random.Random(13)
    shapes = [(1, 16), (2, 16), (2, 8), (4, 16), (4, 8), (1, 4), (2, 2), (8, 16), (8, 8), (8, 2)]
    jobs = {}
    for k in range(20):
        nodes, per = shapes[k % len(shapes)] if k < len(shapes) else rng.choice(shapes)
        jobs[_submit(lab, nodes, per, rng.uniform(0.5, 2.5))] = nodes
    for job in jobs:
        wait_gone(lab, job, timeout=240)
    for job, nodes in jobs.items():
        report = _report(lab, job)
        hosts = expand(report["nodes"])
        assert len(hosts) == nodes
        pods = sorted({POD_OF[h] for h in hosts})
        assert report["ilds"] == pods, f"job {job} on {hosts}: partition in ILD(s) {report['ilds']}"
        # Fits one Pod (4 hosts): inside one Pod; bigger: exactly the Pods it needs.
        assert len(pods) == (1 if nodes <= 4 else 2), f"job {job} ({nodes} nodes) on {hosts}"
        assert report["allocation"] == ("all" if len(pods) == 2 else f"pod{'ab'[pods[0]]}")
    wait_no_partitions(lab, 60, "every partition removed")
    check = lab.run("vipu-emu", "check", "--state-dir", str(lab.spec.path("vipu-emu")), check=True)
    assert json.loads(check.stdout)["ok"], check.stdout
    wait_idle(lab, 60, "every node idle")


def test_a_two_node_job_skips_a_lone_free_node_for_a_pod_with_room(lab2):
    lab = lab2
    busy = [_submit(lab, 1, 16, 120, "-w", f"node{k}") for k in (1, 2, 3)]
    for job in busy:
        wait_for(f"job {job} running", lambda job=job: lab.state(job) == "RUNNING", 60)
    pair = _submit(lab, 2, 8, 0.5)
    wait_gone(lab, pair, timeout=90)
    assert _report(lab, pair)["ilds"] == [1] and expand(_report(lab, pair)["nodes"])[0] in ("node5", "node6", "node7")
    lab.run("scancel", *map(str, busy))


def test_a_job_on_a_full_pods_hosts_waits_in_the_queue_not_in_the_prolog(lab2):
    lab = lab2
    full = [_submit(lab, 1, 16, 300, "-w", f"node{k}") for k in range(1, 5)]  # Pod a's 64 IPUs taken
    for job in full:
        wait_for(f"job {job} running", lambda job=job: lab.state(job) == "RUNNING", 60)
    pinned = _submit(lab, 1, 4, 0.5, "-w", "node2")   # Slurm must place it on Pod a: it waits
    spanning = _submit(lab, 8, 2, 0.5)                 # needs both Pods: it waits
    elsewhere = _submit(lab, 2, 8, 0.5)                # fits Pod b: it runs there
    wait_gone(lab, elsewhere, timeout=90)
    assert _report(lab, elsewhere)["ilds"] == [1]
    for job in (pinned, spanning):
        # The scheduler has looked at it (a reason such as Resources) and left it queued.
        wait_for(f"job {job} held back by the scheduler", lambda job=job: lab.job(job).get("Reason") not in (
            None, "None"), 30)
        info = lab.job(job)
        assert info["JobState"] == "PENDING" and info.get("Restarts", "0") == "0", info
    log = lab.spec.path("state", "hooks.log").read_text()
    assert f"job {pinned}:" not in log and f"job {spanning}:" not in log  # no prolog ran, none failed
    lab.run("scancel", str(full[1]))  # node2 frees: the pinned job runs, in Pod a
    wait_gone(lab, pinned, timeout=90)
    assert _report(lab, pinned) == {"nodes": "node2", "allocation": "poda", "ilds": [0], "ipus": 4}
    lab.run("scancel", *map(str, full))
    wait_gone(lab, spanning, timeout=90)
    assert _report(lab, spanning)["ilds"] == [0, 1]
    wait_no_partitions(lab, 60, "every partition removed")


def test_ipurun_runs_each_instance_on_its_own_pods_ipus(lab2):
    """A job over both Pods, instances dealt out cyclically (node1 gets instances 0 and 8): the
    block rule would send instance 8 to the other Pod's GCD, which the emulator refuses."""
    lab = lab2
    script = lab.spec.path("users", "span.sh")
    script.write_text("#!/bin/bash\nipurun --num-instances 16 --num-replicas 32 --ipus-per-replica 4 --print-topology "
                      "--process-placement=disabled --mpi-global-args='--map-by node' vipu-emu attach\n")
    script.chmod(0o755)
    job = lab.sbatch("-N", "8", "--ntasks-per-node=2", "--gres=ipu:16", "-o",
                     str(lab.spec.path("users", "span-%j.out")), str(script))
    wait_gone(lab, job, timeout=120)
    out = lab.spec.path("users", f"span-{job}.out").read_text()
    assert lab.job(job).get("ExitCode", "0:0") == "0:0", out
    grants = [line.split() for line in out.splitlines() if line.startswith("attach: ")]
    assert len(grants) == 16, out
    for words in grants:
        fields = dict(w.split("=", 1) for w in words[1:])
        assert POD_OF[fields["host"]] == int(fields["gcd"]), words  # GCD g lies in ILD g here
    pods_row = next(line for line in out.splitlines() if line.startswith("| Pods"))
    assert pods_row.split("|")[2].strip() == "poda" and pods_row.split("|")[3].strip() == "podb"


def test_doctor_and_status_see_the_pods(lab2):
    lab = lab2
    doctor = lab.run("slurm-ipu", "doctor")
    assert doctor.returncode == 0, doctor.stdout
    assert "ok       pods         2 Pods, each one switch of Slurm's topology (poda, podb)" in doctor.stdout
    job = _submit(lab, 8, 2, 60)
    wait_for(f"job {job} running", lambda: lab.state(job) == "RUNNING", 60)
    wait_for(f"job {job}'s partition", lambda: f"slurm_{job}" in lab.partitions(), 30)
    status = lab.run("slurm-ipu", "status", check=True).stdout
    assert "Pod poda: hosts node[1-4], ILD 0: 64 IPUs, 8 in partitions, 56 free" in status
    assert "Pod podb: hosts node[5-8], ILD 1: 64 IPUs, 8 in partitions, 56 free" in status
    row = next(line for line in status.splitlines() if line.startswith(f"slurm_{job} "))
    assert " poda,podb " in row
    lab.run("scancel", str(job))


SITE_TOPOLOGY = "# the site's racks\nSwitchName=rack1 Nodes=node[1-4]\nSwitchName=rack2 Nodes=node[5-8]\n" \
                "SwitchName=core Switches=rack[1-2]\n"


def test_a_site_topology_of_its_own_takes_the_pods_and_slurm_runs_it_with_no_error(lab2, tmp_path):
    """A site with its own topology.conf (racks that happen to be the Pods): render
    merges the Pods into it (rack1 becomes poda's switch, rack2 podb's), slurmctld reads it with no
    topology error, a job that fits a Pod stays in one, doctor's pods item is ok, and `slurm-ipu
    unmerge` gives the site's file back byte for byte."""
    import shutil

    from slurm_ipu import config
    from slurm_ipu.deploy import fragments

    lab = lab2
    etc = lab.spec.path("etc")
    ours = (etc / "topology.conf").read_text()
    # the lab's slurm.conf has the Include a merge adds, of its own: the un-merge below takes it out
    conf = (etc / "slurm.conf").read_text()
    log = lab.spec.path("log", "slurmctld.log")
    try:
        (etc / "topology.conf").write_text(SITE_TOPOLOGY)
        desc = config.load(str(etc / "site.yaml"), twins=False)
        fragments.write(desc, tmp_path / "out", str(etc / "slurm.conf"))
        assert not (tmp_path / "out" / "topology.conf").exists()  # nothing to copy over the site's
        patch = shutil.which("patch")
        lab.run(patch, "-s", "-d", "/", "-p1", "-i", str(tmp_path / "out" / "slurm.conf.diff"), check=True)
        seen = log.stat().st_size
        lab.run("scontrol", "reconfigure", check=True)
        wait_for("slurmctld's topology has the Pods",
                 lambda: lab.run("scontrol", "show", "topology").stdout, 30,
                 until=lambda text: "SwitchName=poda" in text and "SwitchName=podb" in text)
        said = log.read_text()[seen:]
        assert not [w for w in ("lack access", "Multiple leaf", "TOPOLOGY") if w in said], said[-2000:]
        doctor = lab.run("slurm-ipu", "doctor")
        assert doctor.returncode == 0 and "ok       pods         2 Pods" in doctor.stdout, doctor.stdout
        job = _submit(lab, 2, 8, 5)  # two nodes: it fits a Pod, so it stays in one
        wait_gone(lab, job, 90)
        assert len({POD_OF[n] for n in expand(_report(lab, job)["nodes"])}) == 1  # one Pod
        proc = lab.run("slurm-ipu", "unmerge", "--site", str(etc / "site.yaml"), "--out", str(tmp_path / "back"),
                       check=True)
        lab.run(patch, "-s", "-d", "/", "-p1", "-i", proc.stdout.strip(), check=True)
        assert (etc / "topology.conf").read_text() == SITE_TOPOLOGY
    finally:
        (etc / "topology.conf").write_text(ours)
        (etc / "slurm.conf").write_text(conf)
        lab.run("scontrol", "reconfigure")
        shown = lambda: (lambda p: p.stdout + p.stderr)(lab.run("scontrol", "show", "topology"))  # noqa: E731
        wait_for("slurmctld's topology is the lab's again", shown, 60, until=lambda text: "SwitchName=all" in text)


@pytest.fixture(scope="module")
def four_pods():
    """A POD256 as four POD64s of two nodes (32 IPUs each), grouped in pairs podab and podcd."""
    with started_lab(nodes=8, pods=4, ipus_per_node=32) as lab:
        yield lab


def test_a_job_over_two_of_four_pods_takes_a_pair_with_room_and_its_allocation(four_pods):
    lab = four_pods
    full = [_submit(lab, 1, 32, 300, "-w", f"node{k}") for k in (1, 2)]  # Pod a's 64 IPUs taken
    for job in full:
        wait_for(f"job {job} running", lambda job=job: lab.state(job) == "RUNNING", 60)
    pair = _submit(lab, 4, 32, 0.5)  # 128 IPUs: two Pods; pair ab has only Pod b left, so pair cd
    every = _submit(lab, 8, 16, 0.5)  # all four Pods: waits for Pod a's hosts
    wait_gone(lab, pair, timeout=90)
    assert _report(lab, pair) == {"nodes": "node[5-8]", "allocation": "podcd", "ilds": [2, 3], "ipus": 128}
    wait_for(f"job {every} held back by the scheduler", lambda: lab.job(every).get("Reason") not in (None, "None"), 30)
    assert lab.state(every) == "PENDING"
    lab.run("scancel", *map(str, full))
    wait_gone(lab, every, timeout=90)
    assert _report(lab, every) == {"nodes": "node[1-8]", "allocation": "all", "ilds": [0, 1, 2, 3], "ipus": 128}
    wait_no_partitions(lab, 60, "every partition removed")
