"""The admin's view of the lab, which is a site like any other: `slurm-ipu doctor` all ok on it,
each of its checks breaks when that part of the lab is broken, and `slurm-ipu status` shows a
running job's partition."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
import yaml

from slurm_ipu import lab as labmod

from ..waiting import wait_for
from .conftest import wait_gone, wait_idle, wait_no_partitions


def doctor(lab, site: str | None = None):
    argv = ["slurm-ipu", "doctor"] + (["--site", site] if site else [])
    proc = lab.run(*argv, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    problems = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("PROBLEM")}
    return proc, problems


def test_doctor_all_ok_and_status_shows_the_running_job(clean_lab):
    lab = clean_lab
    proc, problems = doctor(lab)
    assert proc.returncode == 0 and not problems, proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == f"all {len(doctor_checks())} checks ok"
    assert "ok       canary       an IPU job passes job_submit.lua" in proc.stdout
    job = lab.sbatch("-N2", "--gres=ipu:4", "--wrap", "sleep 300")
    lab.wait_running(job)
    view = json.loads(lab.run("slurm-ipu", "status", "--json", check=True).stdout)
    row = {r["partition"]: r for r in view["partitions"]}[f"slurm_{job}"]
    assert (row["job"], row["size"], row["nodes"], row["orphan"]) == (job, 8, "node[1-2]", False)
    assert view["vipu"] == {"used": 8, "free": 56} and view["slurm"]["used"] == 8 and view["disagreement"] is None
    table = lab.run("slurm-ipu", "status", check=True).stdout
    assert f"slurm_{job}" in table and "ipu licence 8 used of 64" in table
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job)


def _site_copy(lab, tmp_path, **changes) -> str:
    doc = yaml.safe_load(lab.spec.path("etc", "site.yaml").read_text())
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if key:
            doc.setdefault(section, {})[key] = value
        else:
            doc[section] = value
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o644)
    return str(path)


@contextlib.contextmanager
def _edited(path, edit):
    before = path.read_bytes()
    mode = path.stat().st_mode & 0o7777
    try:
        path.write_text(edit(before.decode()))
        yield None
    finally:
        path.write_bytes(before)
        path.chmod(mode)


@contextlib.contextmanager
def _vipu_down(lab):
    admin = lab.admin()
    admin.down()
    try:
        yield None
    finally:
        admin.up()
        admin.close()


@contextlib.contextmanager
def _chmod(path, mode):
    before = path.stat().st_mode & 0o7777
    path.chmod(mode)
    try:
        yield None
    finally:
        path.chmod(before)


@contextlib.contextmanager
def _stale_removal(lab):
    """A removal queued long ago that nobody works off (the service is stopped meanwhile)."""
    labmod.stop_service(lab.spec)
    entry = lab.spec.path("state", "pending-removal", "slurm_999998.json")
    entry.parent.mkdir(exist_ok=True)
    entry.write_text(json.dumps({"partition": "slurm_999998", "job_id": 999998, "reason": "drill",
                                 "time": time.time() - 3600}))
    try:
        yield None
    finally:
        entry.unlink(missing_ok=True)
        labmod.restart_service(lab.spec)


@contextlib.contextmanager
def _orphan(lab):
    """A partition under our prefix whose job does not exist (created behind Slurm's back)."""
    lab.run("vipu", "create", "partition", "slurm_999997", "--size", "4", check=True)
    try:
        yield None
    finally:
        lab.run("vipu", "remove", "partition", "slurm_999997", check=True)


@contextlib.contextmanager
def _service_stopped(lab):
    labmod.stop_service(lab.spec)
    try:
        yield None
    finally:
        labmod.restart_service(lab.spec)


@contextlib.contextmanager
def _slurmdbd_stopped(lab):
    from slurm_ipu.lab import accounting

    pids = labmod.load_pids(lab.spec)
    labmod._stop_pid(pids["slurmdbd"]["pid"], "slurmdbd")
    try:
        yield None
    finally:
        accounting.start_slurmdbd(lab.spec, pids)
        labmod.save_pids(lab.spec, pids)


def _breakers(lab, tmp_path):
    etc = lab.spec.path("etc")
    return {
        "slurm": lambda: contextlib.nullcontext(_site_copy(lab, tmp_path, slurm__version="24.05")),
        "hooks": lambda: _edited(lab.spec.path("install", "libexec", "slurm-ipu-hook.conf"),
                                 lambda t: t + "# edited by hand\n"),
        "timeout": lambda: contextlib.nullcontext(_site_copy(lab, tmp_path, prolog__deadline=70,
                                                             prolog_epilog_timeout=180)),
        "job_submit": lambda: _edited(etc / "job_submit.lua", lambda t: t + "-- edited by hand\n"),
        "licenses": lambda: contextlib.nullcontext(_site_copy(lab, tmp_path, pod__ipus=128)),
        "nodes": lambda: contextlib.nullcontext(_site_copy(lab, tmp_path, pod__ipus_per_host=8)),
        "plugstack": lambda: _edited(etc / "plugstack.conf.d" / "slurm-ipu.conf",
                                     lambda t: t.replace("prefix=slurm_", "prefix=other_")),
        "vipu": lambda: _vipu_down(lab),
        "state_dir": lambda: _chmod(lab.spec.path("state"), 0o777),
        "journal": lambda: _stale_removal(lab),
        "orphans": lambda: _orphan(lab),
        "service": lambda: _service_stopped(lab),
        "accounting": lambda: _slurmdbd_stopped(lab),
        # a site line after the fragment's Include: the site's own value would win over ours
        "merged": lambda: _edited(etc / "slurm.conf", lambda t: t + "GresTypes=gpu\n"),
        # the hooks' user has no grant in the site's allocation: every job start would fail
        "canary": lambda: contextlib.nullcontext(_site_copy(lab, tmp_path, slurm__user="nobody")),
    }


ITEMS = ("slurm", "hooks", "timeout", "job_submit", "licenses", "nodes", "plugstack", "vipu", "state_dir",
         "journal", "orphans", "service", "accounting", "merged", "canary")


def doctor_checks():
    from slurm_ipu.deploy import doctor as doctor_module

    return doctor_module.CHECKS


def test_doctor_and_status_as_a_user_skip_what_needs_root_in_one_line_each(clean_lab, tmp_path):
    """No traceback, each restricted item one line, the rest checked."""
    import tempfile
    from pathlib import Path

    lab = clean_lab
    with tempfile.TemporaryDirectory(prefix="slurm-ipu-nonroot-") as where:  # pytest's tmp_path is root's (0700)
        Path(where).chmod(0o755)
        with _chmod(lab.spec.path("state"), 0o700):  # as an installed state_dir is: root's and slurm.user's
            _as_nobody(lab, _site_copy(lab, Path(where)))


def _as_nobody(lab, site: str) -> None:
    from slurm_ipu.lab.files import users_python

    path, python = users_python(lab.spec)  # the checkout and root's Python may be closed to nobody
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "env", f"PYTHONPATH={path}"]
    for command in ("doctor", "status"):
        proc = lab.run(*nobody, python, "-P", "-m", "slurm_ipu.cli", command, "--site", site, timeout=120)
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
        assert proc.returncode in (0, 1), proc.stderr
        if command == "doctor":
            assert "skipped  canary       the hooks' create: needs root" in proc.stdout, proc.stdout
            assert "skipped (their lines say why)" in proc.stdout.splitlines()[-1]
        else:
            assert "restricted: partition ages and queued removals" in proc.stdout, proc.stdout


@pytest.mark.parametrize("item", ITEMS)
def test_doctor_names_what_is_broken(clean_lab, tmp_path, item):
    lab = clean_lab
    tmp_path.chmod(0o755)
    with _breakers(lab, tmp_path)[item]() as site:
        proc, problems = doctor(lab, site)
    assert proc.returncode == 1, proc.stdout
    assert item in problems, proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("PROBLEM") and ln.split()[1] == item)
    assert "; fix: " in line
    after, problems = doctor(lab)
    assert after.returncode == 0 and not problems, after.stdout


# A site's own job_submit.lua calling ours as docs/admin.md says, then its own policy: every job
# names a QOS.
SITE_POLICY = """dofile("{ours}")
function slurm_job_submit(job_desc, part_list, submit_uid)
    local rc = slurm_ipu.job_submit(job_desc, part_list, submit_uid) if rc ~= slurm.SUCCESS then return rc end
    if job_desc.qos == nil then
        slurm.log_user("lua-site: please name a QOS")
        return slurm.ERROR
    end
    return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm_ipu.job_modify(job_desc, job_rec, part_list, modify_uid)
end
"""


def test_doctor_on_a_site_whose_policy_refuses_its_jobs_names_the_rule_and_takes_what_it_asks(clean_lab):
    """Doctor's test jobs refused by the site's own rule were two PROBLEMs (slurm-ipu broken) with
    no way to give them what the rule asked. Now: the rule named, the checks skipped, exit 0; given
    the QOS, all ok. They carry the account of root's association (the lab has accounting)."""
    lab = clean_lab
    lua, ours = lab.spec.path("etc", "job_submit.lua"), lab.spec.path("etc", "job_submit_ipu.lua")
    ours.write_bytes(lua.read_bytes())
    account = lab.run("sacctmgr", "-n", "-P", "show", "user", "root", "format=defaultaccount", check=True).stdout
    try:
        with _edited(lua, lambda _: SITE_POLICY.format(ours=ours)):
            refused = lab.run_as("slurmipu-a", "sbatch", "--gres=ipu:1", "-o", "/dev/null", "--wrap", "true")
            assert "lua-site: please name a QOS" in refused.stderr, refused.stderr  # the rule is in force
            proc, problems = doctor(lab)
            assert proc.returncode == 0 and not problems, proc.stdout
            carried = f"--account={account.strip()} (root's default account)"
            for item in ("canary", "job_submit"):
                line = next(ln for ln in proc.stdout.splitlines() if ln.split()[1:2] == [item])
                assert line.startswith("skipped") and "the site's own policy refused doctor's test job ('lua-site: " \
                    f"please name a QOS'; it carried {carried}): give doctor what the rule asks with --account, " \
                    "--qos, --partition" in line, line
            given = lab.run("slurm-ipu", "doctor", "--qos", "normal", timeout=120)
            assert given.returncode == 0 and given.stdout.strip().splitlines()[-1] == \
                f"all {len(doctor_checks())} checks ok", given.stdout
    finally:
        ours.unlink()
        lua.touch()  # slurmctld reloads job_submit.lua at a submit after the file's time


def test_emulator_crash_then_lab_up_restarts_only_it_and_the_running_job_is_unharmed(clean_lab):
    lab = clean_lab
    job = lab.sbatch("--gres=ipu:4", "--wrap", "sleep 300")
    lab.wait_running(job)
    before = labmod.load_pids(lab.spec)
    os_kill(before["vipu-emu"]["pid"])
    wait_for("the emulator dead", lambda: not labmod._running(before["vipu-emu"]), 10)
    labmod.up(lab.spec)
    after = labmod.load_pids(lab.spec)
    assert after["vipu-emu"]["pid"] != before["vipu-emu"]["pid"]
    changed = {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
               if k != "vipu-emu" and before.get(k) != after.get(k)}
    assert not changed, changed
    assert lab.job(job).get("JobState") == "RUNNING", lab.job(job)
    assert lab.partitions()[f"slurm_{job}"]["spec"]["size"] == 4  # the emulator's state survived its crash
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job)
    wait_no_partitions(lab, 30, "partition removed")


def test_after_scontrol_reconfigure_the_lab_still_knows_its_daemons(clean_lab):
    """From 23.11 reconfigure restarts slurmctld and slurmd as new processes: `lab down` must
    still find and stop them (22.05 keeps the same processes: the records simply stay valid)."""
    lab = clean_lab
    lab.run("scontrol", "reconfigure", check=True)
    wait_idle(lab, 90, "nodes idle after reconfigure")
    pids = labmod.load_pids(lab.spec)
    daemons = [k for k in pids if k == "slurmctld" or k.startswith("slurmd-")]
    wait_for("every daemon recorded as running",
             lambda: all(labmod._running(labmod.load_pids(lab.spec)[k]) for k in daemons), 30)


def test_a_recycled_pid_in_the_records_is_never_signalled(clean_lab):
    """The record of a process that is gone, whose pid now belongs to another process (here: a
    sleep of our own under the recorded pid's identity check), is 'not running' to the lab."""
    import subprocess

    lab = clean_lab
    other = subprocess.Popen(["sleep", "60"])
    try:
        pids = labmod.load_pids(lab.spec)
        pids["vipu-emu"] = {"pid": other.pid, "token": "another-boot:123"}
        assert not labmod._running(pids["vipu-emu"])
        labmod._stop_all(pids, ["vipu-emu"])
        assert other.poll() is None  # not signalled
    finally:
        other.kill()
        other.wait()


def os_kill(pid: int) -> None:
    import os
    import signal

    os.kill(pid, signal.SIGKILL)
