"""Host topology from sysfs, and PopRun's process-placement strategies as data over one loop.

Standard library only and no package-relative imports: the per-task wrapper imports this file
directly under `python -S -I`, so binding costs milliseconds, not a package import.
Topology discovery takes a root directory, so tests describe machines we do not have.
"""

from __future__ import annotations

import os

STRATEGIES = ("spreadnuma", "scatternuma", "scattersocket", "close", "disabled")
ONE_CORE_EACH = ("scatternuma", "scattersocket", "close")  # these need a core per instance on each host


try:  # ipurun imports this as part of the package: its errors are SlurmIpuErrors (one line, exit 2)
    from ..errors import SlurmIpuError as _Base
except ImportError:  # the per-task wrapper imports this file alone and prints the message itself
    _Base = Exception


class PlacementError(_Base):
    """A binding that cannot be made; one line for the user, never a traceback."""


# Plain tuple subclasses, not NamedTuple or dataclass: importing typing or dataclasses costs
# the per-task wrapper more than everything else it does (measured: ~15 ms of ~20).
class Cpu(tuple):
    """(id, socket, core, numa): core is the core id within its socket."""

    __slots__ = ()

    def __new__(cls, id: int, socket: int, core: int, numa: int):
        return tuple.__new__(cls, (id, socket, core, numa))

    id = property(lambda self: self[0])
    socket = property(lambda self: self[1])
    core = property(lambda self: self[2])
    numa = property(lambda self: self[3])


class Binding(tuple):
    """(cpus, numa, membind): absolute CPU numbers (empty: leave binding alone), the NUMA nodes
    the instance runs on, and whether memory is bound to them too (spreadnuma)."""

    __slots__ = ()

    def __new__(cls, cpus: tuple[int, ...], numa: tuple[int, ...], membind: bool):
        return tuple.__new__(cls, (cpus, numa, membind))

    cpus = property(lambda self: self[0])
    numa = property(lambda self: self[1])
    membind = property(lambda self: self[2])


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def format_cpulist(cpus) -> str:
    cpus = sorted(cpus)
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def _read(path: str, default: str | None = None) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        if default is None:
            raise
        return default


def allowed_cpus(root: str = "/") -> set[int]:
    """The CPUs this process may use: its affinity on the real machine, Cpus_allowed_list
    under a test root (absent: every CPU)."""
    if root == "/":
        return set(os.sched_getaffinity(0))
    status = _read(os.path.join(root, "proc/self/status"), "")
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return set(parse_cpulist(line.split(":", 1)[1]))
    return set()


def read_topology(root: str = "/", allowed: set[int] | None = None) -> list[Cpu]:
    """Every CPU the process may use, with its socket, core and NUMA node, in CPU order."""
    sysdir = os.path.join(root, "sys/devices/system")
    online = parse_cpulist(_read(os.path.join(sysdir, "cpu/online")))
    numa_of: dict[int, int] = {}
    nodedir = os.path.join(sysdir, "node")
    if os.path.isdir(nodedir):
        for name in os.listdir(nodedir):
            if name.startswith("node") and name[4:].isdigit():
                for cpu in parse_cpulist(_read(os.path.join(nodedir, name, "cpulist"), "")):
                    numa_of[cpu] = int(name[4:])
    allowed = allowed if allowed is not None else allowed_cpus(root)
    cpus = []
    for cpu in online:
        if allowed and cpu not in allowed:
            continue
        topo = os.path.join(sysdir, f"cpu/cpu{cpu}/topology")
        cpus.append(Cpu(cpu, int(_read(os.path.join(topo, "physical_package_id"), "0")),
                        int(_read(os.path.join(topo, "core_id"), str(cpu))), numa_of.get(cpu, 0)))
    if not cpus:
        raise PlacementError(f"no usable CPUs under {root} (cpuset empty?)")
    return cpus


def _cores(cpus: list[Cpu]) -> list[list[int]]:
    """CPUs grouped by physical core (SMT siblings together), in order of first CPU."""
    groups: dict[tuple[int, int], list[int]] = {}
    for c in cpus:
        groups.setdefault((c.socket, c.core), []).append(c.id)
    return sorted(groups.values(), key=lambda g: g[0])


def _chunk(items: list, k: int, n: int) -> list:
    return items[k * len(items) // n:(k + 1) * len(items) // n]


def _share(cpus: list[Cpu], k: int, n: int, domain) -> tuple[list[Cpu], int, int]:
    """Domains (NUMA nodes or sockets) round robin over instances; instances that share a
    domain split its cores. Returns the domain's CPUs and this instance's slot among sharers."""
    domains = sorted({domain(c) for c in cpus})
    mine = domains[k % len(domains)]
    sharers = [j for j in range(n) if j % len(domains) == k % len(domains)]
    return [c for c in cpus if domain(c) == mine], sharers.index(k), len(sharers)


def _by_cores(cpus: list[Cpu], slot: int, count: int, what: str) -> list[int]:
    cores = _cores(cpus)
    if len(cores) < count:
        raise PlacementError(f"{count} instances share {len(cores)} core(s) of {what}; "
                             "use fewer instances per host or --process-placement disabled")
    return [cpu for core in _chunk(cores, slot, count) for cpu in core]


def bind(cpus: list[Cpu], k: int, n: int, strategy: str) -> Binding:
    """Binding of local instance k of n on a host whose usable CPUs are `cpus`."""
    if strategy not in STRATEGIES:
        raise PlacementError(f"unknown --process-placement {strategy!r}; use one of {', '.join(STRATEGIES)}")
    if strategy == "disabled":
        return Binding((), (), False)
    if strategy == "close":
        ids = _by_cores(cpus, k, n, "the host")
    elif strategy == "scattersocket":
        dom, slot, count = _share(cpus, k, n, lambda c: c.socket)
        ids = _by_cores(dom, slot, count, f"socket {dom[0].socket}")
    else:
        nodes = sorted({c.numa for c in cpus})
        if strategy == "spreadnuma" and n <= len(nodes):
            mine = set(_chunk(nodes, k, n))  # each instance gets whole NUMA nodes
            ids = [c.id for c in cpus if c.numa in mine]
        else:
            dom, slot, count = _share(cpus, k, n, lambda c: c.numa)
            if strategy == "spreadnuma" and count > len(_cores(dom)):
                ids = [c.id for c in dom]  # spreadnuma binds to NUMA nodes, never one core each: share the node
            else:
                ids = _by_cores(dom, slot, count, f"NUMA node {dom[0].numa}")
    numa = tuple(sorted({c.numa for c in cpus if c.id in set(ids)}))
    return Binding(tuple(sorted(ids)), numa, strategy == "spreadnuma")
