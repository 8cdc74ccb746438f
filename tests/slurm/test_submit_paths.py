"""The ipu licence follows the IPU GRES in every request path, for a user who is not root
: each hole found by the adversarial run is a case here."""

from __future__ import annotations

import re

import pytest

from slurm_ipu.slurm import releases
from tests.licence_corpus import tres_corpus

from .conftest import GRES, SLURM_VERSION, wait_for, wait_gone, wait_logged

pytestmark = pytest.mark.usefixtures("users")
USER = "slurmipu-a"


def submit_held(lab, *args: str) -> int:
    proc = lab.run_as(USER, "sbatch", "--parsable", "--hold", "-o", "/dev/null", *args, "--wrap", "sleep 30")
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().split(";")[0])


def update(lab, job: int, *fields: str):
    return lab.run_as(USER, "scontrol", "update", f"JobId={job}", *fields)


# Slurm 22.05 drops job_submit.lua's message on modify; the user sees the error code's text and
# the reason is in slurmctld's log.
MODIFY_REFUSED = "Invalid license specification"


def refused_in_log(lab, job_words: str) -> None:
    """A line another process writes is waited for, never read once."""
    wait_logged(lab.spec.path("log", "slurmctld.log"), job_words)


def test_a_licence_added_to_a_job_without_ipus_is_refused_and_no_partition_appears(clean_lab):
    lab = clean_lab
    job = submit_held(lab)
    proc = update(lab, job, "Licenses=ipu:64", "NumNodes=1")
    assert proc.returncode != 0 and MODIFY_REFUSED in proc.stderr, proc.stderr
    refused_in_log(lab, "slurm-ipu: refused job modify: the ipu licence follows --gres=ipu:N")
    assert "ipu" not in lab.job(job).get("Licenses", "")
    assert lab.run_as(USER, "scontrol", "release", str(job)).returncode == 0
    wait_for("the job to run", lambda: lab.state(job) == "RUNNING", 60)
    assert lab.partitions() == {}  # the prolog saw no ipu licence: the user took no IPUs
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job)


def test_gres_given_twice_is_refused_at_submit(clean_lab):
    proc = clean_lab.run_as(USER, "sbatch", "--gres=ipu:16,ipu:1", "-o", "/dev/null", "--wrap", "true")
    assert proc.returncode != 0
    twice = f"{GRES}ipu:16,{GRES}ipu:1"
    assert f"slurm-ipu: --gres {twice} names ipu 2 times; give it once, as --gres=ipu:N" in proc.stderr


def test_the_licence_is_asked_for_directly_is_refused(clean_lab):
    proc = clean_lab.run_as(USER, "sbatch", "-L", "ipu:64", "-o", "/dev/null", "--wrap", "true")
    assert proc.returncode != 0 and "not with the ipu licence (-L ipu:64)" in proc.stderr


def held_ipus(lab, job: int) -> tuple[int, int]:
    """(the ipu licence, the IPU GRES total) in the job's TRES as Slurm keeps them (the lab
    accounts for both): what sacct bills and what the prolog sizes the partition from."""
    info = lab.job(job)
    # a running job's: AllocTRES from 23.11, TRES before; a pending one's: ReqTRES, TRES before
    given = [info.get(k, "") for k in ("AllocTRES", "ReqTRES", "TRES")]
    tres = next((t for t in given if t and t != "(null)"), "")

    def count(key: str) -> int:
        found = re.search(rf"(?:^|,){re.escape(key)}=(\d+)", tres)
        return int(found.group(1)) if found else 0
    return count("license/ipu"), count("gres/ipu")


# Every way scontrol names a TRES (on 22.05 a refused TresPerNode left the licence
# job_submit.lua had written, and an accepted one kept the old GRES count beside the new licence).
TRES_UPDATES = ("Gres=ipu:{n}", "TresPerNode=gres/ipu:{n}", "TresPerNode=gres:ipu:{n}", "TresPerJob=gres/ipu:{n}",
                "TresPerTask=gres/ipu:{n}")


def test_no_tres_update_gives_a_job_ipus_or_changes_them(clean_lab):
    lab = clean_lab
    plain, one = submit_held(lab), submit_held(lab, "--gres=ipu:1")
    for job, n, before in ((plain, 4, (0, 0)), (one, 16, (1, 1))):
        for field in TRES_UPDATES:
            proc = update(lab, job, field.format(n=n))
            assert proc.returncode != 0, (field, proc.stdout)
            assert held_ipus(lab, job) == before, (field, lab.job(job))
    # the node count still moves both together: once the job runs (22.05 shows a pending job's
    # TRES as submitted), it holds 2 IPUs of GRES, 2 of licence, and a 2-IPU partition
    proc = update(lab, one, "NumNodes=2")
    assert proc.returncode == 0, proc.stderr
    assert lab.job(one)["Licenses"] == "ipu:2", lab.job(one)
    assert lab.run_as(USER, "scontrol", "release", str(one)).returncode == 0
    wait_for("the job to run", lambda: lab.state(one) == "RUNNING", 60)
    assert held_ipus(lab, one) == (2, 2), lab.job(one)
    assert len(lab.partitions()[f"slurm_{one}"]["spec"]["ipus"]) == 2
    for job in (plain, one):
        lab.run("scancel", str(job), check=True)
        wait_gone(lab, job)


TRES_STRINGS = 150


def test_no_tres_update_string_moves_the_licence_or_the_gres(clean_lab, capsys):
    """The licence fuzz's update half, for TRES: a seeded corpus of `scontrol
    update` TRES fields and values (tests/licence_corpus.py), set by the job's user on a pending job
    without IPUs and on one with 4. After each, accepted or not, Slurm holds the licence and the
    GRES the job was submitted with: IPUs are fixed at submit, and a refused update leaves no
    licence behind (22.05 did)."""
    lab = clean_lab
    jobs = {submit_held(lab): (0, 0), submit_held(lab, "--gres=ipu:4"): (4, 4)}
    wrong, accepted = [], 0
    for i, (field, value) in enumerate(tres_corpus(TRES_STRINGS)):
        job = list(jobs)[i % 2]
        accepted += update(lab, job, f"{field}={value}").returncode == 0
        if held_ipus(lab, job) != jobs[job]:
            wrong.append(f"{field}={value!r} on a job of {jobs[job][1]} IPUs: licence, GRES = {held_ipus(lab, job)}")
            jobs[job] = held_ipus(lab, job)  # judge the next update from here
    with capsys.disabled():
        print(f"\nTRES update fuzz, Slurm {SLURM_VERSION}: {TRES_STRINGS} updates, {accepted} accepted, "
              f"{len(wrong)} mismatch(es)")
    assert not wrong, f"{len(wrong)} mismatch(es):\n" + "\n".join(wrong[:30])
    for job in jobs:
        lab.run("scancel", str(job), check=True)
        wait_gone(lab, job)


def test_the_licence_of_an_ipu_job_cannot_be_changed_or_dropped_by_modify(clean_lab):
    lab = clean_lab
    job = submit_held(lab, "--gres=ipu:4")
    for fields in (["Licenses=ipu:64"], ["Licenses=ipu:4,ipu:60"], ["Gres=gpu:1"]):
        proc = update(lab, job, *fields)
        assert proc.returncode != 0 and MODIFY_REFUSED in proc.stderr, (fields, proc.stderr)
    assert lab.job(job)["Licenses"] == "ipu:4"
    lab.run("scancel", str(job), check=True)
    wait_gone(lab, job)


def test_ipus_asked_per_task_are_refused_with_the_way_to_ask(clean_lab):
    """23.02+: --tres-per-task=gres/ipu:N would hold IPUs with no licence, so no partition."""
    # -n: 24.11's sbatch itself refuses --tres-per-task without a task count
    proc = clean_lab.run_as(USER, "sbatch", "-n", "1", "--tres-per-task=gres/ipu:2", "-o", "/dev/null",
                            "--wrap", "true")
    assert proc.returncode != 0
    if releases.has_tres_per_task(SLURM_VERSION):  # older sbatch has no such option
        assert "slurm-ipu: --tres-per-task=gres/ipu:2: ask for IPUs per node with --gres=ipu:N" in proc.stderr


def test_the_ipu_licence_as_one_of_several_choices_is_refused(clean_lab):
    """25.05+: -L 'ipu:64|matlab:1' passed an older job_submit.lua and left the prolog a licence
    string it cannot size a partition from (requeued for ever)."""
    proc = clean_lab.run_as(USER, "sbatch", "-L", "ipu:64|matlab:1", "-o", "/dev/null", "--wrap", "true")
    assert proc.returncode != 0
    if releases.has_or_licences(SLURM_VERSION):
        assert "slurm-ipu: licence ipu:64|matlab:1: the ipu licence cannot be one of several choices" in proc.stderr


def test_the_ipu_licence_behind_any_separator_is_refused_at_submit_and_on_modify(clean_lab):
    """Licence holes: Slurm splits licences on ';' as on ',' (docs/slurm.md, Licence requests)."""
    lab = clean_lab
    proc = lab.run_as(USER, "sbatch", "-L", ";ipu:64", "-t", "7-0", "--wrap", "sleep 1d")
    assert proc.returncode != 0 and "slurm-ipu: ask for IPUs with --gres=ipu:N (IPUs per node), not with the ipu " \
        "licence (-L ipu:64)" in proc.stderr, proc.stderr
    job = submit_held(lab)
    proc = update(lab, job, "Licenses=;ipu:64")
    assert proc.returncode != 0 and MODIFY_REFUSED in proc.stderr, proc.stderr
    refused_in_log(lab, "slurm-ipu: refused job modify: the ipu licence follows --gres=ipu:N")
    assert lab.job(job).get("Licenses") in ("(null)", "", None), lab.job(job)
    lab.run("scancel", str(job), check=True)
    # with a GRES of 1 IPU, an extra ';ipu:63' is refused too, not dropped in silence
    proc = lab.run_as(USER, "sbatch", "--parsable", "--hold", "--gres=ipu:1", "-L", ";ipu:63", "-o", "/dev/null",
                      "--wrap", "true")
    assert proc.returncode != 0 and "slurm-ipu: -L ipu:63: the ipu licence is slurm-ipu's, set from --gres=ipu:N; " \
        "leave it out of -L" in proc.stderr, proc.stderr
