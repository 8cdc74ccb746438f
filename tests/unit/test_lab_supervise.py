"""The lab's supervisor of the slurm-ipu service (slurm_ipu/lab/supervise.py) does what systemd's
Restart=always and StartLimitBurst do on a site: a service that fails is started again after a
delay, at most --burst times within --interval, then it gives up and says so; a stop (SIGTERM)
reaches the service and restarts nothing; a let-go (SIGUSR1) leaves a killed service dead.
Real processes: a small Python child stands for `slurm-ipu service`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from slurm_ipu.fsutil import pid_alive

from ..waiting import wait_for

SUPERVISE = [sys.executable, "-m", "slurm_ipu.lab.supervise"]
# A service that runs until a signal: SIGTERM is its clean stop (exit 0), as the slurm-ipu service's.
SERVICE = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(120)"


def supervise(tmp_path: Path, child: str, *flags: str) -> tuple[subprocess.Popen, Path]:
    record = tmp_path / "reaper.json"
    proc = subprocess.Popen([*SUPERVISE, "--record", str(record), "--delay", "0.05", *flags, "--",
                             sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, record


def read(record: Path) -> dict:
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return {}


def service_pid(record: Path) -> int | None:
    return (read(record).get("service") or {}).get("pid")


def test_a_failing_service_is_restarted_then_given_up_on_as_systemd_does(tmp_path):
    proc, record = supervise(tmp_path, "import sys; sys.exit(1)", "--burst", "3", "--interval", "60")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    doc = read(record)
    assert (doc["state"], doc["restarts"], doc["last_exit"]) == ("gave-up", 3, "exit 1"), doc
    lines = err.splitlines()
    assert len([ln for ln in lines if "starting it again in 0.05 s" in ln]) == 3, err
    assert "3 restarts within 60 s already; giving up" in lines[-1], err


def test_a_killed_service_is_restarted_and_sigterm_stops_both_for_good(tmp_path):
    proc, record = supervise(tmp_path, SERVICE)
    try:
        first = wait_for("the service started", lambda: service_pid(record), 15)
        os.kill(first, signal.SIGKILL)  # a death nobody asked for
        second = wait_for("a new service", lambda: service_pid(record), 15,
                          until=lambda pid: pid not in (None, first) and pid_alive(pid))
        assert read(record)["restarts"] == 1 and read(record)["last_exit"] == "killed by SIGKILL"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert not pid_alive(second)
        assert (read(record)["state"], read(record)["service"]["pid"]) == ("stopped", second)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_let_go_leaves_a_killed_service_dead(tmp_path):
    proc, record = supervise(tmp_path, SERVICE)
    try:
        pid = wait_for("the service started", lambda: service_pid(record), 15)
        proc.send_signal(signal.SIGUSR1)
        wait_for("the supervisor let go", lambda: read(record).get("state"), 15, until=lambda s: s == "let-go")
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        doc = read(record)
        assert (doc["state"], doc["restarts"], doc["service"]["pid"]) == ("stopped", 0, pid), doc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_clean_exit_is_a_stop_not_a_failure(tmp_path):
    proc, record = supervise(tmp_path, "pass")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and read(record)["state"] == "stopped" and read(record)["restarts"] == 0, err
