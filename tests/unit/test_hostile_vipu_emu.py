"""Hostile and careless input to `vipu-emu` (the emulator's server, fault injection, invariant
check and attach probe; its vipu-compatible `cli` answers as `vipu` does, tests/emulator): one
line each, exit code 2, no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

EMU = [sys.executable, "-m", "slurm_ipu.emulator.main"]


def emu(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*EMU, *argv], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


@pytest.mark.parametrize("argv,line", [
    (["serve", "--port", "99999"], "vipu-emu serve: error: argument --port: --port '99999': use 0 (a free port) "
     "to 65535"),
    (["serve", "--port", "http"], "vipu-emu serve: error: argument --port: --port 'http': use 0 (a free port) to "
     "65535"),
    (["fault", "latency"], "vipu-emu: fault: give --state-dir DIR of the server (its admin API is served on "
     "DIR/admin.sock only)"),
    (["check"], "vipu-emu: check: give --state-dir DIR of the server (its admin API is served on DIR/admin.sock "
     "only)"),
    (["fault", "latency", "soon", "--state-dir", "/nonexistent"], "vipu-emu: fault latency soon: not a number of "
     "seconds"),
    (["fault", "latency", "1", "2", "--state-dir", "/nonexistent"], "vipu-emu: fault latency takes one number of "
     "seconds, not 1 2"),
    (["fault", "agent", "ag0", "sideways", "--state-dir", "/nonexistent"], "vipu-emu: fault agent ag0 sideways: use "
     "`vipu-emu fault agent NAME down|up|ipu-error N` (e.g. agent ag0 down)"),
    (["fault", "agent", "ag0", "ipu-error", "--state-dir", "/nonexistent"], "vipu-emu: fault agent ag0 ipu-error: use "
     "`vipu-emu fault agent NAME down|up|ipu-error N` (e.g. agent ag0 down)"),
    (["attach"], "ipuof: IPUOF_VIPU_API_HOST, IPUOF_VIPU_API_PARTITION_ID not set; run inside an IPU job or "
     "export them"),
    # non-finite or negative seconds would wedge the server's timers; refused before it is asked
    (["fault", "down", "nan", "--state-dir", "/nonexistent"], "vipu-emu: fault down nan: use a number of seconds "
     "from 0 to 3600"),
    (["fault", "latency", "inf", "--state-dir", "/nonexistent"], "vipu-emu: fault latency inf: use a number of "
     "seconds from 0 to 3600"),
    (["fault", "latency", "-5", "--state-dir", "/nonexistent"], "vipu-emu: fault latency -5.0: use a number of "
     "seconds from 0 to 3600"),
])
def test_one_line_exit_2(argv, line):
    proc = emu(*argv)
    assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (2, line)
    assert "Traceback" not in proc.stderr


def test_a_port_in_use_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = emu("serve", "--port", str(port), "--state-dir", str(tmp_path / "state"))
    assert (proc.returncode, proc.stderr.strip()) == \
        (2, f"vipu-emu: cannot listen on 127.0.0.1:{port}: Address already in use; choose another --port")


def test_a_cluster_file_that_is_a_fifo_is_refused_without_waiting(tmp_path):
    import os

    fifo = tmp_path / "cluster.yaml"
    os.mkfifo(fifo)
    proc = emu("serve", "--cluster", str(fifo), "--port", "0", "--state-dir", str(tmp_path / "state"))
    assert (proc.returncode, proc.stderr.strip()) == \
        (2, f"vipu-emu: cluster file {fifo} is a FIFO, not a file; give the path of the YAML file")
