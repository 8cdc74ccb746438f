"""Benchmark (not a test): what a partition per step adds to a step's start and end,
against a step without IPUs in the same job, interleaved, on a lab of each model.

    .venv/bin/python tests/bench/step_start.py [--runs 20]

Each timed span is one whole `srun -n1 ... true` inside one salloc: step creation, the SPANK
plugin's two RPCs (the step's and the job's records), on the allocation model `slurm-ipu step`
creating the step's partition before the launch and removing it at srun's exit, the task, and
srun's end. On the partition model a step with all of its nodes' IPUs runs on the job's
partition: only the two RPCs are added.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.common import temporary_lab  # noqa: E402

# Nanosecond stamps around each srun, inside the allocation: no salloc or prolog in the span.
LOOP = """for i in $(seq {runs}); do
  a=$(date +%s%N); srun -n1 {ipus} true; b=$(date +%s%N); srun -n1 --gres=none true; c=$(date +%s%N)
  echo "SPAN $((b - a)) $((c - b))"
done"""


def spans(spec, job_gres: str, step_gres: str, runs: int) -> tuple[list[float], list[float]]:
    proc = subprocess.run(["salloc", "-N1", job_gres, "bash", "-c", LOOP.format(runs=runs, ipus=step_gres)],
                          env=spec.env(), capture_output=True, text=True, timeout=600, check=True)
    rows = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("SPAN ")]
    assert len(rows) == runs, proc.stdout + proc.stderr
    return [int(r[0]) / 1e6 for r in rows], [int(r[1]) / 1e6 for r in rows]


def report(title: str, ipu: list[float], plain: list[float]) -> None:
    m_ipu, m_plain = statistics.median(ipu), statistics.median(plain)
    print(f"{title}, median of {len(ipu)} interleaved steps:")
    print(f"  step without IPUs (--gres=none) {m_plain:8.1f} ms")
    print(f"  step with IPUs                  {m_ipu:8.1f} ms  (+{m_ipu - m_plain:.1f} ms)")
    print(f"  ratio (ipu/plain)               {m_ipu / m_plain:8.2f}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with temporary_lab(model="allocation", ipus_per_node=16) as spec:
        spans(spec, "--gres=ipu:16", "--gres=ipu:4", 2)  # warm caches once, unmeasured
        ipu, plain = spans(spec, "--gres=ipu:16", "--gres=ipu:4", args.runs)
    report("allocation model: a 4-IPU partition made and removed per step", ipu, plain)
    with temporary_lab(model="partition", ipus_per_node=16) as spec:
        spans(spec, "--gres=ipu:16", "--gres=ipu:16", 2)
        ipu, plain = spans(spec, "--gres=ipu:16", "--gres=ipu:16", args.runs)
    report("partition model: the job's partition (the step's and job's records read)", ipu, plain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
