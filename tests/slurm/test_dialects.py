"""Scripts written for Graphcore's own Slurm integrations run unchanged: `--ipus=N`,
the job's total, on sbatch, srun and salloc, by a user who is not root. Each command line is
verbatim what such a script types, with the behaviour it must have."""

from __future__ import annotations

import pytest

from .conftest import GRES, wait_gone, wait_no_partitions

pytestmark = pytest.mark.usefixtures("users")
USER = "slurmipu-a"


# What a task sees (no Python: the user's tasks must not need root's interpreter).
PROBE = 'echo "PROBE $SLURMD_NODENAME $IPUOF_VIPU_API_HOST $IPUOF_VIPU_API_PARTITION_ID"'


def probes(text: str) -> list[list[str]]:
    return [line.split()[1:] for line in text.splitlines() if line.startswith("PROBE ")]


def created(lab, job: int) -> str:
    """The prolog's line for the job's partition: size and hosts."""
    lines = [ln for ln in lab.spec.path("state", "hooks.log").read_text().splitlines()
             if f"job {job}: partition slurm_{job} ACTIVE" in ln]
    assert lines, f"no partition made for job {job}"
    return lines[-1]


def test_srun_ipus_4_gets_a_partition_of_4_and_the_variables(clean_lab):
    lab = clean_lab
    proc = lab.run_as(USER, "srun", "--ipus=4", "bash", "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    (_node, host, partition), = probes(proc.stdout)
    job = int(partition.removeprefix("slurm_"))
    assert host == "127.0.0.1" and ", 4 IPUs, 1 GCD(s), hosts node" in created(lab, job)
    wait_no_partitions(lab, 30, "its partition removed")


def test_sbatch_ipus_1_with_an_output_file(clean_lab):
    lab = clean_lab
    log = lab.spec.path("users", "ipus1.log")
    script = lab.spec.path("users", "job.sh")
    script.write_text("#!/bin/bash\necho PART=$IPUOF_VIPU_API_PARTITION_ID\n")
    script.chmod(0o755)
    proc = lab.run_as(USER, "sbatch", "--parsable", "--ipus=1", f"--output={log}", str(script))
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip())
    info = lab.job(job)
    assert info["TresPerNode"] == f"{GRES}ipu:1" and info["Licenses"] == "ipu:1", info
    wait_gone(lab, job)
    assert log.read_text().strip() == f"PART=slurm_{job}"
    assert ", 1 IPUs," in created(lab, job)
    wait_no_partitions(lab, 30, "its partition removed")


def test_srun_ipus_inside_a_job_is_refused_unless_it_is_the_job_s_own(clean_lab):
    """--ipus sizes a job, and on this site (the partition
    model) a step runs on its job's partition, so `srun --ipus=4` inside a 16-IPU allocation used to
    be accepted and ignored; now it is refused in one line, and its advice (leave --ipus out) runs.
    srun's own re-reading of the job's --ipus (every srun in an `sbatch --ipus` job) still runs."""
    lab = clean_lab
    inner = ("srun --ipus=4 true; echo rc=$?; srun --ipus=16 printenv IPUOF_VIPU_API_PARTITION_ID; "
             "srun printenv IPUOF_VIPU_API_PARTITION_ID")
    proc = lab.run_as(USER, "salloc", "--ipus=16", "-N1", "bash", "-c", inner)
    assert proc.returncode == 0, proc.stderr
    job = proc.stderr.split("Granted job allocation ")[1].split()[0]
    assert f"srun: error: spank_ipu: --ipus=4 inside job {job}: --ipus sizes a job, not a step, and a step runs " \
           "on its job's partition; leave --ipus out, or run the work as a job of its own (sbatch --ipus=4)" \
           in proc.stderr
    assert proc.stdout.split() == ["rc=1", f"slurm_{job}", f"slurm_{job}"], proc.stdout
    wait_no_partitions(lab, 30, "its partition removed")


def test_a_step_splitting_its_nodes_ipus_is_refused_and_whole_node_steps_keep_the_job_s(clean_lab):
    """On a site of the partition model: a job's IPUs are one V-IPU partition,
    which steps cannot split. A GPU-style step over part of a node's IPUs used to get the whole
    partition silently; it is refused in one line (its tasks never start, the job goes on), and
    its advice runs. Steps with all of their nodes' IPUs, on all or some of the job's nodes, keep
    the job's partition: nothing new for them, and no call to V-IPU."""
    lab = clean_lab
    inner = ("srun -N1 -n1 --gres=ipu:4 printenv IPUOF_VIPU_API_PARTITION_ID; echo rc=$?; "
             "srun -N2 -n2 printenv IPUOF_VIPU_API_PARTITION_ID; "
             "srun -N1 -n1 printenv IPUOF_VIPU_API_PARTITION_ID; "
             "srun -N1 -n1 --gres=ipu:8 printenv IPUOF_VIPU_API_PARTITION_ID")
    proc = lab.run_as(USER, "salloc", "-N2", "--gres=ipu:8", "bash", "-c", inner)
    assert proc.returncode == 0, proc.stderr
    job = proc.stderr.split("Granted job allocation ")[1].split()[0]
    assert f"slurm-ipu: step {job}.0 asks for 4 IPU(s) per node, but job {job} holds its 8 per node as one V-IPU " \
           f"partition (slurm_{job}), which steps cannot split; leave --gres out of srun to run on the job's " \
           "partition, or run each piece as a job of its own (sbatch --gres=ipu:N, or a job array)" in proc.stderr
    assert proc.stdout.split() == ["rc=1"] + [f"slurm_{job}"] * 4, proc.stdout + proc.stderr
    wait_no_partitions(lab, 30, "its partition removed")


def test_salloc_ipus_8_on_two_nodes_spreads_4_per_node(clean_lab):
    lab = clean_lab
    proc = lab.run_as(USER, "salloc", "--ipus=8", "-N2", "srun", "bash", "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    seen = probes(proc.stdout)
    assert len(seen) == 2 and len({p[0] for p in seen}) == 2 and len({p[2] for p in seen}) == 1, seen
    job = int(seen[0][2].removeprefix("slurm_"))
    assert ", 8 IPUs," in created(lab, job)
    wait_no_partitions(lab, 30, "its partition removed")


@pytest.mark.parametrize("refused,advice,followed", [
    (["--ipus=8", "-N3"], "for 8 IPUs use -N 1, 2, 4", ["--ipus=8", "-N2"]),
    (["--ipus=7", "-N2"], "on 2 node(s) ask for one of 2, 4, 8, 16, 32 IPUs", ["--ipus=8", "-N2"]),
    (["--gres=ipu:4", "-N3"], "no partition size spreads evenly over 3 nodes: use -N 1, 2, 4", ["--gres=ipu:4", "-N4"]),
    # a per-node count over a host's IPUs: "-N 4" alone would have asked for 4 x 64
    (["--gres=ipu:64", "-N1"], "for 64 IPUs use -N 4 --gres=ipu:16 (IPUs per node), or --ipus=64 -N 4",
     ["-N4", "--gres=ipu:16"]),
    (["--gres=ipu:32", "-N1"], "for 32 IPUs use -N 2 --gres=ipu:16", ["-N2", "--gres=ipu:16"]),
    (["--ipus=64", "-N1"], "puts 64 IPUs on a node; a node has 16: use -N 4 or more", ["--ipus=64", "-N4"]),
    # a near miss of the GRES name: Slurm alone says "Invalid generic resource (gres) specification"
    (["--gres=ipus:4"], "--gres=ipus:4 names no GRES here: IPUs are --gres=ipu:4", ["--gres=ipu:4"]),
    # GPU habits on a cluster without GPUs (the lab's GresTypes has none): Slurm alone says only
    # "Invalid generic resource (gres) specification"
    (["--gpus=4"], "--gpus=4 asks for GPUs, and this cluster has none: ask for IPUs with --ipus=4", ["--ipus=4"]),
    (["--gpus-per-node=ipu:4", "-N2"], "asks for GPUs of type ipu: ask for IPUs with --gres=ipu:4 (IPUs per node)",
     ["--gres=ipu:4", "-N2"]),
])
def test_a_refusal_s_advice_when_followed_is_accepted(clean_lab, refused, advice, followed):
    """`-N3 --ipus=8` used to say 'use a multiple of 3 IPUs', which no size is;
    `--gpus=4` got no hint."""
    lab = clean_lab
    proc = lab.run_as(USER, "sbatch", "--test-only", *refused, "--wrap", "true")
    assert proc.returncode != 0 and advice in proc.stderr, proc.stderr
    proc = lab.run_as(USER, "sbatch", "--test-only", *followed, "--wrap", "true")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("args,line", [
    (["--ipus=3"], "slurm-ipu: --ipus=3 on 1 node(s) asks for 3 IPUs, not a valid partition size"),
    (["--ipus=8", "-N3"], "slurm-ipu: --ipus=8 does not spread evenly over 3 node(s); no partition size spreads "
                          "evenly over 3 nodes: for 8 IPUs use -N 1, 2, 4"),
    (["--ipus=8", "-N2", "--gres=ipu:2"], "slurm-ipu: --ipus=8 and --gres=ipu:2 on 2 node(s) (4 IPUs) disagree"),
    (["--ipus=32"], "slurm-ipu: --ipus=32 on 1 node(s) puts 32 IPUs on a node; a node has 16: use -N 2 or more"),
    (["--ipus=0"], "spank_ipu: --ipus=0: not a number of IPUs from 1 to 65536"),
])
@pytest.mark.parametrize("tool", ["sbatch", "srun", "salloc"])
def test_bad_ipus_requests_are_refused_at_submit(clean_lab, args, line, tool):
    lab = clean_lab
    proc = lab.run_as(USER, tool, *args, *(["--wrap", "true"] if tool == "sbatch" else ["true"]))
    assert proc.returncode != 0 and line in proc.stderr, proc.stderr
    assert lab.run("squeue", "-h").stdout == ""


def test_ipu_4_is_ipus_4_and_only_srun_offers_ipurun_s_own_option(clean_lab):
    """`--ipu=4` was an ambiguous abbreviation, and sbatch/salloc --help listed
    ipurun's internal --ipu-instance (Slurm has no hidden SPANK options: it is offered to srun only)."""
    lab = clean_lab
    for tool in ("sbatch", "salloc"):
        shown = lab.run_as(USER, tool, "--help").stdout
        assert "--ipu=N" in shown and "--ipus=N" in shown and "--ipu-instance" not in shown, shown
    assert "--ipu-instance" in lab.run_as(USER, "srun", "--help").stdout
    # inside the job, srun re-reads the job's --ipu=8 (not --ipus) and must not take it for a new ask
    proc = lab.run_as(USER, "salloc", "--ipu=8", "-N2", "srun", "bash", "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    seen = probes(proc.stdout)
    assert len(seen) == 2 and len({p[2] for p in seen}) == 1, seen
    assert ", 8 IPUs," in created(lab, int(seen[0][2].removeprefix("slurm_")))
    wait_no_partitions(lab, 30, "its partition removed")


def test_an_exclusive_job_s_partition_licence_and_accounting_agree(clean_lab):
    """`sbatch --exclusive --gres=ipu:4`: Slurm allocates and accounts the node's every GRES
    (gres/ipu=16), and the job's partition and licence said 4. All three are the node's 16 now,
    and the user is told so at submit."""
    from ..waiting import wait_for

    lab = clean_lab
    proc = lab.run_as(USER, "sbatch", "--parsable", "--exclusive", "-N1", "--gres=ipu:4", "-o", "/dev/null",
                      "--wrap", "true")
    assert proc.returncode == 0, proc.stderr
    assert "4 IPUs per node raised to 16: --exclusive gives the job its nodes' every IPU" in proc.stderr, proc.stderr
    job = int(proc.stdout.strip())
    wait_gone(lab, job)
    assert ", 16 IPUs," in created(lab, job)
    tres = wait_for(f"accounting has job {job}'s allocation", lambda: lab.run(
        "sacct", "-j", str(job), "-X", "-n", "-P", "-o", "AllocTRES").stdout.strip(), 60,
        until=lambda text: "gres/ipu" in text and "license/ipu" in text)
    assert "gres/ipu=16" in tres and "license/ipu=16" in tres, tres
    wait_no_partitions(lab, 30, "its partition removed")
