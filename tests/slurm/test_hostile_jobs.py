"""Any user's bytes stop no clean-up: a job whose name, comment, work directory and output path
are not UTF-8 (no IPUs asked for), queued, held and running, while IPU jobs start and end around
it and the slurm-ipu service is restarted. Before, squeue's strict decode killed the service's removal
thread: the process stayed up holding its lock, nothing was removed again, and `status`,
`doctor` and the metrics ended in a traceback (a restarted service died again the same way)."""

from __future__ import annotations

import os
import time

from slurm_ipu import lab as labmod
from slurm_ipu.hooks import remover, stats

from .conftest import wait_for, wait_gone, wait_no_partitions

USER = "slurmipu-b"
# Undecodable bytes, half a UTF-8 sequence, control characters and a terminal escape: as a str
# with surrogates (os.fsdecode), which subprocess hands on as the raw bytes.
HOSTILE = os.fsdecode(b"bad\xff\xfename\xc3\x01\x1b[2J")


def submit(lab, *args: str) -> int:
    proc = lab.run_as(USER, "sbatch", "--parsable", *args)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip())


def service_pid(lab) -> int:
    return labmod.load_pids(lab.spec)["service"]["pid"]


def test_a_job_name_of_any_bytes_stops_no_clean_up(clean_lab, users):
    lab = clean_lab
    state = str(lab.spec.path("state"))
    workdir = lab.spec.path("users") / os.fsdecode(b"w\xff\xfe\x01")
    assert lab.run_as(USER, "mkdir", "-p", str(workdir)).returncode == 0
    fields = ("-J", HOSTILE, "--comment", HOSTILE, "-D", str(workdir), "-o", f"{workdir}/{HOSTILE}.out")
    held = submit(lab, "--hold", *fields, "--wrap", "true")
    running = submit(lab, *fields, "--wrap", "sleep 300")
    try:
        wait_for("the hostile job running", lambda: lab.state(running) == "RUNNING", 60)
        # A service started while they are queued reads them in its first full reap and health pass.
        labmod.stop_service(lab.spec)
        started = time.time()
        labmod.restart_service(lab.spec)
        pid = service_pid(lab)
        # IPU jobs end around them: each one's partition is removed a moment after its end.
        ipu_jobs = [lab.sbatch("--gres=ipu:4", "-o", "/dev/null", "--wrap", "true") for _ in range(3)]
        for job in ipu_jobs:
            wait_gone(lab, job)
        wait_no_partitions(lab, 30, "the IPU jobs' partitions removed")
        assert lab.state(held) == "PENDING" and lab.state(running) == "RUNNING"

        def passes() -> dict:
            return (stats.load(state) or stats.empty())["passes"]

        wait_for("the restarted service's reap and health passes ended", passes, 60,
                 until=lambda p: all(p.get(n, 0) >= started for n in ("reap", "health")))
        assert service_pid(lab) == pid and remover.holder(state) == (pid, remover.SERVICE)
        # Everyone who reads the queue says what it saw; none ends in a traceback.
        reap = lab.run("slurm-ipu", "reap", "--site", lab.site)  # answered by the service's removal thread
        assert reap.returncode == 0 and "Traceback" not in reap.stderr, reap.stdout + reap.stderr
        metrics = lab.run("slurm-ipu", "metrics", "--site", lab.site)
        assert 'slurm_ipu_source_up{source="jobs"} 1' in metrics.stdout, metrics.stdout + metrics.stderr
        status = lab.run("slurm-ipu", "status", "--site", lab.site)
        assert status.returncode == 0 and "Traceback" not in status.stderr, status.stdout + status.stderr
        doctor = lab.run("slurm-ipu", "doctor", "--site", lab.site, timeout=120)
        assert "Traceback" not in doctor.stderr and "printed something unexpected" not in doctor.stdout, \
            doctor.stdout + doctor.stderr
        assert any(ln.split()[:2] == ["ok", "service"] for ln in doctor.stdout.splitlines()), doctor.stdout
        log = lab.spec.path("state", "hooks.log").read_text(errors="replace")
        assert "thread died" not in log and "Traceback" not in log
        service_log = lab.spec.path("log", "service.log").read_text(errors="replace")
        assert "Exception in thread" not in service_log and "UnicodeDecodeError" not in service_log
    finally:
        lab.run("scancel", str(held), str(running))


def test_reap_as_a_user_is_one_line_naming_who_may(clean_lab, users):
    """The state directory is root's and SlurmUser's: a user's `slurm-ipu reap` (or --dry-run) is
    refused in one line that says who may run it, never a traceback."""
    lab = clean_lab
    for extra in ((), ("--dry-run",)):
        proc = lab.run_as(USER, "slurm-ipu", "reap", "--site", lab.site, *extra)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "permission denied" in lines[0] and "run it as root" in lines[0], lines
