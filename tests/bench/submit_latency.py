"""Benchmark (not a test): time from submission to the first task running, for jobs with and
without IPUs, interleaved in one run on a lab of its own, reported as medians and a ratio.

    .venv/bin/python tests/bench/submit_latency.py [--runs 15]

The emulator's delays are zero, so the difference is what slurm-ipu adds: job_submit.lua, the
prolog's V-IPU calls, the SPANK plugin, and the epilog (outside the measured span).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu import lab  # noqa: E402
from tests.bench.common import temporary_lab  # noqa: E402


def first_task_latency(spec: lab.LabSpec, ipus: bool) -> float:
    argv = ["srun", "-N", "1", "date", "+%s.%N"]
    if ipus:
        argv[1:1] = ["--gres=ipu:4"]
    start = time.time()
    proc = subprocess.run(argv, env=spec.env(), capture_output=True, text=True, timeout=120, check=True)
    return float(proc.stdout.strip()) - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with temporary_lab() as spec:
        first_task_latency(spec, True)  # warm caches once, unmeasured
        plain, ipu = [], []
        for _ in range(args.runs):
            plain.append(first_task_latency(spec, False))
            ipu.append(first_task_latency(spec, True))
    m_plain, m_ipu = statistics.median(plain), statistics.median(ipu)
    print(f"submission -> first task, median of {args.runs} interleaved srun jobs on the lab:")
    print(f"  without IPUs      {m_plain * 1000:8.1f} ms")
    print(f"  with --gres=ipu:4 {m_ipu * 1000:8.1f} ms")
    print(f"  ratio (ipu/plain) {m_ipu / m_plain:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
