"""Graphcore's allocation-per-job scripts, unchanged, on a lab whose site has `vipu.model:
allocation`: the prolog makes `c<jobid>` of the IPU-Machines of the
job's hosts, granted to its user; the job makes its own partitions in it (`vipu create partition
p${SLURM_JOB_ID} --allocation c${SLURM_JOB_ID} --size 16 --reconfigurable`, Graphcore's
graphcore-cloud-tools slurm_utils.py; PopRun's `--vipu-allocation`); whatever the ending, the
allocation and every partition in it are gone after the job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..waiting import wait_for
from .conftest import (
    ensure_users,
    parse_probe,
    probe_script,
    queue,
    started_lab,
    wait_gone,
    wait_idle,
    wait_queue_empty,
)

# graphcore-cloud-tools examples_utils/benchmarks/slurm_utils.py (configure_ipu_partition), as a
# job script: the job's own partition in the allocation the prolog made.
SLURM_UTILS = """#!/bin/bash
export IPUOF_VIPU_API_PARTITION_ID=p${SLURM_JOB_ID}
export ALLOCATION=c${SLURM_JOB_ID}
vipu create partition $IPUOF_VIPU_API_PARTITION_ID --allocation $ALLOCATION --size 16 --reconfigurable
vipu list partitions
"""


@pytest.fixture(scope="module")
def alab():
    with started_lab(nodes=4, model="allocation", poprun=True) as handle:  # install.poprun: Graphcore's scripts
        yield handle


@pytest.fixture
def clean(alab):
    wait_queue_empty(alab, 90, "no jobs left")
    yield alab
    jobs = queue(alab)
    if jobs:
        alab.run("scancel", *jobs)


def allocations(lab) -> set[str]:
    api = lab.admin()
    try:
        return {a["id"] for a in api.allocations()}
    finally:
        api.close()


def nothing_left(lab, job: int) -> None:
    wait_for(f"job {job}'s allocation and partitions removed", lambda: (allocations(lab), sorted(lab.partitions())),
             60, until=lambda seen: seen == ({"default"}, []))


def test_graphcore_s_slurm_utils_script_runs_unchanged_as_a_user(clean):
    lab = clean
    user = ensure_users()[0]
    script = lab.spec.path("users", "slurm_utils.sh")
    script.write_text(SLURM_UTILS)
    script.chmod(0o755)
    proc = lab.run_as(user, "sbatch", "--parsable", "--gres=ipu:4", "-o", "su-%j.out", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "4 IPUs per node raised to 16" in proc.stderr  # the host's every IPU-Machine is the job's
    job = int(proc.stdout.strip().split(";")[0])
    assert lab.job(job).get("Licenses", "").startswith("ipu:16") or lab.state(job) in ("COMPLETED", "GONE")
    wait_gone(lab, job)
    out = lab.spec.path("users", f"su-{job}.out").read_text()
    assert f"create partition (p{job}): success." in out, out
    row = next((line for line in out.splitlines() if f" p{job} " in line), out)
    assert f" c{job} " in row and " 16 " in row, row
    nothing_left(lab, job)


def test_ipurun_with_vipu_allocation_places_an_instance_on_each_host(clean):
    lab = clean
    probe = "bash -c 'echo RUN $SLURMD_NODENAME $IPUOF_VIPU_API_PARTITION_ID $IPUOF_VIPU_API_GCD_ID'"
    shape = "--num-instances=2 --num-replicas=8 --ipus-per-replica=4"
    script = ("#!/bin/bash\n"  # PopRun's spelling in Graphcore's scripts, then ours with the site's defaults
              f"ipurun --vipu-allocation=c${{SLURM_JOB_ID}} --vipu-partition=p${{SLURM_JOB_ID}} --update-partition=yes "
              f"{shape} {probe}\n"
              f"ipurun --update-partition=yes {shape} {probe}\n")
    job = lab.sbatch("-N2", "--gres=ipu:16", "-o", "ipurun-%j.out", script=script)
    wait_gone(lab, job, 120)
    out = lab.spec.path(f"ipurun-{job}.out").read_text()
    runs = sorted(line.split()[1:] for line in out.splitlines() if line.startswith("RUN "))
    # the second run, on the job's own name: its step's partition, as a plain srun's (slurm_<job>_<step>)
    step = next((r[1] for r in runs if r[1].startswith(f"slurm_{job}_")), "none")
    assert sorted(r[1:] for r in runs) == [[f"p{job}", "0"], [f"p{job}", "1"], [step, "0"], [step, "1"]], out
    assert len({r[0] for r in runs}) == 2, out  # one instance on each host
    nothing_left(lab, job)


# graphcore-cloud-tools examples_utils/benchmarks/slurm_utils.py (configure_ipu_partition), the
# multi-host form, verbatim but for the site's subnet and a command that reports each instance.
EXAMPLES_UTILS = """#!/bin/bash
export IPUOF_VIPU_API_PARTITION_ID=p${SLURM_JOB_ID}
export ALLOCATION=c${SLURM_JOB_ID}
export RNIC_SUBNET_MASK=127.0.0.0/8
poprun --host=$SLURM_JOB_NODELIST --num-ilds 1 --num-instances=2 --vipu-allocation=$ALLOCATION \\
       --mpi-global-args="--mca oob_tcp_if_include $RNIC_SUBNET_MASK --mca btl_tcp_if_include $RNIC_SUBNET_MASK" \\
       --num-replicas=8 --ipus-per-replica=4 --update-partition=yes \\
       bash -c 'echo RUN $SLURMD_NODENAME $IPUOF_VIPU_API_PARTITION_ID $POPDIST_INSTANCE_INDEX'
"""


def test_graphcore_s_poprun_line_runs_unchanged_where_the_site_names_ipurun_poprun(clean):
    """install.poprun: `poprun` is ipurun, so the script runs as written."""
    lab = clean
    job = lab.sbatch("-N2", "--gres=ipu:16", "-o", "poprun-%j.out", script=EXAMPLES_UTILS)
    wait_gone(lab, job, 120)
    out = lab.spec.path(f"poprun-{job}.out").read_text()
    runs = sorted(line.split()[1:] for line in out.splitlines() if line.startswith("RUN "))
    assert [r[1:] for r in runs] in ([[f"p{job}", "0"], [f"p{job}", "1"]], [[f"p{job}", "1"], [f"p{job}", "0"]]), out
    assert len({r[0] for r in runs}) == 2, out  # one instance on each host
    nothing_left(lab, job)


def test_a_cancel_removes_the_allocation_and_the_partitions_the_job_made(clean):
    lab = clean
    job = lab.sbatch("-N1", "--gres=ipu:16", "-o", "/dev/null",
                     script=SLURM_UTILS.replace("vipu list partitions", "sleep 300"))
    wait_for(f"p{job} made in c{job}", lambda: f"p{job}" in lab.partitions(), 60)
    assert lab.partitions()[f"p{job}"]["spec"]["allocation"] == f"c{job}"
    status = lab.run("slurm-ipu", "status", check=True).stdout
    assert "16 in allocations" in status and any(line.startswith(f"c{job} ") for line in status.splitlines()), status
    doctor = lab.run("slurm-ipu", "doctor")  # its canary takes a machine no job holds, and gives it back
    assert doctor.returncode == 0 and "1-IPU-Machine allocation" in doctor.stdout, doctor.stdout + doctor.stderr
    assert allocations(lab) == {"default", f"c{job}"}
    wait_for("the job's allocation named in scontrol show job", lambda: lab.job(job).get("AdminComment"), 30,
             until=lambda note: note == f"slurm-ipu:allocation=c{job},ipus=16")
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job)
    nothing_left(lab, job)


def test_a_storm_of_jobs_cancels_and_time_limits_leaves_nothing(clean):
    lab = clean
    jobs = []
    for k in range(24):
        nodes = 1 + k % 2
        body = SLURM_UTILS.replace("--size 16", f"--size {16 * nodes}") + ("sleep 120\n" if k % 6 == 0 else "")
        extra = ["--time=1"] if k % 6 == 0 else []
        jobs.append(lab.sbatch(f"-N{nodes}", "--gres=ipu:16", "-o", "/dev/null", *extra, script=body))
    # the whole Pod: the same machines as the cluster file's allocation, which it nests in
    whole = lab.sbatch("-N4", "--gres=ipu:16", "-o", "/dev/null", script=SLURM_UTILS.replace("--size 16", "--size 64"))
    for job in jobs[3::5]:
        lab.run("scancel", str(job))
    for job in jobs:
        wait_gone(lab, job, 240)
    done = wait_for(f"the whole Pod's job {whole} ended", lambda: lab.job(whole), 240,
                    until=lambda info: info.get("JobState", "COMPLETED") not in ("PENDING", "RUNNING", "COMPLETING"))
    assert done.get("JobState", "COMPLETED") == "COMPLETED", done  # {}: slurmctld forgot it, after it completed
    nothing_left(lab, whole)
    wait_idle(lab)


# --- a partition per step ---------------------------------------------

def four_steps(probe: str, barrier: str) -> str:
    """Four concurrent 4-IPU steps, as GPU users run a sweep; each waits (bounded) until all four
    run, then reports its partition, attaches, and lists what V-IPU holds at that moment."""
    other = "$([ $SLURMD_NODENAME = node1 ] && echo node2 || echo node1)"  # the job's other host
    step = (f"touch {barrier}/$SLURM_STEP_ID; for i in $(seq 300); do [ $(ls {barrier} | wc -l) -ge 4 ] && break; "
            f"sleep 0.1; done; {probe}; "
            f"echo \"CROSS $({sys.executable} -m slurm_ipu.emulator.main attach --hostname {other} 2>&1)\"; "
            "vipu list partitions | while read -r row; do echo \"LIST $SLURM_STEP_ID $row\"; done")
    return ("#!/bin/bash\n"
            f"for k in 1 2 3 4; do srun -N1 -n1 --gres=ipu:4 --exclusive bash -c '{step}' & done\n"
            "wait\n")


def test_four_concurrent_steps_get_four_partitions_of_their_own_gone_after(clean):
    """The acceptance's four 4-IPU steps: four distinct 4-IPU partitions in the job's allocation,
    each over its own step's host, each attached from its own step, all there at once, none left."""
    lab = clean
    barrier = lab.spec.path("users", "steps-barrier")
    barrier.mkdir(mode=0o777)
    job = lab.sbatch("-N2", "--ntasks-per-node=2", "--gres=ipu:16", "-o", "steps-%j.out",
                     script=four_steps(probe_script(lab), str(barrier)))
    wait_gone(lab, job, 120)
    out = lab.spec.path(f"steps-{job}.out").read_text()
    probes, attaches = parse_probe(out)
    names = sorted(p[4] for p in probes)
    assert len(probes) == 4 and len(set(names)) == 4, out
    assert all(n.startswith(f"slurm_{job}_") for n in names), names
    assert sorted(a["partition"] for a in attaches) == names and all(len(a["ipus"]) == 4 for a in attaches), out
    rows = [line.split() for line in out.splitlines() if line.startswith("LIST ") and f" slurm_{job}_" in line]
    seen_at_once = max(sum(1 for r in rows if r[1] == s) for s in {r[1] for r in rows})
    assert seen_at_once == 4, out  # all four partitions existed while the steps ran together
    assert all(r[r.index("|") + 1] == f"c{job}" and " 4 " in " ".join(r) for r in rows), rows
    hosts = {p[4]: p[0] for p in probes}
    assert all(h in ("node1", "node2") for h in hosts.values()) and len(set(hosts.values())) == 2, hosts
    cross = [line for line in out.splitlines() if line.startswith("CROSS ")]
    assert len(cross) == 4 and all("may not attach to partition" in line for line in cross), cross  # other host
    nothing_left(lab, job)


def test_a_cancelled_step_s_partition_goes_with_it_while_the_job_runs(clean):
    lab = clean
    job = lab.sbatch("-N1", "--gres=ipu:16", "-o", "/dev/null",
                     script="#!/bin/bash\nsrun -n1 --gres=ipu:8 sleep 300\nsleep 300\n")
    name = f"slurm_{job}_0"
    wait_for(f"{name} made for the step", lambda: name in lab.partitions(), 60)
    assert lab.partitions()[name]["spec"]["size"] == 8 and lab.partitions()[name]["spec"]["allocation"] == f"c{job}"
    lab.run("scancel", f"{job}.0", check=True)
    wait_for(f"{name} removed when its step was cancelled", lambda: name not in lab.partitions(), 60)
    assert lab.state(job) == "RUNNING"
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job)
    nothing_left(lab, job)


# A user on a login node making partitions in their job's allocation as fast as they can, until
# told to stop (bounded: 120 s).
CREATE_LOOP = """i=0
while [ ! -e {stop} ] && [ $SECONDS -lt 120 ]; do
  vipu create partition z{job}_$i --allocation c{job} --size 1 >/dev/null 2>&1 && echo "made z{job}_$i"
  i=$((i+1))
done
"""


def test_a_user_s_creates_in_the_job_s_allocation_cannot_keep_it_past_the_job(clean):
    """Two such loops kept c<job> and its IPUs past the job (the epilog listed
    and removed its partitions, the loop made new ones, and the allocation could not go); the
    user still attached after the job. The removal now first takes the user's grant away: while
    the loop still runs, the allocation goes within the epilog's deadline, and nothing the user
    made in it can be attached after."""
    lab = clean
    user = ensure_users()[0]
    proc = lab.run_as(user, "sbatch", "--parsable", "-N1", "--gres=ipu:16", "-o", "/dev/null", "--wrap", "sleep 300")
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip().split(";")[0])
    wait_for(f"job {job} running", lambda: lab.state(job) == "RUNNING", 60)
    stop = lab.spec.path("users", f"stop-{job}")
    loop = lab.popen_as(user, "bash", "-c", CREATE_LOOP.format(stop=stop, job=job), stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL)
    try:
        made = loop.stdout.readline().split()  # its first partition: the loop is at work
        assert made == ["made", f"z{job}_0"], made
        lab.run("scancel", str(job), check=True)
        wait_gone(lab, job)
        wait_for(f"c{job} removed while the user's loop runs", lambda: f"c{job}" not in allocations(lab), 60)
        assert loop.poll() is None, "the loop ended before the allocation went: the test proved nothing"
        attach = lab.run_as(user, "env", f"IPUOF_VIPU_API_PARTITION_ID=z{job}_0", "vipu-emu", "attach")
        assert attach.returncode != 0, attach.stdout
    finally:
        stop.touch()
        loop.wait(30)
        stop.unlink()
    nothing_left(lab, job)


def test_graphcore_s_exported_partition_reaches_plain_srun_and_srun_alone_gets_one(clean):
    """Item 2: `export IPUOF_VIPU_API_PARTITION_ID=p$JOB` after making it in the job's allocation
    reaches the tasks of a plain srun (it used to be replaced by slurm_<job>, which did not exist);
    without it, `srun --ipus=N` (the job's own N) and plain srun each get a partition made for them."""
    lab = clean
    probe = lab.spec.path("users", "users-probe")  # what a user can run: the lab's own vipu-emu
    probe.write_text("#!/bin/bash\necho PROBE $SLURMD_NODENAME $SLURM_PROCID - - $IPUOF_VIPU_API_PARTITION_ID\n"
                     'echo "ATTACH $(vipu-emu attach 2>&1)"\n')
    probe.chmod(0o755)
    script = ("#!/bin/bash\n"
              f"srun --ipus=16 {probe}\n"
              f"srun {probe}\n"
              "vipu create partition p$SLURM_JOB_ID --allocation c$SLURM_JOB_ID --size 16\n"
              "export IPUOF_VIPU_API_PARTITION_ID=p$SLURM_JOB_ID\n"
              f"srun {probe}\n")
    user = ensure_users()[0]
    path = lab.spec.path("users", "exported.sh")
    path.write_text(script)
    path.chmod(0o755)
    proc = lab.run_as(user, "sbatch", "--parsable", "--ipus=16", "-N1", "-o", "exported-%j.out", str(path))
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip().split(";")[0])
    wait_gone(lab, job, 120)
    out = lab.spec.path("users", f"exported-{job}.out").read_text()
    probes, attaches = parse_probe(out)
    assert [p[4] for p in probes] == [f"slurm_{job}_0", f"slurm_{job}_1", f"p{job}"], out
    assert [a["partition"] for a in attaches] == [p[4] for p in probes], out
    assert all(len(a["ipus"]) == 16 for a in attaches), out
    nothing_left(lab, job)


def hand_pass(lab, line: str) -> None:
    """An admin's `slurm-ipu health` says `line` (a line starting so), unless the lab's hook
    service's own pass (every health.interval) did it first: then the hand pass has nothing to
    change. Either way what Slurm then shows is the test's to check."""
    out = lab.run("slurm-ipu", "health", check=True).stdout
    assert any(said.startswith(line) for said in out.splitlines()) or out.startswith("health: nothing to change"), out


def test_a_failed_ipu_machine_drains_its_host_until_it_is_back_and_an_admin_s_drain_stays(clean):
    """Node2's IPU-Machines are ag4-ag7. One going down drains
    node2 with a reason naming it, so a job needing node2 waits in the queue (no prolog, no restart)
    instead of failing on the machine; back up, node2 is resumed and the job runs. node4, drained
    by an admin, is neither drained over nor resumed."""
    lab = clean
    emu = ["vipu-emu", "fault", "--state-dir", str(lab.spec.path("vipu-emu")), "agent", "ag5"]
    lab.run(*emu, "down", check=True)
    lab.run("scontrol", "update", "NodeName=node4", "State=DRAIN", "Reason=admin: cabling", check=True)
    try:
        hand_pass(lab, "health: drain node2: slurm-ipu: IPU-Machine ag5 down")
        node = lab.run("scontrol", "show", "node", "node2", check=True).stdout
        assert "DRAIN" in node and "Reason=slurm-ipu: IPU-Machine ag5 down" in node, node
        job = lab.sbatch("-N1", "-w", "node2", "--gres=ipu:16", "-o", "/dev/null", script="#!/bin/bash\ntrue\n")
        wait_for(f"job {job} pending for nodes, not started", lambda: lab.job(job).get("Reason"), 30,
                 until=lambda reason: reason not in (None, "None", "Priority"))
        assert lab.state(job) == "PENDING" and lab.job(job).get("Restarts") == "0", lab.job(job)
        lab.run(*emu, "up", check=True)
        hand_pass(lab, "health: resume node2")
        wait_gone(lab, job, 120)
        assert "Reason=admin: cabling" in lab.run("scontrol", "show", "node", "node4", check=True).stdout
        assert lab.run("slurm-ipu", "health", check=True).stdout.startswith("health: nothing to change")
    finally:
        lab.run(*emu, "up")
        lab.run("scontrol", "update", "NodeName=node2,node4", "State=RESUME")
    nothing_left(lab, job)


def drains_in_flight() -> list[int]:
    """scontrol processes still asking for a drain: a SIGKILLed service's children go on retrying
    while slurmctld is down, and land their drain when it is back."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"scontrol") and b"State=DRAIN" in argv:
            found.append(int(proc.name))
    return found


def ours_drained(lab) -> list[str]:
    """The nodes Slurm shows drained with the health pass's reason."""
    from slurm_ipu.hooks.health import drained_by_us

    nodes = {}
    for line in lab.run("sinfo", "-N", "-h", "-o", "%N|%T|%E", check=True).stdout.splitlines():
        name, state, reason = (line.split("|", 2) + ["", ""])[:3]
        nodes[name] = (state, reason)
    return drained_by_us(nodes)


@pytest.mark.parametrize("killed", ["slurm-ipu service", "slurmctld"])
def test_a_health_pass_killed_between_its_drains_leaves_no_drain_once_the_machines_are_back(clean, killed):
    """Three hosts' IPU-Machines go down; the slurm-ipu service's pass (the first of a started service)
    drains node2, node3 and node4, one scontrol each, and is SIGKILLed, or slurmctld is, right
    after it says its first drain. Once the machines are Up, the next pass lifts every drain of
    its own whether it had recorded it or not, and no node stays drained: before, the record was
    written after the last drain, and a node drained before the kill stayed drained for ever."""
    import os
    import signal

    from slurm_ipu import lab as labmod
    from slurm_ipu.hooks import health
    from slurm_ipu.lab.daemons import start_slurm

    lab = clean
    emu = ["vipu-emu", "fault", "--state-dir", str(lab.spec.path("vipu-emu")), "agent"]
    log = lab.spec.path("state", "hooks.log")
    labmod.stop_service(lab.spec)
    for agent in ("ag5", "ag9", "ag13"):   # node2, node3, node4
        lab.run(*emu, agent, "down", check=True)
    try:
        seen = len(log.read_text(errors="replace")) if log.exists() else 0
        labmod.restart_service(lab.spec)   # its first health pass is at its start
        wait_for("the pass's first drain", lambda: "health: drain node" in log.read_text(errors="replace")[seen:],
                 30, interval=0.01)
        if killed == "slurm-ipu service":
            labmod.stop_service(lab.spec, signal.SIGKILL)
        else:
            pids = labmod.load_pids(lab.spec)
            os.kill(pids["slurmctld"]["pid"], signal.SIGKILL)
            wait_for("slurmctld gone", lambda: not labmod._running(pids["slurmctld"]), 15)
            # the pass's next scontrol fails; the service is stopped so that no pass of the old
            # view of the machines is still under way when slurmctld is back
            labmod.stop_service(lab.spec)
            pids = labmod.load_pids(lab.spec)
            start_slurm(lab.spec, pids)   # the lab's own restart, keeping its saved state
            labmod.save_pids(lab.spec, pids)
            wait_for("slurmctld answering", lambda: lab.run("scontrol", "ping").returncode == 0, 30)
        for agent in ("ag5", "ag9", "ag13"):
            lab.run(*emu, agent, "up", check=True)
        labmod.restart_service(lab.spec)   # as systemd would: its first pass sees the machines Up
        # (a slurmctld killed before its state save may have forgotten the drain itself: the
        # record is then emptied by the restarted service's pass a moment later; and a drain the
        # killed pass's scontrol still had in flight lands when slurmctld is back, after that
        # pass: the next one lifts it, here an admin's `slurm-ipu health`, which an unlifted drain
        # would outlive)
        wait_for("no drain of the killed pass still in flight", drains_in_flight, 60, until=lambda n: n == [])

        def lifted():
            if ours_drained(lab):
                lab.run("slurm-ipu", "health")
            return ours_drained(lab), health.drained_nodes(str(lab.spec.path("state")))

        wait_for("no node drained by the health pass, none recorded", lifted, 60, interval=1.0,
                 until=lambda now: now == ([], {}))
        # No "every node idle" here: a slurmctld SIGKILLed before its state save restores the
        # nodes as it last saved them, an earlier test's admin drain among them (seen on 24.11:
        # node4 "admin: cabling", resumed before the kill); those are Slurm's, not the pass's.
    finally:
        for agent in ("ag5", "ag9", "ag13"):
            lab.run(*emu, agent, "up")
        labmod.restart_service(lab.spec)
        lab.run("scontrol", "update", "NodeName=node[1-4]", "State=RESUME")


def test_another_user_cannot_take_a_job_s_step_partition_name(clean):
    """Inside their own job's allocation a user made `slurm_<the next job>_0` first (the site kept
    only the allocation prefix to the hooks), and the victim's first step then failed. Refused now,
    and the victim's step gets its partition."""
    lab = clean
    attacker, victim = ensure_users()
    probe = lab.sbatch("--hold", "-o", "/dev/null", "--wrap", "true")
    lab.run("scancel", str(probe), check=True)
    mine, theirs = probe + 1, probe + 2
    take = f"vipu create partition slurm_{theirs}_0 --allocation c{mine} --size 4; echo rc=$?"
    proc = lab.run_as(attacker, "sbatch", "--parsable", "-N1", "-w", "node1", "--gres=ipu:16", "-o",
                      str(lab.spec.path("users", f"take-{mine}.out")), "--wrap", take)
    assert proc.returncode == 0 and int(proc.stdout.strip()) == mine, proc.stdout + proc.stderr
    wait_gone(lab, mine, 90)
    said = lab.spec.path("users", f"take-{mine}.out").read_text()
    assert "rc=0" not in said and f"partition name slurm_{theirs}_0 is reserved" in said, said
    out = lab.spec.path("users", f"steps-{theirs}.out")
    proc = lab.run_as(victim, "sbatch", "--parsable", "-N1", "-w", "node2", "--gres=ipu:16", "-o", str(out),
                      "--wrap", "srun -n1 --gres=ipu:4 bash -c 'echo STEP $IPUOF_VIPU_API_PARTITION_ID "
                                "$(vipu-emu attach >/dev/null 2>&1 && echo attached)'")
    assert proc.returncode == 0 and int(proc.stdout.strip()) == theirs, proc.stdout + proc.stderr
    wait_gone(lab, theirs, 90)
    assert f"STEP slurm_{theirs}_0 attached" in out.read_text(), out.read_text()
    nothing_left(lab, theirs)


# ipurun as a user, in an allocation-model batch script: on the job's own name (which names no
# partition in this model, and which no user may make) and on Graphcore's p$SLURM_JOB_ID, with
# each piece of its advice followed.
USER_PROBE = """#!/bin/bash
echo "PROBE $SLURMD_NODENAME $POPDIST_INSTANCE_INDEX $IPUOF_VIPU_API_PARTITION_ID $IPUOF_VIPU_API_GCD_ID"
echo "ATTACH $(vipu-emu attach 2>&1)"
"""
IPURUN_ADVICE = """#!/bin/bash
echo "== own2"; ipurun --num-instances 2 --num-replicas 8 {probe}; echo "rc=$?"
echo "== own4"; ipurun --num-instances 4 --num-replicas 8 {probe}; echo "rc=$?"
echo "== ilds"; ipurun --num-instances 2 --num-replicas 8 --num-ilds 2 {probe}; echo "rc=$?"
vipu create partition p$SLURM_JOB_ID --allocation c$SLURM_JOB_ID --size 8 --num-gcds 4 >/dev/null; echo "made=$?"
export IPUOF_VIPU_API_PARTITION_ID=p$SLURM_JOB_ID
echo "== mine2"; ipurun --num-instances 2 --num-replicas 8 {probe}; echo "rc=$?"
echo "== advice-instances"; ipurun --num-instances 4 --num-replicas 8 {probe}; echo "rc=$?"
echo "== advice-update"; ipurun --num-instances 2 --num-replicas 8 --update-partition=yes {probe}; echo "rc=$?"
echo "== again"; ipurun --num-instances 2 --num-replicas 8 {probe}; echo "rc=$?"
"""


def user_probe(lab) -> str:
    """A probe a user runs: the lab's own vipu-emu on PATH, not root's interpreter."""
    probe = lab.spec.path("users", "alloc-probe")
    if not probe.exists():
        probe.write_text(USER_PROBE)
        probe.chmod(0o755)
    return str(probe)


def user_script(lab, name: str, text: str, nodes: str) -> tuple[int, dict[str, str]]:
    """`text` (its {probe} filled in) as a user's batch job of 16 IPUs per node on `nodes`, run to
    its end: (the job, its output's sections)."""
    script = lab.spec.path("users", f"{name}.sh")
    script.write_text(text.format(probe=user_probe(lab)))
    script.chmod(0o755)
    proc = lab.run_as(ensure_users()[0], "sbatch", "--parsable", nodes, "--gres=ipu:16", "-o", f"{name}-%j.out",
                      str(script))
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip())
    wait_gone(lab, job, 180)
    return job, sections(lab.spec.path("users", f"{name}-{job}.out").read_text())


def sections(text: str) -> dict[str, str]:
    out, name = {}, ""
    for line in text.splitlines():
        if line.startswith("== "):
            name = line[3:]
        else:
            out[name] = out.get(name, "") + line + "\n"
    return out


def test_ipurun_as_a_user_runs_on_the_job_s_own_name_and_its_advice_works_when_followed(clean):
    """On the job's own name each run's step gets a partition of its own (slurm_<job>_<step>, one
    GCD per instance); on p$SLURM_JOB_ID of 4 GCDs, 2 instances are refused with two pieces of
    advice, and each, followed, runs, as does the next plain run; nothing is left after the job."""
    lab = clean
    job, got = user_script(lab, "advice", IPURUN_ADVICE, "-N2")

    def attached(name: str) -> list[tuple[str, str, int]]:
        assert "rc=0" in got[name], got[name]
        return sorted((a["partition"], a.get("gcd", ""), len(a["ipus"])) for a in parse_probe(got[name])[1])

    own2, own4 = attached("own2"), attached("own4")
    assert [(g, n) for _, g, n in own2] == [("0", 16), ("1", 16)] and len({p for p, _, _ in own2}) == 1, got
    assert own2[0][0].startswith(f"slurm_{job}_"), own2
    assert [(g, n) for _, g, n in own4] == [(str(k), 8) for k in range(4)] and own4[0][0] != own2[0][0], own4
    assert "rc=2" in got["ilds"] and "--num-ilds 2: this run's partition" in got["ilds"], got["ilds"]
    assert "made=0" in got["ilds"]
    said = got["mine2"]
    assert "rc=2" in said and "use --num-instances 4, or --update-partition=yes to recreate it with 2 GCD(s)" in said
    assert attached("advice-instances") == [(f"p{job}", str(k), 2) for k in range(4)]
    assert attached("advice-update") == [(f"p{job}", "0", 4), (f"p{job}", "1", 4)]
    assert attached("again") == [(f"p{job}", "0", 4), (f"p{job}", "1", 4)]
    nothing_left(lab, job)


SUBSET_STEPS = """#!/bin/bash
echo "== 23"; srun -N2 -n2 -w node[2-3] {probe}; echo "rc=$?"
echo "== 34"; srun -N2 -n2 -w node[3-4] {probe}; echo "rc=$?"
echo "== none"; srun -N2 -n2 -w node[2-3] --gres=none hostname; echo "rc=$?"
"""


def test_a_step_on_hosts_v_ipu_cannot_partition_is_refused_and_its_advice_works(clean):
    """In a job on node[1-4] a step on node[2-3] would need ag4-ag11, no aligned block: refused in
    one line of ours (before Slurm's) naming the groups that work; each piece of advice, followed
    (node[3-4]; --gres=none for a step without IPUs), runs."""
    lab = clean
    job, got = user_script(lab, "subset", SUBSET_STEPS, "-N4")
    refused = got["23"].splitlines()
    assert "rc=0" not in got["23"] and refused[0] == (
        f"slurm-ipu: step {job}.0 on node[2-3]: V-IPU makes one partition of 2 hosts' IPU-Machines only where they "
        "are an aligned block (docs/vipu.md, \"Where a partition's IPUs may sit\"): run it on node[1-2] or node[3-4] "
        "(srun -w), on all the job's nodes, or with --gres=none if it needs no IPUs"), got["23"]
    assert "PROBE" not in got["23"], got["23"]
    assert "rc=0" in got["34"], got["34"]
    attaches = parse_probe(got["34"])[1]
    assert [a.get("partition") for a in attaches] == [f"slurm_{job}_1"] * 2, got["34"]
    assert "rc=0" in got["none"] and got["none"].count("\n") == 3, got["none"]  # two hostnames and rc
    nothing_left(lab, job)
