"""`slurm-ipu setup`: a node installed from the Debian packages, made to follow its site description.

The packages (`make deb`, docs/admin.md) ship what is the same on every site: the program
(`/usr/libexec/slurm-ipu/slurm-ipu-hook`), the slurm-ipu service's unit with defaults, and the site
description as a conffile. What the site description decides is written here, from it, each time
it changes (and by the package's postinst on every install and upgrade):

- /etc/slurm-ipu/slurm-ipu-hook.conf, the hook's settings (the package links it beside the hook);
- /etc/slurm-ipu/plugstack.conf, the SPANK plugin's line with the site's values (the admin links
  it into Slurm's plugstack.conf.d once);
- the state directory, owned by slurm.user (mode 0700);
- a drop-in for the unit with the site's SlurmUser, site description and stop timeout;
- with install.poprun, /usr/local/bin/poprun, a link to ipurun (removed again when it is off).

Nothing of Slurm's is written, nothing is started or restarted (the hook reads its settings at
every run; a changed drop-in is loaded by `systemctl daemon-reload`, which this runs, and takes
effect at the service's next restart, which the admin chooses).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from ..config import PACKAGED, Site
from ..errors import ConfigError
from ..fsutil import atomic_write, private_dir

# The unit's lines a site's description decides (templates/hooks/slurm-ipu.service.j2).
SITE_KEYS = ("User=", "Environment=", "TimeoutStopSec=")


def dropin(unit_text: str) -> str:
    """The drop-in for the packaged unit: the site's lines of the unit rendered for this site."""
    lines = [line for line in unit_text.splitlines() if line.startswith(SITE_KEYS)]
    return ("# Written by `slurm-ipu setup` from the site description: what it decides of the slurm-ipu service.\n"
            "[Service]\n" + "\n".join(lines) + "\n")


def setup(site: Site) -> list[str]:
    """Write what the site decides; returns the paths changed."""
    from . import fragments

    if not site.packaged:
        raise ConfigError(f"setup: {site.source} has install.prefix={site.install.prefix}: setup is for nodes "
                          f"installed from the Debian packages (install.prefix: {PACKAGED}); a `make install` takes "
                          "the site description as `make install SITE=...`")
    texts = fragments.texts(site)
    changed = [path for path, text in ((site.path("hook_conf"), texts["slurm-ipu-hook.conf"]),
                                       (site.path("plugstack"), texts["plugstack-ipu.conf"]),
                                       (site.path("unit_dropin"), dropin(texts["slurm-ipu.service"])))
               if _write(Path(path), text)]
    if _retire(Path(site.path("earlier_unit_dropin"))):
        changed.append(site.path("earlier_unit_dropin"))
    if _state_dir(site.state_dir, site.slurm.user):
        changed.append(site.state_dir)
    if _poprun(site.install.poprun, site.path("poprun"), site.path("ipurun")):
        changed.append(site.path("poprun"))
    units = {site.path("unit_dropin"), site.path("earlier_unit_dropin")}
    if units & set(changed) and Path("/run/systemd/system").is_dir() and shutil.which("systemctl"):
        import subprocess

        subprocess.run(["systemctl", "daemon-reload"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    return changed


def _write(path: Path, text: str) -> bool:
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text, 0o644)
    return True


def _retire(path: Path) -> bool:
    """The drop-in setup wrote for the unit's earlier name (slurm-ipu-reaper.service): the unit of
    this release is slurm-ipu.service, and its drop-in was just written."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    with contextlib.suppress(OSError):
        path.parent.rmdir()
    return True


def _poprun(wanted: bool, path: str, ipurun: str) -> bool:
    """install.poprun: PopRun's name for ipurun, a link made or removed here. A `poprun` there that
    is not ours (a Poplar SDK's) is never replaced: refused in one line."""
    link = Path(path)
    ours = link.is_symlink() and os.readlink(link) == ipurun
    if wanted and not ours:
        if link.exists() or link.is_symlink():
            raise ConfigError(f"setup: install.poprun is on, but {path} exists and is not slurm-ipu's (a Poplar SDK's "
                              "poprun?); remove it, or set install.poprun: false")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ipurun)
        return True
    if not wanted and ours:
        link.unlink()
        return True
    return False


def _state_dir(path: str, user: str) -> bool:
    """The hooks' state directory, 0700 and SlurmUser's (root's when that user does not exist yet:
    Slurm's packages create it; run setup again after). Never through a link, never one another
    user made first (fsutil.private_dir)."""
    import pwd

    try:
        entry = pwd.getpwnam(user)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        print(f"setup: user {user} (slurm.user) does not exist yet: {path} stays root's; run `slurm-ipu setup` "
              "again once Slurm is installed")
        uid = gid = 0
    return private_dir(path, uid, gid)


def main(site: Site) -> int:
    changed = setup(site)
    for path in changed:
        print(f"setup: {'removed' if path == site.path('earlier_unit_dropin') else 'wrote'} {path}")
    print(f"setup: {site.source} is what slurm-ipu-hook and the slurm-ipu service use"
          + ("" if changed else " (nothing changed)"))
    return 0
