"""Partition rules: the one table the emulator, the client and job_submit.lua all read.

Public facts (see shared/reference/vipu-poprun.md, section 2): sizes are powers of two;
an IPU-Machine (V-IPU agent) holds 4 IPUs; an IPU-POD64 is one IPU-Link domain (ILD) of
16 agents; partitions spanning several ILDs need one instance per ILD.

Choices where the public record is silent (UNCONFIRMED upstream, decided here, in one place):
- A partition of N IPUs over L ILDs takes N/L IPUs in each of L distinct ILDs; L is a power
  of two, at most the cluster's ILD count, and N/L at most one ILD. Without --num-ilds the
  server picks the smallest L that fits (ceil(N / ILD size), rounded to a power of two).
- GCD counts are powers of two that divide the size (every GCD gets size/G IPUs, at least 1).
- A partition never exceeds the IPUs of the allocation it is created in.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidPartition

IPUS_PER_AGENT = 4
AGENTS_PER_ILD = 16
IPUS_PER_ILD = IPUS_PER_AGENT * AGENTS_PER_ILD  # 64: one IPU-POD64

# The table. Everything below derives its checks and its messages from these rows.
RULES = {
    "size": "a power of two from 1 up to the IPUs available (cluster or allocation)",
    "num_gcds": "a power of two that divides the size",
    "num_ilds": "a power of two, at most the cluster's ILDs, with size/ILDs at most one ILD",
    "allocation": "a partition's IPUs all come from one allocation",
    "replica": "a replica takes 1, 2 or 4 IPUs (V-IPU's replica sizes)",
}
REPLICA_SIZES = (1, 2, 4)


@dataclass(frozen=True)
class Shape:
    """A validated partition request."""

    size: int
    num_gcds: int = 1
    num_ilds: int = 1

    @property
    def ipus_per_ild(self) -> int:
        return self.size // self.num_ilds

    @property
    def ipus_per_gcd(self) -> int:
        return self.size // self.num_gcds


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def powers_of_two(limit: int) -> list[int]:
    """1, 2, 4, ... up to and including limit (if limit is itself reachable)."""
    out, p = [], 1
    while p <= limit:
        out.append(p)
        p *= 2
    return out


def valid_sizes(max_ipus: int) -> list[int]:
    return powers_of_two(max_ipus)


def valid_gcds(size: int) -> list[int]:
    return [g for g in powers_of_two(size) if size % g == 0]


def valid_ilds(size: int, cluster_ilds: int, ipus_per_ild: int = IPUS_PER_ILD) -> list[int]:
    return [
        n
        for n in powers_of_two(cluster_ilds)
        if size % n == 0 and size // n <= ipus_per_ild
    ]


def default_ilds(size: int, ipus_per_ild: int = IPUS_PER_ILD) -> int:
    need = -(-size // ipus_per_ild)
    return 1 << (need - 1).bit_length()


def _listing(values: list[int]) -> str:
    return ", ".join(str(v) for v in values) if values else "none"


def check_size(size: int, max_ipus: int, where: str = "this cluster") -> int:
    sizes = valid_sizes(max_ipus)
    hint = f"valid sizes on {where}: {_listing(sizes)}"
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise InvalidPartition(f"invalid partition size {size!r}: must be positive; {hint}")
    if not is_power_of_two(size):
        raise InvalidPartition(f"invalid partition size {size}: not a power of two; {hint}")
    if size > max_ipus:
        raise InvalidPartition(
            f"invalid partition size {size}: exceeds the {max_ipus} IPUs of {where}; {hint}"
        )
    return size


def check_shape(
    size: int,
    num_gcds: int | None = None,
    num_ilds: int | None = None,
    *,
    cluster_ilds: int = 1,
    ipus_per_ild: int = IPUS_PER_ILD,
) -> Shape:
    """Validate a request against the cluster; every rejection lists the valid choices."""
    check_size(size, cluster_ilds * ipus_per_ild)
    gcds = 1 if num_gcds is None else num_gcds
    if gcds not in valid_gcds(size):
        raise InvalidPartition(
            f"invalid --num-gcds {gcds} for a partition of {size} IPUs; "
            f"valid GCD counts: {_listing(valid_gcds(size))}"
        )
    ilds_ok = valid_ilds(size, cluster_ilds, ipus_per_ild)
    ilds = default_ilds(size, ipus_per_ild) if num_ilds is None else num_ilds
    if ilds not in ilds_ok:
        raise InvalidPartition(
            f"invalid --num-ilds {ilds} for a partition of {size} IPUs on a cluster of "
            f"{cluster_ilds} ILD(s); valid ILD counts: {_listing(ilds_ok)}"
        )
    return Shape(size=size, num_gcds=gcds, num_ilds=ilds)


def check_job_request(ipus_per_node: int, nodes: int, max_ipus: int) -> int:
    """A Slurm job's total (IPUs per node x nodes) must itself be a valid partition size."""
    total = ipus_per_node * nodes
    try:
        return check_size(total, max_ipus, where="this Pod")
    except InvalidPartition as exc:
        raise InvalidPartition(
            f"--gres=ipu:{ipus_per_node} on {nodes} node(s) asks for {total} IPUs: "
            + str(exc).split(": ", 1)[1]
        ) from None
