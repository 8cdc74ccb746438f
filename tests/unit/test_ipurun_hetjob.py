"""ipurun inside a heterogeneous job: the batch script sees its first component's SLURM_JOB_ID and
nodes, and each component's own as SLURM_JOB_ID_HET_GROUP_<n> and SLURM_JOB_NODELIST_HET_GROUP_<n>.
Each component that asks for IPUs has its own partition. ipurun runs its
instances in the component srun's --het-group names (else the first), on that component's nodes,
and says in one line when that component has no IPUs."""

from __future__ import annotations

import pytest

from slurm_ipu.errors import SlurmIpuError
from slurm_ipu.launcher import cli

from .test_ipurun_cli import vipu_with

# A batch script's environment in `sbatch -N2 --gres=ipu:16 : -n1` (Slurm 22.05 sets both names).
BATCH = {"SLURM_JOB_ID": "20", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_HET_SIZE": "2", "SLURM_PACK_SIZE": "2",
         "SLURM_JOB_ID_HET_GROUP_0": "20", "SLURM_JOB_ID_HET_GROUP_1": "21",
         "SLURM_JOB_ID_PACK_GROUP_0": "20", "SLURM_JOB_ID_PACK_GROUP_1": "21",
         "SLURM_JOB_NODELIST_HET_GROUP_0": "node[1-2]", "SLURM_JOB_NODELIST_HET_GROUP_1": "node3",
         "SLURM_JOB_NODELIST_PACK_GROUP_0": "node[1-2]", "SLURM_JOB_NODELIST_PACK_GROUP_1": "node3",
         "IPUOF_VIPU_API_PARTITION_ID": "slurm_20"}


def launch(argv, env=BATCH, **partitions):
    ns, extra, cmd = cli.parse([*argv, "x"])
    return cli.build(ns, extra, cmd, dict(env), client_factory=vipu_with(**partitions)[1])


@pytest.mark.parametrize("group", [[], ["--het-group=0"]])
def test_the_first_component_s_ipus_are_ipurun_s_by_default(group):
    got = launch(["--num-instances", "2", "--num-replicas", "4", *group], slurm_20=(32, 1))
    assert list(got.plan.hosts) == ["node1", "node2"] and got.vipu.name == "slurm_20"
    assert group == [] or "--het-group=0" in got.srun


def test_another_component_has_its_own_nodes_and_no_ipus_said_in_one_line():
    with pytest.raises(SlurmIpuError, match=r"partition slurm_21 does not exist: component 1 of this heterogeneous "
                                            r"job \(job 21\) has no IPUs; run ipurun with --het-group=N"):
        launch(["--num-instances", "1", "--num-replicas", "1", "--het-group=1"], slurm_20=(32, 1))
    got = launch(["--num-instances", "1", "--num-replicas", "1", "--het-group=1", "--offline-mode=yes"])
    assert list(got.plan.hosts) == ["node3"]


def test_22_05_s_own_srun_allocation_names_its_components_pack_group():
    env = {k: v for k, v in BATCH.items() if "HET_GROUP" not in k and k != "SLURM_HET_SIZE"}
    with pytest.raises(SlurmIpuError, match="component 1 of this heterogeneous job"):
        launch(["--num-instances", "1", "--num-replicas", "1", "--het-group=1"], env, slurm_20=(32, 1))


@pytest.mark.parametrize("group,words", [("0,1", "runs its instances in one component"),
                                         ("2", "has 2 components \\(0 to 1\\)")])
def test_a_het_group_ipurun_cannot_run_on_is_refused_in_one_line(group, words):
    with pytest.raises(SlurmIpuError, match=words):
        launch(["--num-instances", "1", "--num-replicas", "1", f"--het-group={group}"], slurm_20=(32, 1))


def test_het_group_outside_a_heterogeneous_job_is_refused():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node1"}
    with pytest.raises(SlurmIpuError, match="job 7 is not a heterogeneous job; leave --het-group out"):
        launch(["--num-instances", "1", "--num-replicas", "1", "--het-group=1"], env, slurm_7=(16, 1))


def test_the_user_s_own_export_is_kept():
    env = dict(BATCH, IPUOF_VIPU_API_PARTITION_ID="mine")
    got = launch(["--num-instances", "1", "--num-replicas", "1"], env, mine=(16, 1))
    assert got.vipu.name == "mine"
