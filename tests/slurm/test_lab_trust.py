"""The lab trusts only its owner (issue 23, item 2), with real users: a user who creates a lab
directory first in a world-writable sticky directory (as the old default /var/tmp/slurm-ipu-lab
let anyone) and plants a hook and a pids.json in it gets nothing run, started or signalled by
root's `slurm-ipu lab up|down|status` or `slurm-ipu demo`; and root's default lab directory is
one no other user can create first. No lab runs here: the refusal comes before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from slurm_ipu.lab import trust

from .conftest import USERS

pytestmark = pytest.mark.slurm
PLANTER = USERS[0]
SLURM_IPU = str(Path(sys.executable).with_name("slurm-ipu"))  # the installed entry point, as make demo runs


@pytest.fixture(scope="module")
def planter() -> int:
    """A non-root user of this machine (created as the lab's users are, in tests/slurm/conftest.py)."""
    if os.geteuid() != 0:
        pytest.skip("the lab runs as root here; creating another user needs root")
    if subprocess.run(["id", "-u", PLANTER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PLANTER],
                       check=True, capture_output=True, timeout=60)
    return int(subprocess.run(["id", "-u", PLANTER], capture_output=True, text=True, check=True).stdout)


def as_planter(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={PLANTER}", f"--regid={PLANTER}", "--init-groups", "--", "sh", "-c",
                           script], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})


@pytest.fixture
def planted(planter):
    """A sticky world-writable directory like /var/tmp, and in it the default-shaped lab directory the
    planter made first: a hook that would leave a marker if anyone ran it, and a pids.json naming
    a root process (pid 1) for `lab down` to stop."""
    shared = Path(tempfile.mkdtemp(prefix="slurm-ipu-trust-", dir="/tmp"))
    shared.chmod(0o1777)
    lab, marker = shared / "slurm-ipu-lab", shared / "hook-ran"
    hook = lab / "install" / "libexec" / "slurm-ipu-hook"
    proc = as_planter(f"umask 022 && mkdir -p {hook.parent} && printf '#!/bin/sh\\ntouch {marker}\\n' > {hook} && "
                      f"chmod 755 {hook} && echo '{json.dumps({'munged': 1, 'slurmctld': 1})}' > {lab}/pids.json")
    assert proc.returncode == 0, proc.stderr
    assert lab.stat().st_uid == planter
    yield lab, marker
    shutil.rmtree(shared, ignore_errors=True)


def run(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SLURM_IPU, *argv], capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})})


def refusal(lab: Path, uid: int) -> str:
    return (f"slurm-ipu lab: {lab} belongs to {PLANTER} (uid {uid}), mode 0755, not to root: another user could "
            "choose what the lab runs or signals as root; use a lab directory of your own (--dir or "
            "$SLURM_IPU_LAB_DIR), e.g. the default /var/lib/slurm-ipu/lab")


def processes_naming(path: Path) -> list[str]:
    """Command lines of running processes that mention path (a daemon started for that lab)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in argv:
            found.append(argv)
    return found


def nothing_happened(lab: Path, marker: Path) -> None:
    assert not marker.exists(), "the planted hook ran"
    assert sorted(p.name for p in lab.iterdir()) == ["install", "pids.json"], "the lab wrote into it"
    assert json.loads((lab / "pids.json").read_text()) == {"munged": 1, "slurmctld": 1}
    assert not processes_naming(lab)


@pytest.mark.parametrize("action", ["up", "down", "status"])
def test_a_lab_directory_another_user_made_first_is_refused_in_one_line(planted, planter, action):
    lab, marker = planted
    proc = run("lab", action, "--dir", str(lab))
    assert (proc.returncode, proc.stderr.strip()) == (2, refusal(lab, planter)), proc.stderr
    assert proc.stdout == ""  # no export lines for `eval`
    nothing_happened(lab, marker)


def test_make_demo_refuses_it_too(planted, planter):
    """`make demo` runs `slurm-ipu demo`, which brings the lab up in the default directory."""
    lab, marker = planted
    proc = run("demo", env={"SLURM_IPU_LAB_DIR": str(lab)})
    assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (2, refusal(lab, planter)), proc.stderr
    nothing_happened(lab, marker)


def test_roots_default_lab_directory_is_under_no_world_writable_directory(planter, monkeypatch):
    monkeypatch.delenv("SLURM_IPU_LAB_DIR", raising=False)
    default = trust.default_dir()
    assert default == Path("/var/lib/slurm-ipu/lab")
    for level in (*reversed(default.parents), default):
        if not level.exists():
            break
        st = level.lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == 0, level
        assert not st.st_mode & 0o022, f"{level} is writable by group or other ({stat.S_IMODE(st.st_mode):04o})"
    trust.check_dir(default)
    # ...so the planter can neither make it (or what is missing above it) first, nor plant in it
    first = next((level for level in (*reversed(default.parents), default) if not level.exists()), None)
    proc = as_planter(f"mkdir {first or default / 'planted'}")
    assert proc.returncode != 0 and "Permission denied" in proc.stderr
