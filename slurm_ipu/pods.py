"""Pods: which host servers sit with which IPU-Link domains (the multi-Pod cabling).

The site description's `pods:` and `pod_groups:` (slurm_ipu/config.py) are read into these, for
the prolog (which places a job's partition in its Pods), job_submit.lua (rendered from them), the
emulator's cluster file and `slurm-ipu status`. A Pod is one switch of Slurm's topology, one V-IPU
allocation of its own (named like the Pod) and `ilds` IPU-Link domains of 64 IPUs. A group of
Pods (a POD256 as two pairs) is a switch above its Pods and a V-IPU allocation holding theirs, so
a job over the Pods of one group gets that group's IPU-Machines.
"""

from __future__ import annotations

from .errors import ConfigError
from .rules import IPUS_PER_ILD
from .slurm.hostlist import expand


class Pod:
    __slots__ = ("name", "ilds", "hostlist", "hosts")

    def __init__(self, name: str, ilds: int, hostlist: str):
        self.name, self.ilds, self.hostlist = name, ilds, hostlist
        self.hosts = tuple(expand(hostlist))

    @property
    def ipus(self) -> int:
        return self.ilds * IPUS_PER_ILD

    def __repr__(self) -> str:
        return f"Pod({self.name!r}, {self.ilds}, {self.hostlist!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Pod) and (self.name, self.ilds, self.hosts) == (other.name, other.ilds, other.hosts)


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
    V-IPU numbers their ILDs (docs/admin.md, "Several Pods")."""
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
