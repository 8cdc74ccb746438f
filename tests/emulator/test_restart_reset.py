"""A restarted job's prolog adopts the partition its earlier attempt made, and resets it first
through the real `vipu` command against the emulator: the emulator counts the reset, the
partition is the same one (not removed and made again) and ACTIVE for the new attempt."""

from __future__ import annotations

from slurm_ipu.hooks import prolog

from ..fake_slurm import FakeSlurm
from .conftest import hooks_site, job_env


def test_a_restarted_job_s_adopted_partition_is_reset_once(tmp_path, emu, api, admin):
    cfg, client = hooks_site(tmp_path, emu, tmp_path / "hooks")
    assert prolog.run(job_env(restarts=0), cfg, client, FakeSlurm()) == 0 and admin.stats().get("reset", 0) == 0
    first = {p["partition"]["id"]: p for p in api.list_partitions()}["slurm_42"]
    assert prolog.run(job_env(restarts=1), cfg, client, FakeSlurm()) == 0
    assert admin.stats().get("reset", 0) == 1
    again = {p["partition"]["id"]: p for p in api.list_partitions()}["slurm_42"]
    assert again["partition"]["status"]["state"] == "PS_ACTIVE"
    # the same partition, kept: made once
    assert again["partition"]["status"]["created_at"] == first["partition"]["status"]["created_at"]
