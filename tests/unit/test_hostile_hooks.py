"""Hostile and broken input to the controller hooks' entry point, `slurm-ipu hook` as slurmctld
runs it (an empty environment, SLURM_* and SPANK_* variables, the config file): each case is one
line on stderr naming the value and the fix, exit code 2, no traceback, and, once the config is
read, the same line in hooks.log (slurmctld keeps only the exit status)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SITE = ("version: 1\ncluster: c\nvipu: {host: 127.0.0.1, port: 8090}\n"
        "pod: {ipus: 64, hosts: 'n[1-4]', ipus_per_host: 16}\n")
JOB = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "5", "SLURM_JOB_UID": "0",
       "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_LICENSES": "ipu:4"}


def hook(env: dict, config: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "hook"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "SLURM_IPU_SITE": config, **env})


@pytest.fixture
def conf(tmp_path):
    path = tmp_path / "site.yaml"
    # No Slurm here: a refused prolog's hold fails at once (scontrol not found) and is logged.
    path.write_text(f"{SITE}state_dir: {tmp_path / 'state'}\nslurm: {{bin_dir: {tmp_path / 'no-slurm'}}}\n")
    return path


@pytest.mark.parametrize("change,line", [
    ({"SLURM_SCRIPT_CONTEXT": "prolog"}, "slurm-ipu: SLURM_SCRIPT_CONTEXT='prolog': use `slurm-ipu hook` as "
     "PrologSlurmctld/EpilogSlurmctld, or call prolog/epilog"),
    ({"SLURM_JOB_ID": None}, "slurm-ipu: SLURM_JOB_ID is not set; run this from PrologSlurmctld/EpilogSlurmctld"),
    ({"SLURM_JOB_ID": "5; rm -rf /"}, "slurm-ipu: SLURM_JOB_ID='5; rm -rf /' is not a number"),
    ({"SLURM_JOB_UID": "root"}, "slurm-ipu: SLURM_JOB_UID='root' is not a number"),
    ({"SLURM_JOB_NODELIST": "n[1-"}, "slurm-ipu: hostlist 'n[1-': unbalanced '['"),
    ({"SLURM_JOB_NODELIST": "n[1-99999999]"}, "slurm-ipu: hostlist 'n[1-99999999]': range '1-99999999' runs "
     "backwards or is too large"),
    ({"SLURM_JOB_LICENSES": "ipu:lots"},
     "slurm-ipu: SLURM_JOB_LICENSES='ipu:lots' is not a licence list slurmctld accepts"),
    ({"SPANK_IPU_GCDS": "two"}, "slurm-ipu: --ipu-gcds='two' is not a positive number; use e.g. --ipu-gcds=2"),
    ({"SPANK_IPU_ILDS": "0"}, "slurm-ipu: --ipu-ilds='0' is not a positive number; use e.g. --ipu-ilds=2"),
])
def test_a_hostile_job_environment(conf, tmp_path, change, line):
    env = {k: v for k, v in {**JOB, **change}.items() if v is not None}
    proc = hook(env, str(conf))
    assert (proc.returncode, proc.stderr.strip()) == (2, line)
    log = tmp_path / "state" / "hooks.log"
    if "SCRIPT_CONTEXT" not in line:  # the context is checked before the config is read
        assert line.removeprefix("slurm-ipu: ") in log.read_text()


@pytest.mark.parametrize("text,line", [
    (None, "slurm-ipu: site description {path}: No such file or directory; start from etc/site-pod128.yaml"),
    ("vipu: {port: 8090}\n", "slurm-ipu: {path}: a site description starts with 'version: 1' (see "
     "etc/site-pod128.yaml)"),
    (SITE.replace("8090", "99999"), "slurm-ipu: {path}:3: vipu.port=99999 is out of range; use from 1 to 65535"),
    (SITE + "prolog: {deadline: -5}\n", "slurm-ipu: {path}:5: prolog.deadline=-5.0 is out of range; use a positive "
     "number of seconds, at most 86400 (a day)"),
    ("version: 1\nvipu: {port: [\n", "slurm-ipu: {path}:3: not valid YAML: expected the node content, but found "
     "'<stream end>'"),
    (SITE.replace("cluster: c\n", ""), "slurm-ipu: {path}:1: cluster must be set (the Slurm cluster's name "
     "(ClusterName))"),
])
def test_a_broken_config_file(tmp_path, text, line):
    path = tmp_path / "site.yaml"
    if text is not None:
        path.write_text(text)
    proc = hook(JOB, str(path))
    assert (proc.returncode, proc.stderr.strip()) == (2, line.format(path=path))
