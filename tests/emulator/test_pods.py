"""Two Pods: allocations per Pod inside one for the whole cluster, and hosts cabled to their
own Pod's ILD (slurm_ipu/emulator/clusters/pod128.yaml)."""

import os
import time

import pytest
import yaml

from slurm_ipu.emulator.model import PRESETS_DIR
from slurm_ipu.emulator.process import EmulatorProcess
from slurm_ipu.errors import InsufficientIpus
from slurm_ipu.vipu import VipuClient

from .conftest import VIPU
from .test_attach import attach


def _start(tmp_path, **changes):
    spec = yaml.safe_load((PRESETS_DIR / "pod128.yaml").read_text()) | changes
    cluster = tmp_path / "pod128.yaml"
    cluster.write_text(yaml.safe_dump(spec))
    return EmulatorProcess.start(tmp_path / "state", cluster=str(cluster))


@pytest.fixture
def pods(tmp_path):
    proc = _start(tmp_path)
    yield proc
    proc.stop()


def _client(emu):
    return VipuClient(command=VIPU, host="127.0.0.1", port=emu.port, timeout=10, retries=1, backoff=0.05,
                      emulator_flags=True)


def _ilds(part):
    return sorted({i // 64 for i in part.ipus})


def test_a_pods_allocation_places_the_partition_in_its_ild(pods):
    vipu = _client(pods)
    deadline = time.monotonic() + 10
    a = vipu.ensure_partition("pa", 32, deadline, allocation="poda", hosts=["ipu-host1"], owner_uid=os.getuid())
    b = vipu.ensure_partition("pb", 16, deadline, allocation="podb", hosts=["ipu-host6"], owner_uid=os.getuid())
    both = vipu.ensure_partition("pab", 64, deadline, allocation="all", num_ilds=2, num_gcds=4,
                                 hosts=["ipu-host2", "ipu-host7"], owner_uid=os.getuid())
    assert (_ilds(a), _ilds(b), _ilds(both)) == ([0], [1], [0, 1])
    # Pod A has 0 free IPUs left of its 64 (32 + 32 of the spanning one): its allocation is full
    # while Pod B still has room, and the nested allocations never hand an IPU out twice.
    with pytest.raises(InsufficientIpus):
        vipu.create_partition("pa2", 4, allocation="poda", deadline=time.monotonic() + 10)
    assert _ilds(vipu.ensure_partition("pb2", 16, deadline, allocation="podb", owner_uid=os.getuid())) == [1]


def test_a_host_reaches_only_its_own_pods_ipus(pods):
    vipu = _client(pods)
    vipu.ensure_partition("pab", 128, time.monotonic() + 10, allocation="all", num_ilds=2, num_gcds=2,
                          hosts=["ipu-host1", "ipu-host5"], owner_uid=os.getuid())
    home = attach(pods, "pab", "--hostname", "ipu-host5", gcd=1)
    assert home.returncode == 0, home.stderr
    away = attach(pods, "pab", "--hostname", "ipu-host5", gcd=0)
    assert away.returncode == 1
    assert "host ipu-host5 is not cabled to ILD 0, where GCD 0 of partition pab lies" in away.stderr


def test_a_slow_fabric_serves_the_other_pod_and_says_so(tmp_path):
    emu = _start(tmp_path, remote_attach="slow", remote_attach_delay=0.01)
    try:
        _client(emu).ensure_partition("pab", 128, time.monotonic() + 10, allocation="all", num_ilds=2, num_gcds=2,
                                      owner_uid=os.getuid())
        out = attach(emu, "pab", "--hostname", "ipu-host5", "--json", gcd=0)
        assert out.returncode == 0, out.stderr
        assert '"remote_ilds": [0]' in out.stdout
    finally:
        emu.stop()
