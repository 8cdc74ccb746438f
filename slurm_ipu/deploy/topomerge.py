"""The Pods' switches merged into a site's own topology.conf.

Slurm keeps a job inside one Pod through topology/tree: each Pod is one leaf switch holding
exactly its hosts (docs/pods.md, Several Pods). A site with a topology.conf of its own keeps it:
render edits it, in the same diff as slurm.conf, so that every node keeps a path and slurmctld
logs no topology error:
- a site leaf switch holding exactly a Pod's hosts becomes that Pod's switch (renamed to the
  Pod's name where it differs, with the one parent that lists it);
- a Pod whose hosts are under no switch gets a leaf of its own (and its group's switch), under
  the site's one top switch, or beside several as an island of Pods;
- a leaf holding a Pod's hosts and others, or a Pod's hosts under several leaves, is refused in
  one line naming the switch and what to change: only the admin knows which way to cut it.
Every changed line keeps a `#slurm-ipu-was:` copy above it and every added line ends with
`# slurm-ipu added`, so `slurm-ipu unmerge` gives topology.conf back byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Site
from ..errors import ConfigError
from ..slurm.hostlist import expand
from ..slurm.slurmconf import ADDED
from ..slurm.topology import Switch, read_conf

FILE = "topology.conf"


@dataclass
class TopologyMerge:
    path: str
    lines: dict[int, str] = field(default_factory=dict)  # line number -> the line, changed
    added: list[str] = field(default_factory=list)      # switches appended (each ends with ADDED)


def site_topology(site: Site) -> str | None:
    """The site's own topology.conf, beside slurm.conf, if it has one and the site has Pods."""
    path = Path(site.slurm.conf_dir) / FILE
    return str(path) if site.pods and path.is_file() else None


def plan(site: Site, path: str) -> TopologyMerge:
    switches = read_conf(path)
    by_name = {s.name: s for s in switches}
    parents = {child: s for s in switches for child in s.children()}
    merged = TopologyMerge(path)
    renames, new_leaves = {}, set()
    for pod in site.pods:
        leaf = _pod_leaf(pod, [s for s in switches if s.nodes], by_name)
        if leaf is None:
            merged.added.append(f"SwitchName={pod.name} Nodes={pod.hostlist}")
            new_leaves.add(pod.name)
        elif leaf.name != pod.name:
            renames[leaf.name] = pod.name
    for group, members in site.groups.items():
        _group(site, group, members, by_name, parents, new_leaves, merged)
    tops = [t for t in [*site.groups, *(p.name for p in site.pods)] if t in new_leaves or
            (t in site.groups and t not in by_name)]
    tops = [t for t in tops if not any(t in members for members in site.groups.values())]
    kids = {s.name: s.children() for s in switches if s.switches}  # each parent's switches, as merged
    _attach(site, tops, switches, parents, kids, merged)
    for old, new in renames.items():
        leaf = by_name[old]
        _check_one_line(leaf, f"it becomes Pod {new}'s switch")
        merged.lines[leaf.line] = _set(_line(merged, leaf), "SwitchName", new)
        if old in parents:
            kids[parents[old].name] = [new if c == old else c for c in kids[parents[old].name]]
    for switch in switches:
        if switch.switches and kids[switch.name] != switch.children():
            _check_one_line(switch, "its Switches= names the Pods")
            merged.lines[switch.line] = _set(_line(merged, switch), "Switches", ",".join(kids[switch.name]))
    return merged


def _pod_leaf(pod, leaves: list[Switch], by_name: dict[str, Switch]) -> Switch | None:
    """The site's leaf switch that is this Pod's, None when its hosts are under none."""
    hosts = set(pod.hosts)
    holding = [leaf for leaf in leaves if set(expand(leaf.nodes)) & hosts]
    for leaf in holding:
        others = sorted(set(expand(leaf.nodes)) - hosts)
        if others:
            raise ConfigError(f"render: {leaf.where}: SwitchName={leaf.name} holds Pod {pod.name}'s hosts and "
                              f"{', '.join(others[:3])}: a Pod is one leaf switch of exactly its hosts (Slurm keeps a "
                              f"job inside a Pod through it); give {others[0]} a leaf switch of its own, then render "
                              "again")
    if len(holding) > 1:
        raise ConfigError(f"render: {holding[1].where}: Pod {pod.name}'s hosts are under switches "
                          f"{holding[0].name} and {holding[1].name}: a Pod is one leaf switch; put them under one "
                          f"(SwitchName={pod.name} Nodes={pod.hostlist}), then render again")
    if not holding:
        if pod.name in by_name:
            raise ConfigError(f"render: {by_name[pod.name].where}: a switch is named {pod.name}, like the Pod, and "
                              "holds none of its hosts: rename one of them")
        return None
    leaf = holding[0]
    missing = sorted(set(pod.hosts) - set(expand(leaf.nodes)))
    if missing:
        raise ConfigError(f"render: {leaf.where}: SwitchName={leaf.name} holds some of Pod {pod.name}'s hosts, not "
                          f"{', '.join(missing[:3])}: a Pod is one leaf switch of exactly its hosts; add them to it "
                          "(or describe the Pod as the hosts it holds)")
    if leaf.name != pod.name and pod.name in by_name:
        raise ConfigError(f"render: {by_name[pod.name].where}: a switch is named {pod.name}, and Pod {pod.name}'s "
                          f"hosts are under {leaf.name}: rename one of them")
    return leaf


def _group(site: Site, group: str, members: list[str], by_name: dict[str, Switch], parents: dict[str, Switch],
           new_leaves: set[str], merged: TopologyMerge) -> None:
    """A group of Pods is a switch over them: added, unless the site's topology has it already."""
    if group in by_name:
        if sorted(by_name[group].children()) != sorted(members):
            raise ConfigError(f"render: {by_name[group].where}: SwitchName={group} (a Pod group's name) does not "
                              f"hold exactly the group's Pods ({', '.join(members)}); make it so, or rename it")
        return
    placed = [m for m in members if m not in new_leaves and m in parents]
    if placed:
        raise ConfigError(f"render: {parents[placed[0]].where}: Pod {placed[0]} hangs off {parents[placed[0]].name}, "
                          f"and pod_groups puts it under {group}: add SwitchName={group} Switches="
                          f"{','.join(members)} to {merged.path} yourself, in place of its parent, then render again")
    merged.added.append(f"SwitchName={group} Switches={','.join(members)}")


def _attach(site: Site, tops: list[str], switches: list[Switch], parents: dict[str, Switch],
            kids: dict[str, list[str]], merged: TopologyMerge) -> None:
    """New top-level switches go under the site's one top switch when it has switches under it;
    over a site of one leaf switch a new top switch holds both; beside a site of several top
    switches (islands it keeps apart) the Pods are an island of their own."""
    if not tops:
        return
    if len(site.controllers) > 1:  # each controller's Pods an island: Slurm never joins two in a job
        for controller in site.controllers:
            mine = [t for t in tops if (t in controller.pods or set(site.groups.get(t, ())) & set(controller.pods))
                    and t != controller.allocation]  # a one-Pod controller's Pod is its island's top
            if not mine:
                continue
            if any(s.name == controller.allocation for s in switches):
                raise ConfigError(f"render: {merged.path}: a switch is named {controller.allocation} (controller "
                                  f"{controller.name}'s allocation), the top switch slurm-ipu adds over its Pods: "
                                  "rename it")
            merged.added.append(f"SwitchName={controller.allocation} Switches={','.join(mine)}")
        return
    roots = [s for s in switches if s.name not in parents]
    top = site.vipu.allocation
    if len(roots) == 1 and roots[0].switches and not roots[0].nodes:
        kids[roots[0].name] = [*kids[roots[0].name], *tops]
        return
    under = [roots[0].name, *tops] if len(roots) == 1 else tops
    if len(under) > 1:
        if any(s.name == top for s in switches):
            raise ConfigError(f"render: {merged.path}: a switch is named {top} (vipu.allocation), the top switch "
                              "slurm-ipu adds over the Pods: rename it")
        merged.added.append(f"SwitchName={top} Switches={','.join(under)}")


def _check_one_line(switch: Switch, why: str) -> None:
    if switch.span > 1:
        raise ConfigError(f"render: {switch.where}: SwitchName={switch.name} is on a line continued with '\\'; put "
                          f"it on one line and render again ({why})")


def _line(merged: TopologyMerge, switch: Switch) -> str:
    if switch.line in merged.lines:
        return merged.lines[switch.line]
    return Path(merged.path).read_text().splitlines()[switch.line - 1]


def _set(line: str, key: str, value: str) -> str:
    """The line with key's value replaced (the key as the site spelled it, the rest as it was)."""
    return re.sub(rf"(?i)((?:^|\s){key}=)\S+", lambda m: m.group(1) + value, line, count=1)


def added_line(text: str) -> str:
    return f"{text} {ADDED}"
