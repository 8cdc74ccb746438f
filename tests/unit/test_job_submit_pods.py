"""job_submit.lua on sites of several Pods: Slurm keeps a job inside one Pod or gives it whole
Pods (one switch per Pod), and on sites with Pods of both V-IPU models a job meets one model.
The harness and the rendered values: test_job_submit_lua.py."""

from __future__ import annotations

import subprocess

import pytest

from slurm_ipu.deploy import render

from .test_job_submit_lua import GRES_REFUSED, HARNESS, LUA, lua_table, run_tres, values

pytestmark = pytest.mark.skipif(LUA is None, reason="lua5.1 missing: `make test` installs it")


# --- two Pods of four hosts (one ILD each): Slurm keeps a job inside one Pod, or gives it whole Pods

SWITCHES = """
print(tostring(job.req_switch) .. "\\t" .. tostring(job.wait4switch))
"""


def _pods_lua(tmp_path_factory, hosts: int) -> str:
    path = tmp_path_factory.mktemp("luapods") / "job_submit.lua"
    pods = [{"name": n, "hosts": [f"h{k}" for k in range(1, hosts + 1)], "ilds": 1} for n in ("poda", "podb")]
    path.write_text(render.render("job_submit/job_submit.lua", values(128) | {"pods": pods}))
    return str(path)


@pytest.fixture(scope="module")
def lua_pods(tmp_path_factory):
    return _pods_lua(tmp_path_factory, 4)


def test_a_job_over_part_of_a_second_pod_is_refused(tmp_path_factory):
    three = _pods_lua(tmp_path_factory, 3)  # Pods of 3 hosts: 4 nodes x 16 = 64 would straddle two
    rc, _, _, msg = run_switches(three, {"tres_per_node": "gres:ipu:16", "min_nodes": 4})
    assert rc != 0 and msg == ("slurm-ipu: -N 4 spans Pods of 3 hosts: a job over several Pods takes whole Pods; "
                               "use -N 3 or fewer, or a multiple of 3")


def run_switches(path: str, job: dict) -> tuple[int, str, str, str]:
    code = HARNESS % {"path": path, "job": lua_table(job), "rec": "{}", "modify": "false", "parts": "{}"} + SWITCHES
    proc = subprocess.run([LUA, "-"], input=code, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    first, switches = proc.stdout.rstrip("\n").split("\n")
    rc, _, _, msg = first.split("\t")
    req, wait = switches.split("\t")
    return int(rc), req, wait, msg


@pytest.mark.parametrize("nodes,per,switches", [(1, 16, "1"), (2, 8, "1"), (4, 16, "1"), (8, 16, "2"), (8, 2, "2")])
def test_a_job_gets_one_switch_per_pod_it_needs(lua_pods, nodes, per, switches):
    rc, req, wait, msg = run_switches(lua_pods, {"tres_per_node": f"gres:ipu:{per}", "min_nodes": nodes})
    assert (rc, req, wait, msg) == (0, switches, str(render.SWITCH_WAIT), "")


@pytest.mark.parametrize("job,words", [
    ({"tres_per_node": "gres:ipu:16", "min_nodes": 8, "spank_job_env": ["IPU_ILDS=1"]},
     "--ipu-ilds=1: the job takes 2 Pods, so its partition spans 2 ILD(s)"),
    ({"tres_per_node": "gres:ipu:16", "min_nodes": 2, "spank_job_env": ["IPU_ILDS=2"]},
     "--ipu-ilds=2: a job on one Pod's hosts has that Pod's 1 ILD(s)"),
    ({"tres_per_node": "gres:ipu:8", "min_nodes": 8, "spank_job_env": ["IPU_GCDS=2"]},
     "--ipu-gcds=2: a partition of 64 IPUs over 2 ILD(s) has 4, 8, 16, 32, 64 GCD(s)"),
])
def test_a_job_that_cannot_sit_in_whole_pods_is_refused(lua_pods, job, words):
    rc, _, _, msg = run_switches(lua_pods, job)
    assert rc != 0 and msg == "slurm-ipu: " + words


def test_one_pod_sites_leave_switches_alone(tmp_path):
    path = tmp_path / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", values(64)))
    rc, req, wait, _ = run_switches(str(path), {"tres_per_node": "gres:ipu:16", "min_nodes": 4})
    assert (rc, req, wait) == (0, "nil", "nil")


# --- Pods of both models (the model chosen per Pod group) ---------------------

MIXED_SITE = """version: 1
cluster: mixed
vipu: {host: 127.0.0.1}
pod: {ipus_per_host: 16}
pods:
  - {name: poda, hosts: "node[1-4]", model: allocation}
  - {name: podb, hosts: "node[5-8]"}
  - {name: podc, hosts: "node[9-12]", model: allocation}
  - {name: podd, hosts: "node[13-16]"}
vipu_allocation_placeholder: null
"""


@pytest.fixture(scope="module")
def lua_mixed(tmp_path_factory):
    """Four Pods: a and c allocation-per-job, b and d partition-per-job; Slurm 24.11."""
    from slurm_ipu import config
    from slurm_ipu.deploy import fragments

    text = MIXED_SITE.replace("vipu_allocation_placeholder: null\n", "").replace(
        "vipu: {host: 127.0.0.1}", "vipu: {host: 127.0.0.1, allocation: all}\nslurm: {version: '24.11'}")
    site = config.parse(text, "mixed.yaml")
    path = tmp_path_factory.mktemp("luamixed") / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", fragments.context(site)))
    return str(path)


PARTS = {"alloc": {"nodes": "node[1-4,9-12]", "flag_default": 0},
         "part": {"nodes": "node[5-8],node[13-16]", "flag_default": 0},
         "all": {"nodes": "node[1-16]", "flag_default": 1},
         "cpu": {"nodes": "cpu[01-02]", "flag_default": 0}}


@pytest.mark.parametrize("job,tres,said", [
    ({"partition": "alloc"}, "gres/ipu:16", "4 IPUs per node raised to 16"),  # lands on an allocation Pod
    ({"partition": "part"}, "gres/ipu:4", ""),  # partition-per-job Pods: as asked
    ({"partition": "part,alloc"}, "gres/ipu:16", "raised"),  # may land on either: whole hosts
    ({}, "gres/ipu:16", "raised"),  # the default partition holds both
    ({"partition": "cpu"}, "gres/ipu:4", ""),  # no IPU host of the allocation model
    ({"partition": "nosuch"}, "gres/ipu:16", "raised"),  # not known here: whole hosts, Slurm refuses it
])
def test_with_pods_of_both_models_a_job_takes_whole_hosts_where_it_may_meet_an_allocation_pod(lua_mixed, job, tres,
                                                                                               said):
    rc, lic, got, msg = run_tres(lua_mixed, {"tres_per_node": "gres/ipu:4", "min_nodes": 1, **job}, PARTS)
    assert (rc, got) == (0, tres) and said in msg, msg


def test_a_job_over_several_pods_of_both_models_is_refused_and_of_one_model_is_not(lua_mixed):
    job = {"tres_per_node": "gres/ipu:16", "min_nodes": 8}
    rc, _, _, msg = run_tres(lua_mixed, job, PARTS)  # the default partition: Pods of both models
    assert rc == GRES_REFUSED
    assert msg == ("slurm-ipu: --gres=ipu:16 on 8 node(s) takes 2 Pods, but its Slurm partition(s) (the default) hold "
                   "Pods of both V-IPU models (a job gets one); ask for a partition of one model with -p"), msg
    for one in ("alloc", "part"):
        assert run_tres(lua_mixed, {**job, "partition": one}, PARTS)[:3] == (0, "ipu:128", "gres/ipu:16")


def test_a_partition_s_node_list_is_read_as_slurm_writes_hostlists(lua_mixed):
    parts = {"odd": {"nodes": "node[01-02],node[5,7-8],node10", "flag_default": 1}}
    # node01/node02 are not the site's node1/node2; node10 is in Pod c (allocation)
    assert run_tres(lua_mixed, {"tres_per_node": "gres/ipu:4"}, parts)[2] == "gres/ipu:16"
    parts = {"odd": {"nodes": "node[01-02],node[5,7-8]", "flag_default": 1}}
    assert run_tres(lua_mixed, {"tres_per_node": "gres/ipu:4"}, parts)[2] == "gres/ipu:4"


