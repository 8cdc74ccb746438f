"""ipurun drives the right GCD of the partition V-IPU really has, from sbatch, from salloc's
shell (no task, no SPANK variables) and with --vipu-partition.

Each instance runs an IPUoF attach (the emulator's) with the environment ipurun gave it: the
proof is in what V-IPU grants, not in the variables alone."""

from __future__ import annotations

import re
import sys

import pytest

from .conftest import wait_gone

IPURUN = f"{sys.executable} -m slurm_ipu.launcher.cli"
ATTACH = f"{sys.executable} -m slurm_ipu.emulator.main attach"
PROBE = 'echo "GCD $POPDIST_INSTANCE_INDEX $IPUOF_VIPU_API_PARTITION_ID $IPUOF_VIPU_API_GCD_ID $(' + ATTACH + ' 2>&1)"'


def gcd_rows(text: str) -> list[tuple[int, str, int, set[int]]]:
    """(instance, partition, GCD, IPUs granted) per instance, in instance order."""
    rows = []
    for line in text.splitlines():
        if line.startswith("GCD ") or " GCD " in line[:12]:
            words = line[line.index("GCD "):].split()
            fields = dict(w.split("=", 1) for w in words if "=" in w)
            ipus = {int(i) for i in fields.get("ipus", "").split(",") if i}
            rows.append((int(words[1]), words[2], int(words[3]), ipus))
    return sorted(rows)


def assert_each_gcd_attached_once(rows, partition: str, gcds: int, size: int, text: str) -> None:
    assert [r[0] for r in rows] == list(range(gcds)), text
    assert all(r[1] == partition for r in rows), text
    assert [r[2] for r in rows] == list(range(gcds)), text  # instance k drives GCD k
    granted = [r[3] for r in rows]
    assert all(len(ipus) == size // gcds for ipus in granted), text  # each attach got its GCD's IPUs
    assert len(set().union(*granted)) == size, text  # and no two instances got the same IPUs


@pytest.mark.parametrize("gcds", [2, 4])
def test_sbatch_instances_attach_distinct_gcds(clean_lab, tmp_path, gcds):
    out = tmp_path / "gcd.out"
    script = f"#!/bin/bash\n{IPURUN} --num-instances {gcds} --num-replicas 16 -- bash -c '{PROBE}'\necho rc=$?\n"
    job = clean_lab.sbatch("-N", "2", "--ntasks-per-node=2", "--gres=ipu:8", f"--ipu-gcds={gcds}", "-o", str(out),
                           script=script)
    wait_gone(clean_lab, job, timeout=120)
    text = out.read_text()
    assert "rc=0" in text, text
    assert_each_gcd_attached_once(gcd_rows(text), f"slurm_{job}", gcds, 16, text)


@pytest.mark.parametrize("gcds", [2, 4])
def test_salloc_shell_instances_attach_distinct_gcds(clean_lab, gcds):
    """salloc runs ipurun in a shell that is no task: no IPUOF_* and no SPANK_IPU_*. ipurun finds
    the job's partition from the site prefix and reads its shape from V-IPU."""
    proc = clean_lab.run("salloc", "-N", "2", "--ntasks-per-node=2", "--gres=ipu:8", f"--ipu-gcds={gcds}",
                         *IPURUN.split(), "--num-instances", str(gcds), "--num-replicas", "16", "--",
                         "bash", "-c", PROBE, timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    job = re.search(r"Granted job allocation (\d+)", text).group(1)
    assert_each_gcd_attached_once(gcd_rows(text), f"slurm_{job}", gcds, 16, text)


def test_vipu_partition_naming_a_four_gcd_partition(clean_lab, tmp_path):
    lab = clean_lab
    lab.run("vipu", "create", "partition", "shared4", "--size", "8", "--num-gcds", "4", check=True)
    try:
        out = tmp_path / "named.out"
        script = (f"#!/bin/bash\n{IPURUN} --vipu-partition shared4 --num-instances 4 --num-replicas 8 -- "
                  f"bash -c '{PROBE}'\necho rc=$?\n")
        job = lab.sbatch("-N", "2", "--ntasks-per-node=2", "--gres=ipu:1", "-o", str(out), script=script)
        wait_gone(lab, job, timeout=120)
        text = out.read_text()
        assert "rc=0" in text, text
        assert_each_gcd_attached_once(gcd_rows(text), "shared4", 4, 8, text)
    finally:
        lab.run("vipu", "remove", "partition", "shared4")


def test_a_request_larger_than_the_partition_is_refused_before_any_instance_starts(clean_lab, tmp_path):
    out = tmp_path / "big.out"
    script = (f"#!/bin/bash\n{IPURUN} --num-instances 2 --num-replicas 32 -- touch {tmp_path}/started\necho rc=$?\n"
              f"{IPURUN} --num-instances 2 --num-replicas 2 --ipus-per-replica 8 -- true\necho rc=$?\n")
    job = clean_lab.sbatch("-N", "2", "--ntasks-per-node=1", "--gres=ipu:8", "-o", str(out), script=script)
    wait_gone(clean_lab, job, timeout=120)
    text = out.read_text()
    assert f"ipurun: 32 replicas x 1 IPU(s) = 32 IPUs, but partition slurm_{job} has 16; use --num-replicas 16 " \
           "or fewer" in text, text
    assert "--ipus-per-replica 8: a replica takes 1, 2 or 4 IPUs" in text, text
    assert text.count("rc=2") == 2 and not (tmp_path / "started").exists(), text
