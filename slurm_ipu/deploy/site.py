"""The site description: one YAML file from which every other configuration is rendered (the
hooks' config, slurm.conf/gres.conf/plugstack fragments, job_submit.lua, the hook wrapper, the
removal service's unit). No value lives in two places.

Loaded from a table of fields (key, type, default, help, range check); every error names the
file, the line and the valid range, in one line (SlurmIpuError, exit 2).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import _between, _pod, _port, _positive, _prefix, flatten
from ..errors import ConfigError
from ..pods import Pod, format_groups, format_pods
from ..slurm import releases
from ..slurm.hostlist import expand


def _abs(v: str):
    return None if v.startswith("/") and "\n" not in v else "an absolute path"


def _plain_path(v: str):
    ok = v.startswith("/") and not any(c.isspace() for c in v)
    return None if ok else "an absolute path without spaces"


def _version(v: str):
    return None if v in SUPPORTED_SLURM else f"one of {', '.join(SUPPORTED_SLURM)}"


def _name(v: str):
    ok = 0 < len(v) <= 40 and all(c.isascii() and (c.isalnum() or c in "-_") for c in v)
    return None if ok else "1 to 40 letters, digits, '-' and '_'"


def _host(v: str):
    ok = 0 < len(v) <= 253 and all(c.isascii() and (c.isalnum() or c in "-._:") for c in v)
    return None if ok else "a host name or address"


def _cross_pod(v: str):
    return None if v in ("refuse", "slow") else "refuse or slow"


SUPPORTED_SLURM = releases.SUPPORTED


@dataclass(frozen=True)
class Field:
    key: str
    type: type
    default: Any
    help: str
    check: Any = None
    required: bool = False


FIELDS = [
    Field("cluster", str, None, "the Slurm cluster's name (ClusterName)", _name, required=True),
    Field("vipu.host", str, None, "the V-IPU controller's address (vipu --api-host)", _host, required=True),
    Field("vipu.port", int, 8090, "the V-IPU controller's port (vipu --api-port)", _port),
    Field("vipu.allocation", str, None, "the V-IPU allocation partitions are created in; null: the default", _name),
    Field("vipu.command", str, "/usr/bin/vipu", "the vipu command the hooks run", _plain_path),
    Field("vipu.cli_config", str, None, "the vipu CLI's config file with the hooks' V-IPU credentials "
          "(vipu --config); null: none", _plain_path),
    Field("vipu.emulator", bool, False, "the controller is vipu-emu (labs, drills): pass it each job's hosts "
          "and owner (--hosts/--owner-uid), which a real controller does not take"),
    Field("vipu.timeout", float, 10.0, "seconds allowed for one vipu call", _positive),
    Field("vipu.emulator_cross_pod", str, "refuse", "with vipu.emulator and pods: an attach from a host to another "
          "Pod's IPUs is refused ('refuse'), or served after vipu.emulator_cross_pod_delay ('slow')", _cross_pod),
    Field("vipu.emulator_cross_pod_delay", float, 0.5, "seconds a 'slow' cross-Pod attach takes (the emulator)",
          _between(0, 60)),
    Field("ipuof.host", str, None, "IPUOF_VIPU_API_HOST in tasks; null: vipu.host", _host),
    Field("ipuof.port", int, None, "IPUOF_VIPU_API_PORT in tasks; null: vipu.port", _port),
    Field("pod.ipus", int, None, "IPUs in the Pod (64 per ILD); with pods: their sum", _pod),
    Field("pod.hosts", str, None, "the host servers cabled to the Pod, as a Slurm hostlist (ipu-host[1-8]); "
          "with pods: theirs"),
    Field("pod.ipus_per_host", int, None, "IPUs each host's jobs may ask for (--gres=ipu:N), its Gres count",
          _between(1, 64), required=True),
    Field("pods", list, None, "a multi-Pod cluster, instead of pod.ipus/pod.hosts: each Pod's name (its V-IPU "
          "allocation and Slurm switch), hosts (a hostlist) and ilds (IPU-Link domains of 64 IPUs, default 1)"),
    Field("pod_groups", list, None, "with pods: groups of Pods used together (a POD256 as two pairs), each a "
          "switch above its Pods and a V-IPU allocation holding theirs: name and pods"),
    Field("partition.prefix", str, "slurm_", "partition name = prefix + job id", _prefix),
    Field("prolog.deadline", float, 60.0, "seconds the prolog may take in all", _positive),
    Field("prolog.max_attempts", int, 3, "prolog failures before the job is held", _between(1, 100)),
    Field("epilog.deadline", float, 30.0, "seconds the epilog may take in all", _positive),
    Field("reap.interval", float, 300.0, "seconds between the removal service's full reaps", _between(5, 86400)),
    Field("prolog_epilog_timeout", int, 180, "Slurm's PrologEpilogTimeout: above both deadlines",
          _between(1, 86400)),
    Field("state_dir", str, "/var/lib/slurm-ipu", "the hooks' state (root-only)", _abs),
    Field("accounting.slurmdbd_host", str, None, "slurmdbd's host, to track IPUs in accounting; null: none",
          _host),
    Field("slurm.version", str, "22.05", "the Slurm release the cluster runs", _version),
    Field("slurm.user", str, "slurm", "SlurmUser: the hooks and the removal service run as this user and own state_dir",
          _name),
    Field("slurm.site_prolog_slurmctld", str, None, "the site's own PrologSlurmctld, run by the hook wrapper for "
          "every job before ours (Slurm takes one PrologSlurmctld); null: none", _plain_path),
    Field("slurm.site_epilog_slurmctld", str, None, "the site's own EpilogSlurmctld, run by the hook wrapper for "
          "every job after ours; null: none", _plain_path),
    Field("slurm.conf_dir", str, "/etc/slurm", "where slurm.conf lives", _abs),
    Field("slurm.bin_dir", str, "/usr/bin", "where scontrol and squeue live", _abs),
    Field("slurm.plugin_dir", str, "/usr/lib/x86_64-linux-gnu/slurm-wlm", "Slurm's plugin directory (SPANK plugin)",
          _abs),
    Field("install.config", str, "/etc/slurm-ipu/config.yaml", "where the hooks' config is installed", _abs),
    Field("install.unit_dir", str, "/etc/systemd/system", "where make install puts the removal service's unit",
          _abs),
    Field("install.prefix", str, "/opt/slurm-ipu", "where `make install` put slurm-ipu (its venv, the hook wrapper)",
          _abs),
]
BY_KEY = {f.key: f for f in FIELDS}


@dataclass
class Site:
    values: dict[str, Any]
    source: str
    lines: dict[str, int] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def hosts(self) -> list[str]:
        return expand(self["pod.hosts"])

    @property
    def groups(self) -> dict[str, list[str]]:
        return {g["name"]: list(g["pods"]) for g in self["pod_groups"] or []}

    @property
    def pods(self) -> list[Pod]:
        """The Pods of a multi-Pod site; [] for one Pod (no cabling, no topology)."""
        return [Pod(p["name"], p["ilds"], p["hosts"]) for p in self["pods"] or []]

    @property
    def python(self) -> str:
        return f"{self['install.prefix']}/venv/bin/python"

    def path(self, *parts: str) -> str:
        """Where an installed file lives (the fragments name installed paths, never the checkout)."""
        roots = {"wrapper": f"{self['install.prefix']}/libexec/slurm-ipu-hook",
                 "client": f"{self['install.prefix']}/libexec/slurm-ipu-hook-client",
                 "config": self["install.config"],
                 "site": str(Path(self["install.config"]).with_name("site.yaml")),  # doctor's default
                 "unit": f"{self['install.unit_dir']}/slurm-ipu-reaper.service",
                 "plugin": f"{self['slurm.plugin_dir']}/spank_ipu.so"}
        return roots[parts[0]]


def _lines(text: str) -> dict[str, int]:
    """Dotted key -> 1-based line, from the YAML node tree (for messages that point at the line)."""
    import yaml

    out: dict[str, int] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = f"{prefix}{key.value}"
                out[name] = key.start_mark.line + 1
                walk(value, name + ".")

    try:
        walk(yaml.compose(text), "")
    except yaml.YAMLError:
        pass  # safe_load reports it with its own line
    return out


def _coerce(where: str, f: Field, value: Any) -> Any:
    if value is None:
        if f.required:
            raise ConfigError(f"{where}: {f.key} must be set ({f.help})")
        return None
    if f.type is bool:
        ok = isinstance(value, bool)
    else:
        ok = not isinstance(value, bool) and (isinstance(value, f.type) or f.type is float and isinstance(value, int))
    if not ok:
        raise ConfigError(f"{where}: {f.key}={value!r} is not a {f.type.__name__} ({f.help})")
    value = f.type(value)
    why = f.check(value) if f.check else None
    if why:
        raise ConfigError(f"{where}: {f.key}={value!r} is out of range; use {why}")
    return value


def parse(text: str, source: str) -> Site:
    import yaml

    from ..adminfile import check_yaml_shape

    check_yaml_shape(text, source)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise ConfigError(f"{source}: a site description starts with 'version: 1' (see etc/site-pod128.yaml)")
    lines = _lines(text)
    given = flatten({k: v for k, v in doc.items() if k != "version"}, BY_KEY)
    for key in given:
        if key not in BY_KEY:
            near = difflib.get_close_matches(key, BY_KEY, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigError(f"{source}:{lines.get(key, 1)}: unknown key {key!r}{hint}")
    values = {}
    for f in FIELDS:
        where = f"{source}:{lines.get(f.key, lines.get(f.key.split('.')[0], 1))}"
        values[f.key] = _coerce(where, f, given.get(f.key, f.default))
    site = Site(values, source, lines)
    _cross_checks(site)
    return site


def load(path: str | Path) -> Site:
    from ..adminfile import read_text

    return parse(read_text(path, "site description", "; start from etc/site-pod128.yaml"), str(path))


def _at(site: Site, key: str) -> str:
    return f"{site.source}:{site.lines.get(key, 1)}"


POD_KEYS = ("name", "hosts", "ilds")


def _pods(site: Site) -> None:
    """pods: -> normalised entries, and pod.ipus/pod.hosts derived from them (one place each)."""
    raw = site["pods"]
    if raw is None:
        for key in ("pod.ipus", "pod.hosts"):
            if site[key] is None:
                raise ConfigError(f"{_at(site, key)}: {key} must be set ({BY_KEY[key].help}), or describe the "
                                  "Pods with pods:")
        return
    where = _at(site, "pods")
    for key in ("pod.ipus", "pod.hosts"):
        if key in site.lines:
            raise ConfigError(f"{_at(site, key)}: {key} and pods: both given; pods: says it (remove {key})")
    if len(raw) < 2:
        raise ConfigError(f"{where}: pods: lists {len(raw)} Pod(s); a single Pod is pod.ipus and pod.hosts")
    entries = [_pod_entry(where, k, item) for k, item in enumerate(raw)]
    site.values["pods"] = entries
    pods = site.pods
    seen: dict[str, str] = {}
    for pod in pods:
        for host in pod.hosts:
            if host in seen:
                raise ConfigError(f"{where}: host {host} is in Pod {seen[host]} and Pod {pod.name}; a host is "
                                  "cabled to one Pod")
            seen[host] = pod.name
    shapes = {(len(p.hosts), p.ilds) for p in pods}
    if len(shapes) > 1 or len({p.name for p in pods}) < len(pods):
        raise ConfigError(f"{where}: Pods must have distinct names and alike sizes (the same number of hosts and "
                          "ILDs each): a job over several Pods takes whole Pods")
    site.values["pod.ipus"] = sum(p.ipus for p in pods)
    site.values["pod.hosts"] = ",".join(p.hostlist for p in pods)
    if not site["vipu.allocation"] or site["vipu.allocation"] in seen.values():
        raise ConfigError(f"{_at(site, 'vipu.allocation')}: vipu.allocation={site['vipu.allocation']!r}: with "
                          "pods: name the V-IPU allocation that holds every Pod (jobs over several Pods go there), "
                          "not one Pod's")
    _groups(site, {p.name for p in pods})


def _groups(site: Site, pods: set[str]) -> None:
    """pod_groups: disjoint groups of two or more Pods, named apart from the Pods and the whole."""
    raw = site["pod_groups"]
    if raw is None:
        return
    where = _at(site, "pod_groups")
    taken: set[str] = set()
    names = pods | {site["vipu.allocation"]}
    for k, item in enumerate(raw):
        ok = isinstance(item, dict) and set(item) == {"name", "pods"} and isinstance(item["pods"], list)
        if not ok:
            raise ConfigError(f"{where}: group {k + 1} must be a mapping of name and pods, e.g. "
                              "{name: ab, pods: [poda, podb]}")
        name, members = item["name"], [str(m) for m in item["pods"]]
        why = _name(name) if isinstance(name, str) else "a name"
        if why or name in names:
            raise ConfigError(f"{where}: group {k + 1}: name={name!r} is out of range; use "
                              f"{why or 'a name no Pod, group or vipu.allocation has'}")
        unknown = [m for m in members if m not in pods]
        if unknown or len(members) < 2 or taken & set(members) or set(members) == pods:
            raise ConfigError(f"{where}: group {name}: pods={members} must name two or more Pods of pods:, none in "
                              "another group, not all of them (vipu.allocation is that)")
        taken |= set(members)
        names.add(name)


def _pod_entry(where: str, k: int, item: object) -> dict:
    if not isinstance(item, dict) or set(item) - set(POD_KEYS) or "name" not in item or "hosts" not in item:
        raise ConfigError(f"{where}: Pod {k + 1} must be a mapping of name, hosts and (optionally) ilds, e.g. "
                          "{name: poda, hosts: ipu-host[1-4], ilds: 1}")
    name, hosts, ilds = item["name"], item["hosts"], item.get("ilds", 1)
    why = _name(name) if isinstance(name, str) else "a name"
    if why:
        raise ConfigError(f"{where}: Pod {k + 1}: name={name!r} is out of range; use {why}")
    if isinstance(ilds, bool) or not isinstance(ilds, int) or not 1 <= ilds <= 16:
        raise ConfigError(f"{where}: Pod {name}: ilds={ilds!r} is out of range; use 1 to 16 (64 IPUs each)")
    try:
        if not isinstance(hosts, str) or not expand(hosts):
            raise ValueError("empty")
    except Exception as exc:  # the hostlist parser's own message says what is wrong
        raise ConfigError(f"{where}: Pod {name}: hosts={hosts!r} is not a Slurm hostlist ({exc})") from None
    return {"name": name, "hosts": hosts, "ilds": ilds}


def _cross_checks(site: Site) -> None:
    """What no single field can check: the Pods against their hosts, deadlines against Slurm's."""
    _pods(site)
    try:
        hosts = site.hosts
    except Exception as exc:  # the hostlist parser's own message says what is wrong
        raise ConfigError(f"{_at(site, 'pod.hosts')}: pod.hosts={site['pod.hosts']!r}: {exc}") from None
    if len(set(hosts)) != len(hosts) or not hosts:
        raise ConfigError(f"{_at(site, 'pod.hosts')}: pod.hosts={site['pod.hosts']!r} names a host twice, or none")
    per, pod = site["pod.ipus_per_host"], site["pod.ipus"]
    if per > pod:
        raise ConfigError(f"{_at(site, 'pod.ipus_per_host')}: pod.ipus_per_host={per} is more than the Pod's "
                          f"{pod} IPUs; use 1 to {pod}")
    for one in site.pods:  # Slurm's view of a Pod's free IPUs is its hosts' GRES: never more than it has
        if per * len(one.hosts) > one.ipus:
            raise ConfigError(f"{_at(site, 'pod.ipus_per_host')}: pod.ipus_per_host={per} on Pod {one.name}'s "
                              f"{len(one.hosts)} hosts is {per * len(one.hosts)} IPUs, more than its {one.ipus}; use "
                              f"at most {one.ipus // len(one.hosts)}")
    timeout = site["prolog_epilog_timeout"]
    for key in ("prolog.deadline", "epilog.deadline"):
        if site[key] >= timeout:
            raise ConfigError(f"{_at(site, key)}: {key}={site[key]:g} must be below prolog_epilog_timeout="
                              f"{timeout} (Slurm kills the hook at that timeout); lower it or raise the timeout")


def hook_config(site: Site) -> dict:
    """The hooks' config file (config.py's schema), derived from the site."""
    command = site["vipu.command"] + (f" --config {site['vipu.cli_config']}" if site["vipu.cli_config"] else "")
    vipu = {"command": command, "host": site["vipu.host"], "port": site["vipu.port"],
            "timeout": site["vipu.timeout"]}
    if site["vipu.emulator"]:
        vipu["emulator_flags"] = True
    return {
        "version": 1,
        "vipu": vipu,
        "ipuof": {"host": site["ipuof.host"] or site["vipu.host"], "port": site["ipuof.port"] or site["vipu.port"]},
        "partition": {"prefix": site["partition.prefix"], "allocation": site["vipu.allocation"]},
        "pod": {"ipus": site["pod.ipus"], **({"pods": format_pods(site.pods)} if site.pods else {}),
                **({"groups": format_groups(site.groups)} if site.groups else {})},
        "prolog": {"deadline": site["prolog.deadline"], "max_attempts": site["prolog.max_attempts"]},
        "epilog": {"deadline": site["epilog.deadline"]},
        "reap": {"interval": site["reap.interval"]},
        "state_dir": site["state_dir"],
        "slurm": {"conf": f"{site['slurm.conf_dir']}/slurm.conf", "bin_dir": site["slurm.bin_dir"]},
    }
