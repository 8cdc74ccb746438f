"""Merge, never override: the slurm.conf fragment's keys carry the site's own values too.

Slurm keeps the last value of a key set twice (22.05 only logs "specified more than once, latest
value used"), so a fragment that sets `GresTypes=ipu` after a site's `GresTypes=gpu` drops the
site's GPUs. `render` reads the site's slurm.conf (and what it includes) and puts the union in the
fragment: `GresTypes=gpu,ipu`, `Licenses=matlab:10,ipu:64`, `JobSubmitPlugins=lua,require_timelimit`,
... It also writes `slurm.conf.diff`: the site's own lines for those keys commented out (their
values now live in the fragment, so no key is defined twice) and the `Include` of the fragment.
`patch -d / -p1 < slurm.conf.diff` merges; `patch -R -d / -p1 < slurm.conf.diff` un-merges.
Where two values cannot both stand, one line names the key, both values and the way out.
"""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Site
from ..errors import ConfigError
from ..slurm import slurmconf
from ..slurm.hostlist import expand
from ..slurm.slurmconf import Node, Setting
from .render import SWITCH_WAIT

FRAGMENT = "slurm-ipu.conf"


@dataclass
class Merged:
    values: dict[str, str]                              # the fragment's keys, as written there
    moved: list[Setting] = field(default_factory=list)  # the site's lines the fragment now carries
    include: str | None = None                          # the Include line slurm.conf lacks
    notes: list[str] = field(default_factory=list)
    gres: list[tuple[Node, str]] = field(default_factory=list)  # the Pod's NodeName lines, their new Gres


def ours(site: Site) -> dict[str, str]:
    """What the fragment sets on a site with no slurm.conf of its own."""
    values = {"GresTypes": "ipu", "Licenses": f"ipu:{site['pod.ipus']}",
              "PrologSlurmctld": site.path("hook"), "EpilogSlurmctld": site.path("hook"),
              "PrologEpilogTimeout": str(site["prolog_epilog_timeout"]), "JobSubmitPlugins": "lua",
              "PropagateResourceLimitsExcept": "MEMLOCK"}
    if site.pods:
        values["TopologyPlugin"] = "topology/tree"
        values["SchedulerParameters"] = f"max_switch_wait={SWITCH_WAIT}"
    if site["accounting.slurmdbd_host"]:
        values["AccountingStorageTRES"] = "gres/ipu,license/ipu"
    return values


def fragment_path(site: Site) -> str:
    return f"{site['slurm.conf_dir']}/{FRAGMENT}"


def merge(site: Site, slurm_conf: str | None) -> Merged:
    """The fragment's values merged with the site's slurm.conf (None: ours alone)."""
    mine = ours(site)
    if slurm_conf is None:
        return Merged(mine)
    conf = slurmconf.read(slurm_conf, skip={fragment_path(site)})
    theirs = slurmconf.last(conf.settings)
    merged = Merged(dict(mine))
    for key, value in mine.items():
        own = theirs.get(key.lower())
        if own is not None:
            merged.values[key] = RULES.get(key, _same)(site, key, own, value)
    _limits(theirs, merged)
    merged.gres = _node_gres(site, conf.nodes)
    keys = {k.lower() for k in merged.values}
    merged.moved = [s for s in conf.settings if not s.merged and s.key.lower() in keys]
    if not conf.skipped:
        merged.include = f"Include {fragment_path(site)}"
    return merged


# --- how each key merges: (site, key, the site's setting, ours) -> the fragment's value -------

def items(value: str) -> list[str]:
    """A comma list as Slurm reads one (`scontrol show config` prints an empty one as (null))."""
    return [v.strip() for v in value.split(",") if v.strip() and v.strip() != "(null)"]


def _union(site: Site, key: str, own: Setting, value: str, name=lambda item: item) -> str:
    theirs = items(own.value)
    names = {name(i) for i in theirs}
    return ",".join(theirs + [i for i in items(value) if name(i) not in names])


def _licence_name(item: str) -> str:
    """slurm.conf's `name:count` (or `name*count`): the name, as Slurm compares them."""
    return item.replace("*", ":").split(":", 1)[0].strip()


def _plugin_name(item: str) -> str:
    return item.removeprefix("job_submit/")


# The list-valued keys whose items a site and slurm-ipu both set: how an item is named (two items
# of one name are one item). doctor checks a site's items are in effect by the same names.
ITEM_NAMES = {"GresTypes": str, "Licenses": _licence_name, "JobSubmitPlugins": _plugin_name,
              "AccountingStorageTRES": str}


def _licences(site: Site, key: str, own: Setting, value: str) -> str:
    for item in items(own.value):
        if _licence_name(item) == "ipu" and item.replace("*", ":") != value:
            raise ConfigError(f"render: {own.where}: Licenses has {item}, and the Pod is {value}: the ipu licence "
                              "is slurm-ipu's (job_submit.lua keeps it equal to the IPUs); remove that item")
    return _union(site, key, own, value, name=_licence_name)


def _plugins(site: Site, key: str, own: Setting, value: str) -> str:
    return _union(site, key, own, value, name=_plugin_name)


def _scheduler(site: Site, key: str, own: Setting, value: str) -> str:
    """The site's parameters, with ours in place of any of the same name (the Pods need our wait)."""
    mine = {i.split("=")[0] for i in items(value)}
    return ",".join([i for i in items(own.value) if i.split("=")[0] not in mine] + items(value))


def _hook(site: Site, key: str, own: Setting, value: str) -> str:
    if own.value in (value, ""):
        return value
    named = site["slurm.site_prolog_slurmctld" if key == "PrologSlurmctld" else "slurm.site_epilog_slurmctld"]
    if named == own.value:
        return value  # slurm-ipu-hook runs it: the site's line goes
    field = "site_prolog_slurmctld" if key == "PrologSlurmctld" else "site_epilog_slurmctld"
    raise ConfigError(f"render: {own.where}: {key}={own.value} is the site's own, and Slurm runs one {key}: name "
                      f"it in the site description (slurm.{field}: {own.value}) and render again; the hook "
                      "slurm-ipu-hook then runs it for every job (docs/admin.md, A site's own controller hooks)")


def _timeout(site: Site, key: str, own: Setting, value: str) -> str:
    return own.value if own.value.isdigit() and int(own.value) > int(value) else value


def _topology(site: Site, key: str, own: Setting, value: str) -> str:
    if own.value.removeprefix("topology/") in ("tree", "none", "default", ""):
        return value
    raise ConfigError(f"render: {own.where}: TopologyPlugin={own.value}, and the site's Pods need "
                      f"{value} (one switch per Pod): use topology/tree, or describe the site as one Pod")


def _same(site: Site, key: str, own: Setting, value: str) -> str:
    return value


RULES = {"GresTypes": _union, "Licenses": _licences, "JobSubmitPlugins": _plugins,
         "AccountingStorageTRES": _union, "PropagateResourceLimitsExcept": _union,
         "SchedulerParameters": _scheduler, "PrologSlurmctld": _hook, "EpilogSlurmctld": _hook,
         "PrologEpilogTimeout": _timeout, "TopologyPlugin": _topology}


def _limits(theirs: dict[str, Setting], merged: Merged) -> None:
    """PropagateResourceLimits and its Except form exclude each other: a site with the first keeps
    it, and it must not pass MEMLOCK (IPUoF's RDMA needs the node's limit, not the shell's)."""
    own = theirs.get("propagateresourcelimits")
    if own is None:
        return
    listed = {i.upper() for i in items(own.value)}
    if listed & {"ALL", "MEMLOCK"}:
        raise ConfigError(f"render: {own.where}: PropagateResourceLimits={own.value} passes the submitting shell's "
                          "memlock limit to IPU jobs (IPUoF needs the node's): drop MEMLOCK (or ALL) from it, or "
                          "use PropagateResourceLimitsExcept=MEMLOCK instead")
    del merged.values["PropagateResourceLimitsExcept"]


def _node_gres(site: Site, nodes: list[Node]) -> list[tuple[Node, str]]:
    """The Pod's hosts' NodeName lines that need `ipu:<ipus_per_host>` in their Gres (slurmctld
    counts a node's GRES from its NodeName line; gres-ipu.conf only tells slurmd), with the Gres
    each gets: the site's own items kept, ours added or corrected. Lines already right are left."""
    pod = set(site.hosts) | {h for one in site.pods for h in one.hosts}
    want = f"ipu:{site['pod.ipus_per_host']}"
    out = []
    for node in nodes:
        if node.names.upper() == "DEFAULT":
            continue
        names = set(expand(node.names))
        if not names & pod:
            continue
        if not names <= pod:
            raise ConfigError(f"render: {node.where}: NodeName={node.names} names Pod hosts and others "
                              f"({', '.join(sorted(names - pod)[:3])}); only the Pod's hosts get Gres=ipu: split the "
                              "line and render again")
        own = items(node.gres or "")
        if want in own and sum(g.split(":")[0] == "ipu" for g in own) == 1:
            continue
        if node.span > 1:
            raise ConfigError(f"render: {node.where}: NodeName={node.names} is on a line continued with '\\'; put "
                              "it on one line and render again (the merge adds ipu to its Gres)")
        out.append((node, ",".join([g for g in own if g.split(":")[0] != "ipu"] + [want])))
    return out


# --- the diff an admin applies to their own files ------------------------------------------------


def edits(merged: Merged, slurm_conf: str | None) -> dict[str, tuple[str, str]]:
    """Each site file the merge changes: (its text, its text merged): the moved lines commented
    out, ipu added to the Pod's NodeName lines' Gres, the Include appended to slurm.conf."""
    if slurm_conf is None:
        return {}
    moved: dict[str, dict[int, list[Setting]]] = {}
    for s in merged.moved:
        if s.span > 1:
            raise ConfigError(f"render: {s.where}: {s.key} is on a line continued with '\\'; put it on a line of "
                              "its own and render again (the merge comments out whole lines)")
        moved.setdefault(s.path, {}).setdefault(s.line, []).append(s)
    gres: dict[str, dict[int, str]] = {}
    for node, value in merged.gres:
        gres.setdefault(node.path, {})[node.line] = value
    main = str(Path(slurm_conf).resolve())
    paths = set(moved) | set(gres) | ({main} if merged.include else set())
    return {path: _edit(path, moved.get(path, {}), gres.get(path, {}), merged.include if path == main else None)
            for path in paths}


def diff(merged: Merged, slurm_conf: str | None) -> str:
    """The edits as a unified diff; paths are a/<absolute path>, for `patch -d / -p1`."""
    out = []
    for path, (old, new) in sorted(edits(merged, slurm_conf).items()):
        rel = path.lstrip("/")
        out += difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}",
                                    f"b/{rel}")
    return "".join(out)


def _edit(path: str, moved: dict[int, list[Setting]], gres: dict[int, str], include: str | None) -> tuple[str, str]:
    text = Path(path).read_text()
    new = text.splitlines(keepends=True)
    for number, settings in moved.items():
        new[number - 1] = _without(new[number - 1], {s.key for s in settings})
    for number, value in gres.items():
        new[number - 1] = _with_gres(new[number - 1], value)
    if include:
        if new and not new[-1].endswith("\n"):
            new[-1] += "\n"
        new.append(include + "\n")
    return text, "".join(new)


def _with_gres(line: str, value: str) -> str:
    """A NodeName line with its Gres= set to value (added before the line's comment if it had none)."""
    body, hash_, comment = line.rstrip("\n").partition("#")
    if re.search(r"(?i)(^|\s)gres=\S*", body):
        body = re.sub(r"(?i)((?:^|\s)gres=)\S*", lambda m: m.group(1) + value, body)
    else:
        body = f"{body.rstrip()} Gres={value}{' ' if hash_ else ''}"
    return f"{body}{hash_}{comment}\n"


def _without(line: str, keys: set[str]) -> str:
    """The line with those keys' pairs moved behind slurmconf.MARK (a comment Slurm skips and a
    re-render reads back as the site's own values); the line's own comment stays before it."""
    body, hash_, comment = line.rstrip("\n").partition("#")
    found = slurmconf.pairs(body)
    kept = " ".join(_pair(k, v) for k, v in found if k not in keys)
    moved = " ".join(_pair(k, v) for k, v in found if k in keys)
    own = f"#{comment.rstrip()} " if hash_ else ""
    return f"{kept}{' ' if kept else ''}{own}# {slurmconf.MARK} {moved}\n"


def _pair(key: str, value: str) -> str:
    return f"{key}={shlex.quote(value) if any(c.isspace() for c in value) else value}"
