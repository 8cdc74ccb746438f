"""The shared helpers: atomic writes, polling to a deadline, process identity."""

from __future__ import annotations

import os
import subprocess
import time

from slurm_ipu.fsutil import atomic_write, pid_alive, poll, process_token, same_process


def test_atomic_write_sets_the_mode_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "f"
    atomic_write(path, "one")
    atomic_write(path, b"two", 0o600, durable=True)
    assert path.read_text() == "two" and path.stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["f"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path, mocker):
    path = tmp_path / "f"
    atomic_write(path, "old")
    mocker.patch("slurm_ipu.fsutil.os.replace", side_effect=OSError("disk full"))
    try:
        atomic_write(path, "new")
    except OSError:
        pass
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["f"]


def test_poll_returns_the_first_truthy_value_or_the_last_at_the_deadline():
    calls = iter([0, 0, "yes"])
    assert poll(lambda: next(calls), timeout=5, interval=0.001) == "yes"
    start = time.monotonic()
    assert poll(lambda: None, timeout=0.1, interval=0.01) is None
    assert time.monotonic() - start < 2


def test_a_process_is_told_from_a_later_one_with_the_same_pid():
    child = subprocess.Popen(["sleep", "30"])
    try:
        token = process_token(child.pid)
        assert token and same_process(child.pid, token)
        assert not same_process(child.pid, token.split(":")[0] + ":1")  # another start time
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid) and not same_process(child.pid, token)


def test_an_unreaped_child_is_not_alive():
    child = subprocess.Popen(["true"])
    poll(lambda: open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z", timeout=5)
    assert not pid_alive(child.pid)
    child.wait()
