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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from slurm_ipu.launcher.plan import make_plan  # noqa: E402
from tests.bench.common import temporary_lab  # noqa: E402

# Interleaved, so load and caches hit every row alike. "launch" is ipurun's own cost (per-job
# executable cache on, no partition reset), at 8 and at 32 instances; "reset" adds PopRun's
# default reset between runs of a job (a V-IPU call, here the emulator's Python CLI). Each task's
# setup (PopDist's environment, binding) is the SPANK plugin's: no process of ours per instance.
STEP = """#!/bin/bash
t() { local s=$(date +%s%N); "$@" >/dev/null; echo $(( $(date +%s%N) - s )); }
IPURUN8="{ipurun} --num-instances 8 --num-replicas 16"
IPURUN32="{ipurun} --num-instances 32 --num-replicas 32"
for i in $(seq {runs}); do
  echo "srun8 $(t srun --ntasks=8 --ntasks-per-node=2 --distribution=block true)"
  echo "launch8 $(t $IPURUN8 --reset-partition=no true)"
  echo "srun32 $(t srun --overcommit --ntasks=32 --ntasks-per-node=8 --distribution=block true)"
  echo "launch32 $(t $IPURUN32 --reset-partition=no true)"
  echo "reset8 $(t $IPURUN8 true)"
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
        ipurun = installed_ipurun(spec.path("venv"))
        script.write_text(STEP.replace("{runs}", str(args.runs)).replace("{ipurun}", ipurun))
        out = spec.path("bench.out")
        subprocess.run(["sbatch", "-W", "-N", "4", "--ntasks-per-node=2", "--gres=ipu:8", "-o", str(out),
                        str(script)], env=spec.env(), check=True, capture_output=True, timeout=900)
        rows = [line.split() for line in out.read_text().splitlines() if len(line.split()) == 2]
    keys = ("srun8", "launch8", "srun32", "launch32", "reset8")
    median = {key: statistics.median(int(v) / 1e6 for k, v in rows if k == key) for key in keys}
    print(f"on 4 lab nodes, median of {args.runs} interleaved runs inside one allocation:")
    for n in (8, 32):
        srun, launch = median[f"srun{n}"], median[f"launch{n}"]
        print(f"  {n:>2} tasks: bare srun {srun:7.1f} ms, ipurun {launch:7.1f} ms   ratio {launch / srun:.2f}")
    print(f"   8 tasks, ipurun + reset between runs {median['reset8']:7.1f} ms   "
          f"ratio {median['reset8'] / median['srun8']:.2f}")
    return 0


def installed_ipurun(venv: Path) -> str:
    """ipurun as a regular (not editable) install starts it: a fresh venv that finds this checkout
    through a plain path .pth, and the console script pip writes. The development venv's
    editable-install finder alone adds ~15 ms to every start; no build, no network."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, timeout=30).stdout.strip()
    Path(site, "slurm_ipu_checkout.pth").write_text(f"{REPO}\n")
    script = venv / "bin" / "ipurun"
    script.write_text(CONSOLE_SCRIPT.replace("{python}", str(python)))
    script.chmod(0o755)
    return str(script)


CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from slurm_ipu.launcher.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


if __name__ == "__main__":
    sys.exit(main())
