"""ipurun's --update-partition and --reset-partition against a real emulator.
A partition the job's user made (Graphcore's p$SLURM_JOB_ID) is recreated; the job's own, which
Slurm's hooks made and no user may make again, never is."""

from __future__ import annotations

import pytest

from slurm_ipu.errors import SlurmIpuError
from slurm_ipu.launcher import cli, partition

JOB = "4242"


@pytest.fixture
def job_env(tmp_path, monkeypatch):
    """A job's task environment; the run record goes to a private directory."""
    monkeypatch.setattr(partition, "STATE_ROOT", str(tmp_path))
    return {"SLURM_JOB_ID": JOB, "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_CPUS_ON_NODE": "8",
            "IPUOF_VIPU_API_PARTITION_ID": "p4242"}


def launch(client, env, *args):
    opts, extra, command = cli.parse([*args, "true"])
    built = cli.build(opts, extra, command, env, client_factory=lambda: client)
    partition.apply(built.vipu, env, lambda: client)
    return built


def test_update_recreates_a_partition_whose_gcds_do_not_fit(client, job_env):
    client.create_partition("p4242", 8, num_gcds=4, hosts=["node1", "node2"])
    env = dict(job_env, SPANK_IPU_GCDS="4")
    with pytest.raises(SlurmIpuError, match="only 2 instances; use --num-instances 4, or --update-partition=yes"):
        launch(client, env, "--num-instances", "2", "--num-replicas", "8")
    assert client.get_partition("p4242").num_gcds == 4  # a refusal changes nothing
    built = launch(client, env, "--num-instances", "2", "--num-replicas", "8", "--update-partition=yes")
    part = client.get_partition("p4242")
    # One GCD per instance, as PopRun's own partitions: each instance attaches IPUs of its own.
    assert (part.size, part.num_gcds, part.state, part.hosts) == (8, 2, "ACTIVE", ("node1", "node2"))
    assert [i.gcd for i in built.plan.instances()] == [0, 1]
    # The next run reads the new shape from V-IPU: the job's --ipu-gcds (SPANK_IPU_GCDS) still says 4.
    later = cli.build(*cli.parse(["--num-instances", "2", "--num-replicas", "8", "true"]), env,
                      client_factory=lambda: client)
    assert later.plan.num_gcds == 2


def test_update_keeps_a_partition_that_fits(client, job_env, admin):
    client.create_partition("p4242", 8, num_gcds=2)
    before = client.get_partition("p4242").extra
    launch(client, dict(job_env, SPANK_IPU_GCDS="2"), "--num-instances", "4", "--num-replicas", "8",
           "--update-partition=yes")
    assert client.get_partition("p4242").extra == before and "remove" not in admin.stats()


def test_update_to_an_impossible_shape_is_refused_before_anything_changes(client, job_env, admin):
    client.create_partition("p4242", 8)
    with pytest.raises(SlurmIpuError, match="--update-partition: invalid --num-ilds 3 for a partition of 8 IPUs"):
        launch(client, job_env, "--num-instances", "3", "--num-replicas", "6", "--num-ilds", "3", "-H", "node1",
               "--update-partition=yes")
    assert client.get_partition("p4242").state == "ACTIVE" and "remove" not in admin.stats()


def test_a_shape_the_pod_cannot_give_is_refused_by_vipu_and_undone(client, job_env):
    client.create_partition("p4242", 8, hosts=["node1", "node2"])
    with pytest.raises(SlurmIpuError, match="refused p4242 with 4 GCD.s. and 4 ILD.s. .*back as it was"):
        launch(client, job_env, "--num-instances", "4", "--num-replicas", "8", "--num-ilds", "4",
               "--update-partition=yes")  # 4 ILDs are valid for 8 IPUs, but this Pod has one
    part = client.get_partition("p4242")
    assert (part.size, part.num_ilds, part.state, part.hosts) == (8, 1, "ACTIVE", ("node1", "node2"))


def test_a_refused_recreate_puts_the_old_partition_back(client, job_env, admin):
    client.create_partition("p4242", 8, num_gcds=4)
    client.retries = 0
    admin.faults(fail={"count": 1, "code": "RESOURCE_EXHAUSTED", "op": "create"})
    with pytest.raises(SlurmIpuError, match="it is back as it was"):
        launch(client, dict(job_env, SPANK_IPU_GCDS="4"), "--num-instances", "2", "--num-replicas", "8",
               "--update-partition=yes")
    part = client.get_partition("p4242")
    assert (part.num_gcds, part.state) == (4, "ACTIVE")


def test_reset_follows_poprun_from_the_jobs_second_run(client, job_env, admin):
    client.create_partition("p4242", 8)
    args = ("--num-instances", "2", "--num-replicas", "8")
    launch(client, job_env, *args)
    assert admin.stats().get("reset", 0) == 0  # the prolog has just created it
    launch(client, job_env, *args)
    assert admin.stats()["reset"] == 1  # non-reconfigurable: reset between runs
    assert admin.stats()["list"] == 2  # one shape read per launch; the reset's reply said ACTIVE: no polling
    launch(client, job_env, *args, "--reset-partition=no")
    assert admin.stats()["reset"] == 1
    client.create_partition("p4343", 8, reconfigurable=True)
    reconfigurable = dict(job_env, SLURM_JOB_ID="4343", IPUOF_VIPU_API_PARTITION_ID="p4343")
    launch(client, reconfigurable, *args)
    launch(client, reconfigurable, *args)
    assert admin.stats()["reset"] == 1  # reconfigurable: never by default
    launch(client, dict(job_env, SLURM_JOB_ID="4444"), *args, "--reset-partition=yes")
    assert admin.stats()["reset"] == 2  # asked for: even on a first run


def test_update_creates_a_missing_named_partition_and_removes_it_after(client, job_env, admin):
    """PopRun: 'if the partition doesn't exist, PopRun will create a suitable one with the same
    name'; --remove-partition (default yes) removes it when the run ends."""
    args = ("--vipu-partition", "my_partition", "--num-instances", "2", "--num-replicas", "8", "--update-partition=yes")
    with pytest.raises(SlurmIpuError, match="--vipu-partition my_partition: no such partition"):
        launch(client, job_env, *args[:6])
    built = launch(client, job_env, *args)
    part = client.get_partition("my_partition")
    assert (part.size, part.num_gcds, part.reconfigurable, part.state) == (8, 2, False, "ACTIVE")
    assert [i.gcd for i in built.plan.instances()] == [0, 1]
    partition.remove_created(built.vipu, built.opts, lambda: client)
    assert client.get_partition("my_partition") is None
    kept = launch(client, job_env, *args, "--remove-partition=no")
    partition.remove_created(kept.vipu, kept.opts, lambda: client)
    assert client.get_partition("my_partition").state == "ACTIVE"
    client.remove_partition("my_partition")


def test_vipu_allocation_names_where_a_created_partition_goes(client, job_env):
    with pytest.raises(SlurmIpuError, match="allocation"):
        launch(client, job_env, "--vipu-partition", "p2", "--vipu-allocation", "nosuch", "--num-instances", "1",
               "--num-replicas", "4", "--update-partition=yes")
    assert client.get_partition("p2") is None


def test_offline_runs_never_touch_vipu(job_env):
    opts, extra, command = cli.parse(["--offline-mode=1", "--reset-partition=yes", "--update-partition=yes", "true"])
    built = cli.build(opts, extra, command, job_env, client_factory=_no_vipu)
    partition.apply(built.vipu, job_env, _no_vipu)


def _no_vipu():
    raise AssertionError("no V-IPU call expected")


@pytest.mark.parametrize("name", ["slurm_4242", "slurm_4242_3"])
def test_the_job_s_own_partition_is_never_removed_to_reshape_it(client, job_env, admin, name):
    """The hooks made it and no user may make that name again (a site keeps V-IPU to Slurm): a
    job whose user followed the old advice lost its IPUs. Refused before anything changes, with
    advice that works: a multiple of its GCDs now, or the shape asked for at submit."""
    client.create_partition(name, 8, num_gcds=4, hosts=["node1", "node2"])
    env = dict(job_env, IPUOF_VIPU_API_PARTITION_ID=name)
    with pytest.raises(SlurmIpuError, match="only 2 instances; use --num-instances 4, or submit the job with "
                                            "--ipu-gcds=2 for a partition of that shape"):
        launch(client, env, "--num-instances", "2", "--num-replicas", "8")
    with pytest.raises(SlurmIpuError, match=f"--update-partition: {name} is job 4242's own partition .4 GCD.s., 1 "
                                            "ILD.s.., made by Slurm's hooks: ipurun leaves it as it is.* submit the "
                                            "job with --ipu-gcds=2 for this shape"):
        launch(client, env, "--num-instances", "2", "--num-replicas", "8", "--update-partition=yes")
    part = client.get_partition(name)
    assert (part.num_gcds, part.state) == (4, "ACTIVE") and "remove" not in admin.stats()
    launch(client, env, "--num-instances", "4", "--num-replicas", "8")  # the first advice, followed


def test_other_ilds_than_the_partition_s_are_refused_not_ignored(client, job_env, admin):
    """PopRun: a partition of other ILDs is used only after --update-partition recreates it;
    --num-ilds 2 on a 1-ILD partition was accepted and silently not applied."""
    client.create_partition("slurm_4242", 8, hosts=["node1", "node2"])
    env = dict(job_env, IPUOF_VIPU_API_PARTITION_ID="slurm_4242")
    with pytest.raises(SlurmIpuError, match="--num-ilds 2: partition slurm_4242 has 1 ILD.s.; use --num-ilds 1 or "
                                            "leave it out, or submit the job with --ipu-ilds=2"):
        launch(client, env, "--num-instances", "2", "--num-replicas", "8", "--num-ilds", "2")
    client.create_partition("p4242", 8, hosts=["node1", "node2"])
    with pytest.raises(SlurmIpuError, match="use --num-ilds 1 or leave it out, or --update-partition=yes to recreate "
                                            "it with 2 ILD.s."):
        launch(client, job_env, "--num-instances", "2", "--num-replicas", "8", "--num-ilds", "2")
    launch(client, env, "--num-instances", "2", "--num-replicas", "8", "--num-ilds", "1")
    assert "remove" not in admin.stats()


@pytest.fixture
def allocation_job(tmp_path, job_env):
    """A 2-host job of the allocation model, in its batch script: the SPANK plugin names the job's
    own name (slurm_4242), which names no partition there and no user may make."""
    import json

    site = tmp_path / "site.yaml"
    site.write_text(json.dumps({"version": 1, "cluster": "c", "state_dir": str(tmp_path / "state"),
                                "vipu": {"host": "v", "model": "allocation"},
                                "pod": {"ipus": 64, "hosts": "node[1-4]", "ipus_per_host": 16}}))
    return dict(job_env, IPUOF_VIPU_API_PARTITION_ID=f"slurm_{JOB}", SLURM_IPU_SITE=str(site))


@pytest.mark.parametrize("instances,replicas,gcds", [(2, 8, 2), (4, 8, 4), (1, 8, 1), (6, 6, 2)])
def test_on_the_job_s_own_name_in_the_allocation_model_the_run_s_step_gets_its_partition(client, allocation_job,
                                                                                        instances, replicas, gcds):
    """As a plain srun's step: the SPANK plugin makes slurm_<job>_<step> of the step's IPUs, with one
    GCD per instance where V-IPU allows (--ipu-gcds on ipurun's srun); ipurun makes and names
    nothing, so no advice to create a name nobody may make."""
    built = launch(client, allocation_job, "--num-instances", str(instances), "--num-replicas", str(replicas))
    assert built.vipu.step and built.vipu.name is None and built.env["IPURUN_VIPU_PARTITION_ID"] == ""
    assert f"--ipu-gcds={gcds}" in built.srun and built.plan.num_gcds == gcds
    assert client.get_partition(f"slurm_{JOB}") is None  # nothing made here


def test_on_the_job_s_own_name_a_shape_the_hosts_cannot_have_is_refused(client, allocation_job):
    with pytest.raises(SlurmIpuError, match="--num-ilds 2: this run's partition, the 32 IPUs of its hosts"):
        launch(client, allocation_job, "--num-instances", "2", "--num-replicas", "8", "--num-ilds", "2")
    with pytest.raises(SlurmIpuError, match="64 replicas x 1 IPU.s. = 64 IPUs, but partition slurm_4242_<step>"):
        launch(client, allocation_job, "--num-instances", "2", "--num-replicas", "64")
