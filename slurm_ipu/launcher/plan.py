"""Instances, replicas, GCDs and ILDs: PopRun's rules, checked before anything starts.

Replicas are divided evenly among instances, instances evenly among hosts in block order
(instance i on host i // per_host), at least one instance per ILD (ILD of instance i is
i * ILDs // instances), and with a multi-GCD partition each instance drives GCD
i // (instances / GCDs). Every impossible combination raises PlanError with the fix.
"""

from __future__ import annotations

from .. import rules
from ..errors import SlurmIpuError


class PlanError(SlurmIpuError):
    component = "ipurun"


# Plain classes, not dataclasses: ipurun imports this on every launch, and dataclasses costs
# more start-up than the whole planner.
class Instance:
    __slots__ = ("index", "host", "host_index", "local_index", "replica_offset", "gcd", "ild")

    def __init__(self, index: int, host: str, host_index: int, local_index: int, replica_offset: int,
                 gcd: int, ild: int):
        self.index, self.host, self.host_index, self.local_index = index, host, host_index, local_index
        self.replica_offset, self.gcd, self.ild = replica_offset, gcd, ild

    def __repr__(self) -> str:
        return f"Instance({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"


class Plan:
    __slots__ = ("hosts", "num_instances", "num_replicas", "ipus_per_replica", "num_ilds", "num_gcds", "distribution")

    def __init__(self, hosts: tuple[str, ...], num_instances: int, num_replicas: int, ipus_per_replica: int,
                 num_ilds: int, num_gcds: int, distribution: str = "block"):
        self.hosts, self.num_instances, self.num_replicas = hosts, num_instances, num_replicas
        self.ipus_per_replica, self.num_ilds, self.num_gcds = ipus_per_replica, num_ilds, num_gcds
        self.distribution = distribution  # srun's: block (PopRun's order) or cyclic (mpirun --map-by node)

    @property
    def replicas_per_instance(self) -> int:
        return self.num_replicas // self.num_instances

    @property
    def instances_per_host(self) -> int:
        return self.num_instances // len(self.hosts)

    @property
    def total_ipus(self) -> int:
        return self.num_replicas * self.ipus_per_replica

    def instance(self, i: int) -> Instance:
        per_host = self.instances_per_host
        host, local = (i % len(self.hosts), i // len(self.hosts)) if self.distribution == "cyclic" else (
            i // per_host, i % per_host)
        return Instance(
            index=i, host=self.hosts[host], host_index=host, local_index=local,
            replica_offset=i * self.replicas_per_instance,
            gcd=i // (self.num_instances // self.num_gcds), ild=i * self.num_ilds // self.num_instances,
        )

    def instances(self) -> list[Instance]:
        return [self.instance(i) for i in range(self.num_instances)]


def _divisors(n: int) -> str:
    ds = [d for d in range(1, n + 1) if n % d == 0]
    return ", ".join(map(str, ds[:8])) + (", ..." if len(ds) > 8 else "")


def make_plan(num_instances: int, num_replicas: int, ipus_per_replica: int, hosts: list[str] | tuple[str, ...],
              num_ilds: int = 1, num_gcds: int = 1, cpus_per_host: int | None = None,
              partition: tuple[str, int] | None = None, distribution: str = "block",
              reshape=lambda gcds: f", or --update-partition=yes to recreate it with {gcds} GCD(s)") -> Plan:
    """partition: (name, size) of the partition the run drives, when there is one. reshape(gcds):
    the advice for a partition of that many GCDs (partition.reshape_hint: how depends on whose
    partition it is, read only when the advice is given)."""
    for name, value in (("--num-instances", num_instances), ("--num-replicas", num_replicas),
                        ("--ipus-per-replica", ipus_per_replica), ("--num-ilds", num_ilds)):
        if value < 1:
            raise PlanError(f"{name} {value} must be at least 1")
    if not hosts:
        raise PlanError("no hosts to run on; give --host or run inside a Slurm allocation")
    if ipus_per_replica not in rules.REPLICA_SIZES:
        raise PlanError(f"--ipus-per-replica {ipus_per_replica}: {rules.RULES['replica']}; "
                        f"use --ipus-per-replica {' or '.join(map(str, rules.REPLICA_SIZES))}")
    if num_replicas % num_instances:
        raise PlanError(f"{num_replicas} replicas do not divide evenly over {num_instances} instances; "
                        f"use --num-instances {_divisors(num_replicas)}")
    if num_instances % len(hosts):
        raise PlanError(f"{num_instances} instances do not divide evenly over {len(hosts)} hosts; "
                        f"use a multiple of {len(hosts)} instances, or fewer hosts")
    if num_ilds > num_instances:
        raise PlanError(f"{num_ilds} ILDs need at least one instance each; use --num-instances {num_ilds} or more")
    if num_instances % num_ilds:
        raise PlanError(f"{num_instances} instances do not divide evenly over {num_ilds} ILDs; "
                        f"use a multiple of {num_ilds} instances")
    if num_gcds > num_instances:
        raise PlanError(f"the partition has {num_gcds} GCDs but only {num_instances} instances; "
                        f"use --num-instances {num_gcds}{reshape(num_instances)}")
    if num_gcds > 1 and num_instances % num_gcds:
        raise PlanError(f"the partition has {num_gcds} GCDs: {num_instances} instances cannot share them evenly; "
                        f"use a multiple of {num_gcds} instances{reshape(1)}")
    if partition is not None:
        check_fit(num_replicas, ipus_per_replica, *partition)
    per_host = num_instances // len(hosts)
    if cpus_per_host is not None and per_host > cpus_per_host:
        raise PlanError(f"{per_host} instances per host, but this allocation has {cpus_per_host} CPU(s) per host and "
                        f"the placement binds one core per instance; ask for more (sbatch --ntasks-per-node={per_host} "
                        "or -c), or use --process-placement spreadnuma")
    return Plan(tuple(hosts), num_instances, num_replicas, ipus_per_replica, num_ilds, num_gcds, distribution)


def check_fit(num_replicas: int, ipus_per_replica: int, name: str, size: int) -> None:
    """The replicas must fit in the partition. Each GCD's share then fits its GCD too: the
    instances divide evenly over the GCDs and the replicas over the instances (checked before),
    so every GCD of size/G IPUs gets exactly 1/G of the replicas."""
    need = num_replicas * ipus_per_replica
    if need > size:
        raise PlanError(f"{num_replicas} replicas x {ipus_per_replica} IPU(s) = {need} IPUs, but partition {name} "
                        f"has {size}; use --num-replicas {size // ipus_per_replica} or fewer, or a job with more IPUs")
