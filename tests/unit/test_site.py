"""The site description and `slurm-ipu render`: golden fragments for two sites (the lab's Pod64,
an IPU-POD128 with slurmdbd), one-line errors that point at the line and the valid range, and
the rendered job_submit.lua working alone and as a module of a site's own script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import fragments
from slurm_ipu.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
SITES = {"pod64": GOLDEN / "site-pod64.yaml", "pod128": ROOT / "etc" / "site-pod128.yaml"}
REGEN = os.environ.get("SLURM_IPU_REGEN_GOLDEN") == "1"


@pytest.mark.parametrize("name", sorted(SITES))
def test_rendered_fragments_match_the_golden_files(name):
    """A change to a template shows up here as a diff a reviewer reads; regenerate with
    SLURM_IPU_REGEN_GOLDEN=1 after checking it."""
    rendered = fragments.texts(config.load(SITES[name]))
    folder = GOLDEN / name
    if REGEN:
        folder.mkdir(exist_ok=True)
        for file, text in rendered.items():
            (folder / file).write_text(text)
    assert sorted(p.name for p in folder.iterdir()) == sorted(rendered)
    for file, text in rendered.items():
        assert (folder / file).read_text() == text, f"{name}/{file} differs; SLURM_IPU_REGEN_GOLDEN=1 to accept"


def test_the_site_s_values_reach_every_fragment():
    text = fragments.texts(config.load(SITES["pod128"]))
    assert "Licenses=ipu:128\n" in text["slurm-ipu.conf"]
    assert "AccountingStorageTRES=gres/ipu,license/ipu" in text["slurm-ipu.conf"]
    assert "AccountingStorageTRES" not in fragments.texts(config.load(SITES["pod64"]))["slurm-ipu.conf"]
    assert "NodeName=ipu-host[1-4],ipu-host[5-8] Name=ipu Count=16" in text["gres-ipu.conf"]
    assert "TopologyPlugin=topology/tree" in text["slurm-ipu.conf"]
    switches = ("SwitchName=poda Nodes=ipu-host[1-4]\nSwitchName=podb Nodes=ipu-host[5-8]\n"
                "SwitchName=all Switches=poda,podb")
    assert switches in text["topology.conf"]
    assert "topology.conf" not in fragments.texts(config.load(SITES["pod64"]))
    assert "vipu_host=vipu.ipupod128.example.org vipu_port=8090 prefix=slurm_" in text["plugstack-ipu.conf"]
    assert "local POD_IPUS = 128" in text["job_submit.lua"]
    assert "ExecStart=/opt/slurm-ipu/venv/bin/python -m slurm_ipu.cli service" in text["slurm-ipu.service"]


def test_the_hooks_read_the_installed_site_description_itself():
    """One file: the controller hooks and the slurm-ipu service name install.site; nothing else is rendered."""
    desc = config.load(SITES["pod128"], environ={})
    text = fragments.texts(desc)
    assert "\npython=/opt/slurm-ipu/venv/bin/python\nsite=/etc/slurm-ipu/site.yaml\n" in text["slurm-ipu-hook.conf"]
    assert "Environment=SLURM_IPU_SITE=/etc/slurm-ipu/site.yaml\n" in text["slurm-ipu.service"]
    assert not [name for name in text if name.endswith(".yaml")]
    assert (desc.slurm_conf, desc.vipu_command, desc.ipuof_port) == (
        "/etc/slurm/slurm.conf", ["/usr/bin/vipu", "--config", "/etc/slurm-ipu/vipu-cli.hcl"], 8090)


BASE = "version: 1\ncluster: c1\nvipu:\n  host: v\npod:\n  ipus: 64\n  hosts: n[1-4]\n  ipus_per_host: 16\n"


@pytest.mark.parametrize("extra,words", [
    ("  port: 70000\n", ["site.yaml:5:", "vipu.port=70000 is out of range; use from 1 to 65535"]),
    ("prolog:\n  deadline: 200\n", ["site.yaml:10:", "prolog.deadline=200 must be below prolog_epilog_timeout=180"]),
    ("partition:\n  prefix: 'a b'\n", ["site.yaml:10:", "1 to 31 letters, digits and '-_'"]),
    ("prolog_epilog_timout: 300\n", ["site.yaml:9:", "unknown key 'prolog_epilog_timout'",
                                     "did you mean 'prolog_epilog_timeout'"]),
    ("slurm:\n  version: '21.08'\n", ["site.yaml:10:", "slurm.version='21.08'", "one of 22.05"]),
    ("state_dir: var/lib\n", ["site.yaml:9:", "an absolute path"]),
    ("  cli_config: /etc/my vipu.hcl\n", ["site.yaml:5:", "an absolute path without spaces"]),
    ("  emulator: yes please\n", ["site.yaml:5:", "vipu.emulator='yes please' is not a bool"]),
])
def test_bad_values_name_the_line_and_the_valid_range(tmp_path, extra, words):
    path = tmp_path / "site.yaml"
    text = BASE.replace("  host: v\n", "  host: v\n" + extra) if extra.startswith("  ") else BASE + extra
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        config.load(path)
    for word in words:
        assert word in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("change,words", [
    (("ipus: 64", "ipus: 96"), ["pod.ipus=96", "multiple of 64"]),
    (("  host: v\n", ""), ["vipu.host must be set"]),
    (("n[1-4]", "n[1-2],n2"), ["names a host twice"]),
    (("ipus_per_host: 16", "ipus_per_host: 65"), ["pod.ipus_per_host=65", "from 1 to 64"]),
    (("cluster: c1", "cluster: [c1"), ["not valid YAML"]),
])
def test_a_wrong_pod_is_refused(tmp_path, change, words):
    path = tmp_path / "site.yaml"
    path.write_text(BASE.replace(*change))
    with pytest.raises(ConfigError) as err:
        config.load(path)
    for word in words:
        assert word in str(err.value)


def test_render_cli_writes_the_fragments_and_refuses_bad_input_in_one_line(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "render", str(SITES["pod64"]), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(set(fragments.FILES) - {"topology.conf"})
    assert not [p.name for p in out.iterdir() if os.access(p, os.X_OK)]  # fragments to read and merge
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE + "  ipus_per_hots: 4\n")
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "render", str(bad), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "bad.yaml:9: unknown key 'pod.ipus_per_hots'" in proc.stderr



def test_a_prefix_whose_names_can_outgrow_v_ipu_s_is_refused_by_render_in_one_line(tmp_path):
    """V-IPU's name limit is not public; a site that knows its controller's (vipu.name_max) has
    every prefix held to it for the largest job and step ids Slurm hands out (67108863, and
    4294967280: a step's partition is prefix + job + '_' + step), at render, not at job 10^7."""
    site = tmp_path / "site.yaml"
    fits = BASE.replace("  host: v\n", "  host: v\n  name_max: 36\n") + "partition:\n  prefix: ipu_job_\n"
    site.write_text(fits)  # 8 + 8 + 1 + 10 = 27
    assert config.load(site).partition.prefix == "ipu_job_"
    site.write_text(fits.replace("ipu_job_", "a_very_long_site_prefix_"))  # 24 + 19 = 43 > 36
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "render", str(site), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert "partition.prefix='a_very_long_site_prefix_' makes V-IPU names of up to 43 characters" in proc.stderr
    assert "over vipu.name_max=36; use a prefix of at most 17 characters" in proc.stderr
    assert not (tmp_path / "o").exists()
    # the default limit (the emulator's 64) holds every prefix the SPANK plugin takes (31 characters)
    site.write_text(BASE + "partition:\n  prefix: " + "p" * 31 + "\n")
    assert config.load(site).partition.prefix == "p" * 31


LUA = shutil.which("lua5.1")

def site_script(ours: Path) -> str:
    """A site's own job_submit.lua with the lines docs/admin.md tells admins to add (the dofile as
    its first line, our call as the first line of each entry point): the documented lines are the
    ones tested."""
    lines = [ln.strip() for ln in (ROOT / "docs" / "admin.md").read_text().splitlines()]
    dofile = next(ln for ln in lines if ln.startswith("dofile("))
    submit = next(ln for ln in lines if ln.startswith("local rc = slurm_ipu.job_submit("))
    modify = next(ln for ln in lines if ln.startswith("local rc = slurm_ipu.job_modify("))
    return (dofile.replace('"/etc/slurm/job_submit_ipu.lua"', repr(str(ours))) + "\n"
            "function slurm_job_submit(job_desc, part_list, submit_uid)\n"
            f"    {submit}\n"
            '    if job_desc.partition == "closed" then\n'
            '        slurm.log_user("site: partition closed") return slurm.ERROR end\n'
            "    return slurm.SUCCESS\nend\n"
            "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)\n"
            f"    {modify}\n"
            "    return slurm.SUCCESS\nend\n")


HARNESS = """
local msgs = {}
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_INVALID_LICENSES = 2040,
          log_user = function(fmt, ...) table.insert(msgs, string.format(fmt, ...)) end,
          log_info = function(fmt, ...) end }
dofile(%(site)r)
local job = %(job)s
local rc = slurm_job_submit(job, {}, 0)
print(rc .. "\\t" .. tostring(job.licenses) .. "\\t" .. table.concat(msgs, "|"))
"""


@pytest.mark.skipif(LUA is None, reason="lua5.1 missing: `make test` installs it")
@pytest.mark.parametrize("job,expected", [
    ('{tres_per_node = "gres:ipu:4", min_nodes = 2}', "0\tipu:8\t"),
    ('{licenses = "ipu:4", min_nodes = 1}', "2040\tipu:4\tslurm-ipu: ask for IPUs with --gres=ipu:N"),
    ('{partition = "closed", min_nodes = 1}', "-1\tnil\tsite: partition closed"),
])
def test_job_submit_lua_as_a_module_of_the_site_s_own_script(tmp_path, job, expected):
    ours = tmp_path / "job_submit_ipu.lua"
    ours.write_text(fragments.texts(config.load(SITES["pod128"]))["job_submit.lua"])
    theirs = tmp_path / "job_submit.lua"
    theirs.write_text(site_script(ours))
    code = HARNESS % {"site": str(theirs), "job": job}
    proc = subprocess.run([LUA, "-"], input=code, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n").startswith(expected)


def test_pyproject_lists_every_package_and_ships_the_templates():
    """pyproject.toml lists packages by hand (to map templates/ into the package): a new package
    missing from the list would be absent from every install."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "slurm_ipu").rglob("__init__.py")}
    assert set(project["packages"]) == found | {"slurm_ipu.templates", "slurm_ipu.csrc"}
    assert project["package-dir"] == {"slurm_ipu.templates": "templates", "slurm_ipu.csrc": "spank"}
    import fnmatch

    shipped = project["package-data"]["slurm_ipu.templates"]
    templates = {str(p.relative_to(ROOT / "templates")) for p in (ROOT / "templates").rglob("*.j2")}
    assert all(any(fnmatch.fnmatch(t, pat) for pat in shipped) for t in templates)
    # the whole C tree with its Makefile: an installed package builds its hook from it
    shipped = project["package-data"]["slurm_ipu.csrc"]
    sources = {str(p.relative_to(ROOT / "spank")) for p in (ROOT / "spank").rglob("*")
               if p.is_file() and p.suffix not in (".o", ".so")}
    assert "hook/hook.c" in sources and "Makefile" in sources
    assert all(any(fnmatch.fnmatch(t, pat) for pat in shipped) for t in sources), sources


def test_pyproject_ships_every_file_the_package_reads_beside_its_code():
    """The emulator's presets (and any other data beside the code): a file missing from
    package-data is absent from every install (seen: the hook's C source, when it lived in the
    package, before the C tree did)."""
    import fnmatch
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for path in (ROOT / "slurm_ipu").rglob("*"):
        if path.is_dir() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
            continue
        package = ".".join(path.parent.relative_to(ROOT).parts)
        while package not in data and "." in package:
            package = package.rsplit(".", 1)[0]
        rel = str(path.relative_to(ROOT.joinpath(*package.split("."))))
        assert any(fnmatch.fnmatch(rel, pat) for pat in data.get(package, [])), f"{path} is not in package-data"
