"""Root never writes through a user's link or into a user's file: the metrics textfile and its
temporary, hooks.log, the state directory that `slurm-ipu setup` and `make install` make. Each
test plants what a user on the host could (a link, a pre-created file, a directory made first)
at every such path, as a user (uid NOBODY), and judges by what is on disk afterwards. Nothing
here relies on fs.protected_symlinks or fs.protected_regular (a site cannot be assumed to set
them): those guard only sticky directories, and the shared directories here are not sticky."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_ipu.errors import UnsafePath
from slurm_ipu.fsutil import atomic_write, private_dir
from slurm_ipu.hooks.hooklog import report

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files needs root")
NOBODY = 65534


def planted_as_user(path: Path, target: Path | None = None, data: bytes = b"forged 1\n") -> Path:
    """A link to `target`, or a file holding `data`, that uid NOBODY owns, at `path`."""
    if target is not None:
        path.symlink_to(target)
    else:
        path.write_bytes(data)
    os.lchown(path, NOBODY, NOBODY)
    return path


def secret(tmp_path: Path) -> Path:
    """A root-only file a user would like to read or overwrite."""
    path = tmp_path / "root-only"
    path.write_bytes(b"root's\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def open_dir(tmp_path) -> Path:
    """A textfile directory as an admin might choose it: every user can write it. Not sticky, so
    the kernel's protected_* settings, whatever they are here, guard nothing in it."""
    folder = tmp_path / "textfile"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


def test_a_link_at_the_textfile_s_path_is_replaced_not_followed(tmp_path, open_dir):
    target = secret(tmp_path)
    link = planted_as_user(open_dir / "slurm_ipu.prom", target)
    atomic_write(link, "slurm_ipu_ipus 1\n")
    assert target.read_bytes() == b"root's\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    st = os.lstat(link)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and link.read_text() == "slurm_ipu_ipus 1\n"


def test_links_and_files_at_every_temporary_name_are_never_written_through(tmp_path, open_dir, mocker):
    """The names a writer before this used (pid and thread) and the very name this one draws
    first (os.urandom made to repeat): each planted thing is left as it was, and what is
    published is root's own file, 0644, with root's data."""
    import _thread

    target = secret(tmp_path)
    path = open_dir / "slurm_ipu.prom"
    old_style = open_dir / f".slurm_ipu.prom.{os.getpid()}.{_thread.get_ident()}.tmp"
    planted_as_user(old_style, target)
    drawn = [b"\x01" * 8, b"\x01" * 8, b"\x02" * 8]
    mocker.patch("slurm_ipu.fsutil.os.urandom", side_effect=lambda n: drawn.pop(0))
    first = planted_as_user(open_dir / f".slurm_ipu.prom.{'01' * 8}.tmp", target)
    atomic_write(path, "slurm_ipu_ipus 2\n")
    assert target.read_bytes() == b"root's\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.readlink(first) == str(target) and os.readlink(old_style) == str(target)
    st = os.lstat(path)
    assert (st.st_uid, stat.S_IMODE(st.st_mode), path.read_text()) == (0, 0o644, "slurm_ipu_ipus 2\n")


def test_a_pre_created_temporary_file_is_never_published(open_dir, mocker):
    """A user's own file at the temporary name, which root used to fill and rename into place:
    the textfile would have stayed the user's to rewrite (forged metrics)."""
    mocker.patch("slurm_ipu.fsutil.os.urandom", side_effect=[b"\x03" * 8, b"\x04" * 8])
    theirs = planted_as_user(open_dir / f".slurm_ipu.prom.{'03' * 8}.tmp")
    path = open_dir / "slurm_ipu.prom"
    atomic_write(path, "slurm_ipu_ipus 3\n")
    assert theirs.read_bytes() == b"forged 1\n" and os.lstat(theirs).st_uid == NOBODY
    assert os.lstat(path).st_uid == 0 and path.read_text() == "slurm_ipu_ipus 3\n"


def test_hooks_log_is_never_appended_through_a_link(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    target = secret(tmp_path)
    planted_as_user(state / "hooks.log", target)
    report(str(state), "job 7: a line root writes", echo=False)
    assert target.read_bytes() == b"root's\n"
    assert os.path.islink(state / "hooks.log")


def test_hooks_log_is_made_private(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    report(str(state), "job 8: uid 1000 on ag0, ag1", echo=False)
    assert stat.S_IMODE(os.stat(state / "hooks.log").st_mode) == 0o640


# --- the state directory: slurm-ipu setup and make install (fsutil.private_dir) --------------

def test_a_missing_state_directory_is_made_private_and_the_hooks_user_s(tmp_path):
    path = tmp_path / "var" / "lib" / "slurm-ipu"
    assert private_dir(path, NOBODY, NOBODY)
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == NOBODY
    assert not private_dir(path, NOBODY, NOBODY)  # again: nothing changes


def test_a_link_at_the_state_directory_s_path_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    link = planted_as_user(tmp_path / "slurm-ipu", target)
    with pytest.raises(UnsafePath, match="is not a directory .*remove it"):
        private_dir(link, 0, 0)
    st = os.stat(target)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755)


def test_a_state_directory_another_user_made_first_is_refused(tmp_path):
    path = tmp_path / "slurm-ipu"
    path.mkdir()
    (path / "hooks.log").write_text("theirs\n")
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(UnsafePath, match=f"belongs to uid {NOBODY}, not root"):
        private_dir(path, 0, 0)
    assert os.stat(path).st_uid == NOBODY  # neither taken over nor emptied: the admin decides


@pytest.mark.parametrize("what", ["link", "their file", "their fifo"])
def test_a_state_directory_holding_what_the_hooks_never_leave_is_refused(tmp_path, what):
    path = tmp_path / "slurm-ipu"
    (path / "pending-removal").mkdir(parents=True)
    (path / "hook-stats.json").write_text("{}")   # the hooks' own: fine
    inside = path / "pending-removal" / "slurm_7.json"
    if what == "link":
        planted_as_user(inside, secret(tmp_path))
    elif what == "their file":
        planted_as_user(inside)
    else:
        os.mkfifo(inside)
        os.chown(inside, NOBODY, NOBODY)
    with pytest.raises(UnsafePath, match="pending-removal/slurm_7.json, which is not the hooks'"):
        private_dir(path, 0, 0)


def test_a_state_directory_under_a_parent_others_can_write_is_refused(tmp_path):
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o777)
    with pytest.raises(UnsafePath, match="writable by others"):
        private_dir(parent / "slurm-ipu", 0, 0)
    assert not (parent / "slurm-ipu").exists()


def test_setup_s_state_directory_step_refuses_a_planted_link(tmp_path, mocker):
    from slurm_ipu.deploy import setup

    target = tmp_path / "etc-of-someone"
    target.mkdir(mode=0o755)
    link = planted_as_user(tmp_path / "state", target)
    with pytest.raises(UnsafePath):
        setup._state_dir(str(link), "root")
    assert os.stat(target).st_uid == 0 and stat.S_IMODE(os.stat(target).st_mode) == 0o755
