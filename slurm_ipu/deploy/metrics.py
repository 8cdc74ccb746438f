"""`slurm-ipu metrics`: the cluster's IPUs as Prometheus metrics (text exposition format
0.0.4), and the textfile the slurm-ipu service keeps current for node_exporter.

Why a textfile and not an HTTP endpoint: a site's Prometheus already scrapes node_exporter on the
slurmctld host, so no new listening port there; and what slurmctld and V-IPU are asked stays one
collection per `health.interval` whatever the scrape rate or the number of Prometheus servers.

Per collection: two V-IPU reads (`list partitions`/allocations, `list agents`) and four Slurm
reads (`squeue --json`, `scontrol show licenses`, `scontrol show reservation`, `sinfo`: the drains
are counted as Slurm shows them, whatever slurm-ipu's own record says). No per-job label
on any series (their number would grow with the job count); `slurm-ipu status` has per-job rows.
Each source that failed is `slurm_ipu_source_up{source=...} 0` and its series are left out, so
an outage never reads as an empty cluster.
"""

from __future__ import annotations

import time

from ..errors import SlurmIpuError, VipuUnavailable
from ..rules import IPUS_PER_AGENT

PARTITION_STATES = ("active", "pending", "error")
MACHINE_STATES = ("up", "down", "error")
JOB_STATES = ("running", "pending", "held")
SOURCES = ("vipu", "agents", "jobs", "licences", "reservations", "nodes")


class Family:
    __slots__ = ("help", "kind", "name", "samples")

    def __init__(self, name: str, help_text: str, kind: str = "gauge"):
        self.name, self.help, self.kind, self.samples = name, help_text, kind, []

    def add(self, value: float, suffix: str = "", **labels: str) -> Family:
        """One sample; suffix: a histogram's `_bucket`, `_sum` or `_count`."""
        self.samples.append((suffix, labels, value))
        return self

    def text(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for suffix, labels, value in self.samples:
            inside = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            name = self.name + suffix
            lines.append(f"{name}{{{inside}}} {_number(value)}" if inside else f"{name} {_number(value)}")
        return "\n".join(lines)


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render(families: list[Family]) -> str:
    return "".join(f.text() + "\n" for f in families if f.samples)


# --- what is read --------------------------------------------------------------------------

def gather(site, client=None, slurm=None, deadline: float | None = None) -> dict:
    """Every source, each one's failure kept (None and an error) rather than raised."""
    from ..hooks.controllers import Clients, clients_of
    from ..hooks.reap import job_objects
    from ..slurm.commands import SlurmCli, parse_squeue

    clients = clients_of(site, client) if client is not None else Clients(site)
    slurm = slurm or SlurmCli.of_site(site)
    deadline = deadline if deadline is not None else time.monotonic() + 20
    facts, errors = {}, {}
    per = _per_controller(site, clients, deadline, job_objects)
    facts["controllers"] = {name: error is None for name, error in per["errors"].items()}
    reads = {"vipu": lambda: per["objects"] if per["objects"] is not None else _raise(per, "objects"),
             "agents": lambda: per["agents"] if per["agents"] is not None else _raise(per, "agents"),
             "jobs": lambda: parse_squeue(slurm.output("squeue", "--json")),
             "licences": lambda: slurm.output("scontrol", "show", "licenses", "ipu", "--oneliner"),
             "reservations": lambda: slurm.licence_reservations("ipu"),
             "nodes": slurm.node_reasons}
    for source, read in reads.items():
        try:
            facts[source] = read()
        except SlurmIpuError as exc:
            facts[source], errors[source] = None, str(exc)
    facts["errors"] = errors
    facts["owners"] = per["owners"] if facts["vipu"] is not None else None
    facts["queued"] = _journal_depth(site.state_dir)
    facts["drained"] = _drained(facts["nodes"])
    facts["hooks"] = _hook_stats(site.state_dir)
    return facts


def _per_controller(site, clients, deadline: float, job_objects) -> dict:
    """Every controller's job objects and machines, read one controller at a time. A site of
    several: machines named `<controller>-<agent>` (each controller names its own), what answered
    kept, and each one's error (None: it answered); the objects of a controller that did not
    answer are missing, not zero."""
    out: dict = {"objects": [], "agents": [], "owners": [], "errors": {}}
    several = len(clients) > 1
    for name, one in clients.items():
        q = (lambda a, n=name: f"{n}-{a}") if several else (lambda a: a)
        try:
            objects, agents = job_objects(site, one, deadline), one.list_agents(deadline)
        except SlurmIpuError as exc:
            out["errors"][name] = str(exc)
            continue
        out["errors"][name] = None
        out["objects"] += objects
        out["owners"] += [q] * len(objects)
        out["agents"] += [dict(a, id=q(str(a.get("id")))) for a in agents]
    if all(out["errors"].values()):  # none answered: the source is down (its series missing)
        out["objects"] = out["agents"] = None
    return out


def _raise(per: dict, what: str):
    raise VipuUnavailable("; ".join(f"{n}: {e}" for n, e in per["errors"].items() if e))


def _hook_stats(state_dir: str) -> dict | None:
    from ..hooks.stats import load

    return load(state_dir)


def _journal_depth(state_dir: str) -> int | None:
    from ..hooks.journal import Journal

    try:
        return len(Journal(state_dir).names())
    except OSError:
        return None


def _drained(nodes: dict[str, tuple[str, str]] | None) -> int | None:
    """Nodes Slurm shows drained with the health pass's reason (None: sinfo failed)."""
    from ..hooks.health import drained_by_us

    return None if nodes is None else len(drained_by_us(nodes))


# --- what is shown -------------------------------------------------------------------------

def pods(site) -> list[tuple[str, int, list[str]]]:
    """(Pod name, its IPUs, its IPU-Machines) in the site's order; a one-Pod site's is its cluster."""
    names = [p.name for p in site.pods] or [site.cluster]
    ipus = [p.ipus for p in site.pods] or [site.pod.ipus]
    under = {pod: c.name for c in site.controllers for pod in c.pods} if len(site.controllers) > 1 else {}
    return [(n, i, [f"{under[n]}-{a}" if n in under else a for a in agents])
            for n, i, (_, agents) in zip(names, ipus, site.pod_agents(), strict=True)]


def families(site, facts: dict) -> list[Family]:
    out = [_sources(facts)]
    if len(facts.get("controllers") or {}) > 1:
        up = Family("slurm_ipu_controller_up", "1 if the V-IPU controller answered the last read (a site of several "
                    "controllers; its jobs and machines are missing from the other series if not).")
        for name, answered in facts["controllers"].items():
            up.add(1 if answered else 0, controller=name)
        out.append(up)
    out += _ipus(site, facts)
    if facts["agents"] is not None:
        out.append(_machines(facts["agents"]))
    if facts["vipu"] is not None:
        out.append(_objects(site, facts["vipu"]))
    if facts["jobs"] is not None:
        out.append(_jobs(facts["jobs"]))
    out += _slurm_pool(site, facts)
    if facts.get("hooks") is not None:
        out += _hooks(facts["hooks"])
    if facts["queued"] is not None:
        out.append(Family("slurm_ipu_removals_queued", "Partitions or allocations of ended jobs waiting in the "
                          "removal journal (V-IPU refused or was unreachable).").add(facts["queued"]))
    return out


HOOK_HELP = {
    "prolog": "Seconds the slurm-ipu service took over a job's PrologSlurmctld (its V-IPU partition or allocation "
              "made).",
    "epilog": "Seconds the slurm-ipu service took over a job's EpilogSlurmctld (the removal queued).",
    "removal": "Seconds from an ended job's removal being queued to its V-IPU partition or allocation gone.",
}


def _hooks(doc: dict) -> list[Family]:
    """The slurm-ipu service's counters (hooks/stats.py): a histogram per timed step, errors by kind."""
    from ..hooks.stats import BUCKETS

    out = []
    for name, help_text in HOOK_HELP.items():
        hist = doc["durations"][name]
        fam = Family(f"slurm_ipu_{name}_duration_seconds", help_text, "histogram")
        running = 0
        for upper, n in zip(BUCKETS, hist["buckets"], strict=True):
            running += n
            fam.add(running, "_bucket", le=repr(float(upper)))  # Prometheus writes le as a float
        fam.add(hist["count"], "_bucket", le="+Inf").add(hist["sum"], "_sum").add(hist["count"], "_count")
        out.append(fam)
    errors = Family("slurm_ipu_vipu_errors_total", "Failed V-IPU calls of the slurm-ipu service (each attempt of a "
                    "retried one), by kind.", "counter")
    for kind in sorted(set(ERROR_KINDS) | set(doc["vipu_errors"])):
        errors.add(doc["vipu_errors"].get(kind, 0), kind=kind)
    passes = Family("slurm_ipu_service_pass_timestamp_seconds", "When the slurm-ipu service last ended each periodic "
                    "pass (reap: orphans; health: IPU-Machines), epoch seconds: a service up but not passing "
                    "shows here as an old time.")
    for name, at in sorted(doc.get("passes", {}).items()):
        passes.add(at, **{"pass": name})
    return [*out, errors, passes]


# Every kind a failed call can have (errors.py), shown at 0 until seen: a rate needs the series first.
ERROR_KINDS = ("unavailable", "timeout", "exhausted", "not_found", "exists", "invalid", "denied", "not_ready",
               "command", "other")


def _sources(facts: dict) -> Family:
    fam = Family("slurm_ipu_source_up", "1 if the last read of this source worked (its series are missing if not).")
    for source in SOURCES:
        fam.add(0 if source in facts["errors"] else 1, source=source)
    return fam


def _lost(agents: list[dict] | None) -> dict[str, int]:
    from ..hooks.health import lost_ipus

    return lost_ipus(agents) if agents is not None else {}


def _ipus(site, facts: dict) -> list[Family]:
    capacity = Family("slurm_ipu_pod_ipus", "IPUs of each Pod.")
    state = Family("slurm_ipu_ipus", "IPUs of each Pod by state: allocated (in a job's partition or allocation), "
                   "unavailable (on a failed IPU-Machine, not allocated), idle.")
    lost = _lost(facts["agents"])
    held = _held_ipus(site, facts["vipu"], facts.get("owners"))
    # several controllers: each Pod's series carry its controller, and a controller that did not
    # answer leaves its Pods' states missing (never shown idle)
    under = {pod: c.name for c in site.controllers for pod in c.pods} if len(site.controllers) > 1 else {}
    answered = facts.get("controllers") or {}
    for name, ipus, agents in pods(site):
        labels = {"pod": name, **({"controller": under[name]} if name in under else {})}
        capacity.add(ipus, **labels)
        if facts["vipu"] is None or facts["agents"] is None or answered.get(under.get(name, ""), True) is False:
            continue
        allocated = held.get(name, 0)
        unavailable = min(sum(lost.get(a, 0) for a in agents), ipus - allocated)
        state.add(allocated, **labels, state="allocated").add(max(unavailable, 0), **labels, state="unavailable")
        state.add(max(ipus - allocated - max(unavailable, 0), 0), **labels, state="idle")
    return [capacity, state]


def _held_ipus(site, objects, owners=None) -> dict[str, int]:
    """IPUs in jobs' partitions or allocations, per Pod (by each IPU's machine)."""
    if objects is None:
        return {}
    every = pods(site)
    owner = {a: name for name, _, agents in every for a in agents}
    single = every[0][0] if len(every) == 1 else None
    out: dict[str, int] = {}
    quals = owners or [lambda a: a] * len(objects)
    for part, q in zip(objects, quals, strict=True):
        if single is not None or not part.ipus:
            key = single or "unknown"
            out[key] = out.get(key, 0) + part.size
            continue
        for ipu in part.ipus:
            pod = owner.get(q(f"ag{ipu // IPUS_PER_AGENT}"), "unknown")
            out[pod] = out.get(pod, 0) + 1
    return out


def _machines(agents: list[dict]) -> Family:
    fam = Family("slurm_ipu_machines", "IPU-Machines (V-IPU agents) by state.")
    counts = dict.fromkeys(MACHINE_STATES, 0)
    for agent in agents:
        status = str(agent.get("status", "")).lower()
        counts[status if status in counts else "error"] += 1
    for status, n in counts.items():
        fam.add(n, state=status)
    return fam


def _objects(site, objects) -> Family:
    fam = Family("slurm_ipu_job_objects", "Jobs' V-IPU partitions (partition model) and allocations (allocation "
                 "model) by state.")
    counts = {(kind, s): 0 for kind in ("partition", "allocation") for s in PARTITION_STATES}
    for part in objects:
        kind = site.kind_of(part.name)
        key = (kind, str(part.state).lower())
        counts[key if key in counts else (kind, "error")] += 1
    for (kind, s), n in counts.items():
        if kind in _kinds(site):
            fam.add(n, kind=kind, state=s)
    return fam


def _kinds(site) -> set[str]:
    return {"allocation" if m == "allocation" else "partition" for m in site.models}


def _jobs(jobs: dict) -> Family:
    fam = Family("slurm_ipu_jobs", "Slurm jobs with IPUs (a GRES or licence ipu) by state; held: pending on a hold.")
    counts = dict.fromkeys(JOB_STATES, 0)
    for job in jobs.values():
        if "ipu" not in (job.tres or ""):
            continue
        if job.state == "RUNNING":
            counts["running"] += 1
        elif job.state == "PENDING":
            counts["held" if (job.reason or "").startswith("JobHeld") else "pending"] += 1
    for state, n in counts.items():
        fam.add(n, state=state)
    return fam


def _slurm_pool(site, facts: dict) -> list[Family]:
    out = []
    if facts["licences"] is not None:
        from .status import parse_licenses

        lic = parse_licenses(facts["licences"])
        fam = Family("slurm_ipu_licence_ipus", "Slurm's ipu licence: total, used (what Slurm schedules from).")
        for key in ("total", "used"):
            if key in lic:
                fam.add(lic[key], state=key)
        out.append(fam)
    if facts["reservations"] is not None:
        from ..hooks.health import RESERVATION_PREFIX, pooled_agents

        pooled = pooled_agents(site)
        ours = sum(n for name, n in facts["reservations"].items()
                   if name.startswith(RESERVATION_PREFIX) and name[len(RESERVATION_PREFIX):] in pooled)
        out.append(Family("slurm_ipu_health_reserved_ipus", "IPU licences held out of Slurm's pool for failed "
                          "IPU-Machines (partition model).").add(ours))
    if facts["drained"] is not None:
        out.append(Family("slurm_ipu_health_drained_nodes", "Nodes Slurm shows drained with the health pass's reason "
                          "for a failed IPU-Machine (allocation model).").add(facts["drained"]))
    return out


def collect(site, client=None, slurm=None) -> str:
    return render(families(site, gather(site, client, slurm)))


def write_textfile(path: str, text: str) -> None:
    """Whole or not at all: node_exporter never reads half a file (its textfile collector's rule)."""
    from ..fsutil import atomic_write

    atomic_write(path, text)


def main(site_path: str, out=print) -> int:
    from ..config import load

    site = load(site_path)
    facts = gather(site)
    out(render(families(site, facts)).rstrip("\n"))
    return 0 if not facts["errors"] else 1
