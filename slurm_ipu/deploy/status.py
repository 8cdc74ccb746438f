"""`slurm-ipu status [--json]`: the IPU view of the cluster.

The Pod's capacity, what V-IPU has in partitions and what Slurm's ipu licence says is in use
(and whether they disagree), each partition with its job, user, nodes, size, GCDs and age,
orphans (a partition under our prefix whose job is gone) and removals waiting in the journal.
Three reads: `vipu list partitions`, `squeue --json`, `scontrol show licenses`; with accounting in
the site description a fourth, `sacct`, for the IPU-hours each user's jobs held in the last days.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

from ..config import Site
from ..errors import SlurmIpuError
from ..pods import ilds_given
from ..rules import IPUS_PER_ILD
from .fragments import pod_context


@dataclass
class Row:
    partition: str
    job: int | None
    user: str | None
    nodes: str | None
    size: int
    gcds: int
    state: str
    age_s: float | None
    ours: bool
    orphan: bool
    pods: list[str] | None = None  # multi-Pod sites: the Pods whose ILDs hold its IPUs


def parse_jobs(text: str) -> dict[int, dict]:
    from ..slurm.commands import parse_squeue

    return {job_id: {"state": job.state, "user": job.user, "nodes": job.nodes, "start": job.start}
            for job_id, job in parse_squeue(text).items()}


def parse_licenses(text: str) -> dict[str, int]:
    """`scontrol show licenses ipu --oneliner` -> {"total": .., "used": ..}."""
    words = dict(w.split("=", 1) for w in text.split() if "=" in w)
    return {k.lower(): int(words[k]) for k in ("Total", "Used") if words.get(k, "").isdigit()}


def parse_usage(text: str, since: float, now: float) -> dict[str, float]:
    """IPU-hours per user from `sacct -a -X -n -P -o User,AllocTRES,Start,End` with
    SLURM_TIME_FORMAT=%s: each job's gres/ipu count times its time inside [since, now] (a running
    job's End is Unknown: it counts to now)."""
    hours: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 4:
            continue
        user, tres, start, end = fields[:4]
        ipus = next((int(v) for k, _, v in (t.partition("=") for t in tres.split(",")) if k == "gres/ipu"
                     and v.isdigit()), 0)
        if not ipus or not start.isdigit():
            continue
        span = min(int(end) if end.isdigit() else now, now) - max(int(start), since)
        if span > 0:
            hours[user] = hours.get(user, 0.0) + ipus * span / 3600
    return {user: round(h, 4) for user, h in sorted(hours.items())}


def gather(site: Site, runner=None, days: float = 7.0, now: float | None = None) -> dict:
    from ..hooks.journal import Journal
    from ..hooks.ledger import Ledger
    from ..slurm.commands import SlurmCli

    cli = SlurmCli.of_site(site, runner=runner)
    errors = {}

    def slurm(tool: str, *args: str, extra: dict | None = None) -> str | None:
        return cli.output_or_none(errors, tool, tool, *args, extra=extra)

    from ..hooks.reap import job_objects

    partitions, down = [], []
    for controller in site.controllers:  # each in turn: one down leaves the others' shown
        try:
            partitions += job_objects(site, site.vipu_client(controller), time.monotonic() + 20)
        except SlurmIpuError as exc:
            down.append(str(exc))
    if down:
        errors["vipu"] = "; ".join(down)  # on a site of several, each names its controller
        if len(down) == len(site.controllers):
            partitions = None
    text = slurm("squeue", "--json")
    try:
        jobs = parse_jobs(text) if text else {}
    except SlurmIpuError as exc:
        jobs, errors["squeue"] = {}, str(exc)
    lic = parse_licenses(slurm("scontrol", "show", "licenses", "ipu", "--oneliner") or "")
    usage = None
    if site.accounting.slurmdbd_host:
        now = time.time() if now is None else now
        since = now - days * 86400
        text = slurm("sacct", "-a", "-X", "-n", "-P", "-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)),
                     "-E", "now", "-o", "User,AllocTRES,Start,End", extra={"SLURM_TIME_FORMAT": "%s"})
        usage = None if text is None else {"days": days, "ipu_hours": parse_usage(text, since, now)}
    created, queued, restricted = {}, [], []
    if os.access(site.state_dir, os.R_OK | os.X_OK):
        ledger = Ledger(site.state_dir)
        created = {p.name: (ledger.get(p.name) or {}).get("time") for p in partitions or []}
        queued = Journal(site.state_dir).entries()
    else:  # root's and slurm.user's: a user sees the rest
        restricted.append(f"partition ages and queued removals: {site.state_dir} is not readable by uid "
                          f"{os.getuid()} (run status as root)")
    return {"partitions": partitions, "jobs": jobs, "licenses": lic, "created": created, "queued": queued,
            "usage": usage, "errors": errors, "restricted": restricted}


def build(site: Site, facts: dict, now: float | None = None) -> dict:
    from ..hooks.reap import LIVE_STATES, job_of

    now = time.time() if now is None else now
    prefix = site.job_prefixes
    pods = pod_context(site)
    rows = []
    for p in facts["partitions"] or []:
        job = job_of(p.name, prefix)
        info = facts["jobs"].get(job, {}) if job is not None else {}
        since = facts["created"].get(p.name) or info.get("start")
        rows.append(Row(p.name, job, info.get("user"), info.get("nodes"), p.size, p.num_gcds, p.state,
                        round(now - since, 1) if since else None, job is not None,
                        job is not None and info.get("state", "GONE") not in LIVE_STATES,
                        [pod for pod, n in _per_pod(p, pods).items() if n] if pods else None))
    pod = site.pod.ipus
    vipu_used = sum(r.size for r in rows) if facts["partitions"] is not None else None
    ours_used = sum(r.size for r in rows if r.ours and not r.orphan)
    slurm_used = facts["licenses"].get("used")
    disagreement = None
    if vipu_used is not None and slurm_used is not None and ours_used != slurm_used:
        disagreement = (f"Slurm's ipu licence has {slurm_used} in use, V-IPU has {ours_used} in partitions of "
                        "live jobs (a prolog or epilog at work shows briefly; a lasting gap is worth a doctor run)")
    return {
        "cluster": site.cluster, "pod_ipus": pod, "model": "/".join(sorted(site.models)),
        "vipu": None if vipu_used is None else {"used": vipu_used, "free": pod - vipu_used},
        "slurm": facts["licenses"] or None, "disagreement": disagreement,
        "pods": [{"name": pod["name"], "hosts": pod["hostlist"], "ilds": pod["ild_ids"],
                  "ipus": pod["ilds"] * IPUS_PER_ILD,
                  "used": None if facts["partitions"] is None else
                  sum(_per_pod(p, pods)[pod["name"]] for p in facts["partitions"])} for pod in pods],
        "partitions": [asdict(r) for r in rows],
        "orphans": [r.partition for r in rows if r.orphan],
        "queued_removals": [q.get("partition") for q in facts["queued"]],
        "usage": facts.get("usage"),
        "errors": facts["errors"],
        "restricted": facts.get("restricted", []),
    }


def _ilds_of(part) -> list[int]:
    """Each IPU's ILD: as V-IPU gives it, else from its number (64 per ILD)."""
    return ilds_given(part) or [i // IPUS_PER_ILD for i in part.ipus]


def _per_pod(part, pods: list[dict]) -> dict[str, int]:
    """IPUs of the partition in each Pod."""
    ilds = _ilds_of(part)
    return {pod["name"]: sum(1 for i in ilds if i in pod["ild_ids"]) for pod in pods}


def _age(seconds) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def table(view: dict) -> list[str]:
    pod = view["pod_ipus"]
    vipu = view["vipu"]
    lic = view["slurm"] or {}
    what = {"allocation": "allocation", "allocation/partition": "V-IPU object"}.get(
        view.get("model"), "partition")  # a job's V-IPU object
    lines = [f"Pod {view['cluster']}: {pod} IPUs",
             f"  V-IPU: {vipu['used']} in {what}s, {vipu['free']} free" if vipu else
             f"  V-IPU: unreachable ({view['errors'].get('vipu')})",
             f"  Slurm: ipu licence {lic.get('used', '?')} used of {lic.get('total', '?')}"]
    if view["disagreement"]:
        lines.append(f"  DISAGREE: {view['disagreement']}")
    for pod in view["pods"]:
        used = "?" if pod["used"] is None else pod["used"]
        free = "?" if pod["used"] is None else pod["ipus"] - pod["used"]
        lines.append(f"  Pod {pod['name']}: hosts {pod['hosts']}, ILD {','.join(map(str, pod['ilds']))}: "
                     f"{pod['ipus']} IPUs, {used} in {what}s, {free} free")
    pods = bool(view["pods"])
    lines.append(f"{what.upper():<16} {'JOB':>8} {'USER':<10} {'NODES':<16} {'SIZE':>4} {'GCDS':>4} {'STATE':<8} "
                 + ("PODS      " if pods else "") + "AGE")
    for r in view["partitions"]:
        job = "-" if r["job"] is None else str(r["job"])
        note = "  orphan: job gone" if r["orphan"] else "" if r["ours"] else "  not slurm-ipu's"
        where = f"{','.join(r['pods'] or []) or '-':<9} " if pods else ""
        lines.append(f"{r['partition']:<16} {job:>8} {r['user'] or '-':<10} {r['nodes'] or '-':<16} {r['size']:>4} "
                     f"{r['gcds']:>4} {r['state']:<8} {where}{_age(r['age_s'])}{note}")
    if not view["partitions"]:
        lines.append(f"(no {what}s)")
    lines.append(f"orphans: {', '.join(view['orphans']) or 'none'}")
    lines.append(f"queued removals: {', '.join(view['queued_removals']) or 'none'}")
    lines += [f"restricted: {what}" for what in view.get("restricted", [])]
    usage = view.get("usage")
    if usage is not None:
        users = ", ".join(f"{u} {h:.2f}" for u, h in usage["ipu_hours"].items()) or "none"
        lines.append(f"IPU-hours by user, last {usage['days']:g} days (accounting): {users}")
    elif "sacct" in view["errors"]:
        lines.append(f"IPU-hours: accounting unreachable ({view['errors']['sacct']})")
    return lines


def main(site_path: str, as_json: bool = False, out=print, days: float = 7.0) -> int:
    from ..config import load

    site = load(site_path)
    view = build(site, gather(site, days=days))
    if as_json:
        out(json.dumps(view, indent=1))
    else:
        for line in table(view):
            out(line)
    return 0 if not view["errors"] else 1
