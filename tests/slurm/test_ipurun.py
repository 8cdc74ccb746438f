"""ipurun inside a real 4-node allocation."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from slurm_ipu.launcher.numa import STRATEGIES
from slurm_ipu.launcher.task import JOB_CACHE_ROOT

from .conftest import wait_for, wait_gone

PROBE = ('echo "INST $POPDIST_INSTANCE_INDEX $SLURMD_NODENAME $POPDIST_REPLICA_INDEX_OFFSET '
         '$POPDIST_LOCAL_INSTANCE_INDEX $POPDIST_NUM_LOCAL_REPLICAS $POPDIST_NUM_TOTAL_REPLICAS '
         '$IPUOF_VIPU_API_PARTITION_ID $(taskset -pc $$ | cut -d: -f2 | tr -d " ")"')


def test_eight_instances_over_four_nodes_match_the_plan(clean_lab, tmp_path):
    lab = clean_lab
    ipurun = f"{sys.executable} -m slurm_ipu.launcher.cli --num-instances 8 --num-replicas 16"
    script = (f"#!/bin/bash\n{ipurun} --dry-run -- true\n"
              f"{ipurun} -- bash -c '{PROBE}'\necho rc=$?\n")
    out = tmp_path / "ipurun.out"
    job = lab.sbatch("-N", "4", "--ntasks-per-node=2", "--gres=ipu:4", "-o", str(out), script=script)
    wait_gone(lab, job, timeout=120)
    text = out.read_text()
    assert "rc=0" in text, text
    rows = sorted((line.split() for line in text.splitlines() if line.startswith("INST ")), key=lambda r: int(r[1]))
    assert len(rows) == 8, text
    plan = {int(m.group(1)): m.group(2) for m in re.finditer(r"instance (\d+): host (\S+)", text)}
    cpus_by_node: dict[str, list[str]] = {}
    for k, (_, idx, node, offset, local, nrep, total, part, cpus) in enumerate(rows):
        assert int(idx) == k
        assert node == f"node{k // 2 + 1}" == plan[k]  # the dry run showed the same placement
        assert (offset, local, nrep, total, part) == (str(2 * k), str(k % 2), "2", "16", f"slurm_{job}")
        cpus_by_node.setdefault(node, []).append(cpus)
    for node, cpus in cpus_by_node.items():
        assert len(set(cpus)) == 2, f"instances on {node} share CPUs: {cpus}"


BOUND = ('echo "BOUND $POPDIST_INSTANCE_INDEX $(grep -E "^(Cpus|Mems)_allowed_list" /proc/self/status | '
         'cut -f2 | tr "\\n" " ")"')


def test_every_strategy_binds_each_instance_where_the_dry_run_says(clean_lab, tmp_path):
    """The SPANK plugin binds each task (spank/placement.c); --dry-run prints the reference
    (launcher/numa.py). What each instance really has, from its own /proc/self/status, must be
    what the dry run printed, for every strategy, on the lab's real topology (one NUMA node:
    the unit tier covers multi-NUMA machines)."""
    lab = clean_lab
    ipurun = f"{sys.executable} -m slurm_ipu.launcher.cli --num-instances 4 --num-replicas 4"
    script = "#!/bin/bash\n" + "".join(
        f"echo STRATEGY {s}\n{ipurun} --process-placement {s} --dry-run -- true\n"
        f"{ipurun} --process-placement {s} -- bash -c '{BOUND}' || echo FAILED {s}\n" for s in STRATEGIES)
    out = tmp_path / "bind.out"
    job = lab.sbatch("-N", "2", "--ntasks-per-node=2", "--gres=ipu:2", "-o", str(out), script=script)
    wait_gone(lab, job, timeout=180)
    text = out.read_text()
    assert "FAILED" not in text, text
    for block in text.split("STRATEGY ")[1:]:
        strategy = block.split()[0]
        planned = {int(m.group(1)): (m.group(2), m.group(3))
                   for m in re.finditer(r"instance (\d+): host \S+ numa (\S*) cpus (\S+)", block)}
        bound = {int(f[1]): (f[3], f[2]) for f in (line.split() for line in block.splitlines())
                 if f and f[0].endswith("BOUND")}
        assert sorted(planned) == sorted(bound) == [0, 1, 2, 3], block
        for k, (numa, cpus) in planned.items():
            if strategy == "disabled":
                assert cpus == "unbound", block
                continue
            assert bound[k] == (numa, cpus), f"{strategy} instance {k}: dry run {numa} {cpus}, task {bound[k]}"


ATTACH = f"{sys.executable} -m slurm_ipu.emulator.main attach"


def test_multi_gcd_job_each_instance_attaches_to_its_gcd_and_keeps_its_partition(clean_lab, tmp_path):
    """A job asked for 2 GCDs: ipurun learns that from the task environment (no V-IPU call),
    gives instance k GCD k // 2, and each attach is granted. 3 instances cannot share 2 GCDs:
    --update-partition used to remove the job's own partition, which its user may not make again
    (the job lost its IPUs); it is refused before anything changes, the partition serves the next
    run, and the advice (the shape asked for at submit) works when followed. The per-job cache is
    gone after the job."""
    lab = clean_lab
    ipurun = f"{sys.executable} -m slurm_ipu.launcher.cli"
    probe = 'echo "GCD $POPDIST_INSTANCE_INDEX $IPUOF_VIPU_API_GCD_ID $POPDIST_EXECUTABLE_CACHE_PATH $(' + ATTACH + ')"'
    script = (f"#!/bin/bash\n{ipurun} --num-instances 4 --num-replicas 8 -- bash -c '{probe}'\necho rc1=$?\n"
              f"{ipurun} --num-instances 3 --num-replicas 3 -H node[1-3] true\necho rc2=$?\n"
              f"{ipurun} --num-instances 3 --num-replicas 3 -H node[1-3] --update-partition=yes -- "
              f"bash -c '{probe}'\necho rc3=$?\n"
              f"{ipurun} --num-instances 4 --num-replicas 8 -- bash -c '{probe}'\necho rc4=$?\n")
    out = tmp_path / "gcd.out"
    job = lab.sbatch("-N", "4", "--ntasks-per-node=2", "--gres=ipu:4", "--ipu-gcds=2", "-o", str(out), script=script)
    wait_gone(lab, job, timeout=120)
    text = out.read_text()
    assert "rc1=0" in text and "rc4=0" in text, text
    assert "rc2=2" in text and "3 instances cannot share them evenly" in text, text
    assert "or submit the job with --ipu-gcds=1 for a partition of that shape" in text, text
    assert "rc3=2" in text and f"slurm_{job} is job {job}'s own partition" in text, text
    rows = [line.split(maxsplit=4) for line in text.splitlines() if line.startswith("GCD ")]
    assert len(rows) == 8, text  # runs 1 and 4, on the partition as it was made
    for _, _k, gcd, cache, attach in rows:
        assert cache == f"{JOB_CACHE_ROOT}/{job}" and f"gcd={gcd} " in attach, attach
    assert sorted((int(r[1]), r[2]) for r in rows[4:]) == [(0, "0"), (1, "0"), (2, "1"), (3, "1")], text
    left = [Path(JOB_CACHE_ROOT, str(job)), Path(f"/tmp/ipurun-job-{job}.json")]
    wait_for("the node epilog to remove ipurun's per-job files", lambda: not any(p.exists() for p in left), 30)
    # the advice followed: the job asks for the shape at submit
    again = lab.sbatch("-N", "4", "--ntasks-per-node=2", "--gres=ipu:4", "--ipu-gcds=1", "-o", str(out),
                       script=f"#!/bin/bash\n{ipurun} --num-instances 3 --num-replicas 3 -H node[1-3] -- "
                              f"bash -c '{probe}'\necho rc=$?\n")
    wait_gone(lab, again, timeout=120)
    text = out.read_text()
    assert "rc=0" in text and len([ln for ln in text.splitlines() if ln.startswith("GCD ")]) == 3, text


def test_export_import_and_mpi_exports_in_a_job(clean_lab, tmp_path):
    """PopRun's --export-config stores the command too and --import-config alone re-runs it;
    -x VAR=value reaches every instance, 'K:-x VAR=value' instance K only."""
    lab = clean_lab
    conf = tmp_path / "training.conf"
    probe = 'echo "ROUND $POPDIST_INSTANCE_INDEX ${ALL:-unset} ${ONLY:-unset}"'
    script = (f"#!/bin/bash\n{sys.executable} -m slurm_ipu.launcher.cli --export-config {conf} --num-instances 2 "
              f"--num-replicas 4 --mpi-global-args='-x ALL=yes' --instance-mpi-local-args='1:-x ONLY=one' "
              f"-- bash -c '{probe}'\necho rc1=$?\n"
              f"{sys.executable} -m slurm_ipu.launcher.cli --import-config {conf}\necho rc2=$?\n")
    out = tmp_path / "export.out"
    job = lab.sbatch("-N", "2", "--gres=ipu:2", "-o", str(out), script=script)
    wait_gone(lab, job, timeout=120)
    text = out.read_text()
    assert "rc1=0" in text and "rc2=0" in text, text
    rows = sorted(line for line in text.splitlines() if line.startswith("ROUND "))
    assert rows == ["ROUND 0 yes unset"] * 2 + ["ROUND 1 yes one"] * 2, text  # the same run, twice


def test_the_readme_line_outside_an_allocation_gets_ipurun_s_own_line_and_its_advice_works(clean_lab):
    """Outside an allocation srun asks Slurm for the run's one node itself, and
    Slurm refuses 8 instances on a node of fewer CPUs: srun's reason is followed by ipurun's line;
    doing what it says (the nodes first, ipurun inside) runs the README's line."""
    lab = clean_lab
    line = [sys.executable, "-m", "slurm_ipu.launcher.cli", "--num-instances", "8", "--num-replicas", "16"]
    proc = lab.run(*line, "true")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ipurun: srun started no instance (exit 1; Slurm's reason is above): outside an "
                           "allocation it asks Slurm itself for 1 node(s) with 8 instance(s) and 16 IPUs each; get "
                           "the nodes first (salloc or sbatch with -N and --gres=ipu:N)"), proc.stderr
    wait_for("no job left", lambda: lab.run("squeue", "-h").stdout.strip() == "", 30)
    proc = lab.run("salloc", "-N2", "--gres=ipu:8", *line, "bash", "-c", "echo RAN $POPDIST_INSTANCE_INDEX")
    assert proc.returncode == 0, proc.stderr
    assert sorted(int(w.split()[1]) for w in proc.stdout.splitlines() if w.startswith("RAN ")) == list(range(8))


def test_each_instance_s_long_lines_come_out_whole(clean_lab):
    """srun --label ends every 1024-byte message of a task's output with a newline of its own: a
    line of a JSON log or a progress bar longer than that came out of ipurun in pieces."""
    lab = clean_lab
    probe = ("import os; k = os.environ['POPDIST_INSTANCE_INDEX']; "
             "print('L' + k + ':' + 'x' * 5000 + '!'); print('é' * 700)")
    proc = lab.run("salloc", "-N2", "--gres=ipu:2", sys.executable, "-m", "slurm_ipu.launcher.cli",
                   "--num-instances", "2", "--num-replicas", "2", "--", sys.executable, "-c", probe)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sorted(w for w in lines if w.startswith("L")) == [f"L{k}:{'x' * 5000}!" for k in range(2)], \
        [len(w) for w in lines]
    assert lines.count("é" * 700) == 2
