"""ipurun inside a real 4-node allocation (issue 4 acceptance)."""

from __future__ import annotations

import re
import sys

from .conftest import wait_gone

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
