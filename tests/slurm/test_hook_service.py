"""No lost handoff: the slurm-ipu service SIGKILLed and restarted over and over
while a storm of IPU jobs starts and ends. A hook whose request the dead service took, or that
finds no service, runs in Python at once (slurm_ipu/hooks/transport.py): no job is requeued, no
wrapper waits out its bound, nothing is left behind."""

from __future__ import annotations

import random
import signal
import time

from slurm_ipu import lab as labmod

from .conftest import queue, wait_for, wait_idle, wait_no_partitions, wait_queue_empty

JOBS = 200


def test_a_service_killed_and_restarted_under_a_storm_loses_no_hook(clean_lab):
    lab = clean_lab
    rng = random.Random(23)
    jobs = [lab.sbatch("-N", "1", f"--gres=ipu:{rng.choice((1, 2, 4))}", "-o", "/dev/null", "--wrap",
                       f"sleep {rng.uniform(0, 0.5):.1f}") for _ in range(JOBS)]
    kills, deadline = 0, time.monotonic() + 600
    try:
        while time.monotonic() < deadline and queue(lab):
            labmod.stop_service(lab.spec, signal.SIGKILL)
            kills += 1
            time.sleep(rng.uniform(0, 0.3))  # the storm runs on without a service for a moment
            labmod.restart_service(lab.spec)
            time.sleep(rng.uniform(0.2, 1.0))  # pacing, not synchronisation: the loop ends on the queue
    finally:
        labmod.restart_service(lab.spec)
    wait_queue_empty(lab, 120, "every job out of the queue")
    assert kills >= 5, kills
    # one accounting record per job: none was requeued (sacct -D lists each requeued run). slurmdbd
    # hears of a job's end after slurmctld does: wait until it has every end (seen lagging under load).
    def runs() -> list[str]:
        return lab.run("sacct", "-D", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(map(str, jobs)),
                       check=True).stdout.split()

    # (a job slurmdbd has not heard of at all has no row yet: every job's row, none of them unfinished)
    final = wait_for("accounting has every job's end", runs, 60,
                     until=lambda rows: len(rows) >= JOBS and not any(r.endswith(("|RUNNING", "|PENDING"))
                                                                      for r in rows))
    assert len(final) == JOBS and all(r.endswith("|COMPLETED") for r in final), [r for r in final
                                                                                if not r.endswith("|COMPLETED")]
    ctld = lab.spec.path("log", "slurmctld.log").read_text(errors="replace")
    assert "did not answer" not in ctld
    ours = {f"job {j}:" for j in jobs}
    log = [ln for ln in lab.spec.path("state", "hooks.log").read_text().splitlines()
           if any(tag in ln for tag in ours)]  # the session's lab: other tests' jobs are in it too
    assert not [ln for ln in log if "requeued" in ln or "did not answer" in ln], log
    wait_no_partitions(lab, labmod.REAP_INTERVAL + 30, "no partition left")
    state = lab.spec.path("state")
    # the service drops a journal entry just after its removal: a moment after the partition is gone
    wait_for("no removal queued", lambda: sorted(p.name for p in state.glob("pending-removal/*.json")), 10,
             until=lambda queued: queued == [])
    assert not (state / "prolog-requests").exists()
    wait_idle(lab, 60, "every node idle")
