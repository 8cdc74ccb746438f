"""`slurm-ipu metrics`: what it shows, read back with Prometheus's own parser,
and a source that failed is shown as down with its series left out, never as an empty cluster."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from slurm_ipu import config
from slurm_ipu.deploy import metrics
from slurm_ipu.slurm.commands import SqueueJob
from slurm_ipu.vipu.types import Partition

from .conftest import write_conf


def parsed(text: str) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def facts(**over):
    base = {"vipu": [Partition("slurm_7", 16, state="ACTIVE"), Partition("slurm_8", 4, state="PENDING")],
            "agents": [{"id": f"ag{k}", "status": "Down" if k == 3 else "Up"} for k in range(16)],
            "jobs": {7: SqueueJob(7, "RUNNING", (), "a", "node1", 1, None, "gres:ipu:16"),
                       9: SqueueJob(9, "PENDING", (), "b", None, None, "JobHeldAdmin", "gres/ipu:4"),
                       10: SqueueJob(10, "PENDING", (), "b", None, None, "Resources", "")},
            "licences": "LicenseName=ipu Total=64 Used=20 Free=44 Reserved=4 Remote=no",
            "reservations": {"slurm-ipu-ag3": 4, "maint": 2, "slurm-ipu-maint": 1},
            "queued": 1, "drained": 0, "errors": {}}
    return {**base, **over}


def test_the_cluster_s_ipus_machines_jobs_and_pool(tmp_path):
    site = config.load(str(write_conf(tmp_path)), environ={})
    seen = parsed(metrics.render(metrics.families(site, facts())))
    pod = (("pod", "c"),)
    assert seen[("slurm_ipu_pod_ipus", pod)] == 64
    assert [seen[("slurm_ipu_ipus", (*pod, ("state", s)))] for s in ("allocated", "unavailable", "idle")] == [20, 4, 40]
    assert seen[("slurm_ipu_machines", (("state", "down"),))] == 1
    assert seen[("slurm_ipu_job_objects", (("kind", "partition"), ("state", "pending")))] == 1
    assert [seen[("slurm_ipu_jobs", (("state", s),))] for s in ("running", "pending", "held")] == [1, 0, 1]
    assert seen[("slurm_ipu_health_reserved_ipus", ())] == 4  # the admin's maint reservation is not ours
    assert seen[("slurm_ipu_removals_queued", ())] == 1
    assert not any("slurm_7" in str(key) for key in seen)  # no per-job label


def test_a_failed_source_is_down_and_its_series_are_missing(tmp_path):
    site = config.load(str(write_conf(tmp_path)), environ={})
    seen = parsed(metrics.render(metrics.families(site, facts(vipu=None, errors={"vipu": "unreachable"}))))
    assert seen[("slurm_ipu_source_up", (("source", "vipu"),))] == 0
    assert seen[("slurm_ipu_source_up", (("source", "jobs"),))] == 1
    assert not any(name in ("slurm_ipu_ipus", "slurm_ipu_job_objects") for name, _ in seen)


def test_the_hook_service_s_durations_and_v_ipu_errors(tmp_path, mocker):
    """What the service counted (hooks/stats.py) as Prometheus histograms and a counter: the
    service's own Stats, through its file, read back by Prometheus's parser."""
    from slurm_ipu.errors import InsufficientIpus, VipuUnavailable
    from slurm_ipu.hooks.stats import Stats

    site = config.load(str(write_conf(tmp_path)), environ={})
    (tmp_path / "state").mkdir()
    stats = Stats(site.state_dir)
    for seconds in (0.02, 0.04, 0.3, 70.0):
        stats.observe("prolog", seconds)
    stats.observe("removal", 400.0)  # over the top bucket: +Inf only
    stats.vipu_error(VipuUnavailable("connection refused"))
    stats.vipu_error(VipuUnavailable("connection refused"))
    stats.vipu_error(InsufficientIpus("not enough free IPUs"))
    stats.save()
    again = Stats(site.state_dir)  # a restarted service carries on from the file
    again.observe("prolog", 0.001)
    again.save()
    seen = parsed(metrics.render(metrics.families(site, facts(hooks=metrics.gather(site, *fakes(mocker))["hooks"]))))
    bucket = "slurm_ipu_prolog_duration_seconds_bucket"
    assert [seen[(bucket, (("le", le),))] for le in ("0.01", "0.025", "0.05", "0.25", "0.5", "60.0", "+Inf")] \
        == [1, 2, 3, 3, 4, 4, 5]
    assert seen[("slurm_ipu_prolog_duration_seconds_count", ())] == 5
    assert abs(seen[("slurm_ipu_prolog_duration_seconds_sum", ())] - 70.361) < 1e-9
    assert (seen[("slurm_ipu_removal_duration_seconds_bucket", (("le", "300.0"),))],
            seen[("slurm_ipu_removal_duration_seconds_bucket", (("le", "+Inf"),))]) == (0, 1)
    assert seen[("slurm_ipu_epilog_duration_seconds_count", ())] == 0
    assert seen[("slurm_ipu_vipu_errors_total", (("kind", "unavailable"),))] == 2
    assert seen[("slurm_ipu_vipu_errors_total", (("kind", "exhausted"),))] == 1
    assert seen[("slurm_ipu_vipu_errors_total", (("kind", "timeout"),))] == 0  # there before the first one


def test_the_hook_service_s_last_passes(tmp_path, mocker):
    """When the service last ended each periodic pass: an alert on its age tells a service that
    is up but stuck from one that works (what was written by a service before this, no series)."""
    import json
    import time

    from slurm_ipu.hooks.stats import Stats, path_of

    site = config.load(str(write_conf(tmp_path)), environ={})
    (tmp_path / "state").mkdir()
    stats = Stats(site.state_dir)
    before = time.time()
    stats.passed("reap")
    stats.save()
    seen = parsed(metrics.render(metrics.families(site, facts(hooks=metrics.gather(site, *fakes(mocker))["hooks"]))))
    assert before <= seen[("slurm_ipu_service_pass_timestamp_seconds", (("pass", "reap"),))] <= time.time()
    assert ("slurm_ipu_service_pass_timestamp_seconds", (("pass", "health"),)) not in seen
    old = json.loads(open(path_of(site.state_dir)).read())
    del old["passes"]
    open(path_of(site.state_dir), "w").write(json.dumps(old))
    seen = parsed(metrics.render(metrics.families(site, facts(hooks=metrics.gather(site, *fakes(mocker))["hooks"]))))
    assert not any(name == "slurm_ipu_service_pass_timestamp_seconds" for name, _ in seen)
    assert seen[("slurm_ipu_prolog_duration_seconds_count", ())] == 0


def fakes(mocker):
    """A V-IPU client and Slurm whose every read fails: only the state directory is read."""
    from slurm_ipu.errors import SlurmError, VipuUnavailable

    client, slurm = mocker.Mock(), mocker.Mock()
    client.list_agents.side_effect = client.list_partitions.side_effect = VipuUnavailable("down")
    slurm.output.side_effect = slurm.licence_reservations.side_effect = slurm.node_reasons.side_effect = \
        SlurmError("down")
    return client, slurm
