"""The launch plan: PopRun's division rules, and every refusal with its fix."""

import time

import pytest

from slurm_ipu.launcher.plan import PlanError, make_plan


def test_eight_instances_sixteen_replicas_over_four_hosts():
    plan = make_plan(8, 16, 1, ["node1", "node2", "node3", "node4"])
    got = [(i.host, i.local_index, i.replica_offset) for i in plan.instances()]
    assert got == [("node1", 0, 0), ("node1", 1, 2), ("node2", 0, 4), ("node2", 1, 6),
                   ("node3", 0, 8), ("node3", 1, 10), ("node4", 0, 12), ("node4", 1, 14)]
    assert plan.replicas_per_instance == 2 and plan.total_ipus == 16


def test_ilds_and_gcds_per_instance():
    plan = make_plan(4, 8, 4, ["a", "b"], num_ilds=2, num_gcds=2)
    assert [(i.ild, i.gcd) for i in plan.instances()] == [(0, 0), (0, 0), (1, 1), (1, 1)]


@pytest.mark.parametrize("args,kwargs,words", [
    ((3, 8, 1, ["a"]), {}, "8 replicas do not divide evenly over 3 instances; use --num-instances 1, 2, 4, 8"),
    ((3, 6, 1, ["a", "b"]), {}, "3 instances do not divide evenly over 2 hosts"),
    ((1, 2, 1, ["a"]), {"num_ilds": 2}, "2 ILDs need at least one instance each; use --num-instances 2"),
    ((3, 3, 1, ["a"]), {"num_ilds": 2}, "do not divide evenly over 2 ILDs"),
    ((2, 2, 1, ["a"]), {"num_gcds": 4}, "has 4 GCDs but only 2 instances"),
    ((6, 6, 1, ["a"]), {"num_gcds": 4}, "cannot share them evenly"),
    ((8, 8, 1, ["a"]), {"cpus_per_host": 4}, "4 CPU(s) per host and the placement binds one core per instance; "
     "ask for more (sbatch "
     "--ntasks-per-node=8 or -c)"),
    ((0, 8, 1, ["a"]), {}, "--num-instances 0 must be at least 1"),
    ((1, 1, 0, ["a"]), {}, "--ipus-per-replica 0"),
    ((1, 1, 1, []), {}, "no hosts to run on"),
])
def test_refusals(args, kwargs, words):
    with pytest.raises(PlanError) as info:
        make_plan(*args, **kwargs)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_planning_4096_instances_on_1024_hosts_is_fast():
    hosts = [f"h{i}" for i in range(1024)]
    best = min(_time(lambda: make_plan(4096, 8192, 1, hosts).instances()) for _ in range(5))
    assert best < 1.0  # a sanity bound only; the benchmark reports the real number


def _time(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
