"""A configless cluster: slurmctld with SlurmctldParameters=enable_configless,
each slurmd started with --conf-server in a mount namespace of its own where the lab's etc is
empty (a node without /etc/slurm). What the merge writes must arrive by Slurm's own mechanism:
the `Include slurm-ipu.conf` (a plain name) for the node's GRES, plugstack.conf for the SPANK
plugin. Judged by what Slurm and the tasks show, on every supported release."""

from __future__ import annotations

import pytest

from slurm_ipu import lab as labmod

from ..waiting import wait_for
from .conftest import started_lab


@pytest.fixture(scope="module")
def configless():
    with started_lab(nodes=2, configless=True) as lab:
        yield lab


def test_a_node_without_a_slurm_conf_runs_ipu_jobs_from_what_slurmctld_sends(configless):
    lab = configless
    etc = lab.spec.path("etc")
    pid = labmod.load_pids(lab.spec)["slurmd-node1"]["pid"]
    seen = lab.run("nsenter", "-t", str(pid), "-m", "-r", "ls", "-A", str(etc), check=True).stdout
    assert seen == "", f"slurmd sees its own configuration in {etc}: {seen}"
    cache = lab.spec.path("spool", "node1", "conf-cache")
    assert (cache / "slurm-ipu.conf").is_file(), sorted(p.name for p in cache.iterdir())
    # the site's own plugstack.conf.d include (never sent) stays; the merge put the line beside it
    sent = (cache / "plugstack.conf").read_text()
    assert f"include {etc}/plugstack.conf.d/*.conf\n" in sent and "spank_ipu.so" in sent, sent
    gres = lab.run("scontrol", "-o", "show", "node", "node1", check=True).stdout
    assert f"Gres=ipu:{lab.spec.ipus_per_node}" in gres, gres
    proc = lab.run("srun", "-N2", "--gres=ipu:4", "bash", "-c", "echo $SLURM_JOB_ID $IPUOF_VIPU_API_PARTITION_ID",
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    (job, partition), = {tuple(line.split()) for line in proc.stdout.splitlines()}
    assert partition == f"slurm_{job}", proc.stdout
    wait_for(f"partition {partition} removed", lambda: partition not in lab.partitions(), 60)


def test_doctor_jobs_says_when_a_node_s_plugstack_does_not_load_the_plugin(configless):
    """The issue's configless failure: plugstack.conf naming the plugin through an absolute include
    (never sent), `required` saying nothing, jobs without their partition's variables, doctor all
    ok. `doctor --jobs` runs a 1-IPU step where jobs run and names the node."""
    lab = configless
    plugstack = lab.spec.path("etc", "plugstack.conf")
    ours = plugstack.read_text()
    doctor = lab.run("slurm-ipu", "doctor", "--jobs", timeout=300)
    assert "ok       steps        a 1-IPU step on node1: each task saw its partition" in doctor.stdout, doctor.stdout
    linked = lab.spec.path("etc", "plugstack.conf.d", "slurm-ipu.conf")
    try:
        # the non-configless advice followed here: the fragment in the site's included directory
        linked.write_text(lab.spec.path("etc", "site", "plugstack-ipu.conf").read_text())
        plugstack.write_text(f"include {lab.spec.path('etc', 'plugstack.conf.d')}/*.conf\n")
        lab.run("scontrol", "reconfigure", check=True)
        cache = lab.spec.path("spool", "node1", "conf-cache", "plugstack.conf")
        wait_for("slurmd has the new plugstack.conf", lambda: cache.read_text(), 30, until=lambda t: "include" in t)
        doctor = lab.run("slurm-ipu", "doctor", "--jobs", timeout=300)
        assert doctor.returncode == 1 and "PROBLEM  steps        a 1-IPU step on node1: its task saw no " \
            "IPUOF_VIPU_API_PARTITION_ID" in doctor.stdout, doctor.stdout
        # and without running a job: the include is one slurmctld does not send
        assert "PROBLEM  plugstack    " in doctor.stdout and "does not send to configless nodes" in doctor.stdout
    finally:
        linked.unlink(missing_ok=True)
        plugstack.write_text(ours)
        lab.run("scontrol", "reconfigure")
        wait_for("slurmd has ours again", lambda: cache.read_text(), 30, until=lambda t: "spank_ipu.so" in t)
