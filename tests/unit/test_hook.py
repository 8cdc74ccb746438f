"""slurm-ipu-hook (spank/hook/hook.c) as slurmctld runs it, with no service listening: which
jobs are ours, what it says when its settings are wrong, and `--check` (what doctor runs). The
handoff to the service: test_transport.py; the site's own hooks: test_site_hooks.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurm_ipu.deploy import fragments
from slurm_ipu.hooks import transport
from slurm_ipu.slurm.licences import HOOKS, count

from .conftest import place_hook


@pytest.fixture
def hook(tmp_path, hook_binary):
    python = tmp_path / "python"  # stands in for the interpreter: records that Python was started
    python.write_text(f"#!/bin/sh\necho \"$SLURM_SCRIPT_CONTEXT $SLURM_IPU_SITE $*\" >> {tmp_path}/python-ran\n")
    python.chmod(0o755)
    (tmp_path / "site.yaml").write_text("version: 1\n")
    return place_hook(hook_binary, tmp_path / "slurm-ipu-hook", fragments.hook_paths(str(tmp_path / "state")) | {
        "site": str(tmp_path / "site.yaml"), "python": str(python), "prolog_wait": 2})


def run(hook: Path, *args: str, **env) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_JOB_LICENSES": "ipu:16",
            "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}
    return subprocess.run([str(hook), *args], env=dict(base, **env), capture_output=True, text=True, timeout=30)


def python_ran(hook: Path) -> list[str]:
    path = hook.parent / "python-ran"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("licences", ["", "matlab:2", "ipux:1", "xipu:1", "gpu:1;ipux", "matlab:1|ipu:4"])
def test_jobs_without_an_ipu_licence_leave_at_once(hook, licences):
    for context in ("prolog_slurmctld", "epilog_slurmctld"):
        assert run(hook, SLURM_JOB_LICENSES=licences, SLURM_SCRIPT_CONTEXT=context).returncode == 0
    assert python_ran(hook) == []


@pytest.mark.parametrize("licences", ["ipu:16", "IPU:4", "matlab:1,ipu:8", "gpu;ipu*2", "ipu", "ipu:", "a,,ipu:1"])
def test_an_ipu_job_without_the_service_runs_the_python_hook_with_the_site(hook, licences):
    assert run(hook, SLURM_JOB_LICENSES=licences, SLURM_SCRIPT_CONTEXT="prolog_slurmctld").returncode == 0
    assert python_ran(hook) == [f"prolog_slurmctld {hook.parent}/site.yaml -m slurm_ipu.cli hook"]


@pytest.mark.parametrize("licences", ["ipu:4", "Ipu:1,ipu:2", "a:1;ipu*3", ";;ipu:2;", "ipu:0x", "ipu:-1", "ipu:+7",
                                      "ipu: 4", "license:1,IPU:64", "ipu:4294967360", "x:1,y:2,ipu:1,z:3"])
def test_no_licence_string_slurm_counts_as_ipus_is_missed(hook, licences):
    """The filter lets through every string the hooks' own parser (Slurm's grammar) counts ipu in:
    a job it missed would run without its partition."""
    expected = count(licences, "ipu", HOOKS) != 0
    ran = run(hook, SLURM_JOB_LICENSES=licences, SLURM_SCRIPT_CONTEXT="prolog_slurmctld").returncode == 0 \
        and python_ran(hook) != []
    assert ran or not expected


@pytest.mark.parametrize("offset", [{"SLURM_HET_JOB_OFFSET": "1"}, {"SLURM_PACK_JOB_OFFSET": "2"},
                                    {"SLURM_HET_JOB_OFFSET": "12", "SLURM_PACK_JOB_OFFSET": "12"}])
def test_a_later_heterogeneous_component_goes_to_python_without_a_licence(hook, offset):
    """Slurm gives licences to a heterogeneous job's first component alone: a later one with IPUs
    has only its GRES, which Python reads (one squeue); its end may have a partition to remove."""
    for context in ("prolog_slurmctld", "epilog_slurmctld"):
        assert run(hook, SLURM_JOB_LICENSES="", SLURM_SCRIPT_CONTEXT=context, **offset).returncode == 0
    assert [line.split()[0] for line in python_ran(hook)] == ["prolog_slurmctld", "epilog_slurmctld"]


@pytest.mark.parametrize("offset", [{"SLURM_HET_JOB_OFFSET": "0"}, {"SLURM_HET_JOB_OFFSET": ""},
                                    {"SLURM_PACK_JOB_OFFSET": "0", "SLURM_HET_JOB_OFFSET": "0"}])
def test_a_first_component_without_a_licence_leaves_at_once(hook, offset):
    for context in ("prolog_slurmctld", "epilog_slurmctld"):
        assert run(hook, SLURM_JOB_LICENSES="", SLURM_SCRIPT_CONTEXT=context, **offset).returncode == 0
    assert python_ran(hook) == []


def test_settings_it_cannot_read_fail_the_hook_with_one_line_naming_the_file(hook):
    conf = hook.with_name("slurm-ipu-hook.conf")
    conf.unlink()
    proc = run(hook, SLURM_JOB_LICENSES="")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert f"slurm-ipu-hook: {conf}: No such file or directory; make install SITE=" in proc.stderr


def test_an_unknown_setting_is_named_with_its_line(hook):
    conf = hook.with_name("slurm-ipu-hook.conf")
    conf.write_text(conf.read_text() + "sockets=/x\n")
    proc = run(hook, "--check")
    lines = len(conf.read_text().splitlines())
    assert proc.returncode == 2 and f"{conf}: line {lines}: 'sockets=/x' is not a setting" in proc.stderr


def test_check_names_what_it_runs_and_the_source_it_was_built_from(hook):
    proc = run(hook, "--check")
    assert proc.returncode == 0, proc.stderr
    assert f"python {hook.parent}/python" in proc.stdout and f"(source {transport.source_id()})" in proc.stdout


def test_check_refuses_a_site_prolog_that_is_not_there(hook):
    conf = hook.with_name("slurm-ipu-hook.conf")
    conf.write_text(conf.read_text().replace("site_prolog=\n", "site_prolog=/nonexistent/ctld-prolog\n"))
    proc = run(hook, "--check")
    assert proc.returncode == 2 and "/nonexistent/ctld-prolog is missing or not executable" in proc.stderr


def test_a_site_prolog_without_a_shebang_runs_as_a_shell_would_run_it(hook, tmp_path):
    script = tmp_path / "plain-prolog"
    script.write_text(f"echo ran >> {tmp_path}/plain-ran\nexit 3\n")
    script.chmod(0o755)
    conf = hook.with_name("slurm-ipu-hook.conf")
    conf.write_text(conf.read_text().replace("site_prolog=\n", f"site_prolog={script}\n"))
    assert run(hook, SLURM_SCRIPT_CONTEXT="prolog_slurmctld").returncode == 3
    assert (tmp_path / "plain-ran").read_text() == "ran\n" and python_ran(hook) == []


def test_a_controller_that_becomes_the_primary_asks_for_a_reap_and_returns_at_once(hook, tmp_path):
    """SlurmctldPrimaryOnProg: no hook context, no job. slurmctld waits for it before it serves
    anyone, so it only leaves the request for whoever removes (the service polls for it)."""
    state = tmp_path / "state"
    state.mkdir()
    takeover = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(hook)], env=takeover, capture_output=True, text=True, timeout=30)
    request = state / "reap.request"
    assert (done.returncode, done.stderr) == (0, "") and request.is_file() and python_ran(hook) == []
    assert subprocess.run([str(hook)], env=takeover, timeout=30).returncode == 0  # asked already: still 0
    request.unlink()
    request.symlink_to(tmp_path / "elsewhere")  # never followed: a link there is not a request made
    refused = subprocess.run([str(hook)], env=takeover, capture_output=True, text=True, timeout=30)
    assert not (tmp_path / "elsewhere").exists() and refused.returncode == 0  # EEXIST: asked (a link is no request)
