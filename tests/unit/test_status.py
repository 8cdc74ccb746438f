"""`slurm-ipu status`: the jobs, orphans and disagreements it shows, and IPU-hours from
accounting, fed facts without a cluster (conftest's `here`: a site installed under tmp_path)."""

from __future__ import annotations

import subprocess
import sys

from slurm_ipu.deploy import status
from slurm_ipu.vipu.types import Partition


def test_status_shows_jobs_orphans_and_a_disagreement(here):
    desc, _ = here
    facts = {"partitions": [Partition("slurm_7", 8, num_gcds=2), Partition("slurm_9", 4), Partition("theirs", 4)],
             "jobs": {7: {"state": "RUNNING", "user": "alice", "nodes": "node[1-2]", "start": 1000.0}},
             "licenses": {"total": 64, "used": 16}, "created": {"slurm_7": 990.0}, "queued": [{"partition": "slurm_3"}],
             "errors": {}}
    view = status.build(desc, facts, now=1060.0)
    rows = {r["partition"]: r for r in view["partitions"]}
    assert (rows["slurm_7"]["user"], rows["slurm_7"]["gcds"], rows["slurm_7"]["age_s"]) == ("alice", 2, 70.0)
    assert view["orphans"] == ["slurm_9"] and not rows["theirs"]["ours"]
    assert view["vipu"] == {"used": 16, "free": 48}
    assert "Slurm's ipu licence has 16 in use, V-IPU has 8" in view["disagreement"]
    text = "\n".join(status.table(view))
    assert "orphan: job gone" in text and "not slurm-ipu's" in text and "queued removals: slurm_3" in text


def test_status_and_doctor_cli_on_a_missing_site_say_so_in_one_line(tmp_path):
    for cmd in ("doctor", "status"):
        proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", cmd,
                               "--site", str(tmp_path / "none.yaml")], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "none.yaml" in proc.stderr


def test_ipu_hours_per_user_count_only_ipu_jobs_inside_the_window():
    since, now = 10_000, 20_000
    text = ("alice|billing=2,cpu=2,gres/ipu=4,license/ipu=4,node=2|10000|13600\n"   # 4 IPUs x 1 h
            "alice|cpu=1,node=1|10000|19000\n"                                    # no IPUs
            "bob|gres/ipu=2,license/ipu=2|8200|11800\n"                          # half before the window
            "bob|gres/ipu=1|18200|Unknown\n"                                     # still running: counts to now
            "carol|gres/ipu=8|5000|9000\n"                                       # ended before the window
            "junk line\n")
    assert status.parse_usage(text, since, now) == {"alice": 4.0, "bob": 1.5}


def test_status_shows_ipu_hours_when_accounting_is_there(here):
    desc, _ = here
    facts = {"partitions": [], "jobs": {}, "licenses": {"total": 64, "used": 0}, "created": {}, "queued": [],
             "usage": {"days": 7.0, "ipu_hours": {"alice": 4.0, "bob": 1.5}}, "errors": {}}
    lines = status.table(status.build(desc, facts))
    assert lines[-1] == "IPU-hours by user, last 7 days (accounting): alice 4.00, bob 1.50"
    facts.update(usage=None, errors={"sacct": "sacct: error: Problem talking to the database"})
    assert status.table(status.build(desc, facts))[-1].startswith("IPU-hours: accounting unreachable (sacct: error")
