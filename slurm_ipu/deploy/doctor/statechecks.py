"""The checks of V-IPU's side and the hooks' state: V-IPU itself, the canaries, the queue and
grants, the state directory and journal, orphans, the slurm-ipu service and its passes, drains, metrics,
the step canaries."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from ...config import Site
from ...slurm.refusals import POLICY_REFUSED, site_rule
from .canaries import ENDING, PROBE_UID
from .facts import _queued
from .findings import Charge, Facts, Finding, policy_skip
from .slurmchecks import _apply


def check_vipu(site: Site, facts: Facts) -> Finding:
    if len(site.controllers) > 1:
        return _check_controllers(site, facts)
    creds = site.vipu.cli_config
    if creds:
        try:
            mode = Path(creds).stat().st_mode
        except OSError as exc:
            return Finding("vipu", False, f"vipu.cli_config {creds}: {exc.strerror}",
                           "write the hooks' vipu CLI config there (vipu-admin create user prints it)")
        if mode & 0o004:
            return Finding("vipu", False, f"{creds} holds V-IPU credentials and is world-readable",
                           f"chmod 600 {creds} (owned by {site.slurm.user})")
    if facts.partitions is None:
        return Finding("vipu", False, f"{site.vipu.command} does not answer: {facts.errors.get('vipu')}",
                       f"check the controller at {site.vipu.host}:{site.vipu.port} and vipu.command")
    used = sum(p.size for p in facts.partitions)
    if used > site.pod.ipus:
        return Finding("vipu", False, f"V-IPU has {used} IPUs in partitions, more than the Pod's {site.pod.ipus}",
                       "pod.ipus must be the IPUs of this controller's allocation")
    return Finding("vipu", True, f"{site.vipu.host}:{site.vipu.port} answers: {len(facts.partitions)} "
                   f"partition(s), {used} of {site.pod.ipus} IPUs in use")


def _check_controllers(site: Site, facts: Facts) -> Finding:
    """A site of several controllers: each one's credentials and answer, the failures named."""
    for c in site.controllers:
        if not c.cli_config:
            continue
        try:
            mode = Path(c.cli_config).stat().st_mode
        except OSError as exc:
            return Finding("vipu", False, f"controller {c.name}'s cli_config {c.cli_config}: {exc.strerror}",
                           "write the hooks' vipu CLI config there (vipu-admin create user prints it)")
        if mode & 0o004:
            return Finding("vipu", False, f"{c.cli_config} holds controller {c.name}'s V-IPU credentials and is "
                           "world-readable", f"chmod 600 {c.cli_config} (owned by {site.slurm.user})")
    if facts.down:
        down = [c for c in site.controllers if c.name in facts.down]
        return Finding("vipu", False, "; ".join(f"V-IPU controller {c.name} ({c.host}:{c.port}) does not answer: "
                                                f"{facts.down[c.name].removeprefix(f'V-IPU controller {c.name}: ')}"
                                                for c in down),
                       f"check the controller{'s' if len(down) > 1 else ''} at "
                       f"{', '.join(f'{c.host}:{c.port}' for c in down)} (its jobs wait meanwhile; the others' run)")
    used = sum(p.size for p in facts.partitions or [])
    return Finding("vipu", True, f"{len(site.controllers)} controllers answer "
                   f"({', '.join(c.name for c in site.controllers)}): {len(facts.partitions or [])} partition(s), "
                   f"{used} of {site.pod.ipus} IPUs in use")


def check_canary(site: Site, facts: Facts) -> Finding:
    """A job start's two steps, tried: job_submit.lua accepting an IPU job, and the hooks' create
    of its partition as the hooks' user."""
    if facts.test_submit != "ok":
        if rule := site_rule(facts.refusals.get("test_submit")):
            return policy_skip("canary", rule, facts.charge)
        return Finding("canary", False, f"sbatch --test-only --gres=ipu:1 was refused: {facts.test_submit}",
                       "every IPU job is refused so: see job_submit.lua and the slurm.conf fragment")
    if facts.canary is None and "canary" in facts.errors:
        return Finding("canary", True, f"the hooks' create: {facts.errors['canary']}", skipped=True)
    if facts.canary is None:
        return Finding("canary", False, f"not tried: V-IPU did not answer ({facts.errors.get('vipu')})",
                       "see the vipu item")
    made = {"allocation": "a 1-IPU-Machine allocation", "partition": "a 1-IPU partition"}
    what = " and ".join(made[m] for m in sorted(site.models))
    if facts.canary != "ok":
        hows = []
        if "allocation" in site.models:
            hows.append(f"list slurm.user ({site.slurm.user}) under admins: in the emulator's cluster file"
                        if site.vipu.emulator else f"make the hooks' V-IPU user a V-IPU administrator "
                        f"({site.vipu.admin_command}'s credentials)")
        if "partition" in site.models:
            hows.append(f"grant the allocation to slurm.user ({site.slurm.user}) in the emulator's cluster file "
                        "(grants:)" if site.vipu.emulator else f"give the hooks' V-IPU user (vipu.cli_config) the "
                        f"right to create partitions in allocation {site.vipu.allocation or '(the default)'} for "
                        "jobs' users")
        how = "; and ".join(hows)
        return Finding("canary", False, f"the hooks' create of {what} as {site.slurm.user} failed: "
                       f"{facts.canary}", f"every IPU job start fails so: {how}")
    return Finding("canary", True, f"an IPU job passes job_submit.lua (sbatch --test-only), and the hooks create and "
                   f"remove {what} as {site.slurm.user}")


def check_queue(site: Site, facts: Facts) -> Finding:
    if facts.stuck is None:
        return Finding("queue", False, f"cannot list jobs ({facts.errors.get('jobs')})", "check that slurmctld answers")
    if facts.stuck:
        jobs = " ".join(str(j) for j in facts.stuck[:10]) + (" ..." if len(facts.stuck) > 10 else "")
        return Finding("queue", False, f"IPU job(s) {jobs} pending for BadConstraints: no node has the IPUs they ask "
                       "for (an un-merge, or a node's GRES gone)", f"scancel {jobs.removesuffix(' ...')}, or give the "
                       "Pod's hosts their ipu GRES again (docs/admin.md, Uninstall step 0)")
    return Finding("queue", True, "no IPU job waits for IPUs no node has")


def check_grants(site: Site, facts: Facts) -> Finding:
    """V-IPU only through Slurm: a job's user cannot make partitions in the allocation Slurm
    schedules (docs/admin.md)."""
    where = f"allocation {site.vipu.allocation or '(the default)'}" if len(site.controllers) == 1 else \
        f"allocations {', '.join(c.allocation for c in site.controllers)} (each controller's)"
    tried = facts.user_create
    if tried is None:
        return Finding("grants", True, f"a create in {where} as a job's user: needs root (it acts as another user)",
                       skipped=True)
    if tried == "refused":
        return Finding("grants", True, f"a job's user (uid {PROBE_UID}) may not create partitions in {where}: "
                       "IPUs go out only through Slurm")
    if tried == "created":
        return Finding("grants", False, f"a job's user (uid {PROBE_UID}) created a partition in {where} around "
                       "Slurm (removed again)", f"grant {where} to the hooks' V-IPU user only (vipu.cli_config; "
                       "docs/operations.md, V-IPU only through Slurm)")
    return Finding("grants", False, f"a create in {where} as a job's user {tried}",
                   "check that the vipu command answers for every user")


def check_state_dir(site: Site, facts: Facts) -> Finding:
    import pwd

    path = Path(site.state_dir)
    try:
        st = path.stat()
    except OSError as exc:
        return Finding("state_dir", False, f"{path}: {exc.strerror}", f"{_apply(site)} creates it")
    try:
        user = pwd.getpwnam(site.slurm.user)
    except KeyError:
        return Finding("state_dir", False, f"slurm.user={site.slurm.user} is not a user here",
                       "set slurm.user to SlurmUser")
    if st.st_uid != user.pw_uid or not st.st_mode & 0o200:
        return Finding("state_dir", False, f"{path} is not writable by {site.slurm.user} (the hooks' user)",
                       f"chown {site.slurm.user} {path} && chmod 700 {path}")
    if st.st_mode & 0o002:
        return Finding("state_dir", False, f"{path} is world-writable", f"chmod 700 {path}")
    room = _room(path)
    if room:
        return Finding("state_dir", False, f"{path} has {room}: a prolog that cannot write its record holds "
                       "the job", f"free space on {path}'s file system")
    return Finding("state_dir", True, f"{path} owned by {site.slurm.user}")


STATE_MIN_BYTES = 64 << 20  # a record, a journal entry and a log line per job: far below this


STATE_MIN_INODES = 10_000


def _room(path: Path) -> str | None:
    """What is short on the state directory's file system, in words; None: enough."""
    import os

    fs = os.statvfs(path)
    free, inodes = fs.f_bavail * fs.f_frsize, fs.f_favail
    if free < STATE_MIN_BYTES:
        return f"{free >> 20} MiB free (under {STATE_MIN_BYTES >> 20} MiB)"
    if fs.f_files and inodes < STATE_MIN_INODES:  # f_files 0: a file system without inode counts
        return f"{inodes} free inodes (under {STATE_MIN_INODES})"
    return None


def check_journal(site: Site, facts: Facts, now: float | None = None) -> Finding:
    now = time.time() if now is None else now
    queued = _queued(site)
    limit = 2 * site.reap.interval
    stale = [q for q in queued if now - float(q.get("time", 0)) > limit]
    if stale:
        names = ", ".join(q.get("partition", "?") for q in stale[:5])
        return Finding("journal", False, f"{len(stale)} removal(s) queued for over {limit:g} s: {names}",
                       "check V-IPU and the slurm-ipu service's log (journalctl -u slurm-ipu)")
    return Finding("journal", True, f"{len(queued)} removal(s) queued, none older than {limit:g} s")


def check_orphans(site: Site, facts: Facts) -> Finding:
    from ...hooks.reap import orphans

    if facts.partitions is None or facts.jobs is None:
        why = facts.errors.get("vipu") or facts.errors.get("jobs")
        return Finding("orphans", False, f"cannot tell ({why})", "fix the vipu and Slurm items first")
    found = orphans([p.name for p in facts.partitions], facts.jobs, site.job_prefixes)
    # On its way out, not an orphan: its job's epilog has not ended, or its removal was journaled
    # when V-IPU was listed (the slurm-ipu service drops the entry just after the removal, which may be
    # before this check), or is now; or its job shows up in the look after the listing
    # (started after the first one). The jobs are read before the journal and the journal before
    # the listing, so a job seen ended had its epilog hand the removal over before the listing.
    queued = set(facts.queued or ()) | {q.get("partition") for q in _queued(site)}
    found = [(name, job) for name, job in found if name not in queued and facts.jobs.get(job) != ENDING
             and not _alive_later(facts.jobs_after, job)]
    if found:
        names = ", ".join(name for name, _ in found[:5])
        kinds = "/".join(sorted({site.kind_of(name) for name, _ in found}))
        return Finding("orphans", False, f"{len(found)} {kinds}(s) whose job is gone: {names}",
                       "slurm-ipu reap (the slurm-ipu service does it every reap.interval)")
    what = " and ".join(f"{m}" for m in sorted(site.models))
    return Finding("orphans", True, f"every {what} under the prefix belongs to a live job")


def _alive_later(jobs_after: dict[int, str] | None, job: int) -> bool:
    from ...hooks.reap import LIVE_STATES

    return jobs_after is not None and jobs_after.get(job, "GONE") in (*LIVE_STATES, ENDING)


def check_service(site: Site, facts: Facts) -> Finding:
    from ...hooks import remover
    from ...hooks.endpoint import socket_path

    if not remover.is_service(remover.holder(site.state_dir)):
        return Finding("service", False, "the slurm-ipu service is not running: every IPU job's prolog and epilog "
                       "start Python (slower job turnover) and orphans wait for a manual reap",
                       "systemctl enable --now slurm-ipu")
    if not stat.S_ISSOCK(_lstat_mode(socket_path(site.state_dir))):
        return Finding("service", False, "the slurm-ipu service runs, but without its hook socket (a slurm-ipu "
                       "older than slurm-ipu-hook?): every IPU job's hooks start Python",
                       "systemctl restart slurm-ipu")
    stalled = _stalled_pass(site)
    if stalled:
        return Finding("service", False, f"the slurm-ipu service runs, but {stalled}: a thread is stuck (nothing "
                       "reaped, drained or counted)", "systemctl restart slurm-ipu, and report the last "
                       f"lines of {site.state_dir}/hooks.log")
    return Finding("service", True, "the slurm-ipu service runs and takes IPU jobs' "
                   "prologs and epilogs on its socket")


def _stalled_pass(site: Site, now: float | None = None) -> str | None:
    """A periodic pass the running service has not ended for three of its intervals (and a
    deadline): in words, or None. Counted from the service's start at the latest (its lock file
    is written then), so a pass a service before it ended long ago is no evidence."""
    from ...hooks import remover, stats

    now = time.time() if now is None else now
    doc = stats.load(site.state_dir) or stats.empty()
    try:
        started = remover.lock_path(site.state_dir).stat().st_mtime
    except OSError:
        return None
    for name in stats.PASSES:
        interval = getattr(site, name).interval  # reap.interval, health.interval
        if interval <= 0:
            continue
        limit = 3 * interval + site.epilog.deadline + 30
        last = max(doc["passes"].get(name, 0.0), started)
        if now - last > limit:
            return f"its last {name} pass ended {now - last:.0f} s ago (limit {limit:g} s)"
    return None


def check_drains(site: Site, facts: Facts) -> Finding:
    """Nodes Slurm shows drained with the health pass's reason: each is lifted by a pass once its
    IPU-Machines are Up, so with no pass to come (no service, or health.interval 0) they stay."""
    from ...hooks import remover
    from ...hooks.health import drained_by_us

    nodes = {name: (f.get("State", ""), f.get("Reason", "")) for name, f in facts.nodes.items()}
    ours = drained_by_us(nodes)
    if not ours:
        return Finding("drains", True, "no node drained by the health pass")
    shown = ", ".join(f"{n} ({nodes[n][1].split(' [', 1)[0]})" for n in ours[:4]) + \
        (f" and {len(ours) - 4} more" if len(ours) > 4 else "")
    if site.health.interval <= 0 or not remover.is_service(remover.holder(site.state_dir)):
        return Finding("drains", False, f"{len(ours)} node(s) drained by the health pass and no pass to lift them: "
                       f"{shown}", "start the slurm-ipu service (systemctl enable --now slurm-ipu), or run "
                       "slurm-ipu health once their IPU-Machines are Up")
    return Finding("drains", True, f"{len(ours)} node(s) drained for failed IPU-Machines, lifted when they are Up: "
                   f"{shown}")


def check_metrics(site: Site, facts: Facts, now: float | None = None) -> Finding:
    """metrics.textfile: in a directory the slurm-ipu service (slurm.user) can write and no one else
    can (node_exporter serves every *.prom there: another user could plant or replace one), and
    current while the service runs."""
    import grp
    import pwd

    path = site.metrics.textfile
    if not path:
        return Finding("metrics", True, "no metrics.textfile: `slurm-ipu metrics` on demand only")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        st, user = os.stat(folder), pwd.getpwnam(site.slurm.user)
    except (OSError, KeyError) as exc:
        return Finding("metrics", False, f"metrics.textfile's directory {folder}: {getattr(exc, 'strerror', exc)}",
                       f"mkdir -p {folder} && chown {site.slurm.user} {folder} && chmod 755 {folder}")
    mode = st.st_mode & 0o7777
    group = st.st_gid not in (0, user.pw_gid)
    if mode & 0o002 or (mode & 0o020 and group) or st.st_uid not in (0, user.pw_uid):
        who = "every user" if mode & 0o002 else (f"uid {st.st_uid}" if st.st_uid not in (0, user.pw_uid)
                                                 else f"group {_group_name(grp, st.st_gid)}")
        return Finding("metrics", False, f"{folder} (mode {mode:o}) can be written by {who}: a .prom planted or "
                       "replaced there is served as slurm-ipu's", f"chown {site.slurm.user} {folder} && "
                       f"chmod 755 {folder}")
    writable = (st.st_uid == user.pw_uid and mode & 0o200) or (st.st_gid == user.pw_gid and mode & 0o020)
    if not writable:
        return Finding("metrics", False, f"{folder} is not writable by {site.slurm.user}: the slurm-ipu service "
                       "cannot write the textfile", f"chown {site.slurm.user} {folder}")
    stale = _stale_textfile(site, path, now)
    if stale:
        return Finding("metrics", False, stale, "check the slurm-ipu service (journalctl -u slurm-ipu)")
    return Finding("metrics", True, f"{path} in a directory only {site.slurm.user} and root can write")


def _group_name(grp, gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _stale_textfile(site: Site, path: str, now: float | None) -> str | None:
    """While the service runs it writes the textfile every health.interval: far older is a
    service not writing it (node_exporter would serve the last numbers as current)."""
    from ...hooks import remover

    interval = site.health.interval
    if interval <= 0 or not remover.is_service(remover.holder(site.state_dir)):
        return None
    now = time.time() if now is None else now
    limit = 3 * interval + site.epilog.deadline + 30
    try:
        since = max(os.stat(path).st_mtime, remover.lock_path(site.state_dir).stat().st_mtime)
    except FileNotFoundError:
        since = remover.lock_path(site.state_dir).stat().st_mtime
    return f"{path} last written {now - since:.0f} s ago (limit {limit:g} s)" if now - since > limit else None


def _lstat_mode(path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def check_steps(site: Site, steps: dict[str, str] | None, charge: Charge | None = None) -> Finding:
    if steps is None:
        return Finding("steps", True, "a 1-IPU step on each Pod: needs root (it runs a job)", skipped=True)
    if rule := next((why for why in steps.values() if why.startswith(POLICY_REFUSED)), None):
        return policy_skip("steps", rule.removeprefix(POLICY_REFUSED), charge or Charge())
    bad = {h: why for h, why in steps.items() if why != "ok" and not why.startswith("busy: ")}
    if not bad and any(why != "ok" for why in steps.values()):
        return Finding("steps", True, f"a 1-IPU step on {', '.join(steps)}: not tried where no IPUs were free "
                       "within 30 s", skipped=True)
    if bad:
        host, why = next(iter(bad.items()))
        return Finding("steps", False, f"a 1-IPU step on {host}: {why}", f"the plugstack line of plugstack-ipu.conf "
                       f"where {host}'s slurmd reads it (configless: in plugstack.conf itself, docs/admin.md), "
                       "spank_ipu.so installed there")
    return Finding("steps", True, f"a 1-IPU step on {', '.join(steps)}: each task saw its partition")
