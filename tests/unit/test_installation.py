"""The Slurm a node runs, found for `make install`: a Slurm under its own
prefix, found from the admin's SLURM_PREFIX, its running daemons or PATH, its headers checked to
be of its release; never a Slurm installed by us. The fakes are real files: a prefix with a
`slurmd` that says its version and the headers a build would read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_ipu.errors import ConfigError
from slurm_ipu.slurm import installation


def prefix(tmp_path: Path, runs: str = "23.02.7", headers: str | None = "23.02.7", debian: bool = False) -> Path:
    root = tmp_path / "opt" / "slurm"
    (root / "sbin").mkdir(parents=True)
    daemon = root / "sbin" / "slurmd"
    daemon.write_text(f"#!/bin/sh\necho {'slurm-wlm' if debian else 'slurm'} {runs}\n")
    daemon.chmod(0o755)
    if headers is not None:
        (root / "include" / "slurm").mkdir(parents=True)
        (root / "include" / "slurm" / "spank.h").write_text("/* spank.h */\n")
        major, minor, micro = (int(x) for x in headers.split("."))
        (root / "include" / "slurm" / "slurm_version.h").write_text(
            f"#define SLURM_VERSION_NUMBER 0x{major:02x}{minor:02x}{micro:02x}\n")
    return root


def test_a_slurm_under_its_own_prefix_is_built_against_its_headers(tmp_path):
    root = prefix(tmp_path)
    node = installation.find(str(root))
    assert (node.version, node.include, node.cflags) == ("23.02.7", f"{root}/include", [f"-I{root}/include"])


def test_headers_of_another_micro_release_are_fine_another_release_is_refused_in_one_line(tmp_path):
    assert installation.find(str(prefix(tmp_path / "a", headers="23.02.99"))).version == "23.02.7"
    root = prefix(tmp_path / "b", headers="22.05.8")
    with pytest.raises(ConfigError) as err:
        installation.find(str(root))
    text = str(err.value)
    assert f"{root}/include/slurm/slurm_version.h is Slurm 22.05.8, but this node runs 23.02.7" in text
    assert "\n" not in text and "SLURM_PREFIX" in text


def test_a_slurm_without_headers_names_the_package_on_debian_and_the_way_out(tmp_path):
    root = prefix(tmp_path, headers=None, debian=True)
    with pytest.raises(ConfigError, match=r"Slurm 23\.02\.7 \(.*/sbin/slurmd\) has no headers at .*/include/slurm/"
                                          r"spank\.h; install that Slurm's development headers, or name"):
        installation.find(str(root))


def test_the_running_daemon_is_the_slurm_found(tmp_path):
    root = prefix(tmp_path)
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "comm").write_text("slurmd\n")
    os.symlink(root / "sbin" / "slurmd", proc / "4242" / "exe")
    (proc / "self").mkdir()
    node = installation.find("", proc=proc, path="")
    assert (node.program, node.prefix) == (str(root / "sbin" / "slurmd"), str(root))


def test_no_slurm_at_all_is_one_line_saying_what_to_do(tmp_path):
    with pytest.raises(ConfigError) as err:
        installation.find("", proc=tmp_path / "none", path=str(tmp_path))
    assert "no Slurm on this node" in str(err.value) and "SLURM_PREFIX=/opt/slurm" in str(err.value)
    with pytest.raises(ConfigError, match="SLURM_PREFIX=/nowhere has no sbin/slurmd"):
        installation.find("/nowhere")


@pytest.mark.parametrize("layout,where", [
    ("lib/slurm", "lib/slurm"),                                  # ./configure --prefix: libdir/slurm
    ("lib64/slurm", "lib64/slurm"),                              # RHEL's libdir
    ("lib/x86_64-linux-gnu/slurm-wlm", "lib/x86_64-linux-gnu/slurm-wlm"),  # Debian's
    (None, "lib/slurm"),                                         # none yet: where Slurm's default PluginDir is
])
def test_the_spank_plugin_goes_beside_the_node_s_slurm_s_own_plugins(tmp_path, layout, where):
    """A site-built Slurm under /opt/slurm keeps its plugins in /opt/slurm/lib/slurm: make install
    without a site description put spank_ipu.so in Debian's directory instead (the tier on a Slurm
    built from source found it)."""
    root = prefix(tmp_path)
    if layout:
        (root / layout).mkdir(parents=True)
        (root / layout / "auth_munge.so").write_bytes(b"")
    assert installation.find(str(root)).plugin_dir == str(root / where)
