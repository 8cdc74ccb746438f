"""A health pass (issue 40, item 2): a failed IPU-Machine keeps jobs off it by itself.

On a Pod of the allocation model a host's jobs get exactly the IPU-Machines mapped to it
(Site.agents_of), so a failed machine makes its host useless for IPU jobs: the pass drains that
host in Slurm with the reason `slurm-ipu: IPU-Machine ag3 down`, and resumes it once every machine
of the host is Up again. A job then waits in Slurm's queue for other hosts instead of failing in
its prolog (which could not get the machine) and being requeued onto the same host.

One pass costs one V-IPU call for the whole cluster (`vipu-admin list agents`) and one read-only
Slurm query (`sinfo`), plus one `scontrol update` per node it changes. Run by the hook service
every `health.interval` seconds, or by hand (`slurm-ipu health`).

Whose drains: the pass resumes only a node it drained itself, recorded in STATE_DIR/health.json,
and only while the node still carries the reason it wrote; a node drained by an admin or another
tool (any other reason) is never drained over or resumed. V-IPU unreachable changes nothing: that
is not a machine failure (the pass raises, the service logs it and tries next time).

The partition model places a partition's IPUs anywhere in the Pod, so no host maps to a machine
there: this pass leaves those Pods alone (docs/admin.md, Failed IPU-Machines).
"""

from __future__ import annotations

import json
from pathlib import Path

REASON_PREFIX = "slurm-ipu: IPU-Machine"
DRAINED_STATES = ("drain", "drained", "draining", "drng")  # sinfo %T's words for a drained node


def record_path(state_dir: str) -> Path:
    return Path(state_dir) / "health.json"


def mapped_hosts(cfg) -> dict[str, list[str]]:
    """Each allocation-model host and the IPU-Machines mapped to it."""
    if "allocation" not in cfg.models:
        return {}
    hosts = [h for p in cfg.pods_of_model("allocation") for h in p.hosts] if cfg.pods else cfg.hosts
    return {h: cfg.agents_of([h]) for h in hosts}


def failures(agents: list[dict]) -> dict[str, str]:
    """Agent -> why it is failed (`down`, or `IPU 2 in error`), for every agent not Up."""
    out = {}
    for agent in agents:
        status = str(agent.get("status", "")).lower()
        if status == "up":
            continue
        bad = agent.get("ipus_in_error") or []
        out[str(agent.get("id"))] = f"IPU {','.join(map(str, bad))} in error" if bad else (status or "unknown")
    return out


def reason_for(bad: dict[str, str]) -> str:
    """`slurm-ipu: IPU-Machine ag3 down` (several: `ag3 down, ag4 IPU 2 in error`)."""
    return f"{REASON_PREFIX} {', '.join(f'{a} {why}' for a, why in sorted(bad.items()))}"


def plan(hosts: dict[str, list[str]], failed: dict[str, str], nodes: dict[str, tuple[str, str]],
         drained: dict[str, str]) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """(nodes to drain with their reason, nodes to resume, the record after). Pure: the rules of
    whose drain is whose, apart from Slurm and V-IPU."""
    drain, resume, after = {}, [], {}
    for host, agents in sorted(hosts.items()):
        bad = {a: failed[a] for a in agents if a in failed}
        state, current = nodes.get(host, ("", ""))
        ours = host in drained and current == drained[host]
        if host in drained and not ours:
            continue  # someone changed its reason (or resumed it): theirs now, forgotten
        if bad:
            reason = reason_for(bad)
            if ours:
                after[host] = reason
                if reason != current:
                    drain[host] = reason  # other machines of it failed since: the reason follows
            elif not _drained(state):
                drain[host] = after[host] = reason  # nobody's drain: ours
            continue
        if ours:
            resume.append(host)
    return drain, resume, after


def _drained(state: str) -> bool:
    return any(word in state.lower() for word in (*DRAINED_STATES, "down", "fail", "maint"))


def run(cfg, client, slurm, out=print, deadline: float | None = None, dry_run: bool = False) -> int:
    """One pass; returns the number of nodes changed. VipuError and SlurmError propagate: the
    caller logs them and nothing changes."""
    hosts = mapped_hosts(cfg)
    if not hosts:
        return 0
    failed = failures(client.list_agents(deadline))
    nodes = slurm.node_reasons()
    drained = _load(cfg["state_dir"])
    drain, resume, after = plan(hosts, failed, nodes, drained)
    for host, reason in drain.items():
        out(f"health: drain {host}: {reason}" + (" (dry run)" if dry_run else ""))
        if not dry_run:
            slurm.drain(host, reason)
    for host in resume:
        out(f"health: resume {host}: its IPU-Machines are all Up again" + (" (dry run)" if dry_run else ""))
        if not dry_run:
            slurm.resume(host)
    if not dry_run and after != drained:
        _save(cfg["state_dir"], after)
    return len(drain) + len(resume)


def _load(state_dir: str) -> dict[str, str]:
    try:
        doc = json.loads(record_path(state_dir).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _save(state_dir: str, drained: dict[str, str]) -> None:
    from ..fsutil import atomic_write

    atomic_write(record_path(state_dir), json.dumps(drained, indent=1, sort_keys=True) + "\n", durable=True)
