"""What no single key of the site description can check: the Pods against their hosts and
groups, the models' names, deadlines against Slurm's. Run by the loader on a parsed site, which
they may complete (a multi-Pod site's pod.ipus and pod.hosts are its Pods')."""

from __future__ import annotations

from ..errors import ConfigError, shown
from ..pods import by_size
from ..rules import IPUS_PER_AGENT, IPUS_PER_ILD, MAX_JOB_ID, MAX_STEP_ID, longest_name
from .grammar import agents as _agents
from .grammar import controller_entry as _controller_entry
from .grammar import pod_entry as _pod_entry
from .options import BY_KEY, _model, name_check
from .site import Site


class _Place:
    """A key's file:line, found when a message is made: a valid file costs no second parse."""

    def __init__(self, site: Site, key: str):
        self.site, self.key = site, key

    def __str__(self) -> str:
        return self.site.at(self.key)


def _pods(site: Site) -> None:
    """pods: -> normalised entries, and pod.ipus/pod.hosts derived from them (one place each)."""
    raw = site.values["pods"]
    if raw is None:
        for key in ("pod.ipus", "pod.hosts"):
            if site.values[key] is None:
                raise ConfigError(f"{site.at(key)}: {key} must be set ({BY_KEY[key].help}), or describe the "
                                  "Pods with pods:")
        return
    where = _Place(site, "pods")
    for key in ("pod.ipus", "pod.hosts"):
        if site.values[key] is not None:
            raise ConfigError(f"{site.at(key)}: {key} and pods: both given; pods: says it (remove {key})")
    if len(raw) < 2:
        raise ConfigError(f"{where}: pods: lists {len(raw)} Pod(s); a single Pod is pod.ipus and pod.hosts")
    site.values["pods"] = [_pod_entry(where, k, item) for k, item in enumerate(raw)]
    pods = site.pods
    seen: dict[str, str] = {}
    for pod in pods:
        for host in pod.hosts:
            if host in seen:
                raise ConfigError(f"{where}: host {host} is in Pod {seen[host]} and Pod {pod.name}; a host is "
                                  "cabled to one Pod")
            seen[host] = pod.name
    if len({p.name for p in pods}) < len(pods):
        raise ConfigError(f"{where}: Pods must have distinct names: each is a V-IPU allocation and a Slurm switch")
    for size, members in by_size(pods).items():  # a job over several Pods takes whole Pods of one size
        if len({(len(p.hosts), p.ipus) for p in members}) > 1:
            raise ConfigError(f"{where}: Pods {', '.join(p.name for p in members)} have hosts of {size} IPUs but "
                              "not alike sizes (the same number of hosts and ILDs each): a job over several Pods "
                              "takes whole Pods of one host size; give them the same hosts count and ilds")
    site.values["pod.ipus"] = sum(p.ipus for p in pods)
    site.values["pod.hosts"] = ",".join(p.hostlist for p in pods)
    small = [p.name for p in pods if p.ipus < IPUS_PER_ILD]
    if small and site.values["controllers"] is None:
        raise ConfigError(f"{where}: Pod {small[0]} is a vPOD of part of an ILD (ipus:); such a Pod has a V-IPU "
                          "controller of its own: describe them with controllers:")
    if site.values["controllers"] is not None:
        _controllers(site, [p.name for p in pods])
    elif not site.values["vipu.allocation"] or site.values["vipu.allocation"] in seen.values():
        given = shown(site.values["vipu.allocation"])
        raise ConfigError(f"{site.at('vipu.allocation')}: vipu.allocation={given}: with pods: name the V-IPU "
                          "allocation that holds every Pod (jobs over several Pods go there), not one Pod's")
    _groups(site, {p.name for p in pods})
    _pod_models(site, where)


def _controllers(site: Site, pods: list[str]) -> None:
    """controllers: two or more, each managing whole Pods by name, every Pod under exactly one;
    their allocations named apart from the Pods. What vipu.host and ipuof.* say for one
    controller, each says for itself."""
    where = _Place(site, "controllers")
    for key in ("vipu.host", "vipu.allocation", "ipuof.host", "ipuof.port"):
        if site.values[key] is not None:
            raise ConfigError(f"{site.at(key)}: {key} and controllers: both given; each controller says its own "
                              f"(remove {key})")
    raw = site.values["controllers"]
    if len(raw) < 2:
        raise ConfigError(f"{where}: controllers: lists {len(raw)} controller(s); a site of one controller is "
                          "vipu.host")
    entries = [_controller_entry(where, k, item) for k, item in enumerate(raw)]
    owner: dict[str, str] = {}
    for entry in entries:
        # its Pods' allocation: a one-Pod controller's is its Pod's (a vPOD is the whole controller)
        one = entry["pods"][0] if len(entry["pods"]) == 1 else None
        entry["allocation"] = entry["allocation"] or one or entry["name"]
        for pod in entry["pods"]:
            if pod not in pods or pod in owner:
                raise ConfigError(f"{where}: controller {entry['name']}: Pod {shown(pod)} is "
                                  + (f"also under controller {owner[pod]}; a Pod has one controller" if pod in owner
                                     else f"not in pods: ({', '.join(pods)})"))
            owner[pod] = entry["name"]
    small = {p.name for p in site.pods if p.ipus < IPUS_PER_ILD}
    for entry in entries:
        if len(entry["pods"]) > 1 and small & set(entry["pods"]):
            raise ConfigError(f"{where}: controller {entry['name']}: Pod {sorted(small & set(entry['pods']))[0]} is a "
                              "vPOD of part of an ILD; such a Pod is its controller's only one")
    missing = [p for p in pods if p not in owner]
    if missing:
        raise ConfigError(f"{where}: Pod(s) {', '.join(missing)} under no controller; add each to one controller's "
                          "pods")
    for key in ("name", "allocation"):
        values = [e[key] for e in entries]
        clash = next((e[key] for e in entries if values.count(e[key]) > 1 or
                      (e[key] in pods and e[key] != e["pods"][0]) or (e[key] in pods and len(e["pods"]) > 1)), None)
        if clash is not None:
            raise ConfigError(f"{where}: controller {key} {clash} is taken (by another controller, or a Pod); "
                              "controllers and their allocations need names of their own")
    site.values["controllers"] = entries


def _groups(site: Site, pods: set[str]) -> None:
    """pod_groups: disjoint groups of two or more Pods, named apart from the Pods and the whole."""
    raw = site.values["pod_groups"]
    if raw is None:
        return
    where = _Place(site, "pod_groups")
    taken: set[str] = set()
    controllers = site.values["controllers"] or []
    names = pods | ({c["allocation"] for c in controllers} if controllers else {site.values["vipu.allocation"]})
    owner = {p: c["name"] for c in controllers for p in c["pods"]}
    for k, item in enumerate(raw):
        ok = (isinstance(item, dict) and {"name", "pods"} <= set(item) <= {"name", "pods", "model"}
              and isinstance(item["pods"], list))
        if not ok:
            raise ConfigError(f"{where}: group {k + 1} must be a mapping of name, pods and (optionally) model, e.g. "
                              "{name: ab, pods: [poda, podb], model: allocation}")
        if _model(str(item.get("model", "partition"))):
            raise ConfigError(f"{where}: group {item['name']}: model={shown(item['model'])} is out of range; use "
                              "partition or allocation")
        name, members = item["name"], [str(m) for m in item["pods"]]
        why = name_check(name) if isinstance(name, str) else "a name"
        if why or name in names:
            raise ConfigError(f"{where}: group {k + 1}: name={shown(name)} is out of range; use "
                              f"{why or 'a name no Pod, group or vipu.allocation has'}")
        unknown = [m for m in members if m not in pods]
        if unknown or len(members) < 2 or taken & set(members) or set(members) == pods:
            raise ConfigError(f"{where}: group {name}: pods={members} must name two or more Pods of pods:, none in "
                              "another group, not all of them (vipu.allocation is that)")
        under = {owner[m] for m in members if m in owner}
        if len(under) > 1:
            raise ConfigError(f"{where}: group {name}: pods={members} are under controllers "
                              f"{', '.join(sorted(under))}; a job over a group gets one V-IPU allocation, of "
                              "one controller: group Pods of one controller")
        sizes = {p.ipus_per_host for p in site.pods if p.name in members}
        if len(sizes) > 1:
            raise ConfigError(f"{where}: group {name}: pods={members} have hosts of {len(sizes)} IPU counts; a job "
                              "over a group takes its whole Pods, all of one host size: group Pods of one size")
        taken |= set(members)
        names.add(name)


def _pod_models(site: Site, where: _Place) -> None:
    """Each Pod's model: its own, else its group's, else vipu.model. A group's Pods share one (a
    job over them gets one V-IPU object)."""
    group_of = {m: g for g in site.values["pod_groups"] or [] for m in g["pods"]}
    for pod in site.values["pods"]:
        group = group_of.get(pod["name"]) or {}
        own, theirs = pod.pop("model", None), group.get("model")
        if own and theirs and own != theirs:
            raise ConfigError(f"{where}: Pod {pod['name']}: model={own} but its group {group['name']} has "
                              f"model={theirs}; a group's Pods share one model")
        pod["model"] = own or theirs or site.values["vipu.model"]
    for group in site.values["pod_groups"] or []:
        found = {p["name"]: p["model"] for p in site.values["pods"] if p["name"] in group["pods"]}
        if len(set(found.values())) > 1:
            raise ConfigError(f"{where}: group {group['name']}: its Pods' models differ ("
                              f"{', '.join(f'{n}: {m}' for n, m in found.items())}); a job over them gets one V-IPU "
                              "object: give the group one model")


def _model_checks(site: Site) -> None:
    """IPU-Machine names and job object names the models can tell apart."""
    if site.values["pod.agents"] is not None:
        if site.values["pods"]:
            raise ConfigError(f"{site.at('pod.agents')}: pod.agents and pods: both given; each Pod has its own "
                              "agents key (remove pod.agents)")
        _agents(site.at("pod.agents"), site.values["pod.agents"], site.values["pod.ipus"])
    named = site.values["pod.agents"] is not None or any("agents" in p for p in site.values["pods"] or [])
    if named and site.values["vipu.emulator"]:
        raise ConfigError(f"{site.at('vipu.emulator')}: vipu.emulator with agents named: the emulator names its "
                          "IPU-Machines ag0, ag1, ...; leave agents out for it")
    a, p = site.values["allocation.prefix"], site.values["partition.prefix"]
    if len(site.models) > 1 and (a.startswith(p) or p.startswith(a)):
        raise ConfigError(f"{site.at('allocation.prefix')}: allocation.prefix={shown(a)} and partition.prefix="
                          f"{shown(p)} with "
                          "Pods of both models: neither may begin the other (a name must say which it is)")


def _name_lengths(site: Site) -> None:
    """Every name the hooks can make fits V-IPU's (vipu.name_max): the longest is a step's
    partition of the largest job and step ids Slurm hands out, so a prefix is held to it at
    render, not found too long by the millionth job's prolog."""
    limit = site.values["vipu.name_max"]
    for key in ("partition.prefix", "allocation.prefix"):
        prefix = site.values[key]
        if key == "allocation.prefix" and "allocation" not in site.models:
            continue
        steps = key == "partition.prefix"  # a step's partition; an allocation is the job's alone
        longest = longest_name(prefix, steps)
        if longest > limit:
            room = limit - (longest - len(prefix))
            ids = f"job id up to {MAX_JOB_ID}" + (f", step id up to {MAX_STEP_ID}" if steps else "")
            raise ConfigError(f"{site.at(key)}: {key}={shown(prefix)} makes V-IPU names of up to {longest} "
                              f"characters ({ids}), over "
                              f"vipu.name_max={limit}; use a prefix of at most {room} characters")


def cross_checks(site: Site) -> None:
    """The Pods against their hosts and controllers, deadlines against Slurm's."""
    if site.values["controllers"] is not None and not site.values["pods"]:
        raise ConfigError(f"{site.at('controllers')}: controllers: with no pods:; each controller manages Pods of "
                          "pods: by name (a site of one Pod has one controller: vipu.host)")
    if site.values["controllers"] is None and site.values["vipu.host"] is None:
        raise ConfigError(f"{site.at('vipu.host')}: vipu.host must be set ({BY_KEY['vipu.host'].help})")
    _pods(site)
    try:
        hosts = site.hosts
    except Exception as exc:  # the hostlist parser's own message says what is wrong
        raise ConfigError(f"{site.at('pod.hosts')}: pod.hosts={shown(site.values['pod.hosts'])}: {exc}") from None
    if len(set(hosts)) != len(hosts) or not hosts:
        raise ConfigError(f"{site.at('pod.hosts')}: pod.hosts={shown(site.values['pod.hosts'])} names a host twice, "
                          "or none")
    per, pod = site.values["pod.ipus_per_host"], site.values["pod.ipus"]
    if per > pod:
        raise ConfigError(f"{site.at('pod.ipus_per_host')}: pod.ipus_per_host={per} is more than the Pod's "
                          f"{pod} IPUs; use 1 to {pod}")
    for one in site.pods:  # Slurm's view of a Pod's free IPUs is its hosts' GRES: never more than it has
        own = one.ipus_per_host
        key = f"Pod {one.name}'s ipus_per_host" if own != per else "pod.ipus_per_host"
        if own * len(one.hosts) > one.ipus:
            raise ConfigError(f"{site.at('pod.ipus_per_host')}: {key}={own} on Pod {one.name}'s {len(one.hosts)} hosts "
                              f"is {own * len(one.hosts)} IPUs, more than its {one.ipus}; use at most "
                              f"{one.ipus // len(one.hosts)}")
    _model_checks(site)
    _name_lengths(site)
    for own in site.pod_host_ipus():
        if "allocation" in site.models and own % IPUS_PER_AGENT:
            key = "pod.ipus_per_host" if own == per else "a Pod's ipus_per_host"
            raise ConfigError(f"{site.at('pod.ipus_per_host')}: {key}={own} with vipu.model allocation: a "
                              f"host's jobs get its whole IPU-Machines of {IPUS_PER_AGENT} IPUs each; use a multiple "
                              f"of {IPUS_PER_AGENT}")
    try:
        site.placement()
    except ConfigError as exc:
        raise ConfigError(f"{site.at('pod.hosts')}: {exc}") from None
    timeout = site.values["prolog_epilog_timeout"]
    for key in ("prolog.deadline", "epilog.deadline"):
        if site.values[key] >= timeout:
            default = "" if key in site.lines else " (the default)"  # not in the file: say whose value it is
            raise ConfigError(f"{site.at(key)}: {key}={site.values[key]:g}{default} must be below "
                              f"prolog_epilog_timeout={timeout} (Slurm kills the hook at that timeout); lower it or "
                              "raise the timeout")
