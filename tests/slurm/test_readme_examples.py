"""The README's user examples run as written on the lab: the blocks are read
from README.md itself, so the README cannot drift from what works. They run as a user who is not
root, on the lab root started: nothing they run may be root's."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from .conftest import wait_gone

README = Path(__file__).resolve().parents[2] / "README.md"
TRAIN = """#!/usr/bin/env python3
import os
e = os.environ
print("TASK", e.get("SLURMD_NODENAME"), e.get("IPUOF_VIPU_API_PARTITION_ID"), e.get("POPDIST_INSTANCE_INDEX", "-"),
      e.get("IPUOF_VIPU_API_GCD_ID", "-"))
"""


def block_after(heading: str) -> str:
    text = README.read_text()
    start = text.index(heading)
    return re.search(r"```sh\n(.*?)```", text[start:], re.S).group(1)


USER = "slurmipu-a"


def run_block(lab, name: str, body: str, *sbatch_args: str) -> str:
    where = lab.spec.path("users", name)  # the user's own directory (pytest's tmp_path is root's)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    (where / "train.py").write_text(TRAIN)
    (where / "train.py").chmod(0o755)
    # The README's `python train.py` assumes a user's Python environment; a bare Debian has only
    # python3 (no python-is-python3). The system's: root's python3 may be a build under /root.
    shim = where / "bin"
    shim.mkdir()
    (shim / "python").symlink_to("/usr/bin/python3")
    out = where / "readme.out"
    # sbatch reads #SBATCH lines only before the first command: `set -e` goes after them.
    lines = body.splitlines(keepends=True)
    head = "".join(ln for ln in lines if ln.startswith("#SBATCH"))
    rest = "".join(ln for ln in lines if not ln.startswith("#SBATCH"))
    script = where / "job.sh"
    script.write_text(f"#!/bin/bash\n{head}set -e\nexport PATH={shim}:$PATH\n{rest}echo DONE\n")
    for path in (where, *where.iterdir()):
        shutil.chown(path, USER, USER)
    proc = lab.run_as(USER, "sbatch", "--parsable", *sbatch_args, "-o", str(out), "-D", str(where), str(script))
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip().split(";")[0])
    wait_gone(lab, job, timeout=180)
    text = out.read_text()
    assert text.rstrip().endswith("DONE"), text  # set -e: every line of the block succeeded
    return text.replace(f"slurm_{job}", "slurm_JOB")


def tasks(text: str) -> list[list[str]]:
    return sorted(line.split()[1:] for line in text.splitlines() if line.startswith("TASK "))


def test_what_a_user_sees(clean_lab, users):
    body = block_after("## What a user sees")
    assert "#SBATCH --gres=ipu:4" in body and "srun ./train.py" in body
    text = run_block(clean_lab, "readme-user", body)
    srun = [t for t in tasks(text) if t[2] == "-"]
    assert srun == [["node1", "slurm_JOB", "-", "-"], ["node2", "slurm_JOB", "-", "-"]], text
    ipurun = sorted((t[2], t[3], t[0]) for t in tasks(text) if t[2] != "-")
    assert ipurun == [("0", "0", "node1"), ("1", "0", "node1"), ("2", "1", "node2"), ("3", "1", "node2")], text


def test_ipurun_examples(clean_lab, users):
    body = block_after("## ipurun: PopRun's options on srun")
    text = run_block(clean_lab, "readme-ipurun", body, "-N", "4", "--gres=ipu:4")
    assert len([t for t in tasks(text) if t[1] == "slurm_JOB"]) == 8, text
    assert text.count("Hello world!") == 2 and "ipurun topology" in text and "ipurun plan: 8 instance(s)" in text
