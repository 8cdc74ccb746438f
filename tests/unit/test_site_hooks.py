"""A site's own PrologSlurmctld and EpilogSlurmctld keep running: slurm-ipu-hook,
run as slurmctld runs it, calls them for every job, the site's prolog before ours and its epilog
after ours, with their exit status."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurm_ipu.deploy import fragments, render

from .conftest import place_hook


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def wrapper(tmp_path, hook_binary):
    trace = tmp_path / "trace"
    python = script(tmp_path / "python", f'echo "ours $SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID" >> {trace}\n')
    prolog = script(tmp_path / "site-prolog", f'echo "site-prolog $SLURM_JOB_ID $SLURM_JOB_USER" >> {trace}\n'
                                              'exit "${SITE_PROLOG_EXIT:-0}"\n')
    epilog = script(tmp_path / "site-epilog", f'echo "site-epilog $SLURM_JOB_ID" >> {trace}\nexit 0\n')
    hook = fragments.hook_paths(str(tmp_path / "state")) | {
        "site": str(tmp_path / "c.yaml"), "python": python, "prolog_wait": 2,
        "site_prolog": [prolog], "site_epilog": [epilog]}
    return place_hook(hook_binary, tmp_path / "slurm-ipu-hook", hook), trace


@pytest.fixture
def two_each(tmp_path, hook_binary):
    """A site with two controller prologs and two epilogs (what Slurm 24.05+ runs from two lines)."""
    trace = tmp_path / "trace"
    python = script(tmp_path / "python", f'echo "ours $SLURM_SCRIPT_CONTEXT" >> {trace}\n')
    made = {k: script(tmp_path / k, f'echo {k} >> {trace}\nexit "${{{k.upper().replace("-", "_")}_EXIT:-0}}"\n')
            for k in ("prolog-a", "prolog-b", "epilog-a", "epilog-b")}
    hook = fragments.hook_paths(str(tmp_path / "state")) | {
        "site": str(tmp_path / "c.yaml"), "python": python, "prolog_wait": 2,
        "site_prolog": [made["prolog-a"], made["prolog-b"]], "site_epilog": [made["epilog-a"], made["epilog-b"]]}
    return place_hook(hook_binary, tmp_path / "slurm-ipu-hook", hook), trace


def run(path: Path, context: str, licences: str, **extra) -> int:
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_JOB_USER": "alice", "SLURM_JOB_LICENSES": licences,
           "SLURM_SCRIPT_CONTEXT": f"{context}_slurmctld", **extra}
    return subprocess.run([str(path)], env=env, capture_output=True, text=True, timeout=30).returncode


def lines(trace: Path) -> list[str]:
    return trace.read_text().splitlines() if trace.exists() else []


@pytest.mark.parametrize("licences,ours", [("", []), ("matlab:1", []), ("ipu:4", ["ours prolog_slurmctld 42"])])
def test_the_site_s_prolog_runs_first_for_every_job(wrapper, licences, ours):
    path, trace = wrapper
    assert run(path, "prolog", licences) == 0
    assert lines(trace) == ["site-prolog 42 alice", *ours]


def test_a_failing_site_prolog_fails_the_job_start_before_any_partition(wrapper):
    path, trace = wrapper
    assert run(path, "prolog", "ipu:4", SITE_PROLOG_EXIT="3") == 3
    assert lines(trace) == ["site-prolog 42 alice"]


@pytest.mark.parametrize("licences,ours", [("", []), ("ipu:4", ["ours epilog_slurmctld 42"])])
def test_the_site_s_epilog_runs_after_ours_for_every_job(wrapper, licences, ours):
    path, trace = wrapper
    assert run(path, "epilog", licences) == 0
    assert lines(trace) == [*ours, "site-epilog 42"]


def test_without_site_hooks_the_settings_name_none(tmp_path):
    hook = fragments.hook_paths(str(tmp_path)) | {"site": "c", "python": "p", "prolog_wait": 2}
    text = render.render("hooks/slurm-ipu-hook.conf", {"hook": hook})
    assert "site_prolog=\n" in text and "site_epilog=\n" in text


def test_several_site_prologs_run_in_order_and_the_first_failure_stops_the_start(two_each):
    path, trace = two_each
    assert run(path, "prolog", "ipu:4") == 0
    assert lines(trace) == ["prolog-a", "prolog-b", "ours prolog_slurmctld"]
    trace.unlink()
    assert run(path, "prolog", "ipu:4", PROLOG_A_EXIT="4") == 4
    assert lines(trace) == ["prolog-a"]  # no later script, no partition


@pytest.mark.parametrize("env,status", [({}, 0), ({"EPILOG_A_EXIT": "5"}, 5), ({"EPILOG_B_EXIT": "6"}, 6)])
def test_several_site_epilogs_all_run_after_ours_and_the_first_failure_is_the_status(two_each, env, status):
    path, trace = two_each
    assert run(path, "epilog", "ipu:4", **env) == status
    assert lines(trace) == ["ours epilog_slurmctld", "epilog-a", "epilog-b"]
