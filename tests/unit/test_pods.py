"""Multi-Pod sites: the Pod table, the site description's pods:, and where the prolog puts a
job's partition (the allocation and ILDs it asks V-IPU for, at the `vipu` boundary)."""

from __future__ import annotations

import pytest

from slurm_ipu import config, pods, rules
from slurm_ipu.deploy import site
from slurm_ipu.errors import ConfigError
from slurm_ipu.hooks import prolog

from .conftest import write_conf
from .test_hooks import FakeSlurm, env, hooks_log

TWO = "poda:1:node[1-4] podb:1:node[5-8]"


def test_the_pod_table_round_trips_and_finds_a_jobs_pods():
    found = pods.parse(TWO)
    assert pods.parse(pods.format_pods(found)) == found
    assert [p.name for p in pods.spanned(found, ["node6", "node5"])] == ["podb"]
    assert [p.name for p in pods.spanned(found, ["node8", "node1"])] == ["poda", "podb"]
    with pytest.raises(ConfigError, match=r"node\(s\) node9 belong to no Pod"):
        pods.spanned(found, ["node1", "node9"])
    for bad in ("poda", "poda:x:node1", "poda:0:node1", "poda:1:node[1-"):
        with pytest.raises(ConfigError, match="pod.pods"):
            pods.parse(bad)


def test_default_gcds_are_valid_where_an_ilds_share_is_no_gcd_size():
    assert rules.default_gcds(128, 2) == 2
    assert rules.default_gcds(64, 2) == 4  # 32 per ILD: no 32-IPU GCD, so 2 of 16 in each
    assert rules.check_shape(64, None, 2, cluster_ilds=2).num_gcds == 4


@pytest.fixture
def two_pods(tmp_path):
    path = write_conf(tmp_path, pod={"ipus": 128, "pods": TWO}, partition={"allocation": "all"})
    return config.load(str(path), environ={})


def _create(fake):
    argv = next(c for c in fake.calls if c[0] == "create")
    return {a: b for a, b in zip(argv, [*argv[1:], ""], strict=True) if a.startswith("--") and not b.startswith("--")}


@pytest.mark.parametrize("nodes,ipus,allocation,ilds,gcds", [
    ("node[1-2]", 16, "poda", "1", "1"),
    ("node[5-8]", 64, "podb", "1", "1"),
    ("node[1-8]", 128, "all", "2", "2"),
    ("node[1-8]", 64, "all", "2", "4"),
])
def test_the_partition_goes_to_the_pods_of_the_jobs_hosts(fake, two_pods, nodes, ipus, allocation, ilds, gcds):
    ctx = env(SLURM_JOB_NODELIST=nodes, SLURM_JOB_LICENSES=f"ipu:{ipus}")
    assert prolog.run(ctx, two_pods, two_pods.vipu_client(), FakeSlurm()) == 0
    flags = _create(fake)
    assert (flags["--allocation"], flags["--num-ilds"], flags["--num-gcds"]) == (allocation, ilds, gcds)
    assert f"allocation {allocation}" in hooks_log(two_pods)


def test_an_ild_count_other_than_the_pods_is_refused(fake, two_pods):
    slurm = FakeSlurm()
    ctx = env(SLURM_JOB_NODELIST="node[1-8]", SLURM_JOB_LICENSES="ipu:128", SPANK_IPU_ILDS="1")
    assert prolog.run(ctx, two_pods, two_pods.vipu_client(), slurm) == 1
    assert 42 in slurm.cancelled and not fake.partitions
    assert "--ipu-ilds=1: the job's hosts are in Pods poda,podb, whose partition spans 2 ILD(s)" in slurm.comments[42]


def test_a_node_in_no_pod_is_an_admins_problem_not_the_users(fake, two_pods):
    slurm = FakeSlurm()
    ctx = env(SLURM_JOB_NODELIST="node[8-9]", SLURM_JOB_LICENSES="ipu:32")
    assert prolog.run(ctx, two_pods, two_pods.vipu_client(), slurm) == 1
    assert 42 not in slurm.cancelled and not fake.partitions
    assert "node9 belong to no Pod" in slurm.comments[42] and "requeued" in slurm.comments[42]


BASE = """version: 1
cluster: c
vipu: {host: v, allocation: all}
pod: {ipus_per_host: 16}
pods:
  - {name: poda, hosts: "h[1-4]"}
  - {name: podb, hosts: "h[5-8]"}
"""


def test_a_site_of_two_pods():
    s = site.parse(BASE, "s.yaml")
    assert (s["pod.ipus"], s.hosts[-1], [p.name for p in s.pods]) == (128, "h8", ["poda", "podb"])
    assert site.hook_config(s)["pod"]["pods"] == "poda:1:h[1-4] podb:1:h[5-8]"


@pytest.mark.parametrize("change,words", [
    (("pod: {ipus_per_host: 16}", "pod: {ipus_per_host: 16, ipus: 128}"), "pod.ipus and pods: both given"),
    (('  - {name: podb, hosts: "h[5-8]"}\n', ""), "a single Pod is pod.ipus and pod.hosts"),
    (('"h[5-8]"', '"h[4-8]"'), "host h4 is in Pod poda and Pod podb"),
    (('"h[5-8]"', '"h[5-7]"'), "alike sizes"),
    (("name: podb", "name: poda"), "distinct names"),
    (("allocation: all", "allocation: poda"), "name the V-IPU allocation that holds every Pod"),
    (("ipus_per_host: 16", "ipus_per_host: 32"), "more than its 64; use at most 16"),
    (("name: podb", "name: 'pod b'"), "Pod 2: name='pod b' is out of range"),
    (('hosts: "h[5-8]"', 'hosts: "h[5-8]", ilds: 0'), "ilds=0 is out of range"),
    (('hosts: "h[5-8]"', 'hosts: "h[5-"'), "is not a Slurm hostlist"),
    (('{name: podb, hosts: "h[5-8]"}', "podb"), "must be a mapping of name, hosts"),
])
def test_bad_pods_name_the_line_and_the_fix(change, words):
    with pytest.raises(ConfigError, match=words) as err:
        site.parse(BASE.replace(*change), "s.yaml")
    assert str(err.value).startswith("s.yaml:")
