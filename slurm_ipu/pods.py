"""Pods: which host servers sit with which IPU-Link domains (the multi-Pod cabling).

The site description's `pods:` and `pod_groups:` (slurm_ipu/config/) are read into these, for
the prolog (which places a job's partition in its Pods), job_submit.lua (rendered from them), the
emulator's cluster file and `slurm-ipu status`. A Pod is one switch of Slurm's topology, one V-IPU
allocation of its own (named like the Pod) and `ilds` IPU-Link domains of 64 IPUs. A group of
Pods (a POD256 as two pairs) is a switch above its Pods and a V-IPU allocation holding theirs, so
a job over the Pods of one group gets that group's IPU-Machines.
"""

from __future__ import annotations

from .errors import ConfigError
from .rules import AGENTS_PER_ILD, IPUS_PER_ILD, is_valid_allocation, is_valid_size
from .slurm.hostlist import expand


class Pod:
    __slots__ = ("name", "ilds", "hostlist", "hosts", "ipus_per_host", "_ipus")

    def __init__(self, name: str, ilds: int, hostlist: str, ipus_per_host: int = 0, ipus: int = 0):
        self.name, self.ilds, self.hostlist = name, ilds, hostlist
        self.hosts = tuple(expand(hostlist))
        self.ipus_per_host = ipus_per_host  # its own, else the site's pod.ipus_per_host (Site.pods)
        self._ipus = ipus  # a vPOD of less than an ILD (4 to 32 IPUs); 0: its ILDs'

    @property
    def ipus(self) -> int:
        return self._ipus or self.ilds * IPUS_PER_ILD

    def __repr__(self) -> str:
        return f"Pod({self.name!r}, {self.ilds}, {self.hostlist!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Pod) and (self.name, self.ilds, self.hosts) == (other.name, other.ilds, other.hosts)


class Controller:
    """A V-IPU controller: its address and credentials, the allocation holding its Pods (jobs
    over several of them), what its jobs' tasks are told (IPUOF_VIPU_API_HOST/PORT), its Pods'
    names, and its hosts. A site of one controller has one of these, of vipu.* and ipuof.*."""
    __slots__ = ("name", "host", "port", "cli_config", "allocation", "ipuof_host", "ipuof_port", "pods", "hosts")

    def __init__(self, name: str, host: str, port: int, cli_config: str | None, allocation: str | None,
                 ipuof_host: str, ipuof_port: int, pods: tuple[str, ...], hosts: frozenset[str]):
        self.name, self.host, self.port, self.cli_config = name, host, port, cli_config
        self.allocation, self.ipuof_host, self.ipuof_port = allocation, ipuof_host, ipuof_port
        self.pods, self.hosts = pods, hosts

    def __repr__(self) -> str:
        return f"Controller({self.name!r}, {self.host}:{self.port})"


def allocation_for(used: list[Pod], groups: dict[str, list[str]], everything: str | None) -> str | None:
    """The smallest V-IPU allocation holding the Pods a job uses: its Pod's, its group's, or the
    one holding every Pod."""
    if len(used) == 1:
        return used[0].name
    names = {p.name for p in used}
    return next((g for g, members in groups.items() if names <= set(members)), everything)


def of_host(pods: list[Pod]) -> dict[str, Pod]:
    return {h: p for p in pods for h in p.hosts}


def spanned(pods: list[Pod], nodes) -> list[Pod]:
    """The Pods a job's nodes sit in, in the site's order. A node in no Pod is a site whose
    Slurm nodes and site description disagree: the job cannot be placed."""
    where = of_host(pods)
    stray = [n for n in nodes if n not in where]
    if stray:
        raise ConfigError(f"node(s) {','.join(stray)} belong to no Pod of the site description; "
                               "add them to a Pod's hosts and re-render, or drain them")
    names = {where[n].name for n in nodes}
    return [p for p in pods if p.name in names]


def ild_ids(pods: list[Pod]) -> dict[str, list[int]]:
    """Each Pod's ILD numbers, counted in the site's order: the site lists its Pods in the order
    V-IPU numbers their ILDs (docs/pods.md, "Several Pods")."""
    out, first = {}, 0
    for pod in pods:
        out[pod.name] = list(range(first, first + pod.ilds))
        first += pod.ilds
    return out


def ilds_given(part) -> list[int] | None:
    """Each IPU's ILD as V-IPU printed it (`ild` beside each IPU: the emulator does; whether a real
    controller does is not public), or None."""
    ipus = ((getattr(part, "extra", None) or {}).get("spec") or {}).get("ipus") or ()
    given = [i.get("ild") for i in ipus if isinstance(i, dict)]
    if not given or len(given) != len(ipus) or not all(isinstance(g, int) for g in given):
        return None
    return given


# --- where a multi-host allocation-model job may land ---------------------------------------------
#
# In the allocation model a job's allocation is its hosts' IPU-Machines, and a partition takes an
# aligned block of them in each ILD it spans (docs/vipu.md): two hosts of a POD64 with four hosts
# hold an aligned block of 32 IPUs only if they are its first two or its last two. Slurm knows
# nothing of this, so each run of hosts that can hold one partition is a node feature, and
# job_submit.lua gives a job on n hosts a matching OR of the runs of n (`[a|b|...]`: every node of
# the job has the same one of them). Runs may overlap: each is a feature of its own.

RUN_PREFIX = "ipugroup"  # job_submit.lua.j2's own_features() reads constraints by it
GROUP_FEATURE = RUN_PREFIX + "{n}_{k}"
# Hosts of different IPU counts (Pods of different ipus_per_host): each size is a class of hosts,
# a node feature on each of its hosts (ipuhost16), and job_submit.lua keeps a job to one class, so
# its IPUs per node, its Pods and its partition's total are those of one kind of host.
CLASS_PREFIX = "ipuhost"
CLASS_FEATURE = CLASS_PREFIX + "{size}"
OUR_FEATURES = (RUN_PREFIX, CLASS_PREFIX)  # a site's own features never start so (docs/pods.md)
# Slurm keeps a matching OR's alternatives in a bitmap of MAX_FEATURES (64) bits
# (src/slurmctld/node_scheduler.c); more would be written past its end.
MAX_ALTERNATIVES = 64



class SizeClass:
    """The hosts of one IPU count (CLASS_PREFIX): their Pods, alike (hosts and ILDs each), and
    the node feature that keeps a job among them."""
    __slots__ = ("size", "pods", "hosts", "ilds", "hostlist")

    def __init__(self, size: int, pods: list[Pod]):
        self.size, self.pods = size, len(pods)
        self.hosts, self.ilds = len(pods[0].hosts), pods[0].ilds
        self.hostlist = ",".join(p.hostlist for p in pods)

    @property
    def feature(self) -> str:
        return CLASS_FEATURE.format(size=self.size)

    @property
    def ipus(self) -> int:
        return self.pods * self.ilds * IPUS_PER_ILD


def by_size(pods: list[Pod]) -> dict[int, list[Pod]]:
    """The Pods by their hosts' IPUs, smallest hosts first."""
    out: dict[int, list[Pod]] = {}
    for pod in sorted(pods, key=lambda p: p.ipus_per_host):
        out.setdefault(pod.ipus_per_host, []).append(pod)
    return out


def size_classes(pods: list[Pod]) -> list[SizeClass]:
    """A class per host size, smallest hosts first (job_submit.lua tries them in this order: a job
    that must take whole hosts takes the smallest that hold it)."""
    return [SizeClass(size, members) for size, members in by_size(pods).items()]

def _usable(first: int, count: int) -> bool:
    """Whether `count` IPU-Machines from the Pod's `first` (counted from the Pod's first ILD) are
    one V-IPU allocation that one partition can fill: an aligned block inside an ILD, or whole ILDs."""
    ipus = count * IPUS_PER_ILD // AGENTS_PER_ILD
    if not (is_valid_allocation(ipus) and is_valid_size(ipus)):
        return False
    if count >= AGENTS_PER_ILD:
        return first % AGENTS_PER_ILD == 0 and count % AGENTS_PER_ILD == 0
    return first // AGENTS_PER_ILD == (first + count - 1) // AGENTS_PER_ILD and first % AGENTS_PER_ILD % count == 0


def host_runs(pods: list[tuple[list[str], int]]) -> dict[int, list[tuple[str, ...]]]:
    """For each host count n from 2 to a Pod's hosts less one: the runs of n consecutive hosts
    (a Pod's hosts in hostlist order take its IPU-Machines in order, Site.agents_of) whose
    IPU-Machines one partition can fill, Pod after Pod; each Pod given as its hosts and the
    IPU-Machines per host. A job on all of a Pod's hosts takes the Pod and needs no run (topology
    keeps it in one Pod)."""
    out: dict[int, list[tuple[str, ...]]] = {}
    for hosts, agents_per_host in pods:
        for n in range(2, len(hosts)):
            out.setdefault(n, []).extend(tuple(hosts[i:i + n]) for i in range(len(hosts) - n + 1)
                                         if _usable(i * agents_per_host, n * agents_per_host))
    return {n: runs for n, runs in out.items() if runs}


def run_features(runs: dict[int, list[tuple[str, ...]]]) -> tuple[dict[str, list[str]], dict[int, list[str]]]:
    """(each host's features, each host count's features in site order) for host_runs' runs;
    ConfigError when a count has more runs than Slurm's matching OR can hold."""
    per_host: dict[str, list[str]] = {}
    per_count: dict[int, list[str]] = {}
    for n, found in sorted(runs.items()):
        if len(found) > MAX_ALTERNATIVES:
            raise ConfigError(f"{len(found)} runs of {n} hosts can each hold one allocation-model partition, more "
                              f"than the {MAX_ALTERNATIVES} alternatives Slurm's matching OR constraint holds; split "
                              "the site's allocation-model Pods between clusters, or use the partition model")
        for k, run in enumerate(found):
            feature = GROUP_FEATURE.format(n=n, k=k)
            per_count.setdefault(n, []).append(feature)
            for host in run:
                per_host.setdefault(host, []).append(feature)
    return per_host, per_count
