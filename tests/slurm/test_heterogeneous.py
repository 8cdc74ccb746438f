"""Heterogeneous jobs on both V-IPU models, as a user writes them: `srun --gres=ipu:N B : A`,
`srun A : --gres=ipu:N B`, an `#SBATCH hetjob` script running `srun --het-group=...` and ipurun.
Each component that asks for IPUs gets its own partition, named after its own job id (Slurm gives
a later component no licence: its GRES sizes it); every one of its tasks names it and attaches,
whichever components a step spans; the slurm-ipu service's pass leaves it alone while the job runs;
nothing is left after the job.

Why the component's whole partition in the allocation model too (docs/slurm.md): srun tells the
partition it chose for a step spanning components to one component's tasks only."""

from __future__ import annotations

import pytest

from ..waiting import wait_for
from .conftest import parse_probe, queue, started_lab, user_probe_script, wait_queue_empty

# Heterogeneous jobs start from the backfill pass only (the lab's bf_interval: 5 s).
START = 120


@pytest.fixture(scope="module", params=["partition", "allocation"])
def hlab(request):
    if request.param == "partition":
        yield request.getfixturevalue("lab")
        return
    with started_lab(nodes=4, model="allocation") as handle:
        yield handle


@pytest.fixture
def clean(hlab, users):
    wait_queue_empty(hlab)
    yield hlab
    jobs = queue(hlab)
    if jobs:
        hlab.run("scancel", *jobs)


def allocations(lab) -> set[str]:
    api = lab.admin()
    try:
        return {a["id"] for a in api.allocations()} - {"default"}
    finally:
        api.close()


def nothing_left(lab, *jobs: int) -> None:
    """No partition or allocation of any of the jobs' components, nor of their steps."""
    def ours(name: str) -> bool:
        return any(name in (f"slurm_{j}", f"c{j}") or name.startswith(f"slurm_{j}_") for j in jobs)

    wait_for(f"jobs {jobs}: nothing left in V-IPU", lambda: sorted(filter(ours, set(lab.partitions()) |
                                                                           allocations(lab))),
             60, until=lambda names: names == [])


def submit_as(lab, user: str, script: str) -> int:
    path = lab.spec.path("users", f"het-{abs(hash(script))}.sh")
    path.write_text(script)
    path.chmod(0o755)
    proc = lab.run_as(user, "sbatch", "--parsable", str(path))
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().split(";")[0])


def wait_done(lab, job: int) -> None:
    wait_for(f"heterogeneous job {job} to end", lambda: lab.state(job), START + 60,
             until=lambda s: s in ("COMPLETED", "FAILED", "CANCELLED", "GONE", "TIMEOUT"))


def attached(text: str) -> dict[str, list[int]]:
    """{partition: IPUs} of every task that attached."""
    _, attaches = parse_probe(text)
    return {a["partition"]: a["ipus"] for a in attaches if a.get("partition") and a["ipus"]}


def test_srun_with_ipus_in_its_first_component_attaches_there(clean, users):
    lab = clean
    probe = user_probe_script(lab)
    proc = lab.run_as(users[0], "srun", "-n1", "--gres=ipu:16", probe, ":", "-n1", probe, timeout=START + 60)
    assert proc.returncode == 0, proc.stderr
    probes, _ = parse_probe(proc.stdout)
    assert len(probes) == 2, proc.stdout
    first = min(int(p[4].rpartition("_")[2]) for p in probes)
    got = attached(proc.stdout)
    assert list(got) == [f"slurm_{first}"] and len(got[f"slurm_{first}"]) == 16, proc.stdout
    assert "does not exist" not in proc.stderr and "no partition made" not in proc.stderr, proc.stderr
    nothing_left(lab, first, first + 1)


def test_srun_with_ipus_in_a_later_component_attaches_there(clean, users, hlab):
    """`srun A : --gres=ipu:N B`, the Slurm GPU habit: the component that asks gets its own
    partition (Slurm gives it no licence: its GRES sizes it), under its own job id; SPANK's
    --ipus and --ipu-gcds belong to the component they are typed for."""
    lab = clean
    probe = user_probe_script(lab)
    cases = [(["-n1", probe, ":", "-n1", "--gres=ipu:16", probe], 1, 16, 1),
             (["-n1", probe, ":", "-N2", "-n2", "--ipus=32", "--ipu-gcds=2", probe], 1, 32, 2),
             (["--ipus=16", "-n1", probe, ":", "-n1", probe], 0, 16, 1)]  # the second asks for none
    for args, which, size, gcds in cases:
        proc = lab.run_as(users[0], "srun", *args, timeout=START + 60)
        assert proc.returncode == 0, proc.stderr
        probes, _ = parse_probe(proc.stdout)
        first = min(int(p[4].rpartition("_")[2]) for p in probes)
        got = attached(proc.stdout)
        name = f"slurm_{first + which}"
        assert list(got) == [name] and len(got[name]) == size // gcds, (args, proc.stdout)  # a GCD's IPUs
        attaches = [a for a in parse_probe(proc.stdout)[1] if a.get("partition") == name]
        assert len(attaches) == (2 if size == 32 else 1), proc.stdout
        log = lab.spec.path("state", "hooks.log").read_text()
        made = f"partition {name} ACTIVE, {size} IPUs, {gcds} GCD(s)" if lab.spec.model != "allocation" else \
            f"allocation c{first + which} of"
        assert made in log, log[-2000:]
        nothing_left(lab, first, first + 1)


LATER = """#!/bin/bash
#SBATCH -n1 -o {out}
#SBATCH hetjob
#SBATCH -n1 --gres=ipu:16
echo "IDS $SLURM_JOB_ID $SLURM_JOB_ID_HET_GROUP_1"
srun --het-group=1 {probe}
echo "RC1 $?"
ipurun --num-instances 1 --num-replicas 1 {probe}
echo "RCI $?"
ipurun --het-group=1 --num-instances 1 --num-replicas 1 {probe}
echo "RCH $?"
"""


def test_a_hetjob_script_with_ipus_in_its_second_component(clean, users):
    """The second #SBATCH block asks for IPUs: its steps attach to its own partition; ipurun, like
    srun, runs in the first component unless told, says so, and following its advice works."""
    lab = clean
    out = lab.spec.path("users", "later-%j.out")
    job = submit_as(lab, users[1], LATER.format(out=out, probe=user_probe_script(lab)))
    wait_done(lab, job)
    text = lab.spec.path("users", f"later-{job}.out").read_text()
    assert "RC1 0" in text and "RCH 0" in text, text
    assert "RCI 0" not in text and "RCI" in text and "run ipurun with --het-group=N" in text, text
    got = attached(text)
    assert list(got) == [f"slurm_{job + 1}"] and len(got[f"slurm_{job + 1}"]) == 16, text
    assert len([a for a in parse_probe(text)[1] if a.get("partition") == f"slurm_{job + 1}"]) == 2, text
    nothing_left(lab, job, job + 1)


HETJOB = """#!/bin/bash
#SBATCH -N1 --gres=ipu:16 -o {out}
#SBATCH hetjob
#SBATCH -n1
echo "IDS $SLURM_JOB_ID $SLURM_JOB_ID_HET_GROUP_1"
srun --het-group=0 {probe}
echo "RC0 $?"
srun --het-group=0,1 {probe}
echo "RC01 $?"
srun --het-group=1 {probe}
echo "RC1 $?"
ipurun --num-instances 1 --num-replicas 1 {probe}
echo "RCI $?"
touch {ready}
for i in $(seq 600); do [ -e {go} ] && break; sleep 0.2; done
"""


def test_a_hetjob_script_s_steps_and_ipurun_reach_the_first_component_s_ipus(clean, users):
    """Every step with the first component's tasks attaches to its partition (`srun --het-group=1`
    names the second's, which has none); ipurun runs there too; the slurm-ipu service's reap, run while
    the job runs, leaves the partition alone; the job's end removes it."""
    lab = clean
    ready, go = lab.spec.path("users", "het-ready"), lab.spec.path("users", "het-go")
    for path in (ready, go):
        path.unlink(missing_ok=True)
    out = lab.spec.path("users", "hetjob-%j.out")
    job = submit_as(lab, users[1], HETJOB.format(out=out, probe=user_probe_script(lab), ready=ready, go=go))
    wait_for("the script's steps to end", ready.exists, START + 60)
    name = f"slurm_{job}"
    assert name in lab.partitions()
    reap = lab.run(str(lab.spec.path("bin", "slurm-ipu")), "reap", "--site", lab.site)
    assert reap.returncode == 0 and name in lab.partitions(), reap.stdout + reap.stderr
    go.touch()
    wait_done(lab, job)
    text = lab.spec.path("users", f"hetjob-{job}.out").read_text()
    assert next(line.split()[1:] for line in text.splitlines() if line.startswith("IDS ")) == [str(job), str(job + 1)]
    assert "RC0 0" in text and "RC01 0" in text and "RCI 0" in text, text
    _, attaches = parse_probe(text)
    mine = [a for a in attaches if a.get("partition") == name and len(a["ipus"]) == 16]
    assert len(mine) == 3, text  # --het-group=0, the first component's task of 0,1, and ipurun's instance
    assert f"slurm_{job + 1}" not in attached(text), text
    nothing_left(lab, job, job + 1)


GRAPHCORE = """#!/bin/bash
#SBATCH -N1 --gres=ipu:16 -o {out}
#SBATCH hetjob
#SBATCH -n1
vipu remove partition slurm_$SLURM_JOB_ID && \
  vipu create partition p$SLURM_JOB_ID --allocation c$SLURM_JOB_ID --size 16 && echo MADE
export IPUOF_VIPU_API_PARTITION_ID=p$SLURM_JOB_ID
srun --het-group=0 {probe}
"""

# IPUs in the second component: its own id is SLURM_JOB_ID_HET_GROUP_1 (SLURM_JOB_ID is the first's).
GRAPHCORE_LATER = """#!/bin/bash
#SBATCH -n1 -o {out}
#SBATCH hetjob
#SBATCH -N1 --gres=ipu:16
J=$SLURM_JOB_ID_HET_GROUP_1
vipu remove partition slurm_$J && vipu create partition p$J --allocation c$J --size 16 && echo MADE
export IPUOF_VIPU_API_PARTITION_ID=p$J
srun --het-group=1 {probe}
"""


@pytest.mark.parametrize("script,which", [(GRAPHCORE, 0), (GRAPHCORE_LATER, 1)])
def test_graphcore_s_own_partition_in_the_job_s_allocation_is_what_its_tasks_name(clean, users, hlab, script, which):
    """docs/slurm.md's form of Graphcore's `c$SLURM_JOB_ID` idiom in a heterogeneous job: the
    component's allocation is held by its partition until the user removes that."""
    if hlab.spec.model != "allocation":
        pytest.skip("the allocation model's idiom")
    lab = clean
    out = lab.spec.path("users", "graphcore-%j.out")
    job = submit_as(lab, users[0], script.format(out=out, probe=user_probe_script(lab)))
    wait_done(lab, job)
    text = lab.spec.path("users", f"graphcore-{job}.out").read_text()
    assert "MADE" in text, text
    got = attached(text)
    mine = f"p{job + which}"
    assert list(got) == [mine] and len(got[mine]) == 16, text
    nothing_left(lab, job, job + 1)
    assert mine not in lab.partitions()


FIRST_BLOCK = """#!/bin/bash
#SBATCH -n1 --ipus=16 -o /dev/null
#SBATCH hetjob
#SBATCH -n1
true
"""


def test_sbatch_gives_each_component_the_ipu_options_typed_for_it(clean, users):
    """sbatch keeps one SPANK job environment for every component and re-reads its own options
    from its environment for each: --ipus given for the first would size the second too. Each
    component gets what was typed for it, on the command line or in its #SBATCH block."""
    lab = clean
    path = lab.spec.path("users", "first-block.sh")
    path.write_text(FIRST_BLOCK)
    path.chmod(0o755)
    cases = [(["--ipus=16", "-n1", "-o", "/dev/null", "--wrap", "true", ":", "-n1", "--wrap", "true"], [True, False]),
             ([str(path)], [True, False]),
             (["--ipu=16", "-n1", "-o", "/dev/null", "--wrap", "true", ":", "-n1", "--ipus=16", "--wrap", "true"],
              [True, True])]
    for args, want in cases:
        proc = lab.run_as(users[0], "sbatch", "--parsable", *args)
        assert proc.returncode == 0, proc.stderr
        job = int(proc.stdout.strip().split(";")[0].split("+")[0])
        wait_done(lab, job)
        lines = lab.spec.path("state", "hooks.log").read_text().splitlines()
        made = [any(f"job {job + k}: " in line and ("ACTIVE" in line or f"allocation c{job + k} of" in line)
                    for line in lines) for k in range(2)]  # each component's partition (or allocation) made
        assert made == want, (args, want, lines[-10:])
        nothing_left(lab, job, job + 1)
