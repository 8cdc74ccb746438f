"""The lab's C `vipu` (spank/lab/vipu_fast.c) answers create, remove, reset and the JSON list as the
Python CLI does, and hands every other call to it: same requests, replies, errors, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from slurm_ipu.vipu import VipuClient

from .conftest import VIPU, built_vipu_fast

SEQUENCE = [
    ["create", "partition", "p1", "--size", "4"],
    ["create", "partition", "p1", "--size", "4"],                       # ALREADY_EXISTS
    ["create", "partition", "px", "--size", "3"],                       # INVALID_ARGUMENT, the valid sizes
    ["create", "partition", "px", "--size", "8", "--num-gcds", "3"],
    ["create", "partition", "p3", "--size", "0004", "--num-gcds=02"],   # numbers as int() reads them
    ["create", "partition", "p2", "--size=8", "--num-gcds", "2", "--hosts", "n1,n2", "--owner-uid", "0",
     "--reconfigurable", "--showjson"],
    ["list", "partitions"],                                             # handed to the Python CLI
    ["list", "partitions", "--showjson"],                               # ipurun's read: C
    ["get", "partition", "p2", "--showjson"],                           # likewise
    ["reset", "partition", "p2", "--showjson"],                         # PopRun's reset between runs: C
    ["reset", "partition", "p2"],
    ["reset", "partition", "nope"],                                     # NOT_FOUND
    ["remove", "partition", "p1"],
    ["delete", "partition", "p1"],                                      # NOT_FOUND
    ["create", "partition", "bad name", "--size", "4"],                 # a name C does not pass on
    ["create", "partition", "p4", "--size", "4", "--allocation", "default"],  # a multi-Pod site's prolog: C
    ["create", "partition", "p5", "--size", "4", "--allocation=nosuch"],     # INVALID_ARGUMENT, the allocations
    ["remove", "partition", "p4"],
    ["remove", "partition", "p2"],
    ["remove", "partition", "p3"],
]


@pytest.fixture
def fast(tmp_path):
    spec, built = built_vipu_fast(tmp_path)
    fallback = spec.path("bin", "vipu-py")
    fallback.write_text(f"#!/bin/sh\nexec {' '.join(VIPU)} \"$@\"\n")
    fallback.chmod(0o755)
    return [str(built)], {"VIPU_FAST_FALLBACK": str(fallback)}


ALLOCATIONS = [  # vipu-admin's calls in the allocation model's prolog and epilog, and around them
    ["create", "allocation", "c1", "--agents", "ag0,ag1,ag2,ag3", "--grant", "0,0042"],  # C: uids as int() reads
    ["create", "allocation", "c1", "--agents", "ag0,ag1,ag2,ag3"],                # ALREADY_EXISTS
    ["create", "allocation", "c2", "--agents", "ag4,ag5,ag6"],                    # INVALID_ARGUMENT, the sizes
    ["create", "allocation", "c3", "--agents=ag8", "--grant", "root"],            # a user name: Python's
    ["create", "partition", "p1", "--size", "4", "--allocation", "c1"],
    ["remove", "allocation", "c1"],                                               # FAILED_PRECONDITION
    ["remove", "partition", "p1"],
    ["delete", "allocation", "c1"],
    ["remove", "allocation", "c3"],
    ["remove", "allocation", "nope"],                                             # NOT_FOUND
]


def replies(command: list[str], port: int, env: dict | None = None, sequence=SEQUENCE) -> list[tuple]:
    out = []
    for argv in sequence:
        proc = subprocess.run([*command, "--api-host", "127.0.0.1", "--api-port", str(port), *argv],
                              capture_output=True, text=True, timeout=30, env={**os.environ, **(env or {})})
        text = proc.stdout
        if "--showjson" in argv and proc.returncode == 0:
            doc = json.loads(text)
            for part in doc if isinstance(doc, list) else [doc]:
                part["partition"]["status"].pop("created_at", None)
            text = doc
        out.append((argv, proc.returncode, text, proc.stderr))
    return out


def test_the_c_vipu_answers_as_the_python_one(emu, fast):
    command, env = fast
    python = replies(VIPU, emu.port)
    c = replies(command, emu.port, env)
    for a, b in zip(python, c, strict=True):
        assert a == b
    assert [code for _, code, _, _ in c] == [0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 0]


def test_the_c_vipu_admin_answers_as_the_python_one(emu, fast):
    command, env = fast
    python = replies(VIPU, emu.port, sequence=ALLOCATIONS)
    c = replies(command, emu.port, env, sequence=ALLOCATIONS)
    for a, b in zip(python, c, strict=True):
        assert a == b
    assert [code for _, code, _, _ in c] == [0, 1, 1, 0, 0, 1, 0, 0, 0, 1]
    alone = {k: v for k, v in os.environ.items() if k != "VIPU_FAST_FALLBACK"}  # no Python to hand over to
    for argv, said in ((["create", "allocation", "c9", "--agents", "ag0", "--grant", "7"], "create allocation (c9)"),
                       (["remove", "allocation", "c9"], "remove allocation (c9)")):
        proc = subprocess.run([*command, "--api-host", "127.0.0.1", "--api-port", str(emu.port), *argv],
                              capture_output=True, text=True, timeout=30, env=alone)
        assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, f"{said}: success.", "")


def test_a_create_in_an_allocation_needs_no_python(emu, fast):
    """The prolog of a multi-Pod site names the Pod's allocation on every create: C answers it."""
    command, _ = fast
    env = {k: v for k, v in os.environ.items() if k != "VIPU_FAST_FALLBACK"}
    proc = subprocess.run([*command, "--api-host", "127.0.0.1", "--api-port", str(emu.port), "create", "partition",
                           "pa", "--size", "4", "--allocation", "default"], capture_output=True, text=True, timeout=30,
                          env=env)
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "create partition (pa): success.", "")


def test_unreachable_and_the_client_on_top(emu, fast, monkeypatch):
    command, env = fast
    down = subprocess.run([*command, "--api-host", "127.0.0.1", "--api-port", "1", "remove", "partition", "p"],
                          capture_output=True, text=True, timeout=30, env={**os.environ, **env})
    assert (down.returncode, down.stderr) == \
        (1, "unable to connect to VIRM/V-IPU Controller at 127.0.0.1:1: context deadline exceeded\n")
    monkeypatch.setenv("VIPU_FAST_FALLBACK", env["VIPU_FAST_FALLBACK"])
    client = VipuClient(command=command, host="127.0.0.1", port=emu.port, timeout=10, retries=1, backoff=0.05,
                        emulator_flags=True)
    part = client.ensure_partition("slurm_7", 8, time.monotonic() + 20, num_gcds=2, hosts=["n1"], owner_uid=0)
    assert (part.name, part.size, part.num_gcds, part.state) == ("slurm_7", 8, 2, "ACTIVE")
    assert client.remove_partition("slurm_7") and not client.remove_partition("slurm_7", missing_ok=True)
