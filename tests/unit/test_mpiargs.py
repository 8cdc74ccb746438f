"""The mpirun options PopRun's --mpi-*-args carry, and what each means on srun (one table)."""

from __future__ import annotations

import pytest

from slurm_ipu.errors import ConfigError
from slurm_ipu.launcher import cli, mpiargs
from slurm_ipu.launcher.task import instance_env


def parsed(*argv: str, instances: int = 4):
    opts, _, _ = cli.parse([f"--num-instances={instances}", f"--num-replicas={instances}", *argv, "x"])
    return mpiargs.parse(opts, instances)


@pytest.mark.parametrize("argv,srun,distribution", [
    (["--process-placement=disabled", "--mpi-global-args=--bind-to core"], ["--cpu-bind=cores"], "block"),
    (["--process-placement=disabled", "--mpi-global-args=--bind-to=numa --map-by node"], ["--cpu-bind=ldoms"],
     "cyclic"),
    (["--process-placement=disabled", "--mpi-global-args=-bind-to none -map-by socket"], ["--cpu-bind=none"],
     "block"),
    (["--mpi-global-args=--output-filename /tmp/out"], ["--output=/tmp/out/rank.%t.stdout",
                                                       "--error=/tmp/out/rank.%t.stderr"], "block"),
])
def test_options_with_an_srun_meaning(argv, srun, distribution):
    got = parsed(*argv)
    assert (got.srun, got.distribution) == (srun, distribution)


def test_tag_output_and_exports():
    got = parsed("--mpi-global-args=--tag-output -x A=1 -x PATH", "--mpi-local-args=-x B='two words'",
                 "--instance-mpi-local-args=2:-x C=3", "--instance-mpi-local-args=0:-x C=0")
    assert got.tag_output and got.env == {"A": "1", "B": "two words"}
    assert got.instance_env == {2: {"C": "3"}, 0: {"C": "0"}}
    assert any("-x PATH has no effect" in n for n in got.notes)


def test_per_instance_exports_reach_only_that_instance():
    opts, extra, cmd = cli.parse(["--num-instances=2", "--num-replicas=2", "--offline-mode",
                                  "--mpi-global-args=-x ALL=1", "--instance-mpi-local-args=1:-x ONLY=one", "x"])
    launch = cli.build(opts, extra, cmd, {})
    assert launch.env["ALL"] == "1"
    assert "ONLY" not in instance_env(launch.env, 0, 0) and instance_env(launch.env, 1, 1)["ONLY"] == "one"


@pytest.mark.parametrize("text", ["--mca btl ^openib", "--allow-run-as-root", "--oversubscribe",
                                  "-mca pml ob1 --gmca x y"])
def test_transport_only_options_are_accepted_with_a_note(text):
    got = parsed(f"--mpi-global-args={text}")
    assert got.notes and "no effect on srun" in got.notes[0] and got.srun == [] and got.env == {}


@pytest.mark.parametrize("argv,words", [
    (["--mpi-global-args=--bind-to core"], "--bind-to core needs --process-placement=disabled"),
    (["--process-placement=disabled", "--mpi-global-args=--bind-to l3cache"], "--bind-to l3cache: use one of none"),
    (["--mpi-global-args=--np 4"], "mpirun option '--np' has no meaning on srun"),
    (["--mpi-local-args=--tag-output"], "belong in --mpi-global-args"),
    (["--mpi-global-args=-x"], "-x needs a value"),
    (["--mpi-global-args=-x 1BAD=2"], "is not VAR or VAR=value"),
    (["--mpi-global-args=--mca btl"], "--mca needs a parameter and a value"),
    (["--instance-mpi-local-args=9:-x A=1"], "write 'K:ARGS' with K an instance from 0 to 3"),
    (["--instance-mpi-local-args=-x A=1"], "write 'K:ARGS'"),
    (["--mpi-global-args=--tag-output 'open"], "No closing quotation"),
])
def test_refusals_are_one_line(argv, words):
    with pytest.raises(ConfigError, match=words):
        parsed(*argv)


def test_srun_line_carries_the_translation():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]"}
    opts, extra, cmd = cli.parse(["--num-instances=4", "--num-replicas=4", "--process-placement=disabled",
                                  "--mpi-global-args=--bind-to core --map-by node", "--offline-mode", "x"])
    launch = cli.build(opts, extra, cmd, env)
    assert "--distribution=cyclic" in launch.srun and "--cpu-bind=cores" in launch.srun
    assert [i.host for i in launch.plan.instances()] == ["node1", "node2", "node1", "node2"]
