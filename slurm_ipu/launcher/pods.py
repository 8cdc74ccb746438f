"""Which Pod each host and each GCD sits in, so that every instance drives IPUs of its own
host's Pod (multi-Pod sites, docs/pods.md "Several Pods").

A site names each Pod once: it is a leaf switch of Slurm's topology (holding the Pod's hosts)
and a V-IPU allocation of the same name (holding the Pod's IPU-Machines). So two reads answer
it, both only for a partition whose GCDs lie in more than one ILD: `scontrol show topology`
(host -> Pod) and `vipu list allocations --showjson` (IPU-Machine -> Pod). A single-Pod run
reads neither.
"""

from __future__ import annotations

import json

from .plan import Plan, PlanError


def allocation_agents(text: str) -> dict[str, set[str]]:
    """`vipu list allocations --showjson` -> {allocation: its IPU-Machines (agents)}."""
    try:
        doc = json.loads(text or "[]")
    except ValueError:
        return {}
    return {str(a.get("id")): {str(x) for x in a.get("agents") or ()} for a in doc if isinstance(a, dict)}


def gcd_agents(part) -> list[set[str]]:
    """Each GCD's IPU-Machines, from the partition's IPUs in order (GCD g holds the g-th slice)."""
    spec = (part.extra or {}).get("spec") or {}
    ipus = [i for i in spec.get("ipus") or () if isinstance(i, dict)]
    if len(ipus) != part.size or part.num_gcds < 1:
        return []
    per = part.size // part.num_gcds
    return [{str(i.get("agent")) for i in ipus[g * per:(g + 1) * per]} for g in range(part.num_gcds)]


def spans_ilds(part) -> bool:
    spec = (part.extra or {}).get("spec") or {}
    return len({i.get("ild") for i in spec.get("ipus") or () if isinstance(i, dict)}) > 1


def gcd_pods(gcds: list[set[str]], allocations: dict[str, set[str]], pods: set[str]) -> list[str | None]:
    """The Pod of each GCD: the Pod allocation holding all its IPU-Machines (None: not known)."""
    out = []
    for agents in gcds:
        owner = [name for name in pods if agents and agents <= allocations.get(name, set())]
        out.append(owner[0] if len(owner) == 1 else None)
    return out


def assign(plan: Plan, host_pod: dict[str, str], pod_of_gcd: list[str | None]) -> list[int] | None:
    """GCD per instance: each Pod's instances (in order) take that Pod's GCDs (in order), as many
    instances per GCD as the plan has. None when the Pods are not known for every host and GCD;
    a PlanError when the hosts' instances cannot match the Pods' GCDs."""
    hosts = [host_pod.get(h) for h in plan.hosts]
    if None in hosts or None in pod_of_gcd or len(set(pod_of_gcd)) < 2:
        return None
    per_gcd = plan.num_instances // plan.num_gcds
    todo = {pod: [g for g, p in enumerate(pod_of_gcd) if p == pod] for pod in dict.fromkeys(pod_of_gcd)}
    mapping: list[int] = []
    for inst in plan.instances():
        pod = host_pod[inst.host]
        free = todo.get(pod) or []
        if not free:
            have = {p: sum(1 for i in plan.instances() if host_pod[i.host] == p) for p in dict.fromkeys(hosts)}
            raise PlanError(f"instance {inst.index} on {inst.host} (Pod {pod}) has no GCD of its Pod left: the "
                            f"partition's GCDs lie {_count(pod_of_gcd)} and the instances {_count_map(have)}, "
                            f"{per_gcd} per GCD; run as many instances per Pod as its GCDs take")
        mapping.append(free[0])
        if mapping.count(free[0]) == per_gcd:
            free.pop(0)
    return mapping


def _count(pods: list) -> str:
    return _count_map({p: pods.count(p) for p in dict.fromkeys(pods)})


def _count_map(counts: dict) -> str:
    return ", ".join(f"{n} in Pod {p}" for p, n in counts.items())


def read(part, client_factory, env: dict, show: bool = False,
         timeout: float = 20.0) -> tuple[dict[str, str], list[str | None]]:
    """(host -> Pod, Pod of each GCD) for a partition over several ILDs (with `show`, the hosts'
    Pods for any run); ({}, []) otherwise or when the site has no Pods (no topology)."""
    several = part is not None and part.num_gcds > 1 and spans_ilds(part)
    if not several and not show:
        return {}, []
    import time

    from ..errors import SlurmIpuError
    from ..slurm.commands import SlurmCli

    try:
        switches = SlurmCli.of_user(env, timeout).topology()
    except SlurmIpuError:
        switches = {}
    if not switches or not several:
        return switches, []
    try:
        text = client_factory().allocations_json(time.monotonic() + timeout)
    except SlurmIpuError:
        text = ""
    return switches, gcd_pods(gcd_agents(part), allocation_agents(text), set(switches.values()))
