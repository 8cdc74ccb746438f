"""Hostile and careless input to ipurun and the emulator's attach probe: each case gets one
line naming the value and the fix, exit code 2, and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from slurm_ipu.errors import ConfigError
from slurm_ipu.slurm.hostlist import expand

IPURUN = [sys.executable, "-m", "slurm_ipu.launcher.cli"]
ENV = {"PATH": "/usr/bin:/bin"}


def run(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env or ENV)


@pytest.mark.parametrize("argv,line", [
    (["--num-instances", "3", "--num-replicas", "8", "--offline-mode=1", "true"],
     "ipurun: 8 replicas do not divide evenly over 3 instances; use --num-instances 1, 2, 4, 8"),
    (["--num-instances=x", "true"], "ipurun: --num-instances 'x': not an integer"),
    (["--process-placement=everywhere", "--offline-mode", "true"],
     "ipurun: --process-placement 'everywhere'; use one of spreadnuma, scatternuma, scattersocket, close, disabled"),
    (["--host=n[1-99999999]", "--offline-mode", "true"], "ipurun: hostlist 'n[1-99999999]': range '1-99999999' "
     "runs backwards or is too large"),
    (["--host=a[1-300]b[1-300]", "--offline-mode", "true"], "ipurun: hostlist 'a[1-300]b[1-300]' names more "
     "than 65536 hosts; check the ranges"),
    (["--import-config=/nonexistent/x.json", "true"], "ipurun: --import-config /nonexistent/x.json: No such file "
     "or directory"),
    (["--mpi-global-args=--np 2", "--offline-mode", "true"], "ipurun: --mpi-global-args: mpirun option '--np' has "
     "no meaning on srun; supported: -x, --tag-output, --bind-to, --map-by, --output-filename, --mca"),
    (["--offline-target=pod7", "--offline-mode", "true"], "ipurun: --offline-target 'pod7': use one of pod4, "
     "pod16, pod64, pod128, pod256"),
])
def test_one_line_exit_2(argv, line):
    proc = run([*IPURUN, *argv])
    assert (proc.returncode, proc.stderr.strip()) == (2, line)


def test_a_boolean_before_the_last_word_leaves_the_command_alone():
    """`--report-bindings true` used to swallow `true` as the option's value: no command left."""
    proc = run([*IPURUN, "--offline-mode=1", "--report-bindings", "true"])
    assert proc.returncode == 0, proc.stderr
    assert "ipurun: instance 0 host" in proc.stderr  # the bindings report, then `true` ran


def test_dry_run_with_more_instances_than_this_host_has_cores_is_no_traceback():
    n = 4 * (os.cpu_count() or 1)
    proc = run([*IPURUN, f"--num-instances={n}", f"--num-replicas={n}", "--process-placement=close", "-H", "big1",
                "--offline-mode=1", "--dry-run", "true"])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "not on this host" in proc.stdout


@pytest.mark.parametrize("timeout,words", [("soon", "IPUOF_VIPU_API_TIMEOUT='soon' is not a number of seconds"),
                                           ("-1", "IPUOF_VIPU_API_TIMEOUT=-1 must be a positive number"),
                                           ("nan", "must be a positive number")])
def test_attach_probe_with_a_bad_timeout(timeout, words):
    env = dict(ENV, IPUOF_VIPU_API_HOST="127.0.0.1", IPUOF_VIPU_API_PARTITION_ID="p", IPUOF_VIPU_API_TIMEOUT=timeout)
    proc = run([sys.executable, "-m", "slurm_ipu.emulator.main", "attach"], env)
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_hostlist_bound_is_checked_before_the_hosts_are_built():
    with pytest.raises(ConfigError, match="names more than 65536 hosts"):
        expand("r[1-1000]n[1-1000]")
