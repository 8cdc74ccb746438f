"""A health pass: a failed IPU-Machine keeps jobs off it by itself.

On a Pod of the allocation model a host's jobs get exactly the IPU-Machines mapped to it
(Site.agents_of), so a failed machine makes its host useless for IPU jobs: the pass drains that
host in Slurm with the reason `slurm-ipu: IPU-Machine ag3 down`, and resumes it once every machine
of the host is Up again. A job then waits in Slurm's queue for other hosts instead of failing in
its prolog (which could not get the machine) and being requeued onto the same host.

One pass costs one V-IPU call for the whole cluster (`vipu-admin list agents`) and one read-only
Slurm query per model (`sinfo`; `scontrol show reservation`), plus one `scontrol` per node,
reservation or job it changes; while machines are failed, the listings of partitions and
allocations and one `squeue` more (the jobs on them; the jobs waiting for their IPUs). Run by the
slurm-ipu service every `health.interval` seconds, or by hand (`slurm-ipu health`).

Whose drains: the pass resumes only a node that carries its own reason (`slurm-ipu: IPU-Machine
...`); a node drained by an admin or another tool (any other reason) is never drained over or
resumed. What it drains is written to STATE_DIR/health.json before Slurm is asked, and a drain
with its reason the record does not know is taken as its own: a pass killed at any point (the
service or slurmctld, between two drains) leaves nothing the next pass does not finish or lift.
V-IPU unreachable changes nothing: that is not a machine failure (the pass raises, the service
logs it and tries next time).

The partition model places a partition's IPUs anywhere in the Pod, so no host maps to a machine
there: instead the pool Slurm schedules from shrinks by the failed IPUs, as a licence-only
reservation per failed machine, `slurm-ipu-ag3` (`Licenses=ipu:4 Flags=ANY_NODES`, the whole
machine even when one IPU is in error: see run(); measured on 22.05: jobs not in it wait with
Reason=Licenses, and it can be made while every licence is in use). `scontrol show reservation`
names the machine, and so does each waiting job's AdminComment (_waiting); both go when the
machine is Up again. Those lines are out there while STATE_DIR/health-waiting exists (made before
the first is written, removed once the last is cleared), so a pass killed between releasing a
reservation and clearing the lines, or a restarted service, still clears them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from ..errors import SlurmIpuError, VipuError, VipuUnavailable
from ..rules import IPUS_PER_AGENT
from ..slurm.commands import parse_squeue
from . import notes, restarts
from .controllers import clients_of

REASON_PREFIX = "slurm-ipu: IPU-Machine"
WAITING = "slurm-ipu: waiting for IPUs: "  # a pending job's AdminComment while machines are held out
RESERVATION_PREFIX = "slurm-ipu-"  # + the failed machine's agent name
DRAINED_STATES = ("drain", "drained", "draining", "drng")  # sinfo %T's words for a drained node


def record_path(state_dir: str) -> Path:
    return Path(state_dir) / "health.json"


def mapped_hosts(cfg, scope: frozenset[str] | None = None) -> dict[str, list[str]]:
    """Each allocation-model host and the IPU-Machines mapped to it (of one controller's hosts,
    `scope`, on a site of several: each names its own machines)."""
    if "allocation" not in cfg.models:
        return {}
    hosts = [h for p in cfg.pods_of_model("allocation") for h in p.hosts] if cfg.pods else cfg.hosts
    mapping = cfg.host_agents()  # once: agents_of per host would build it per host
    return {h: mapping[h] for h in hosts if scope is None or h in scope}


def pooled_agents(cfg, scope: frozenset[str] | None = None) -> set[str]:
    """The IPU-Machines of the partition model's Pods (of one controller's hosts, `scope`): their
    IPUs are the ipu licence's pool."""
    if "partition" not in cfg.models:
        return set()
    if not cfg.pods:
        return {a for _, agents in cfg.pod_agents() for a in agents}
    pooled = {p.name for p in cfg.pods_of_model("partition") if scope is None or set(p.hosts) <= scope}
    return {a for pod, (_, agents) in zip(cfg.pods, cfg.pod_agents(), strict=True) if pod.name in pooled
            for a in agents}


def machines_for(cfg, nodes, model: str) -> set[str]:
    """The IPU-Machines a job on `nodes` can get: those mapped to its hosts (allocation model),
    or every machine of its hosts' Pods (partition model: V-IPU places its IPUs anywhere there)."""
    if model == "allocation":
        return set(cfg.agents_of(nodes))
    mine = set(nodes)
    return {a for hosts, agents in cfg.pod_agents() if mine & set(hosts) for a in agents}


def broken(agents: list[dict]) -> dict[str, frozenset[int] | None]:
    """Agent -> the indexes of its IPUs in error, or None when the whole machine is lost (not Up
    and no IPU named), for every agent not Up."""
    out: dict[str, frozenset[int] | None] = {}
    for agent in agents:
        if str(agent.get("status", "")).lower() == "up":
            continue
        bad = frozenset(int(i) for i in agent.get("ipus_in_error") or [] if str(i).isdigit())
        out[str(agent.get("id"))] = bad or None
    return out


def lost_ipus(agents: list[dict]) -> dict[str, int]:
    """Agent -> how many of its IPUs are unusable: all when it is not Up, else those in error."""
    return {a: len(bad) if bad else IPUS_PER_AGENT for a, bad in broken(agents).items()}


def plan_reservations(want: dict[str, int], held: dict[str, int]) -> tuple[dict[str, int], list[str]]:
    """(reservations to create or resize: name -> IPUs, reservations to delete), from the failed
    machines' IPUs (want: agent -> IPUs) and our reservations in Slurm (held: name -> IPUs)."""
    wanted = {f"{RESERVATION_PREFIX}{a}": n for a, n in want.items()}
    change = {name: n for name, n in wanted.items() if held.get(name) != n}
    return change, sorted(name for name in held if name not in wanted)


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


def plan(hosts: dict[str, list[str]], failed: dict[str, str],
         nodes: dict[str, tuple[str, str]]) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """(nodes to drain with their reason, nodes to resume, the record after). Pure: the rules of
    whose drain is whose, apart from Slurm and V-IPU. A drained node is ours while it carries
    our reason, whatever the record says (a pass killed between its drain and its record before,
    or the record lost): Slurm's word, not ours, decides."""
    drain, resume, after = {}, [], {}
    for host, agents in sorted(hosts.items()):
        bad = {a: failed[a] for a in agents if a in failed}
        state, current = nodes.get(host, ("", ""))
        ours = _drained(state) and is_ours(current)
        if bad:
            reason = reason_for(bad)
            if ours:
                after[host] = reason
                if reason != current:
                    drain[host] = reason  # other machines of it failed since: the reason follows
            elif not _drained(state):
                drain[host] = after[host] = reason  # nobody's drain (or ours, meant but not done): ours
            continue  # an admin's drain (any other reason): theirs, never drained over
        if ours:
            resume.append(host)
    return drain, resume, after


def drained_by_us(nodes: dict[str, tuple[str, str]]) -> list[str]:
    """The nodes (sinfo: node -> (state, reason)) drained with the pass's reason."""
    return sorted(n for n, (state, reason) in nodes.items() if _drained(state) and is_ours(reason))


def is_ours(reason: str) -> bool:
    """A node reason the pass wrote (reason_for): no admin's reason starts so."""
    return reason.startswith(f"{REASON_PREFIX} ")


def _drained(state: str) -> bool:
    return any(word in state.lower() for word in (*DRAINED_STATES, "down", "fail", "maint"))


def run(cfg, client, slurm, out=print, deadline: float | None = None, dry_run: bool = False) -> int:
    """One pass; returns the number of changes (nodes, reservations, jobs requeued or told).
    VipuError and SlurmError propagate: the caller logs them, and what was not done yet waits
    for the next pass. On a site of several controllers, a pass over each: one that does not
    answer is named and skipped (nothing of its machines changes), the others go on."""
    clients = clients_of(cfg, client)
    if len(cfg.controllers) == 1:
        return _run(cfg, clients.items()[0][1], slurm, out, deadline, dry_run, None)
    changed, failed = 0, []
    for controller in cfg.controllers:
        try:
            changed += _run(cfg, clients.by_name[controller.name], slurm, out, deadline, dry_run, controller)
        except VipuError as exc:
            out(f"health: V-IPU controller {controller.name} skipped ({exc}); its machines are left as they are")
            failed.append(controller.name)
    if failed and len(failed) == len(cfg.controllers):
        raise VipuUnavailable(f"no V-IPU controller answered ({', '.join(failed)})")
    return changed


def _run(cfg, client, slurm, out, deadline: float | None, dry_run: bool, controller=None) -> int:
    """One controller's pass: on a site of several, its hosts alone, and its machines' names
    qualified by its name (each controller names its own: two may both have an `ag0`), in the
    drain reasons and the reservations too."""
    scope = controller.hosts if controller is not None else None
    q = qualifier(controller.name if controller is not None else None)
    hosts = {h: [q(a) for a in agents] for h, agents in mapped_hosts(cfg, scope).items()}
    pooled = {q(a) for a in pooled_agents(cfg, scope)}
    if not hosts and not pooled:
        return 0
    agents = [dict(a, id=q(str(a.get("id")))) for a in client.list_agents(deadline)]
    failed = failures(agents)
    queue = functools.cache(lambda: parse_squeue(slurm.output("squeue", "--json")))  # one squeue a pass, if any
    # A whole machine's IPUs even when one is in error: V-IPU makes a partition of 4 IPUs or more
    # from whole machines, so the other three serve only 1- and 2-IPU partitions; counting them
    # would let Slurm start jobs V-IPU cannot place (each then requeued again and again).
    changed = _pool(cfg, slurm, pooled, {a: IPUS_PER_AGENT for a in failed if a in pooled}, queue, out,
                    dry_run) if pooled else 0
    changed += _hosts(cfg, slurm, hosts, failed, out, dry_run, scope) if hosts else 0
    return changed + (_running(cfg, client, slurm, broken(agents), queue, out, deadline, dry_run, q) if failed else 0)


def qualifier(controller: str | None):
    """A machine's name as the pass uses it: V-IPU's, or `<controller>-<V-IPU's>` on a site of
    several controllers."""
    if controller is None:
        return lambda agent: agent
    return lambda agent: f"{controller}-{agent}"


def _running(cfg, client, slurm, failed: dict[str, frozenset[int] | None], queue, out, deadline,
             dry_run: bool, q=lambda agent: agent) -> int:
    """Jobs running on a failed machine: a batch job is requeued (its epilog
    removes its partition; the drain or the reservation above keeps it off the machine), an
    srun or salloc job is told why and cancelled. Only jobs Slurm says are RUNNING: a job this
    pass requeued earlier is PENDING while its epilog's removal may still be under way."""
    hit = jobs_on(cfg, client, failed, deadline, q)
    if not hit:
        return 0
    live = queue()
    acted = 0
    for job, (machines, kind) in sorted(hit.items()):
        if job not in live or live[job].state != "RUNNING":
            continue
        why = f"slurm-ipu: job {job}: IPU-Machine {', '.join(machines)} failed under its V-IPU {kind}"
        out(f"health: {why[len('slurm-ipu: '):]}; requeued" + (" (dry run)" if dry_run else ""))
        acted += 1
        if dry_run:
            continue
        try:
            restarts.add(cfg.state_dir, job)  # the hardware's: the job's next prolog does not count it
            slurm.requeue(job, f"{why}; requeued, it will not start on that machine again")
        except SlurmIpuError:  # srun/salloc: Slurm requeues batch jobs only
            slurm.notify(job, f"{why}: the job is cancelled; submit it again")
            slurm.cancel(job, f"{why}; cancelled (not a batch job, so not requeued)")
    return acted


def jobs_on(cfg, client, failed: dict[str, frozenset[int] | None], deadline,
            q=lambda agent: agent) -> dict[int, tuple[list[str], str]]:
    """Job -> (the failed machines under its V-IPU object, "allocation" or "partition"): its
    allocation's agents (the job may use any IPU of them), or the machines of its partition's IPUs
    that failed, or whose IPU in error is one of them (V-IPU places new partitions on the
    machine's other IPUs, so a partition on those is left running)."""
    from .reap import job_of

    out: dict[int, tuple[list[str], str]] = {}
    if "allocation" in cfg.models:
        for name, agents in client.list_allocations(deadline).items():
            job, bad = job_of(name, cfg.allocation.prefix), sorted({q(a) for a in agents} & set(failed))
            if job is not None and bad:
                out[job] = (bad, "allocation")
    if "partition" in cfg.models:
        for part in client.list_partitions(deadline):
            bad = sorted({q(a) for a, k in slots_of(part)
                          if q(a) in failed and (failed[q(a)] is None or k is None or k in failed[q(a)])})
            job = job_of(part.name, cfg.partition.prefix)
            if job is not None and bad:
                out.setdefault(job, (bad, "partition"))
    return out


def slots_of(part) -> set[tuple[str, int | None]]:
    """(machine, the IPU's index in it) of each of a partition's IPUs, where V-IPU names them
    beside each IPU (the index None where it does not say)."""
    ipus = ((part.extra or {}).get("spec") or {}).get("ipus") or []
    return {(str(i["agent"]), i.get("ipu_index_in_agent") if isinstance(i.get("ipu_index_in_agent"), int) else None)
            for i in ipus if isinstance(i, dict) and i.get("agent")}


def _pool(cfg, slurm, pooled: set[str], want: dict[str, int], queue, out, dry_run: bool) -> int:
    # ours: named after one of the Pods' machines (an admin's `slurm-ipu-maint` is not)
    held = {name: n for name, n in slurm.licence_reservations("ipu").items()
            if name.startswith(RESERVATION_PREFIX) and name[len(RESERVATION_PREFIX):] in pooled}
    change, delete = plan_reservations(want, held)
    marker = waiting_marker(cfg.state_dir)
    if want and not dry_run:
        marker.touch()  # before the first line is written: whoever comes next clears them
    changed = _reserve(cfg, slurm, change, delete, held, dry_run, out)
    # machines failed now, or just back, or lines left by a pass that ended before clearing them
    if want or held or marker.exists():
        failed: list[int] = []
        changed += _waiting(slurm, queue(), waiting_text(want), out, dry_run, failed)
        if not want and not failed and not dry_run:
            marker.unlink(missing_ok=True)
    return changed


def waiting_marker(state_dir: str) -> Path:
    """Exists while jobs may carry a waiting line (WAITING) of the pass's."""
    return Path(state_dir) / "health-waiting"


def waiting_text(want: dict[str, int]) -> str:
    """What a job waiting for the ipu licence is told while machines hold IPUs out of the pool
    ('' when none do): Slurm's own Reason says only `Licenses`."""
    if not want:
        return ""
    names = sorted(want, key=lambda a: (len(a), a))  # ag2 before ag10
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    machines = f"IPU-Machine{'s' if len(names) > 1 else ''} {shown}"
    where = f"scontrol show reservation {RESERVATION_PREFIX}{names[0]}" if len(names) == 1 else \
        "scontrol show reservation"
    # within what AdminComment keeps (SlurmCli.admin_comment), so the next pass finds it unchanged
    return f"{WAITING}{machines} not Up: {sum(want.values())} IPUs held out of Slurm's pool until back ({where})"


def _waiting(slurm, jobs: dict, text: str, out, dry_run: bool, failed: list[int]) -> int:
    """Pending IPU jobs waiting for licences get `text` as their AdminComment (one `squeue`; one
    `scontrol update` per job whose line changes); a line of ours on any other job, or once the
    machines are back, is cleared. Only an empty AdminComment, a waiting line or a partition note
    is ever written over: the prolog's reasons and an admin's are left as they are."""
    changed = 0
    for job in jobs.values():
        mine = job.admin_comment is not None and job.admin_comment.startswith(WAITING)
        waits = job.state == "PENDING" and job.reason == "Licenses" and "ipu" in (job.tres or "")
        # a requeued job's note of its last partition is stale while it waits
        if text and waits and (job.admin_comment == "" or mine or notes.is_note(job.admin_comment)):
            new = text
        elif mine and job.state in ("PENDING", "RUNNING", "SUSPENDED"):
            new = ""
        else:
            continue
        if new == job.admin_comment:
            continue
        out(f"health: job {job.job_id}: " + (new[len("slurm-ipu: "):] if new else "waiting line cleared")
            + (" (dry run)" if dry_run else ""))
        changed += 1
        if not dry_run:
            try:
                slurm.admin_comment(job.job_id, new)
            except SlurmIpuError:  # it started or ended meanwhile: the next pass sees it
                failed.append(job.job_id)
    return changed


def _reserve(cfg, slurm, change: dict[str, int], delete: list[str], held: dict[str, int], dry_run: bool,
             out) -> int:
    note = " (dry run)" if dry_run else ""
    for name, ipus in change.items():
        out(f"health: reserve {ipus} IPU licence(s) as {name}: IPU-Machine {name[len(RESERVATION_PREFIX):]} "
            f"is not Up{note}")
        if not dry_run:
            slurm.reserve_licences(name, "ipu", ipus, cfg.slurm.user, update=name in held)
    for name in delete:
        out(f"health: release {name}: IPU-Machine {name[len(RESERVATION_PREFIX):]} is Up again{note}")
        if not dry_run:
            slurm.delete_reservation(name)
    return len(change) + len(delete)


def _hosts(cfg, slurm, hosts: dict[str, list[str]], failed: dict[str, str], out, dry_run: bool,
           scope: frozenset[str] | None = None) -> int:
    nodes = slurm.node_reasons()
    drained = drained_nodes(cfg.state_dir)
    drain, resume, after = plan(hosts, failed, nodes)
    if scope is not None:  # one controller's pass: the others' drains stay in the record
        after = {h: r for h, r in drained.items() if h not in scope} | after
    if not dry_run and after != drained:
        _save(cfg.state_dir, after)  # before Slurm is asked: a pass killed below is finished by the next
    for host, reason in drain.items():
        out(f"health: drain {host}: {reason}" + (" (dry run)" if dry_run else ""))
        if not dry_run:
            slurm.drain(host, reason)
    for host in resume:
        out(f"health: resume {host}: its IPU-Machines are all Up again" + (" (dry run)" if dry_run else ""))
        if not dry_run:
            slurm.resume(host)
    return len(drain) + len(resume)


def drained_nodes(state_dir: str) -> dict[str, str]:
    """The nodes the pass drained, with the reason it wrote (STATE_DIR/health.json)."""
    try:
        doc = json.loads(record_path(state_dir).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _save(state_dir: str, drained: dict[str, str]) -> None:
    from ..fsutil import atomic_write

    atomic_write(record_path(state_dir), json.dumps(drained, indent=1, sort_keys=True) + "\n", durable=True)
