"""V-IPU's published size rules, enforced by the emulator on an IPU-POD256 (4 ILDs): the valid
and invalid sizes the rule table lists."""

from __future__ import annotations

import subprocess

import pytest

from slurm_ipu.emulator.process import EmulatorProcess

from .conftest import VIPU


@pytest.fixture(scope="module")
def pod256(tmp_path_factory):
    base = tmp_path_factory.mktemp("pod256")
    cluster = base / "pod256.yaml"  # one allocation of all four ILDs, so every size up to 256 can exist
    cluster.write_text("version: 1\nname: pod256\nilds: 4\nagents_per_ild: 16\nallocations:\n  default: all\n")
    proc = EmulatorProcess.start(base / "state", cluster=str(cluster))
    yield proc
    proc.stop()


def vipu(emu, *args):
    return subprocess.run([*VIPU, "--api-host", "127.0.0.1", "--api-port", str(emu.port), *args],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("args,shape", [
    (["--size", "192"], (192, 3, 3)),            # a multiple of 64: three ILDs, a GCD each
    (["--size", "256"], (256, 4, 4)),
    (["--size", "128"], (128, 2, 2)),
    (["--size", "32"], (32, 1, 1)),              # 32 stays a partition size
    (["--size", "32", "--num-ilds", "2", "--num-gcds", "2"], (32, 2, 2)),  # the PopRun guide's part3
    (["--size", "8", "--num-gcds", "8"], (8, 8, 1)),
    (["--size", "64", "--num-gcds", "4"], (64, 4, 1)),
    (["--size", "1"], (1, 1, 1)),
])
def test_valid_sizes_are_created(pod256, args, shape):
    proc = vipu(pod256, "create", "partition", "ok", *args, "--showjson")
    assert proc.returncode == 0, proc.stderr
    import json

    spec = json.loads(proc.stdout)["partition"]["spec"]
    assert (spec["size"], spec["num_gcds"], spec["num_ilds"]) == shape
    assert vipu(pod256, "remove", "partition", "ok").returncode == 0


@pytest.mark.parametrize("args,words", [
    (["--size", "96"], "invalid partition size 96: not 1, 2, 4, 8, 16, 32, 64 or a multiple of 64"),
    (["--size", "48"], "invalid partition size 48"),
    (["--size", "320"], "exceeds the 256 IPUs"),
    (["--size", "64", "--num-gcds", "2"], "invalid --num-gcds 2 for a partition of 64 IPUs"),  # 32 per GCD
    (["--size", "128", "--num-gcds", "1"], "invalid --num-gcds 1 for a partition of 128 IPUs over 2 ILD(s)"),
    (["--size", "128", "--num-ilds", "1"], "invalid --num-ilds 1 for a partition of 128 IPUs"),
    (["--size", "8", "--num-gcds", "3"], "valid GCD counts: 1, 2, 4, 8"),
])
def test_invalid_sizes_are_refused_with_the_valid_choices(pod256, args, words):
    proc = vipu(pod256, "create", "partition", "bad", *args)
    assert proc.returncode == 1 and words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "bad" not in vipu(pod256, "list", "partitions").stdout
