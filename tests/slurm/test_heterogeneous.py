"""Heterogeneous jobs on both V-IPU models, as a user writes them: `srun A : --gres=ipu:N B`, an
`#SBATCH hetjob` script running `srun --het-group=...`, and IPUs in every component. Each
component that asks for IPUs gets a partition of its own, named after its own job id (Slurm runs
the hooks once per component); every IPU task names one that exists and attaches to it; the hook
service's pass leaves a running component's partition alone; nothing is left after the job.

Why a component's whole partition, in the allocation model too (docs/slurm.md): srun tells the
partition it chose for a step to one component's tasks only, so a step's own partition could not
reach the others."""

from __future__ import annotations

import pytest

from ..waiting import wait_for
from .conftest import parse_probe, queue, started_lab, wait_queue_empty

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


# conftest's probe, run by a user: the lab's own vipu-emu, not root's interpreter.
PROBE = """#!/bin/bash
echo "PROBE $SLURMD_NODENAME ${SLURM_PROCID:-b} $IPUOF_VIPU_API_HOST $IPUOF_VIPU_API_PORT \\
$IPUOF_VIPU_API_PARTITION_ID cfg=${IPUOF_CONFIG_PATH:-unset}"
echo "ATTACH $(vipu-emu attach 2>&1)"
"""


def probe_script(lab) -> str:
    path = lab.spec.path("users", "user-probe")
    if not path.exists():
        path.write_text(PROBE)
        path.chmod(0o755)
    return str(path)


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


def test_srun_with_ipus_in_its_second_component_attaches_there(clean, users):
    lab = clean
    probe = probe_script(lab)
    proc = lab.run_as(users[0], "srun", "-n1", probe, ":", "-n1", "--gres=ipu:16", probe, timeout=START + 60)
    assert proc.returncode == 0, proc.stderr
    probes, attaches = parse_probe(proc.stdout)
    assert len(probes) == 2, proc.stdout
    names = sorted(p[4] for p in probes)  # slurm_<first component>, slurm_<second component>
    first, second = (int(n.rpartition("_")[2]) for n in names)
    assert second == first + 1, names
    got = attached(proc.stdout)
    assert list(got) == [f"slurm_{second}"] and len(got[f"slurm_{second}"]) == 16, proc.stdout
    assert "does not exist" not in proc.stderr and "no partition made" not in proc.stderr, proc.stderr
    nothing_left(lab, first, second)


HETJOB = """#!/bin/bash
#SBATCH -n1 -o {out}
#SBATCH hetjob
#SBATCH -n1 --gres=ipu:16
echo "IDS $SLURM_JOB_ID $SLURM_JOB_ID_HET_GROUP_1"
srun --het-group=1 {probe}
echo "RC1 $?"
srun --het-group=0,1 {probe}
echo "RC01 $?"
"""


def test_a_hetjob_script_s_srun_reaches_the_ipus_of_its_component(clean, users):
    """The batch script runs in component 0 (no IPUs) with its variable naming component 0's
    partition; `srun --het-group=1` once refused that as the user's choice (allocation model)."""
    lab = clean
    out = lab.spec.path("users", "hetjob-%j.out")
    job = submit_as(lab, users[0], HETJOB.format(out=out, probe=probe_script(lab)))
    wait_done(lab, job)
    text = lab.spec.path("users", f"hetjob-{job}.out").read_text()
    ids = next(line.split()[1:] for line in text.splitlines() if line.startswith("IDS "))
    assert ids == [str(job), str(job + 1)], text
    assert "RC1 0" in text and "RC01 0" in text, text
    got = attached(text)
    assert list(got) == [f"slurm_{job + 1}"] and len(got[f"slurm_{job + 1}"]) == 16, text
    _, attaches = parse_probe(text)
    assert sum(1 for a in attaches if a.get("partition") == f"slurm_{job + 1}") == 2, text  # both sruns' tasks
    nothing_left(lab, job, job + 1)


BOTH = """#!/bin/bash
#SBATCH -N1 -o {out}
#SBATCH --gres=ipu:16
#SBATCH hetjob
#SBATCH -N1 --gres=ipu:16
srun --het-group=0,1 {probe}
echo "RC $?"
touch {ready}
for i in $(seq 600); do [ -e {go} ] && break; sleep 0.2; done
srun --het-group=0,1 {probe}
"""


def test_every_component_with_ipus_gets_its_own_and_keeps_it_through_the_reap(clean, users):
    """Two components of 16 IPUs each: two partitions, each component's tasks on their own, both
    left alone by a pass of the hook service's reap while the job runs, both gone at its end."""
    lab = clean
    ready, go = lab.spec.path("users", "het-ready"), lab.spec.path("users", "het-go")
    for path in (ready, go):
        path.unlink(missing_ok=True)
    out = lab.spec.path("users", "both-%j.out")
    job = submit_as(lab, users[1], BOTH.format(out=out, probe=probe_script(lab), ready=ready, go=go))
    wait_for("the first step to end", ready.exists, START + 60)
    mine = {f"slurm_{job}", f"slurm_{job + 1}"}
    assert mine <= set(lab.partitions())
    reap = lab.run(str(lab.spec.path("bin", "slurm-ipu")), "reap", "--site", lab.site)
    assert reap.returncode == 0, reap.stderr
    assert mine <= set(lab.partitions()), reap.stdout + reap.stderr
    go.touch()
    wait_done(lab, job)
    text = lab.spec.path("users", f"both-{job}.out").read_text()
    _, attaches = parse_probe(text)
    assert "RC 0" in text, text
    by_name = sorted(a["partition"] for a in attaches if a["ipus"])
    assert by_name == sorted(2 * sorted(mine)), text  # each component's task, twice
    assert all(len(a["ipus"]) == 16 for a in attaches), text
    nothing_left(lab, job, job + 1)


GRAPHCORE = """#!/bin/bash
#SBATCH -n1 -o {out}
#SBATCH hetjob
#SBATCH -n1 --gres=ipu:16
C=$SLURM_JOB_ID_HET_GROUP_1
vipu remove partition slurm_$C && vipu create partition p$C --allocation c$C --size 16 && echo MADE
export IPUOF_VIPU_API_PARTITION_ID=p$C
srun --het-group=1 {probe}
"""


def test_graphcore_s_own_partition_in_a_component_s_allocation_is_what_its_tasks_name(clean, users, hlab):
    """docs/slurm.md's form of Graphcore's `c$SLURM_JOB_ID` idiom for a component: the component's
    own id is SLURM_JOB_ID_HET_GROUP_<n> (SLURM_JOB_ID is the first component's), and its allocation
    is held by its partition until the user removes that."""
    if hlab.spec.model != "allocation":
        pytest.skip("the allocation model's idiom")
    lab = clean
    out = lab.spec.path("users", "graphcore-%j.out")
    job = submit_as(lab, users[0], GRAPHCORE.format(out=out, probe=probe_script(lab)))
    wait_done(lab, job)
    text = lab.spec.path("users", f"graphcore-{job}.out").read_text()
    assert "MADE" in text, text
    got = attached(text)
    assert list(got) == [f"p{job + 1}"] and len(got[f"p{job + 1}"]) == 16, text
    nothing_left(lab, job, job + 1)
    assert f"p{job + 1}" not in lab.partitions()

