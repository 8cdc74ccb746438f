"""The SPANK plugin's placement (spank/placement.c) against the reference, numa.py, which ipurun's
--dry-run and --report-bindings print: every strategy, instance count and synthetic machine
below must give the same CPUs, NUMA nodes and memory binding, or the same refusal."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_ipu.launcher import numa

from .conftest import build_driver
from .test_numa import make_machine

SPANK = Path(__file__).resolve().parents[2] / "spank"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc missing: `make test` installs it")

MACHINES = {  # name: make_machine arguments
    "2 sockets x 4 NUMA x 16 cores, SMT": {},
    "1 socket x 2 NUMA x 4 cores": {"sockets": 1, "numa_per_socket": 2, "cores_per_numa": 4, "smt": False},
    "2 sockets x 1 NUMA x 4 cores, SMT": {"sockets": 2, "numa_per_socket": 1, "cores_per_numa": 4},
    "1 socket x 2 NUMA x 1 core": {"sockets": 1, "numa_per_socket": 2, "cores_per_numa": 1, "smt": False},
    "2 sockets x 2 NUMA x 3 cores, SMT, cpuset": {"sockets": 2, "numa_per_socket": 2, "cores_per_numa": 3,
                                                 "allowed": "0-5,12-14,20"},
    "4 sockets x 2 NUMA x 2 cores": {"sockets": 4, "numa_per_socket": 2, "cores_per_numa": 2, "smt": False},
}


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build_driver(tmp_path_factory, "placement_driver")


def reference(root: str, strategy: str, n: int) -> list[str]:
    cpus = numa.read_topology(root)
    lines = []
    for k in range(n):
        try:
            b = numa.bind(cpus, k, n, strategy)
        except numa.PlacementError as exc:
            lines.append(f"{k} error={exc}")
            continue
        lines.append(f"{k} cpus={numa.format_cpulist(b.cpus)} numa={numa.format_cpulist(b.numa) if b.cpus else ''} "
                     f"membind={int(b.membind)}")
    return lines


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("strategy", numa.STRATEGIES)
def test_every_binding_equals_the_reference(driver, tmp_path, machine, strategy):
    root = make_machine(tmp_path, **MACHINES[machine])
    for n in (1, 2, 3, 4, 5, 8, 16, 33):
        got = subprocess.run([driver, root, strategy, str(n)], capture_output=True, text=True, timeout=30)
        assert got.returncode == 0, got.stderr
        assert got.stdout.splitlines() == reference(root, strategy, n), f"{n} instances"


def test_a_machine_without_numa_directory_is_one_node(driver, tmp_path):
    root = Path(make_machine(tmp_path, sockets=1, numa_per_socket=1, cores_per_numa=2, smt=False))
    shutil.rmtree(root / "sys/devices/system/node")
    out = subprocess.run([driver, str(root), "spreadnuma", "2"], capture_output=True, text=True, timeout=30).stdout
    assert out.splitlines() == reference(str(root), "spreadnuma", 2) == ["0 cpus=0 numa=0 membind=1",
                                                                         "1 cpus=1 numa=0 membind=1"]


def test_an_empty_cpuset_is_refused_as_the_reference_refuses_it(driver, tmp_path):
    root = make_machine(tmp_path, sockets=1, numa_per_socket=1, cores_per_numa=2, smt=False, allowed="7")
    out = subprocess.run([driver, root, "close", "1"], capture_output=True, text=True, timeout=30).stdout
    with pytest.raises(numa.PlacementError) as exc:
        numa.read_topology(root)
    assert out == f"topology error={exc.value}\n"
