"""IPU accounting with a real database: the lab's slurmdbd on MariaDB, the site's
rendered AccountingStorageTRES=gres/ipu,license/ipu. What an admin reads: sacct per job, sreport
per account, `slurm-ipu status` per user."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import wait_for, wait_gone

pytestmark = pytest.mark.usefixtures("users")


def tres(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


def sacct_rows(lab, job: int) -> dict[str, dict]:
    """sacct's rows for a job and its steps, once slurmdbd has the job's end (it arrives after
    the job ends, from slurmctld's agent)."""
    def rows():
        out = lab.run("sacct", "-j", str(job), "-n", "-P", "-o", "JobID,NNodes,AllocTRES,ElapsedRaw,State,Account",
                      check=True).stdout
        found = {}
        for line in out.splitlines():
            jid, nnodes, alloc, elapsed, state, account = line.split("|")
            found[jid] = {"nnodes": int(nnodes), "tres": tres(alloc), "elapsed": int(elapsed), "state": state,
                          "account": account}
        top = found.get(str(job), {})
        return found if top.get("state") == "COMPLETED" and f"{job}.batch" in found else None

    return wait_for(f"sacct has job {job} completed", rows, 60)


def test_sacct_shows_a_jobs_ipus_in_total_and_per_node_and_none_without(clean_lab):
    lab = clean_lab
    ipu = lab.sbatch("-N", "2", "--gres=ipu:2", "-o", "/dev/null", "--wrap", "srun -N 2 true")
    plain = lab.sbatch("-o", "/dev/null", "--wrap", "true")
    for job in (ipu, plain):
        wait_gone(lab, job)
    rows = sacct_rows(lab, ipu)
    whole, batch, step = rows[str(ipu)], rows[f"{ipu}.batch"], rows[f"{ipu}.0"]
    assert (whole["nnodes"], whole["tres"].get("gres/ipu"), whole["tres"].get("license/ipu")) == (2, "4", "4"), whole
    # per node: the batch step holds one node's GRES, a step over both nodes the job's
    assert (batch["nnodes"], batch["tres"].get("gres/ipu")) == (1, "2"), batch
    assert (step["nnodes"], step["tres"].get("gres/ipu")) == (2, "4"), step
    assert not {"gres/ipu", "license/ipu"} & set(sacct_rows(lab, plain)[str(plain)]["tres"])


def sizes_by_account(lab, hour: float) -> dict[str, int]:
    """IPU-seconds per account from sreport's job report, read from the job records (sreport's
    cluster reports wait for the hourly rollup). sreport rounds its window to whole hours and ends
    it at most at the hour nearest to now; a window that would be shorter than an hour becomes the
    hour from its start. So `start=<this hour's start> end=now` is this hour, whatever the minute."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(hour))
    out = lab.run("sreport", "-P", "-t", "seconds", "-T", "gres/ipu", "job", "SizesByAccount", "FlatView",
                  f"start={start}", "end=now", check=True).stdout
    rows = [line.split("|") for line in out.splitlines() if line.count("|") >= 3]
    header, rows = rows[0], rows[1:]
    # the size buckets ("0-49 TRES", ..., ">= 1000 TRES"); 24.11 adds "Total Count" after them
    buckets = [i for i, name in enumerate(header) if name.endswith(" TRES")]
    assert header[:2] == ["Cluster", "Account"] and buckets, header
    return {row[1]: sum(int(row[i]) for i in buckets) for row in rows}


def test_sreport_shows_ipu_usage_per_account(clean_lab):
    lab = clean_lab
    for account in ("ipu-vision", "ipu-speech"):
        lab.run("sacctmgr", "-i", "add", "account", account)  # exits 1 when it exists already: checked below
    lab.run("sacctmgr", "-i", "add", "user", "root", "account=ipu-vision,ipu-speech")
    assocs = lab.run("sacctmgr", "-n", "-P", "list", "assoc", "user=root", "format=account", check=True).stdout.split()
    assert {"ipu-vision", "ipu-speech"} <= set(assocs), assocs
    # every job inside one clock hour, the window sreport can show now
    wait_for("not the last 20 s of an hour", lambda: time.time() % 3600 < 3580, 25)
    hour = time.time() // 3600 * 3600
    jobs = {
        lab.sbatch("-A", "ipu-vision", "--gres=ipu:4", "-o", "/dev/null", "--wrap", "sleep 2"): 4,
        lab.sbatch("-A", "ipu-speech", "--gres=ipu:1", "-o", "/dev/null", "--wrap", "sleep 1"): 1,
        lab.sbatch("-A", "ipu-speech", "-o", "/dev/null", "--wrap", "sleep 1"): 0,  # no IPUs: adds nothing
    }
    expected = {"ipu-vision": 0, "ipu-speech": 0}
    for job, ipus in jobs.items():
        wait_gone(lab, job)
        row = sacct_rows(lab, job)[str(job)]
        assert int(row["tres"].get("gres/ipu", 0)) == ipus, row
        expected[row["account"]] += ipus * row["elapsed"]
    assert expected["ipu-vision"] > 0
    # sreport, like any window query, lists a job once the second it ended in has passed
    seen = []

    def reported() -> bool:
        seen.append(sizes_by_account(lab, hour))
        return {a: seen[-1].get(a) for a in expected} == expected

    try:
        wait_for("sreport's IPU-seconds per account", reported, 30)
    except AssertionError:
        raise AssertionError(f"sreport says {seen[-1]}, sacct {expected}") from None


def test_status_reports_ipu_hours_per_user_from_accounting(clean_lab, users):
    lab = clean_lab
    user = users[0]
    proc = lab.run_as(user, "sbatch", "--parsable", "--gres=ipu:2", "-o", "/dev/null", "--wrap", "sleep 2")
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip())
    wait_gone(lab, job)
    row = sacct_rows(lab, job)[str(job)]
    # A window query (what status runs) lists a job a moment after `sacct -j` does: once the
    # second it ended in has passed.
    def window():
        out = lab.run("sacct", "-a", "-X", "-n", "-P", "-S", "now-7days", "-o", "JobID,User,AllocTRES,ElapsedRaw",
                      check=True).stdout
        rows = [line.split("|") for line in out.splitlines()]
        return rows if any(r[0] == str(job) for r in rows) else None

    rows = wait_for(f"job {job} in sacct's window query", window, 30)
    ipu_seconds = sum(int(tres(t).get("gres/ipu", 0)) * int(e) for _, u, t, e in rows if u == user)
    assert ipu_seconds >= 2 * row["elapsed"] > 0
    view = json.loads(lab.run("slurm-ipu", "status", "--json", check=True).stdout)
    assert view["usage"]["days"] == 7
    assert view["usage"]["ipu_hours"][user] == pytest.approx(ipu_seconds / 3600, abs=2e-4)
    text = lab.run("slurm-ipu", "status", check=True).stdout
    assert f"{user} {ipu_seconds / 3600:.2f}" in text.splitlines()[-1], text
