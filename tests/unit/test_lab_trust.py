"""The lab trusts only its owner: a lab directory, a parent of it, or a file in it
the lab executes or takes a pid from, that another user owns or may write, is refused with one
line before anything is read, written, started or signalled (slurm_ipu/lab/trust.py). Other
owners are made with chown (uid 4242, no such user), which needs root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ipu import lab
from slurm_ipu.errors import LabError
from slurm_ipu.lab import procs, trust

OTHER = 4242
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user, and the lab, need root")
TAIL = "another user could choose what the lab runs or signals as root"
ELSEWHERE = "use a lab directory of your own (--dir or $SLURM_IPU_LAB_DIR), e.g. the default /var/lib/slurm-ipu/lab"


@pytest.fixture
def base(tmp_path) -> Path:
    """A root-owned 0755 directory: a good parent, as /var/lib is."""
    tmp_path.chmod(0o755)
    return tmp_path


def made_lab(base: Path) -> Path:
    path = base / "lab"
    trust.make_dir(path)
    for sub in ("install/libexec", "bin", "run", "etc", "lib"):
        (path / sub).mkdir(parents=True)
    (path / "pids.json").write_text("{}")
    return path


def refusal(call) -> str:
    with pytest.raises(LabError) as refused:
        call()
    return refused.value.line("slurm-ipu lab")


def slurm_ipu(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_ipu.cli", *argv], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", **(env or {})})


def test_a_lab_directory_of_our_own_passes_and_is_made_0755_whatever_the_umask(base):
    old = os.umask(0o077)
    try:
        trust.make_dir(base / "new" / "lab")
    finally:
        os.umask(old)
    for level in (base / "new", base / "new" / "lab"):
        assert level.stat().st_mode & 0o777 == 0o755  # the lab's users traverse it to slurm.conf
    lab.check_trusted(lab.LabSpec(dir=made_lab(base)))


def test_a_lab_directory_another_user_made_first_is_refused_in_one_line(base):
    path = made_lab(base)
    os.chown(path, OTHER, OTHER)
    assert refusal(lambda: trust.make_dir(path)) == (
        f"slurm-ipu lab: {path} belongs to uid {OTHER}, mode 0755, not to root: {TAIL}; {ELSEWHERE}")


def test_a_group_or_other_writable_lab_directory_is_refused_sticky_or_not(base):
    path = made_lab(base)
    for mode in (0o775, 0o757, 0o1777):
        path.chmod(mode)
        assert refusal(lambda: trust.check_dir(path)) == (
            f"slurm-ipu lab: {path} is writable by group or other (owner root (uid 0), mode {mode:04o}): {TAIL}; "
            f"chmod go-w {path}, or {ELSEWHERE}")


def test_a_parent_another_user_owns_is_refused(base):
    (base / "theirs").mkdir()
    os.chown(base / "theirs", OTHER, OTHER)
    path = base / "theirs" / "lab"  # not there yet: the parent alone decides
    assert refusal(lambda: trust.check_dir(path)) == (
        f"slurm-ipu lab: {base / 'theirs'} (above the lab directory {path}) belongs to uid {OTHER}, mode 0755, not "
        f"to root: {TAIL}; {ELSEWHERE}")
    assert not path.exists()


def test_a_root_owned_sticky_parent_like_tmp_is_accepted_a_merely_writable_one_is_not(base):
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp and /var/tmp: nobody else can rename or remove our entry
    trust.make_dir(shared / "lab")
    trust.check_dir(Path("/tmp") / "anything" / "lab")
    shared.chmod(0o777)
    assert "is writable by group or other (owner root (uid 0), mode 0777)" in refusal(
        lambda: trust.check_dir(shared / "lab"))
    shared.chmod(0o1777)
    os.chown(shared, OTHER, OTHER)  # sticky, but its owner may still do anything in it
    assert f"{shared} (above the lab directory {shared / 'lab'}) belongs to uid {OTHER}" in refusal(
        lambda: trust.check_dir(shared / "lab"))


@pytest.mark.parametrize("planted", ["pids.json", "install/libexec/slurm-ipu-hook", "bin/vipu", "bin/squeue",
                                     "run/slurmctld.pid", "etc/slurm.conf", "lib/spank_ipu.so"])
def test_a_file_another_user_planted_in_the_lab_is_refused(base, planted):
    path = made_lab(base)
    target = path / planted
    target.write_text("#!/bin/sh\ntouch /tmp/owned\n")
    target.chmod(0o755)
    os.chown(target, OTHER, OTHER)
    assert refusal(lambda: lab.check_trusted(lab.LabSpec(dir=path))) == (
        f"slurm-ipu lab: {target} (in the lab directory {path}) belongs to uid {OTHER}, mode 0755, not to root: "
        f"{TAIL}; remove it, and whatever else that user put in {path}, then run the lab again")


def test_a_writable_file_or_a_sticky_directory_inside_the_lab_is_refused(base):
    path = made_lab(base)
    hook = path / "install" / "libexec" / "slurm-ipu-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o757)
    assert f"{hook} (in the lab directory {path}) is writable by group or other" in refusal(
        lambda: lab.check_trusted(lab.LabSpec(dir=path)))
    hook.chmod(0o755)
    libexec = path / "install" / "libexec"
    libexec.chmod(0o1777)  # anyone could add the hook client before the lab builds it
    assert f"{libexec} (in the lab directory {path}) is writable by group or other" in refusal(
        lambda: lab.check_trusted(lab.LabSpec(dir=path)))


def test_an_installed_prefix_is_checked_up_to_the_root(base):
    path = made_lab(base)
    prefix = base / "opt"
    (prefix / "libexec").mkdir(parents=True)
    (prefix / "libexec" / "slurm-ipu-hook").write_text("#!/bin/sh\n")
    lab.check_trusted(lab.LabSpec(dir=path, prefix=str(prefix)))
    os.chown(prefix, OTHER, OTHER)
    assert refusal(lambda: lab.check_trusted(lab.LabSpec(dir=path, prefix=str(prefix)))) == (
        f"slurm-ipu lab: {prefix} (used by the lab in {path}) belongs to uid {OTHER}, mode 0755, not to root: "
        f"{TAIL}; reinstall it as root (make install)")


def test_a_symlink_counts_by_its_owner_and_by_where_it_leads(base):
    real = made_lab(base)
    link = base / "link"
    link.symlink_to(real)
    trust.check_dir(link)
    os.lchown(link, OTHER, OTHER)  # its owner could point it elsewhere at any time
    assert refusal(lambda: trust.check_dir(link)).startswith(f"slurm-ipu lab: {link} belongs to uid {OTHER}")
    os.lchown(link, 0, 0)
    os.chown(real, OTHER, OTHER)
    assert refusal(lambda: trust.check_dir(link)).startswith(f"slurm-ipu lab: {real} belongs to uid {OTHER}")
    loop = base / "loop"
    loop.symlink_to(loop)
    assert "is a symlink loop" in refusal(lambda: trust.check_dir(loop / "lab"))


def test_lab_up_refuses_a_planted_hook_before_writing_or_starting_anything(base):
    """Through the command, as `make demo` runs it: one line, exit 2, no traceback."""
    path = made_lab(base)
    hook = path / "install" / "libexec" / "slurm-ipu-hook"
    hook.write_text("#!/bin/sh\ntouch /tmp/owned\n")
    os.chown(hook, OTHER, OTHER)
    proc = slurm_ipu("lab", "up", "--dir", str(path))
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"slurm-ipu lab: {hook} (in the lab directory {path}) belongs to uid {OTHER}, mode 0644, not to root: "
        f"{TAIL}; remove it, and whatever else that user put in {path}, then run the lab again"))
    assert sorted(p.name for p in path.iterdir()) == ["bin", "etc", "install", "lib", "pids.json", "run"]
    assert not [p for d in ("bin", "etc", "lib", "run") for p in (path / d).iterdir()]


def test_lab_down_refuses_a_rewritten_pids_json_and_signals_nothing(base):
    path = made_lab(base)
    victim = subprocess.Popen(["sleep", "60"])
    try:
        # a root process of the planter's choosing, start time and all: as root's own file, down would stop it
        (path / "pids.json").write_text(json.dumps({"munged": procs._record(victim.pid)}))
        assert lab._running(lab.load_pids(lab.LabSpec(dir=path))["munged"])
        os.chown(path / "pids.json", OTHER, OTHER)
        for action in ("down", "status"):
            proc = slurm_ipu("lab", action, "--dir", str(path))
            assert (proc.returncode, proc.stderr.strip()) == (2, (
                f"slurm-ipu lab: {path / 'pids.json'} (in the lab directory {path}) belongs to uid {OTHER}, mode 0644, "
                f"not to root: {TAIL}; remove it, and whatever else that user put in {path}, then run the lab again"))
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_the_default_lab_directory_is_one_no_other_user_can_create_first(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_IPU_LAB_DIR", raising=False)
    assert trust.default_dir() == Path("/var/lib/slurm-ipu/lab") == lab.LabSpec().dir
    monkeypatch.setenv("SLURM_IPU_LAB_DIR", str(tmp_path / "mine"))
    assert trust.default_dir() == tmp_path / "mine" == lab.LabSpec().dir
    monkeypatch.delenv("SLURM_IPU_LAB_DIR")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", "/home/u/.state")
    assert trust.default_dir() == Path("/home/u/.state/slurm-ipu/lab")
    monkeypatch.setenv("XDG_STATE_HOME", "relative")  # not absolute: ignored, as the XDG spec says
    monkeypatch.setenv("HOME", "/home/u")
    assert trust.default_dir() == Path("/home/u/.local/state/slurm-ipu/lab")


def test_the_cli_and_its_help_name_the_new_default():
    proc = slurm_ipu("lab", "--help")
    assert "/var/lib/slurm-ipu/lab" in " ".join(proc.stdout.split()) and "/var/tmp" not in proc.stdout
