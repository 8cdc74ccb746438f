"""--gres=ipu:N end to end on a real Slurm: what users and admins would see."""

from __future__ import annotations

import random
import signal
import sys
import time

import pytest

from slurm_ipu import lab as labmod

from .conftest import (
    GRES,
    cancel_and_expect_clean,
    parse_probe,
    probe_script,
    wait_for,
    wait_gone,
    wait_idle,
    wait_no_partitions,
)


def batch(lab, tmp_path, nodes: int, per_node: int, *extra: str) -> tuple[int, str]:
    out = tmp_path / "job.out"
    probe = probe_script(lab)
    script = (f"#!/bin/bash\n#SBATCH -N {nodes}\n#SBATCH --gres=ipu:{per_node}\n#SBATCH -o {out}\n"
              f"{probe}\n"
              f"{lab.spec.path('bin', 'vipu')} list partitions --showjson | tr -d '\\n' | sed 's/^/PARTS /'; echo\n"
              f"srun {probe}\n")
    job = lab.sbatch(*extra, script=script)
    wait_gone(lab, job)
    return job, out.read_text()


def test_two_node_batch_and_step_see_one_partition_of_their_own(clean_lab, tmp_path):
    lab = clean_lab
    job, text = batch(lab, tmp_path, 2, 8)
    probes, attaches = parse_probe(text)
    name = f"slurm_{job}"
    assert len(probes) == 3  # the batch step, then one task per node
    for _node, _rank, host, port, partition, cfg in probes:
        assert (host, port, partition, cfg) == ("127.0.0.1", str(lab.spec.vipu_port), name, "cfg=unset")
    assert sorted(p[0] for p in probes[1:]) == ["node1", "node2"]
    parts = [line for line in text.splitlines() if line.startswith("PARTS ")]
    import json
    seen = json.loads(parts[0][len("PARTS "):])
    assert [(p["partition"]["id"], p["partition"]["spec"]["size"]) for p in seen] == [(name, 16)]
    held = {i["id"] for i in seen[0]["partition"]["spec"]["ipus"]}
    assert len(attaches) == 3
    for got in attaches:
        assert got.get("partition") == name and got["ipus"] and set(got["ipus"]) <= held, got["line"]
    assert lab.state(job) == "COMPLETED"
    wait_for("partition removed", lambda: name not in lab.partitions(), 30)


def test_one_node_srun_gets_variables_and_user_values_are_replaced(clean_lab):
    lab = clean_lab
    env = dict(lab.env, IPUOF_VIPU_API_PARTITION_ID="someone_elses", IPUOF_VIPU_API_HOST="10.9.9.9",
               IPUOF_CONFIG_PATH="/etc/ipuof.conf.d/p.conf")
    proc = lab.run("srun", "--gres=ipu:4", probe_script(lab), env=env, check=True)
    probes, attaches = parse_probe(proc.stdout)
    assert len(probes) == 1
    node, _rank, host, port, partition, cfg = probes[0]
    assert host == "127.0.0.1" and partition.startswith("slurm_") and cfg == "cfg=unset"
    assert attaches[0].get("partition") == partition and len(attaches[0]["ipus"]) == 4, attaches[0]["line"]
    wait_no_partitions(lab, 30, "partition removed after srun")


@pytest.mark.parametrize("args,words", [
    (["--gres=ipu:3"], ["asks for 3 IPUs", "valid totals: 1, 2, 4, 8, 16, 32, 64"]),
    (["-N", "3", "--gres=ipu:8"], ["on 3 node(s) asks for 24 IPUs", "valid totals"]),
    (["-N", "4", "--gres=ipu:32"], ["128 IPUs, more than the Pod's 64"]),
    (["-N", "2-4", "--gres=ipu:4"], ["fixed node count", "-N 2"]),
    (["-L", "ipu:8"], ["--gres=ipu:N"]),
    (["--gres=ipu:4", "--ipu-gcds=0"], ["spank_ipu: --ipu-gcds=0: not a count from 1 to 65536"]),
    (["--gres=ipu:4", "--ipu-gcds=3"], ["--ipu-gcds=3: a partition of 4 IPUs over 1 ILD(s) has 1, 2, 4 GCD(s)"]),
    # Shapes no partition of that size can have: refused by job_submit.lua, not after requeues.
    (["--gres=ipu:4", "--ipu-gcds=8"], ["--ipu-gcds=8: a partition of 4 IPUs over 1 ILD(s) has 1, 2, 4 GCD(s)"]),
    (["--gres=ipu:16", "--ipu-ilds=2"], ["--ipu-ilds=2: a partition of 16 IPUs on this Pod spans 1 ILD(s)"]),
])
@pytest.mark.parametrize("tool", ["sbatch", "srun", "salloc"])
def test_bad_requests_are_refused_at_submit(clean_lab, args, words, tool):
    proc = clean_lab.run(tool, *args, *(["--wrap", "true"] if tool == "sbatch" else ["true"]))
    assert proc.returncode != 0
    for word in words:
        assert word in proc.stderr, proc.stderr
    assert clean_lab.run("squeue", "-h").stdout == ""


def test_job_without_ipus_gets_no_partition_and_no_vipu_call(clean_lab, tmp_path):
    lab = clean_lab
    admin = lab.admin()
    # What a job could cause; the slurm-ipu service's periodic reads (its reap's `list`, the health
    # pass's `agents`) run on their own clocks and may fall inside the job's life.
    per_job = ("create", "remove", "get", "reset", "ipuof", "attach", "create_allocation", "remove_allocation")

    def job_calls():
        return {op: n for op, n in admin.stats().items() if op in per_job}

    before = job_calls()
    out = tmp_path / "plain.out"
    job = lab.sbatch("-N", "2", "-o", str(out), "--wrap", "srun hostname")
    wait_gone(lab, job)
    assert lab.state(job) == "COMPLETED"
    assert job_calls() == before
    assert "Licenses=(null)" in lab.run("scontrol", "show", "job", str(job)).stdout


def test_request_is_visible_to_admins(clean_lab):
    lab = clean_lab
    assert set(lab.run("sinfo", "-h", "-N", "-o", "%G", check=True).stdout.split()) == {"ipu:16"}
    job = lab.sbatch("-N", "2", "--gres=ipu:4", "--ipu-gcds=2", "--hold", "--wrap", "true")
    shown = lab.run("scontrol", "show", "job", str(job), check=True).stdout
    assert f"TresPerNode={GRES}ipu:4" in shown and "Licenses=ipu:8" in shown
    lab.run("scontrol", "update", f"JobId={job}", "NumNodes=4", check=True)  # licence follows the change
    assert "Licenses=ipu:16" in lab.run("scontrol", "show", "job", str(job), check=True).stdout
    lab.run("scontrol", "release", str(job), check=True)
    wait_gone(lab, job)
    assert lab.state(job) == "COMPLETED"


def test_gcds_option_shapes_the_partition_and_the_job_names_it(clean_lab, users, tmp_path):
    lab = clean_lab
    job = lab.sbatch("-N", "1", "--gres=ipu:8", "--ipu-gcds=2", "--wrap", "sleep 300")
    wait_for("job running", lambda: lab.state(job) == "RUNNING", 60)
    part = lab.partitions()[f"slurm_{job}"]
    assert (part["spec"]["size"], part["spec"]["num_gcds"], part["status"]["state"]) == (8, 2, "PS_ACTIVE")
    assert part["spec"]["hosts"] == [lab.job(job)["NodeList"]]
    # Which partition is the job's: in `scontrol show job`, for any user, within
    # the slurm-ipu service's next pass (its notes go to Slurm in one scontrol a second at most)
    note = f"AdminComment=slurm-ipu:partition=slurm_{job},ipus=8"
    wait_for("the job's partition named in scontrol show job",
             lambda: lab.run_as("slurmipu-b", "scontrol", "show", "job", str(job)).stdout, 30,
             until=lambda shown: note in shown.split())
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job)
    wait_no_partitions(lab, 30, "partition removed")


def test_scancel_while_running_leaves_nothing(clean_lab):
    lab = clean_lab
    job = lab.sbatch("-N", "2", "--gres=ipu:16", "--wrap", "srun sleep 300")
    wait_for("job running", lambda: lab.state(job) == "RUNNING", 60)
    assert lab.partitions()[f"slurm_{job}"]["spec"]["size"] == 32
    cancel_and_expect_clean(lab, job)


def test_scancel_while_prolog_is_creating_leaves_nothing(clean_lab):
    lab = clean_lab
    lab.admin().faults(create_delay=25)  # partitions stay PENDING; the prolog waits on them
    job = lab.sbatch("--gres=ipu:4", "--wrap", "true")
    wait_for("partition PENDING while the job configures",
             lambda: lab.partitions().get(f"slurm_{job}", {}).get("status", {}).get("state") == "PS_PENDING", 30)
    assert lab.state(job) == "CONFIGURING"
    cancel_and_expect_clean(lab, job)  # the half-created partition included


def test_prolog_failure_requeues_batch_job_and_leaks_nothing(clean_lab):
    """V-IPU trouble: requeued, the user's own --comment untouched, the reason in AdminComment;
    when the next attempt succeeds the stale reason is gone: the partition's
    name is there instead, as soon as the job runs."""
    lab = clean_lab
    lab.admin().faults(fail={"count": 3, "code": "UNAVAILABLE", "op": "create"})  # every retry of one attempt
    job = lab.sbatch("--gres=ipu:4", "--comment=my experiment 7", "--wrap", "sleep 300")
    wait_for("job requeued", lambda: lab.job(job).get("Restarts") == "1", 60)
    shown = lab.run("scontrol", "show", "job", str(job)).stdout
    assert "Comment=my experiment 7" in shown and "AdminComment=slurm-ipu: job" in shown, shown
    assert "requeued (attempt 1 of 3)" in shown, shown
    assert "not created: injected fault" in lab.spec.path("state", "hooks.log").read_text()
    wait_for("the job running on its second attempt", lambda: lab.state(job) == "RUNNING", 120)
    assert f"slurm_{job}" in lab.partitions()
    shown = lab.run("scontrol", "show", "job", str(job)).stdout  # the stale reason gave way to the partition
    assert "Comment=my experiment 7" in shown and f"AdminComment=slurm-ipu:partition=slurm_{job},ipus=4" in shown, shown
    cancel_and_expect_clean(lab, job)


def test_a_request_vipu_refuses_ends_the_job_at_once(clean_lab):
    """A shape that cannot heal is no reason to requeue three times: cancelled, reason shown."""
    lab = clean_lab
    lab.admin().faults(fail={"count": 1, "code": "INVALID_ARGUMENT", "op": "create"})
    job = lab.sbatch("--gres=ipu:4", "--wrap", "true")
    wait_gone(lab, job, timeout=60)
    info = lab.job(job)
    assert info.get("JobState") == "CANCELLED" and info.get("Restarts") == "0", info
    shown = lab.run("scontrol", "show", "job", str(job)).stdout
    assert "the job is cancelled: the request cannot be met" in shown, shown
    wait_idle(lab, 60, "nodes idle")
    assert lab.partitions() == {}


@pytest.mark.parametrize("tool", ["srun", "salloc"])
def test_srun_and_salloc_users_see_why_their_ipu_job_ended(clean_lab, tool):
    """Slurm alone prints "Nodes node1 are still not ready" (srun) or "Job allocation N has been
    revoked" (salloc): the prolog's notice names the job, the reason and where it stays."""
    lab = clean_lab
    lab.admin().faults(fail={"count": 1, "code": "INVALID_ARGUMENT", "op": "create"})
    proc = lab.run(tool, "--gres=ipu:4", "true", timeout=90)
    assert proc.returncode != 0
    notice = [line for line in proc.stderr.splitlines() if f"{tool}: slurm-ipu: job " in line]
    assert len(notice) == 1, proc.stderr
    job = int(notice[0].split("slurm-ipu: job ")[1].split(":")[0])
    assert f"V-IPU partition slurm_{job} (4 IPUs) not created: injected fault: create failed with " \
           f"INVALID_ARGUMENT (the reason stays in `scontrol show job {job}`)" in notice[0], notice
    shown = lab.run("scontrol", "show", "job", str(job)).stdout
    assert "the request cannot be met" in shown, shown
    wait_idle(lab, 60, "nodes idle")
    assert lab.partitions() == {}


@pytest.fixture
def without_service(clean_lab):
    """The lab with its slurm-ipu service stopped (by pid), as on a site that has not enabled it:
    the hooks must do all the work themselves. Restarted afterwards."""
    labmod.stop_service(clean_lab.spec)
    try:
        yield clean_lab
    finally:
        labmod.restart_service(clean_lab.spec)


def _queued(lab) -> list[str]:
    return sorted(p.stem for p in lab.spec.path("state", "pending-removal").glob("*.json"))


def _cancel_while_vipu_is_down(lab):
    """A running IPU job cancelled while V-IPU is down: the nodes stay idle (not drained) and the
    removal waits in the journal. Returns the job and the controller's admin handle (still down)."""
    job = lab.sbatch("--gres=ipu:4", "--wrap", "sleep 300")
    wait_for("job running", lambda: lab.state(job) == "RUNNING", 60)
    admin = lab.admin()
    admin.down()
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job)
    wait_idle(lab, 60, "nodes idle, not drained")
    assert wait_for("the removal journaled", lambda: _queued(lab), 30) == [f"slurm_{job}"]
    return job, admin


def test_vipu_down_at_job_end_keeps_nodes_idle_and_the_service_removes_it_later(clean_lab):
    """V-IPU is down when the job ends and the slurm-ipu service crashes (SIGKILL) meanwhile:
    the nodes stay idle, the removal waits in the journal, and the restarted service removes
    the partition once V-IPU is back, with nobody running reap by hand."""
    lab = clean_lab
    _, admin = _cancel_while_vipu_is_down(lab)
    labmod.stop_service(lab.spec, signal.SIGKILL)
    labmod.restart_service(lab.spec)
    admin.up()
    wait_for("the service removed it", lambda: lab.partitions() == {} and not _queued(lab), 90)


def _served(lab, job: int) -> bool:
    """The slurm-ipu service ran this job's prolog: its log (the service's stderr) has the line
    the Python prolog would have written to slurmctld's."""
    return f"job {job}: partition slurm_{job} ACTIVE" in lab.spec.path("log", "service.log").read_text()


def test_the_running_service_creates_the_partition_without_a_python_prolog(clean_lab):
    lab = clean_lab
    job = lab.sbatch("-N", "2", "--gres=ipu:2", "--wrap", "sleep 300")
    wait_for("job running", lambda: lab.state(job) == "RUNNING", 60)
    assert lab.partitions()[f"slurm_{job}"]["spec"]["size"] == 4 and _served(lab, job)
    cancel_and_expect_clean(lab, job)


def test_restarting_the_service_while_a_prolog_waits_on_it_fails_no_job(clean_lab):
    """An upgrade restarts the service (SIGTERM): prologs it is running finish and answer first."""
    lab = clean_lab
    lab.admin().faults(create_delay=3)
    job = lab.sbatch("--gres=ipu:4", "--wrap", "sleep 300")
    wait_for("partition PENDING while the service runs the prolog",
             lambda: lab.partitions().get(f"slurm_{job}", {}).get("status", {}).get("state") == "PS_PENDING", 30)
    labmod.stop_service(lab.spec)
    labmod.restart_service(lab.spec)
    wait_for("job running", lambda: lab.state(job) == "RUNNING", 60)
    assert lab.job(job).get("Restarts", "0") == "0" and _served(lab, job)
    cancel_and_expect_clean(lab, job)


def test_without_the_service_the_epilog_removes_it_and_reap_is_the_backstop(without_service):
    lab = without_service
    job = lab.sbatch("--gres=ipu:4", "--wrap", "true")
    wait_gone(lab, job)
    assert f"job {job}: partition slurm_{job} ACTIVE" in lab.spec.path("state", "hooks.log").read_text()
    assert not _served(lab, job)  # the wrapper ran the Python prolog itself
    assert lab.job(job).get("AdminComment") == f"slurm-ipu:partition=slurm_{job},ipus=4"  # written at once
    wait_no_partitions(lab, 30, "partition removed by the epilog itself")
    assert not _queued(lab)
    job, admin = _cancel_while_vipu_is_down(lab)
    down = lab.run(sys.executable, "-m", "slurm_ipu.cli", "reap", "--site", lab.site)
    assert down.returncode == 2 and "unable to connect to VIRM/V-IPU Controller" in down.stderr
    assert "Traceback" not in down.stderr
    admin.up()
    dry = lab.run(sys.executable, "-m", "slurm_ipu.cli", "reap", "--dry-run", "--site", lab.site, check=True)
    assert f"would remove slurm_{job}" in dry.stdout and f"slurm_{job}" in lab.partitions()
    done = lab.run(sys.executable, "-m", "slurm_ipu.cli", "reap", "--site", lab.site, check=True)
    assert f"removed slurm_{job}" in done.stdout
    assert lab.partitions() == {} and not _queued(lab)


def test_twenty_mixed_jobs_a_third_cancelled_leave_nothing(clean_lab):
    lab = clean_lab
    rng = random.Random(7)
    shapes = [(1, 1), (1, 2), (1, 4), (2, 4), (2, 8), (1, 16), (4, 4), (2, 1)]
    jobs = []
    for _ in range(20):
        nodes, per = rng.choice(shapes)
        jobs.append(lab.sbatch("-N", str(nodes), f"--gres=ipu:{per}", "--wrap",
                               f"srun sleep {rng.uniform(0.5, 3):.1f}"))
    for job in rng.sample(jobs, 7):
        time.sleep(rng.uniform(0, 0.6))
        lab.run("scancel", str(job))
    for job in jobs:
        wait_gone(lab, job, timeout=180)
    wait_no_partitions(lab, 60, "every partition removed")
    proc = lab.run(str(lab.spec.path("bin", "vipu")), "list", "partitions", check=True)
    assert "slurm_" not in proc.stdout
    wait_idle(lab, 60, "every node idle")


def test_an_orphan_whose_epilog_was_killed_is_removed_by_the_service_within_one_interval(clean_lab):
    """What a SIGKILLed EpilogSlurmctld leaves (docs/slurm.md, cancel during the prolog): a
    partition with its creation record and no live job. Nobody runs reap: the service does."""
    from slurm_ipu.hooks.ledger import Ledger

    lab = clean_lab
    job = lab.sbatch("-o", "/dev/null", "--wrap", "true")
    wait_gone(lab, job)
    name = f"slurm_{job}"
    ledger = Ledger(lab.spec.path("state"))
    ledger.put(name, job_id=job, uid=0, hosts=["node1"], size=4, gcds=1)
    lab.run("vipu", "create", "partition", name, "--size", "4", check=True)
    wait_for("the service removed the orphan", lambda: name not in lab.partitions() and ledger.get(name) is None,
             labmod.REAP_INTERVAL + 20)
