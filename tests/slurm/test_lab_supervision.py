"""The lab supervises its slurm-ipu service as systemd does on a site (Restart=always: the service
ends itself with exit 1 when one of its threads dies, slurm_ipu/hooks/service.py): a service that
dies without the lab asking is started again, takes the remover's role, and IPU jobs keep getting
and losing their partitions; a drill's kill through the lab (stop_service with SIGKILL) is not
undone until the test restarts it."""

from __future__ import annotations

import os
import signal

import pytest

from slurm_ipu import lab as labmod
from slurm_ipu.hooks import remover

from .conftest import wait_for, wait_gone, wait_idle, wait_no_partitions

pytestmark = pytest.mark.slurm


def _service(lab) -> tuple[int, str] | None:
    return remover.holder(str(lab.spec.path("state")))


def test_a_service_that_dies_on_its_own_is_started_again_and_ipu_jobs_clean_up(clean_lab, capsys):
    lab = clean_lab
    before = labmod.load_pids(lab.spec)["service"]["pid"]
    assert _service(lab) == (before, remover.SERVICE)
    os.kill(before, signal.SIGKILL)  # not through the lab: a death it did not ask for
    after = wait_for("a new service in the remover's role", lambda: _service(lab), 30,
                     until=lambda who: who is not None and who[0] != before and remover.is_service(who))
    assert labmod.load_pids(lab.spec)["service"]["pid"] == after[0]
    capsys.readouterr()
    assert labmod.status(lab.spec) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("service "))
    assert f"pid {after[0]}" in line and "running (restarted 1 times after a failure, last: killed by SIGKILL)" in line
    job = lab.sbatch("--gres=ipu:4", "-o", "/dev/null", "--wrap", "true")
    wait_gone(lab, job)
    wait_no_partitions(lab, 60, f"job {job}'s partition removed")
    wait_idle(lab)


def test_a_drills_kill_through_the_lab_stays_dead_until_restarted(clean_lab):
    lab = clean_lab
    pids = labmod.load_pids(lab.spec)
    service, supervisor = pids["service"], pids["supervisor"]
    try:
        labmod.stop_service(lab.spec, signal.SIGKILL)
        # nobody is left to start it again: the service and its supervisor are both gone
        assert not labmod._running(service) and not labmod._running(supervisor)
        assert _service(lab) is None and "service" not in labmod.load_pids(lab.spec)
    finally:
        labmod.restart_service(lab.spec)
    again = labmod.load_pids(lab.spec)["service"]["pid"]
    assert again != service["pid"] and _service(lab) == (again, remover.SERVICE)
