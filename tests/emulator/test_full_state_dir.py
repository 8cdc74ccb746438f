"""A full state directory holds the job at once with the reason, instead of a requeue loop past
prolog.max_attempts: 20 jobs with a 60 KB --ipu-gcds filled a 1 MiB state
directory, every IPU job start then failed with a traceback, and a batch job was requeued every
32 s, never held, no AdminComment. Here the state directory is a real tmpfs, filled to the last
block; the controller is the real emulator."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from slurm_ipu.deploy import doctor
from slurm_ipu.hooks import hooklog, prolog

from ..fake_slurm import FakeSlurm
from .conftest import hooks_site, job_env

pytestmark = pytest.mark.skipif(os.getuid() != 0 or not shutil.which("mount"), reason="mounts a tmpfs: needs root")


@pytest.fixture
def full(tmp_path):
    """A 256 KiB tmpfs, its every block taken by one file."""
    where = tmp_path / "hooks-state"  # the emulator fixture has tmp_path/state
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "slurm-ipu-test", str(where)], check=True,
                   timeout=30)
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={where}/filler", "bs=4k"], capture_output=True, timeout=30)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True, timeout=30)


def test_a_prolog_that_cannot_write_its_record_holds_the_job_at_once(full, tmp_path, emu, api):
    cfg, client = hooks_site(tmp_path, emu, full)
    ctx = job_env()
    slurm = FakeSlurm()
    assert prolog.run(ctx, cfg, client, slurm) == 1
    assert slurm.held == {42}  # on the first attempt, not after max_attempts of requeues
    assert "cannot write their state directory" in slurm.comments[42]
    assert f"held: an admin must free space in {full}" in slurm.comments[42]
    assert api.list_partitions() == []  # no record, so nothing was created
    found = doctor.check_state_dir(cfg, None)
    assert not found.ok and "MiB free (under 64 MiB)" in found.detail, found


def test_hooks_log_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(hooklog, "LOG_MAX", 4096)
    for k in range(100):
        hooklog.report(str(tmp_path), f"job {k}: " + "x" * 100, echo=False)
    hooklog.report(str(tmp_path), "y" * 100_000, echo=False)
    sizes = [os.path.getsize(tmp_path / n) for n in ("hooks.log", "hooks.log.1")]
    assert all(s <= 4096 + hooklog.LINE_MAX + 100 for s in sizes), sizes
    last = (tmp_path / "hooks.log").read_text().splitlines()[-1]
    assert last.endswith("...(cut: 100000 characters)") and len(last) < hooklog.LINE_MAX + 100
