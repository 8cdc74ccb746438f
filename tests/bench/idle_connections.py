"""Benchmark (not a test): one user's 2,000 idle connections to V-IPU against another user's job
start (at most 2x), on a lab of its own.

    .venv/bin/python tests/bench/idle_connections.py [--runs 10] [--connections 2000]

A job start here is `srun -N1 --gres=ipu:1 true` as root, end to end: the submit, the prolog's
V-IPU create, the task, the epilog's removal. Timed in three blocks of --runs: without the hog,
while `nobody` holds --connections idle connections to the emulator's socket (the emulator keeps at
most server.PER_CALLER of one user's open and closes the rest), and without it again.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu.emulator.api import SOCKET_PREFIX  # noqa: E402
from tests.bench.common import temporary_lab  # noqa: E402
from tests.emulator.test_identity import NOBODY, as_user  # noqa: E402
from tests.emulator.test_one_user_s_load import HOLD  # noqa: E402


def job_starts(spec, runs: int) -> list[float]:
    """ms per `srun -N1 --gres=ipu:1 true`."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(["srun", "-N1", "--gres=ipu:1", "true"], env=spec.env(), capture_output=True,
                              text=True, timeout=120, cwd=spec.dir)
        if proc.returncode != 0:
            raise SystemExit(f"idle-connections bench: srun failed ({proc.returncode}): {proc.stderr.strip()}")
        out.append((time.perf_counter() - start) * 1000)
    return out


def hog(spec, count: int) -> subprocess.Popen:
    argv = ["/usr/bin/python3", "-I", "-c", HOLD, str(spec.vipu_port), SOCKET_PREFIX, str(count)]
    proc = subprocess.Popen(as_user(NOBODY, argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd="/")
    said = proc.stdout.readline().split()
    if said != ["holding", str(count)]:
        proc.kill()
        raise SystemExit(f"idle-connections bench: the hog did not connect: {said} {proc.stderr.read()[:300]}")
    return proc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--connections", type=int, default=2000)
    args = p.parse_args()
    with temporary_lab() as spec:
        job_starts(spec, 2)  # warm: the first srun pays the lab's caches
        before = job_starts(spec, args.runs)
        holder = hog(spec, args.connections)
        try:
            during = job_starts(spec, args.runs)
        finally:
            holder.stdin.close()
            holder.wait(60)
        after = job_starts(spec, args.runs)
    base = statistics.median(before + after)
    loaded = statistics.median(during)
    print(f"job start (srun -N1 --gres=ipu:1 true), median of {args.runs} each, 4-node lab:")
    print(f"  without the hog    {statistics.median(before):7.1f} ms, after it {statistics.median(after):7.1f} ms")
    print(f"  while nobody holds {args.connections} idle connections  {loaded:7.1f} ms")
    print(f"  ratio              {loaded / base:7.2f}  (target <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
