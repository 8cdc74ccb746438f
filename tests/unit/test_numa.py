"""Placement strategies over synthetic machines described as sysfs trees."""

from __future__ import annotations

import pytest

from slurm_ipu.launcher import numa


def make_machine(root, sockets=2, numa_per_socket=4, cores_per_numa=16, smt=True, allowed=None):
    """CPU numbering like Linux: first thread of every core, then the SMT siblings."""
    sysdir = root / "sys/devices/system"
    cores = sockets * numa_per_socket * cores_per_numa
    threads = 2 if smt else 1
    total = cores * threads
    (sysdir / "cpu").mkdir(parents=True)
    (sysdir / "cpu/online").write_text(f"0-{total - 1}\n")
    nodes: dict[int, list[int]] = {}
    for cpu in range(total):
        core = cpu % cores
        node = core // cores_per_numa
        socket = node // numa_per_socket
        topo = sysdir / f"cpu/cpu{cpu}/topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{socket}\n")
        (topo / "core_id").write_text(f"{core % (numa_per_socket * cores_per_numa)}\n")
        nodes.setdefault(node, []).append(cpu)
    for node, cpus in nodes.items():
        (sysdir / f"node/node{node}").mkdir(parents=True)
        (sysdir / f"node/node{node}/cpulist").write_text(numa.format_cpulist(cpus) + "\n")
    if allowed is not None:
        (root / "proc/self").mkdir(parents=True)
        (root / "proc/self/status").write_text(f"Name:\tx\nCpus_allowed_list:\t{allowed}\n")
    return str(root)


@pytest.mark.parametrize("text,cpus", [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("", []), ("5", [5])])
def test_cpulist_round_trip(text, cpus):
    assert numa.parse_cpulist(text) == cpus
    assert numa.format_cpulist(cpus) == text


@pytest.mark.parametrize("smt", [True, False])
def test_spreadnuma_gives_whole_numa_nodes(tmp_path, smt):
    cpus = numa.read_topology(make_machine(tmp_path, smt=smt))
    got = [numa.bind(cpus, k, 4, "spreadnuma") for k in range(4)]
    assert [b.numa for b in got] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert all(b.membind for b in got)
    assert len(got[0].cpus) == 32 * (2 if smt else 1)
    assert set().union(*(set(b.cpus) for b in got)) == {c.id for c in cpus}  # all used, none twice
    assert sum(len(b.cpus) for b in got) == len(cpus)


def test_spreadnuma_more_instances_than_nodes_shares_round_robin(tmp_path):
    cpus = numa.read_topology(make_machine(tmp_path, sockets=1, numa_per_socket=2, cores_per_numa=4, smt=False))
    got = [numa.bind(cpus, k, 4, "spreadnuma") for k in range(4)]
    assert [b.numa for b in got] == [(0,), (1,), (0,), (1,)]
    assert [b.cpus for b in got] == [(0, 1), (4, 5), (2, 3), (6, 7)]


@pytest.mark.parametrize("strategy,expected", [
    ("close", [(0, 1, 8, 9), (2, 3, 10, 11), (4, 5, 12, 13), (6, 7, 14, 15)]),
    ("scatternuma", [(0, 1, 8, 9), (4, 5, 12, 13), (2, 3, 10, 11), (6, 7, 14, 15)]),
    ("scattersocket", [(0, 1, 8, 9), (4, 5, 12, 13), (2, 3, 10, 11), (6, 7, 14, 15)]),
])
def test_core_strategies_keep_smt_siblings_together(tmp_path, strategy, expected):
    cpus = numa.read_topology(make_machine(tmp_path, sockets=2, numa_per_socket=1, cores_per_numa=4, smt=True))
    got = [numa.bind(cpus, k, 4, strategy).cpus for k in range(4)]
    assert got == expected
    assert not numa.bind(cpus, 0, 4, strategy).membind


def test_disabled_leaves_binding_alone(tmp_path):
    cpus = numa.read_topology(make_machine(tmp_path))
    assert numa.bind(cpus, 0, 2, "disabled") == numa.Binding((), (), False)


def test_cpus_missing_from_the_cpuset_are_never_used(tmp_path):
    root = make_machine(tmp_path, sockets=1, numa_per_socket=2, cores_per_numa=4, smt=False, allowed="1-3,5-6")
    cpus = numa.read_topology(root)
    assert [c.id for c in cpus] == [1, 2, 3, 5, 6]
    got = [numa.bind(cpus, k, 2, "spreadnuma") for k in range(2)]
    assert [b.cpus for b in got] == [(1, 2, 3), (5, 6)]


def test_machine_without_numa_directory_is_one_node(tmp_path):
    root = make_machine(tmp_path, sockets=1, numa_per_socket=1, cores_per_numa=2, smt=False)
    import shutil
    shutil.rmtree(tmp_path / "sys/devices/system/node")
    assert numa.bind(numa.read_topology(root), 1, 2, "spreadnuma").cpus == (1,)


@pytest.mark.parametrize("strategy,words", [
    ("close", "3 instances share 2 core(s) of the host"),
    ("scatternuma", "share 1 core(s) of NUMA node"),
    ("bogus", "unknown --process-placement 'bogus'"),
])
def test_refusals(tmp_path, strategy, words):
    cpus = numa.read_topology(make_machine(tmp_path, sockets=1, numa_per_socket=2, cores_per_numa=1, smt=False))
    with pytest.raises(numa.PlacementError) as info:
        for k in range(3):
            numa.bind(cpus, k, 3, strategy)
    assert words in str(info.value)


def test_empty_cpuset(tmp_path):
    root = make_machine(tmp_path, sockets=1, numa_per_socket=1, cores_per_numa=2, smt=False, allowed="7")
    with pytest.raises(numa.PlacementError, match="no usable CPUs"):
        numa.read_topology(root)
