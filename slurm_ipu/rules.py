"""Partition rules: the one table the emulator, the client, ipurun and job_submit.lua all read.

V-IPU's published rules (docs/vipu.md):
- partition sizes: 1, 2, 4, 8, 16, 32 or 64 IPUs, or any multiple of 64 (192 is valid);
- GCD sizes (IPUs per GCD): 1, 2, 4, 8, 16 or 64, and a GCD never spans ILDs;
- allocation sizes: 4, 8, 16, 32, 64 IPUs or multiples of 64 (whole IPU-Machines of 4 IPUs);
- replica sizes: 1, 2 or 4 IPUs;
- an IPU-Machine (V-IPU agent) holds 4 IPUs; an IPU-POD64 is one IPU-Link domain (ILD) of 16
  agents; a partition over several ILDs needs one instance per ILD.

Choices where the public record is silent (decided here, in one place):
- A partition of N IPUs over L ILDs takes N/L IPUs in each of L distinct ILDs; N/L is itself a
  partition size of at most one ILD. Without --num-ilds the server picks the fewest ILDs that
  hold it (ceil(N / 64)).
- Without --num-gcds a partition has one GCD per ILD (so no GCD spans ILDs), or the fewest valid
  GCDs where an ILD's share is no GCD size; a single GCD in a single ILD may hold any partition
  size up to 64 (the PopRun guide lists a 32-IPU partition).
- A partition never exceeds the IPUs of the allocation it is created in.
- A partition's name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit
  (NAME_CHARS, NAME_MAX): a name that would not fit a request line is refused before it is sent.

Plain classes, not dataclasses: ipurun imports this on every launch.
"""

from __future__ import annotations

from .errors import InvalidPartition, shown

NAME_MAX = 64
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def check_name(name: str) -> str:
    """`name` if it is a valid partition name, else InvalidPartition (a permanent error)."""
    if not 1 <= len(name) <= NAME_MAX or not name[0].isascii() or not name[0].isalnum() or \
            not set(name) <= NAME_CHARS:
        raise InvalidPartition(f"invalid partition name {shown(name)}: use 1-{NAME_MAX} letters, digits, '_', '.', "
                               "'-', starting with a letter or digit")
    return name


# The largest ids Slurm hands out (slurm/slurm.h: MAX_JOB_ID, the ceiling of MaxJobId; and
# SLURM_MAX_NORMAL_STEP_ID): with a prefix they bound the longest name the hooks can make.
MAX_JOB_ID = 0x03FFFFFF
MAX_STEP_ID = 0xFFFFFFF0


def longest_name(prefix: str, steps: bool = True) -> int:
    """The length of the longest V-IPU name under `prefix` with the largest ids Slurm can hand
    out: a step's partition (prefix, job id, '_', step id), or a job's own object (`steps` False)."""
    return len(step_name(prefix, MAX_JOB_ID, MAX_STEP_ID) if steps else job_name(prefix, MAX_JOB_ID))


def job_name(prefix: str, job: int | str) -> str:
    """A job's V-IPU object (its partition, or its allocation): the site's prefix, then the job id
    (slurm_42, c42). The SPANK plugin names it so too (test_constants holds it)."""
    return f"{prefix}{job}"


def step_name(prefix: str, job: int | str, step: int | str) -> str:
    """A step's partition (the allocation model): the job's name, '_', the step id (slurm_42_0)."""
    return f"{prefix}{job}_{step}"


def parse_name(name: str, prefix: str) -> tuple[int, int | None] | None:
    """(job, step or None) when `name` is job_name or step_name under `prefix`, else None."""
    if not name.startswith(prefix):
        return None
    job, sep, step = name[len(prefix):].partition("_")
    if not (job.isascii() and job.isdigit()) or (sep and not (step.isascii() and step.isdigit())):
        return None
    return int(job), int(step) if sep else None


VIPU_PORT = 8090  # the V-IPU controller's port unless told (PopRun's --vipu-server-port default, vipu's)
IPUS_PER_AGENT = 4
AGENTS_PER_ILD = 16
IPUS_PER_ILD = IPUS_PER_AGENT * AGENTS_PER_ILD  # 64: one IPU-POD64
# Our bounds where V-IPU states none (so a typo of a few zeros is refused at once, not run for
# minutes): a Pod is at most 16 ILDs (an IPU-POD1024), a cluster at most 1,024 ILDs (65,536 IPUs).
MAX_POD_ILDS = 16
MAX_CLUSTER_ILDS = 1024

SMALL_SIZES = (1, 2, 4, 8, 16, 32, 64)   # then every multiple of 64
GCD_SIZES = (1, 2, 4, 8, 16, 64)
ALLOCATION_SMALL = (4, 8, 16, 32, 64)    # then every multiple of 64
REPLICA_SIZES = (1, 2, 4)

# The table in words. Everything below derives its checks and messages from the tuples above.
RULES = {
    "size": "1, 2, 4, 8, 16, 32 or 64 IPUs, or a multiple of 64, up to the IPUs available",
    "num_gcds": "divides the size into GCDs of 1, 2, 4, 8, 16 or 64 IPUs, none spanning ILDs",
    "num_ilds": "at most the cluster's ILDs, each holding size/ILDs IPUs (a partition size of at most 64)",
    "allocation": "4, 8, 16, 32 or 64 IPUs or a multiple of 64; a partition's IPUs all come from one",
    "replica": "a replica takes 1, 2 or 4 IPUs (V-IPU's replica sizes)",
}


class Shape:
    """A validated partition request."""

    __slots__ = ("size", "num_gcds", "num_ilds")

    def __init__(self, size: int, num_gcds: int = 1, num_ilds: int = 1):
        self.size, self.num_gcds, self.num_ilds = size, num_gcds, num_ilds

    def __eq__(self, other) -> bool:
        return isinstance(other, Shape) and (self.size, self.num_gcds, self.num_ilds) == (
            other.size, other.num_gcds, other.num_ilds)

    def __hash__(self) -> int:
        return hash((self.size, self.num_gcds, self.num_ilds))

    def __repr__(self) -> str:
        return f"Shape(size={self.size}, num_gcds={self.num_gcds}, num_ilds={self.num_ilds})"

    @property
    def ipus_per_ild(self) -> int:
        return self.size // self.num_ilds

    @property
    def ipus_per_gcd(self) -> int:
        return self.size // self.num_gcds


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def is_valid_size(n: int) -> bool:
    return n in SMALL_SIZES or (n > 0 and n % IPUS_PER_ILD == 0)


def is_valid_allocation(n: int) -> bool:
    """Also what a Pod may hold: whole IPU-Machines, as an allocation."""
    return n in ALLOCATION_SMALL or (n > 0 and n % IPUS_PER_ILD == 0)


def valid_sizes(max_ipus: int) -> list[int]:
    small = [s for s in SMALL_SIZES if s <= max_ipus]
    return small + list(range(2 * IPUS_PER_ILD, max_ipus + 1, IPUS_PER_ILD))


def _gcd_ok(size: int, gcds: int, ilds: int) -> bool:
    if gcds < 1 or size % gcds:
        return False
    per = size // gcds
    if (size // ilds) % per:
        return False  # the GCD would span ILDs
    return per in GCD_SIZES or (gcds == 1 and ilds == 1)


def valid_gcds(size: int, ilds: int = 1) -> list[int]:
    return [g for g in range(1, size + 1) if _gcd_ok(size, g, ilds)]


def valid_ilds(size: int, cluster_ilds: int, ipus_per_ild: int = IPUS_PER_ILD) -> list[int]:
    return [n for n in range(1, cluster_ilds + 1)
            if size % n == 0 and size // n <= ipus_per_ild and is_valid_size(size // n)]


def default_ilds(size: int, ipus_per_ild: int = IPUS_PER_ILD) -> int:
    return max(1, -(-size // ipus_per_ild))


def default_gcds(size: int, ilds: int) -> int:
    """One per ILD: the fewest GCDs none of which spans ILDs; where an ILD's share is no GCD size
    (32 IPUs in each of 2 ILDs), the fewest valid ones (2 GCDs of 16 per ILD)."""
    valid = valid_gcds(size, ilds)
    return ilds if ilds in valid or not valid else valid[0]


def _listing(values: list[int]) -> str:
    if len(values) > 12:
        values = [*values[:11], "...", values[-1]]
    return ", ".join(str(v) for v in values) if values else "none"


def check_size(size: int, max_ipus: int, where: str = "this cluster") -> int:
    hint = f"valid sizes on {where}: {_listing(valid_sizes(max_ipus))}"
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise InvalidPartition(f"invalid partition size {size!r}: must be positive; {hint}")
    if not is_valid_size(size):
        raise InvalidPartition(f"invalid partition size {size}: not 1, 2, 4, 8, 16, 32, 64 or a multiple of 64; "
                               f"{hint}")
    if size > max_ipus:
        raise InvalidPartition(f"invalid partition size {size}: exceeds the {max_ipus} IPUs of {where}; {hint}")
    return size


def check_shape(size: int, num_gcds: int | None = None, num_ilds: int | None = None, *, cluster_ilds: int = 1,
                ipus_per_ild: int = IPUS_PER_ILD) -> Shape:
    """Validate a request against the cluster and fill in the defaults; every rejection lists
    the valid choices."""
    check_size(size, cluster_ilds * ipus_per_ild)
    ilds_ok = valid_ilds(size, cluster_ilds, ipus_per_ild)
    ilds = default_ilds(size, ipus_per_ild) if num_ilds is None else num_ilds
    if ilds not in ilds_ok:
        raise InvalidPartition(f"invalid --num-ilds {ilds} for a partition of {size} IPUs on a cluster of "
                               f"{cluster_ilds} ILD(s); valid ILD counts: {_listing(ilds_ok)}")
    gcds = default_gcds(size, ilds) if num_gcds is None else num_gcds
    if not _gcd_ok(size, gcds, ilds):
        raise InvalidPartition(f"invalid --num-gcds {gcds} for a partition of {size} IPUs over {ilds} ILD(s); "
                               f"valid GCD counts: {_listing(valid_gcds(size, ilds))}")
    return Shape(size=size, num_gcds=gcds, num_ilds=ilds)


MAX_POD_IPUS = MAX_POD_ILDS * IPUS_PER_ILD
POD_SIZES = f"4, 8, 16, 32, 64 or a multiple of 64 up to {MAX_POD_IPUS}"


def is_pod_size(ipus: int) -> bool:
    """A Pod (the IPUs one V-IPU controller and one licence pool hold): an allocation's size, of
    at most MAX_POD_ILDS ILDs."""
    return is_valid_allocation(ipus) and ipus <= MAX_POD_IPUS


def check_pod(ipus: int) -> int:
    if isinstance(ipus, bool) or not isinstance(ipus, int) or not is_pod_size(ipus):
        raise InvalidPartition(f"{shown(ipus)} IPUs is not a Pod size; use {POD_SIZES} (whole IPU-Machines: "
                               "IPU-POD16, POD64, POD128, POD256)")
    return ipus


def check_job_request(ipus_per_node: int, nodes: int, max_ipus: int) -> int:
    """A Slurm job's total (IPUs per node x nodes) must itself be a valid partition size."""
    total = ipus_per_node * nodes
    try:
        return check_size(total, max_ipus, where="this Pod")
    except InvalidPartition as exc:
        raise InvalidPartition(
            f"--gres=ipu:{ipus_per_node} on {nodes} node(s) asks for {total} IPUs: " + str(exc).split(": ", 1)[1]
        ) from None
