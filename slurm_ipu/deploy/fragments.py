"""`slurm-ipu render SITE --out DIR`: the files a site merges into its own configuration, each
with a header saying where it goes. Everything comes from the site description; the paths
named are installed paths (install.prefix, the Slurm plugin directory), never the checkout."""

from __future__ import annotations

import re
from pathlib import Path

from .. import rules
from ..config import Site
from ..errors import ConfigError
from ..fsutil import atomic_write
from ..hooks.endpoint import reap_request_path, socket_path
from ..pods import CLASS_PREFIX
from ..slurm import licences, limits, releases
from ..slurm.hostlist import compress
from . import merge, render

# output file -> template
FILES = {
    "slurm-ipu.conf": "site/slurm-ipu.conf",
    "gres-ipu.conf": "site/gres-ipu.conf",
    "plugstack-ipu.conf": "spank/plugstack-ipu.conf",
    "job_submit.lua": "job_submit/job_submit.lua",
    "slurm-ipu-hook.conf": "hooks/slurm-ipu-hook.conf",
    "slurm-ipu.service": "hooks/slurm-ipu.service",
    "topology.conf": "site/topology.conf",  # multi-Pod sites only
}
DIFF = "slurm.conf.diff"  # with --slurm-conf: the edit of the site's own files (merge.py)
CODE_ID = "@@CODE_ID@@"  # in job_submit.lua.j2: replaced by the rendered text's own digest




def names(site: Site, merged: merge.Merged | None = None) -> list[str]:
    """The files this site renders: topology.conf only where there are Pods to keep together and
    the site has none of its own (the diff merges them into that)."""
    own = merged is not None and merged.topology is not None
    return [name for name in FILES if name != "topology.conf" or (site.pods and not own)]


def pod_context(site: Site) -> list[dict]:
    """Each Pod with its ILD numbers and agents (IPU-Machines), counted in the site's order."""
    per = rules.AGENTS_PER_ILD
    ids = site.ild_ids()
    return [{"name": pod.name, "hostlist": pod.hostlist, "hosts": list(pod.hosts), "ilds": pod.ilds,
             "ild_ids": ids[pod.name],
             "agents": [f"ag{a}" for i in ids[pod.name] for a in range(i * per, (i + 1) * per)]
             [:pod.ipus // rules.IPUS_PER_AGENT]}  # a vPOD: its machines of the ILD
            for pod in site.pods]


def group_context(site: Site) -> list[dict]:
    """Each group of Pods with the agents of its Pods; `top` lists what hangs off the top switch."""
    agents = {p["name"]: p["agents"] for p in pod_context(site)}
    return [{"name": g, "pods": members, "agents": [a for m in members for a in agents[m]]}
            for g, members in site.groups.items()]


def controller_context(site: Site) -> list[dict]:
    """On a site of several V-IPU controllers, each one's allocation (its top switch) and the
    switches under it: its groups and its Pods in none ([] on a site of one)."""
    if len(site.controllers) < 2:
        return []
    tops = top_switches(site)
    out = [{"name": c.name, "allocation": c.allocation, "ipuof_host": c.ipuof_host, "ipuof_port": c.ipuof_port,
            # its Pods' switches under one of its own; a one-Pod controller's Pod is its island's top
            "tops": [t for t in tops if (t in c.pods or set(site.groups.get(t, ())) & set(c.pods))
                     and t != c.allocation],
            # compressed anew: one bracket per item, the form the SPANK plugin matches (spank/args.c)
            "hostlist": compress([h for p in site.pods if p.name in c.pods for h in p.hosts])}
           for c in site.controllers]
    words = sum(len(f" controller={c['hostlist']}@{c['ipuof_host']}:{c['ipuof_port']}") for c in out)
    if words > PLUGSTACK_ROOM:
        raise ConfigError(f"render: the SPANK plugin's line would name the {len(out)} controllers' hosts in {words} "
                          f"characters, over the {PLUGSTACK_ROOM} Slurm reads of a plugstack line (with the rest); "
                          "name the hosts so that they compress (ipu-host[1-64]), or use fewer controllers")
    return out


# Slurm reads a plugstack.conf line into PATH_MAX (4096) bytes (src/common/spank.c): the
# controllers' words must leave room for the plugin's path and other arguments.
PLUGSTACK_ROOM = 3000


def _others_switch(site: Site) -> str:
    taken = {p.name for p in site.pods} | set(site.groups) | {site.vipu.allocation} | \
        {c.allocation for c in site.controllers}
    return next(name for name in ("site", "site_nodes", "slurm_ipu_site") if name not in taken)


def top_switches(site: Site) -> list[str]:
    grouped = {m for members in site.groups.values() for m in members}
    return [*site.groups, *(p.name for p in site.pods if p.name not in grouped)]


def hook_paths(state_dir: str) -> dict:
    """What slurm-ipu-hook's fast path touches (templates/hooks/slurm-ipu-hook.conf.j2)."""
    return {"socket": str(socket_path(state_dir)), "reap_request": str(reap_request_path(state_dir))}


def prolog_wait(deadline: float, slurm_timeout: int) -> int:
    """How long slurm-ipu-hook waits for a handed-over prolog: past the prolog's own deadline (its
    failure path still tells Slurm why), before Slurm's PrologEpilogTimeout kills the hook."""
    return max(int(deadline) + 1, int((deadline + slurm_timeout) / 2))


def context(site: Site, merged: merge.Merged | None = None, merged_from: str | None = None) -> dict:
    return {
        "conf": (merged or merge.merge(site, None)).values, "merged_from": merged_from,
        "site": site.values, "source": Path(site.source).name,
        "site_path": site.path("site"), "plugin": site.path("plugin"),
        "python": site.python, "ipuof_host": site.ipuof_host, "ipuof_port": site.ipuof_port,
        "hook": hook_paths(site.state_dir) | {
            "site": site.path("site"), "python": site.python,
            "site_prolog": site.scripts("prolog"),
            "site_epilog": site.scripts("epilog"),
            "prolog_wait": prolog_wait(site.prolog.deadline, site.prolog_epilog_timeout)},
        **render.pod_values(job_ipus(site)), "pods_per_job": pods_per_job(site),
        "licences": licences.lua_values(site.slurm.version), "limits": limits.lua_values(),
        **class_values(site), "gres_prefix": releases.tres_prefix(site.slurm.version),
        "whole_hosts": site.models == {"allocation"}, "mixed": len(site.models) > 1,
        "allocation_model": "allocation" in site.models, "helper": site.path("helper"),  # spank/step.c
        "host_models": site.host_models() if len(site.models) > 1 else {},
        **placement_values(site),
        "pods": pod_context(site), "top_switch": site.vipu.allocation, "groups": group_context(site),
        "whole_allocation": site.vipu.allocation or "default", "controllers": controller_context(site),
        "top_members": top_switches(site), "job_prefixes": site.job_prefixes,
        # the emulator keeps these names to the hooks: every job-named object, the allocation model's
        # step partitions (partition prefix + job + _step) too, not only what the job itself holds
        "reserved_prefixes": sorted({*site.job_prefixes, site.partition.prefix}),
        # the site's nodes in no Pod: a leaf of their own, so each keeps a path in the tree
        "others": (merged.others if merged else []), "others_switch": _others_switch(site),
    }


def job_ipus(site: Site) -> int:
    """The most IPUs one job can have: the site's, or on a site of several V-IPU controllers the
    largest controller's (a job stays under one)."""
    if len(site.controllers) < 2:
        return site.pod.ipus
    return max(sum(p.ipus for p in site.pods if p.name in c.pods) for c in site.controllers)


def pods_per_job(site: Site, size: int | None = None) -> int:
    """The most Pods (of hosts of `size` IPUs, if given) one job can take: all of them, or on a
    site of several controllers the most under one."""
    pods = [p for p in site.pods if size is None or p.ipus_per_host == size]
    if len(site.controllers) < 2:
        return len(pods)
    return max(sum(p.name in c.pods for p in pods) for c in site.controllers)


def class_values(site: Site) -> dict:
    """Hosts of different IPU counts: each size class for job_submit.lua (none where hosts are
    alike: a site of one size is as it was), each size's hosts for gres.conf, and IPUS_PER_HOST,
    the largest (what a request is first held to)."""
    classes = site.size_classes()
    for c in classes:  # a job over several Pods takes them under one controller
        c.pods = pods_per_job(site, c.size)
    gres = [(c.hostlist, c.size) for c in classes] or [(site.pod.hosts, site.pod.ipus_per_host)]
    return {"ipus_per_host": max(size for _, size in gres), "gres_lines": gres,
            "classes": classes if len(classes) > 1 else [], "class_prefix": CLASS_PREFIX}


def placement_values(site: Site) -> dict:
    """job_submit.lua's host runs (Site.placement): each host count's alternatives, and the counts
    a job inside one Pod may have."""
    runs = site.placement()[1]
    per_pod = len(site.pod_agents()[0][0])
    alike: dict[str, list[str]] = {}
    for host, features in site.host_features().items():
        alike.setdefault(",".join(features), []).append(host)
    whole = {per_pod, *(c.hosts for c in site.size_classes())}  # a Pod's hosts, of each size
    return {"runs": runs, "hosts_per_pod": per_pod, "run_counts": sorted({1, *runs, *whole}),
            "host_features": [(compress(hosts), features) for features, hosts in alike.items()]}


def texts(site: Site, slurm_conf: str | None = None) -> dict[str, str]:
    """The fragments; with slurm_conf, merged with that file's own values, and the diff that
    merges it (slurm.conf.diff) when it needs one."""
    merged = merge.merge(site, slurm_conf)
    ctx = context(site, merged, slurm_conf)
    out = {name: render.render(FILES[name], ctx) for name in names(site, merged)}
    lua = out["job_submit.lua"]
    out["job_submit.lua"] = lua.replace(CODE_ID, code_id(lua))
    merged.plugstack_line = plugin_line(out["plugstack-ipu.conf"])
    patch = merge.diff(merged, slurm_conf)
    if patch:
        out[DIFF] = patch
    return out


def plugin_line(plugstack_fragment: str) -> str:
    """The plugin's one line of the rendered plugstack-ipu.conf (its header is comments)."""
    return next(line for line in plugstack_fragment.splitlines() if line.strip() and not line.startswith("#"))


def edits(site: Site, slurm_conf: str) -> dict[str, tuple[str, str]]:
    """What slurm.conf.diff changes, file by file: (the text, the text merged)."""
    merged = merge.merge(site, slurm_conf)
    merged.plugstack_line = plugin_line(render.render(FILES["plugstack-ipu.conf"], context(site, merged, slurm_conf)))
    return merge.edits(merged, slurm_conf)


def code_id(text: str) -> str:
    """job_submit.lua's own digest (of its text with the id left out): what doctor's probe job
    reads back from the code slurmctld runs."""
    import hashlib

    return hashlib.sha256(re.sub(r'CODE_ID = "[^"]*"', f'CODE_ID = "{CODE_ID}"', text).encode()).hexdigest()[:16]


def loaded_id(text: str) -> str | None:
    """The code id a rendered job_submit.lua carries."""
    found = re.search(r'CODE_ID = "([0-9a-f]{16})"', text)
    return found.group(1) if found else None


def emulator_cluster(site: Site, controller: str | None = None) -> str:
    """vipu-emu's cluster file for this site (the lab, admin drills): its ILDs, each Pod's
    allocation inside the cluster's, and each Pod's hosts cabled to its own ILDs. On a site of
    several controllers, one controller's (by name): its Pods alone, numbered from its first."""
    values = context(site)
    if len(site.controllers) > 1:
        if controller is None:
            raise ConfigError("the site has several V-IPU controllers: an emulator's cluster file is one's (say which)")
        one = site.controller_named(controller)
        mine = set(one.pods)
        values.update(render.pod_values(sum(p.ipus for p in site.pods if p.name in mine)))
        values.update(pods=[p for p in pod_context(site) if p["name"] in mine], whole_allocation=one.allocation,
                      groups=[g for g in group_context(site) if set(g["pods"]) <= mine])
    return render.render("lab/vipu-emu.yaml", values)


def write(site: Site, out_dir: Path, slurm_conf: str | None = None) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts(site, slurm_conf).items():
        path = out_dir / name
        atomic_write(path, text, 0o644)
        written.append(path)
    return written
