"""Licence requests read as slurmctld reads them: a seeded corpus of `-L`
strings (tests/licence_corpus.py), submitted with and without an IPU GRES and set on pending jobs
with `scontrol update`, for real, by a user who is not root. For every string Slurm accepts, the
ipu licence Slurm counts (`license/ipu=N` in the job's TRES: the lab accounts for it) equals
the IPUs its GRES asks for, 0 without one. Any mismatch fails with the string."""

from __future__ import annotations

import re

import pytest

from tests.licence_corpus import corpus

from .conftest import SLURM_VERSION, wait_for

pytestmark = pytest.mark.usefixtures("users")
USER = "slurmipu-a"
NAME = "licfuzz"
STRINGS = 2000
# Remote licences (name@server, from slurmdbd): `ipu@db` is a licence of its own, not ipu.
REMOTE = (("matlab", 10), ("ipu", 64))
TRES_IPU = re.compile(r"(?:^|,)license/ipu=(\d+)(?:,|$)")


def slurm_count(fields: dict[str, str]) -> int:
    """The ipu licences Slurm holds for the job. 22.05 leaves the TRES as it was when a modify
    clears the licences, so an empty Licenses= counts 0."""
    if fields.get("Licenses", "(null)") in ("", "(null)"):
        return 0
    found = TRES_IPU.search(fields.get("TRES", ""))
    return int(found.group(1)) if found else 0


def show_jobs(lab, *job: str) -> dict[int, dict[str, str]]:
    """`scontrol show job -o`, one line a job, split into fields (values hold no spaces for
    these fields, but Licenses= may: it is read up to the next known key)."""
    out = {}
    for line in lab.run("scontrol", "show", "job", "-o", *job).stdout.splitlines():
        ident = re.match(r"JobId=(\d+)", line)
        if not ident:
            continue
        # what the job asks for: TRES= up to 23.02, ReqTRES= from 23.11
        fields = {"TRES": (re.search(r" ReqTRES=(\S*)", line) or re.search(r" TRES=(\S*)", line) or [None, ""])[1]}
        lic = re.search(r" Licenses=(.*?) Network=", line) or re.search(r" Licenses=(\S*)", line)
        fields["Licenses"] = lic.group(1) if lic else "(null)"
        out[int(ident.group(1))] = fields
    return out


def gres_args(gres) -> list[str]:
    return [f"--gres=ipu:{gres[0]}", "-N", str(gres[1])] if gres else []


@pytest.fixture
def remote_licences(clean_lab):
    lab = clean_lab
    for name, count in REMOTE:
        spec = [f"name={name}", "server=db", f"count={count}", "cluster=ipulab", "type=license"]
        # 23.11 renamed PercentAllowed to Allowed
        for share in ("allowed=100", "percentallowed=100"):
            if lab.run("sacctmgr", "-i", "add", "resource", *spec, share).returncode == 0:
                break
    lab.run("scontrol", "reconfigure")
    # slurmctld hears of slurmdbd's resources a moment later (23.11+: a reconfigure restarts it): a
    # string naming one before then is refused, and the corpus would test fewer strings
    wanted = {f"{name}@db" for name, _ in REMOTE}
    wait_for("slurmctld knows the remote licences", lambda: set(lab.run("scontrol", "show", "licenses").stdout.split()),
             60, until=lambda words: all(f"LicenseName={w}" in words for w in wanted))
    yield
    lab.run("scancel", "-n", NAME)
    for name, _ in REMOTE:
        lab.run("sacctmgr", "-i", "delete", "resource", f"name={name}", "server=db")


def test_every_accepted_licence_string_counts_exactly_the_gres_ipus(clean_lab, remote_licences, capsys):
    lab = clean_lab
    cases = corpus(STRINGS)
    wrong, submitted = [], {}
    for text, gres in cases:
        proc = lab.run_as(USER, "sbatch", "--parsable", "--hold", "-J", NAME, "-o", "/dev/null", *gres_args(gres),
                          "-L", text, "--wrap", "true")
        if proc.returncode == 0:
            submitted[int(proc.stdout.strip().split(";")[0])] = (text, gres)
    shown = show_jobs(lab)
    for job, (text, gres) in submitted.items():
        got, want = slurm_count(shown[job]), gres[0] * gres[1] if gres else 0
        if got != want:
            wrong.append(f"sbatch {' '.join(gres_args(gres))} -L {text!r}: Slurm counts ipu:{got}, GRES asks {want}")

    # The same strings set on pending jobs, one with IPUs (4 on 1 node) and one without.
    pool = {}
    for gres in (None, (4, 1)):
        proc = lab.run_as(USER, "sbatch", "--parsable", "--hold", "-J", NAME, "-o", "/dev/null", *gres_args(gres),
                          "--wrap", "true")
        assert proc.returncode == 0, proc.stderr
        pool[int(proc.stdout.strip().split(";")[0])] = gres[0] * gres[1] if gres else 0
    modified = 0
    for i, (text, _) in enumerate(cases):
        job = list(pool)[i % 2]
        if lab.run_as(USER, "scontrol", "update", f"JobId={job}", f"Licenses={text}").returncode == 0:
            modified += 1
        got = slurm_count(show_jobs(lab, str(job))[job])
        if got != pool[job]:
            wrong.append(f"scontrol update Licenses={text!r} on a job asking {pool[job]}: Slurm counts ipu:{got}")
    with capsys.disabled():
        print(f"\nlicence fuzz, Slurm {SLURM_VERSION}: {len(cases)} strings; sbatch accepted {len(submitted)}, "
              f"scontrol update accepted {modified}; {len(wrong)} mismatch(es)")
    assert len(cases) >= 2000
    assert not wrong, f"{len(wrong)} mismatch(es):\n" + "\n".join(wrong[:30])
