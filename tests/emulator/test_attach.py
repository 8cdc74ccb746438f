"""The attach probe: what an IPUoF client in a task would get, or how it would be refused."""

import os
import subprocess
import sys
import time

import pytest


def attach(emu, partition, *extra, gcd=None, env_extra=None):
    env = {"PATH": os.environ["PATH"], "IPUOF_VIPU_API_HOST": "127.0.0.1",
           "IPUOF_VIPU_API_PORT": str(emu.port), "IPUOF_VIPU_API_PARTITION_ID": partition}
    if gcd is not None:
        env["IPUOF_VIPU_API_GCD_ID"] = str(gcd)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "slurm_ipu.emulator.main", "attach", *extra],
                          env=env, capture_output=True, text=True, timeout=30)


@pytest.fixture
def part(client):
    client.ensure_partition("slurm_5", 8, time.monotonic() + 10, num_gcds=2, hosts=["node1", "node2"],
                            owner_uid=os.getuid())
    return client.get_partition("slurm_5")


def test_grants_the_gcd_ipus(emu, part):
    out = attach(emu, "slurm_5", "--hostname", "node2", gcd=1)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"attach: host=node2 uid={os.getuid()} partition=slurm_5 gcd=1 ipus=" + \
        ",".join(str(i) for i in part.ipus[4:])


def test_hostname_comes_from_slurmd_nodename(emu, part):
    out = attach(emu, "slurm_5", env_extra={"SLURMD_NODENAME": "node1"})
    assert out.returncode == 0 and "host=node1" in out.stdout


@pytest.mark.parametrize("args,partition,words", [
    (["--hostname", "node1"], "slurm_404", "not found"),
    (["--hostname", "node3"], "slurm_5", "host node3 may not attach"),
    (["--hostname", "node1", "--uid", "4242"], "slurm_5", "not uid 4242"),
])
def test_refusals(emu, part, args, partition, words):
    out = attach(emu, partition, *args)
    assert out.returncode == 1
    assert out.stderr.startswith("ipuof: cannot attach") and words in out.stderr


def test_not_active_is_refused(emu, client, admin):
    admin.faults(create_delay=30)
    client.create_partition("pending", 4)
    out = attach(emu, "pending", "--hostname", "x")
    assert out.returncode == 1 and "PENDING, not ACTIVE" in out.stderr


def test_gcd_out_of_range_and_missing_env(emu, part):
    out = attach(emu, "slurm_5", "--hostname", "node1", gcd=2)
    assert out.returncode == 1 and "use 0..1" in out.stderr
    env = {"PATH": os.environ["PATH"]}
    out = subprocess.run([sys.executable, "-m", "slurm_ipu.emulator.main", "attach"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "IPUOF_VIPU_API_HOST" in out.stderr and "Traceback" not in out.stderr
