"""`make install` / `make uninstall`: the files outside the package's own virtual environment.

The Makefile makes PREFIX/venv on the system Python and pip-installs the package into it; this
module, run by that venv's Python, puts the rest in place: `slurm-ipu` and `ipurun` on the
default PATH (symlinks into the venv, so every user runs the same install, none of root's
files), the SPANK plugin in Slurm's plugin directory, and, given a site description: the site
description itself (the one configuration file, at install.site), slurm-ipu-hook (the controller
hooks, built) and its rendered settings, the slurm-ipu service's unit and the state directory (the
fragments the admin merges come from `slurm-ipu render`, merged with the site's own files).

Every path written outside PREFIX is listed, with its sha256, in PREFIX/share/slurm-ipu/manifest;
`uninstall` removes exactly those (a file changed since, it leaves and names) and then PREFIX.
DESTDIR stages the whole tree for a package build: paths are written under it, named without it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from ..config import MANIFEST, PACKAGED
from ..errors import ConfigError
from ..fsutil import atomic_write, private_dir

COMMANDS = ("slurm-ipu", "ipurun")  # vipu-emu stays in the venv: a lab tool, not a site's


UNIT = "slurm-ipu.service"  # the service's unit (templates/hooks/slurm-ipu.service.j2)
EARLIER_UNIT = "slurm-ipu-reaper.service"  # its name in earlier releases, kept as its alias


class Installer:
    def __init__(self, prefix: str, destdir: str = "", dry_run: bool = False):
        if not prefix.startswith("/"):
            raise ConfigError(f"install: PREFIX={prefix!r} is not an absolute path; use e.g. PREFIX=/opt/slurm-ipu")
        self.prefix = prefix.rstrip("/") or "/"
        if self.prefix == PACKAGED:
            raise ConfigError(f"install: PREFIX={PACKAGED} is the Debian packages' layout (`make deb`, docs/admin.md); "
                              "install those, or give make install another PREFIX, e.g. /opt/slurm-ipu")
        self.destdir = destdir.rstrip("/")
        self.dry_run = dry_run
        self.entries: list[dict] = []
        self.dropped: set[str] = set()  # the earlier install's files this one retired

    def staged(self, path: str) -> Path:
        """Where a path is written: under DESTDIR when staging."""
        return Path(self.destdir + path) if self.destdir else Path(path)

    def _mkdirs(self, path: str) -> None:
        """Create the missing parents of path, recording each (uninstall removes them if empty)."""
        missing = []
        parent = Path(path).parent
        while not self.staged(str(parent)).exists() and parent != parent.parent:
            missing.append(parent)
            parent = parent.parent
        for d in reversed(missing):
            if not self.dry_run:
                self.staged(str(d)).mkdir(mode=0o755)
            self.entries.append({"path": str(d), "kind": "mkdir", "sha256": None})

    def _record(self, path: str, kind: str, digest: str | None = None) -> None:
        self.entries.append({"path": path, "kind": kind, "sha256": digest})
        print(f"install: {kind:7} {path}")

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = self.staged(path)
        self._mkdirs(path)
        if not self.dry_run:
            atomic_write(target, data, mode)
        self._record(path, "file", hashlib.sha256(data).hexdigest())

    def check_link(self, path: str) -> None:
        target = self.staged(path)
        if target.is_symlink() or target.exists():
            if not target.is_symlink() or not os.readlink(target).startswith(self.prefix + "/"):
                raise ConfigError(f"install: {path} exists and is not slurm-ipu's; remove it or set BINDIR")

    def link(self, path: str, to: str) -> None:
        target = self.staged(path)
        self._mkdirs(path)
        if not self.dry_run:
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(to)
            os.replace(tmp, target)
        self._record(path, "link")

    def directory(self, path: str, owner: str | None = None, mode: int = 0o700) -> None:
        target = self.staged(path)
        self._mkdirs(path)
        if not self.dry_run:
            if owner and not self.destdir:
                import pwd

                entry = pwd.getpwnam(owner)
                private_dir(target, entry.pw_uid, entry.pw_gid, mode)
            else:
                private_dir(target, os.getuid(), os.getgid(), mode)
        self._record(path, "dir")

    def earlier(self) -> dict:
        """The manifest of the install this one replaces ({} for none)."""
        try:
            doc = json.loads(self.staged(f"{self.prefix}/{MANIFEST}").read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def retire_earlier_config(self) -> None:
        """Upgrading: earlier releases installed a second file, the hooks' config.yaml rendered from
        the site description; the site description is the one file now. Remove it if it is as that
        install wrote it; a file edited since is left and named, as uninstall does."""
        doc = self.earlier()
        path = doc.get("config")
        entry = next((e for e in doc.get("entries", []) if e.get("path") == path), None)
        if not path or entry is None or any(e["path"] == path for e in self.entries):
            return
        target = self.staged(path)
        same = _as_written(target, entry, gone=None)
        if same and not self.dry_run:
            target.unlink()
        edited = " (changed since install: compare it with the site description, then delete it)"
        if same is not None:
            print(f"install: {'removed' if same else 'left'} {path}: an earlier release's hooks config, read by "
                  f"nothing now{'' if same else edited}")
        self.dropped.add(path)

    def retire_unmerged_fragments(self) -> None:
        """Upgrading: earlier releases kept unmerged copies of the fragments in PREFIX/share/slurm-ipu/site/
        (copied into a site, they drop its own GRES and licences). Removed when as that install wrote them."""
        old = f"{self.prefix}/share/slurm-ipu/site/"
        for entry in self.earlier().get("entries", []):
            path = entry.get("path", "")
            if not path.startswith(old) or entry.get("kind") != "file":
                continue
            target = self.staged(path)
            same = _as_written(target, entry, gone=True)
            if same and not self.dry_run:
                target.unlink(missing_ok=True)
            self.dropped.add(path)
        with contextlib.suppress(OSError):
            self.staged(old).rmdir()

    def alias_earlier_unit(self, unit: str) -> None:
        """Upgrading from a release whose unit was slurm-ipu-reaper.service: that file, as that
        install wrote it, becomes a link to the new unit (systemd's alias), so the link that enabled
        it and an admin's `systemctl restart slurm-ipu-reaper` name the one service still. Edited
        since, it is left and named (it would run a second service)."""
        old = str(Path(unit).with_name(EARLIER_UNIT))
        entry = next((e for e in self.earlier().get("entries", []) if e.get("path") == old), None)
        if entry is None or entry.get("kind") != "file":
            return
        if not _as_written(self.staged(old), entry, gone=True):
            print(f"install: left {old}: an earlier release's unit, changed since install; it runs the service a "
                  f"second time beside {Path(unit).name}: disable and delete it")
            self.dropped.add(old)
            return
        self.link(old, Path(unit).name)

    def write_manifest(self, extra: dict) -> None:
        """The new entries, after the earlier install's that this one did not rewrite (an install
        with a site, then one without, still uninstalls the site's files)."""
        target = self.staged(f"{self.prefix}/{MANIFEST}")
        try:
            earlier = json.loads(target.read_text())["entries"]
        except (OSError, ValueError, KeyError):
            earlier = []
        now = {e["path"] for e in self.entries} | self.dropped
        kept = [e for e in earlier if e["path"] not in now]
        doc = {"prefix": self.prefix, "entries": kept + self.entries, **extra}
        if not self.dry_run:
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, (json.dumps(doc, indent=1) + "\n").encode(), 0o644)


def _as_written(target: Path, entry: dict, gone: bool | None) -> bool | None:
    """Whether an earlier install's file is as that install wrote it (its manifest's digest);
    `gone` when it cannot be read (already removed)."""
    try:
        return hashlib.sha256(target.read_bytes()).hexdigest() == entry.get("sha256")
    except OSError:
        return gone


def relocate_venv(prefix: str, destdir: str) -> None:
    """A venv names its own path in its scripts: staged under DESTDIR, name it without."""
    if not destdir:
        return
    bindir = Path(destdir + prefix) / "venv" / "bin"
    old, new = (destdir + prefix).encode(), prefix.encode()
    for path in bindir.iterdir():
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old in data and b"\0" not in data[:1024]:
            atomic_write(path, data.replace(old, new), path.stat().st_mode & 0o7777)


def built_for(plugin: Path) -> str | None:
    """The Slurm release a spank_ipu.so was compiled against (a string spank_ipu.c embeds: a
    plugin cannot be loaded outside Slurm to ask it)."""
    try:
        data = plugin.read_bytes()
    except OSError:
        return None
    mark = b"slurm-ipu-spank built-for-slurm "
    at = data.find(mark)
    if at < 0:
        return None
    end = data.find(b"\0", at)
    try:
        number = int(data[at + len(mark):end].decode(), 16)  # SLURM_VERSION_NUMBER, 0xMMmmuu
    except ValueError:
        return None
    return f"{number >> 16}.{(number >> 8) & 0xff:02d}.{number & 0xff}"


def _check(args, prefix: str):
    """Everything that can refuse the install, before anything is written."""
    site = None
    if args.site:
        from ..config import load, refuse_repeated_keys

        site = load(args.site, twins=False)  # the file installed is the file rendered
        refuse_repeated_keys(site)
        if site.install.prefix != prefix:
            raise ConfigError(f"install: {args.site} has install.prefix={site.install.prefix}, but PREFIX="
                              f"{prefix}; make them equal (the rendered files name that prefix)")
        args.plugin_dir = site.slurm.plugin_dir
    if not args.plugin_dir:  # beside the node's Slurm's own plugins: Debian's, or a site-built one's
        from ..slurm.installation import find

        args.plugin_dir = find(args.slurm_prefix).plugin_dir
    if args.spank_src:
        args.plugin = _build_spank(Path(args.spank_src), args.slurm_prefix)
    if args.plugin and not Path(args.plugin).is_file():
        raise ConfigError(f"install: SPANK plugin {args.plugin} not built; run `make -C spank` (needs libslurm-dev)")
    return site


def _build_spank(source: Path, slurm_prefix: str) -> str:
    """spank_ipu.so built against the headers of the Slurm this node runs (found, never installed:
    slurm/installation.py), its release checked in the result."""
    import subprocess

    from ..slurm.installation import find
    from ..slurm.releases import release

    node = find(slurm_prefix)
    cflags = " ".join(node.cflags)
    proc = subprocess.run(["make", "-s", "-B", "-C", str(source), f"SLURM_CFLAGS={cflags}"], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    plugin = source / "spank_ipu.so"
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines() or ["no message"]
        raise ConfigError(f"install: building the SPANK plugin against Slurm {node.version} ({node.include}) "
                          f"failed: {said[-1][:200]}")
    built = built_for(plugin)
    if built is None or release(built) != release(node.version):
        raise ConfigError(f"install: {plugin} says Slurm {built}, not {node.version}: {node.include} is not what the "
                          "compiler read; set SLURM_PREFIX to the Slurm this node runs")
    print(f"install: SPANK plugin built against Slurm {built} ({node.include}/slurm), which {node.program} runs")
    return str(plugin)


def install(args) -> int:
    inst = Installer(args.prefix, args.destdir, args.dry_run)
    site = _check(args, inst.prefix)
    links = {f"{args.bindir}/{name}": f"{inst.prefix}/venv/bin/{name}" for name in COMMANDS}
    if site is not None and site.install.poprun:  # PopRun's name for ipurun, when the site asks
        links[f"{args.bindir}/poprun"] = f"{inst.prefix}/venv/bin/ipurun"
    for path in links:
        inst.check_link(path)
    for path, to in links.items():
        inst.link(path, to)
    if args.manpages:
        _install_manpages(inst, args.bindir, Path(args.manpages))
    extra: dict = {"bindir": args.bindir}
    if site is not None:
        _install_site(inst, site, args.site)
        extra["site"] = site.path("site")  # the commands of this install read it (config.installed)
        inst.retire_earlier_config()
    inst.retire_unmerged_fragments()
    if args.plugin:
        so = Path(args.plugin)
        inst.file(f"{args.plugin_dir}/spank_ipu.so", so.read_bytes(), 0o755)
        extra["plugin_built_for"] = built_for(so)
    relocate_venv(inst.prefix, inst.destdir)
    inst.write_manifest(extra)
    if site is None:
        print("install: no SITE given: install the site description, the controller hooks and the unit with "
              "`make install SITE=/path/to/site.yaml` (docs/admin.md)")
    return 0


def _install_manpages(inst: Installer, bindir: str, made: Path) -> None:
    """slurm-ipu(1) and ipurun(1) (made by slurm_ipu.manpages) where man looks for the commands on
    BINDIR."""
    where = f"{Path(bindir).parent}/share/man/man1"
    for page in sorted(made.glob("*.1")):
        inst.file(f"{where}/{page.name}", page.read_bytes(), 0o644)


def _install_site(inst: Installer, site, source: str) -> None:
    from . import fragments

    # The fragments an admin merges come from `slurm-ipu render`, merged with the site's own files;
    # unmerged copies under PREFIX/share would be one `cp` from dropping a site's GRES.
    texts = fragments.texts(site)
    inst.file(site.path("hook_conf"), texts["slurm-ipu-hook.conf"].encode(), 0o644)
    inst.file(site.path("hook"), _hook(), 0o755)
    inst.file(site.path("site"), Path(source).read_bytes(), 0o644)
    inst.file(site.path("unit"), texts["slurm-ipu.service"].encode())
    inst.alias_earlier_unit(site.path("unit"))
    user = site.slurm.user
    inst.directory(site.state_dir, owner=user if _user_exists(user) else None)


def _hook() -> bytes:
    """slurm-ipu-hook, the controller hooks (spank/hook/hook.c), built here like the SPANK
    plugin: plain C, gcc only."""
    import tempfile

    from ..hooks.transport import build_hook

    with tempfile.TemporaryDirectory() as tmp:
        return build_hook(Path(tmp) / "slurm-ipu-hook").read_bytes()


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def uninstall(args) -> int:
    prefix = args.prefix.rstrip("/")
    root = Path(args.destdir + prefix) if args.destdir else Path(prefix)
    manifest = root / MANIFEST
    try:
        doc = json.loads(manifest.read_text())
    except FileNotFoundError:
        raise ConfigError(f"uninstall: no slurm-ipu install at {prefix} ({manifest} missing); "
                          "set PREFIX to where `make install` put it") from None
    inst = Installer(prefix, args.destdir)
    if not args.destdir and not args.force:
        _refuse_if_slurm_uses(doc)
    if not args.destdir:
        _stop_service(doc)
        _forget_snapshot(doc)
    kept = 0
    for entry in reversed(doc["entries"]):
        path = inst.staged(entry["path"])
        if entry["path"].startswith(prefix + "/"):
            continue  # goes with PREFIX below
        kept += _remove(path, entry)
    if not args.destdir and any(e["path"].endswith("/spank_ipu.so") for e in doc["entries"]):
        _remove_job_caches()
    shutil.rmtree(root, ignore_errors=False)
    print(f"uninstall: removed {prefix}")
    return 1 if kept else 0


# What the plugin's job prolog makes on a node (spank/cache.c): launcher/task.py's JOB_CACHE_ROOT,
# which this side may not import (deploy is below the launcher); test_constants holds them equal.
JOB_CACHE_ROOT = "/var/cache/slurm-ipu"


def _remove_job_caches() -> None:
    """ipurun's per-job caches the plugin's job prolog made on this node: root's own tree,
    removed without following a link in it, as the package's purge does."""
    if os.path.isdir(JOB_CACHE_ROOT) and not os.path.islink(JOB_CACHE_ROOT):
        shutil.rmtree(JOB_CACHE_ROOT)
        print(f"uninstall: removed {JOB_CACHE_ROOT}")


def _refuse_if_slurm_uses(doc: dict) -> None:
    """Uninstalling what the running Slurm still names is an outage: every submission fails on a
    missing SPANK plugin, every job start on a missing PrologSlurmctld."""
    ours = [e["path"] for e in doc["entries"] if e["kind"] == "file" and
            e["path"].endswith(("/slurm-ipu-hook", "/spank_ipu.so"))]
    refuse_if_slurm_uses(ours, _site_of(doc), "make uninstall FORCE=1")


def refuse_if_slurm_uses(ours: list[str], site, force: str) -> None:
    """The running slurmctld's configuration (`scontrol show config`) and the plugstack files it
    names are read for `ours`; a slurmctld that does not answer names nothing (the lab, down)."""
    from ..errors import SlurmIpuError
    from ..slurm.commands import SlurmCli
    from ..slurm.conf import plugstack_lines

    cli = SlurmCli.of_site(site) if site is not None else SlurmCli(None, timeout=15.0)
    try:
        config = cli.show_config()
    except SlurmIpuError:
        return
    for key in ("PrologSlurmctld", "EpilogSlurmctld"):
        named = [p for p in ours if p in (config.get(key) or "").split(",")]
        if named:
            raise ConfigError(f"uninstall: the running slurmctld has {key}={named[0]}: un-merge slurm-ipu.conf and "
                              f"restart slurmctld first (docs/admin.md, Uninstall), or {force}")
    plugstack = config.get("PlugStackConfig") or ""
    plugins = [p for p in ours if p.endswith("/spank_ipu.so")]
    for line in plugstack_lines(plugstack) if plugstack else []:
        if any(p in line.split() for p in plugins):
            raise ConfigError(f"uninstall: {plugstack} (with its includes) loads the SPANK plugin: `{line}`; remove "
                              f"that line on every node first (docs/admin.md, Uninstall), or {force}")


def _forget_snapshot(doc: dict) -> None:
    """`slurm-ipu snapshot`'s record of the site's own Slurm (beside the site description): the
    un-merge is done by now, and nothing of slurm-ipu's stays."""
    site = _site_of(doc)
    if site is not None and Path(site.path("snapshot")).is_file():
        Path(site.path("snapshot")).unlink()
        print(f"uninstall: removed {site.path('snapshot')}")


def _site_of(doc: dict):
    from ..config import load

    try:
        return load(doc["site"], twins=False) if doc.get("site") else None
    except ConfigError:
        return None


def _stop_service(doc: dict) -> None:
    """The slurm-ipu service runs from the venv about to go: stop it first (systemd where its unit is
    installed, else its pid from the lock it holds), so it cannot re-create the state directory
    with its last log line after the uninstall removed it."""
    import subprocess

    units = [Path(e["path"]).name for e in doc["entries"] if Path(e["path"]).name in (UNIT, EARLIER_UNIT)]
    if units and shutil.which("systemctl") and Path("/run/systemd/system").is_dir():
        subprocess.run(["systemctl", "disable", "--now", *units], capture_output=True, timeout=120)
        return
    site = _site_of(doc)
    if site is None:
        return
    from ..fsutil import pid_alive, poll
    from ..hooks import remover

    try:
        who = remover.holder(site.state_dir)
    except OSError:
        return
    if not remover.is_service(who):
        return
    pid = who[0]
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        if not any(word in cmdline.read_bytes() for word in (b"service", b"reap")):  # no longer the service's
            return
        os.kill(pid, 15)
    except OSError:
        return
    # it finishes the prologs it runs first (bounded by their deadline)
    poll(lambda: not pid_alive(pid), site.prolog.deadline + site.epilog.deadline + 10)
    print(f"uninstall: stopped the slurm-ipu service (pid {pid})")


def _remove(path: Path, entry: dict) -> int:
    """Remove one installed path if it is still what install wrote; 1 if left in place."""
    kind = entry["kind"]
    if kind == "mkdir":  # a parent install created: goes if nothing else lives there now
        try:
            path.rmdir()
        except OSError:
            pass
        return 0
    if kind == "link":
        if path.is_symlink():
            path.unlink()
            print(f"uninstall: removed {entry['path']}")
        return 0
    if kind == "dir":
        return _remove_state_dir(path, entry["path"])
    if not path.exists():
        return 0
    if hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
        print(f"uninstall: left {entry['path']}: changed since install; remove it yourself if unneeded")
        return 1
    path.unlink()
    print(f"uninstall: removed {entry['path']}")
    return 0


def _remove_state_dir(path: Path, shown: str) -> int:
    """The state directory goes only when it records nothing live: a creation record or a queued
    removal is a V-IPU partition someone must still remove."""
    if not path.exists():
        return 0
    from ..hooks.journal import Journal
    from ..hooks.ledger import Ledger

    live = [p for where in (Ledger(path).dir, Journal(path).dir) for p in where.glob("*.json")]
    if live:
        print(f"uninstall: left {shown}: it records {len(live)} partition(s) still to remove; "
              "run `slurm-ipu reap` first")
        return 1
    shutil.rmtree(path)
    print(f"uninstall: removed {shown}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slurm-ipu-install", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    i = sub.add_parser("install")
    i.add_argument("--prefix", required=True)
    i.add_argument("--destdir", default="")
    i.add_argument("--bindir", default="/usr/local/bin")
    i.add_argument("--site")
    i.add_argument("--plugin", help="the built spank_ipu.so")
    i.add_argument("--manpages", help="a directory of man pages made by `python -m slurm_ipu.manpages DIR`")
    i.add_argument("--spank-src", help="build spank_ipu.so here, against the node's Slurm, and install it")
    i.add_argument("--slurm-prefix", default="", help="where the node's Slurm is installed (default: found from "
                   "its running daemons, else PATH)")
    i.add_argument("--plugin-dir", default="", help="where spank_ipu.so goes (default: the site description's "
                   "slurm.plugin_dir, else beside the node's Slurm's own plugins)")
    i.add_argument("--dry-run", action="store_true")
    # The Debian packages' prerm: removing what the running slurmctld names fails every job start.
    r = sub.add_parser("in-use", help="exit 2 with one line if the running slurmctld names these files")
    r.add_argument("paths", nargs="+")
    r.add_argument("--force-hint", default="SLURM_IPU_FORCE_REMOVE=1")
    u = sub.add_parser("uninstall")
    u.add_argument("--prefix", required=True)
    u.add_argument("--destdir", default="")
    u.add_argument("--force", action="store_true", help="uninstall even while the running Slurm names our files")
    return p


def main(argv: list[str] | None = None) -> int:
    from ..cli_common import run_main

    args = parser().parse_args(argv)
    actions = {"install": install, "uninstall": uninstall, "in-use": in_use}
    return run_main(lambda: actions[args.action](args), debug=False, program="slurm-ipu")


def in_use(args) -> int:
    from ..config import load

    try:
        site = load(twins=False)
    except ConfigError:
        site = None  # no description yet: Slurm's own default configuration is asked
    refuse_if_slurm_uses(args.paths, site, args.force_hint)
    return 0


if __name__ == "__main__":
    sys.exit(main())
