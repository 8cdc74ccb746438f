"""Several V-IPU controllers under one Slurm (a vPOD per tenant, a controller per Pod): the site
description, what each fragment says of them, and each job's controller. The hooks on two real
emulators: tests/emulator/test_controllers.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import fragments
from slurm_ipu.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ROOT / "examples" / "site-two-tenants.yaml"


@pytest.fixture(scope="module")
def site():
    return config.load(TENANTS)


def test_each_pod_has_its_controller_and_each_job_its_pods(site):
    a, b = site.controllers
    assert (a.name, a.host, a.port, a.cli_config, a.allocation) == \
        ("tenant-a", "vipu-a.example.org", 8090, "/etc/slurm-ipu/vipu-tenant-a.hcl", "vpoda")  # its vPOD's
    assert site.controller_of(["ipu-host3", "ipu-host4"]) is b and site.controller_of(["ipu-host1"]) is a
    with pytest.raises(ConfigError, match="under V-IPU controllers tenant-a, tenant-b; a job gets IPUs of one"):
        site.controller_of(["ipu-host2", "ipu-host3"])
    clients = [site.client_for([h]) for h in ("ipu-host1", "ipu-host4")]
    assert [(c.host, c.command, c.controller) for c in clients] == [
        ("vipu-a.example.org", ["/usr/bin/vipu", "--config", "/etc/slurm-ipu/vipu-tenant-a.hcl"], "tenant-a"),
        ("vipu-b.example.org", ["/usr/bin/vipu", "--config", "/etc/slurm-ipu/vipu-tenant-b.hcl"], "tenant-b")]
    with pytest.raises(ConfigError, match="2 V-IPU controllers; say which"):
        site.vipu_client()
    # each controller names its own machines and ILDs from the first
    assert site.pod_agents() == [(["ipu-host1", "ipu-host2"], ["ag0", "ag1", "ag2", "ag3"]),
                                 (["ipu-host3", "ipu-host4"], ["ag0", "ag1", "ag2", "ag3"])]
    assert site.ild_ids() == {"vpoda": [0], "vpodb": [0]}


def test_slurm_never_joins_two_controllers_and_tasks_get_their_node_s(site):
    texts = fragments.texts(site)
    topology = [ln for ln in texts["topology.conf"].splitlines() if ln.startswith("SwitchName")]
    # each vPOD its own island: no switch above them
    assert topology == ["SwitchName=vpoda Nodes=ipu-host[1-2]", "SwitchName=vpodb Nodes=ipu-host[3-4]"]
    line = next(ln for ln in texts["plugstack-ipu.conf"].splitlines() if ln.startswith("required"))
    assert line.endswith(" controller=ipu-host[1-2]@vipu-a.example.org:8090 "
                         "controller=ipu-host[3-4]@vipu-b.example.org:8090")
    lua = texts["job_submit.lua"]
    assert "local POD_IPUS = 16\n" in lua and "local CLASS_PODS = 1 " in lua


def test_each_controller_s_emulator_holds_its_own_machines_alone(site):
    import yaml

    for name, pod in (("tenant-a", "vpoda"), ("tenant-b", "vpodb")):
        doc = yaml.safe_load(fragments.emulator_cluster(site, name))
        assert (doc["ilds"], doc["agents_per_ild"]) == (1, 4)
        assert doc["allocations"] == {pod: ["ag0", "ag1", "ag2", "ag3"]} and doc["grants"] == {pod: ["slurm"]}
    with pytest.raises(ConfigError, match="several V-IPU controllers"):
        fragments.emulator_cluster(site)


def _variant(tmp_path, old: str, new: str) -> Path:
    path = tmp_path / "site.yaml"
    text = TENANTS.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("old,new,words", [
    ("    pods: [vpodb]\n", "    pods: [vpoda]\n", "Pod 'vpoda' is also under controller tenant-a"),
    ("    pods: [vpodb]\n", "    pods: [vpodc]\n", "Pod 'vpodc' is not in pods: (vpoda, vpodb)"),
    ("    pods: [vpodb]\n", "    pods: [vpoda, vpodb]\n", "Pod 'vpoda' is also under"),
    ("  - name: tenant-b\n", "  - name: tenant-a\n", "controller name tenant-a is taken"),
    ("    host: vipu-b.example.org\n", "    host: vipu b\n", "controller tenant-b: host='vipu b' is out of range"),
    ("  port: 8090\n", "  port: 8090\n  host: v\n", "vipu.host and controllers: both given"),
    ("ipus: 16}\ncontrollers", "ipus: 24}\ncontrollers", "ipus=24: a vPOD smaller than an ILD has 4, 8, 16, 32"),
    ("    pods: [vpoda]\n", "    pods: vpoda\n", "pods='vpoda' must list the names of the Pods"),
])
def test_a_wrong_controller_is_refused_in_one_line_naming_it(tmp_path, old, new, words):
    with pytest.raises(ConfigError) as err:
        config.load(_variant(tmp_path, old, new))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_vpod_has_a_controller_of_its_own(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("version: 1\ncluster: c\nvipu: {host: v, allocation: all}\npod: {ipus_per_host: 8}\n"
                    "pods:\n  - {name: a, hosts: 'n[1-2]', ipus: 16}\n  - {name: b, hosts: 'n[3-4]', ipus: 16}\n")
    with pytest.raises(ConfigError, match="Pod a is a vPOD of part of an ILD .ipus:.; such a Pod has a V-IPU "
                                          "controller of its own"):
        config.load(path)


def test_a_controller_of_several_pods_has_a_switch_above_them_and_none_above_it(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("version: 1\ncluster: c\npod: {ipus_per_host: 16}\npods:\n"
                    "  - {name: a1, hosts: 'n[1-4]'}\n  - {name: a2, hosts: 'n[5-8]'}\n"
                    "  - {name: b1, hosts: 'm[1-4]'}\ncontrollers:\n  - {name: east, host: ve, pods: [a1, a2]}\n"
                    "  - {name: west, host: vw, pods: [b1]}\n")
    site = config.load(path)
    assert [c.allocation for c in site.controllers] == ["east", "b1"]
    topology = [ln for ln in fragments.texts(site)["topology.conf"].splitlines() if ln.startswith("SwitchName")]
    assert topology == ["SwitchName=a1 Nodes=n[1-4]", "SwitchName=a2 Nodes=n[5-8]", "SwitchName=b1 Nodes=m[1-4]",
                        "SwitchName=east Switches=a1,a2"]
    lua = fragments.texts(site)["job_submit.lua"]
    assert "local POD_IPUS = 128\n" in lua and "local CLASS_PODS = 2 " in lua  # east's two Pods
    assert site.ild_ids() == {"a1": [0], "a2": [1], "b1": [0]}


def test_render_refuses_a_site_of_several_controllers_without_pods_in_one_line(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("version: 1\ncluster: c\npod: {ipus: 64, hosts: 'n[1-4]', ipus_per_host: 16}\n"
                    "controllers:\n  - {name: a, host: va, pods: [p]}\n  - {name: b, host: vb, pods: [q]}\n")
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "render", str(path), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert "controllers: with no pods:; each controller manages Pods of pods: by name" in proc.stderr


@pytest.mark.skipif(__import__("shutil").which("lua5.1") is None, reason="lua5.1 missing: `make test` installs it")
@pytest.mark.parametrize("job,words", [
    ({"tres_per_node": "gres:ipu:8", "min_nodes": 4}, "--gres=ipu:8 on 4 node(s) asks for 32 IPUs, more than one "
                                                      "V-IPU controller's 16"),
    ({"tres_per_node": "gres:ipu:2", "min_nodes": 4}, "-N 4 takes 2 Pods of 2 hosts; a V-IPU controller has at most 1 "
                                                      "(a job stays under one)"),
])
def test_a_request_no_single_controller_can_hold_is_refused_at_submit(site, tmp_path, job, words):
    from .test_job_submit_lua import run

    path = tmp_path / "job_submit.lua"
    path.write_text(fragments.texts(site)["job_submit.lua"])
    rc, _, _, msg = run(str(path), job)
    assert rc != 0 and words in msg, msg
    rc, licence, _, msg = run(str(path), {"tres_per_node": "gres:ipu:8", "min_nodes": 2})  # one vPOD: runs
    assert (rc, licence, msg) == (0, "ipu:16", "")


def test_metrics_say_which_controller_is_down_and_keep_the_other_s_series(site):
    """gather over two controllers, one of which does not answer (a fake `vipu` at the subprocess
    boundary): its controller_up is 0, the other's IPUs are still counted, per Pod, by its own
    machines' names (both controllers have an ag0)."""
    from prometheus_client.parser import text_string_to_metric_families

    from slurm_ipu.deploy import metrics
    from slurm_ipu.hooks.controllers import Clients
    from slurm_ipu.vipu import VipuClient

    from ..fake_slurm import FakeSlurm

    def runner(host_ok: str):
        def run(argv, **kwargs):
            host = argv[argv.index("--api-host") + 1]
            if host != host_ok:
                return subprocess.CompletedProcess(argv, 1, "", "unable to connect to VIRM/V-IPU Controller")
            if "partitions" in argv:
                out = ('[{"partition": {"id": "slurm_9", "spec": {"size": 8, "ipus": [0,1,2,3,4,5,6,7]}, '
                       '"status": {"state": "PS_ACTIVE"}}}]')
            else:
                out = '[' + ",".join(f'{{"id": "ag{k}", "status": "Up"}}' for k in range(4)) + ']'
            return subprocess.CompletedProcess(argv, 0, out, "")
        return run

    made = {c.name: VipuClient(command=["vipu"], host=c.host, port=c.port, retries=0, controller=c.name,
                               runner=runner("vipu-b.example.org")) for c in site.controllers}
    facts = metrics.gather(site, Clients(site, made), FakeSlurm())
    seen = {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(metrics.render(metrics.families(site, facts)))
            for s in fam.samples}
    assert seen[("slurm_ipu_controller_up", (("controller", "tenant-a"),))] == 0
    assert seen[("slurm_ipu_controller_up", (("controller", "tenant-b"),))] == 1
    assert seen[("slurm_ipu_ipus", (("controller", "tenant-b"), ("pod", "vpodb"), ("state", "allocated")))] == 8
    assert seen[("slurm_ipu_pod_ipus", (("controller", "tenant-a"), ("pod", "vpoda")))] == 16
    assert not [k for k in seen if k[0] == "slurm_ipu_ipus" and ("pod", "vpoda") in k[1]]  # missing, not idle


def test_a_remover_given_one_controller_s_client_takes_only_that_controller_s_records(site):
    """A prolog short of IPUs works the journal off with its own job's client: another
    controller's entries are not its to try (on its controller they would read as already gone,
    and their records be dropped while their partitions stay)."""
    from slurm_ipu.hooks.controllers import clients_of

    mine = site.client_for(["ipu-host1"])
    clients = clients_of(site, mine)
    assert clients.of_record({"hosts": ["ipu-host2"]}) is mine
    assert clients.of_record({"hosts": ["ipu-host3"]}) is None and clients.owner({"hosts": ["ipu-host3"]}) == "tenant-b"
    assert clients.owner({"job_id": 7}) is None  # a record that cannot say
