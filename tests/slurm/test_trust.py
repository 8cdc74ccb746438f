"""No job adopts a partition slurm-ipu did not create for it, and nothing of ours removes one
: a user who guesses the next job id and makes `slurm_<id>` first."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .conftest import SLURM_VERSION, wait_for, wait_gone, wait_no_partitions

pytestmark = pytest.mark.usefixtures("users")
VICTIM = "slurmipu-a"


def next_job_id(lab) -> int:
    probe = lab.sbatch("--hold", "-o", "/dev/null", "--wrap", "true")
    lab.run("scancel", str(probe), check=True)
    return probe + 1


def test_a_squatters_partition_is_neither_adopted_nor_removed(clean_lab):
    lab = clean_lab
    target = next_job_id(lab)
    squat = f"slurm_{target}"
    lab.run("vipu", "create", "partition", squat, "--size", "4", "--owner-uid", "4242", check=True)
    try:
        proc = lab.run_as(VICTIM, "sbatch", "--parsable", "--gres=ipu:4", "-o", "/dev/null", "--wrap", "sleep 60")
        assert proc.returncode == 0, proc.stderr
        job = int(proc.stdout.strip())
        assert job == target
        info = wait_for("the victim held for an admin", lambda: (lambda j: j if j.get("Reason") == "JobHeldAdmin"
                        and j.get("JobState") == "PENDING" else None)(lab.job(job)), 60)
        shown = lab.run("scontrol", "show", "job", str(job)).stdout
        assert "slurm-ipu did not create it for this job" in shown and "an admin must remove it" in shown, shown
        assert info.get("JobState") == "PENDING"
        lab.run("scancel", str(job), check=True)
        wait_gone(lab, job)
        reap = lab.run("slurm-ipu", "reap", "--site", lab.site)
        assert f"left alone {squat}" in reap.stdout, reap.stdout + reap.stderr
        part = lab.partitions()[squat]  # still there, still the squatter's
        assert part["spec"]["owner_uid"] == 4242
    finally:
        lab.run("vipu", "remove", "partition", squat)


def test_a_forged_licence_count_in_the_task_environment_sizes_nothing(clean_lab):
    """23.02+ puts SLURM_JOB_LICENSES in the task environment too, where a user can set it: the
    partition is sized from slurmctld's value in PrologSlurmctld, and tasks see their own."""
    lab = clean_lab
    proc = lab.run_as(VICTIM, "srun", "--export=ALL,SLURM_JOB_LICENSES=ipu:64", "--gres=ipu:4",
                      "bash", "-c", "echo $IPUOF_VIPU_API_PARTITION_ID $SLURM_JOB_ID")
    assert proc.returncode == 0, proc.stderr
    partition, job = proc.stdout.split()
    assert partition == f"slurm_{job}"
    log = lab.spec.path("state", "hooks.log").read_text()
    created = [line for line in log.splitlines() if f"partition {partition} ACTIVE" in line]
    assert created and all(", 4 IPUs," in line for line in created), created


def test_our_parser_reads_every_squeue_json_this_slurm_prints(clean_lab, request):
    """The one read-only query of reap, doctor and status, in each data_parser this release ships
    (22.05: its own format): a running IPU job, a held one and a finished one, read as
    `scontrol` shows them; the running job's partition is no orphan. --squeue-samples=DIR keeps
    each text (how tests/unit/fixtures/squeue was made)."""
    from slurm_ipu.hooks.reap import orphans
    from slurm_ipu.slurm import releases
    from slurm_ipu.slurm.commands import SqueueJob, parse_squeue

    lab = clean_lab
    done = lab.sbatch("-o", "/dev/null", "--wrap", "true")
    wait_for("the short job finished", lambda: lab.state(done) == "COMPLETED", 60)
    running = lab.sbatch("--gres=ipu:2", "-N", "2", "-o", "/dev/null", "--wrap", "sleep 120")
    held = lab.sbatch("--hold", "--gres=ipu:1", "-o", "/dev/null", "--wrap", "true")
    try:
        wait_for("the IPU job running", lambda: lab.state(running) == "RUNNING", 60)
        info = lab.job(running)
        keep = request.config.getoption("--squeue-samples")
        for fmt in releases.data_parsers(SLURM_VERSION) or ("",):
            text = lab.run("squeue", f"--json={fmt}" if fmt else "--json", check=True).stdout
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                Path(keep, f"{fmt or 'slurm-' + releases.release(SLURM_VERSION)}.json").write_text(text)
            jobs = parse_squeue(text)
            job = jobs[running]
            assert (job.state, job.user, job.nodes) == ("RUNNING", "root", info["NodeList"]), (fmt, job)
            assert job.start and abs(job.start - int(lab.run("date", "-d", info["StartTime"], "+%s").stdout)) <= 1
            assert (jobs[held].state, jobs[held].nodes) == ("PENDING", None), (fmt, jobs[held])
            # 22.05 lists finished jobs for MinJobAge; 24.11 and later leave them out
            assert jobs.get(done, SqueueJob(done, "COMPLETED", (), None, None, None)).state == "COMPLETED", fmt
            names = list(lab.partitions())
            assert names == [f"slurm_{running}"]
            assert orphans(names, {i: j.state for i, j in jobs.items()}, "slurm_") == [], fmt
    finally:
        lab.run("scancel", str(running), str(held), check=True)
        wait_gone(lab, running)


def test_a_job_user_cannot_take_ipus_around_slurm(clean_lab):
    """V-IPU only through Slurm: the lab's allocation is granted to the hooks'
    user alone, as docs/admin.md sets V-IPU up. Alice's own `vipu create partition hog --size 64`
    is refused, and Bob's IPU job runs; doctor tried the same as a job's user and says so."""
    lab = clean_lab
    alice, bob = "slurmipu-a", "slurmipu-b"
    proc = lab.run_as(alice, "vipu", "create", "partition", "hog", "--size", "64")
    assert proc.returncode != 0 and "PERMISSION_DENIED" in proc.stderr, proc.stdout + proc.stderr
    assert "may not create partitions in allocation default" in proc.stderr, proc.stderr
    assert "hog" not in lab.partitions()
    proc = lab.run_as(bob, "srun", "--gres=ipu:16", "-N", "4", "bash", "-c", "echo $IPUOF_VIPU_API_PARTITION_ID")
    assert proc.returncode == 0, proc.stderr
    assert all(line.startswith("slurm_") for line in proc.stdout.split()), proc.stdout
    # srun returns before the epilog ends: Bob's partition (the whole Pod) goes a moment later,
    # and doctor's own creates need room
    wait_no_partitions(lab, 60, "Bob's partition removed")
    doctor = lab.run("slurm-ipu", "doctor", timeout=120)
    line = [ln for ln in doctor.stdout.splitlines() if " grants " in ln]
    assert line and line[0].startswith("ok") and "may not create partitions in allocation" in line[0], doctor.stdout


def test_nobody_can_plant_another_user_s_ipurun_cache(clean_lab, tmp_path):
    """A user who guesses the next job id cannot take its executable cache: every place its name
    could be made by a user is tried, as a directory and as a link, and each is refused or never
    used; the victim's ipurun runs on a cache of its own, 0700, that nothing of the attacker's saw,
    and the job epilog removes it. Both users are non-root; ipurun is the lab's installed one."""
    from slurm_ipu.launcher import task

    lab = clean_lab
    attacker, victim = "slurmipu-a", "slurmipu-b"
    target = next_job_id(lab)
    ids = (target, target + 1)  # the victim's, and the next in case another submission came first
    bait = lab.spec.path("users", f"bait-{target}")  # the attacker's own directory, open to all
    planted = [Path(f"/tmp/ipurun-cache-{j}") for j in ids]  # where ipurun's cache used to be
    ours = [Path(task.JOB_CACHE_ROOT) / str(j) for j in ids]
    try:
        assert lab.run_as(attacker, "mkdir", "-m", "0777", str(bait), str(planted[0])).returncode == 0
        assert lab.run_as(attacker, "ln", "-s", str(bait), str(planted[1])).returncode == 0
        tries = [("mkdir", "-p", "-m", "0777", str(ours[0])), ("ln", "-s", str(bait), str(ours[1])),
                 ("ln", "-s", str(bait), task.JOB_CACHE_ROOT), ("ls", task.JOB_CACHE_ROOT)]
        for argv in tries:
            proc = lab.run_as(attacker, *argv)
            assert proc.returncode != 0 and not any(p.is_symlink() for p in ours), (argv, proc.stdout)
        probe = ('c="$POPDIST_EXECUTABLE_CACHE_PATH"; echo "CACHE $SLURM_JOB_ID $c $(stat -c "%U %a %F" "$c")" && '
                 'echo exe > "$c/exe.$SLURMD_NODENAME"')
        proc = lab.run_as(victim, "salloc", "-N2", "--gres=ipu:1", "ipurun", "--num-instances", "2",
                          "--num-replicas", "2", "--", "bash", "-c", probe, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rows = sorted(line.split(maxsplit=3) for line in proc.stdout.splitlines() if line.startswith("CACHE "))
        assert len(rows) == 2 and rows[0][1] == rows[1][1], proc.stdout
        job = int(rows[0][1])
        assert job in ids, f"the victim's job {job} is not one the attacker planted for ({ids})"
        cache = f"{task.JOB_CACHE_ROOT}/{job}"
        assert all(r[2:] == [cache, f"{victim} 700 directory"] for r in rows), proc.stdout
        assert sorted(os.listdir(bait)) == [] and sorted(os.listdir(planted[0])) == [], "written through a plant"
        wait_for(f"the job epilog to remove {cache}", lambda: not os.path.lexists(cache), 30)
    finally:
        for path in planted:
            if path.is_symlink():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)
        shutil.rmtree(bait, ignore_errors=True)
