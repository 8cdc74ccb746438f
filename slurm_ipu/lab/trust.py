"""Whom the lab trusts: root and the user who runs it, nobody else.

`make demo` and `make test` run the lab as root. slurmctld runs slurm-ipu-hook under the lab's
install/ for every job, the lab runs its bin/ first on PATH, and `lab down` signals the pids it
reads from pids.json: each is only as safe as the least trusted user who could have written it.
So before the lab uses its directory, it holds the directory and each such file to the usual
safe-path rule (OpenSSH's for authorized_keys, sudo's for sudoers):

- the path and every directory above it, up to /, belong to root or to the invoking user
  (effective uid): another owner can chmod it, or replace what is in it;
- none of them is writable by group or other: anyone in the group, or anyone at all, could
  replace what is in it;
- except a parent that root owns with the sticky bit set (/tmp, /var/tmp): there other users can
  create entries but cannot rename or remove ours, so an entry of ours below it stays ours. The
  lab directory and everything in it get no such exception: there another user could create
  what is still missing (etc/, bin/, a hook client not built yet) before the lab does;
- a symlink on the way counts by its owner (who alone can replace it in a sticky directory),
  then by where it leads, checked the same way.

One lstat per path component, each directory once per call: a few dozen for the whole lab.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from ..errors import LabError

ROOT_DIR = Path("/var/lib/slurm-ipu/lab")


def default_dir() -> Path:
    """The lab directory without --dir: $SLURM_IPU_LAB_DIR when set (held to the same rule),
    else own_dir()."""
    return Path(os.environ["SLURM_IPU_LAB_DIR"]) if os.environ.get("SLURM_IPU_LAB_DIR") else own_dir()


def own_dir() -> Path:
    """A lab directory no other user can create first. For root /var/lib/slurm-ipu/lab: /var/lib
    is root's alone, and it stays traversable (0755), so the lab's non-root users reach
    etc/slurm.conf and the munge socket. For anyone else $XDG_STATE_HOME/slurm-ipu/lab
    (~/.local/state/slurm-ipu/lab): under their own home, which no other user may write; the
    lab's other users reach it only if that home is traversable."""
    if os.geteuid() == 0:
        return ROOT_DIR
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "slurm-ipu" / "lab"


def check_dir(lab: Path) -> None:
    """The lab directory and every directory above it, by the rule above. A missing tail passes:
    `lab up` creates it (make_dir), `down` and `status` find no lab there."""
    _Walk(lab).check(_absolute(lab))


def make_dir(lab: Path) -> None:
    """check_dir, then create what is missing of the lab directory, each level 0755 (the lab's
    users must traverse it), then check again: a level another user created between the first
    check and our mkdir is refused, never used."""
    path = _absolute(lab)
    check_dir(path)
    for level in (*reversed(path.parents), path):
        if os.path.lexists(level):
            continue
        try:
            os.mkdir(level, 0o755)
        except FileExistsError:
            continue  # someone was quicker: the check below judges whose it is
        except OSError as exc:
            raise LabError(f"cannot create {level} ({exc.strerror}); use a lab directory you may create "
                           "(--dir or $SLURM_IPU_LAB_DIR)") from None
        os.chmod(level, 0o755)  # the umask narrowed mkdir's mode
    check_dir(path)
    if not path.is_dir():
        raise LabError(f"{path} is not a directory; use another lab directory (--dir or $SLURM_IPU_LAB_DIR)")


def check_files(lab: Path, paths) -> None:
    """Files the lab executes, or reads pids from and then signals: each one that exists, and the
    directories between it and the lab directory (for a file outside it, an installed prefix's:
    every directory up to /), by the rule above. The lab directory's own chain is check_dir's."""
    walk = _Walk(lab)
    for path in paths:
        path = _absolute(path)
        walk.check(path, start=walk.lab if walk.lab in path.parents else None)


def _absolute(path) -> Path:
    # normpath, not resolve: each symlink on the way is judged (its owner, then its target).
    return Path(os.path.normpath(os.path.abspath(path)))


class _Walk:
    """One check: remembers the directories already passed, so shared parents cost one lstat."""

    def __init__(self, lab: Path):
        self.lab = _absolute(lab)
        self.labs = {self.lab, Path(os.path.realpath(self.lab))}  # a symlinked lab: where it leads too
        self.seen: set[Path] = set()

    def _inside(self, level: Path) -> bool:
        """The lab directory or something in it."""
        return any(level == lab or lab in level.parents for lab in self.labs)

    def _above(self, level: Path) -> bool:
        return any(level in lab.parents for lab in self.labs)

    def check(self, path: Path, start: Path | None = None, strict_last: bool = True, depth: int = 0) -> None:
        """path and its parents (only those below start, if given), root first; stops at the first
        missing level, since nothing below it exists to be used."""
        levels = [*reversed(path.parents), path]
        if start is not None:
            levels = [p for p in levels if start in p.parents]
        for level in levels:
            last = level == path
            if level in self.seen and not last:
                continue
            st = self._lstat(level)
            if st is None:
                return
            # No sticky exception for the lab's own directories: others could create what is
            # missing in them (a hook client not built yet) before the lab does.
            problem = _problem(st, sticky_ok=not self._inside(level) and not (last and strict_last))
            if problem:
                raise LabError(self._refusal(level, st, problem))
            if stat.S_ISLNK(st.st_mode):
                self._follow(level, strict=last and strict_last, depth=depth)
            self.seen.add(level)

    def _follow(self, link: Path, strict: bool, depth: int) -> None:
        target = Path(os.path.realpath(link))
        if depth or target == link:  # realpath leaves no symlink, unless in a loop or a race
            raise LabError(f"{link} is a symlink loop or changed while the lab checked it; "
                           "use a lab directory without one")
        self.check(target, strict_last=strict, depth=depth + 1)

    @staticmethod
    def _lstat(level: Path) -> os.stat_result | None:
        try:
            return os.lstat(level)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LabError(f"cannot check {level} ({exc.strerror}); use a lab directory you can reach "
                           "(--dir or $SLURM_IPU_LAB_DIR)") from None

    def _refusal(self, level: Path, st: os.stat_result, problem: str) -> str:
        """One line: the path, its owner and mode, what that allows, and the fix."""
        mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
        if problem == "owned":
            said = f"belongs to {_name(st.st_uid)}, {mode}, not to {_trusted()}"
        else:
            said = f"is writable by group or other (owner {_name(st.st_uid)}, {mode})"
        return (f"{level}{self._where(level)} {said}: another user could choose what the lab runs or signals as "
                f"{_name(os.geteuid(), with_uid=False)}; {self._fix(level, problem)}")

    def _where(self, level: Path) -> str:
        if level in self.labs:
            return ""
        if self._above(level):
            return f" (above the lab directory {self.lab})"
        if self._inside(level):
            return f" (in the lab directory {self.lab})"
        return f" (used by the lab in {self.lab})"

    def _fix(self, level: Path, problem: str) -> str:
        elsewhere = f"use a lab directory of your own (--dir or $SLURM_IPU_LAB_DIR), e.g. the default {own_dir()}"
        if problem == "writable":
            return f"chmod go-w {level}, or {elsewhere}"
        if level in self.labs or self._above(level):
            return elsewhere
        if self._inside(level):
            return f"remove it, and whatever else that user put in {self.lab}, then run the lab again"
        return f"reinstall it as {_trusted()} (make install)"


def _problem(st: os.stat_result, sticky_ok: bool) -> str | None:
    if st.st_uid not in (0, os.geteuid()):
        return "owned"
    if stat.S_ISLNK(st.st_mode):  # a symlink's own mode means nothing; its target is checked
        return None
    sticky_root_dir = st.st_uid == 0 and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_mode & 0o022 and not (sticky_ok and sticky_root_dir):
        return "writable"
    return None


def _name(uid: int, with_uid: bool = True) -> str:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
    return f"{name} (uid {uid})" if with_uid else name


def _trusted() -> str:
    me = os.geteuid()
    return "root" if me == 0 else f"root or {_name(me, with_uid=False)}"
