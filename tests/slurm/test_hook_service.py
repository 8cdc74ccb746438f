"""No lost handoff (issue 23, item 6): the hook service SIGKILLed and restarted over and over
while a storm of IPU jobs starts and ends. A hook whose request the dead service took, or that
finds no service, runs in Python at once (slurm_ipu/hooks/transport.py): no job is requeued, no
wrapper waits out its bound, nothing is left behind."""

from __future__ import annotations

import random
import signal
import time

from slurm_ipu import lab as labmod

from .conftest import all_idle, wait_for

JOBS = 200


def test_a_service_killed_and_restarted_under_a_storm_loses_no_hook(clean_lab):
    lab = clean_lab
    rng = random.Random(23)
    jobs = [lab.sbatch("-N", "1", f"--gres=ipu:{rng.choice((1, 2, 4))}", "-o", "/dev/null", "--wrap",
                       f"sleep {rng.uniform(0, 0.5):.1f}") for _ in range(JOBS)]
    kills, deadline = 0, time.monotonic() + 600
    try:
        while time.monotonic() < deadline and lab.run("squeue", "-h", "-o", "%A").stdout.split():
            labmod.stop_reaper(lab.spec, signal.SIGKILL)
            kills += 1
            time.sleep(rng.uniform(0, 0.3))  # the storm runs on without a service for a moment
            labmod.restart_reaper(lab.spec)
            time.sleep(rng.uniform(0.2, 1.0))  # pacing, not synchronisation: the loop ends on the queue
    finally:
        labmod.restart_reaper(lab.spec)
    wait_for("every job out of the queue", lambda: not lab.run("squeue", "-h", "-o", "%A").stdout.split(), 120)
    assert kills >= 5, kills
    # one accounting record per job: none was requeued (sacct -D lists each requeued run). slurmdbd
    # hears of a job's end after slurmctld does: wait until it has every end (seen lagging under load).
    def runs() -> list[str]:
        return lab.run("sacct", "-D", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(map(str, jobs)),
                       check=True).stdout.split()

    wait_for("accounting has every job's end", lambda: not any(r.endswith(("|RUNNING", "|PENDING")) for r in runs()),
             60)
    final = runs()
    assert len(final) == JOBS and all(r.endswith("|COMPLETED") for r in final), [r for r in final
                                                                                if not r.endswith("|COMPLETED")]
    ctld = lab.spec.path("log", "slurmctld.log").read_text(errors="replace")
    assert "did not answer" not in ctld
    ours = {f"job {j}:" for j in jobs}
    log = [ln for ln in lab.spec.path("state", "hooks.log").read_text().splitlines()
           if any(tag in ln for tag in ours)]  # the session's lab: other tests' jobs are in it too
    assert not [ln for ln in log if "requeued" in ln or "did not answer" in ln], log
    wait_for("no partition left", lambda: lab.partitions() == {}, labmod.REAP_INTERVAL + 30)
    state = lab.spec.path("state")
    assert not list(state.glob("pending-removal/*.json")) and not (state / "prolog-requests").exists()
    wait_for("every node idle", lambda: all_idle(lab), 60)
