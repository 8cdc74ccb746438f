"""job_submit.lua's time per submit against the number of Pods (slurmctld runs it under
its job write lock, so it must stay well under a millisecond). The site's own rendered file, run
by lua5.1 (the Lua Slurm embeds) in a loop of submits; a plain job (no IPUs) beside each IPU job
shapes: one host of one Pod, one whole Pod, and two Pods. No Slurm needed.

    python tests/bench/job_submit_cost.py [--submits 20000]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu import config  # noqa: E402
from slurm_ipu.deploy import fragments  # noqa: E402

PODS = (1, 4, 16, 64)
HOSTS_PER_POD = 4
LOOP = """
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_INVALID_LICENSES = 2040,
          log_user = function(...) end, log_info = function(...) end }
dofile(%(path)r)
local function job() return %(job)s end
for _ = 1, 200 do slurm_job_submit(job(), {}, 0) end  -- warm up
local t0 = os.clock()
for _ = 1, %(n)d do slurm_job_submit(job(), {}, 0) end
print(string.format("%%.3f", (os.clock() - t0) * 1e6 / %(n)d))
"""
JOBS = {
    "plain": '{min_nodes = 1, max_nodes = 1}',
    "1 host": '{tres_per_node = "gres:ipu:4", min_nodes = 1, max_nodes = 1}',
    "1 Pod": f'{{tres_per_node = "gres:ipu:16", min_nodes = {HOSTS_PER_POD}, max_nodes = {HOSTS_PER_POD}}}',
    "2 Pods": f'{{tres_per_node = "gres:ipu:16", min_nodes = {2 * HOSTS_PER_POD}, max_nodes = {2 * HOSTS_PER_POD}}}',
}


def site_text(pods: int) -> str:
    head = "version: 1\ncluster: bench\nvipu: {host: 127.0.0.1, allocation: all}\npod: {ipus_per_host: 16}\n"
    if pods == 1:
        return head.replace("pod: {ipus_per_host: 16}", "pod: {ipus: 64, hosts: 'h[1-4]', ipus_per_host: 16}")
    entries = "".join(f"  - {{name: p{k}, hosts: 'h[{k * HOSTS_PER_POD + 1}-{(k + 1) * HOSTS_PER_POD}]'}}\n"
                      for k in range(pods))
    return head + "pods:\n" + entries


def per_submit(lua: str, script: str, job: str, n: int) -> float:
    code = LOOP % {"path": script, "job": job, "n": n}
    out = subprocess.run([lua, "-e", code], capture_output=True, text=True, timeout=600, check=True)
    return float(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submits", type=int, default=20000)
    args = parser.parse_args()
    lua = shutil.which("lua5.1")
    if lua is None:
        print("lua5.1 missing: make deps installs it", file=sys.stderr)
        return 2
    print(f"job_submit.lua, microseconds per submit ({args.submits} submits each, lua5.1)")
    print(f"{'Pods':>5} {'hosts':>6} " + " ".join(f"{name:>8}" for name in JOBS))
    with tempfile.TemporaryDirectory(prefix="slurm-ipu-bench-lua-") as tmp:
        for pods in PODS:
            site = config.parse(site_text(pods), f"bench-{pods}.yaml", None)
            script = Path(tmp) / f"job_submit_{pods}.lua"
            script.write_text(fragments.texts(site)["job_submit.lua"])
            cells = [per_submit(lua, str(script), job, args.submits) for job in JOBS.values()]
            print(f"{pods:>5} {pods * HOSTS_PER_POD:>6} " + " ".join(f"{c:>8.2f}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
