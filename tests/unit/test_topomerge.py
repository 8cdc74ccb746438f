"""A site's own topology.conf with several Pods: the Pods' switches merged into
it through slurm.conf.diff where the Pods fit under its switches (every node keeps a path), a
switch that cuts across a Pod refused in one line naming it, and `slurm-ipu unmerge` giving the
file back byte for byte. The example site is an IPU-POD128: poda = ipu-host[1-4], podb =
ipu-host[5-8], vipu.allocation `all`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import fragments, merge
from slurm_ipu.errors import ConfigError
from slurm_ipu.slurm.topology import read_conf

ROOT = Path(__file__).resolve().parents[2]
PATCH = shutil.which("patch")
SLURM_CONF = """ClusterName=ipupod128
SlurmctldHost=ctl
TopologyPlugin=topology/tree
NodeName=ipu-host[1-8] CPUs=4
NodeName=login[1-2] CPUs=2
PartitionName=all Nodes=ALL Default=YES
"""


@pytest.fixture
def site(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text(SLURM_CONF)
    text = (ROOT / "etc" / "site-pod128.yaml").read_text().replace("conf_dir: /etc/slurm", f"conf_dir: {etc}")
    (tmp_path / "site.yaml").write_text(text)
    return config.load(str(tmp_path / "site.yaml"), environ={}), etc


def merged_topology(desc, etc) -> str:
    changes = merge.edits(merge.merge(desc, str(etc / "slurm.conf")), str(etc / "slurm.conf"))
    return changes[str(etc / "topology.conf")][1]


def tree(text: str, tmp_path: Path) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    (tmp_path / "t.conf").write_text(text)
    return {s.name: (s.nodes, tuple(s.children())) for s in read_conf(str(tmp_path / "t.conf"))}


def test_the_site_s_leaves_holding_each_pod_become_the_pods_switches(site, tmp_path):
    desc, etc = site
    (etc / "topology.conf").write_text("# our racks\nSwitchName=rack1 Nodes=ipu-host[1-4]\n"
                                       "SwitchName=rack2 Nodes=ipu-host[5-8] LinkSpeed=100\n"
                                       "SwitchName=login Nodes=login[1-2]\nSwitchName=core Switches=rack[1-2],login\n")
    text = merged_topology(desc, etc)
    assert tree(text, tmp_path) == {"poda": ("ipu-host[1-4]", ()), "podb": ("ipu-host[5-8]", ()),
                                    "login": ("login[1-2]", ()), "core": (None, ("poda", "podb", "login"))}
    assert "SwitchName=podb Nodes=ipu-host[5-8] LinkSpeed=100" in text  # the rest of the line as it was
    assert "topology.conf" not in fragments.texts(desc, str(etc / "slurm.conf"))  # no file to copy over theirs


def test_pods_under_no_switch_join_the_site_s_top_switch(site, tmp_path):
    desc, etc = site
    (etc / "topology.conf").write_text("SwitchName=login Nodes=login[1-2]\nSwitchName=gpu Nodes=gpu1\n"
                                       "SwitchName=core Switches=login,gpu\n")
    got = tree(merged_topology(desc, etc), tmp_path)
    assert got["core"] == (None, ("login", "gpu", "poda", "podb")) and got["poda"] == ("ipu-host[1-4]", ())


def test_a_site_of_one_leaf_switch_gets_a_top_switch_over_it_and_the_pods(site, tmp_path):
    desc, etc = site
    (etc / "topology.conf").write_text("SwitchName=s0 Nodes=login[1-2]\n")
    got = tree(merged_topology(desc, etc), tmp_path)
    assert got["all"] == (None, ("s0", "poda", "podb")) and got["s0"] == ("login[1-2]", ())


@pytest.mark.parametrize("topology,words", [
    ("SwitchName=s1 Nodes=ipu-host[1-3],login1\nSwitchName=s2 Nodes=ipu-host4\n",
     "topology.conf:1: SwitchName=s1 holds Pod poda's hosts and login1: a Pod is one leaf switch of exactly its "
     "hosts"),
    ("SwitchName=s1 Nodes=ipu-host[1-2]\nSwitchName=s2 Nodes=ipu-host[3-4]\n",
     "topology.conf:2: Pod poda's hosts are under switches s1 and s2: a Pod is one leaf switch"),
    ("SwitchName=s1 Nodes=ipu-host[1-8]\n", "SwitchName=s1 holds Pod poda's hosts and ipu-host5, ipu-host6, "
     "ipu-host7"),
    ("SwitchName=s1 Nodes=ipu-host[1-3]\n", "SwitchName=s1 holds some of Pod poda's hosts, not ipu-host4"),
    ("SwitchName=poda Nodes=login1\n", "a switch is named poda, like the Pod, and holds none of its hosts"),
])
def test_a_switch_that_cuts_across_a_pod_is_one_line_naming_it(site, topology, words):
    desc, etc = site
    (etc / "topology.conf").write_text(topology)
    with pytest.raises(ConfigError) as err:
        merge.merge(desc, str(etc / "slurm.conf"))
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_without_a_topology_of_its_own_the_site_s_other_nodes_keep_a_path(site):
    """The rendered topology.conf names every node: one a site's slurm.conf has outside the Pods
    under no switch is a node Slurm finds no path to ("switches lack access"), and jobs there fail."""
    desc, etc = site
    text = fragments.texts(desc, str(etc / "slurm.conf"))["topology.conf"]
    assert "SwitchName=site Nodes=login[1-2]" in text and "SwitchName=all Switches=poda,podb,site" in text


@pytest.mark.skipif(PATCH is None, reason="GNU patch is not installed")
def test_the_merge_applies_rerenders_to_nothing_and_unmerges_byte_for_byte(site, tmp_path):
    desc, etc = site
    (etc / "topology.conf").write_text("SwitchName=rack1 Nodes=ipu-host[1-4]\nSwitchName=login Nodes=login[1-2]\n"
                                       "SwitchName=core Switches=rack1,login\n")
    before = {p.name: p.read_bytes() for p in etc.iterdir()}
    fragments.write(desc, tmp_path / "out", str(etc / "slurm.conf"))
    subprocess.run([PATCH, "-s", "-d", "/", "-p1", "-i", str(tmp_path / "out" / fragments.DIFF)], check=True,
                   timeout=30)
    assert tree((etc / "topology.conf").read_text(), tmp_path)["core"] == (None, ("poda", "login", "podb"))
    again = merge.edits(merge.merge(desc, str(etc / "slurm.conf")), str(etc / "slurm.conf"))
    assert str(etc / "topology.conf") not in again  # merged once: nothing more to change
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "unmerge", "--site", str(tmp_path / "site.yaml"),
                           "--out", str(tmp_path / "back")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    subprocess.run([PATCH, "-s", "-d", "/", "-p1", "-i", str(tmp_path / "back" / "slurm.conf.unmerge.diff")],
                   check=True, timeout=30)
    assert {p.name: p.read_bytes() for p in etc.iterdir()} == before


def test_a_pod_group_is_a_switch_over_its_pods_under_the_site_s_top(site, tmp_path):
    desc, etc = site
    pods = "".join(f"  - {{name: pod{c}, hosts: 'ipu-host[{2 * k + 1}-{2 * k + 2}]', ilds: 1}}\n"
                   for k, c in enumerate("abcd"))
    text = (tmp_path / "site.yaml").read_text()
    text = text[:text.index("pods:\n")] + "pods:\n" + pods + "pod_groups: [{name: ab, pods: [poda, podb]}, " \
        "{name: cd, pods: [podc, podd]}]\n" + text[text.index("pod_groups: null\n") + len("pod_groups: null\n"):]
    (tmp_path / "site.yaml").write_text(text)
    desc = config.load(str(tmp_path / "site.yaml"), environ={})
    (etc / "topology.conf").write_text("SwitchName=login Nodes=login[1-2]\nSwitchName=core Switches=login\n")
    got = tree(merged_topology(desc, etc), tmp_path)
    assert got["ab"] == (None, ("poda", "podb")) and got["core"] == (None, ("login", "ab", "cd"))
    (etc / "topology.conf").write_text("SwitchName=poda Nodes=ipu-host[1-2]\nSwitchName=core Switches=poda\n")
    with pytest.raises(ConfigError, match="Pod poda hangs off core, and pod_groups puts it under ab"):
        merge.merge(desc, str(etc / "slurm.conf"))
