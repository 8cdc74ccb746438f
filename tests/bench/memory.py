"""Benchmark (not a test): peak memory of what slurm-ipu runs, on a lab of its own.

    .venv/bin/python tests/bench/memory.py [--partitions 1000]

- the prolog and the epilog as slurm-ipu-hook runs them without the slurm-ipu service (Python,
  with the lab's configuration and `vipu`), from the kernel's accounting of the finished
  process and its children (wait4's ru_maxrss);
- the slurm-ipu service, which runs the prologs and removals while it is up, after 40 IPU jobs;
- ipurun launching 8 instances inside an allocation (its own VmHWM, sampled until it exits:
  its srun child is not counted);
- the emulator holding N partitions (its VmHWM), on a cluster of 1,024 IPUs.
Targets: each hook and ipurun under 60 MB, the emulator with 1,000 partitions under 150 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu import lab  # noqa: E402
from tests.bench.common import temporary_lab  # noqa: E402
from tests.slurm.conftest import _free_block  # noqa: E402
from tests.waiting import wait_for  # noqa: E402


def vm_hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_of_child(argv: list[str], env: dict) -> tuple[int, float]:
    """(exit status, MB): the finished process and its reaped children, as the kernel counts."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    return proc.returncode, usage.ru_maxrss / 1024


def hooks(spec: lab.LabSpec) -> dict[str, float]:
    """The Python prolog and epilog for one synthetic 8-IPU job on two nodes."""
    env = dict(spec.env(), SLURM_JOB_ID="990001", SLURM_JOB_UID="0", SLURM_JOB_NODELIST="node[1-2]",
               SLURM_JOB_LICENSES="ipu:8")
    out = {}
    for context in ("prolog", "epilog"):
        code, mb = peak_of_child([sys.executable, "-m", "slurm_ipu.cli", "hook"],
                                 dict(env, SLURM_SCRIPT_CONTEXT=f"{context}_slurmctld"))
        if code != 0:
            raise SystemExit(f"memory: the {context} failed (exit {code}); see {spec.path('state', 'hooks.log')}")
        out[context] = mb
    return out


def service(spec: lab.LabSpec, jobs: int = 40) -> float:
    env = spec.env()
    for i in range(jobs):
        subprocess.run(["sbatch", "--parsable", f"--gres=ipu:{1 << (i % 4)}", "-o", "/dev/null", "--wrap", "true"],
                       env=env, check=True, capture_output=True, timeout=60, cwd=spec.dir)
    wait_for("the jobs to finish", lambda: not subprocess.run(["squeue", "-h"], env=env, capture_output=True,
                                                              text=True, timeout=60).stdout.strip(), 300)
    rec = lab.load_pids(spec)["service"]
    return vm_hwm_mb(rec["pid"] if isinstance(rec, dict) else rec)


IPURUN_PEAK = """#!/bin/bash
{python} - <<'EOF'
import subprocess, time
proc = subprocess.Popen({argv!r}, stdout=subprocess.DEVNULL)
peak = 0
deadline = time.monotonic() + 300
while proc.poll() is None and time.monotonic() < deadline:
    try:
        with open(f"/proc/{{proc.pid}}/status") as fh:
            peak = max([peak] + [int(l.split()[1]) for l in fh if l.startswith("VmHWM:")])
    except OSError:
        break
    time.sleep(0.005)  # sampling VmHWM (monotonic) until the process exits
print("IPURUN_PEAK_KB", peak, "exit", proc.wait())
EOF
"""


def ipurun(spec: lab.LabSpec) -> float:
    argv = [sys.executable, "-m", "slurm_ipu.launcher.cli", "--num-instances", "8", "--num-replicas", "16", "true"]
    script = spec.path("ipurun-peak.sh")
    script.write_text(IPURUN_PEAK.format(python=sys.executable, argv=argv))
    out = spec.path("ipurun-peak.out")
    subprocess.run(["sbatch", "-W", "-N", "4", "--ntasks-per-node=2", "--gres=ipu:4", "-o", str(out), str(script)],
                   env=spec.env(), check=True, capture_output=True, timeout=300, cwd=spec.dir)
    fields = next(line.split() for line in out.read_text().splitlines() if line.startswith("IPURUN_PEAK_KB"))
    if fields[3] != "0":
        raise SystemExit(f"memory: ipurun failed: {out.read_text()}")
    return int(fields[1]) / 1024


def _answers(api) -> bool:
    try:
        api.version()
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def emulator(partitions: int) -> float:
    from slurm_ipu.emulator.api import Api

    with tempfile.TemporaryDirectory(prefix="slurm-ipu-bench-emu-") as tmp:
        cluster = Path(tmp, "big.yaml")
        cluster.write_text("version: 1\nname: big\nilds: 16\nagents_per_ild: 16\nallocations:\n  default: all\n")
        port = _free_block(1)
        proc = subprocess.Popen([sys.executable, "-m", "slurm_ipu.emulator.main", "serve", "--port", str(port),
                                 "--state-dir", str(Path(tmp, "state")), "--cluster", str(cluster)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            api = Api(port=port, timeout=30)
            wait_for("the emulator to answer", lambda: _answers(api), 30, 0.05)
            for i in range(partitions):
                api.create_partition(name=f"p{i}", size=1, num_gcds=None, num_ilds=None, allocation=None,
                                     reconfigurable=False, total_replicas=None, owner_uid=None, hosts=[])
            assert len(api.list_partitions()) == partitions
            return vm_hwm_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=1000)
    args = parser.parse_args()
    emu = emulator(args.partitions)
    with temporary_lab() as spec:
        served = service(spec)
        lab.stop_service(spec)  # as a site without the slurm-ipu service: the hooks in Python
        python = hooks(spec)
        launcher = ipurun(spec)
    rows = [("prolog (Python, no slurm-ipu service)", python["prolog"], 60),
            ("epilog (Python, no slurm-ipu service)", python["epilog"], 60),
            ("slurm-ipu service after 40 IPU jobs", served, 60), ("ipurun, 8 instances", launcher, 60),
            (f"emulator with {args.partitions} partitions", emu, 150)]
    print("peak memory (RSS):")
    for name, mb, target in rows:
        print(f"  {name:<40} {mb:6.1f} MB   (target < {target} MB{'' if mb < target else ': MISSED'})")
    print(json.dumps({name: round(mb, 1) for name, mb, _ in rows}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
