"""The grammar of a Pod entry in `pods:` and of its IPU-Machines' names: pure functions of the
values, used by the loader's checks and by the site."""

from __future__ import annotations

from ..errors import ConfigError, shown
from ..rules import IPUS_PER_AGENT, IPUS_PER_ILD, MAX_POD_ILDS
from .options import _host, _model, _plain_path, _port, name_check

POD_KEYS = ("name", "hosts", "ilds", "ipus", "ipus_per_host", "model", "agents")
VPOD_SIZES = (4, 8, 16, 32)  # a Pod of part of one ILD (an allocation's sizes below 64)
CONTROLLER_KEYS = ("name", "host", "port", "cli_config", "allocation", "ipuof_host", "ipuof_port", "pods")


def pod_entry(where, k: int, item: object) -> dict:
    from ..slurm.hostlist import expand

    if not isinstance(item, dict) or set(item) - set(POD_KEYS) or "name" not in item or "hosts" not in item:
        raise ConfigError(f"{where}: Pod {k + 1} must be a mapping of name, hosts and (optionally) ilds, "
                          "ipus_per_host, model and agents, e.g. {name: poda, hosts: ipu-host[1-4], ilds: 1}")
    name, hosts, ilds = item["name"], item["hosts"], item.get("ilds", 1)
    why = name_check(name) if isinstance(name, str) else "a name"
    if why:
        raise ConfigError(f"{where}: Pod {k + 1}: name={shown(name)} is out of range; use {why}")
    vpod = item.get("ipus")
    if vpod is not None:  # a vPOD of part of an ILD: a controller's IPU-Machines, not a whole POD64
        if isinstance(vpod, bool) or vpod not in VPOD_SIZES or "ilds" in item:
            raise ConfigError(f"{where}: Pod {name}: ipus={shown(vpod)}: a vPOD smaller than an ILD has "
                              f"{', '.join(map(str, VPOD_SIZES))} IPUs (whole IPU-Machines), and no ilds; a Pod of "
                              "whole ILDs says ilds")
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
    per, ipus = item.get("ipus_per_host"), vpod or ilds * IPUS_PER_ILD
    if per is not None and (isinstance(per, bool) or not isinstance(per, int) or not 1 <= per <= ipus):
        raise ConfigError(f"{where}: Pod {name}: ipus_per_host={shown(per)} is out of range; use 1 to "
                          f"{ipus} (the IPUs each of its hosts' jobs may ask for, its Gres count)")
    entry = {"name": name, "hosts": hosts, "ilds": ilds, "model": model, "ipus_per_host": per}
    if vpod:
        entry["ipus"] = vpod
    if item.get("agents") is not None:
        entry["agents"] = agents(f"{where}: Pod {name}", item["agents"], ipus)
    return entry


def agents(where: str, value: object, ipus: int) -> list[str]:
    """A Pod's IPU-Machines as V-IPU names them: a hostlist of one name per 4 IPUs."""
    from ..slurm.hostlist import expand

    want = ipus // IPUS_PER_AGENT
    try:
        names = expand(value) if isinstance(value, str) else []
    except Exception:  # the hostlist parser's message is not the point: the count is
        names = []
    if len(names) != want or len(set(names)) != want:
        raise ConfigError(f"{where}: agents={shown(value)} must name the Pod's {want} IPU-Machines ({ipus} IPUs, "
                          f"{IPUS_PER_AGENT} each) once each, in V-IPU's order, as a hostlist (e.g. ag[01-{want:02d}])")
    return names



def controller_entry(where, k: int, item: object) -> dict:
    """One V-IPU controller of `controllers:`: its name, address, credentials, the allocation that
    holds its Pods, the address its jobs' tasks are given, and its Pods' names."""
    if not isinstance(item, dict) or set(item) - set(CONTROLLER_KEYS) or not {"name", "host", "pods"} <= set(item):
        raise ConfigError(f"{where}: controller {k + 1} must be a mapping of name, host, pods and (optionally) port, "
                          "cli_config, allocation, ipuof_host and ipuof_port, e.g. {name: tenant-a, host: "
                          "vipu-a.example.org, pods: [poda]}")
    name = item["name"]
    why = name_check(name) if isinstance(name, str) else "a name"
    if why:
        raise ConfigError(f"{where}: controller {k + 1}: name={shown(name)} is out of range; use {why}")
    checks = {"host": (str, _host), "ipuof_host": (str, _host), "port": (int, _port), "ipuof_port": (int, _port),
              "cli_config": (str, _plain_path), "allocation": (str, name_check)}
    for key, (kind, check) in checks.items():
        value = item.get(key)
        if value is None and key != "host":
            continue
        bad = isinstance(value, bool) or not isinstance(value, kind)
        why = "a " + kind.__name__ if bad else check(value)
        if why:
            raise ConfigError(f"{where}: controller {name}: {key}={shown(value)} is out of range; use {why}")
    pods = item["pods"]
    if not isinstance(pods, list) or not pods or not all(isinstance(p, str) for p in pods):
        raise ConfigError(f"{where}: controller {name}: pods={shown(pods)} must list the names of the Pods (of pods:) "
                          "it manages, e.g. [poda, podb]")
    return {key: item.get(key) for key in CONTROLLER_KEYS} | {"pods": list(pods)}
