"""Benchmark (not a test): a storm of short jobs of mixed sizes, with IPUs and without, on a
lab of its own; jobs per minute each way and their ratio, then a leak check.

    .venv/bin/python tests/bench/storm.py [--jobs 300] [--rounds 1]

The plain storm is the same jobs without --gres=ipu. Afterwards no partition, journal entry or
creation record may be left, and every node must be idle.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu import lab  # noqa: E402
from tests.bench.common import temporary_lab  # noqa: E402

SHAPES = [(1, 1), (1, 2), (1, 4), (1, 16), (2, 4), (2, 8), (4, 4), (1, 8)]  # (nodes, IPUs per node)


def storm(spec: lab.LabSpec, shapes: list[tuple[int, int]], ipus: bool, deadline_s: float = 1800) -> float:
    """Seconds from the first submission until the queue is empty."""
    env = spec.env()
    start = time.monotonic()
    for nodes, per in shapes:
        argv = ["sbatch", "--parsable", "-N", str(nodes), "-o", "/dev/null", "--wrap", "sleep 0.2"]
        if ipus:
            argv.insert(2, f"--gres=ipu:{per}")
        subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True, cwd=spec.dir)
    while time.monotonic() - start < deadline_s:
        out = subprocess.run(["squeue", "-h", "-o", "%A"], env=env, capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and not out.stdout.split():
            return time.monotonic() - start
        time.sleep(0.2)  # a benchmark's own poll interval, bounded by the deadline above
    raise SystemExit(f"storm: jobs still queued after {deadline_s:.0f}s")


def leaks(spec: lab.LabSpec) -> list[str]:
    from slurm_ipu.emulator.api import Api

    api = Api(admin_socket=str(spec.path("vipu-emu", "admin.sock")), timeout=10)
    # The removal service works the epilogs' queue off within a poll interval of each job's end.
    queue = spec.path("state", "pending-removal")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(queue.glob("*.json")):
        time.sleep(0.1)
    found = [f"partition {p['partition']['id']}" for p in api.list_partitions()]
    found += [f"journal {p.name}" for p in spec.path("state", "pending-removal").glob("*.json")]
    found += [f"record {p.name}" for p in spec.path("state", "created").glob("*.json")]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(s != "idle" for s in lab.node_states(spec).values()):
        time.sleep(0.2)
    found += [f"node {n} {s}" for n, s in lab.node_states(spec).items() if s != "idle"]
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1, help="plain and IPU storms, alternated")
    args = parser.parse_args()
    shapes = [random.Random(7).choice(SHAPES) for _ in range(args.jobs)]
    plain, ipu = [], []
    with temporary_lab() as spec:
        for _ in range(args.rounds):
            plain.append(storm(spec, shapes, ipus=False))
            ipu.append(storm(spec, shapes, ipus=True))
        left = leaks(spec)
    per_min = lambda secs: args.jobs * 60 / (sum(secs) / len(secs))  # noqa: E731
    print(f"storm of {args.jobs} short jobs of mixed sizes, {args.rounds} round(s), 4-node lab:")
    print(f"  without IPUs    {per_min(plain):7.1f} jobs/min")
    print(f"  with IPUs       {per_min(ipu):7.1f} jobs/min")
    print(f"  ratio ipu/plain {per_min(ipu) / per_min(plain):7.2f}  (target >= 0.8)")
    print(f"  left behind     {', '.join(left) if left else 'nothing'}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
