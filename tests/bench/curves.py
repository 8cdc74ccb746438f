"""Benchmark (not a test): how the controller hooks' and the admin commands' costs grow with what
V-IPU and the hooks' state hold, on a lab of its own.

    .venv/bin/python tests/bench/curves.py [--runs 20] [--nodes 16]

On a lab of --nodes hosts (16 x 16 = 256 IPUs: room for 250 other partitions), with the hook
service's periodic reap set to an hour so the state built up stays:
- an IPU job's prolog and epilog (slurm-ipu-hook as slurmctld runs it, to its reply),
  p50/p99, and the emulator's create and remove (the lab's C vipu), against 0, 100 and 250
  live partitions (1 IPU each, made by someone else: V-IPU's size is what grows);
- the same against 0, 1,000 and 10,000 creation records (of jobs that are still running, as far
  as the records say: nothing settles them);
- `slurm-ipu reap --dry-run`, `status` and `doctor` wall time at each point;
- the emulator's create and remove alone (its HTTP API, a kept-alive connection) on clusters of
  16, 64, 256 and 1,024 IPU-Machines (one to 64 POD64s).
Each table row says how the figure grows.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu import config  # noqa: E402
from slurm_ipu.hooks.ledger import Ledger  # noqa: E402
from tests.bench.common import temporary_lab  # noqa: E402
from tests.bench.prolog import hook_pair, timed  # noqa: E402

PARTITIONS = (0, 100, 250)
AGENTS = (16, 64, 256, 1024)
RECORDS = (0, 1000, 10000)


def pcts(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def vipu_calls(vipu: list[str], env: dict, runs: int) -> tuple[list[float], list[float]]:
    create, remove = [], []
    for i in range(runs):
        create.append(timed([*vipu, "create", "partition", f"curve{i}", "--size", "1"], env))
        remove.append(timed([*vipu, "remove", "partition", f"curve{i}"], env))
    return create, remove


def admin_walls(env: dict, cwd: Path) -> dict[str, float]:
    """Wall time of reap --dry-run, status and doctor, ms (doctor's exit says nothing here:
    it finds the load partitions foreign, which is its business)."""
    out = {}
    for name, argv in (("reap", ["slurm-ipu", "reap", "--dry-run"]), ("status", ["slurm-ipu", "status"]),
                       ("doctor", ["slurm-ipu", "doctor"])):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=cwd)
        out[name] = (time.perf_counter() - start) * 1000
    return out


def point(spec, hook: str, vipu: list[str], first_job: int, runs: int) -> dict:
    env = spec.env()
    p, e = hook_pair(hook, first_job, runs, "ipu:1")
    c, r = vipu_calls(vipu, env, runs)
    return {"prolog": pcts(p), "epilog": pcts(e), "create": pcts(c), "remove": pcts(r), **admin_walls(env, spec.dir)}


def growth(first: float, last: float, ratio: float) -> str:
    """How a figure grows from the first point to the last, against how much the quantity grew."""
    if last <= first * 1.3:
        return "flat"
    return "linear or less" if last / max(first, 1e-9) <= ratio * 1.2 else "worse than linear"


def table(title: str, xs: tuple[int, ...], points: list[dict]) -> None:
    print(title)
    print(f"  {'':<30}" + "".join(f"{x:>16}" for x in xs) + "  growth")
    ratio = max(xs[-1], 1) / max(xs[1], 1)  # from the first non-zero point
    for key in ("prolog", "epilog", "create", "remove"):
        cells = "".join(f"{p[key][0]:7.1f}/{p[key][1]:7.1f} " for p in points)
        print(f"  {key + ' p50/p99 ms':<30}{cells} {growth(points[1][key][0], points[-1][key][0], ratio)}")
    for key in ("reap", "status", "doctor"):
        cells = "".join(f"{p[key]:15.0f} " for p in points)
        print(f"  {key + ' wall ms':<30}{cells} {growth(points[1][key], points[-1][key], ratio)}")


def agents_curve(runs: int) -> list[tuple[float, float]]:
    """(create p50, remove p50) ms of 4-IPU partitions on emulators of AGENTS IPU-Machines."""
    import tempfile

    import yaml

    from slurm_ipu.emulator.api import Api
    from slurm_ipu.emulator.process import EmulatorProcess

    out = []
    for agents in AGENTS:
        with tempfile.TemporaryDirectory(prefix="slurm-ipu-curve-") as tmp:
            cluster = Path(tmp, "c.yaml")
            cluster.write_text(yaml.safe_dump({"version": 1, "name": "c", "ilds": agents // 16, "agents_per_ild": 16,
                                               "allocations": {"default": "all"}}))
            emu = EmulatorProcess.start(Path(tmp, "state"), cluster=str(cluster))
            api = Api("127.0.0.1", emu.port, timeout=10)
            try:
                create, remove = [], []
                for k in range(runs * 5):
                    start = time.perf_counter()
                    api.create_partition(name=f"p{k}", size=4)
                    create.append((time.perf_counter() - start) * 1000)
                    start = time.perf_counter()
                    api.remove_partition(f"p{k}")
                    remove.append((time.perf_counter() - start) * 1000)
                out.append((statistics.median(create), statistics.median(remove)))
            finally:
                api.close()
                emu.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=16)
    args = parser.parse_args()
    started = time.monotonic()
    with temporary_lab(nodes=args.nodes, reap_interval=3600.0) as spec:
        up = time.monotonic() - started
        site = config.load(str(spec.path("etc", "site.yaml")), twins=False)
        hook = site.path("hook")
        vipu = [str(spec.path("bin", "vipu")), "--api-host", "127.0.0.1", "--api-port", str(spec.vipu_port)]
        hook_pair(hook, 600000, args.runs, "ipu:1")  # warm-up: the first jobs after the lab's start run slower
        by_parts, made = [], 0
        for n in PARTITIONS:
            for k in range(made, n):  # someone else's partitions: not under the jobs' prefix
                timed([*vipu, "create", "partition", f"load{k}", "--size", "1"], spec.env())
            made = n
            by_parts.append(point(spec, hook, vipu, 700000 + 1000 * n, args.runs))
        for k in range(made):
            timed([*vipu, "remove", "partition", f"load{k}"], spec.env())
        ledger, by_records, written = Ledger(site.state_dir), [], 0
        for n in RECORDS:
            for k in range(written, n):  # records of jobs whose partitions are made as far as they say
                ledger.put(f"{site.partition.prefix}{900000 + k}", job_id=900000 + k, uid=0, hosts=["node1"],
                           size=1)
            written = n
            by_records.append(point(spec, hook, vipu, 800000 + n, args.runs))
    print(f"lab of {args.nodes} hosts up in {up:.1f} s; {args.runs} runs per point")
    table("against live partitions (someone else's, 1 IPU each):", PARTITIONS, by_parts)
    table("against creation records:", RECORDS, by_records)
    by_agents = agents_curve(args.runs)
    print("the emulator's create / remove p50 (its API, kept alive) against IPU-Machines:")
    for agents, (create, remove) in zip(AGENTS, by_agents, strict=True):
        print(f"  {agents:5d} IPU-Machines  {create:6.2f} / {remove:5.2f} ms")
    print(f"  growth: create {growth(by_agents[0][0], by_agents[-1][0], AGENTS[-1] / AGENTS[0])}, remove "
          f"{growth(by_agents[0][1], by_agents[-1][1], AGENTS[-1] / AGENTS[0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
