"""A real emulator process on a free loopback port, per test; stopped by its pid."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slurm_ipu.emulator.api import Api
from slurm_ipu.emulator.process import EmulatorProcess
from slurm_ipu.vipu import VipuClient

VIPU = [sys.executable, "-m", "slurm_ipu.emulator.vipucli"]


@pytest.fixture
def emu(tmp_path):
    proc = EmulatorProcess.start(tmp_path / "state", cluster="pod64")
    yield proc
    proc.stop()


@pytest.fixture
def api(emu):
    a = Api("127.0.0.1", emu.port, timeout=10)
    yield a
    a.close()


@pytest.fixture
def admin(emu):
    return Api(admin_socket=emu.admin_socket, timeout=10)


@pytest.fixture
def vipu(emu):
    def run(*args, check=False):
        proc = subprocess.run([*VIPU, "--api-host", "127.0.0.1", "--api-port", str(emu.port), *args],
                              capture_output=True, text=True, timeout=30)
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc
    return run


@pytest.fixture
def client(emu):
    return VipuClient(command=VIPU, host="127.0.0.1", port=emu.port, timeout=10, retries=1, backoff=0.05,
                      emulator_flags=True)


def built_vipu_fast(tmp_path):
    """The lab's C `vipu`, built into a lab directory under tmp_path: (that LabSpec, its path)."""
    from slurm_ipu import lab

    spec = lab.LabSpec(dir=tmp_path / "lab")
    spec.path("bin").mkdir(parents=True)
    built = lab.build_vipu_fast(spec)
    assert built is not None, "gcc is missing (make test installs it)"
    return spec, built


def hooks_site(tmp_path, emu, state_dir):
    """The hooks' site description and client for one Pod on the emulator: (config, VipuClient)."""
    from slurm_ipu import config

    path = tmp_path / "site.yaml"
    path.write_text(f"version: 1\ncluster: c\nstate_dir: {state_dir}\nslurm: {{user: root}}\n"
                    f"vipu: {{host: 127.0.0.1, port: {emu.port}, emulator: true, retries: 0}}\n"
                    "pod: {ipus: 64, hosts: 'node[1-4]', ipus_per_host: 16}\n")
    client = VipuClient(command=VIPU, host="127.0.0.1", port=emu.port, timeout=10, retries=0, emulator_flags=True)
    return config.load(str(path), environ={}), client


def job_env(job: int = 42, restarts: int = 0, nodes: str = "node1", ipus: int = 16):
    """A controller prolog's environment for a job on the emulator's Pod."""
    from slurm_ipu.hooks import jobenv

    return jobenv.from_env({"SLURM_JOB_ID": str(job), "SLURM_JOB_UID": "0", "SLURM_JOB_NODELIST": nodes,
                            "SLURM_JOB_LICENSES": f"ipu:{ipus}", "SLURM_JOB_RESTART_COUNT": str(restarts)})
