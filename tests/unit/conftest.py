"""Fixtures the hook tests share: a fake `vipu` at the subprocess boundary and a config file
with a state directory of the test's own."""

from __future__ import annotations

import json

import pytest

from slurm_ipu import config

from .fake_vipu import FakeVipu


@pytest.fixture
def fake(mocker):
    vipu = FakeVipu()
    mocker.patch("slurm_ipu.vipu.client.run_command", side_effect=vipu)
    mocker.patch("slurm_ipu.vipu.client.time.sleep")
    return vipu


def write_conf(tmp_path, **extra):
    """A site description for one Pod of 64 IPUs on node[1-4]; extra sections are merged in
    (pods= replaces the Pod's ipus and hosts)."""
    path = tmp_path / "c.yaml"
    body = {"version": 1, "cluster": "c", "state_dir": str(tmp_path / "state"),
            "vipu": {"host": "v", "command": "/usr/bin/vipu", "retries": 1},
            "pod": {"ipus": 64, "hosts": "node[1-4]", "ipus_per_host": 16}, "prolog": {"deadline": 5}}
    if "pods" in extra:
        body["pod"] = {"ipus_per_host": 16}
    for key, value in extra.items():
        body[key] = {**body[key], **value} if isinstance(value, dict) and isinstance(body.get(key), dict) else value
    path.write_text(json.dumps(body))
    return path


@pytest.fixture
def cfg(tmp_path):
    return config.load(str(write_conf(tmp_path)), environ={})


SPANK = __import__("pathlib").Path(__file__).resolve().parents[2] / "spank"
def build_driver(tmp_path_factory, name: str, cache_root: str | None = None) -> str:
    """A C test driver, spank/tests/<name>.c with the plugin's sources it exercises, built by the C
    tree's one Makefile (`make driver`: its flags, its list of sources); cache_root: the test's own
    in place of IPU_JOB_CACHE_ROOT (spank/spank_ipu.h), which only root may make."""
    from slurm_ipu.cbuild import make

    out = tmp_path_factory.mktemp("spank") / name
    defines = [f'-DIPU_JOB_CACHE_ROOT="{cache_root}"'] if cache_root else []
    return str(make("driver", out, f"the test driver {name}", defines, NAME=name))


@pytest.fixture(scope="session")
def hook_binary(tmp_path_factory):
    """slurm-ipu-hook (spank/hook/hook.c) built once, as the install builds it."""
    import shutil

    from slurm_ipu.hooks import transport

    if shutil.which("gcc") is None:
        pytest.skip("gcc missing: `make test` installs it")
    return transport.build_hook(tmp_path_factory.mktemp("hook") / "slurm-ipu-hook")


def place_hook(binary, dest, hook: dict):
    """slurm-ipu-hook at `dest`, with its settings beside it rendered from `hook` (what
    fragments.context gives the template): what Slurm runs, as the install lays it out."""
    import shutil

    from slurm_ipu.deploy import render

    shutil.copy2(binary, dest)
    dest.with_name(dest.name + ".conf").write_text(render.render("hooks/slurm-ipu-hook.conf", {"hook": hook}))
    return dest


@pytest.fixture
def here(tmp_path, hook_binary):
    """A site whose every path lies in tmp_path, installed there as make install would, and the
    facts doctor would read from a cluster that matches it: (the site, doctor.Facts)."""
    import shutil
    import sys
    from pathlib import Path

    from slurm_ipu.deploy import doctor, fragments, merge
    from slurm_ipu.slurm import slurmconf
    from slurm_ipu.vipu.types import Partition

    conf, state, lib, prefix = tmp_path / "etc", tmp_path / "state", tmp_path / "lib", tmp_path / "opt"
    for d in (conf, state, lib):
        d.mkdir()
    state.chmod(0o700)
    text = f"""version: 1
cluster: t
vipu: {{host: 127.0.0.1, port: 8090, command: /usr/bin/vipu}}
pod: {{ipus: 64, hosts: "node[1-4]", ipus_per_host: 16}}
prolog: {{deadline: 30}}
epilog: {{deadline: 20}}
prolog_epilog_timeout: 60
state_dir: {state}
slurm: {{user: root, conf_dir: {conf}, plugin_dir: {lib}}}
install: {{prefix: {prefix}, site: {conf}/site.yaml}}
"""
    (tmp_path / "site.yaml").write_text(text)
    desc = config.load(tmp_path / "site.yaml")
    texts = fragments.texts(desc)
    wrapper = Path(desc.path("hook"))
    wrapper.parent.mkdir(parents=True)
    shutil.copy2(hook_binary, wrapper)
    Path(desc.path("hook_conf")).write_text(texts["slurm-ipu-hook.conf"])
    Path(desc.python).parent.mkdir(parents=True)
    Path(desc.python).symlink_to(sys.executable)
    shutil.copy(tmp_path / "site.yaml", desc.path("site"))
    (conf / "job_submit.lua").write_text(texts["job_submit.lua"])
    (conf / "plugstack.conf.d").mkdir()
    (conf / "plugstack.conf").write_text(f"include {conf}/plugstack.conf.d/*.conf\n")
    (conf / "plugstack.conf.d" / "ipu.conf").write_text(texts["plugstack-ipu.conf"])
    (lib / "spank_ipu.so").write_bytes(b"ELF slurm-ipu-spank built-for-slurm 0x160508\0")
    # A site that had its own gpu GRES, merged as docs/admin.md says (render, then the diff).
    (conf / "slurm.conf").write_text("ClusterName=t\nGresTypes=gpu\n")
    merged = fragments.texts(desc, str(conf / "slurm.conf"))
    (conf / "slurm-ipu.conf").write_text(merged["slurm-ipu.conf"])
    for path, (_, text) in merge.edits(merge.merge(desc, str(conf / "slurm.conf")), str(conf / "slurm.conf")).items():
        Path(path).write_text(text)
    facts = doctor.Facts(
        slurm_version="22.05.8",
        config={"PrologSlurmctld": str(wrapper), "EpilogSlurmctld": str(wrapper), "PrologEpilogTimeout": "60 sec",
                "JobSubmitPlugins": "lua", "Licenses": "ipu:64", "GresTypes": "gpu,ipu",
                "PlugStackConfig": str(conf / "plugstack.conf"), "SLURM_CONF": str(conf / "slurm.conf")},
        nodes={f"node{i}": {"NodeName": f"node{i}", "Gres": "ipu:16"} for i in range(1, 5)},
        jobs={7: "RUNNING"}, stuck=[], partitions=[Partition("slurm_7", 8)], canary="ok", test_submit="ok",
        declared=slurmconf.read(str(conf / "slurm.conf")).settings)
    return desc, facts
