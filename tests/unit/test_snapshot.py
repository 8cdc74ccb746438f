"""`slurm-ipu snapshot` and doctor's `kept`: the site's own Slurm as slurmctld
reports it, before and after adoption; anything of the site's that is gone is named, slurm-ipu's
own items (the ipu GRES and licence) never are."""

from __future__ import annotations

from slurm_ipu.deploy import snapshot
from slurm_ipu.deploy.doctor import Facts, check_kept

from ..fake_slurm import FakeSlurm

# `scontrol -o show ...` as 22.05 prints it (fields trimmed to those read, plus neighbours).
NODES = (
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=4 CPULoad=0.01 AvailableFeatures=rack1,ib "
    "ActiveFeatures=rack1,ib Gres=gpu:1(S:0) NodeAddr=127.0.0.1 OS=Linux 6.1.0-28-amd64 #1 SMP RealMemory=1024 "
    "Partitions=main,gpu State=IDLE\n"
    "NodeName=node2 Arch=x86_64 CPUTot=4 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) RealMemory=1024 "
    "Partitions=main State=IDLE\n")
LICENCES = "LicenseName=matlab Total=10 Used=0 Free=10 Reserved=0 Remote=no\n"
PARTITIONS = """\
PartitionName=main AllowGroups=ALL Default=YES Nodes=node[1-2] State=UP TotalCPUs=8
PartitionName=gpu AllowGroups=ALL Nodes=node1 State=UP TotalCPUs=4
"""
TOPOLOGY = "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[1-2]\n"


def fake_slurm(mocker, nodes=NODES, licences=LICENCES, partitions=PARTITIONS, topology=TOPOLOGY, refuse=()):
    """The shared fake (tests/fake_slurm.py) with this site's nodes, licences, partitions and
    switches; `mocker` is unused, kept so every caller reads the same."""
    del mocker
    return FakeSlurm(shown={"nodes": nodes, "licenses": licences, "partitions": partitions, "topology": topology},
                     refuse=refuse)


def test_a_snapshot_records_what_slurm_runs_and_leaves_ours_out(mocker):
    taken = snapshot.record(fake_slurm(mocker, nodes=NODES.replace("Gres=gpu:1(S:0)", "Gres=gpu:1(S:0),ipu:16"),
                                       licences=LICENCES + "LicenseName=ipu Total=64 Used=0\n"))
    assert taken["nodes"]["node1"] == {"cpus": "4", "memory": "1024", "features": "rack1,ib", "gres": ["gpu:1"],
                                       "partitions": ["gpu", "main"]}
    assert taken["nodes"]["node2"]["gres"] == [] and taken["licences"] == {"matlab": "10"}
    assert taken["partitions"]["main"] == {"nodes": ["node1", "node2"], "state": "UP"}
    assert taken["switches"] == {"node1": "s0", "node2": "s0"}
    assert taken["shapes"] == {"-p gpu -N1": "ok", "-p main -N1": "ok", "--gres=gpu:1 -N1": "ok",
                               "-L matlab:1 -N1": "ok"}


def test_nothing_lost_is_ok_and_the_ipu_items_added_are_not_a_loss(mocker):
    before = snapshot.record(fake_slurm(mocker, topology=None))
    after = snapshot.record(fake_slurm(mocker, nodes=NODES.replace("Gres=(null)", "Gres=ipu:16")),
                            [s.split() for s in before["shapes"]])
    assert before["switches"] == {} and snapshot.lost(before, after) == []


def test_a_default_line_s_gpu_replaced_by_ipu_is_named_with_its_node(mocker):
    """The adoption issue's first failure: NodeName=DEFAULT ... Gres=gpu:1, then the Pod's line given
    Gres=ipu:16 alone; Slurm then runs node1 without its GPU and refuses the site's GPU jobs there."""
    before = snapshot.record(fake_slurm(mocker))
    broken = fake_slurm(mocker, nodes=NODES.replace("Gres=gpu:1(S:0)", "Gres=ipu:16"), refuse=("--gres=gpu",))
    after = snapshot.record(broken, [s.split() for s in before["shapes"]])
    gone = snapshot.lost(before, after)
    assert "node node1 lost Gres gpu:1 (has none besides ipu)" in gone
    assert "`sbatch --gres=gpu:1 -N1` was accepted, now: Requested node configuration is not available" in gone
    finding = check_kept(_site(mocker), Facts(snapshot=before, kept=after))
    assert not finding.ok and finding.item == "kept" and "node1 lost Gres gpu:1" in finding.line()


def test_a_topology_that_no_longer_reaches_a_node_and_a_lost_licence_are_named(mocker):
    before = snapshot.record(fake_slurm(mocker))
    after = snapshot.record(fake_slurm(mocker, topology="SwitchName=poda Level=0 Nodes=node2\n", licences=""),
                            [s.split() for s in before["shapes"]])
    gone = snapshot.lost(before, after)
    assert "node node1 is under no switch of the topology (was s0)" in gone and "licence matlab 10 -> gone" in gone


def test_doctor_without_a_snapshot_says_so_and_skips(mocker):
    finding = check_kept(_site(mocker), Facts())
    assert finding.skipped and "no snapshot at /etc/slurm-ipu/snapshot.json" in finding.line()


def _site(mocker):
    site = mocker.Mock()
    site.path.side_effect = {"snapshot": "/etc/slurm-ipu/snapshot.json"}.get
    return site
