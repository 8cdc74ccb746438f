"""slurm-ipu's configuration: the site description, one YAML file an admin writes and `make
install` puts at `install.site`. Every part reads that one file: the controller hooks and the hook
service, ipurun, doctor, status and render. FIELDS is the only table of options: types, defaults,
ranges and help; the environment twins (SLURM_IPU_<KEY>), the example site file
(etc/site-pod128.yaml) and docs/options.md are generated from it (slurm_ipu/deploy/example.py).

Precedence, in `load()` only: command-line overrides > SLURM_IPU_<KEY> environment > the file >
defaults. Which file: the caller's path (--site), else $SLURM_IPU_SITE, else the one the running
install recorded (its manifest), else /etc/slurm-ipu/site.yaml.

Errors are one line naming the file and line, the value and the valid range (ConfigError, exit 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .boolean import parse_bool
from .errors import ConfigError, shown
from .pods import Pod, host_runs, run_features
from .rules import IPUS_PER_AGENT, IPUS_PER_ILD, MAX_POD_ILDS, VIPU_PORT, job_name
from .slurm import releases

DEFAULT_SITE = "/etc/slurm-ipu/site.yaml"
SITE_ENV = "SLURM_IPU_SITE"
MANIFEST = "share/slurm-ipu/manifest.json"  # under the install's PREFIX (deploy/install.py writes it)
# install.prefix of the Debian packages (`make deb`, docs/admin.md): Debian's python3 and its
# dist-packages, no venv; slurm-ipu-hook in /usr/libexec/slurm-ipu, reading its settings from
# /etc/slurm-ipu (a link in the package points there; `slurm-ipu setup` writes them).
PACKAGED = "/usr"
PACKAGED_PATHS = {"python": "/usr/bin/python3", "hook": "/usr/libexec/slurm-ipu/slurm-ipu-hook",
                  "hook_conf": "/etc/slurm-ipu/slurm-ipu-hook.conf", "plugstack": "/etc/slurm-ipu/plugstack.conf",
                  "unit_dropin": "/etc/systemd/system/slurm-ipu-reaper.service.d/site.conf",
                  "ipurun": "/usr/bin/ipurun", "poprun": "/usr/local/bin/poprun", "helper": "/usr/bin/slurm-ipu"}
SUPPORTED_SLURM = releases.SUPPORTED
UPGRADING = "docs/admin.md, Upgrading"


def installed(key: str) -> str | None:
    """What `make install` recorded for this install (its `site` path), found from the running
    interpreter: an install's commands run its own venv, PREFIX/venv. So an install with another
    install.site or PREFIX needs no environment variable. None when this is not such an install
    (a checkout, a test) or it recorded no site."""
    import json
    import sys

    try:
        doc = json.loads((Path(sys.prefix).parent / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def default_site() -> str:
    return installed("site") or DEFAULT_SITE


def locate(environ: dict | None = None, path: str | None = None) -> tuple[str, bool]:
    """(the site description's path, whether the caller or the environment named it)."""
    env = os.environ if environ is None else environ
    explicit = path or env.get(SITE_ENV)
    return (explicit, True) if explicit else (default_site(), False)


# --- range checks: value -> None if valid, else the valid range in words ---------------------

def _between(lo: float, hi: float):
    def check(v):
        return None if lo <= v <= hi else f"from {lo:g} to {hi:g}"
    return check


def _positive(v):
    return None if 0 < v <= 86400 else "a positive number of seconds, at most 86400 (a day)"


def _pod_size(v):
    from .rules import POD_SIZES, is_pod_size

    return None if is_pod_size(v) else f"a Pod size: {POD_SIZES}; a bigger cluster is pods:"


PREFIX_CHARS = "-_"  # what the SPANK plugin accepts in its prefix= argument (spank/args.c)


def _prefix(v):
    ok = 0 < len(v) < 32 and all(c.isascii() and (c.isalnum() or c in PREFIX_CHARS) for c in v)
    return None if ok else f"1 to 31 letters, digits and '{PREFIX_CHARS}' (the SPANK plugin's rule)"


def _abs(v: str):
    return None if v.startswith("/") and "\n" not in v else "an absolute path"


def _plain_path(v: str):
    ok = v.startswith("/") and not any(c.isspace() for c in v)
    return None if ok else "an absolute path without spaces"


def _plain_paths(v: str):
    """One or more absolute paths, comma-separated (a site's several controller scripts)."""
    ok = all(_plain_path(item) is None for item in v.split(","))
    return None if ok else "absolute paths without spaces, separated by ','"


def _version(v: str):
    return None if v in SUPPORTED_SLURM else f"one of {', '.join(SUPPORTED_SLURM)}"


def name_check(v: str):
    ok = 0 < len(v) <= 40 and all(c.isascii() and (c.isalnum() or c in "-_") for c in v)
    return None if ok else "1 to 40 letters, digits, '-' and '_'"


def _host(v: str):
    ok = 0 < len(v) <= 253 and all(c.isascii() and (c.isalnum() or c in "-._:") for c in v)
    return None if ok else "a host name or address"


def _model(v: str):
    return None if v in ("partition", "allocation") else "partition or allocation"


def _cross_pod(v: str):
    return None if v in ("refuse", "slow") else "refuse or slow"


_port = _between(1, 65535)


# --- the table --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    key: str          # dotted YAML path
    type: type
    default: Any
    help: str
    check: Any = None
    required: bool = False
    example: Any = None  # the value etc/site-pod128.yaml shows; None: the default

    @property
    def env(self) -> str | None:
        """Its environment twin; lists (the Pods) have none."""
        return None if self.type is list else "SLURM_IPU_" + self.key.upper().replace(".", "_")


POD128 = [{"name": "poda", "hosts": "ipu-host[1-4]", "ilds": 1}, {"name": "podb", "hosts": "ipu-host[5-8]", "ilds": 1}]

FIELDS = (
    Field("cluster", str, None, "the Slurm cluster's name (ClusterName)", name_check, required=True,
          example="ipupod128"),
    Field("vipu.host", str, None, "the V-IPU controller's address (vipu --api-host)", _host, required=True,
          example="vipu.ipupod128.example.org"),
    Field("vipu.port", int, VIPU_PORT, "the V-IPU controller's port (vipu --api-port)", _port),
    Field("vipu.allocation", str, None, "the V-IPU allocation partitions are created in (with pods: the one "
          "holding every Pod; each Pod has its own, named like the Pod); null: the controller's default",
          name_check, example="all"),
    Field("vipu.command", str, "/usr/bin/vipu", "the vipu command the hooks run (an absolute path: hooks have no "
          "PATH)", _plain_path),
    Field("vipu.cli_config", str, None, "the vipu CLI's config file with the hooks' V-IPU credentials "
          "(vipu --config); null: none", _plain_path, example="/etc/slurm-ipu/vipu-cli.hcl"),
    Field("vipu.model", str, "partition", "what the prolog makes for an IPU job: 'partition' (one V-IPU partition "
          "sized to the job) or 'allocation' (Graphcore's host-IPU mapping: an allocation of the IPU-Machines of the "
          "job's hosts, granted to its user, who makes partitions in it; docs/admin.md)", _model),
    Field("vipu.admin_command", str, "/usr/bin/vipu-admin", "with vipu.model allocation: the vipu-admin command "
          "the hooks create and remove jobs' allocations with (an absolute path)", _plain_path),
    Field("vipu.timeout", float, 10.0, "seconds allowed for one vipu call", _positive),
    Field("vipu.retries", int, 2, "extra attempts of a vipu call that failed transiently", _between(0, 10)),
    Field("vipu.emulator", bool, False, "the controller is vipu-emu (labs, drills): pass it each job's hosts "
          "and owner (--hosts/--owner-uid), which a real controller does not take"),
    Field("vipu.emulator_cross_pod", str, "refuse", "with vipu.emulator and pods: an attach from a host to another "
          "Pod's IPUs is refused ('refuse'), or served after vipu.emulator_cross_pod_delay ('slow')", _cross_pod),
    Field("vipu.emulator_cross_pod_delay", float, 0.5, "seconds a 'slow' cross-Pod attach takes (the emulator)",
          _between(0, 60)),
    Field("allocation.prefix", str, "c", "with vipu.model allocation: a job's allocation is prefix + job id "
          "(Graphcore's scripts use c${SLURM_JOB_ID})", _prefix),
    Field("allocation.partition", bool, False, "with vipu.model allocation: also create, in the job's allocation, "
          "a partition of all its IPUs named partition.prefix + job id (the IPUOF_VIPU_API_PARTITION_ID its tasks "
          "get), owned by the job's user, who may remove or replace it"),
    Field("ipuof.host", str, None, "IPUOF_VIPU_API_HOST in tasks; null: vipu.host", _host),
    Field("ipuof.port", int, None, "IPUOF_VIPU_API_PORT in tasks; null: vipu.port", _port),
    Field("pod.ipus", int, None, "IPUs in the Pod (64 per ILD); not with pods: (their sum)", _pod_size),
    Field("pod.hosts", str, None, "the host servers cabled to the Pod, as a Slurm hostlist (ipu-host[1-8]); "
          "not with pods: (theirs)"),
    Field("pod.agents", str, None, "with vipu.model allocation: the Pod's IPU-Machines as V-IPU names its agents, "
          "in V-IPU's order, as a hostlist (ag[01-16]); a Pod of pods: has its own agents key; null: ag0, ag1, ... "
          "counted over the Pods (the emulator's names)"),
    Field("pod.ipus_per_host", int, None, "IPUs each host's jobs may ask for (--gres=ipu:N), its Gres count",
          _between(1, 64), required=True, example=16),
    Field("pods", list, None, "a multi-Pod cluster, instead of pod.ipus/pod.hosts: each Pod's name (its V-IPU "
          "allocation and Slurm switch), hosts (a hostlist), ilds (IPU-Link domains of 64 IPUs, default 1) and "
          "model (its jobs' V-IPU model, default vipu.model)",
          example=POD128),
    Field("pod_groups", list, None, "with pods: groups of Pods used together (a POD256 as two pairs), each a "
          "switch above its Pods and a V-IPU allocation holding theirs: name, pods and model (its Pods' V-IPU "
          "model)"),
    Field("partition.prefix", str, "slurm_", "partition name = prefix + job id (Graphcore's own plugin used "
          "slurm_)", _prefix),
    Field("prolog.deadline", float, 60.0, "seconds the prolog may take in all, every V-IPU call included",
          _positive),
    Field("prolog.max_attempts", int, 3, "prolog failures before the job is held for an admin (those a failed "
          "IPU-Machine caused do not count)", _between(1, 100)),
    Field("epilog.deadline", float, 30.0, "seconds the epilog may take in all", _positive),
    Field("reap.interval", float, 300.0, "seconds between the hook service's full reaps (orphans whose job is "
          "gone)", _between(5, 86400)),
    Field("health.interval", float, 60.0, "seconds between the hook service's health passes: a host whose "
          "IPU-Machine failed is drained, and resumed when it is back (allocation model; 0: no passes)",
          _between(0, 86400)),
    Field("metrics.textfile", str, None, "where the hook service writes `slurm-ipu metrics` every health.interval, "
          "for node_exporter's textfile collector (e.g. /var/lib/prometheus/node-exporter/slurm_ipu.prom); unset: "
          "nowhere", _plain_path),
    Field("prolog_epilog_timeout", int, 180, "Slurm's PrologEpilogTimeout: above both deadlines",
          _between(1, 86400)),
    Field("state_dir", str, "/var/lib/slurm-ipu", "the hooks' state: creation records, the removal journal, "
          "hooks.log, locks (root-only)", _abs),
    Field("accounting.slurmdbd_host", str, None, "slurmdbd's host, to track IPUs in accounting; null: none",
          _host, example="slurmdbd.ipupod128.example.org"),
    Field("slurm.version", str, "22.05", "the Slurm release the cluster runs", _version),
    Field("slurm.user", str, "slurm", "SlurmUser: the hooks and the hook service run as this user and own "
          "state_dir", name_check),
    Field("slurm.site_prolog_slurmctld", str, None, "the site's own PrologSlurmctld scripts (one, or several "
          "separated by ','), run by slurm-ipu-hook in that order for every job before ours, the first failure "
          "failing the job start; null: none", _plain_paths),
    Field("slurm.site_epilog_slurmctld", str, None, "the site's own EpilogSlurmctld scripts (one, or several "
          "separated by ','), run by slurm-ipu-hook in that order for every job after ours; null: none",
          _plain_paths),
    Field("slurm.conf_dir", str, "/etc/slurm", "where slurm.conf lives (the hooks pass its slurm.conf as "
          "SLURM_CONF)", _abs),
    Field("slurm.bin_dir", str, "/usr/bin", "where scontrol and squeue live (hooks have no PATH)", _abs),
    Field("slurm.plugin_dir", str, "/usr/lib/x86_64-linux-gnu/slurm-wlm", "Slurm's plugin directory (the SPANK "
          "plugin goes there)", _abs),
    Field("install.site", str, DEFAULT_SITE, "where `make install` puts this file: every installed command reads "
          "it there", _abs),
    Field("install.unit_dir", str, "/etc/systemd/system", "where `make install` puts the hook service's unit",
          _abs),
    Field("install.poprun", bool, False, "also install ipurun as `poprun` (make install: in BINDIR; the Debian "
          "packages: /usr/local/bin, by `slurm-ipu setup`), so scripts written for PopRun run unchanged; off by "
          "default: a Poplar SDK's own poprun on a user's PATH would then depend on PATH order (docs/admin.md)"),
    Field("install.prefix", str, "/opt/slurm-ipu", "where `make install` puts slurm-ipu (its venv, the hook "
          "controller hooks); `make install PREFIX=` must name the same; /usr: installed from the Debian packages "
          "(`make deb`; then `slurm-ipu setup` after each edit of this file)", _abs),
)
BY_KEY = {f.key: f for f in FIELDS}

# Keys of the hooks' own config.yaml that earlier releases rendered beside the site description.
EARLIER = {"vipu.emulator_flags", "partition.allocation", "pod.pods", "pod.groups", "slurm.conf",
           "install.config"}


# --- the site ---------------------------------------------------------------------------------

@dataclass
class Site:
    values: dict[str, Any]
    source: str
    text: str = ""
    _lines: dict[str, int] | None = field(default=None, repr=False)
    _pods: tuple | None = field(default=None, repr=False, compare=False)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def lines(self) -> dict[str, int]:
        """Dotted key -> its line in the file, for messages (parsed on first use: the hooks never ask)."""
        if self._lines is None:
            self._lines = key_lines(self.text)
        return self._lines

    def scripts(self, key: str) -> list[str]:
        """slurm.site_prolog_slurmctld / site_epilog_slurmctld as a list, in the order they run."""
        return [item for item in (self[key] or "").split(",") if item]

    @property
    def hosts(self) -> list[str]:
        from .slurm.hostlist import expand

        return expand(self["pod.hosts"])

    @property
    def groups(self) -> dict[str, list[str]]:
        return {g["name"]: list(g["pods"]) for g in self["pod_groups"] or []}

    @property
    def pods(self) -> list[Pod]:
        """The Pods of a multi-Pod site; [] for one Pod (no cabling, no topology). Built once for
        the site's `pods` list (the hook service asks for every job, and each Pod expands its
        hostlist), again only if that list is replaced."""
        entries = self["pods"] or []
        if self._pods is None or self._pods[0] is not entries:
            self._pods = (entries, [Pod(p["name"], p["ilds"], p["hosts"]) for p in entries])
        return list(self._pods[1])

    @property
    def ipuof_host(self) -> str:
        return self["ipuof.host"] or self["vipu.host"]

    @property
    def ipuof_port(self) -> int:
        return self["ipuof.port"] or self["vipu.port"]

    @property
    def slurm_conf(self) -> str:
        return f"{self['slurm.conf_dir']}/slurm.conf"

    @property
    def vipu_command(self) -> list[str]:
        """The hooks' vipu: the site's command, with its credentials file when there is one."""
        return [self["vipu.command"], *self._credentials]

    @property
    def vipu_admin_command(self) -> list[str]:
        """The hooks' vipu-admin (the allocation model's allocations), with the same credentials."""
        return [self["vipu.admin_command"], *self._credentials]

    @property
    def _credentials(self) -> list[str]:
        return ["--config", self["vipu.cli_config"]] if self["vipu.cli_config"] else []

    @property
    def packaged(self) -> bool:
        """Installed from the Debian packages rather than by `make install`."""
        return self["install.prefix"] == PACKAGED

    @property
    def python(self) -> str:
        return PACKAGED_PATHS["python"] if self.packaged else f"{self['install.prefix']}/venv/bin/python"

    def path(self, what: str) -> str:
        """Where an installed file lives (the fragments name installed paths, never the checkout)."""
        if self.packaged and what in PACKAGED_PATHS:
            return PACKAGED_PATHS[what]
        roots = {"hook": f"{self['install.prefix']}/libexec/slurm-ipu-hook",
                 "hook_conf": f"{self['install.prefix']}/libexec/slurm-ipu-hook.conf",  # hook.c reads it
                 "site": self["install.site"],
                 "snapshot": f"{os.path.dirname(self['install.site'])}/snapshot.json",  # slurm-ipu snapshot's
                 "unit": f"{self['install.unit_dir']}/slurm-ipu-reaper.service",
                 "plugin": f"{self['slurm.plugin_dir']}/spank_ipu.so",
                 # what the SPANK plugin runs as the user in srun (`slurm-ipu step`: spank/step.c)
                 "helper": f"{self['install.prefix']}/venv/bin/slurm-ipu"}
        return roots[what]

    def vipu_client(self):
        from .vipu import VipuClient

        return VipuClient(command=self.vipu_command, host=self["vipu.host"], port=self["vipu.port"],
                          timeout=self["vipu.timeout"], retries=self["vipu.retries"],
                          emulator_flags=self["vipu.emulator"], admin_command=self.vipu_admin_command)

    @property
    def models(self) -> set[str]:
        """The V-IPU models the site's jobs get: each Pod's (pods: and pod_groups: may choose), else
        vipu.model."""
        return {p["model"] for p in self["pods"] or []} or {self["vipu.model"]}

    def model_for(self, hosts) -> str:
        """The model of a job on `hosts`: its Pods'. A job over Pods of both models gets neither
        (job_submit.lua refuses it where it can tell; the prolog fails it otherwise)."""
        if len(self.models) == 1:
            return next(iter(self.models))
        from .pods import spanned

        used = {p.name: self._entry(p.name)["model"] for p in spanned(self.pods, hosts)}
        if len(set(used.values())) != 1:
            raise ConfigError(f"the job's hosts are in Pods {', '.join(f'{n} ({m})' for n, m in used.items())}, "
                              "of both V-IPU models; a job gets one: give each model its own Slurm partition")
        return next(iter(used.values()))

    def pods_of_model(self, model: str) -> list[Pod]:
        """The Pods whose jobs get `model` ([] on a single-Pod site)."""
        return [p for p in self.pods if self._entry(p.name)["model"] == model]

    def _entry(self, pod: str) -> dict:
        return next(e for e in self["pods"] if e["name"] == pod)

    def host_models(self) -> dict[str, str]:
        """Each host of a multi-Pod site, with its Pod's model."""
        return {h: self._entry(p.name)["model"] for p in self.pods for h in p.hosts}

    def prefix_of(self, model: str) -> str:
        return self["allocation.prefix" if model == "allocation" else "partition.prefix"]

    def job_name(self, job_id, hosts) -> str:
        """The name of a job's V-IPU object (its partition, or its allocation). Hosts over both
        models (the prolog refused the job, so nothing was made): the partition's name."""
        try:
            model = self.model_for(hosts)
        except ConfigError:
            model = "partition"
        return job_name(self.prefix_of(model), job_id)

    @property
    def job_prefixes(self) -> tuple[str, ...]:
        """What the site's jobs' V-IPU objects are named after their ids."""
        return tuple(self.prefix_of(m) for m in sorted(self.models))

    def kind_of(self, name: str) -> str:
        """Whether a job's object of this name is an allocation or a partition."""
        prefix = self["allocation.prefix"]
        if "allocation" in self.models and name.startswith(prefix) and name[len(prefix):].isdigit():
            return "allocation"
        return "partition"

    def agents_of(self, hosts) -> list[str]:
        """The IPU-Machines (V-IPU agents) mapped to `hosts`, as Graphcore's host-IPU mapping file
        lists them: a Pod's hosts, in hostlist order, take its IPU-Machines in V-IPU's order,
        pod.ipus_per_host / 4 each; Pods follow each other (docs/admin.md, allocation model)."""
        out = self.host_agents()
        missing = [h for h in hosts if h not in out]
        if missing:
            raise ConfigError(f"host {missing[0]} is in no Pod of the site description, so no IPU-Machine is mapped "
                              "to it; add it to pod.hosts (or a Pod's hosts)")
        return [agent for host in hosts for agent in out[host]]

    def host_agents(self) -> dict[str, list[str]]:
        """Every host of the site with its IPU-Machines (agents_of's mapping, built once per call:
        the health pass asks for every host at once)."""
        per = self["pod.ipus_per_host"] // IPUS_PER_AGENT
        return {host: agents[k * per:(k + 1) * per]
                for hosts_of, agents in self.pod_agents() for k, host in enumerate(hosts_of)}

    def placement(self) -> tuple[dict[str, list[str]], dict[int, list[str]]]:
        """Where a multi-host job of the allocation model may land (pods.host_runs): each host's
        node features and each host count's alternatives; ({}, {}) on a site without the model."""
        if "allocation" not in self.models:
            return {}, {}
        runs = host_runs([hosts for hosts, _ in self.pod_agents()], self["pod.ipus_per_host"] // IPUS_PER_AGENT)
        return run_features(runs)

    def pod_agents(self) -> list[tuple[list[str], list[str]]]:
        """Each Pod's hosts and IPU-Machines (V-IPU agent names, in V-IPU's order): the site's
        agents keys, else ag0, ag1, ... counted over the Pods in the site's order."""
        pods = [(list(p.hosts), p.ipus, self._entry(p.name).get("agents")) for p in self.pods] or \
            [(self.hosts, self["pod.ipus"], self["pod.agents"] and _agents("pod.agents", self["pod.agents"],
                                                                             self["pod.ipus"]))]
        first, out = 0, []
        for hosts, ipus, given in pods:
            count = ipus // IPUS_PER_AGENT
            out.append((hosts, given or [f"ag{first + j}" for j in range(count)]))
            first += count
        return out


def _keys(text: str):
    """(mapping id, dotted key, 1-based line) of every key in the YAML node tree, in file order."""
    import yaml

    stack = [(yaml.compose(text), "")]
    while stack:
        node, prefix = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                yield id(node), f"{prefix}{key.value}", key.start_mark.line + 1
                stack.append((value, f"{prefix}{key.value}."))


def key_lines(text: str) -> dict[str, int]:
    """Dotted key -> 1-based line, from the YAML node tree."""
    import yaml

    try:
        return {name: line for _, name, line in _keys(text)}
    except yaml.YAMLError:
        return {}  # safe_load reports it with its own line


def refuse_repeated_keys(site: Site) -> None:
    """A key given twice in one mapping: YAML keeps the last and silently drops the first (a second
    `vipu:` section loses the first one's keys). Render, install and doctor refuse it; the hooks,
    which read a file these checked, skip the second parse."""
    seen: dict[tuple[int, str], int] = {}
    for mapping, name, line in _keys(site.text):  # the file parsed once already: no YAMLError here
        if (mapping, name) in seen:
            raise ConfigError(f"{site.source}:{line}: {name} is given twice (first at line {seen[mapping, name]}); "
                              "YAML keeps the last and drops the first: merge them into one")
        seen[mapping, name] = line


def flatten(doc: dict, keys, prefix: str = "") -> dict[str, Any]:
    """Nested YAML sections -> dotted keys. A mapping that is itself a key stays whole; an empty
    section (`vipu:` with nothing under it) gives nothing, so its keys' defaults apply."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and full not in keys:
            out.update(flatten(value, keys, full + "."))
        elif value is None and full not in keys and any(k.startswith(full + ".") for k in keys):
            continue
        else:
            out[full] = value
    return out


def _typed(where, f: Field, value: Any) -> Any:
    """A YAML value of the field's type (no string-to-number guessing: YAML typed it). where():
    the file and line, found only for an error (the hooks never pay for it)."""
    if f.type is bool:
        ok = isinstance(value, bool)
    else:
        ok = not isinstance(value, bool) and (isinstance(value, f.type) or f.type is float and isinstance(value, int))
    if not ok:
        raise ConfigError(f"{where()}: {f.key}={shown(value)} is not a {f.type.__name__} ({f.help})")
    return f.type(value)


def _from_text(f: Field, text: str) -> Any:
    """An environment twin's value, read as the field's type; the range is checked like the file's."""
    if f.type is bool:
        value = parse_bool(text)
        if value is None:
            raise ConfigError(f"environment: {f.env}={shown(text)} is not a bool; use yes or no")
        return value
    try:
        return f.type(text)
    except ValueError:
        raise ConfigError(f"environment: {f.env}={shown(text)} is not a {f.type.__name__} ({f.help})") from None


def _checked(where, f: Field, value: Any) -> Any:
    if value is None:
        if f.required:
            raise ConfigError(f"{where()}: {f.key} must be set ({f.help})")
        return None
    why = f.check(value) if f.check else None
    if why:
        raise ConfigError(f"{where()}: {f.key}={shown(value)} is out of range; use {why}")
    return value


def _document(text: str, source: str) -> dict:
    import yaml

    from .adminfile import check_yaml_shape

    check_yaml_shape(text, source)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise ConfigError(f"{source}: a site description starts with 'version: 1' (see etc/site-pod128.yaml)")
    return doc


def _unknown(source: str, text: str, key: str) -> ConfigError:
    import difflib

    line = key_lines(text).get(key, 1)
    if key in EARLIER:
        return ConfigError(f"{source}:{line}: {key} belongs to an earlier slurm-ipu's config.yaml: the site "
                           f"description is the one file now; {_earlier_fix(key)} ({UPGRADING})")
    near = difflib.get_close_matches(key, BY_KEY, n=1)
    hint = f"; did you mean {shown(near[0])}?" if near else ""
    return ConfigError(f"{source}:{line}: unknown key {shown(key)}{hint}")


def _earlier_fix(key: str) -> str:
    if key == "install.config":
        return "replace it with install.site, where the site description is installed (/etc/slurm-ipu/site.yaml)"
    return "point --site or SLURM_IPU_SITE at the site description the old file was rendered from"


def parse(text: str, source: str, environ: dict | None = None, overrides: dict | None = None) -> Site:
    """A Site from the file's text; environ holds SLURM_IPU_<KEY> twins (None: none), overrides
    the command line's values by key."""
    given = flatten({k: v for k, v in _document(text, source).items() if k != "version"}, BY_KEY)
    for key in given:
        if key not in BY_KEY:
            raise _unknown(source, text, key)
    site = Site({}, source, text)
    for f in FIELDS:
        value, where = given.get(f.key, f.default), lambda key=f.key: _at(site, key)
        if f.key in given and value is not None:
            value = _typed(where, f, value)
        twin = (environ or {}).get(f.env or "", "")
        if twin:
            value, where = _from_text(f, twin), lambda: "environment"
        if (overrides or {}).get(f.key) is not None:
            value, where = overrides[f.key], lambda: "command line"
        site.values[f.key] = _checked(where, f, value)
    _cross_checks(site)
    return site


def load(path: str | None = None, environ: dict | None = None, overrides: dict | None = None,
         twins: bool = True) -> Site:
    """The site description: path, else $SLURM_IPU_SITE, else the install's, else /etc/slurm-ipu/site.yaml.
    twins=False: the file alone decides (the controller hooks and the hook service: nothing a job's
    environment holds may change where they send V-IPU calls)."""
    from .adminfile import read_text

    env = os.environ if environ is None else environ
    where, explicit = locate(env, path)
    if not explicit and not os.path.lexists(where):
        raise ConfigError(f"site description {where} not found; install slurm-ipu with `make install SITE=...` or "
                          f"point {SITE_ENV} at the site description")
    text = read_text(where, "site description", "; start from etc/site-pod128.yaml")
    return parse(text, str(where), env if twins else None, overrides)


class _Place:
    """A key's file:line, found when a message is made: a valid file costs no second parse."""

    def __init__(self, site: Site, key: str):
        self.site, self.key = site, key

    def __str__(self) -> str:
        return _at(self.site, self.key)


def _at(site: Site, key: str) -> str:
    line = site.lines.get(key) or site.lines.get(key.split(".")[0], 1)
    return f"{site.source}:{line}"


# --- what no single field can check -------------------------------------------------------------

POD_KEYS = ("name", "hosts", "ilds", "model", "agents")


def _pods(site: Site) -> None:
    """pods: -> normalised entries, and pod.ipus/pod.hosts derived from them (one place each)."""
    raw = site["pods"]
    if raw is None:
        for key in ("pod.ipus", "pod.hosts"):
            if site[key] is None:
                raise ConfigError(f"{_at(site, key)}: {key} must be set ({BY_KEY[key].help}), or describe the "
                                  "Pods with pods:")
        return
    where = _Place(site, "pods")
    for key in ("pod.ipus", "pod.hosts"):
        if site[key] is not None:
            raise ConfigError(f"{_at(site, key)}: {key} and pods: both given; pods: says it (remove {key})")
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
    shapes = {(len(p.hosts), p.ilds) for p in pods}
    if len(shapes) > 1 or len({p.name for p in pods}) < len(pods):
        raise ConfigError(f"{where}: Pods must have distinct names and alike sizes (the same number of hosts and "
                          "ILDs each): a job over several Pods takes whole Pods")
    site.values["pod.ipus"] = sum(p.ipus for p in pods)
    site.values["pod.hosts"] = ",".join(p.hostlist for p in pods)
    if not site["vipu.allocation"] or site["vipu.allocation"] in seen.values():
        raise ConfigError(f"{_at(site, 'vipu.allocation')}: vipu.allocation={shown(site['vipu.allocation'])}: with "
                          "pods: name the V-IPU allocation that holds every Pod (jobs over several Pods go there), "
                          "not one Pod's")
    _groups(site, {p.name for p in pods})
    _pod_models(site, where)


def _groups(site: Site, pods: set[str]) -> None:
    """pod_groups: disjoint groups of two or more Pods, named apart from the Pods and the whole."""
    raw = site["pod_groups"]
    if raw is None:
        return
    where = _Place(site, "pod_groups")
    taken: set[str] = set()
    names = pods | {site["vipu.allocation"]}
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
        taken |= set(members)
        names.add(name)


def _pod_models(site: Site, where: _Place) -> None:
    """Each Pod's model: its own, else its group's, else vipu.model. A group's Pods share one (a
    job over them gets one V-IPU object)."""
    group_of = {m: g for g in site["pod_groups"] or [] for m in g["pods"]}
    for pod in site["pods"]:
        group = group_of.get(pod["name"]) or {}
        own, theirs = pod.pop("model", None), group.get("model")
        if own and theirs and own != theirs:
            raise ConfigError(f"{where}: Pod {pod['name']}: model={own} but its group {group['name']} has "
                              f"model={theirs}; a group's Pods share one model")
        pod["model"] = own or theirs or site["vipu.model"]
    for group in site["pod_groups"] or []:
        found = {p["name"]: p["model"] for p in site["pods"] if p["name"] in group["pods"]}
        if len(set(found.values())) > 1:
            raise ConfigError(f"{where}: group {group['name']}: its Pods' models differ ("
                              f"{', '.join(f'{n}: {m}' for n, m in found.items())}); a job over them gets one V-IPU "
                              "object: give the group one model")


def _pod_entry(where: _Place, k: int, item: object) -> dict:
    from .slurm.hostlist import expand

    if not isinstance(item, dict) or set(item) - set(POD_KEYS) or "name" not in item or "hosts" not in item:
        raise ConfigError(f"{where}: Pod {k + 1} must be a mapping of name, hosts and (optionally) ilds, model and "
                          "agents, e.g. {name: poda, hosts: ipu-host[1-4], ilds: 1}")
    name, hosts, ilds = item["name"], item["hosts"], item.get("ilds", 1)
    why = name_check(name) if isinstance(name, str) else "a name"
    if why:
        raise ConfigError(f"{where}: Pod {k + 1}: name={shown(name)} is out of range; use {why}")
    if isinstance(ilds, bool) or not isinstance(ilds, int) or not 1 <= ilds <= MAX_POD_ILDS:
        raise ConfigError(f"{where}: Pod {name}: ilds={shown(ilds)} is out of range; use 1 to {MAX_POD_ILDS} (64 IPUs "
                          "each)")
    try:
        if not isinstance(hosts, str) or not expand(hosts):
            raise ValueError("empty")
    except Exception as exc:  # the hostlist parser's own message says what is wrong
        raise ConfigError(f"{where}: Pod {name}: hosts={shown(hosts)} is not a Slurm hostlist ({exc})") from None
    model = item.get("model")
    if model is not None and (not isinstance(model, str) or _model(model)):
        raise ConfigError(f"{where}: Pod {name}: model={shown(model)} is out of range; use partition or allocation")
    entry = {"name": name, "hosts": hosts, "ilds": ilds, "model": model}
    if item.get("agents") is not None:
        entry["agents"] = _agents(f"{where}: Pod {name}", item["agents"], ilds * IPUS_PER_ILD)
    return entry


def _agents(where: str, value: object, ipus: int) -> list[str]:
    """A Pod's IPU-Machines as V-IPU names them: a hostlist of one name per 4 IPUs."""
    from .slurm.hostlist import expand

    want = ipus // IPUS_PER_AGENT
    try:
        names = expand(value) if isinstance(value, str) else []
    except Exception:  # the hostlist parser's message is not the point: the count is
        names = []
    if len(names) != want or len(set(names)) != want:
        raise ConfigError(f"{where}: agents={shown(value)} must name the Pod's {want} IPU-Machines ({ipus} IPUs, "
                          f"{IPUS_PER_AGENT} each) once each, in V-IPU's order, as a hostlist (e.g. ag[01-{want:02d}])")
    return names


def _model_checks(site: Site) -> None:
    """IPU-Machine names and job object names the models can tell apart."""
    if site["pod.agents"] is not None:
        if site["pods"]:
            raise ConfigError(f"{_at(site, 'pod.agents')}: pod.agents and pods: both given; each Pod has its own "
                              "agents key (remove pod.agents)")
        _agents(_at(site, "pod.agents"), site["pod.agents"], site["pod.ipus"])
    named = site["pod.agents"] is not None or any("agents" in p for p in site["pods"] or [])
    if named and site["vipu.emulator"]:
        raise ConfigError(f"{_at(site, 'vipu.emulator')}: vipu.emulator with agents named: the emulator names its "
                          "IPU-Machines ag0, ag1, ...; leave agents out for it")
    a, p = site["allocation.prefix"], site["partition.prefix"]
    if len(site.models) > 1 and (a.startswith(p) or p.startswith(a)):
        raise ConfigError(f"{_at(site, 'allocation.prefix')}: allocation.prefix={shown(a)} and partition.prefix="
                          f"{shown(p)} with "
                          "Pods of both models: neither may begin the other (a name must say which it is)")


def _cross_checks(site: Site) -> None:
    """The Pods against their hosts, deadlines against Slurm's."""
    _pods(site)
    try:
        hosts = site.hosts
    except Exception as exc:  # the hostlist parser's own message says what is wrong
        raise ConfigError(f"{_at(site, 'pod.hosts')}: pod.hosts={shown(site['pod.hosts'])}: {exc}") from None
    if len(set(hosts)) != len(hosts) or not hosts:
        raise ConfigError(f"{_at(site, 'pod.hosts')}: pod.hosts={shown(site['pod.hosts'])} names a host twice, or none")
    per, pod = site["pod.ipus_per_host"], site["pod.ipus"]
    if per > pod:
        raise ConfigError(f"{_at(site, 'pod.ipus_per_host')}: pod.ipus_per_host={per} is more than the Pod's "
                          f"{pod} IPUs; use 1 to {pod}")
    for one in site.pods:  # Slurm's view of a Pod's free IPUs is its hosts' GRES: never more than it has
        if per * len(one.hosts) > one.ipus:
            raise ConfigError(f"{_at(site, 'pod.ipus_per_host')}: pod.ipus_per_host={per} on Pod {one.name}'s "
                              f"{len(one.hosts)} hosts is {per * len(one.hosts)} IPUs, more than its {one.ipus}; use "
                              f"at most {one.ipus // len(one.hosts)}")
    _model_checks(site)
    if "allocation" in site.models and per % IPUS_PER_AGENT:
        raise ConfigError(f"{_at(site, 'pod.ipus_per_host')}: pod.ipus_per_host={per} with vipu.model allocation: a "
                          f"host's jobs get its whole IPU-Machines of {IPUS_PER_AGENT} IPUs each; use a multiple of "
                          f"{IPUS_PER_AGENT}")
    try:
        site.placement()
    except ConfigError as exc:
        raise ConfigError(f"{_at(site, 'pod.hosts')}: {exc}") from None
    timeout = site["prolog_epilog_timeout"]
    for key in ("prolog.deadline", "epilog.deadline"):
        if site[key] >= timeout:
            default = "" if key in site.lines else " (the default)"  # not in the file: say whose value it is
            raise ConfigError(f"{_at(site, key)}: {key}={site[key]:g}{default} must be below prolog_epilog_timeout="
                              f"{timeout} (Slurm kills the hook at that timeout); lower it or raise the timeout")
