"""Benchmark (not a test): a storm of short jobs of mixed sizes, with IPUs and without, on a
lab of its own; jobs per minute each way and their ratio, the CPU time slurmctld and our hooks
spent in each, then a leak check.

    .venv/bin/python tests/bench/storm.py [--jobs 500] [--rounds 1] [--pods 2] [--model allocation]
                                          [--drill 200]

With --pods 2 the lab has two Pods of four nodes (topology/tree, one switch per Pod) and the
storm adds 8-node jobs over both: the cost of keeping jobs inside Pods is in the ratio.

With --model allocation each IPU job gets an allocation of its hosts' IPU-Machines (job_submit.lua
raises it to whole hosts, so IPU jobs never share a host). The plain storm is the same jobs
without --gres=ipu. Afterwards no partition, created allocation, journal entry or creation record
may be left, and every node must be idle.

--drill N adds, after the measured storms, N IPU jobs of the same shapes run as users' scripts
run them (in the allocation model each makes its own reconfigurable partition in its allocation,
Graphcore's `vipu create partition p$SLURM_JOB_ID --allocation c$SLURM_JOB_ID`), every 5th
cancelled as soon as it is submitted (pending, starting or running), every 50th overrunning a
one-minute time limit; then the same leak check.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu import config, lab  # noqa: E402
from tests.bench.common import temporary_lab  # noqa: E402

SHAPES = [(1, 1), (1, 2), (1, 4), (1, 16), (2, 4), (2, 8), (4, 4), (1, 8)]  # (nodes, IPUs per node)


def storm(spec: lab.LabSpec, shapes: list[tuple[int, int]], ipus: bool, deadline_s: float = 1800) -> float:
    """Seconds from the first submission until the queue is empty. The plain jobs ask the same
    counts of the lab's twin GRES, which slurm-ipu does not handle, so they pack nodes as the IPU
    jobs do and the ratio measures the hooks (without it the plain jobs shared
    nodes IPU jobs could not). In the allocation model an IPU job holds its hosts' every IPU, so
    the plain jobs hold their hosts (--exclusive, as Graphcore's host-IPU mapping has sites give
    jobs whole nodes)."""
    env = spec.env()
    start = time.monotonic()
    for nodes, per in shapes:
        argv = ["sbatch", "--parsable", "-N", str(nodes), "-o", "/dev/null", "--wrap", "sleep 0.2"]
        if ipus:
            argv.insert(2, f"--gres=ipu:{per}")
        elif spec.model == "allocation":
            argv.insert(2, "--exclusive")
        else:
            argv.insert(2, f"--gres={lab.TWIN_GRES}:{per}")
        subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True, cwd=spec.dir)
    while time.monotonic() - start < deadline_s:
        out = subprocess.run(["squeue", "-h", "-o", "%A"], env=env, capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and not out.stdout.split():
            return time.monotonic() - start
        time.sleep(0.2)  # a benchmark's own poll interval, bounded by the deadline above
    raise SystemExit(f"storm: jobs still queued after {deadline_s:.0f}s")


def drill(spec: lab.LabSpec, shapes: list[tuple[int, int]], deadline_s: float = 1800) -> dict[str, int]:
    """The storm's shapes as users' jobs, with cancels and time limits; how each ended."""
    env = spec.env()
    jobs = []
    for k, (nodes, per) in enumerate(shapes):
        body = "#!/bin/sh\n"
        if spec.model == "allocation":  # whole hosts: the job's allocation has nodes x 16 IPUs
            body += (f"vipu create partition p$SLURM_JOB_ID --allocation c$SLURM_JOB_ID "
                     f"--size {nodes * spec.ipus_per_node} --reconfigurable || exit 3\n")
        body += "sleep 120\n" if k % 50 == 48 else "sleep 0.2\n"
        argv = ["sbatch", "--parsable", f"--gres=ipu:{per}", "-N", str(nodes), "-o", "/dev/null"]
        argv += ["--time=1"] if k % 50 == 48 else []
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True, cwd=spec.dir,
                              input=body)
        jobs.append(proc.stdout.strip().split(";")[0])
        if k % 5 == 4:
            subprocess.run(["scancel", jobs[-1]], env=env, capture_output=True, timeout=60)
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        out = subprocess.run(["squeue", "-h", "-o", "%A"], env=env, capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and not out.stdout.split():
            break
        time.sleep(0.5)  # a benchmark's own poll interval, bounded by the deadline above
    else:
        raise SystemExit(f"drill: jobs still queued after {deadline_s:.0f}s")
    return _endings(env, jobs)


def _endings(env: dict, jobs: list[str]) -> dict[str, int]:
    """How the drill's jobs ended, as sacct tells it, else as slurmctld still remembers them."""
    counts: dict[str, int] = {}
    for job in jobs:
        out = subprocess.run(["scontrol", "show", "job", "-o", job], env=env, capture_output=True, text=True,
                             timeout=60)
        state = next((w.split("=", 1)[1] for w in out.stdout.split() if w.startswith("JobState=")), "GONE")
        exit_code = next((w.split("=", 1)[1] for w in out.stdout.split() if w.startswith("ExitCode=")), "")
        key = state if state != "FAILED" else f"FAILED({exit_code})"
        counts[key] = counts.get(key, 0) + 1
    return counts


def _ticks(pid: int) -> tuple[int, int]:
    """(own CPU, reaped children's CPU) in clock ticks: utime+stime, cutime+cstime."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def _scriptd(ctld: int) -> int | None:
    """slurmctld's script runner (Slurm 21.08+): it forks PrologSlurmctld/EpilogSlurmctld and
    reaps them, so their CPU time shows in its children's account."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as fh:
                    text = fh.read()
            except OSError:
                continue
            if "(slurmscriptd)" in text and int(text.rsplit(")", 1)[1].split()[1]) == ctld:
                return int(entry.name)
    return None


class CpuMeter:
    """slurmctld's CPU (itself and slurmscriptd) and our hooks' (the slurm-ipu-hook runs slurmscriptd
    reaps, and the slurm-ipu service with its `vipu` calls) over one storm."""

    def __init__(self, spec: lab.LabSpec):
        pids = lab.load_pids(spec)
        self.ctld = pids["slurmctld"]["pid"]
        self.scriptd = _scriptd(self.ctld)
        self.service = pids["service"]["pid"]

    def sample(self) -> tuple[float, float, float, float]:
        """(slurmctld, the slurm-ipu-hook runs, the slurm-ipu service itself, its `vipu` calls) in seconds."""
        ctld, _ = _ticks(self.ctld)
        scriptd, scripts = _ticks(self.scriptd) if self.scriptd else (0, 0)
        own, children = _ticks(self.service)
        hz = os.sysconf("SC_CLK_TCK")
        return (ctld + scriptd) / hz, scripts / hz, own / hz, children / hz


def lab_rss(spec: lab.LabSpec) -> float:
    """MiB resident in the lab's recorded processes (slurmctld, the slurmds, munged, the emulator,
    the slurm-ipu service), idle."""
    total = 0
    for key, rec in lab.load_pids(spec).items():
        if key == "spec" or not isinstance(rec, dict) or "pid" not in rec:
            continue
        try:
            with open(f"/proc/{rec['pid']}/status") as fh:
                total += next((int(line.split()[1]) for line in fh if line.startswith("VmRSS:")), 0)
        except OSError:
            continue
    return total / 1024


def leaks(spec: lab.LabSpec) -> list[str]:
    from slurm_ipu.emulator.api import Api

    api = Api(admin_socket=str(spec.path("vipu-emu", "admin.sock")), timeout=10)

    def left() -> list[str]:
        found = [f"partition {p['partition']['id']}" for p in api.list_partitions()]
        found += [f"allocation {a['id']}" for a in api.allocations() if a.get("created")]
        found += [f"journal {p.name}" for p in spec.path("state", "pending-removal").glob("*.json")]
        return found + [f"record {p.name}" for p in spec.path("state", "created").glob("*.json")]

    # An empty queue is not the end: the last jobs' EpilogSlurmctld may still be on its way to
    # the slurm-ipu service, which removes their partitions a moment later. What is still there after
    # 30 s is left behind.
    deadline = time.monotonic() + 30
    while (found := left()) and time.monotonic() < deadline:
        time.sleep(0.2)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(s != "idle" for s in lab.node_states(spec).values()):
        time.sleep(0.2)
    found += [f"node {n} {s}" for n, s in lab.node_states(spec).items() if s != "idle"]
    return found


def story(spec: lab.LabSpec, left: list[str]) -> list[str]:
    """hooks.log's lines about each job whose V-IPU object was left behind: what to look at next."""
    jobs = {m.group(1) for m in (re.search(r"(\d+)(?:\.json)?$", what) for what in left) if m}
    try:
        lines = spec.path("state", "hooks.log").read_text().splitlines()
    except OSError:
        return []
    return [line for line in lines if any(f"job {j}:" in line or f"_{j} " in line or line.endswith(f"_{j}")
                                          for j in jobs)][-40:]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=1, help="plain and IPU storms, alternated")
    parser.add_argument("--pods", type=int, default=1, help="Pods (2 or more: jobs over two Pods too)")
    parser.add_argument("--nodes", type=int, default=None, help="hosts in all (default: four per Pod)")
    parser.add_argument("--model", default="partition", choices=("partition", "allocation"),
                        help="the lab site's vipu.model: a partition per IPU job, or an allocation of its hosts")
    parser.add_argument("--drill", type=int, default=0, metavar="N",
                        help="then N IPU jobs as users run them, with cancels and time limits, and a leak check")
    args = parser.parse_args()
    nodes = args.nodes or 4 * args.pods
    kinds = SHAPES + [(2 * nodes // args.pods, 4), (2 * nodes // args.pods, 16)] if args.pods >= 2 else SHAPES
    shapes = [random.Random(7).choice(kinds) for _ in range(args.jobs)]
    plain, ipu = [], []
    cpu = {False: [0.0] * 4, True: [0.0] * 4}  # ipus -> [slurmctld, slurm-ipu-hook, service, its vipu calls] s
    started = time.monotonic()
    # The product's reap.interval (the lab's own is short, so drills see orphans go): a full reap
    # lists the whole queue, and at the lab's interval its squeue alone would be ~1 ms per job.
    reap_every = config.BY_KEY["reap.interval"].default
    with temporary_lab(nodes=nodes, pods=args.pods, model=args.model, reap_interval=reap_every,
                       twin_gres=True) as spec:
        up = time.monotonic() - started
        rss = lab_rss(spec)
        meter = CpuMeter(spec)
        for _ in range(args.rounds):
            for ipus, times in ((False, plain), (True, ipu)):
                before = meter.sample()
                times.append(storm(spec, shapes, ipus=ipus))
                after = meter.sample()
                cpu[ipus] = [total + a - b for total, a, b in zip(cpu[ipus], after, before, strict=True)]
        left = leaks(spec)
        why = story(spec, left)
        from tests.bench.curves import admin_walls

        walls = admin_walls(spec.env(), spec.dir)  # against the lab's hosts and Pods
        ended = drill(spec, [random.Random(11).choice(kinds) for _ in range(args.drill)]) if args.drill else None
        left += [f"after the drill: {what}" for what in leaks(spec)] if args.drill else []
    per_min = lambda secs: args.jobs * 60 / (sum(secs) / len(secs))  # noqa: E731
    where = (f"{nodes}-node lab" + (f" of {args.pods} Pods" if args.pods > 1 else "")
             + f" (up in {up:.1f} s, {rss:.0f} MiB resident)"
             + (", an allocation per IPU job (its hosts whole)" if args.model == "allocation" else ""))
    print(f"storm of {args.jobs} short jobs of mixed sizes, {args.rounds} round(s), {where}:")
    like = "whole hosts, --exclusive" if args.model == "allocation" else f"the same counts of --gres={lab.TWIN_GRES}"
    print(f"  without IPUs    {per_min(plain):7.1f} jobs/min  ({like})")
    print(f"  with IPUs       {per_min(ipu):7.1f} jobs/min")
    print(f"  ratio ipu/plain {per_min(ipu) / per_min(plain):7.2f}  (target >= 0.9)")
    for ipus, name in ((False, "without IPUs"), (True, "with IPUs")):
        ctld, hooks, service, vipu = cpu[ipus]
        ours = hooks + service
        print(f"  CPU {name:<13} slurmctld {ctld:6.2f} s, our hooks {ours:6.2f} s = {ours / max(ctld, 1e-9):.2f}x "
              f"(slurm-ipu-hook {hooks:.2f} s, slurm-ipu service {service:.2f} s; target <= 0.5x); the vipu calls "
              f"{vipu:.2f} s more (with them {(ours + vipu) / max(ctld, 1e-9):.2f}x)")
    print("  admin commands  " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in walls.items()))
    if ended is not None:
        print(f"  drill of {args.drill} IPU jobs (every 5th cancelled, every 50th over a 1-minute limit): "
              + ", ".join(f"{n} {state.lower()}" for state, n in sorted(ended.items())))
    print(f"  left behind     {', '.join(left) if left else 'nothing'}")
    for line in why:
        print(f"    {line}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
