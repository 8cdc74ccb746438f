"""A restarted job's prolog adopts the partition its earlier attempt made, and resets it first
through the real `vipu` command against the emulator: the emulator counts the reset, the
partition is the same one (not removed and made again) and ACTIVE for the new attempt."""

from __future__ import annotations

from slurm_ipu import config
from slurm_ipu.hooks import jobenv, prolog
from slurm_ipu.vipu import VipuClient

from ..fake_slurm import FakeSlurm
from .conftest import VIPU


def test_a_restarted_job_s_adopted_partition_is_reset_once(tmp_path, emu, api, admin):
    path = tmp_path / "site.yaml"
    path.write_text(f"version: 1\ncluster: c\nstate_dir: {tmp_path / 'hooks'}\nslurm: {{user: root}}\n"
                    f"vipu: {{host: 127.0.0.1, port: {emu.port}, emulator: true, retries: 0}}\n"
                    "pod: {ipus: 64, hosts: 'node[1-4]', ipus_per_host: 16}\n")
    cfg = config.load(str(path), environ={})
    client = VipuClient(command=VIPU, host="127.0.0.1", port=emu.port, timeout=10, retries=0, emulator_flags=True)

    def attempt(restarts: int) -> int:
        ctx = jobenv.from_env({"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "0", "SLURM_JOB_NODELIST": "node1",
                               "SLURM_JOB_LICENSES": "ipu:16", "SLURM_JOB_RESTART_COUNT": str(restarts)})
        return prolog.run(ctx, cfg, client, FakeSlurm())

    assert attempt(0) == 0 and admin.stats().get("reset", 0) == 0
    first = {p["partition"]["id"]: p for p in api.list_partitions()}["slurm_42"]
    assert attempt(1) == 0
    assert admin.stats().get("reset", 0) == 1
    again = {p["partition"]["id"]: p for p in api.list_partitions()}["slurm_42"]
    assert again["partition"]["status"]["state"] == "PS_ACTIVE"
    # the same partition, kept: made once
    assert again["partition"]["status"]["created_at"] == first["partition"]["status"]["created_at"]
