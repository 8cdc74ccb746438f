"""Benchmark (not a test): where a job start's controller-hook time goes, on a lab of its own.

    .venv/bin/python tests/bench/prolog.py [--runs 20]

The lab's slurm-ipu-hook is run as slurmctld runs it (a bare environment, one synthetic
job at a time) and timed end to end: a job without IPUs; an IPU job's prolog and epilog handed
to the slurm-ipu service; the `vipu` create and remove those make (the lab's C vipu and the
emulator), alone; then, with the service stopped, the Python prolog and epilog.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu import config, lab  # noqa: E402
from tests.bench.common import temporary_lab  # noqa: E402


def timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    took = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"prolog bench: {' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return took


def job_env(job: int, licences: str, context: str) -> dict:
    """What slurmctld gives PrologSlurmctld/EpilogSlurmctld (the parts the hooks read)."""
    return {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": "0", "SLURM_JOB_NODELIST": "node1",
            "SLURM_JOB_LICENSES": licences, "SLURM_SCRIPT_CONTEXT": f"{context}_slurmctld"}


def hook_pair(hook: str, first_job: int, runs: int, licences: str = "ipu:4") -> tuple[list[float], list[float]]:
    prologs, epilogs = [], []
    for job in range(first_job, first_job + runs):
        prologs.append(timed([hook], job_env(job, licences, "prolog")))
        epilogs.append(timed([hook], job_env(job, licences, "epilog")))
    return prologs, epilogs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    n = args.runs
    with temporary_lab() as spec:
        hook = config.load(str(spec.path("etc", "site.yaml")), twins=False).path("hook")
        vipu = [str(spec.path("bin", "vipu")), "--api-host", "127.0.0.1", "--api-port", str(spec.vipu_port)]
        plain = [timed([hook], job_env(980000 + i, "", "prolog")) for i in range(n)]
        served_p, served_e = hook_pair(hook, 981000, n)
        create, remove = [], []
        for i in range(n):
            create.append(timed([*vipu, "create", "partition", f"bench{i}", "--size", "4"], spec.env()))
            remove.append(timed([*vipu, "remove", "partition", f"bench{i}"], spec.env()))
        lab.stop_service(spec)  # a site without the slurm-ipu service
        python_p, python_e = hook_pair(hook, 982000, n)
    med = statistics.median
    print(f"controller hooks, median of {n} runs on the 4-node lab (slurm-ipu-hook as slurmctld runs it):")
    print(f"  job without IPUs (slurm-ipu-hook exits at once)  {med(plain):6.1f} ms")
    print(f"  IPU prolog handed to the slurm-ipu service            {med(served_p):6.1f} ms")
    print(f"    of which `vipu create partition` (C vipu + emulator) {med(create):6.1f} ms")
    print(f"  IPU epilog queued for the slurm-ipu service           {med(served_e):6.1f} ms "
          f"(the removal itself, `vipu remove partition`: {med(remove):.1f} ms, after it)")
    print(f"  IPU prolog in Python (no slurm-ipu service)           {med(python_p):6.1f} ms")
    print(f"  IPU epilog in Python (no slurm-ipu service)           {med(python_e):6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
