"""slurm_ipu/vipu/command.py, the client's way of running `vipu`: what subprocess.run gives for the
same arguments, with small real programs in its place."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from slurm_ipu.vipu import command


def test_output_errors_and_status_come_back_apart():
    proc = command.run(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")


def test_the_program_is_found_on_path_and_reads_nothing():
    proc = command.run(["cat"], timeout=10)
    assert (proc.returncode, proc.stdout) == (0, "")


def test_a_large_output_is_read_whole():
    proc = command.run(["/bin/sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"], timeout=10)
    assert proc.stdout == "x" * 300000


def test_a_missing_program_is_file_not_found():
    with pytest.raises(FileNotFoundError):
        command.run(["/nonexistent/vipu", "list"], timeout=10)


def test_a_call_past_its_timeout_is_killed_and_reaped(tmp_path):
    pidfile = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        command.run(["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 30"], timeout=0.5)
    assert time.monotonic() - started < 5
    with pytest.raises(ProcessLookupError):  # killed and reaped: no process, not even a zombie
        os.kill(int(pidfile.read_text()), 0)


def test_a_killed_program_reports_its_signal_as_subprocess_does():
    assert command.run(["/bin/sh", "-c", "kill -9 $$"], timeout=10).returncode == -9
