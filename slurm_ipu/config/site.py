"""The site as every part of slurm-ipu reads it: typed, frozen sections once the loader has
checked the file (loader.py), and what follows from them (installed paths, each host's Pod,
model and IPU-Machines, the names of jobs' V-IPU objects)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..pods import Controller, Pod, SizeClass, host_runs, run_features, size_classes
from ..rules import IPUS_PER_AGENT, job_name
from ..slurm.hostlist import expand
from .grammar import agents as _agents
from .sections import SECTIONS, TOP, Sections
from .yamlkeys import key_lines

# install.prefix of the Debian packages (`make deb`, docs/admin.md): Debian's python3 and its
# dist-packages, no venv; slurm-ipu-hook in /usr/libexec/slurm-ipu, reading its settings from
# /etc/slurm-ipu (a link in the package points there; `slurm-ipu setup` writes them).
PACKAGED = "/usr"
PACKAGED_PATHS = {"python": "/usr/bin/python3", "hook": "/usr/libexec/slurm-ipu/slurm-ipu-hook",
                  "hook_conf": "/etc/slurm-ipu/slurm-ipu-hook.conf", "plugstack": "/etc/slurm-ipu/plugstack.conf",
                  "unit_dropin": "/etc/systemd/system/slurm-ipu.service.d/site.conf",
                  # where setup wrote it when the unit was slurm-ipu-reaper.service (setup retires it)
                  "earlier_unit_dropin": "/etc/systemd/system/slurm-ipu-reaper.service.d/site.conf",
                  "ipurun": "/usr/bin/ipurun", "poprun": "/usr/local/bin/poprun", "helper": "/usr/bin/slurm-ipu"}


@dataclass
class Site(Sections):
    values: dict[str, Any]
    source: str
    text: str = ""
    _lines: dict[str, int] | None = field(default=None, repr=False)
    _pods: tuple | None = field(default=None, repr=False, compare=False)
    _controllers: tuple | None = field(default=None, repr=False, compare=False)

    def freeze(self) -> None:
        """Once the loader's checks pass: the typed sections every caller reads, and the values
        by dotted key made read-only (what the sections were built from stays what they say)."""
        from types import MappingProxyType

        for key in TOP:
            setattr(self, key, self.values[key])
        for name, kind in SECTIONS.items():
            prefix = name + "."
            setattr(self, name, kind(**{key[len(prefix):]: value for key, value in self.values.items()
                                        if key.startswith(prefix)}))
        self.values = MappingProxyType(self.values)  # type: ignore[assignment]

    def at(self, key: str) -> str:
        """Where a key is: the file and its line (its section's, or the first, when the file does
        not give it). Found when a message is made: a valid file costs no second parse."""
        line = self.lines.get(key) or self.lines.get(key.split(".")[0], 1)
        return f"{self.source}:{line}"

    @property
    def lines(self) -> dict[str, int]:
        """Dotted key -> its line in the file, for messages (parsed on first use: the hooks never ask)."""
        if self._lines is None:
            self._lines = key_lines(self.text)
        return self._lines

    def scripts(self, which: str) -> list[str]:
        """The site's own controller scripts for `which` ('prolog' or 'epilog'; slurm.site_prolog_slurmctld,
        slurm.site_epilog_slurmctld) as a list, in the order they run."""
        given = self.slurm.site_prolog_slurmctld if which == "prolog" else self.slurm.site_epilog_slurmctld
        return [item for item in (given or "").split(",") if item]

    @property
    def hosts(self) -> list[str]:
        return expand(self.values["pod.hosts"])

    @property
    def groups(self) -> dict[str, list[str]]:
        return {g["name"]: list(g["pods"]) for g in self.values["pod_groups"] or []}

    @property
    def pods(self) -> list[Pod]:
        """The Pods of a multi-Pod site; [] for one Pod (no cabling, no topology). Built once for
        the site's `pods` list (the slurm-ipu service asks for every job, and each Pod expands its
        hostlist), again only if that list is replaced."""
        entries = self.values["pods"] or []
        if self._pods is None or self._pods[0] is not entries:
            default = self.values["pod.ipus_per_host"]
            self._pods = (entries, [Pod(p["name"], p["ilds"], p["hosts"], p.get("ipus_per_host") or default,
                                        p.get("ipus") or 0) for p in entries])
        return list(self._pods[1])

    @property
    def ipuof_host(self) -> str:
        """What tasks are given as IPUOF_VIPU_API_HOST (on a site of several controllers, the
        first's: the SPANK plugin gives each task its node's, controller=)."""
        return self.controllers[0].ipuof_host

    @property
    def ipuof_port(self) -> int:
        return self.controllers[0].ipuof_port

    @property
    def controllers(self) -> list[Controller]:
        """The site's V-IPU controllers, in the site's order: controllers:, or the one of vipu.*
        (named by its host) managing every Pod. Built once, like the Pods."""
        entries, v = self.values["controllers"], self.values  # read by the loader's checks too
        if self._controllers is None or self._controllers[0] is not entries:
            port, config = v["vipu.port"], v["vipu.cli_config"]
            if not entries:
                one = Controller(v["vipu.host"], v["vipu.host"], port, config, v["vipu.allocation"],
                                 v["ipuof.host"] or v["vipu.host"], v["ipuof.port"] or port,
                                 tuple(p.name for p in self.pods), frozenset(self.hosts))
                self._controllers = (entries, [one])
            else:
                hosts = {p.name: p.hosts for p in self.pods}
                made = [Controller(e["name"], e["host"], e["port"] or port, e["cli_config"] or config,
                                   e["allocation"], e["ipuof_host"] or e["host"], e["ipuof_port"] or e["port"] or port,
                                   tuple(e["pods"]), frozenset(h for p in e["pods"] for h in hosts[p]))
                        for e in entries]
                self._controllers = (entries, made)
        return list(self._controllers[1])

    def controller_of(self, hosts) -> Controller:
        """The controller of a job on `hosts` (every host of a job is under one: Slurm's topology
        has no switch above two controllers). ConfigError when they are not, or a host is under
        none: the job cannot have IPUs."""
        controllers = self.controllers
        if len(controllers) == 1:
            return controllers[0]
        hosts = list(hosts)
        found = [c for c in controllers if any(h in c.hosts for h in hosts)]
        stray = [h for h in hosts if not any(h in c.hosts for c in controllers)]
        if stray:
            raise ConfigError(f"host {stray[0]} is under no V-IPU controller of the site description; add its Pod to "
                              "a controller's pods, or keep IPU jobs off it")
        if len(found) != 1:
            raise ConfigError(f"the job's hosts are under V-IPU controllers {', '.join(c.name for c in found)}; a job "
                              "gets IPUs of one controller: render the topology again (no switch joins two)")
        return found[0]

    def controller_named(self, name: str) -> Controller:
        found = next((c for c in self.controllers if c.name == name), None)
        if found is None:
            raise ConfigError(f"no V-IPU controller is named {name!r}; the site's: "
                              f"{', '.join(c.name for c in self.controllers)}")
        return found

    @property
    def slurm_conf(self) -> str:
        return f"{self.slurm.conf_dir}/slurm.conf"

    @property
    def vipu_command(self) -> list[str]:
        """The hooks' vipu: the site's command, with its credentials file when there is one (the
        first controller's, on a site of several: vipu_client gives each its own)."""
        return self.command_for(self.controllers[0])

    @property
    def vipu_admin_command(self) -> list[str]:
        """The hooks' vipu-admin (the allocation model's allocations), with the same credentials."""
        return self.command_for(self.controllers[0], admin=True)

    def command_for(self, controller: Controller, admin: bool = False) -> list[str]:
        """The hooks' vipu (or vipu-admin) for one controller, with its credentials."""
        credentials = ["--config", controller.cli_config] if controller.cli_config else []
        return [self.vipu.admin_command if admin else self.vipu.command, *credentials]

    @property
    def packaged(self) -> bool:
        """Installed from the Debian packages rather than by `make install`."""
        return self.install.prefix == PACKAGED

    @property
    def python(self) -> str:
        return PACKAGED_PATHS["python"] if self.packaged else f"{self.install.prefix}/venv/bin/python"

    def path(self, what: str) -> str:
        """Where an installed file lives (the fragments name installed paths, never the checkout)."""
        if self.packaged and what in PACKAGED_PATHS:
            return PACKAGED_PATHS[what]
        roots = {"hook": f"{self.install.prefix}/libexec/slurm-ipu-hook",
                 "hook_conf": f"{self.install.prefix}/libexec/slurm-ipu-hook.conf",  # hook.c reads it
                 "site": self.install.site,
                 "snapshot": f"{os.path.dirname(self.install.site)}/snapshot.json",  # slurm-ipu snapshot's
                 "unit": f"{self.install.unit_dir}/slurm-ipu.service",
                 "plugin": f"{self.slurm.plugin_dir}/spank_ipu.so",
                 # what the SPANK plugin runs as the user in srun (`slurm-ipu step`: spank/step.c)
                 "helper": f"{self.install.prefix}/venv/bin/slurm-ipu"}
        return roots[what]

    def vipu_client(self, controller: Controller | None = None):
        """A client of one controller; by default the site's only one (ConfigError on a site of
        several: whoever asks must say whose, by the job's hosts, client_for)."""
        from ..vipu import VipuClient

        if controller is None:
            controllers = self.controllers
            if len(controllers) > 1:
                raise ConfigError(f"the site has {len(controllers)} V-IPU controllers; say which "
                                  f"({', '.join(c.name for c in controllers)})")
            controller = controllers[0]
        v = self.vipu
        return VipuClient(command=self.command_for(controller), host=controller.host, port=controller.port,
                          timeout=v.timeout, retries=v.retries, emulator_flags=v.emulator,
                          admin_command=self.command_for(controller, admin=True),
                          controller=controller.name if len(self.controllers) > 1 else None)

    def client_for(self, hosts):
        """The client of the controller of a job on `hosts`."""
        return self.vipu_client(self.controller_of(hosts))

    @property
    def models(self) -> set[str]:
        """The V-IPU models the site's jobs get: each Pod's (pods: and pod_groups: may choose), else
        vipu.model."""
        return {p["model"] for p in self.values["pods"] or []} or {self.values["vipu.model"]}

    def model_for(self, hosts) -> str:
        """The model of a job on `hosts`: its Pods'. A job over Pods of both models gets neither
        (job_submit.lua refuses it where it can tell; the prolog fails it otherwise)."""
        if len(self.models) == 1:
            return next(iter(self.models))
        from ..pods import spanned

        used = {p.name: self._entry(p.name)["model"] for p in spanned(self.pods, hosts)}
        if len(set(used.values())) != 1:
            raise ConfigError(f"the job's hosts are in Pods {', '.join(f'{n} ({m})' for n, m in used.items())}, "
                              "of both V-IPU models; a job gets one: give each model its own Slurm partition")
        return next(iter(used.values()))

    def pods_of_model(self, model: str) -> list[Pod]:
        """The Pods whose jobs get `model` ([] on a single-Pod site)."""
        return [p for p in self.pods if self._entry(p.name)["model"] == model]

    def _entry(self, pod: str) -> dict:
        return next(e for e in self.values["pods"] if e["name"] == pod)

    def host_models(self) -> dict[str, str]:
        """Each host of a multi-Pod site, with its Pod's model."""
        return {h: self._entry(p.name)["model"] for p in self.pods for h in p.hosts}

    def prefix_of(self, model: str) -> str:
        return self.allocation.prefix if model == "allocation" else self.partition.prefix

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
        prefix = self.allocation.prefix
        if "allocation" in self.models and name.startswith(prefix) and name[len(prefix):].isdigit():
            return "allocation"
        return "partition"

    def agents_of(self, hosts) -> list[str]:
        """The IPU-Machines (V-IPU agents) mapped to `hosts`, as Graphcore's host-IPU mapping file
        lists them: a Pod's hosts, in hostlist order, take its IPU-Machines in V-IPU's order,
        pod.ipus_per_host / 4 each; Pods follow each other (docs/pods.md, allocation model)."""
        out = self.host_agents()
        missing = [h for h in hosts if h not in out]
        if missing:
            raise ConfigError(f"host {missing[0]} is in no Pod of the site description, so no IPU-Machine is mapped "
                              "to it; add it to pod.hosts (or a Pod's hosts)")
        return [agent for host in hosts for agent in out[host]]

    def host_agents(self) -> dict[str, list[str]]:
        """Every host of the site with its IPU-Machines (agents_of's mapping, built once per call:
        the health pass asks for every host at once): its Pod's IPUs per host, 4 to a machine."""
        return {host: agents[k * per // IPUS_PER_AGENT:(k + 1) * per // IPUS_PER_AGENT]
                for (hosts_of, agents), per in zip(self.pod_agents(), self.pod_host_ipus(), strict=True)
                for k, host in enumerate(hosts_of)}

    def pod_host_ipus(self) -> list[int]:
        """Each Pod's IPUs per host, in the order of pod_agents (one entry on a one-Pod site)."""
        return [p.ipus_per_host for p in self.pods] or [self.values["pod.ipus_per_host"]]

    def host_ipus(self) -> dict[str, int]:
        """Every host of the site with its IPUs (its Gres count): its Pod's ipus_per_host."""
        return {host: per for (hosts, _), per in zip(self.pod_agents(), self.pod_host_ipus(), strict=True)
                for host in hosts}

    def size_classes(self) -> list[SizeClass]:
        """The site's hosts by IPU count (pods.size_classes); one class where every host is alike,
        and none on a one-Pod site (its hosts are alike)."""
        return size_classes(self.pods)

    def host_features(self) -> dict[str, list[str]]:
        """The node features slurm-ipu gives each host: its size class where hosts differ, and its
        runs of the allocation model (placement)."""
        classes = self.size_classes()
        out = {h: [c.feature] for c in classes for h in expand(c.hostlist)} if len(classes) > 1 else {}
        for host, runs in self.placement()[0].items():
            out.setdefault(host, []).extend(runs)
        return out

    def placement(self) -> tuple[dict[str, list[str]], dict[int, list[str]]]:
        """Where a multi-host job of the allocation model may land (pods.host_runs): each host's
        node features and each host count's alternatives; ({}, {}) on a site without the model."""
        if "allocation" not in self.models:
            return {}, {}
        return run_features(self.host_runs())

    def host_runs(self) -> dict[int, list[tuple[str, ...]]]:
        """Per host count, the runs of a Pod's hosts whose IPU-Machines one partition fills
        (pods.host_runs): where Slurm places an allocation-model job, and where its steps may run."""
        return host_runs([(hosts, per // IPUS_PER_AGENT)
                          for (hosts, _), per in zip(self.pod_agents(), self.pod_host_ipus(), strict=True)])

    def pod_agents(self) -> list[tuple[list[str], list[str]]]:
        """Each Pod's hosts and IPU-Machines (V-IPU agent names, in V-IPU's order): the site's
        agents keys, else ag0, ag1, ... counted over each controller's Pods in the site's order
        (each controller names its own machines)."""
        pods = [(list(p.hosts), p.ipus, self._entry(p.name).get("agents")) for p in self.pods] or \
            [(self.hosts, self.values["pod.ipus"], self.values["pod.agents"] and
              _agents("pod.agents", self.values["pod.agents"], self.values["pod.ipus"]))]
        starts = self._counted_per_controller([p.ipus // IPUS_PER_AGENT for p in self.pods] or [0])
        out = []
        for (hosts, ipus, given), first in zip(pods, starts, strict=True):
            out.append((hosts, given or [f"ag{first + j}" for j in range(ipus // IPUS_PER_AGENT)]))
        return out

    def ild_ids(self) -> dict[str, list[int]]:
        """Each Pod's ILD numbers, counted over its controller's Pods in the site's order (the
        order each controller numbers its ILDs: docs/pods.md, "Several Pods")."""
        starts = self._counted_per_controller([p.ilds for p in self.pods]) if self.pods else []
        return {p.name: list(range(first, first + p.ilds)) for p, first in zip(self.pods, starts, strict=True)}

    def _counted_per_controller(self, sizes: list[int]) -> list[int]:
        """Where each Pod's run of numbers starts, given each Pod's count: Pods under one
        controller follow each other; each controller starts at 0."""
        under = {pod: c.name for c in self.controllers for pod in c.pods}
        next_of: dict[str, int] = {}
        out = []
        for pod, size in zip(self.pods or [None], sizes, strict=True):
            key = under.get(pod.name, "") if pod is not None else ""
            out.append(next_of.get(key, 0))
            next_of[key] = out[-1] + size
        return out
