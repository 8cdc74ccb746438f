"""make install / make uninstall's file work, staged under DESTDIR (the Makefile's venv and pip
steps run in the clean-install test)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurm_ipu import manpages
from slurm_ipu.deploy import install

GOLDEN = Path(__file__).parent / "golden"
PREFIX = "/opt/slurm-ipu"


@pytest.fixture
def stage(tmp_path):
    dest = tmp_path / "stage"
    dest.mkdir()
    (dest / PREFIX.lstrip("/") / "venv" / "bin").mkdir(parents=True)  # what the Makefile's venv step made
    plugin = tmp_path / "spank_ipu.so"
    plugin.write_bytes(b"\x7fELF...slurm-ipu-spank built-for-slurm 0x170b02\0...")
    return dest, plugin


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def run_install(dest: Path, plugin: Path, *extra: str) -> int:
    man = dest.parent / "man"  # what the Makefile's step before makes (slurm_ipu.manpages)
    man.mkdir(exist_ok=True)
    assert manpages.main([str(man)]) == 0
    return install.main(["install", "--prefix", PREFIX, "--destdir", str(dest), "--bindir", "/usr/local/bin",
                         "--plugin", str(plugin), "--manpages", str(man), *extra])


def run_uninstall(dest: Path) -> int:
    return install.main(["uninstall", "--prefix", PREFIX, "--destdir", str(dest)])


def test_install_places_every_file_and_uninstall_leaves_nothing(stage, capsys):
    dest, plugin = stage
    assert run_install(dest, plugin, "--site", str(GOLDEN / "site-pod64.yaml")) == 0
    hook = dest / "opt/slurm-ipu/libexec/slurm-ipu-hook"
    conf = hook.with_name("slurm-ipu-hook.conf")
    assert conf.read_text() == (GOLDEN / "pod64" / "slurm-ipu-hook.conf").read_text()
    assert os.access(hook, os.X_OK) and hook.read_bytes().startswith(b"\x7fELF")
    assert (dest / "etc/slurm-ipu/site.yaml").read_bytes() == (GOLDEN / "site-pod64.yaml").read_bytes()
    assert sorted(p.name for p in (dest / "etc/slurm-ipu").iterdir()) == ["site.yaml"]  # the one configuration file
    assert os.readlink(dest / "usr/local/bin/ipurun") == f"{PREFIX}/venv/bin/ipurun"
    assert (dest / "usr/lib/x86_64-linux-gnu/slurm-wlm/spank_ipu.so").read_bytes() == plugin.read_bytes()
    assert (dest / "etc/systemd/system/slurm-ipu.service").is_file()
    assert (dest / "var/lib/slurm-ipu").stat().st_mode & 0o777 == 0o700
    for page in ("slurm-ipu.1", "ipurun.1"):  # where man finds them for /usr/local/bin's commands
        assert (dest / "usr/local/share/man/man1" / page).read_text().startswith(".TH ")
    manifest = json.loads((dest / "opt/slurm-ipu/share/slurm-ipu/manifest.json").read_text())
    assert manifest["plugin_built_for"] == "23.11.2" and manifest["site"] == "/etc/slurm-ipu/site.yaml"
    assert run_uninstall(dest) == 0
    assert files_under(dest) == {"opt"}  # the venv's parent predates the install


def test_a_file_changed_since_install_is_left_and_named(stage, capsys):
    dest, plugin = stage
    run_install(dest, plugin, "--site", str(GOLDEN / "site-pod64.yaml"))
    (dest / "etc/slurm-ipu/site.yaml").write_text("# edited by hand\n")
    assert run_uninstall(dest) == 1
    out = capsys.readouterr().out
    assert "left /etc/slurm-ipu/site.yaml: changed since install" in out
    assert (dest / "etc/slurm-ipu/site.yaml").exists() and not (dest / "opt/slurm-ipu").exists()


def _earlier_install(dest: Path, config_text: str) -> None:
    """What an earlier release's install left: its hooks' config.yaml beside the site description,
    recorded in the manifest with its sha256."""
    import hashlib

    conf = dest / "etc/slurm-ipu/config.yaml"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(config_text)
    manifest = dest / "opt/slurm-ipu/share/slurm-ipu/manifest.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(config_text.encode()).hexdigest()
    manifest.write_text(json.dumps({"prefix": PREFIX, "config": "/etc/slurm-ipu/config.yaml",
                                    "site": "/etc/slurm-ipu/site.yaml",
                                    "entries": [{"path": "/etc", "kind": "mkdir", "sha256": None},
                                                {"path": "/etc/slurm-ipu", "kind": "mkdir", "sha256": None},
                                                {"path": "/etc/slurm-ipu/config.yaml", "kind": "file",
                                                 "sha256": digest}]}))


@pytest.mark.parametrize("edited", [False, True])
def test_upgrading_from_two_files_leaves_one(stage, capsys, edited):
    """docs/admin.md, Upgrading: the earlier release's config.yaml goes as that install wrote it; an
    edited one is left, named, and read by nothing (uninstall no longer owns it)."""
    dest, plugin = stage
    _earlier_install(dest, "version: 1\nvipu: {host: v}\n")
    if edited:
        (dest / "etc/slurm-ipu/config.yaml").write_text("version: 1\nvipu: {host: edited}\n")
    assert run_install(dest, plugin, "--site", str(GOLDEN / "site-pod64.yaml")) == 0
    out = capsys.readouterr().out
    conf = dest / "etc/slurm-ipu/config.yaml"
    if edited:
        assert "install: left /etc/slurm-ipu/config.yaml: an earlier release's hooks config, read by nothing now " \
               "(changed since install: compare it with the site description, then delete it)" in out
        assert conf.exists()
    else:
        assert "install: removed /etc/slurm-ipu/config.yaml: an earlier release's hooks config" in out
        assert not conf.exists()
    manifest = json.loads((dest / "opt/slurm-ipu/share/slurm-ipu/manifest.json").read_text())
    assert "config" not in manifest and all(e["path"] != str(conf)[len(str(dest)):] for e in manifest["entries"])
    assert run_uninstall(dest) == 0
    assert files_under(dest) == ({"opt", "etc", "etc/slurm-ipu", "etc/slurm-ipu/config.yaml"} if edited else {"opt"})


def test_a_state_dir_with_a_live_record_is_kept(stage, capsys):
    dest, plugin = stage
    run_install(dest, plugin, "--site", str(GOLDEN / "site-pod64.yaml"))
    (dest / "var/lib/slurm-ipu/created").mkdir()
    (dest / "var/lib/slurm-ipu/created/slurm_7.json").write_text("{}")
    assert run_uninstall(dest) == 1
    assert "left /var/lib/slurm-ipu: it records 1 partition(s) still to remove" in capsys.readouterr().out
    assert (dest / "var/lib/slurm-ipu/created/slurm_7.json").exists()


def test_a_foreign_command_in_bindir_refuses_before_writing_anything(stage, capsys):
    dest, plugin = stage
    (dest / "usr/local/bin").mkdir(parents=True)
    (dest / "usr/local/bin/ipurun").write_text("#!/bin/sh\n")
    before = files_under(dest)
    assert run_install(dest, plugin, "--site", str(GOLDEN / "site-pod64.yaml")) == 2
    err = capsys.readouterr().err.strip()
    assert err == "slurm-ipu: install: /usr/local/bin/ipurun exists and is not slurm-ipu's; remove it or set BINDIR"
    assert files_under(dest) == before


def test_prefix_must_match_the_site(stage, tmp_path, capsys):
    dest, plugin = stage
    site = tmp_path / "site.yaml"
    site.write_text((GOLDEN / "site-pod64.yaml").read_text() + "install:\n  prefix: /srv/ipu\n")
    before = files_under(dest)
    assert run_install(dest, plugin, "--site", str(site)) == 2
    err = capsys.readouterr().err
    assert "install.prefix=/srv/ipu, but PREFIX=/opt/slurm-ipu" in err and "Traceback" not in err
    assert files_under(dest) == before


def test_uninstall_without_an_install_says_where_it_looked(tmp_path, capsys):
    assert install.main(["uninstall", "--prefix", "/opt/none", "--destdir", str(tmp_path)]) == 2
    assert "no slurm-ipu install at /opt/none" in capsys.readouterr().err


def test_a_staged_venv_names_its_final_path(stage):
    dest, plugin = stage
    script = dest / "opt/slurm-ipu/venv/bin/ipurun"
    script.write_text(f"#!{dest}/opt/slurm-ipu/venv/bin/python\nimport sys\n")
    run_install(dest, plugin)
    assert script.read_text().startswith("#!/opt/slurm-ipu/venv/bin/python\n")


def test_built_for_reads_the_release_a_plugin_was_compiled_against(tmp_path):
    so = tmp_path / "a.so"
    so.write_bytes(b"junk slurm-ipu-spank built-for-slurm 0x160508\0junk")
    assert install.built_for(so) == "22.05.8"
    so.write_bytes(b"no marker")
    assert install.built_for(so) is None


def test_a_reinstall_without_the_site_still_uninstalls_the_site_s_files(stage):
    dest, plugin = stage
    run_install(dest, plugin, "--site", str(GOLDEN / "site-pod64.yaml"))
    assert run_install(dest, plugin) == 0  # an upgrade run without SITE
    assert run_uninstall(dest) == 0
    assert files_under(dest) == {"opt"}


CONFIG = """Configuration data as of 2026-11-24T00:00:00
PlugStackConfig         = {plugstack}
PrologSlurmctld         = {prolog}
EpilogSlurmctld         = {prolog}
"""


@pytest.mark.parametrize("prolog,plugstack_line,words", [
    ("/opt/slurm-ipu/libexec/slurm-ipu-hook", "", "the running slurmctld has PrologSlurmctld=/opt/slurm-ipu/libexec/"
     "slurm-ipu-hook: un-merge slurm-ipu.conf and restart slurmctld first"),
    ("/etc/slurm/site-prolog.sh", "required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_ipu.so vipu_host=v",
     "loads the SPANK plugin: `required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_ipu.so vipu_host=v`"),
])
def test_uninstall_refuses_while_the_running_slurm_names_what_it_removes(tmp_path, mocker, capsys, prolog,
                                                                        plugstack_line, words):
    """An uninstall in the documented order never breaks submission: while the
    running slurmctld still names the wrapper or the plugin, it refuses in one line; FORCE=1 goes."""
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text(plugstack_line + "\n")
    doc = {"prefix": PREFIX, "entries": [
        {"path": f"{PREFIX}/libexec/slurm-ipu-hook", "kind": "file", "sha256": "0"},
        {"path": "/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_ipu.so", "kind": "file", "sha256": "0"}]}
    show = mocker.Mock(returncode=0, stdout=CONFIG.format(plugstack=plugstack, prolog=prolog))
    mocker.patch("subprocess.run", return_value=show)
    with pytest.raises(install.ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        install._refuse_if_slurm_uses(doc)


def test_uninstall_goes_on_when_slurmctld_does_not_answer(mocker):
    mocker.patch("subprocess.run", return_value=mocker.Mock(returncode=1, stdout="", stderr="down"))
    install._refuse_if_slurm_uses({"prefix": PREFIX, "entries": []})  # nothing live to break


def test_install_poprun_links_poprun_to_ipurun_and_uninstall_removes_it(stage, tmp_path):
    """install.poprun: PopRun's name for ipurun in BINDIR; off by default."""
    dest, plugin = stage
    site = tmp_path / "site.yaml"
    site.write_text((GOLDEN / "site-pod64.yaml").read_text() + "install:\n  poprun: true\n")
    assert run_install(dest, plugin, "--site", str(site)) == 0
    link = dest / "usr/local/bin/poprun"
    assert os.readlink(link) == f"{PREFIX}/venv/bin/ipurun"
    assert run_uninstall(dest) == 0 and not link.is_symlink()


def test_the_man_pages_say_what_help_says():
    """slurm-ipu(1) and ipurun(1) are the commands' own help: every command and
    option is on its page, and groff reads the pages without a warning."""
    import shutil
    import subprocess

    from slurm_ipu.cli import build_parser
    from slurm_ipu.launcher.options import OPTIONS
    from slurm_ipu.manpages import pages

    made = pages()
    commands = next(a for a in build_parser()._actions if a.dest == "cmd").choices
    assert all(f".SH SLURM-IPU {cmd.upper()}" in made["slurm-ipu.1"] for cmd in commands)
    assert all(row[0] in made["ipurun.1"] for row in OPTIONS)
    if shutil.which("groff"):
        for text in made.values():
            out = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=text, capture_output=True,
                                 text=True, timeout=30)
            assert (out.returncode, out.stderr) == (0, ""), out.stderr


@pytest.mark.parametrize("edited", [False, True])
def test_upgrading_from_the_reaper_unit_makes_its_name_an_alias(stage, capsys, edited):
    """An earlier release installed the service as slurm-ipu-reaper.service (enabled under that
    name at sites): as that install wrote it, it becomes a link to slurm-ipu.service, systemd's
    alias, which uninstall removes; an edited one is left and named (it would run a second service)."""
    import hashlib

    dest, plugin = stage
    old = dest / "etc/systemd/system/slurm-ipu-reaper.service"
    old.parent.mkdir(parents=True)
    old.write_text("[Service]\nExecStart=/opt/slurm-ipu/venv/bin/python -m slurm_ipu.cli reap --watch\n")
    manifest = dest / "opt/slurm-ipu/share/slurm-ipu/manifest.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"prefix": PREFIX, "entries": [
        {"path": "/etc/systemd/system/slurm-ipu-reaper.service", "kind": "file",
         "sha256": hashlib.sha256(old.read_bytes()).hexdigest()}]}))
    if edited:
        old.write_text(old.read_text() + "Nice=5\n")
    assert run_install(dest, plugin, "--site", str(GOLDEN / "site-pod64.yaml")) == 0
    out = capsys.readouterr().out
    if edited:
        assert not old.is_symlink() and "Nice=5" in old.read_text()
        assert "install: left /etc/systemd/system/slurm-ipu-reaper.service: an earlier release's unit, changed " \
               "since install; it runs the service a second time beside slurm-ipu.service: disable and delete it" in out
    else:
        assert os.readlink(old) == "slurm-ipu.service"
        assert "ExecStart=/opt/slurm-ipu/venv/bin/python -m slurm_ipu.cli service" in old.read_text()
    assert run_uninstall(dest) == 0
    ours = {"opt", "etc", "etc/systemd", "etc/systemd/system"}  # the directories were there before
    assert files_under(dest) == (ours | {"etc/systemd/system/slurm-ipu-reaper.service"} if edited else ours)
