"""Pods of both models on one site (the model chosen per Pod group), against the
real emulator with the cluster file the site renders: a job on the allocation-model Pod gets
`c<jobid>`, a job on the other Pod a partition `slurm_<jobid>` in that Pod's allocation; the
epilog, the slurm-ipu service's journal and reap remove each as what it is; a job over both Pods gets
nothing and says why."""

from __future__ import annotations

import json
import time

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import fragments
from slurm_ipu.emulator.api import Api
from slurm_ipu.emulator.process import EmulatorProcess
from slurm_ipu.hooks import epilog, jobenv, prolog, reap
from slurm_ipu.hooks.journal import Journal
from slurm_ipu.hooks.removal import work_off
from slurm_ipu.vipu import VipuClient

from ..fake_slurm import FakeSlurm
from .conftest import VIPU

ALICE = 4201


def _site_doc(tmp_path, port: int) -> dict:
    return {"version": 1, "cluster": "mixed", "state_dir": str(tmp_path / "state"),
            "vipu": {"host": "127.0.0.1", "port": port, "emulator": True, "retries": 1, "allocation": "all"},
            "pod": {"ipus_per_host": 16}, "prolog": {"deadline": 3},
            "pods": [{"name": "poda", "hosts": "node[1-4]", "model": "allocation"},
                     {"name": "podb", "hosts": "node[5-8]"}]}


@pytest.fixture
def mixed(tmp_path):
    """(site, client, api): the emulator runs the cluster file the site renders (as the lab's)."""
    probe = config.parse(json.dumps(_site_doc(tmp_path, 8090)), "probe.yaml")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(fragments.emulator_cluster(probe))
    emu = EmulatorProcess.start(tmp_path / "emu", cluster=str(cluster))
    path = tmp_path / "site.yaml"
    path.write_text(json.dumps(_site_doc(tmp_path, emu.port)))
    cfg = config.load(str(path), environ={})
    client = VipuClient(command=VIPU, admin_command=VIPU, host="127.0.0.1", port=emu.port, timeout=10, retries=1,
                        backoff=0.05, emulator_flags=True)
    api = Api("127.0.0.1", emu.port, timeout=10)
    yield cfg, client, api
    api.close()
    emu.stop()


def job(job_id, nodes, ipus=32, restart=0):
    return jobenv.from_env({"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": str(ALICE), "SLURM_JOB_NODELIST": nodes,
                            "SLURM_JOB_LICENSES": f"ipu:{ipus}", "SLURM_JOB_RESTART_COUNT": str(restart),
                            "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"})


def _state(api) -> tuple[dict, dict]:
    allocs = {a["id"]: a["agents"] for a in api.allocations() if a["id"] not in ("all", "poda", "podb")}
    parts = {p["partition"]["id"]: p["partition"]["spec"]["allocation"] for p in api.list_partitions()}
    return allocs, parts


def test_each_pod_s_jobs_get_their_model_and_the_epilog_removes_each(mixed):
    cfg, client, api = mixed
    assert prolog.run(job(42, "node[1-2]"), cfg, client, FakeSlurm()) == 0
    assert prolog.run(job(43, "node[5-6]"), cfg, client, FakeSlurm()) == 0
    allocs, parts = _state(api)
    assert allocs == {"c42": [f"ag{i}" for i in range(8)]}  # Pod a's machines: ag0-15
    assert parts == {"slurm_43": "podb"}
    # The allocation-model job makes its own partition, as Graphcore's scripts do.
    client.create_partition("p42", 16, allocation="c42", deadline=time.monotonic() + 10)
    assert epilog.run(job(42, "node[1-2]"), cfg, client) == 0
    assert epilog.run(job(43, "node[5-6]"), cfg, client) == 0
    assert _state(api) == ({}, {})
    with open(f"{cfg.state_dir}/hooks.log") as log:
        text = log.read()
    assert "job 42: allocation c42 removed" in text and "job 43: partition slurm_43 removed" in text


def test_a_job_over_pods_of_both_models_gets_nothing_and_the_reason(mixed):
    cfg, client, api = mixed
    slurm = FakeSlurm()
    assert prolog.run(job(44, "node[4-5]"), cfg, client, slurm) == 1
    assert "Pods poda (allocation), podb (partition), of both V-IPU models" in slurm.comments[44]
    assert "requeued" in slurm.comments[44]
    assert _state(api) == ({}, {})
    assert epilog.run(job(44, "node[4-5]"), cfg, client) == 0  # nothing of slurm-ipu's to remove


def test_the_journal_and_reap_remove_each_kind_as_what_it_is(mixed):
    cfg, client, api = mixed
    for job_id, nodes in ((7, "node1"), (8, "node5"), (9, "node2"), (10, "node6")):
        assert prolog.run(job(job_id, nodes, ipus=16), cfg, client, FakeSlurm()) == 0
    client.create_partition("p7", 16, allocation="c7", deadline=time.monotonic() + 10)
    # The slurm-ipu service's handoff: the epilog journals the job's object, the removal thread works it off.
    journal = Journal(cfg.state_dir)
    journal.add(cfg.job_name(7, ["node1"]), 7, "queued by the epilog")
    journal.add(cfg.job_name(8, ["node5"]), 8, "queued by the epilog")
    done, err = work_off(cfg, client, journal.names(), time.monotonic() + 10)
    assert (sorted(done), err) == (["c7", "slurm_8"], {})
    # Jobs 9 and 10 ended with no epilog (slurmctld died): reap finds both kinds.
    lines = []
    assert reap.run(cfg, client, FakeSlurm({}), out=lines.append) == 0
    assert sorted(lines) == ["reap: removed c9 (job 9 gone)", "reap: removed slurm_10 (job 10 gone)"]
    assert _state(api) == ({}, {})
