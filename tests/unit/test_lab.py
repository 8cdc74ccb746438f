"""The lab's process handling, without Slurm: the error a failed start gives."""

from __future__ import annotations

import pytest

from slurm_ipu import lab
from slurm_ipu.errors import LabError


def test_a_daemon_that_fails_silently_is_explained_by_its_log(tmp_path):
    """slurmd exits 1 printing nothing when /sys/fs/cgroup is missing; the reason is in its log."""
    log = tmp_path / "slurmd-node1.log"
    log.write_text("[t] error: No filesystem mounted on /sys/fs/cgroup\n"
                   "[t] error: Unable to initialize cgroup plugin\n")
    spec = lab.LabSpec(dir=tmp_path)
    with pytest.raises(LabError) as err:
        lab._run(["false"], spec, log=log)
    assert "Unable to initialize cgroup plugin" in str(err.value) and str(log) in str(err.value)
    with pytest.raises(LabError, match="no message"):
        lab._run(["false"], spec)


def test_release_differences_live_in_one_table():
    from slurm_ipu.slurm import releases

    assert releases.release("24.11.5") == "24.11"
    assert (releases.tres_prefix("22.05.8"), releases.tres_prefix("23.11.1"), releases.tres_prefix("24.11.5")) == \
        ("gres:", "gres/", "gres/")


def test_the_lab_disables_the_cgroup_plugin_only_where_slurm_knows_the_value():
    from slurm_ipu.slurm import releases

    assert releases.cgroup_conf("22.05.8") is None and releases.cgroup_conf("23.11.4") is None
    assert "CgroupPlugin=disabled" in releases.cgroup_conf("24.05.1")
    assert "CgroupPlugin=disabled" in releases.cgroup_conf("26.05.5")


def test_accounting_points_slurm_and_slurmdbd_at_the_labs_own_database(tmp_path):
    from slurm_ipu.deploy import render

    plain = render.render("lab/slurm.conf", lab.context(lab.LabSpec(dir=tmp_path / "plain")))
    assert "AccountingStorageType=accounting_storage/none" in plain and "slurmdbd" not in plain
    spec = lab.LabSpec(dir=tmp_path / "acct", accounting=True, dbd_port=20008, db_port=20009)
    spec.path("etc").mkdir(parents=True)
    ctx = lab.context(spec)
    conf = render.render("lab/slurm.conf", ctx)
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    assert "AccountingStoragePort=20008" in conf and f"AccountingStoragePass={spec.path('run', 'munge.socket')}" in conf
    dbd = render.render("lab/slurmdbd.conf", ctx)
    word = spec.path("etc", "db-password").read_text().strip()
    assert len(word) == 32 and spec.path("etc", "db-password").stat().st_mode & 0o777 == 0o600
    assert f"StoragePass={word}\n" in dbd and "StoragePort=20009\n" in dbd and "DbdPort=20008\n" in dbd
    assert lab.context(spec)["accounting"]["db_password"] == word  # made once per lab


def test_accounting_without_its_packages_names_them(monkeypatch, tmp_path):
    from slurm_ipu.lab import accounting

    monkeypatch.setitem(accounting.TOOLS, "mariadbd", str(tmp_path / "no-mariadbd"))
    with pytest.raises(LabError, match="--accounting needs mariadbd: apt-get install slurmdbd mariadb-server-core"):
        accounting.check_installed()


def test_the_mixed_lab_gives_pod_a_the_allocation_model_and_slurm_a_partition_per_model(mocker, tmp_path):
    from slurm_ipu import config
    from slurm_ipu.deploy import render
    from slurm_ipu.errors import LabError
    from slurm_ipu.lab import files
    from slurm_ipu.lab.spec import LabSpec, check_spec

    mocker.patch.object(files, "_slurm_release", return_value="22.05")
    spec = LabSpec(dir=tmp_path / "lab", nodes=8, pods=2, model="mixed")
    check_spec(spec)
    site = config.parse(files.site_description(spec), "site.yaml")
    assert {p.name: site.model_for(p.hosts) for p in site.pods} == {"poda": "allocation", "podb": "partition"}
    conf = render.render("lab/slurm.conf", files.context(spec))
    assert "PartitionName=ipu-alloc Nodes=node[1-4] " in conf and "PartitionName=ipu-part Nodes=node[5-8] " in conf
    with pytest.raises(LabError, match="use --pods 2 or more"):
        check_spec(LabSpec(dir=tmp_path / "lab", nodes=4, model="mixed"))


@pytest.mark.parametrize("words,followed", [
    (["--conf-server", "127.0.0.1:{port}", "-N", "node1"], True),  # configless: no slurm.conf named
    (["-f", "{conf}", "-N", "node1"], True),
    (["--conf-server", "127.0.0.1:1", "-N", "node1"], False),  # another lab's controller
    (["--conf-server", "127.0.0.1:{port}", "-N", "node2"], False),  # another node's daemon
])
def test_a_restarted_daemon_is_followed_only_when_it_is_this_lab_s(tmp_path, words, followed):
    """From 23.11 `scontrol reconfigure` starts slurmd again as a new process; a configless slurmd
    names no slurm.conf, so `lab down` lost track of it and left it running (seen with a
    site-built 25.11 on a host: the chroot tiers' pid namespaces hid it)."""
    import subprocess
    import sys

    from slurm_ipu.lab import daemons

    spec = lab.LabSpec(dir=tmp_path, ctld_port=23456)
    spec.path("run").mkdir(parents=True)
    argv = [w.format(port=spec.ctld_port, conf=spec.path("etc", "slurm.conf")) for w in words]
    proc = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()", *argv])
    try:
        spec.path("run", "slurmd-node1.pid").write_text(f"{proc.pid}\n")
        gone = {"pid": 2 ** 22 + 7, "token": "gone"}
        pids = daemons._follow_restarts(spec, {"slurmd-node1": dict(gone)})
        assert (pids["slurmd-node1"]["pid"] == proc.pid) == followed, pids
    finally:
        proc.kill()
        proc.wait(10)


def test_the_lab_s_hosts_of_different_sizes_and_backup_controller_are_what_slurm_reads(mocker, tmp_path):
    from slurm_ipu.deploy import render
    from slurm_ipu.lab import files
    from slurm_ipu.lab.spec import LabSpec, check_spec

    mocker.patch.object(files, "_slurm_release", return_value="22.05")
    spec = LabSpec(dir=tmp_path / "lab", nodes=7, pods=3, pod_hosts=(4, 2, 1), backup=True)
    check_spec(spec)
    conf = render.render("lab/slurm.conf", files.context(spec))
    nodes = [line.split()[0] + " " + next(w for w in line.split() if w.startswith("Gres="))
             for line in conf.splitlines() if line.startswith("NodeName=")]
    assert nodes == [*(f"NodeName=node{k} Gres=ipu:16" for k in range(1, 5)), "NodeName=node5 Gres=ipu:32",
                     "NodeName=node6 Gres=ipu:32", "NodeName=node7 Gres=ipu:64"]
    assert "SlurmctldHost=ctl1(127.0.0.1)\n" in conf and "SlurmctldHost=ctl2(127.0.0.2)\n" in conf
    assert "CommunicationParameters=NoCtldInAddrAny\n" in conf and "SlurmctldTimeout=10\n" in conf
    for wrong, words in ((dict(nodes=8), "makes 7 nodes in 3 Pods"), (dict(pod_hosts=(4, 3), pods=2, nodes=7),
                                                                     "each of 1, 2, 4, 8 or 16 hosts")):
        with pytest.raises(LabError, match=words):
            check_spec(LabSpec(**{"dir": tmp_path / "lab", "nodes": 7, "pods": 3, "pod_hosts": (4, 2, 1), **wrong}))
    with pytest.raises(LabError, match="--backup gives the lab's own slurm.conf two SlurmctldHost lines"):
        check_spec(LabSpec(dir=tmp_path / "lab", backup=True, configless=True))
