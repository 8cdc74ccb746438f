"""job_submit.lua on a site whose hosts hold different IPU counts (a Pod64 cabled to four, two or
one host servers): a job lands on hosts of one size, chosen at submit; a size no host mix can give
is refused in one line. The harness: test_job_submit_lua.py."""

from __future__ import annotations

import subprocess

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import fragments

from .conftest import write_conf
from .test_job_submit_lua import HARNESS, LUA, lua_table

pytestmark = pytest.mark.skipif(LUA is None, reason="lua5.1 missing: `make test` installs it")

# Three POD64s: four hosts of 16 IPUs, two of 32, one of 64.
THREE = [{"name": "poda", "hosts": "node[1-4]", "ipus_per_host": 16},
         {"name": "podb", "hosts": "node[5-6]", "ipus_per_host": 32},
         {"name": "podc", "hosts": "node7", "ipus_per_host": 64}]

SHOW = """
print(tostring(job.features) .. "\\t" .. tostring(job.req_switch) .. "\\t" .. tostring(job.tres_per_node))
"""


def site_of(tmp_path, pods=THREE, **vipu):
    path = write_conf(tmp_path, pods=pods, vipu={"allocation": "all", **vipu})
    return config.load(str(path), environ={})


def lua_of(tmp_path, pods=THREE, **vipu) -> str:
    path = tmp_path / "job_submit.lua"
    path.write_text(fragments.texts(site_of(tmp_path, pods, **vipu))["job_submit.lua"])
    return str(path)


@pytest.fixture(scope="module")
def sizes_lua(tmp_path_factory):
    return lua_of(tmp_path_factory.mktemp("sizes"))


@pytest.fixture(scope="module")
def whole_lua(tmp_path_factory):
    return lua_of(tmp_path_factory.mktemp("whole"), model="allocation")


def submit(path: str, job: dict, rec: dict | None = None) -> dict:
    code = HARNESS % {"path": path, "job": lua_table(job), "rec": lua_table(rec or {}),
                      "modify": "true" if rec is not None else "false", "parts": "{}"} + SHOW
    proc = subprocess.run([LUA, "-"], input=code, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.rstrip("\n").split("\n")
    rc, lic, nodes, msg = first.split("\t")
    features, switches, tres = second.split("\t")
    return {"rc": int(rc), "licence": lic, "nodes": nodes, "msg": msg, "features": features, "switches": switches,
            "tres": tres}


@pytest.mark.parametrize("nodes,per,features,switches", [
    # fits one host of every size: any of them, all its nodes of one size
    (1, 8, "[ipuhost16|ipuhost32|ipuhost64]", "1"),
    (1, 16, "[ipuhost16|ipuhost32|ipuhost64]", "1"),
    (1, 32, "[ipuhost32|ipuhost64]", "1"),
    (1, 64, "ipuhost64", "1"),
    # two hosts: one Pod of the 16s or of the 32s (the 64s' Pod has one host)
    (2, 16, "[ipuhost16|ipuhost32]", "1"),
    (2, 32, "ipuhost32", "1"),
    (4, 16, "ipuhost16", "1"),
    (4, 4, "ipuhost16", "1"),
])
def test_a_job_is_kept_to_hosts_of_one_size_that_hold_it(sizes_lua, nodes, per, features, switches):
    got = submit(sizes_lua, {"tres_per_node": f"gres:ipu:{per}", "min_nodes": nodes})
    assert (got["rc"], got["msg"], got["licence"]) == (0, "", f"ipu:{per * nodes}")
    assert (got["features"], got["switches"]) == (features, switches)


@pytest.mark.parametrize("job,words", [
    ({"tres_per_node": "gres:ipu:128"}, "--gres=ipu:128 on 1 node(s) asks for 128 IPUs, more than the Pod's 64"),
    ({"tres_per_node": "gres:ipu:64", "min_nodes": 2}, "asks for 128 IPUs, more than the Pod's 64"),
    ({"tres_per_node": "gres:ipu:32", "min_nodes": 4}, "asks for 128 IPUs, more than the Pod's 64"),
    ({"tres_per_node": "gres:ipu:8", "min_nodes": 3}, "asks for 24 IPUs, not a valid partition size"),
    ({"tres_per_node": "gres:ipu:2", "min_nodes": 8}, "-N 8 takes 2 Pods of 4 hosts; hosts of 16 IPUs are in 1 Pod(s)"),
    ({"tres_per_node": "gres:ipu:16", "min_nodes": 1, "features": "ipuhost48"},
     "--constraint=ipuhost48 names no size of host this cluster has (ipuhost<IPUs>: 16, 32, 64)"),
])
def test_a_size_no_host_mix_gives_is_refused_in_one_line(sizes_lua, job, words):
    got = submit(sizes_lua, job)
    assert got["rc"] != 0 and words in got["msg"] and "\n" not in got["msg"], got


def test_a_user_s_choice_of_host_size_is_kept(sizes_lua):
    got = submit(sizes_lua, {"tres_per_node": "gres:ipu:8", "min_nodes": 1, "features": "fast&ipuhost64"})
    assert (got["rc"], got["features"]) == (0, "(fast&ipuhost64)&ipuhost64")
    got = submit(sizes_lua, {"tres_per_node": "gres:ipu:8", "min_nodes": 1, "features": "ipuhost32"})
    assert (got["rc"], got["features"]) == (0, "ipuhost32")
    got = submit(sizes_lua, {"tres_per_node": "gres:ipu:8", "min_nodes": 1, "features": "fast"})
    assert got["features"] == "(fast)&[ipuhost16|ipuhost32|ipuhost64]"


def test_brackets_of_the_user_s_own_cannot_join_ours(sizes_lua):
    got = submit(sizes_lua, {"tres_per_node": "gres:ipu:8", "min_nodes": 1, "features": "[rack1|rack2]"})
    assert got["rc"] != 0 and got["msg"] == (
        "slurm-ipu: --constraint=[rack1|rack2]: brackets or counts cannot be combined with the hosts of one size an "
        "IPU job is kept to (a matching OR of node features); drop them, or use plain features with & and |")


def test_jobs_without_ipus_are_left_alone(sizes_lua):
    got = submit(sizes_lua, {"min_nodes": 3, "features": "[rack1|rack2]"})
    assert (got["rc"], got["features"], got["licence"]) == (0, "[rack1|rack2]", "nil")


@pytest.mark.parametrize("nodes,per,licence,features,tres", [
    # whole hosts: the smallest that hold the request, raised to their every IPU
    (1, 4, "ipu:16", "ipuhost16", "gres:ipu:16"),
    (1, 32, "ipu:32", "ipuhost32", "gres:ipu:32"),
    (2, 4, "ipu:32", "ipuhost16&[ipugroup2_0|ipugroup2_1]", "gres:ipu:16"),
    (2, 32, "ipu:64", "ipuhost32", "gres:ipu:32"),
    (1, 64, "ipu:64", "ipuhost64", "gres:ipu:64"),
])
def test_whole_hosts_take_the_smallest_size_that_holds_the_job(whole_lua, nodes, per, licence, features, tres):
    got = submit(whole_lua, {"tres_per_node": f"gres:ipu:{per}", "min_nodes": nodes})
    assert (got["rc"], got["licence"], got["features"], got["tres"]) == (0, licence, features, tres), got
    assert got["msg"].startswith(f"slurm-ipu: {per} IPUs per node raised to") or per == int(tres.split(":")[-1])


def test_a_modify_keeps_the_size_it_chose_and_rewrites_its_own_part(sizes_lua):
    rec = {"tres_per_node": "gres:ipu:16", "min_nodes": 1, "licenses": "ipu:16",
           "features": "(fast)&[ipuhost16|ipuhost32|ipuhost64]"}
    got = submit(sizes_lua, {"min_nodes": 2}, rec)
    assert (got["rc"], got["licence"], got["features"]) == (0, "ipu:32", "(fast)&[ipuhost16|ipuhost32]")
    got = submit(sizes_lua, {"min_nodes": 4}, dict(rec, features="ipuhost32"))
    assert got["rc"] != 0, got  # two hosts of 32 in the only Pod of them: -N 4 cannot stay there


def test_each_request_starts_from_the_same_values(tmp_path):
    """slurmctld keeps the script loaded: a refused job's message never depends on the last job."""
    code = HARNESS % {"path": lua_of(tmp_path), "job": lua_table({"spank_job_env": ["IPU_IPUS=48"], "min_nodes": 3}),
                      "rec": "{}", "modify": "false", "parts": "{}"}
    first = subprocess.run([LUA, "-"], input=code, capture_output=True, text=True, timeout=10).stdout
    again = code.replace("if false then", "slurm_job_submit({tres_per_node = \"gres:ipu:1\", min_nodes = 4}, {}, 0)"
                         "\nmsgs = {}\nif false then")
    second = subprocess.run([LUA, "-"], input=again, capture_output=True, text=True, timeout=10).stdout
    assert first == second and "48" in first
