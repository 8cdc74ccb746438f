"""`slurm-ipu step`, the helper the SPANK plugin runs in srun once per step with IPUs:
what a step's tasks name, seen as srun sees it (the line on stdout, the one-line
refusal on stderr, the exit status), with a fake `vipu` at the subprocess boundary."""

from __future__ import annotations

import pytest

from slurm_ipu import cli

from .conftest import write_conf


@pytest.fixture
def site(tmp_path, monkeypatch):
    def make(model: str, **extra):
        path = write_conf(tmp_path, vipu={"model": model, **extra.pop("vipu", {})}, **extra)
        monkeypatch.setenv("SLURM_IPU_SITE", str(path))
        monkeypatch.delenv("IPUOF_VIPU_API_PARTITION_ID", raising=False)
        return path
    return make


def step(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["step", *args])
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


def test_a_step_of_the_allocation_model_gets_a_partition_of_its_own_and_how_to_remove_it(site, fake, capsys):
    site("allocation", vipu={"emulator": True})  # the emulator takes the hosts (--hosts), a real vipu not
    code, out, err = step(capsys, "start", "42", "3", "4", "4", "16", "node1", "1")
    assert (code, err) == (0, "") and out.splitlines()[0] == "create slurm_42_3"
    made = fake.partitions["slurm_42_3"]
    assert (made["size"], made["allocation"], made["hosts"]) == (4, "c42", ["node1"])
    removal = out.splitlines()[1].split("\t")  # what srun runs at its exit (spank/step.c)
    assert removal == ["/usr/bin/vipu", "--api-host", "v", "--api-port", "8090", "remove", "partition", "slurm_42_3"]
    fake(removal)
    assert fake.partitions == {}


def test_four_steps_get_four_distinct_partitions_and_gcds_pass_through(site, fake, capsys):
    site("allocation")
    for k, node in enumerate(["node1", "node1", "node2", "node2"]):
        assert step(capsys, "start", "7", str(k), "4", "4", "16", node, "2")[1].startswith(f"create slurm_7_{k}\n")
    assert sorted(fake.partitions) == [f"slurm_7_{k}" for k in range(4)]
    assert {p["gcds"] for p in fake.partitions.values()} == {2}


def test_the_user_s_exported_partition_in_the_job_s_allocation_is_kept(site, fake, capsys, monkeypatch):
    site("allocation")
    fake.plant("p42", 16, allocation="c42")
    monkeypatch.setenv("IPUOF_VIPU_API_PARTITION_ID", "p42")
    assert step(capsys, "start", "42", "0", "16", "16", "16", "node1", "1") == (0, "use p42", "")
    assert set(fake.partitions) == {"p42"}


@pytest.mark.parametrize("planted,why", [(None, "does not exist"), ("c41", "is in allocation c41")])
def test_an_exported_partition_elsewhere_is_refused_in_one_line_saying_how(site, fake, capsys, monkeypatch,
                                                                           planted, why):
    site("allocation")
    if planted:
        fake.plant("p41", 16, allocation=planted)
    monkeypatch.setenv("IPUOF_VIPU_API_PARTITION_ID", "p41")
    code, out, err = step(capsys, "start", "42", "0", "16", "16", "16", "node1", "1")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert err == (f"slurm-ipu: step 42.0: IPUOF_VIPU_API_PARTITION_ID=p41 {why}, not in job 42's allocation c42; "
                   "create it there (vipu create partition p41 --allocation c42 --size N) or unset the variable to "
                   "get a partition made for the step")


def test_another_job_s_name_is_the_user_s_choice_not_the_plugin_s(site, fake, capsys, monkeypatch):
    """slurm_420 begins like job 42's names but is not one of them: checked like any exported name."""
    site("allocation")
    monkeypatch.setenv("IPUOF_VIPU_API_PARTITION_ID", "slurm_420")
    code, _, err = step(capsys, "start", "42", "0", "16", "16", "16", "node1", "1")
    assert code == 2 and "IPUOF_VIPU_API_PARTITION_ID=slurm_420 does not exist" in err


def test_the_plugin_s_own_value_is_not_taken_for_the_user_s(site, fake, capsys, monkeypatch):
    """In a batch script (a task) the plugin set IPUOF_VIPU_API_PARTITION_ID to the job's name; a
    nested srun inside a step sees its step's: neither is the user's choice."""
    site("allocation")
    for mine in ("slurm_42", "slurm_42_1"):
        monkeypatch.setenv("IPUOF_VIPU_API_PARTITION_ID", mine)
        code, out, _ = step(capsys, "start", "42", "2", "16", "16", "16", "node1", "1")
        assert (code, out.splitlines()[0]) == (0, "create slurm_42_2")
        fake.partitions.clear()


def test_a_whole_step_with_the_allocation_held_by_the_user_s_partitions_runs_and_is_told(site, fake, capsys):
    """`srun hostname` in a job whose user made their own partitions but exported none: no IPUs
    left for a partition of the step, which still runs, told why in one line."""
    site("allocation")
    fake.free = 0
    code, out, err = step(capsys, "start", "42", "1", "16", "16", "16", "node1", "1")
    assert (code, out) == (0, "") and err.startswith("slurm-ipu: step 42.1: no partition made for it (")
    assert err.endswith("its tasks name slurm_42: export IPUOF_VIPU_API_PARTITION_ID to name one of yours")


def test_a_split_step_without_room_is_refused(site, fake, capsys):
    site("allocation")
    fake.free = 2
    code, out, err = step(capsys, "start", "42", "1", "4", "4", "16", "node1", "1")
    assert (code, out) == (2, "") and "step 42.1: no partition of 4 IPUs for it in job 42's allocation c42" in err
    assert fake.partitions == {}


def test_the_partition_model_refuses_a_step_that_splits_its_nodes_ipus_without_calling_v_ipu(site, fake, capsys):
    site("partition")
    code, out, err = step(capsys, "start", "9", "0", "4", "4", "16", "node1", "1")
    assert (code, out) == (2, "")
    assert err == ("slurm-ipu: step 9.0 asks for 4 IPU(s) per node, but job 9 holds its 16 per node as one V-IPU "
                   "partition (slurm_9), which steps cannot split; leave --gres out of srun to run on the job's "
                   "partition, or run each piece as a job of its own (sbatch --gres=ipu:N, or a job array)")
    assert fake.calls == []


@pytest.mark.parametrize("model,extra", [("partition", {}), ("allocation", {"allocation": {"partition": True}})])
def test_a_step_with_all_of_its_nodes_ipus_keeps_the_job_s_partition(site, fake, capsys, model, extra):
    site(model, **extra)
    assert step(capsys, "start", "9", "0", "16", "16", "16", "node1", "1") == (0, "", "")
    assert fake.calls == []


def test_a_heterogeneous_component_s_step_names_the_component_s_own_partition(site, fake, capsys, monkeypatch):
    """Allocation model: srun passes what it chose for a step to one component's tasks only, so a
    heterogeneous job's components are each held as one partition (the prolog makes it) and their
    steps name it, whatever the batch script's variable (its first component's) says."""
    site("allocation")
    monkeypatch.setenv("IPUOF_VIPU_API_PARTITION_ID", "slurm_20")  # the batch script's, component 0's
    assert step(capsys, "start", "21", "0", "16", "16", "16", "node2", "1", "20") == (0, "", "")
    assert fake.calls == []
    code, out, err = step(capsys, "start", "21", "1", "4", "4", "16", "node2", "1", "20")
    assert (code, out) == (2, "") and "job 21 holds its 16 per node as one V-IPU partition (slurm_21)" in err


def test_a_heterogeneous_component_takes_the_user_s_partition_only_from_its_own_allocation(site, fake, capsys,
                                                                                            monkeypatch):
    """Graphcore's idiom in a component: the user's partition in the component's allocation is
    used; one in another component's (the batch script's export, which every srun inherits) is
    not refused: the component keeps its own."""
    site("allocation")
    fake.plant("p20", 16, allocation="c20")
    fake.plant("p21", 16, allocation="c21")
    monkeypatch.setenv("IPUOF_VIPU_API_PARTITION_ID", "p21")
    assert step(capsys, "start", "21", "0", "16", "16", "16", "node2", "1", "20") == (0, "use p21", "")
    monkeypatch.setenv("IPUOF_VIPU_API_PARTITION_ID", "p20")
    assert step(capsys, "start", "21", "1", "16", "16", "16", "node2", "1", "20") == (0, "", "")
    assert step(capsys, "start", "20", "2", "16", "16", "16", "node1", "1", "20") == (0, "use p20", "")


def test_a_plugin_of_before_heterogeneous_jobs_still_gets_its_answer(site, fake, capsys):
    """Seven arguments (a plugin not yet rebuilt, with the helper upgraded): not heterogeneous."""
    site("allocation")
    assert step(capsys, "start", "42", "3", "4", "4", "16", "node1", "1")[1].startswith("create slurm_42_3\n")
    assert step(capsys, "start", "42", "4", "4", "4", "16", "node1", "1", "0")[1].startswith("create slurm_42_4\n")


@pytest.mark.parametrize("args", [["start", "9", "x", "4", "4", "16", "node1", "1"], ["start", "9"],
                                  ["start", "9", "1", "4", "4", "16", "node[1-", "1"], ["end", "9", "p9"], [],
                                  ["start", "9", "1", "4", "4", "16", "node1", "1", "x"],
                                  ["start", "9", "1", "4", "4", "16", "node1", "1", "0", "extra"]])
def test_bad_arguments_get_one_line_and_exit_2(site, fake, capsys, args):
    site("allocation")
    code, out, err = step(capsys, *args)
    assert (code, out) == (2, "") and len(err.splitlines()) == 1 and err.startswith("slurm-ipu: "), err
    assert fake.calls == []


@pytest.mark.parametrize("nodes,job_nodes,groups", [
    ("node[2-3]", "node[1-4]", "on node[1-2] or node[3-4] (srun -w), on all the job's nodes"),
    ("node[2-3]", "node[2-4]", "on node[3-4] (srun -w), on all the job's nodes"),
    ("node[1-3]", "node[1-4]", "on all the job's nodes"),  # 48 IPUs: no partition size at all
])
def test_a_step_on_hosts_v_ipu_cannot_make_one_partition_of_is_refused_naming_those_it_can(
        site, fake, capsys, monkeypatch, nodes, job_nodes, groups):
    """A job on node[1-4] of a POD64 (16 IPUs a host): a step on node[2-3] would need ag4-ag11, no
    aligned block; V-IPU is not asked, and the line names the groups that work."""
    site("allocation")
    monkeypatch.setenv("SLURM_JOB_NODELIST", job_nodes)
    n = 3 if nodes == "node[1-3]" else 2
    code, out, err = step(capsys, "start", "42", "1", str(16 * n), "16", "16", nodes, "1")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1 and fake.calls == []
    assert err == (f"slurm-ipu: step 42.1 on {nodes}: V-IPU makes one partition of {n} hosts' IPU-Machines only "
                   "where they are an aligned block (docs/vipu.md, \"Where a partition's IPUs may sit\"): run it "
                   f"{groups}, or with --gres=none if it needs no IPUs")


@pytest.mark.parametrize("nodes", ["node[1-2]", "node[3-4]", "node[1-4]", "node3"])
def test_a_step_on_a_group_v_ipu_can_partition_gets_its_partition(site, fake, capsys, monkeypatch, nodes):
    site("allocation")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-4]")
    from slurm_ipu.slurm.hostlist import expand

    n = len(expand(nodes))
    code, out, err = step(capsys, "start", "42", "1", str(16 * n), "16", "16", nodes, "1")
    assert (code, err) == (0, "") and out.splitlines()[0] == "create slurm_42_1"
    assert fake.partitions["slurm_42_1"]["size"] == 16 * n
