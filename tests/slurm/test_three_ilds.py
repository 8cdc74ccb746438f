"""A shape only a Pod of three ILDs has, asked the way a user writes it: 192 IPUs over 3 ILDs in
12 GCDs (rules.valid_ilds(192) is [3]; valid_gcds(192, 3) holds 12). The SPANK plugin passes the
counts on, job_submit.lua (rendered from the rule table) accepts them, the prolog makes that
partition, and every task attaches to its GCD; nothing is left after the job."""

from __future__ import annotations

import pytest

from ..waiting import wait_for
from .conftest import ensure_users, parse_probe, started_lab, user_probe_script, wait_gone, wait_no_partitions


@pytest.fixture(scope="module")
def lab3():
    with started_lab(nodes=3, ipus_per_node=64) as handle:  # a POD192: three hosts of 64 IPUs
        yield handle


def test_192_ipus_over_3_ilds_in_12_gcds_run_as_a_user_writes_it(lab3):
    lab = lab3
    user = ensure_users()[0]
    probe = user_probe_script(lab)
    out = lab.spec.path("users", "three-ilds-%j.out")
    proc = lab.run_as(user, "sbatch", "--parsable", "-N3", "--ipus=192", "--ipu-ilds=3", "--ipu-gcds=12",
                      "--ntasks-per-node=2", "-o", str(out), "--wrap", f"srun {probe}")
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip())
    wait_gone(lab, job, 120)
    log = lab.spec.path("state", "hooks.log").read_text()
    assert f"job {job}: partition slurm_{job} ACTIVE, 192 IPUs, 12 GCD(s)" in log, log[-1500:]
    text = lab.spec.path("users", f"three-ilds-{job}.out").read_text()
    probes, attaches = parse_probe(text)
    assert len(probes) == 6 and {p[4] for p in probes} == {f"slurm_{job}"}, text
    assert len(attaches) == 6 and all(len(a["ipus"]) == 16 for a in attaches), text  # a GCD's IPUs each
    wait_for("the job's partition removed", lambda: f"slurm_{job}" not in lab.partitions(), 60)
    wait_no_partitions(lab, 30, "nothing left")


def test_shapes_a_three_ild_pod_has_not_are_refused_at_submit_in_one_line(lab3):
    user = ensure_users()[0]
    for args, said in ((["--ipu-ilds=2"], "--ipu-ilds=2: a partition of 192 IPUs on this Pod spans 3 ILD(s)"),
                       (["--ipu-gcds=8"], "--ipu-gcds=8: a partition of 192 IPUs over 3 ILD(s) has 3, 12, 24, 48, "
                                          "96, 192 GCD(s)")):
        proc = lab3.run_as(user, "sbatch", "-N3", "--ipus=192", *args, "--wrap", "true")
        assert proc.returncode != 0 and said in proc.stderr, proc.stderr
