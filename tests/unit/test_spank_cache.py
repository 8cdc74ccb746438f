"""ipurun's per-job executable cache on a node (spank/cache.c), run by a driver without Slurm
under a root of the test's own: the job prolog makes it for the job's user alone, in a directory
only root (here: the test's user) can write, replacing whatever else holds its name and
following no link; the job epilog removes it however its owner left it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from slurm_ipu.launcher import partition

from .conftest import build_driver

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not Path("/usr/include/slurm/spank.h").exists(),
                                reason="gcc and libslurm-dev missing: `make test` installs them")
JOB = 7


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("var")


@pytest.fixture(scope="module")
def driver(tmp_path_factory, base):
    return build_driver(tmp_path_factory, "cache_driver", cache_root=str(base / "cache" / "slurm-ipu"))


def unlock(path: Path) -> None:
    """Give the owner back every directory below path, as the epilog does, for rmtree."""
    for dirpath, dirnames, _ in os.walk(path):
        for name in dirnames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                os.chmod(full, 0o700)


@pytest.fixture
def root(base):
    """The driver's IPU_JOB_CACHE_ROOT, absent at the start of each test, under a parent of ours."""
    parent = base / "cache"
    parent.mkdir(mode=0o755)
    yield parent / "slurm-ipu"
    unlock(parent)
    shutil.rmtree(parent)


def run(driver: str, mode: str, job: int = JOB, uid: int | None = None, gid: int | None = None) -> list[str]:
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    proc = subprocess.run([driver, mode, str(job), str(uid), str(gid)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "rc=0", lines  # never fails: a failing job prolog or epilog drains the node
    return lines[:-1]


def private_of(path: Path, uid: int) -> bool:
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o700


def test_the_prolog_makes_it_for_the_user_alone_and_the_epilog_removes_it(driver, root):
    assert run(driver, "prolog") == []
    assert stat.S_IMODE(root.stat().st_mode) == 0o711 and private_of(root / str(JOB), os.getuid())
    assert sorted(os.listdir(root)) == [str(JOB)]  # no half-made directory left beside it
    (root / str(JOB) / "exe.popef").write_bytes(b"x")
    assert run(driver, "epilog") == []
    assert os.listdir(root) == []


def test_a_second_prolog_of_the_job_keeps_what_the_first_made(driver, root):
    """Nodes that share the root (the lab's) each run the job's prolog; slurmd may run it again."""
    run(driver, "prolog")
    (root / str(JOB) / "exe.popef").write_bytes(b"x")
    assert run(driver, "prolog") == []
    assert (root / str(JOB) / "exe.popef").read_bytes() == b"x"


def test_the_epilog_removes_what_its_owner_made_hard_to_remove_and_follows_no_link(driver, root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    run(driver, "prolog")
    cache = root / str(JOB)
    (cache / "a" / "b").mkdir(parents=True)
    (cache / "a" / "b" / "f").write_text("x")
    (cache / "a" / "to-dir").symlink_to(outside)
    (cache / "to-file").symlink_to(outside / "keep")
    (cache / "locked").mkdir()
    (cache / "a" / "b").chmod(0o500)
    (cache / "locked").chmod(0o000)
    cache.chmod(0o500)
    assert run(driver, "epilog") == []
    assert os.listdir(root) == [] and (outside / "keep").read_text() == "mine"


@pytest.mark.parametrize("plant", ["link-to-a-dir", "link-to-nowhere", "file"])
def test_whatever_else_holds_the_job_s_name_is_replaced_never_followed(driver, root, tmp_path, plant):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    run(driver, "prolog", job=JOB + 1)  # the root exists
    planted = root / str(JOB)
    if plant == "file":
        planted.write_text("planted")
    else:
        planted.symlink_to(outside if plant == "link-to-a-dir" else tmp_path / "nowhere")
    lines = run(driver, "prolog")
    assert lines == [f"info: spank_ipu: job {JOB}: replacing a stale {root}/{JOB} of uid {os.getuid()}"]
    assert private_of(planted, os.getuid()) and os.listdir(outside) == []


def test_a_root_that_is_a_link_is_replaced_and_its_target_left_alone(driver, root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    root.symlink_to(outside)
    assert run(driver, "prolog") == [f"info: spank_ipu: replacing the non-directory at {root}"]
    assert not root.is_symlink() and private_of(root / str(JOB), os.getuid()) and os.listdir(outside) == []


def test_a_root_others_could_write_is_made_root_only_again(driver, root):
    root.mkdir()
    root.chmod(0o777)
    run(driver, "prolog")
    assert stat.S_IMODE(root.stat().st_mode) == 0o711


@pytest.mark.parametrize("mode,made", [(0o777, False), (0o775, False), (0o1777, True)])
def test_a_parent_others_could_change_is_refused_unless_sticky(driver, root, mode, made):
    root.parent.chmod(mode)
    try:
        lines = run(driver, "prolog")
    finally:
        root.parent.chmod(0o755)
    assert (root / str(JOB)).is_dir() == made
    assert made or lines == [f"error: spank_ipu: job {JOB}: {root} is not reached through directories only root "
                             f"can change (at {root.parent.name}: not root's, or writable by others); ipurun's "
                             "executable cache not made or removed"]


def test_the_epilog_of_a_job_that_left_nothing_says_nothing(driver, root):
    assert run(driver, "epilog") == []
    root.mkdir()
    assert run(driver, "epilog") == []


@pytest.mark.skipif(os.getuid() != 0, reason="another user's directory: only root can make one")
def test_a_stale_directory_of_another_user_is_emptied_as_that_user_and_replaced(driver, root, tmp_path):
    nobody = 65534
    run(driver, "prolog", uid=nobody, gid=nobody)
    stale = root / str(JOB)
    assert private_of(stale, nobody)
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    (victim / "keep").write_text("root's")
    (stale / "d").mkdir()
    (stale / "d" / "f").write_text("x")
    (stale / "d" / "l").symlink_to(victim)
    for path in (stale / "d", stale / "d" / "f", stale / "d" / "l"):
        os.lchown(path, nobody, nobody)
    (stale / "d").chmod(0o500)
    lines = run(driver, "prolog")
    assert lines == [f"info: spank_ipu: job {JOB}: replacing a stale {root}/{JOB} of uid {nobody}"]
    assert private_of(stale, os.getuid()) and os.listdir(stale) == [] and (victim / "keep").exists()


def test_the_epilog_removes_the_run_record_of_the_job_s_user_only_if_it_is_theirs(driver, root, tmp_path):
    job = 4_000_000_000 + os.getpid() % 100_000  # far above any lab's job ids: /tmp is shared
    record = Path(partition.STATE_ROOT) / f"ipurun-job-{job}.json"
    target = tmp_path / "target.json"
    target.write_text("{}")
    try:
        record.symlink_to(target)
        run(driver, "epilog", job=job)
        assert record.is_symlink() and target.exists()  # a link is nobody's record: left, never followed
        record.unlink()
        record.write_text("{}")
        run(driver, "epilog", job=job)
        assert not record.exists()
    finally:
        if record.is_symlink() or record.exists():
            record.unlink()
