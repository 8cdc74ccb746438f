"""Multi-Pod sites: the Pod table, the site description's pods:, and where the prolog puts a
job's partition (the allocation and ILDs it asks V-IPU for, at the `vipu` boundary)."""

from __future__ import annotations

import pytest

from slurm_ipu import config, pods, rules
from slurm_ipu.errors import ConfigError
from slurm_ipu.hooks import prolog

from ..fake_slurm import FakeSlurm
from .conftest import write_conf
from .test_hooks import env, hooks_log

TWO = [{"name": "poda", "hosts": "node[1-4]"}, {"name": "podb", "hosts": "node[5-8]"}]


def pod_list(text: str) -> list[dict]:
    """'poda:1:h[1-2] podb:1:h[3-4]' -> the site description's pods: entries (a short test notation)."""
    return [{"name": n, "ilds": int(i), "hosts": h} for n, i, h in (w.split(":", 2) for w in text.split())]


def test_the_pod_table_finds_a_jobs_pods():
    found = [pods.Pod(p["name"], 1, p["hosts"]) for p in TWO]
    assert [p.name for p in pods.spanned(found, ["node6", "node5"])] == ["podb"]
    assert [p.name for p in pods.spanned(found, ["node8", "node1"])] == ["poda", "podb"]
    with pytest.raises(ConfigError, match=r"node\(s\) node9 belong to no Pod"):
        pods.spanned(found, ["node1", "node9"])


def test_default_gcds_are_valid_where_an_ilds_share_is_no_gcd_size():
    assert rules.default_gcds(128, 2) == 2
    assert rules.default_gcds(64, 2) == 4  # 32 per ILD: no 32-IPU GCD, so 2 of 16 in each
    assert rules.check_shape(64, None, 2, cluster_ilds=2).num_gcds == 4


@pytest.fixture
def two_pods(tmp_path):
    path = write_conf(tmp_path, pods=TWO, vipu={"allocation": "all"})
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
    assert prolog.run(ctx, two_pods, two_pods.vipu_client(), slurm) == 0  # cancelled: no requeue
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
    s = config.parse(BASE, "s.yaml")
    assert (s.pod.ipus, s.hosts[-1], [p.name for p in s.pods]) == (128, "h8", ["poda", "podb"])


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
        config.parse(BASE.replace(*change), "s.yaml")
    assert str(err.value).startswith("s.yaml:")


# --- ipurun: every instance drives a GCD of its own host's Pod

TOPOLOGY = """SwitchName=poda Level=0 LinkSpeed=1 Nodes=node[1-4]
SwitchName=podb Level=0 LinkSpeed=1 Nodes=node[5-8]
SwitchName=all Level=1 LinkSpeed=1 Nodes=node[1-8] Switches=poda,podb
"""
ALLOCATIONS = ('[{"id": "all", "agents": ["ag0", "ag1", "ag16"]}, {"id": "poda", "agents": ["ag0", "ag1"]}, '
               '{"id": "podb", "agents": ["ag16"]}]')


def test_hosts_and_gcds_are_found_in_their_pods():
    from slurm_ipu.launcher import pods as lpods
    from slurm_ipu.slurm.topology import leaf_switches
    from slurm_ipu.vipu.parse import partition_from_json

    hosts = leaf_switches(TOPOLOGY)
    assert hosts["node4"] == "poda" and hosts["node5"] == "podb" and len(hosts) == 8
    ipus = [{"id": i, "agent": "ag0" if i < 4 else "ag16", "ild": i // 4} for i in range(8)]
    part = partition_from_json({"partition": {"id": "p", "spec": {"size": 8, "num_gcds": 2, "ipus": ipus}}})
    assert lpods.spans_ilds(part)
    assert lpods.gcd_pods(lpods.gcd_agents(part), lpods.allocation_agents(ALLOCATIONS), {"poda", "podb"}) == [
        "poda", "podb"]


def _plan(n: int, distribution: str = "block"):
    from slurm_ipu.launcher.plan import make_plan

    return make_plan(n, n, 1, [f"node{k}" for k in range(1, 9)], num_ilds=2, num_gcds=2, distribution=distribution)


POD_OF = {f"node{k}": "poda" if k <= 4 else "podb" for k in range(1, 9)}


@pytest.mark.parametrize("distribution", ["block", "cyclic"])
def test_each_instance_gets_a_gcd_of_its_own_pod(distribution):
    from slurm_ipu.launcher import pods as lpods

    plan = _plan(16, distribution)
    mapping = lpods.assign(plan, POD_OF, ["poda", "podb"])
    assert [POD_OF[i.host] for i in plan.instances()] == [["poda", "podb"][g] for g in mapping]
    assert sorted(mapping) == [0] * 8 + [1] * 8
    # GCDs listed the other way round (ILD 0 cabled to the second Pod's hosts): still each its own.
    flipped = lpods.assign(plan, POD_OF, ["podb", "poda"])
    assert [POD_OF[i.host] for i in plan.instances()] == [["podb", "poda"][g] for g in flipped]


def test_unknown_pods_leave_the_block_rule_and_a_mismatch_names_the_fix():
    from slurm_ipu.launcher import pods as lpods
    from slurm_ipu.launcher.plan import PlanError, make_plan

    assert lpods.assign(_plan(16), {}, ["poda", "podb"]) is None
    assert lpods.assign(_plan(16), POD_OF, ["poda", None]) is None
    uneven = make_plan(4, 4, 1, ["node1", "node2", "node3", "node5"], num_ilds=2, num_gcds=2)
    with pytest.raises(PlanError, match="instance 2 on node3 .Pod poda. has no GCD of its Pod left"):
        lpods.assign(uneven, POD_OF, ["poda", "podb"])


def test_status_shows_each_pods_ipus_and_where_each_partition_lies(tmp_path):
    from slurm_ipu.deploy import status
    from slurm_ipu.vipu.parse import partition_from_json

    s = config.parse(BASE + f"state_dir: {tmp_path}\n", "s.yaml")

    def part(name, ipus):
        spec = {"size": len(ipus), "ipus": [{"id": i, "ild": i // 64} for i in ipus]}
        return partition_from_json({"partition": {"id": name, "spec": spec}})

    facts = {"partitions": [part("slurm_1", range(0, 16)), part("slurm_2", [*range(32, 40), *range(64, 72)])],
             "jobs": {1: {"state": "RUNNING", "user": "a", "nodes": "h1", "start": 0.0},
                      2: {"state": "RUNNING", "user": "a", "nodes": "h[4-5]", "start": 0.0}},
             "licenses": {"total": 128, "used": 32}, "created": {}, "queued": [], "errors": {}}
    view = status.build(s, facts, now=10.0)
    assert [(p["name"], p["used"]) for p in view["pods"]] == [("poda", 24), ("podb", 8)]
    assert {r["partition"]: r["pods"] for r in view["partitions"]} == {"slurm_1": ["poda"],
                                                                       "slurm_2": ["poda", "podb"]}
    text = "\n".join(status.table(view))
    assert "Pod podb: hosts h[5-8], ILD 1: 64 IPUs, 8 in partitions, 56 free" in text


def test_doctor_sees_pods_slurm_cannot_keep_together(tmp_path):
    from slurm_ipu.deploy import doctor
    from slurm_ipu.slurm.topology import leaf_sets

    s = config.parse(BASE, "s.yaml")
    good = {"TopologyPlugin": "topology/tree", "SchedulerParameters": "sched_interval=2,max_switch_wait=31536000"}
    topo = leaf_sets(TOPOLOGY.replace("node", "h"))
    nodes = {f"h{k}": {} for k in range(1, 9)}
    check = doctor.check_pods
    assert check(s, doctor.Facts(config=good, topology=topo, nodes=nodes)).ok
    for conf, topology, more, words in [
        ({**good, "TopologyPlugin": "topology/flat"}, topo, {}, "TopologyPlugin=topology/flat"),
        ({**good, "SchedulerParameters": "sched_interval=2"}, topo, {}, "max_switch_wait=300 (the default)"),
        (good, {**topo, "h5": ["poda"]}, {}, "h5 is under poda, not podb"),
        # Slurm logs these and goes on; doctor said ok
        (good, {**topo, "h1": ["poda", "rack1"]}, {}, "h1 is under poda and rack1, not poda"),
        (good, topo, {"login1": {}}, "login1 is under no switch: Slurm finds no path to it"),
        (good, None, {}, "cannot read Slurm's topology"),
    ]:
        finding = check(s, doctor.Facts(config=conf, topology=topology, nodes={**nodes, **more}))
        assert not finding.ok and words in finding.detail and "max_switch_wait=31536000" in finding.fix
    one = config.parse("version: 1\ncluster: c\nvipu: {host: v}\npod: {ipus: 64, hosts: 'n[1-4]', ipus_per_host: 16}\n",
                     "one.yaml")
    assert check(one, doctor.Facts()).ok


@pytest.mark.parametrize("placed,ok", [(lambda i: i // 64, True), (lambda i: 2 * (i // 64), False)])
def test_a_partition_v_ipu_put_beyond_the_jobs_pods_is_removed_and_the_job_requeued(fake, tmp_path, placed, ok):
    three = write_conf(tmp_path, pods=[*TWO, {"name": "podc", "hosts": "node[9-12]"}], vipu={"allocation": "all"})
    cfg = config.load(str(three), environ={})
    fake.ipu_ild = placed  # the ILDs V-IPU shows beside the IPUs: 0,1 (Pods a, b) or 0,2 (a, c)
    slurm = FakeSlurm()
    ctx = env(SLURM_JOB_NODELIST="node[1-8]", SLURM_JOB_LICENSES="ipu:128")
    assert prolog.run(ctx, cfg, cfg.vipu_client(), slurm) == (0 if ok else 1)
    if ok:
        assert "slurm_42" in fake.partitions
        return
    assert not fake.partitions and 42 not in slurm.cancelled
    assert ("V-IPU put it in ILD(s) 0,2, but the job's hosts are cabled to ILD(s) 0,1" in slurm.comments[42]
            and "requeued" in slurm.comments[42])


def test_the_emulator_cluster_is_the_sites_pods_and_says_how_a_cross_pod_attach_goes():
    import yaml

    from slurm_ipu.deploy import fragments
    from slurm_ipu.emulator.model import cluster_from_dict

    text = BASE.replace("allocation: all}", "allocation: all, emulator_cross_pod: slow, emulator_cross_pod_delay: 0.2}")
    emu = cluster_from_dict(yaml.safe_load(fragments.emulator_cluster(config.parse(text, "s.yaml"))))
    assert (emu.ilds, emu.remote_attach, emu.remote_attach_delay) == (2, "slow", 0.2)
    assert emu.allocation_ipus("podb") == set(range(64, 128)) and emu.allocation_ipus("all") == set(range(128))
    assert emu.remote_ilds("h5", range(0, 128, 63)) == [0]
    with pytest.raises(ConfigError, match="emulator_cross_pod='sideways' is out of range; use refuse or slow"):
        config.parse(BASE.replace("allocation: all}", "allocation: all, emulator_cross_pod: sideways}"), "s.yaml")


FOUR = """version: 1
cluster: c
vipu: {host: v, allocation: all}
pod: {ipus_per_host: 32}
pods:
  - {name: poda, hosts: "h[1-2]"}
  - {name: podb, hosts: "h[3-4]"}
  - {name: podc, hosts: "h[5-6]"}
  - {name: podd, hosts: "h[7-8]"}
pod_groups:
  - {name: ab, pods: [poda, podb]}
  - {name: cd, pods: [podc, podd]}
"""


def test_groups_of_pods_are_switches_and_allocations_of_their_own():
    from slurm_ipu.deploy import fragments

    s = config.parse(FOUR, "s.yaml")
    text = fragments.texts(s)
    assert ("SwitchName=ab Switches=poda,podb\nSwitchName=cd Switches=podc,podd\nSwitchName=all Switches=ab,cd"
            in text["topology.conf"])
    assert s.groups == {"ab": ["poda", "podb"], "cd": ["podc", "podd"]}
    import yaml

    from slurm_ipu.emulator.model import cluster_from_dict

    emu = cluster_from_dict(yaml.safe_load(fragments.emulator_cluster(s)))
    assert emu.allocation_ipus("cd") == set(range(128, 256))


@pytest.mark.parametrize("change,words", [
    (("{name: cd, pods: [podc, podd]}", "{name: cd, pods: [podb, podd]}"), "none in another group"),
    (("{name: cd, pods: [podc, podd]}", "{name: cd, pods: [podc]}"), "two or more Pods"),
    (("{name: cd, pods: [podc, podd]}", "{name: cd, pods: [podc, pode]}"), "must name two or more Pods of pods:"),
    (("{name: cd, pods: [podc, podd]}", "{name: poda, pods: [podc, podd]}"), "name='poda' is out of range"),
    (("{name: cd, pods: [podc, podd]}", "{name: all, pods: [podc, podd]}"), "name='all' is out of range"),
    (("{name: cd, pods: [podc, podd]}", "cd"), "must be a mapping of name, pods and"),
])
def test_bad_groups_name_the_fix(change, words):
    with pytest.raises(ConfigError, match=words):
        config.parse(FOUR.replace(*change), "s.yaml")


@pytest.mark.parametrize("nodes,allocation", [("h[1-2]", "poda"), ("h[5-8]", "cd"), ("h[3-6]", "all"),
                                              ("h[1-8]", "all")])
def test_a_job_over_the_pods_of_one_group_gets_the_groups_allocation(fake, tmp_path, nodes, allocation):
    conf = write_conf(tmp_path, pods=pod_list("poda:1:h[1-2] podb:1:h[3-4] podc:1:h[5-6] podd:1:h[7-8]"),
                      pod_groups=[{"name": "ab", "pods": ["poda", "podb"]}, {"name": "cd", "pods": ["podc", "podd"]}],
                      vipu={"allocation": "all"})
    cfg = config.load(str(conf), environ={})
    ctx = env(SLURM_JOB_NODELIST=nodes, SLURM_JOB_LICENSES=f"ipu:{32 * len(pods.Pod('x', 1, nodes).hosts)}")
    assert prolog.run(ctx, cfg, cfg.vipu_client(), FakeSlurm()) == 0
    assert _create(fake)["--allocation"] == allocation


# --- where a multi-host job of the allocation model may land ------------------------------------

def _partitionable(ilds: int, first_agent: int, agents: int) -> bool:
    """Whether the emulator (V-IPU's rule, docs/vipu.md) makes a partition of every IPU of these
    IPU-Machines, shaped as the prolog asks for it (default ILDs and GCDs)."""
    from slurm_ipu.emulator.model import Cluster, InsufficientIpus, place

    size = agents * rules.IPUS_PER_AGENT
    if not (rules.is_valid_size(size) and rules.is_valid_allocation(size)):
        return False
    n = rules.default_ilds(size)
    cluster = Cluster("t", ilds, rules.AGENTS_PER_ILD, {})
    free = {a * rules.IPUS_PER_AGENT + j for a in range(first_agent, first_agent + agents)
            for j in range(rules.IPUS_PER_AGENT)}
    try:
        return sorted(place(cluster, rules.Shape(size, rules.default_gcds(size, n), n), free)) == sorted(free)
    except InsufficientIpus:
        return False


@pytest.mark.parametrize("ilds,per_host", [(1, 4), (1, 8), (1, 16), (1, 32), (2, 16), (4, 16), (3, 16), (4, 32),
                                           (2, 64)])
def test_the_host_runs_are_exactly_where_v_ipu_can_partition_a_job_s_machines(ilds, per_host):
    """Held to the emulator's placement: a run of n hosts is offered iff one partition of the
    default shape can take all of its IPU-Machines; no other run is."""
    hosts = [f"h{i}" for i in range(ilds * rules.IPUS_PER_ILD // per_host)]
    agents = per_host // rules.IPUS_PER_AGENT
    runs = pods.host_runs([(hosts, agents)])
    for n in range(2, len(hosts)):
        want = [tuple(hosts[i:i + n]) for i in range(len(hosts) - n + 1)
                if _partitionable(ilds, i * agents, n * agents)]
        assert runs.get(n, []) == want, (n, runs.get(n))


def test_runs_stay_inside_their_pod_and_are_named_per_host():
    runs = pods.host_runs([(["a1", "a2", "a3", "a4"], 4), (["b1", "b2", "b3", "b4"], 4)])
    assert runs == {2: [("a1", "a2"), ("a3", "a4"), ("b1", "b2"), ("b3", "b4")]}
    per_host, per_count = pods.run_features(runs)
    assert per_count == {2: ["ipugroup2_0", "ipugroup2_1", "ipugroup2_2", "ipugroup2_3"]}
    assert per_host["a3"] == per_host["a4"] == ["ipugroup2_1"] and per_host["b1"] == ["ipugroup2_2"]


def test_more_runs_than_slurm_s_matching_or_holds_is_refused_at_load():
    pods_text = "\n".join(f"  - {{name: p{k}, hosts: 'n{k}x[1-4]', model: allocation}}" for k in range(33))
    text = (f"version: 1\ncluster: big\nvipu: {{host: 127.0.0.1, allocation: all}}\npod: {{ipus_per_host: 16}}\n"
            f"pods:\n{pods_text}\n")
    with pytest.raises(ConfigError, match=r"66 runs of 2 hosts .* more than the 64 alternatives"):
        config.parse(text, "big.yaml")


def test_each_pod_s_runs_are_of_its_own_ipu_machines_per_host():
    """Pods whose hosts hold different IPU-Machines: each Pod's runs by its own count (a POD64 of
    four 16-IPU hosts has aligned pairs; one of eight 8-IPU hosts has pairs and fours)."""
    big = [f"a{i}" for i in range(1, 5)]
    small = [f"b{i}" for i in range(1, 9)]
    runs = pods.host_runs([(big, 4), (small, 2)])
    assert runs[2][:2] == [("a1", "a2"), ("a3", "a4")]
    assert ("b1", "b2") in runs[2] and ("b2", "b3") not in runs[2]
    assert runs[4] == [("b1", "b2", "b3", "b4"), ("b5", "b6", "b7", "b8")]  # four 16-IPU hosts: the whole Pod
