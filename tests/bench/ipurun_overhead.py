"""Benchmark (not a test): ipurun against bare srun launching the same tasks, on a lab of its
own, interleaved in one run; and planning time for 4,096 instances on 1,024 synthetic hosts.

    .venv/bin/python tests/bench/ipurun_overhead.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu.launcher.plan import make_plan  # noqa: E402
from tests.bench.common import temporary_lab  # noqa: E402

STEP = """#!/bin/bash
t() { local s=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $s" | bc; }
for i in $(seq {runs}); do
  echo "srun $(t srun --ntasks=8 --ntasks-per-node=2 --distribution=block true)"
  echo "ipurun $(t {python} -m slurm_ipu.launcher.cli --num-instances 8 --num-replicas 16 --executable-cache-path= true)"
done
"""


def planning(hosts: int, instances: int) -> float:
    names = [f"h{i}" for i in range(hosts)]
    best = float("inf")
    for _ in range(20):
        t = time.perf_counter()
        make_plan(instances, instances * 2, 1, names).instances()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for hosts, inst in ((256, 1024), (1024, 4096), (4096, 16384)):
        print(f"planning {inst:>6} instances on {hosts:>5} hosts: {planning(hosts, inst) * 1000:7.2f} ms (best of 20)")
    with temporary_lab() as spec:
        script = spec.path("bench.sh")
        script.write_text(STEP.replace("{runs}", str(args.runs)).replace("{python}", sys.executable))
        out = spec.path("bench.out")
        subprocess.run(["sbatch", "-W", "-N", "4", "--ntasks-per-node=2", "--gres=ipu:4", "-o", str(out),
                        str(script)], env=spec.env(), check=True, capture_output=True, timeout=600)
        rows = [line.split() for line in out.read_text().splitlines() if len(line.split()) == 2]
    srun = [float(v) for k, v in rows if k == "srun"]
    ipurun = [float(v) for k, v in rows if k == "ipurun"]
    m_s, m_i = statistics.median(srun), statistics.median(ipurun)
    print(f"8 tasks on 4 lab nodes, median of {len(srun)} interleaved runs inside one allocation:")
    print(f"  bare srun  {m_s * 1000:8.1f} ms")
    print(f"  ipurun     {m_i * 1000:8.1f} ms   (plan, 8 bound instances, PopDist env)")
    print(f"  ratio      {m_i / m_s:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
