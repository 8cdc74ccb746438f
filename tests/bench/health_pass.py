"""Benchmark (not a test): what one health pass costs against 1,024 IPU-Machines.

    .venv/bin/python tests/bench/health_pass.py [--runs 20] [--machines 1024]

A site of POD256s (64 IPU-Machines, 16 hosts of 16 IPUs each) adding up to --machines: 16 Pods,
256 hosts, for 1,024. The emulator serves a cluster of that many machines on a free loopback
port; the pass asks it through the emulator's `vipu-admin` (a Python CLI: a real Pod's is a
compiled one, so this call is an upper bound), and a Slurm that answers from memory stands in for
slurmctld (`sinfo -N` of 256 nodes and the `scontrol update`s are slurmctld's time, not the pass's;
the lab's are measured in docs/performance.md). Each model in turn: the allocation model drains
hosts, the partition model reserves licences. Per scenario, the median of --runs passes: the
pass's wall time, the share of it in the `vipu-admin` call, and the pass's own CPU in this process.
Compared with the per-node alternative (Slurm's HealthCheckProgram asking V-IPU on every node):
one call per host per interval.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu import config  # noqa: E402
from slurm_ipu.emulator.api import Api  # noqa: E402
from slurm_ipu.emulator.process import EmulatorProcess  # noqa: E402
from slurm_ipu.hooks import health  # noqa: E402
from slurm_ipu.vipu import VipuClient  # noqa: E402

VIPU = [sys.executable, "-m", "slurm_ipu.emulator.vipucli"]
MACHINES_PER_POD = 64  # a POD256
HOSTS_PER_POD = 16


class MemorySlurm:
    """slurmctld's answers from memory: every node idle, no reservation; changes are counted."""

    def __init__(self, nodes: list[str]):
        self.nodes = {n: ("idle", "") for n in nodes}
        self.reservations: dict[str, int] = {}
        self.changes = 0

    def node_reasons(self):
        return dict(self.nodes)

    def drain(self, node, reason):
        self.nodes[node], self.changes = ("drained", reason), self.changes + 1

    def resume(self, node):
        self.nodes[node], self.changes = ("idle", ""), self.changes + 1

    def licence_reservations(self, licence):
        return dict(self.reservations)

    def reserve_licences(self, name, licence, count, user, update=False):
        self.reservations[name], self.changes = count, self.changes + 1

    def delete_reservation(self, name):
        self.reservations.pop(name, None)
        self.changes += 1

    def active_jobs(self):
        return {}


def site(tmp: Path, pods: int, model: str):
    entries = [{"name": f"p{k}", "ilds": MACHINES_PER_POD // 16, "model": model,
                "hosts": f"p{k}n[01-{HOSTS_PER_POD:02d}]"} for k in range(pods)]
    path = tmp / f"site-{model}.yaml"
    path.write_text(json.dumps({
        "version": 1, "cluster": "bench", "state_dir": str(tmp / f"state-{model}"),
        "vipu": {"host": "127.0.0.1", "command": "/usr/bin/true", "allocation": "all"},
        "pod": {"ipus_per_host": 16}, "pods": entries, "health": {"interval": 60}}))
    (tmp / f"state-{model}").mkdir(exist_ok=True)
    return config.load(str(path), environ={})


class TimedClient(VipuClient):
    """The pass's client, with the time spent in `vipu-admin` summed."""

    spent, calls = 0.0, 0

    def _once(self, args, timeout, admin=False):
        self.calls += 1
        start = time.perf_counter()
        try:
            return super()._once(args, timeout, admin)
        finally:
            self.spent += time.perf_counter() - start


def one_pass(cfg, client: TimedClient, slurm: MemorySlurm) -> tuple[float, float, float]:
    """(wall ms, of it in vipu-admin ms, this process's CPU ms) of one pass."""
    client.spent = 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    health.run(cfg, client, slurm, out=lambda line: None, deadline=time.monotonic() + 60)
    return (time.perf_counter() - wall) * 1000, client.spent * 1000, (time.process_time() - cpu) * 1000


def scenario(name: str, cfg, client, slurm, runs: int) -> dict:
    before = slurm.changes
    first = one_pass(cfg, client, slurm)
    changed = slurm.changes - before
    steady = [one_pass(cfg, client, slurm) for _ in range(runs)]
    med = [statistics.median(x[k] for x in steady) for k in range(3)]
    print(f"  {name:<44} first pass {first[0]:7.1f} ms ({changed:3d} Slurm changes); then, median of {runs}: "
          f"{med[0]:6.1f} ms wall, {med[1]:6.1f} ms in vipu-admin, {med[2]:5.1f} ms CPU in the pass")
    return {"first_ms": first[0], "changes": changed, "wall_ms": med[0], "vipu_ms": med[1], "cpu_ms": med[2]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--machines", type=int, default=1024, help="a multiple of 64 (POD256s)")
    args = p.parse_args()
    pods = max(1, args.machines // MACHINES_PER_POD)
    machines, hosts = pods * MACHINES_PER_POD, pods * HOSTS_PER_POD
    with tempfile.TemporaryDirectory(prefix="slurm-ipu-bench-health-") as tmp_name:
        tmp = Path(tmp_name)
        cluster = tmp / "cluster.yaml"
        cluster.write_text(json.dumps({"name": "bench", "ilds": machines // 16, "allocations": {"all": "all"}}))
        emu = EmulatorProcess.start(tmp / "emu", cluster=str(cluster))
        try:
            admin = Api(admin_socket=emu.admin_socket, timeout=30)
            client = TimedClient(command=VIPU, admin_command=VIPU, host="127.0.0.1", port=emu.port, timeout=30,
                                 retries=0, emulator_flags=True)
            print(f"health pass: {machines} IPU-Machines, {pods} POD256s, {hosts} hosts "
                  f"(emulator on 127.0.0.1:{emu.port})")
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            results = {}
            for model in ("allocation", "partition"):
                cfg = site(tmp, pods, model)
                slurm = MemorySlurm([h for p in cfg.pods for h in p.hosts])
                print(f" {model} model:")
                results[model] = [scenario("every machine Up", cfg, client, slurm, args.runs)]
                failed = [f"ag{k * MACHINES_PER_POD + 5}" for k in range(pods)]  # one per Pod
                for agent in failed:
                    admin.agent_fault(agent, "down")
                results[model].append(scenario(f"{len(failed)} machines down (one per Pod)", cfg, client, slurm,
                                               args.runs))
                for agent in failed:
                    admin.agent_fault(agent, "up")
                results[model].append(scenario("all back Up", cfg, client, slurm, args.runs))
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            calls = client.calls
            per_call = ((used.ru_utime + used.ru_stime) - (children.ru_utime + children.ru_stime)) * 1000 / calls
            steady = results["allocation"][0]["vipu_ms"]
            print(f" per pass: one `vipu-admin list agents` of {machines} machines ({steady:.1f} ms wall; the "
                  f"emulator's Python CLI, {per_call:.1f} ms CPU a call) and one `sinfo -N`, whatever the number of "
                  "hosts; with machines failed, one listing of partitions and one of allocations more")
            print(f" the per-node alternative (HealthCheckProgram on each of {hosts} hosts): {hosts} such calls "
                  f"per interval, {hosts * steady / 1000:.1f} s of V-IPU calls and {hosts * per_call / 1000:.1f} s "
                  "CPU across the nodes")
            admin.close()
        finally:
            emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
