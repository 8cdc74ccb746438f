"""Several V-IPU controllers, on two real emulators (two vPODs of four IPU-Machines and two hosts,
a tenant each) through the real `vipu` command: each job's partition is made and removed on its
own controller alone; one controller down fails only its own jobs, naming it, leaves the other's
working, and nothing of either is left once it is back."""

from __future__ import annotations

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import fragments
from slurm_ipu.emulator.api import Api
from slurm_ipu.emulator.process import EmulatorProcess
from slurm_ipu.hooks import epilog, health, prolog, reap
from slurm_ipu.hooks.controllers import Clients
from slurm_ipu.hooks.journal import Journal
from slurm_ipu.vipu import VipuClient

from ..fake_slurm import FakeSlurm
from .conftest import VIPU, job_env

SITE = """version: 1
cluster: tenants
state_dir: {state}
slurm: {{user: root}}
vipu: {{emulator: true, retries: 0, timeout: 5}}
health: {{interval: 60}}
pod: {{ipus_per_host: 8}}
pods:
  - {{name: vpoda, hosts: "node[1-2]", ipus: 16}}
  - {{name: vpodb, hosts: "node[3-4]", ipus: 16}}
controllers:
  - {{name: tenant-a, host: 127.0.0.1, port: {a}, pods: [vpoda]}}
  - {{name: tenant-b, host: 127.0.0.1, port: {b}, pods: [vpodb]}}
"""


class Tenants:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.path = tmp_path / "site.yaml"
        self._write(1, 2)  # the cluster files do not depend on the ports
        clusters = {}
        for name in ("tenant-a", "tenant-b"):
            clusters[name] = tmp_path / f"{name}.yaml"
            clusters[name].write_text(fragments.emulator_cluster(config.load(self.path, environ={}), name))
        self.clusters = clusters
        self.emus = {name: EmulatorProcess.start(tmp_path / name, cluster=str(path)) for name, path in clusters.items()}
        self._write(self.emus["tenant-a"].port, self.emus["tenant-b"].port)
        self.cfg = config.load(self.path, environ={})

    def _write(self, a: int, b: int) -> None:
        self.path.write_text(SITE.format(state=self.tmp / "state", a=a, b=b))

    def clients(self) -> Clients:
        return Clients(self.cfg, {c.name: VipuClient(command=VIPU, host=c.host, port=c.port, timeout=5, retries=0,
                                                     emulator_flags=True, controller=c.name)
                                  for c in self.cfg.controllers})

    def partitions(self, name: str) -> set[str]:
        api = Api("127.0.0.1", self.emus[name].port, timeout=10)
        try:
            return {p["partition"]["id"] for p in api.list_partitions()}
        finally:
            api.close()

    def restart(self, name: str) -> None:
        port = self.emus[name].port
        self.emus[name] = EmulatorProcess.start(self.tmp / name, cluster=str(self.clusters[name]), port=port)

    def stop(self) -> None:
        for emu in self.emus.values():
            emu.stop()


@pytest.fixture
def tenants(tmp_path):
    t = Tenants(tmp_path)
    yield t
    t.stop()


def test_each_job_s_partition_is_made_and_removed_on_its_own_controller(tenants):
    clients, slurm = tenants.clients(), FakeSlurm()
    a, b = job_env(41, nodes="node1", ipus=8), job_env(42, nodes="node3,node4", ipus=16)
    assert prolog.run(a, tenants.cfg, clients, slurm) == 0
    assert prolog.run(b, tenants.cfg, clients, slurm) == 0
    assert tenants.partitions("tenant-a") == {"slurm_41"} and tenants.partitions("tenant-b") == {"slurm_42"}
    assert epilog.run(b, tenants.cfg, clients) == 0 and epilog.run(a, tenants.cfg, clients) == 0
    assert tenants.partitions("tenant-a") == set() == tenants.partitions("tenant-b")


def test_a_controller_down_fails_only_its_own_jobs_and_nothing_is_left_once_it_is_back(tenants):
    cfg, clients, slurm = tenants.cfg, tenants.clients(), FakeSlurm()
    a1, b1 = job_env(51, nodes="node2", ipus=8), job_env(52, nodes="node3", ipus=8)
    assert prolog.run(a1, cfg, clients, slurm) == 0 and prolog.run(b1, cfg, clients, slurm) == 0
    tenants.emus["tenant-a"].stop()
    # tenant A's next job waits (requeued) with a reason naming its controller; B's jobs go on
    a2 = job_env(53, nodes="node1", ipus=8)
    assert prolog.run(a2, cfg, clients, slurm) != 0
    assert "V-IPU controller tenant-a:" in slurm.comments[53] and "requeued" in slurm.comments[53]
    b2 = job_env(54, nodes="node4", ipus=8)
    assert prolog.run(b2, cfg, clients, slurm) == 0 and tenants.partitions("tenant-b") == {"slurm_52", "slurm_54"}
    # A's running job ends while A is down: its removal waits in the journal (an epilog never fails
    # a node for V-IPU's sake), B's go at once
    assert epilog.run(a1, cfg, clients) == 0
    assert epilog.run(b1, cfg, clients) == 0 and epilog.run(b2, cfg, clients) == 0
    assert tenants.partitions("tenant-b") == set() and Journal(cfg.state_dir).names() == ["slurm_51"]
    # a reap meanwhile keeps A's record and entry (its listing could not say they are gone)
    said: list[str] = []
    assert reap.sweep(cfg, clients, FakeSlurm(), out=said.append) == 1
    assert any("V-IPU controller tenant-a skipped" in line for line in said), said
    assert Journal(cfg.state_dir).names() == ["slurm_51"]
    # the health pass names A, changes nothing of A's, and still reads B
    said.clear()
    health.run(cfg, clients, FakeSlurm(), out=said.append)
    assert any(line.startswith("health: V-IPU controller tenant-a skipped") for line in said), said
    # A back: the reap removes what its job left, and nothing of either is left
    tenants.restart("tenant-a")
    assert tenants.partitions("tenant-a") == {"slurm_51"}
    assert reap.sweep(cfg, clients, FakeSlurm(), out=said.append) == 0
    assert tenants.partitions("tenant-a") == set() == tenants.partitions("tenant-b")
    assert Journal(cfg.state_dir).names() == []


def test_a_job_s_tasks_reach_only_their_own_controller(tenants):
    """What a task of tenant A can do with its variables (IPUOF_VIPU_API_HOST/PORT name A's
    controller): A's partitions are there, B's are not to be seen or removed from there."""
    clients, slurm = tenants.clients(), FakeSlurm()
    assert prolog.run(job_env(61, nodes="node1", ipus=8), tenants.cfg, clients, slurm) == 0
    assert prolog.run(job_env(62, nodes="node3", ipus=8), tenants.cfg, clients, slurm) == 0
    a = tenants.cfg.controller_of(["node1"])
    theirs = VipuClient(command=VIPU, host=a.ipuof_host, port=a.ipuof_port, timeout=5, retries=0)
    assert {p.name for p in theirs.list_partitions()} == {"slurm_61"}
    assert theirs.remove_partition("slurm_62", missing_ok=True) is False  # not there: B's stays
    assert tenants.partitions("tenant-b") == {"slurm_62"}


def test_the_service_s_removals_of_one_controller_wait_while_the_other_s_go(tenants):
    """The slurm-ipu service's removal pass with one controller down: that controller's entries
    back off one by one; the other's are removed in the same pass, not held behind them."""
    from slurm_ipu.hooks import removal
    from slurm_ipu.hooks.service import Service

    cfg, clients, slurm = tenants.cfg, tenants.clients(), FakeSlurm()
    jobs = [job_env(71, nodes="node1", ipus=8), job_env(72, nodes="node3", ipus=8), job_env(73, nodes="node4", ipus=8)]
    for job in jobs:
        assert prolog.run(job, cfg, clients, slurm) == 0
    tenants.emus["tenant-a"].stop()
    for job in jobs:
        removal.queue(cfg, job)
    service = Service(cfg, clients, FakeSlurm())
    service.next_reap = service.next_health = float("inf")
    service.step()
    assert tenants.partitions("tenant-b") == set() and Journal(cfg.state_dir).names() == ["slurm_71"]
    assert service.retry_at == 0.0 and "slurm_71" in service.later  # its own backoff, nobody else's
    tenants.restart("tenant-a")
    service.later["slurm_71"] = (0.0, 0.5)  # due now
    service.step()
    assert tenants.partitions("tenant-a") == set() and Journal(cfg.state_dir).names() == []
