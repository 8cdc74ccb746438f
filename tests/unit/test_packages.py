"""The Debian packages' layout (install.prefix /usr), `slurm-ipu setup` that writes what a site
description decides on a packaged node, and what the packages' maintainer scripts assume of the
Python side (templates/debian). The packages themselves are built and installed by
tests/install/deb_check.sh."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import example, fragments, install, packaging, setup
from slurm_ipu.errors import ConfigError
from slurm_ipu.hooks import journal, ledger, transport

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden")
DEBIAN = ROOT / "templates" / "debian"


def packaged_site(tmp_path: Path, **changes) -> config.Site:
    text = example.packaged_yaml()
    text = text.replace("state_dir: /var/lib/slurm-ipu", f"state_dir: {tmp_path / 'state'}")
    for key, value in changes.items():
        text = re.sub(rf"^(  {key}:) .*$", rf"\1 {value}", text, flags=re.M)
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return config.load(str(path), twins=False)


@pytest.fixture
def etc(tmp_path, monkeypatch):
    """PACKAGED_PATHS under tmp_path: setup writes where the packages' files would be."""
    paths = {k: str(tmp_path / "root" / v.lstrip("/")) for k, v in config.PACKAGED_PATHS.items()}
    monkeypatch.setattr(config.site, "PACKAGED_PATHS", paths)
    return paths


def test_the_packaged_site_names_debian_s_python_and_the_packages_paths(tmp_path):
    site = packaged_site(tmp_path)
    assert site.packaged and site.install.prefix == "/usr"
    assert site.python == "/usr/bin/python3"
    assert site.path("hook") == "/usr/libexec/slurm-ipu/slurm-ipu-hook"
    assert site.path("hook_conf") == "/etc/slurm-ipu/slurm-ipu-hook.conf"
    texts = fragments.texts(site)
    assert "python=/usr/bin/python3\n" in texts["slurm-ipu-hook.conf"]
    assert "ExecStart=/usr/bin/python3 -m slurm_ipu.cli service" in texts["slurm-ipu.service"]
    assert "/venv/" not in "".join(texts.values())


def test_a_make_install_site_keeps_its_prefix_paths(tmp_path):
    site = config.load(str(ROOT / "etc" / "site-pod128.yaml"), twins=False)
    assert not site.packaged
    assert site.python == "/opt/slurm-ipu/venv/bin/python"
    assert site.path("hook") == "/opt/slurm-ipu/libexec/slurm-ipu-hook"


def test_make_install_refuses_the_packages_prefix(tmp_path, capsys):
    assert install.main(["install", "--prefix", "/usr", "--destdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "PREFIX=/usr is the Debian packages' layout" in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_setup_writes_what_the_site_decides_and_only_when_it_changes(tmp_path, etc, capsys):
    site = packaged_site(tmp_path, user="root")
    changed = setup.setup(site)
    texts = fragments.texts(site)
    assert Path(etc["hook_conf"]).read_text() == texts["slurm-ipu-hook.conf"]
    assert Path(etc["plugstack"]).read_text() == texts["plugstack-ipu.conf"]
    dropin = Path(etc["unit_dropin"]).read_text()
    assert "[Service]\nUser=root\nEnvironment=SLURM_IPU_SITE=" in dropin and "TimeoutStopSec=" in dropin
    assert "ExecStart" not in dropin  # the packaged unit's own, never overridden
    state = tmp_path / "state"
    assert state.is_dir() and (state.stat().st_mode & 0o777) == 0o700
    assert set(changed) == {etc["hook_conf"], etc["plugstack"], etc["unit_dropin"], str(state)}
    assert setup.setup(site) == []  # run again: nothing to write


def test_setup_retires_the_drop_in_of_the_unit_s_earlier_name(tmp_path, etc, capsys):
    """A node upgraded from a release whose unit was slurm-ipu-reaper.service: its drop-in (and the
    directory, when empty) goes; the site's lines are in slurm-ipu.service's drop-in."""
    old = Path(etc["earlier_unit_dropin"])
    old.parent.mkdir(parents=True)
    old.write_text("[Service]\nUser=slurm\n")
    site = packaged_site(tmp_path, user="root")
    assert setup.main(site) == 0
    assert not old.parent.exists()
    assert "User=root\n" in Path(etc["unit_dropin"]).read_text()
    assert f"setup: removed {old}" in capsys.readouterr().out
    assert setup.setup(site) == []  # and once only


def test_setup_follows_an_edit_of_the_site_description(tmp_path, etc):
    setup.setup(packaged_site(tmp_path, user="root"))
    site = packaged_site(tmp_path, user="root", port=9000)
    assert setup.setup(site) == [etc["plugstack"]]
    assert "vipu_port=9000" in Path(etc["plugstack"]).read_text()


def test_setup_refuses_a_make_install_site_in_one_line(tmp_path, capsys):
    from slurm_ipu.cli import main

    assert main(["setup", "--site", str(ROOT / "etc" / "site-pod128.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "install.prefix=/opt/slurm-ipu: setup is for nodes installed from the Debian packages" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv", [["lab", "up"], ["demo"]])
def test_the_lab_commands_without_the_lab_package_say_which_package(argv, monkeypatch, capsys):
    """slurm-ipu-lab ships slurm_ipu.lab and slurm_ipu.emulator apart: a production node's
    `slurm-ipu lab up` gets one line naming it."""
    from slurm_ipu.cli import main

    monkeypatch.setitem(sys.modules, "slurm_ipu.lab", None)  # as on a node without slurm-ipu-lab
    monkeypatch.delattr("slurm_ipu.lab", raising=False)
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "slurm-ipu: slurm-ipu lab: the lab and the V-IPU emulator are not installed here; on Debian "
        "`apt install slurm-ipu-lab` (production nodes need neither)")


def test_the_packages_files_come_from_the_table_and_templates(tmp_path):
    packaging.write(tmp_path)
    site = config.parse((tmp_path / "site.yaml").read_text(), "/etc/slurm-ipu/site.yaml", None, None)
    assert site.packaged and site.vipu.host == config.parse(
        (ROOT / "etc" / "site-pod128.yaml").read_text(), "x", None, None).vipu.host
    assert (tmp_path / "slurm-ipu.service").read_text() == fragments.texts(site)["slurm-ipu.service"]
    assert os.access(tmp_path / "slurm-ipu-hook", os.X_OK)


def test_postrm_reads_the_state_layout_the_python_side_writes():
    """The purge runs after the Python is gone, so postrm names the state directory's layout
    itself: held here to what the hooks write."""
    postrm = (DEBIAN / "slurm-ipu.postrm").read_text()
    assert f"/{transport.socket_path('/s').name}" in postrm.replace("\\.", ".")
    for sub in (Path(ledger.__file__).read_text(), Path(journal.__file__).read_text()):
        assert sub  # the modules exist
    assert '"created"' in Path(ledger.__file__).read_text() and "$state\"/created/*.json" in postrm
    assert '"pending-removal"' in Path(journal.__file__).read_text() and "$state\"/pending-removal/*.json" in postrm
    for path in ("hook_conf", "plugstack", "unit_dropin"):
        assert config.PACKAGED_PATHS[path] in postrm, path


def test_the_packages_install_lists_cover_the_package_and_split_it():
    """Every subpackage of slurm_ipu goes to exactly one Debian package; the emulator and the lab
    never to slurm-ipu (production nodes)."""
    subpackages = {p.name for p in (ROOT / "slurm_ipu").iterdir() if (p / "__init__.py").exists()}
    subpackages |= {"templates", "csrc"}  # mapped into the package by pyproject.toml
    lists = {name: (DEBIAN / f"{name}.install").read_text() for name in ("slurm-ipu", "slurm-ipu-lab")}
    owners = {sub: [n for n, text in lists.items() if f"/slurm_ipu/{sub}\n" in text] for sub in subpackages}
    assert all(len(o) == 1 for o in owners.values()), owners
    assert owners["lab"] == owners["emulator"] == ["slurm-ipu-lab"]


def test_setup_names_ipurun_poprun_only_when_the_site_asks_and_never_over_another(tmp_path, etc):
    poprun = Path(etc["poprun"])
    setup.setup(packaged_site(tmp_path, user="root"))
    assert not poprun.is_symlink()  # off by default: a Poplar SDK's poprun may be on PATH
    site = packaged_site(tmp_path, user="root", poprun="true")
    assert setup.setup(site) == [etc["poprun"]] and os.readlink(poprun) == etc["ipurun"]
    assert setup.setup(packaged_site(tmp_path, user="root")) == [etc["poprun"]] and not poprun.is_symlink()
    poprun.write_text("#!/bin/sh\n# the Poplar SDK's\n")
    with pytest.raises(ConfigError, match="exists and is not slurm-ipu's"):
        setup.setup(site)
    assert "Poplar SDK" in poprun.read_text()


def test_doctor_tells_a_packaged_node_to_run_setup_not_make_install(tmp_path):
    from slurm_ipu.deploy import doctor

    found = doctor.check_state_dir(packaged_site(tmp_path), None)  # state_dir under tmp_path: not made yet
    assert not found.ok and found.fix == "`slurm-ipu setup` creates it", found.line()


def test_the_plugin_s_purge_removes_the_executable_caches_its_job_prolog_makes():
    """The job prolog (spank/cache.c) makes task.JOB_CACHE_ROOT; purging the plugin's package
    takes it away (Debian's rule for /var/cache/<package>), removing the package does not."""
    from slurm_ipu.launcher import task

    postrm = (DEBIAN / "slurm-ipu-spank.postrm").read_text()
    purge = postrm.split('if [ "$1" = purge ]; then', 1)[1]
    assert f"rm -rf {task.JOB_CACHE_ROOT}\n" in purge
