"""Every `poprun` command line of PopRun's user guide (overview and launching chapters), verbatim,
`poprun` included (ipurun under PopRun's name, as install.poprun names it), run
inside one lab allocation.

The lab has one ILD, no host called pod1-pod4 and no V-IPU server at vipu.my_domain: those
lines must be refused with a line that says why (and the emulator never contacts an address off
loopback). Every other line must run as the guide says. `train.py` stands in for the user's
program: it prints what PopRun's instance environment gives it and attaches (the emulator's
IPUoF probe) to the partition it names."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from .conftest import wait_gone

GUIDE = [
    'poprun --num-instances 2 --num-replicas 2 --offline-mode=1 echo "Hello world!"',
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=4 --num-instances=1 python3 train.py',
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=4 --num-instances=1 \\\n--executable-cache-path=/tmp/poplar-executable-cache \\\npython3 train.py',
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=8 --num-instances=2 python3 train.py',
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=8 --num-instances=2 \\\n--executable-cache-path="" \\\npython3 train.py',
    'poprun --host, \\\n--vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=8 --num-instances=2 python3 train.py',
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=4 --num-instances=1 \\\n--executable-cache-path=/tmp/poplar-executable-cache \\\npython3 train.py',
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=4 --num-instances=1 \\\n--executable-cache-path="" \\\npython3 train.py',
    'poprun --num-instances=4 --num-replicas=8 --ipus-per-replica=2 \\\n'
    '--offline-mode=yes --offline-target=pod16 --executable-cache-path=my_cache \\\npython3 compile.py',
    'poprun --num-instances=4 --num-replicas=8 --ipus-per-replica=2 \\\n'
    '--vipu-partition=my_partition --executable-cache-path=my_cache \\\npython3 train.py',
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=4 --num-instances=4 \\\n--autoreport-dir /tmp/training-profile-directory \\\npython3 train.py',
    'POPLAR_ENGINE_OPTIONS=\'{"allowOutOfMemory":"true"}\' \\\n'
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=4 --num-instances=4 \\\n--autoreport-dir /tmp/training-profile-directory \\\npython3 train.py',
    'POPLAR_ENGINE_OPTIONS=\'{"autoReport.all":"false"}\' \\\n'
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=4 --num-instances=4 \\\n--autoreport-dir /tmp/training-profile-directory \\\npython3 train.py',
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=4 --num-instances=4 \\\n--autoreport-dir /tmp/training-profile-directory \\\n'
    '--mpi-local-args \'-x POPLAR_ENGINE_OPTIONS=\'{"autoReport.directory":"/tmp/training/profile-directory"}\'\' \\\n'
    'python3 train.py',
    'poprun --vipu-partition=my_partition --mpi-global-args="--tag-output" \\\n'
    '--num-replicas=4 --num-instances=4 \\\n--autoreport-dir /tmp/training-profile-directory \\\n'
    '--instance-mpi-local-args \'0:-x POPLAR_ENGINE_OPTIONS=\'{"autoReport.directory":"/tmp/training-profile-directory/0"}\'\''  # noqa: E501 (verbatim)
    ' \\\npython3 train.py',
    'poprun --vipu-partition=my_partition \\\n--vipu-server-host=vipu.my_domain --vipu-server-port=34521 \\\n'
    '--num-replicas=32 --num-instances=2 --num-ilds=2 python3 train.py',
    'poprun --vipu-partition=my_partition --vipu-allocation=allocation1 \\\n'
    '--vipu-server-host=vipu.my_domain --vipu-server-port=34521 \\\n--update-partition=yes --remove-partition=no \\\n'
    '--num-replicas=32 --num-instances=2 --num-ilds=2 python3 train.py',
    'poprun --export-config training.conf --vipu-partition=my_partition \\\n--vipu-allocation=allocation1 \\\n'
    '--vipu-server-host=vipu.my_domain --vipu-server-port=34521 \\\n--update-partition=yes --remove-partition=no \\\n'
    '--num-replicas=32 --num-instances=2 --num-ilds=2 \\\n--host pod[1-4] \\\npython3 train.py',
    'poprun --import-config training.conf',
    'poprun --import-config training.conf --num-instances=4 \\\npython3 train.py --hyper-param=1',
]

NOT_HERE = "the emulator serves loopback only"  # vipu.my_domain: the lab has no such server
AUTOREPORT = "autoreport-dir command line argument cannot be specified when POPLAR_ENGINE_OPTIONS contains"
# Per line: exit code, instances that ran (None: refused), and what the output or each instance must show.
EXPECT = [
    (0, 2, {"out": ["Hello world!\nHello world!"]}),
    (0, 1, {"tagged": True, "each": {"POPDIST_EXECUTABLE_CACHE_PATH": ""}}),
    (0, 1, {"tagged": True, "each": {"POPDIST_EXECUTABLE_CACHE_PATH": "/tmp/poplar-executable-cache"}}),
    (0, 2, {"tagged": True, "each": {"POPDIST_EXECUTABLE_CACHE_PATH": "/var/cache/slurm-ipu/{job}"}}),
    (0, 2, {"tagged": True, "each": {"POPDIST_EXECUTABLE_CACHE_PATH": ""}}),
    (2, None, {"out": ["unknown option '--host,'", "did you mean --host?"]}),
    (0, 1, {"tagged": True, "each": {"POPDIST_EXECUTABLE_CACHE_PATH": "/tmp/poplar-executable-cache"}}),
    (0, 1, {"tagged": True, "each": {"POPDIST_EXECUTABLE_CACHE_PATH": ""}}),
    (0, 4, {"each": {"POPDIST_EXECUTABLE_CACHE_PATH": "my_cache", "IPUOF_VIPU_API_PARTITION_ID": "",
                     "POPLAR_TARGET_OPTIONS": '{"ipuLinkDomainSize":"16","ipuLinkConfiguration":"slidingWindow",'
                                              '"ipuLinkTopology":"torus","gatewayMode":"true","instanceSize":"16"}'}}),
    (0, 4, {"each": {"POPDIST_EXECUTABLE_CACHE_PATH": "my_cache", "POPDIST_NUM_LOCAL_REPLICAS": "2"}}),
    (0, 4, {"tagged": True, "each": {"POPDIST_AUTOREPORT_DIRECTORY": "/tmp/training-profile-directory"}}),
    (0, 4, {"tagged": True, "each": {"POPDIST_AUTOREPORT_DIRECTORY": "/tmp/training-profile-directory",
                                     "POPLAR_ENGINE_OPTIONS": '{"allowOutOfMemory":"true"}'}}),
    (0, 4, {"tagged": True, "each": {"POPLAR_ENGINE_OPTIONS": '{"autoReport.all":"false"}'}}),
    (2, None, {"out": [AUTOREPORT]}),
    (2, None, {"out": [AUTOREPORT]}),
    (2, None, {"out": [NOT_HERE]}),
    (2, None, {"out": [NOT_HERE]}),
    (2, None, {"out": ["--host pod1 is not in this job's nodes"]}),
    (2, None, {"out": ["--import-config training.conf: No such file or directory"]}),
    (2, None, {"out": ["--import-config training.conf: No such file or directory"]}),
]

KEYS = ("POPDIST_INSTANCE_INDEX", "POPDIST_NUM_INSTANCES", "POPDIST_NUM_LOCAL_REPLICAS", "IPUOF_VIPU_API_PARTITION_ID",
        "IPUOF_VIPU_API_GCD_ID", "POPDIST_EXECUTABLE_CACHE_PATH", "POPDIST_AUTOREPORT_DIRECTORY",
        "POPLAR_TARGET_OPTIONS", "POPLAR_ENGINE_OPTIONS", "IPUOF_CONFIG_PATH")
TRAIN = f"""import os, subprocess, sys
env = os.environ
attach = ""
if env.get("IPUOF_VIPU_API_PARTITION_ID"):
    got = subprocess.run([{sys.executable!r}, "-m", "slurm_ipu.emulator.main", "attach"], capture_output=True,
                         text=True, timeout=60)
    attach = "granted" if got.returncode == 0 else "refused:" + got.stderr.strip().replace(" ", "_")
print("RUN", *[k + "=" + env.get(k, "") for k in {KEYS!r}], "ATTACH=" + attach, "ARGS=" + ",".join(sys.argv[1:]))
"""


def sections(text: str) -> list[tuple[int, str]]:
    """(exit code, output) per guide line, from the markers the batch script prints."""
    out = []
    for block in text.split("=== LINE ")[1:]:
        body, _, rc = block.partition("=== rc=")
        out.append((int(rc.split()[0]), body.split("\n", 1)[1]))
    return out


def runs(body: str) -> list[dict[str, str]]:
    rows = []
    for line in body.splitlines():
        if "RUN " in line:
            words = line[line.index("RUN ") + 4:].split(" ")
            rows.append(dict(w.split("=", 1) for w in words if "=" in w))
    return rows


@pytest.fixture
def guide_dir(clean_lab, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "compile.py").write_text(TRAIN)
    (tmp_path / "bin").mkdir()
    ipurun = tmp_path / "bin" / "ipurun"
    ipurun.write_text(f"#!/bin/sh\nexec {sys.executable} -m slurm_ipu.launcher.cli \"$@\"\n")
    ipurun.chmod(0o755)
    (tmp_path / "bin" / "poprun").symlink_to("ipurun")  # install.poprun's link
    clean_lab.run("vipu", "create", "partition", "my_partition", "--size", "16", check=True)
    fixed_cache = Path("/tmp/poplar-executable-cache")  # the guide's own path: leave no trace of ours
    had_cache = fixed_cache.exists()
    yield tmp_path
    clean_lab.run("vipu", "remove", "partition", "my_partition")
    if not had_cache:
        shutil.rmtree(fixed_cache, ignore_errors=True)


def test_every_poprun_line_of_the_guide(clean_lab, guide_dir):
    script = [f"#!/bin/bash\nexport PATH={guide_dir}/bin:$PATH\ncd {guide_dir}\n"]
    for k, line in enumerate(GUIDE):
        script.append(f"echo '=== LINE {k}'\n{line}\necho \"=== rc=$?\"\n")
    out = guide_dir / "guide.out"
    job = clean_lab.sbatch("-N", "2", "--ntasks-per-node=2", "-o", str(out), "-D", str(guide_dir),
                           script="".join(script))
    wait_gone(clean_lab, job, timeout=240)
    text = out.read_text()
    got = sections(text)
    assert len(got) == len(GUIDE), text
    for k, ((rc, body), (want_rc, instances, checks)) in enumerate(zip(got, EXPECT, strict=True)):
        where = f"guide line {k}: {GUIDE[k]!r}\n{body}"
        assert rc == want_rc, where
        rows = runs(body)
        if instances is None:
            assert not rows, where
        elif "out" not in checks:
            assert sorted(int(r["POPDIST_INSTANCE_INDEX"]) for r in rows) == list(range(instances)), where
        for words in checks.get("out", []):
            assert words in body, where
        for key, value in checks.get("each", {}).items():
            assert all(r[key] == value.replace("{job}", str(job)) for r in rows), where
        for r in rows:
            assert r["IPUOF_CONFIG_PATH"] == "", where  # PopRun unsets it in every instance
            if r["IPUOF_VIPU_API_PARTITION_ID"]:
                assert r["IPUOF_VIPU_API_PARTITION_ID"] == "my_partition" and r["ATTACH"] == "granted", where
        if checks.get("tagged"):
            assert all(re.match(r"\[1,\d+\]<stdout>:RUN ", ln) for ln in body.splitlines() if "RUN " in ln), where
