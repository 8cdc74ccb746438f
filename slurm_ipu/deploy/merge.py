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
from ..pods import OUR_FEATURES
from ..slurm import releases, slurmconf
from ..slurm.hostlist import compress, expand
from ..slurm.slurmconf import Node, Setting
from . import topomerge
from .render import SWITCH_WAIT

FRAGMENT = "slurm-ipu.conf"


@dataclass
class Merged:
    values: dict[str, str]                              # the fragment's keys, as written there
    moved: list[Setting] = field(default_factory=list)  # the site's lines the fragment now carries
    include: str | None = None                          # the Include line slurm.conf lacks
    notes: list[str] = field(default_factory=list)
    gres: list[tuple[Node, str]] = field(default_factory=list)  # the Pod's NodeName lines, their new Gres
    # NodeName lines and their new Features (the runs): (None, value) for the line as it is, or one
    # (hostlist, value) per run when the line names hosts of several (the line is split).
    features: list[tuple[Node, list[tuple[str | None, str]]]] = field(default_factory=list)
    topology: topomerge.TopologyMerge | None = None  # the Pods merged into the site's own topology.conf
    others: list[str] = field(default_factory=list)  # NodeName hostlists of nodes in no Pod (the site's)
    # Configless sites: the plugstack.conf slurmctld sends its nodes, which must hold the plugin's
    # line itself (an include of an absolute path or a glob is never sent), and that line
    # (fragments.texts puts the rendered one here).
    plugstack: str | None = None
    plugstack_line: str = ""


def ours(site: Site) -> dict[str, str]:
    """What the fragment sets on a site with no slurm.conf of its own."""
    values = {"GresTypes": "ipu", "Licenses": f"ipu:{site.pod.ipus}",
              "PrologSlurmctld": site.path("hook"), "EpilogSlurmctld": site.path("hook"),
              # a controller that becomes the primary (start, takeover, failback) asks for a reap
              "SlurmctldPrimaryOnProg": site.path("hook"),
              "PrologEpilogTimeout": str(site.prolog_epilog_timeout), "JobSubmitPlugins": "lua",
              "PropagateResourceLimitsExcept": "MEMLOCK"}
    if site.pods:
        values["TopologyPlugin"] = "topology/tree"
        values["SchedulerParameters"] = f"max_switch_wait={SWITCH_WAIT}"
    if site.accounting.slurmdbd_host:
        values["AccountingStorageTRES"] = "gres/ipu,license/ipu"
    return values


def fragment_path(site: Site) -> str:
    return f"{site.slurm.conf_dir}/{FRAGMENT}"


def include_line() -> str:
    """The Include the merge appends: a plain name, read beside slurm.conf, which configless
    slurmctld also sends to its nodes (an absolute path it never sends, and slurmd stops on it)."""
    return f"Include {FRAGMENT}"


def merge(site: Site, slurm_conf: str | None) -> Merged:
    """The fragment's values merged with the site's slurm.conf (None: ours alone)."""
    mine = ours(site)
    if slurm_conf is None:
        return Merged(mine)
    conf = slurmconf.read(slurm_conf, skip={fragment_path(site)})
    theirs = slurmconf.last(conf.settings)
    merged = Merged(dict(mine))
    for key, value in mine.items():
        if key in HOOKS:  # every line counts: Slurm 24.05+ runs them all
            merged.values[key] = _hooks(site, key, [s for s in conf.settings if s.key.lower() == key.lower()], value)
            continue
        own = theirs.get(key.lower())
        if own is not None:
            merged.values[key] = RULES.get(key, _same)(site, key, own, value)
    _limits(theirs, merged)
    merged.gres = _node_gres(site, conf.nodes)
    merged.features = _node_features(site, conf.nodes)
    pod = _pod_hosts(site)
    merged.others = [n.names for n in conf.nodes if n.names.upper() != "DEFAULT" and not set(expand(n.names)) & pod]
    own = topomerge.site_topology(site)
    if own is not None:
        merged.topology = topomerge.plan(site, own)
    keys = {k.lower() for k in merged.values}
    merged.moved = [s for s in conf.settings if not s.merged and s.key.lower() in keys]
    if not conf.skipped:
        merged.include = include_line()
    merged.plugstack = _configless_plugstack(theirs, slurm_conf)
    return merged


def _configless_plugstack(theirs: dict[str, Setting], slurm_conf: str) -> str | None:
    """plugstack.conf beside slurm.conf on a configless site (None elsewhere): the merge puts the
    plugin's line in it, whatever the site includes there (docs/admin.md, Configless sites)."""
    from ..slurm.conf import plugstack_entries

    params = theirs.get("slurmctldparameters")
    if params is None or "enable_configless" not in items(params.value):
        return None
    own = theirs.get("plugstackconfig")
    if own is not None:
        raise ConfigError(f"render: {own.where}: PlugStackConfig={own.value} on a configless site: its nodes read "
                          "their own copy of that file, never what slurmctld sends; remove the line (plugstack.conf "
                          "beside slurm.conf is sent) or put the plugin's line there on every node yourself")
    path = str(Path(slurm_conf).resolve().parent / "plugstack.conf")
    for where, line in plugstack_entries(path):
        if "spank_ipu" in line and where != path:
            raise ConfigError(f"render: {where}, included by {path}, loads spank_ipu.so, which configless nodes "
                              f"never get (slurmctld sends {path} alone): remove that line, then render again (the "
                              "merge puts it in plugstack.conf itself; both would load the plugin twice)")
    return path


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


HOOKS = {"PrologSlurmctld": "site_prolog_slurmctld", "EpilogSlurmctld": "site_epilog_slurmctld"}


def _hooks(site: Site, key: str, settings: list[Setting], value: str) -> str:
    """slurm-ipu-hook takes the key's place and runs the site's own scripts, in the site
    description's order: render goes on only when that names every script Slurm runs there today
    (every line from 24.05, the last one before), so none silently stops running."""
    field = HOOKS[key]
    theirs = [s for s in settings if not s.merged and s.value not in (value, "")]
    theirs = theirs or [s for s in settings if s.merged and s.value not in (value, "")]  # a re-render: the moved ones
    for s in theirs:
        if "," in s.value:
            raise ConfigError(f"render: {s.where}: {key}={s.value} is one path to Slurm, not a list (22.05 then runs "
                              f"no {key}, 23.02 and later do not start): write one {key} line per script, or name "
                              f"them in the site description (slurm.{field}: {s.value})")
    runs = [s.value for s in theirs] if releases.runs_every_controller_script_line(site.slurm.version) else \
        [s.value for s in theirs[-1:]]
    runs = list(dict.fromkeys(runs))
    named = site.scripts("prolog" if "prolog" in field else "epilog")
    missing = [s for s in theirs if s.value in runs and s.value not in named]
    if missing:
        raise ConfigError(_hooks_refusal(site, key, field, theirs, runs, missing[0]))
    return value


def _hooks_refusal(site: Site, key: str, field: str, theirs: list[Setting], runs: list[str], first: Setting) -> str:
    """Every line of the key, and which of them the release runs: an admin who believed two lines
    both ran on 22.05 learns here that the first never did, before naming what runs from now on."""
    every = releases.runs_every_controller_script_line(site.slurm.version)
    tail = ("render again; the hook then runs them, in that order, for every job (docs/admin.md, A site's own "
            "controller hooks)")
    if len(theirs) == 1:
        return (f"render: {first.where}: {key}={first.value} is the site's own, and slurm-ipu-hook takes {key}'s "
                f"place: name it in the site description (slurm.{field}: {first.value}) and {tail}")
    lines = ", ".join(f"{s.where} {s.value} ({'runs' if s.value in runs else 'never ran'})" for s in theirs)
    rule = "runs every line" if every else "runs only the last line"
    extra = "" if every else f", or {','.join(s.value for s in theirs)} to run the others too from now on"
    return (f"render: {key} is set on {len(theirs)} lines: {lines}; Slurm {site.slurm.version} {rule}. slurm-ipu-hook "
            f"takes {key}'s place: name what runs in the site description (slurm.{field}: {','.join(runs)}{extra}) "
            f"and {tail}")


def _timeout(site: Site, key: str, own: Setting, value: str) -> str:
    return own.value if own.value.isdigit() and int(own.value) > int(value) else value


def _topology(site: Site, key: str, own: Setting, value: str) -> str:
    if own.value.removeprefix("topology/") in ("tree", "none", "default", ""):
        return value
    raise ConfigError(f"render: {own.where}: TopologyPlugin={own.value}, and the site's Pods need "
                      f"{value} (one switch per Pod): use topology/tree, or describe the site as one Pod")


def _same(site: Site, key: str, own: Setting, value: str) -> str:
    return value


def _theirs(site: Site, key: str, own: Setting, value: str) -> str:
    """One program Slurm runs, the site's already: it stays (docs/admin.md, Backup controllers: it
    may run slurm-ipu-hook itself for the reap at takeover)."""
    return own.value or value


RULES = {"GresTypes": _union, "Licenses": _licences, "JobSubmitPlugins": _plugins,
         "AccountingStorageTRES": _union, "PropagateResourceLimitsExcept": _union,
         "SchedulerParameters": _scheduler,
         "PrologEpilogTimeout": _timeout, "TopologyPlugin": _topology, "SlurmctldPrimaryOnProg": _theirs}


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


def _pod_hosts(site: Site) -> set[str]:
    return set(site.hosts) | {h for one in site.pods for h in one.hosts}


def _node_gres(site: Site, nodes: list[Node]) -> list[tuple[Node, str]]:
    """The Pod's hosts' NodeName lines that need `ipu:<ipus_per_host>` in their Gres (slurmctld
    counts a node's GRES from its NodeName line; gres-ipu.conf only tells slurmd), with the Gres
    each gets: the site's own items kept (those the line inherits from NodeName=DEFAULT too: a
    Gres= on the line replaces the default's), ours added or corrected. Lines already right are
    left."""
    pod = _pod_hosts(site)
    sizes = site.host_ipus()
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
        wants = {f"ipu:{sizes[name]}" for name in names}
        if len(wants) > 1:
            raise ConfigError(f"render: {node.where}: NodeName={node.names} names hosts of Pods with different IPUs "
                              "per host; split the line by Pod and render again")
        want, = wants
        own = items(node.effective_gres or "")  # a line without Gres= has its DEFAULT line's
        if want in own and sum(g.split(":")[0] == "ipu" for g in own) == 1:
            continue
        if node.span > 1:
            raise ConfigError(f"render: {node.where}: NodeName={node.names} is on a line continued with '\\'; put "
                              "it on one line and render again (the merge adds ipu to its Gres)")
        out.append((node, ",".join([g for g in own if g.split(":")[0] != "ipu"] + [want])))
    return out


def _node_features(site: Site, nodes: list[Node]) -> list[tuple[Node, list[tuple[str | None, str]]]]:
    """The NodeName lines of hosts with node features of ours (Site.host_features: the size class
    and the runs of the allocation model job_submit.lua keeps a job to), with the Features each
    gets: the site's own kept (those of its DEFAULT line too: a Features= on the line replaces the
    default's), ours added, stale ones dropped. A line's Features are each of its hosts', so a
    line naming hosts of different runs is split into one line per run (the first in its place,
    the others added after it), unless it gives each node a value of its own (NodeAddr=...),
    which is refused with the split that works."""
    per_host = site.host_features()
    if not per_host:
        return []
    pod = _pod_hosts(site)
    out = []
    for node in nodes:
        names = [] if node.names.upper() == "DEFAULT" else [h for h in expand(node.names) if h in pod]
        if not names:
            continue
        kinds: dict[tuple[str, ...], list[str]] = {}
        for host in names:
            kinds.setdefault(tuple(per_host.get(host, ())), []).append(host)
        own = [f for f in items(node.effective_features or "") if not f.startswith(OUR_FEATURES)]
        values = [(compress(hosts), ",".join(own + list(runs))) for runs, hosts in kinds.items()]
        if len(values) == 1:
            if values[0][1] == ",".join(items(node.effective_features or "")):
                continue
            values = [(None, values[0][1])]
        elif node.per_node:
            split = "; ".join(f"{hosts}: Features={value}" for hosts, value in values)
            raise ConfigError(f"render: {node.where}: NodeName={node.names} names hosts of different runs of the "
                              f"allocation model and gives each node its own {node.per_node}; split it into one line "
                              f"per run ({split}) and render again")
        if node.span > 1:
            raise ConfigError(f"render: {node.where}: NodeName={node.names} is on a line continued with '\\'; put "
                              "it on one line and render again (the merge adds the runs to its Features)")
        out.append((node, values))
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
    nodes: dict[str, dict[int, dict]] = {}  # path -> line -> {"Gres": value, "Features": [(hosts, value)]}
    for node, value in merged.gres:
        nodes.setdefault(node.path, {}).setdefault(node.line, {})["Gres"] = value
    for node, values in merged.features:
        nodes.setdefault(node.path, {}).setdefault(node.line, {})["Features"] = values
    main = str(Path(slurm_conf).resolve())
    paths = set(moved) | set(nodes) | ({main} if merged.include else set())
    out = {path: _edit(path, moved.get(path, {}), nodes.get(path, {}), merged.include if path == main else None)
           for path in paths}
    topo = merged.topology
    if topo is not None and (topo.lines or topo.added):
        out[topo.path] = apply(topo.path, topo.lines, [topomerge.added_line(a) for a in topo.added])
    if merged.plugstack and merged.plugstack_line:
        change = _plugstack_edit(merged.plugstack, merged.plugstack_line)
        if change[0] != change[1]:
            out[merged.plugstack] = change
    return out


def _plugstack_edit(path: str, line: str) -> tuple[str, str]:
    """plugstack.conf with the plugin's line: appended (marked as added, for unmerge), or the line
    an earlier merge added brought up to date; a line of the site's own loading it stays as it is
    (doctor checks its values). A missing plugstack.conf is made."""
    ours = topomerge.added_line(line)
    if not Path(path).exists():
        return "", ours + "\n"
    text = Path(path).read_text()
    lines = text.splitlines(keepends=True)
    for n, old in enumerate(lines):
        if "spank_ipu" in old.split("#", 1)[0]:
            if old.rstrip().endswith(slurmconf.ADDED):  # ours: replaced as it is (unmerge drops it)
                lines[n] = ours + "\n"
            return text, "".join(lines)
    return apply(path, {}, [ours])


def diff(merged: Merged, slurm_conf: str | None) -> str:
    """The edits as a unified diff; paths are a/<absolute path>, for `patch -d / -p1`."""
    return as_diff(edits(merged, slurm_conf))


def as_diff(changes: dict[str, tuple[str, str]]) -> str:
    out = []
    for path, (old, new) in sorted(changes.items()):
        rel = path.lstrip("/")
        out += difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}",
                                    f"b/{rel}")
    return "".join(out)


def _edit(path: str, moved: dict[int, list[Setting]], nodes: dict[int, dict],
          include: str | None) -> tuple[str, str]:
    lines = Path(path).read_text().splitlines(keepends=True)
    changed = {n: _without(lines[n - 1], {s.key for s in settings}) for n, settings in moved.items()}
    for number, values in nodes.items():
        line = changed.get(number, lines[number - 1])
        if "Gres" in values:
            line = _with_value(line, "Gres", values["Gres"])
        changed[number] = _split(line, values["Features"]) if "Features" in values else line
    return apply(path, changed, [include] if include else [])


def _split(line: str, values: list[tuple[str | None, str]]) -> str:
    """The NodeName line with its Features set; with several (hostlist, Features), one line per
    hostlist: the first in the line's place (its comment kept), the others after it, marked as
    added (unmerge drops them)."""
    out = []
    for k, (hosts, value) in enumerate(values):
        one = _with_value(line if k == 0 else line.partition("#")[0].rstrip() + "\n", "Features", value)
        if hosts is not None:
            one = re.sub(r"(?i)^(\s*nodename=)\S+", lambda m, names=hosts: m.group(1) + names, one, count=1)
        out.append(one.rstrip("\n") if k == 0 else topomerge.added_line(one.rstrip("\n").rstrip()))
    return "\n".join(out) + "\n"


def apply(path: str, changed: dict[int, str], appended: list[str]) -> tuple[str, str]:
    """(the file's text, its text with those lines changed and those appended): each changed line
    under a WAS copy of itself as it was before slurm-ipu (kept from the first merge on)."""
    text = Path(path).read_text()
    old = text.splitlines(keepends=True)
    out = []
    for i, line in enumerate(old):
        new = changed.get(i + 1, line).rstrip("\n") + "\n"
        if new == line.rstrip("\n") + "\n":
            out.append(line)
            continue
        if not (i and old[i - 1].startswith(slurmconf.WAS)):  # the first change of it: keep it as it was
            out.append(slurmconf.WAS + line.rstrip("\n") + "\n")
        out.append(new)
    if appended and out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    out += [f"{line}\n" for line in appended]
    return text, "".join(out)


def unmerge(site: Site, slurm_conf: str) -> dict[str, tuple[str, str]]:
    """Each site file as it was before slurm-ipu, from what the merge left in it (every `WAS` line
    put back in place of the line below it, the Include of slurm-ipu.conf dropped), however many
    re-renders it went through: (its text, its text un-merged), for the files that change."""
    conf = slurmconf.read(slurm_conf, skip={fragment_path(site)})
    includes = {include_line(), f"Include {fragment_path(site)}"}  # the absolute one: earlier releases'
    beside = [Path(site.slurm.conf_dir) / name for name in (topomerge.FILE, "plugstack.conf")]
    out = {}
    for path in [*conf.files, *(str(p) for p in beside if p.is_file())]:
        text = Path(path).read_text()
        lines, back, skip = text.splitlines(keepends=True), [], False
        for line in lines:
            if skip:
                skip = False
            elif line.startswith(slurmconf.WAS):
                was = line[len(slurmconf.WAS):]
                if not was.rstrip("\n").endswith(slurmconf.ADDED):  # a line of ours, changed since: not theirs
                    back.append(was)
                skip = True
            elif line.rstrip("\n") not in includes and not line.rstrip("\n").endswith(slurmconf.ADDED):
                back.append(line)
        if "".join(back) != text:
            out[path] = (text, "".join(back))
    return out


# A NodeName key and the spellings Slurm reads for it.
SPELLINGS = {"Gres": "gres", "Features": "features?"}


def _with_value(line: str, key: str, value: str) -> str:
    """A NodeName line with its `key`= set to value (added before the line's comment if it had none)."""
    body, hash_, comment = line.rstrip("\n").partition("#")
    pattern = rf"(?i)((?:^|\s)(?:{SPELLINGS[key]})=)\S*"
    if re.search(pattern, body):
        body = re.sub(pattern, lambda m: m.group(1) + value, body)
    else:
        body = f"{body.rstrip()} {key}={value}{' ' if hash_ else ''}"
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
