"""`slurm-ipu doctor`: the live cluster checked against its site description.

One line per item, `ok` or `PROBLEM` with what is wrong and the fix; exit 1 when anything is
wrong. Everything is read once up front (Slurm's running configuration, its nodes, the jobs,
V-IPU's partitions), so a check is a pure function of the site and those facts, and the unit
tests feed facts without a cluster.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import rules
from ..config import SUPPORTED_SLURM, Site
from ..errors import SlurmIpuError
from ..slurm import slurmconf
from ..slurm.conf import parse_show_config, plugstack_lines  # noqa: F401 - doctor's, read by tests
from .install import built_for
from .render import PROBE_COMMENT, PROBE_NAME


@dataclass
class Finding:
    item: str
    ok: bool
    detail: str
    fix: str = ""
    skipped: bool = False  # not tried: the user running doctor may not (only root may act as another user)

    def line(self) -> str:
        if self.skipped:
            return f"skipped  {self.item:<12} {self.detail}"
        if self.ok:
            return f"ok       {self.item:<12} {self.detail}"
        return f"PROBLEM  {self.item:<12} {self.detail}; fix: {self.fix}"


@dataclass
class Facts:
    """What doctor reads from the cluster. A value that could not be read is an exception kept in
    `errors` under the fact's name, reported by the checks that need it."""
    slurm_version: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    jobs: dict[int, str] | None = None  # job -> base state; COMPLETING while its epilog has not ended
    jobs_after: dict[int, str] | None = None  # the same, read again after V-IPU's listing
    queued: list[str] | None = None  # the journal's removals, read just before V-IPU's listing
    partitions: list | None = None
    clusters: list[str] | None = None  # what slurmdbd knows (accounting only)
    topology: dict[str, list[str]] | None = None  # multi-Pod sites: host -> its leaf switches, as Slurm sees them
    user_create: str | None = None  # a job user's own create in the site's allocation: refused/created/why
    declared: list | None = None  # the settings slurm.conf and its includes declare (slurmconf.Setting)
    canary: str | None = None  # the hooks' own create and remove of a 1-IPU partition: "ok" or why not
    probe: dict | None = None  # job_submit.lua as slurmctld runs it, tried on a held job (root only): probe_submit
    stuck: list[int] | None = None  # IPU jobs pending for BadConstraints (never to start as configured)
    test_submit: str | None = None  # `sbatch --test-only --gres=ipu:1` through job_submit.lua: "ok" or why not
    snapshot: dict | None = None  # the site's own Slurm before adoption (slurm-ipu snapshot), None: none taken
    kept: dict | None = None  # the same read now
    errors: dict[str, str] = field(default_factory=dict)


# --- reading the cluster ---------------------------------------------------------------------

def parse_show_nodes(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show nodes --oneliner`: one node per line of Key=Value words."""
    nodes = {}
    for line in text.splitlines():
        line, _, reason = line.partition(" Reason=")  # the last field, and the only one with blanks
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if reason:
            fields["Reason"] = reason.strip()
        if "NodeName" in fields:
            nodes[fields["NodeName"]] = fields
    return nodes


def gather(site: Site, runner=None) -> Facts:
    from ..slurm.commands import SlurmCli

    facts = Facts()
    cli = SlurmCli.of_site(site, runner=runner)

    def slurm(name: str, tool: str, *args: str) -> str | None:
        return cli.output_or_none(facts.errors, name, tool, *args)

    text = slurm("slurm", "scontrol", "--version")
    facts.slurm_version = text.split()[-1] if text else None
    facts.config = parse_show_config(slurm("config", "scontrol", "show", "config") or "")
    facts.nodes = parse_show_nodes(slurm("nodes", "scontrol", "show", "nodes", "--oneliner") or "")
    text = slurm("jobs", "squeue", "--json")
    try:
        facts.jobs = job_states(text) if text is not None else None
        facts.stuck = _stuck(text) if text is not None else None
    except SlurmIpuError as exc:
        facts.errors["jobs"] = str(exc)
    if site.pods:
        from ..slurm.topology import leaf_sets

        text = slurm("topology", "scontrol", "show", "topology")
        facts.topology = leaf_sets(text) if text is not None else None
    if site.accounting.slurmdbd_host:
        text = slurm("slurmdbd", "sacctmgr", "-n", "-P", "list", "cluster", "format=cluster")
        facts.clusters = text.split() if text is not None else None
    conf = facts.config.get("SLURM_CONF") or site.slurm_conf
    try:
        facts.declared = slurmconf.read(conf).settings
    except SlurmIpuError as exc:
        facts.errors["declared"] = str(exc)
    _gather_kept(site, cli, facts)
    said = slurm("test_submit", "sbatch", "--test-only", "-N1", "--gres=ipu:1", "--time=1", "--job-name",
                 PROBE_NAME, "--wrap", "true")
    facts.test_submit = "ok" if said is not None else facts.errors.get("test_submit")
    try:
        from ..hooks.reap import job_objects

        # The journal before the listing and the jobs after it: a partition on its way out (its job
        # ended, the hook service removing it) is never taken for an orphan (check_orphans).
        facts.queued = _queued_names(site)
        facts.partitions = job_objects(site, site.vipu_client(), time.monotonic() + 20)
        facts.jobs_after = _jobs_again(cli)
        if os.getuid() == 0:
            try:
                facts.canary = canary(site)
            except NotTried as exc:
                facts.errors["canary"] = str(exc)
        else:
            facts.errors["canary"] = f"needs root (it acts as slurm.user {site.slurm.user})"
        facts.user_create = try_as_job_user(site, site.vipu_client())
    except SlurmIpuError as exc:
        facts.errors["vipu"] = str(exc)
    except Exception as exc:  # doctor reports; it does not crash on one broken part
        facts.errors["vipu"] = f"{type(exc).__name__}: {exc}"
    if os.getuid() == 0:
        try:
            facts.probe = probe_submit(cli, facts.slurm_version or site.slurm.version)
        except SlurmIpuError as exc:
            facts.errors["probe"] = str(exc)
    return facts


def probe_submit(cli, version: str) -> dict:
    """job_submit.lua as slurmctld runs it, not as its file reads: a held 1-IPU job named
    PROBE_NAME (never started, cancelled at once) must get the ipu licence (our job_submit ran) and
    the code id of the loaded job_submit.lua in its AdminComment, and a GRES update of it must be
    refused (our job_modify ran: a site's job_modify that skips it lets a job's IPUs change
    while its licence, and so its partition, stays)."""
    from ..errors import SlurmError
    from ..slurm.releases import tres_prefix

    cli.output_or_none(None, "", "scancel", f"--name={PROBE_NAME}", "--state=PENDING")  # a killed doctor's
    job = cli.output("sbatch", "--parsable", "--hold", f"--job-name={PROBE_NAME}", "--gres=ipu:1", "-N1",
                     "--time=1", "-o", "/dev/null", "--wrap", "true").strip().split(";")[0]
    try:
        got = _probe_fields(cli, job)
        try:
            cli.output("scontrol", "update", f"JobId={job}", f"TresPerNode={tres_prefix(version)}ipu:2")
            got["modify"] = "accepted"
        except SlurmError as exc:
            got["modify"] = str(exc)
        got["after"] = _probe_fields(cli, job)
    finally:
        cli.output_or_none(None, "", "scancel", job)
    return got


def _probe_fields(cli, job: str) -> dict:
    text = cli.output("scontrol", "-o", "show", "job", job)
    one = dict(w.split("=", 1) for w in text.split() if "=" in w)
    return {"licenses": one.get("Licenses", "(null)"), "comment": one.get("AdminComment", ""),
            "tres": one.get("TresPerNode", "")}


def _gather_kept(site: Site, cli, facts: Facts) -> None:
    """The snapshot, and the same read now with the same job shapes (check_kept compares them)."""
    from . import snapshot

    try:
        facts.snapshot = snapshot.load(site.path("snapshot"))
        if facts.snapshot is not None:
            facts.kept = snapshot.record(cli, [shape.split() for shape in facts.snapshot["shapes"]])
    except SlurmIpuError as exc:
        facts.errors["kept"] = str(exc)


def _stuck(text: str) -> list[int]:
    """IPU jobs Slurm will never start as it is configured now: pending for BadConstraints (no node
    has the IPUs they ask for; after an un-merge, every one)."""
    from ..slurm.commands import parse_squeue

    return sorted(j.job_id for j in parse_squeue(text).values()
                  if j.state == "PENDING" and j.reason == "BadConstraints" and "ipu" in j.tres)


def job_states(text: str) -> dict[int, str]:
    """`squeue --json` -> {job: base state}, COMPLETING for a job whose epilog has not ended (one
    word up to data_parser v0.0.39, a flag beside the base state from v0.0.40)."""
    from ..slurm.commands import parse_squeue

    return {job_id: ENDING if ENDING in job.flags else job.state for job_id, job in parse_squeue(text).items()}


def _jobs_again(cli) -> dict[int, str] | None:
    """The second look at the jobs (None when it fails: the first one's error is what doctor reports)."""
    text = cli.output_or_none(None, "jobs", "squeue", "--json")
    try:
        return job_states(text) if text is not None else None
    except SlurmIpuError:
        return None


def _queued_names(site: Site) -> list[str] | None:
    try:
        return [q.get("partition") for q in _queued(site)]
    except OSError:  # not readable by this user: check_journal says so
        return None


ENDING = "COMPLETING"
PROBE_UID = 65534  # nobody: a user with no V-IPU grant, as a job's user
CANARY_NAME = "slurm-ipu-doctor-canary"


def _as_user(name: str) -> list[str]:
    """The argv prefix that runs a command as `name` (root only; [] when already that user)."""
    import pwd
    import shutil

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return []
    setpriv = shutil.which("setpriv")
    if entry.pw_uid == os.getuid() or os.getuid() != 0 or setpriv is None:
        return []
    return [setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", "--"]


def canary(site: Site) -> str:
    """What a job start does at V-IPU, done once: as the hooks' user (slurm.user), with the hooks'
    vipu command, credentials and flags, a 1-IPU partition for a job's user (uid 65534) on the
    first host, in the allocation a job there gets, created and removed. "ok", or why not."""
    from ..vipu import VipuClient

    who = _as_user(site.slurm.user)
    client = VipuClient(command=[*who, *site.vipu_command], host=site.vipu.host,
                        port=site.vipu.port, timeout=site.vipu.timeout, retries=1,
                        emulator_flags=site.vipu.emulator, admin_command=[*who, *site.vipu_admin_command])
    deadline = time.monotonic() + 3 * site.vipu.timeout
    if "allocation" in site.models:
        found = _canary_allocation(site, client, deadline)
        if found != "ok" or "partition" not in site.models:
            return found
    pod = (site.pods_of_model("partition") or site.pods or [None])[0]
    allocation, hosts = (pod.name, list(pod.hosts)) if pod else (site.vipu.allocation, site.hosts)
    with _quiet():  # the finding carries the error: one line per item
        try:
            client.ensure_partition(CANARY_NAME, 1, deadline, allocation=allocation, hosts=hosts[:1],
                                    owner_uid=PROBE_UID)
        except SlurmIpuError as exc:
            return str(exc)
        finally:
            try:
                client.remove_partition(CANARY_NAME, missing_ok=True,
                                        deadline=time.monotonic() + site.vipu.timeout)
            except SlurmIpuError:
                pass
    return "ok"


class NotTried(SlurmIpuError):
    """The canary had nothing it could try without touching a job's (every IPU-Machine is taken)."""


def _canary_allocation(site: Site, client, deadline: float) -> str:
    """The allocation model's job start: an allocation of one IPU-Machine no job holds, granted to
    a job's user, created and removed with vipu.admin_command as the hooks' user."""
    from ..hooks.reap import job_of

    with _quiet():
        try:
            held = {a for name, agents in client.list_allocations(deadline).items()
                    if job_of(name, site.allocation.prefix) is not None for a in agents}
            hosts = [h for p in site.pods_of_model("allocation") for h in p.hosts] or site.hosts
            free = [a for a in site.agents_of(hosts) if a not in held]
            if not free:
                raise NotTried("every IPU-Machine of the Pod is in a job's allocation; not tried")
            client.create_allocation(CANARY_NAME, free[:1], [PROBE_UID], deadline=deadline)
        except NotTried:
            raise
        except SlurmIpuError as exc:
            return str(exc)
        finally:
            try:
                client.remove_allocation(CANARY_NAME, missing_ok=True, deadline=time.monotonic() + site.vipu.timeout)
            except SlurmIpuError:
                pass
    return "ok"


@contextlib.contextmanager
def _quiet():
    """The V-IPU client's own error log off: doctor reports each failure in its finding."""
    import logging

    log = logging.getLogger("slurm_ipu.vipu")
    was, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = was


def try_as_job_user(site: Site, hooks) -> str | None:
    """What a job's user gets by asking V-IPU for a 1-IPU partition in the site's allocation
    directly, with the site's vipu command and none of the hooks' credentials: 'refused' (V-IPU
    only through Slurm), 'created' (then removed again with the hooks' client), or why it could
    not tell. None: not tried (only root can act as another user)."""
    import shutil

    from ..errors import PermissionDenied
    from ..vipu import VipuClient

    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or setpriv is None:
        return None
    user = VipuClient(command=[setpriv, f"--reuid={PROBE_UID}", f"--regid={PROBE_UID}", "--clear-groups", "--",
                               *site.vipu.command.split()],
                      host=site.vipu.host, port=site.vipu.port, timeout=site.vipu.timeout, retries=1)
    deadline = time.monotonic() + 2 * site.vipu.timeout
    try:
        with _quiet():  # a refusal is the answer hoped for, not an error to log
            user.create_partition(PROBE_NAME, 1, deadline=deadline, allocation=site.vipu.allocation)
    except PermissionDenied:
        return "refused"
    except SlurmIpuError as exc:
        return f"could not tell: {exc}"
    hooks.remove_partition(PROBE_NAME, missing_ok=True, deadline=time.monotonic() + site.vipu.timeout)
    return "created"


# --- the checks ----------------------------------------------------------------------------

def check_slurm(site: Site, facts: Facts) -> Finding:
    v = facts.slurm_version
    if v is None:
        return Finding("slurm", False, f"cannot ask Slurm its version ({facts.errors.get('slurm')})",
                       f"check slurm.bin_dir={site.slurm.bin_dir} and that slurmctld answers")
    release = ".".join(v.split(".")[:2])
    if release not in SUPPORTED_SLURM:
        return Finding("slurm", False, f"Slurm {v} is not supported ({', '.join(SUPPORTED_SLURM)})",
                       "run a supported release")
    if release != site.slurm.version:
        return Finding("slurm", False, f"Slurm {v} runs, the site says slurm.version={site.slurm.version}",
                       f"set slurm.version: \"{release}\" and re-run {_apply(site)}")
    return Finding("slurm", True, f"Slurm {v}")


def _apply(site: Site) -> str:
    """How this install takes an edited site description."""
    return "`slurm-ipu setup`" if site.packaged else "make install SITE=<site description>"


def _build(site: Site, what: str) -> str:
    """How this install gets a SPANK plugin for the running Slurm."""
    if site.packaged:
        return f"`make deb` on a machine with this Slurm, then apt install its slurm-ipu-spank ({what})"
    return f"make install ({what})"


def check_hooks(site: Site, facts: Facts) -> Finding:
    want = site.path("hook")
    got = {k: facts.config.get(k) for k in ("PrologSlurmctld", "EpilogSlurmctld")}
    wrong = [f"{k}={v or '(none)'}" for k, v in got.items() if want not in (v or "").split(",")]
    if wrong:
        theirs = {k: v for k, v in got.items() if v and want not in v.split(",")}
        if theirs:  # the site's own script took the key: Slurm keeps one value
            names = ", ".join(f"slurm.site_{k.lower().replace('slurmctld', '_slurmctld')}: {v}"
                              for k, v in theirs.items())
            return Finding("hooks", False, f"{', '.join(wrong)}, expected {want} (Slurm runs one of each)",
                           f"name the site's own script in the site description ({names}), {_apply(site)}, "
                           f"and set the key to {want}: slurm-ipu-hook runs the site's script for every job")
        return Finding("hooks", False, f"{', '.join(wrong)}, expected {want}",
                       "Include slurm-ipu.conf in slurm.conf (render's diff), then restart slurmctld")
    for key in ("slurm.site_prolog_slurmctld", "slurm.site_epilog_slurmctld"):
        for script in site.scripts(key.split("_")[1]):
            if not os.access(script, os.X_OK):
                return Finding("hooks", False, f"{key}: {script} is missing or not executable: every job start or "
                               "end fails", f"install the site's script there, or remove it from {key} in the site "
                               "description")
    broken = _hook_broken(site, want)
    if broken:
        return Finding("hooks", False, broken, f"{_apply(site)} (renders slurm-ipu-hook's settings"
                       + (")" if site.packaged else " and builds it)"))
    own = site.scripts("prolog") + site.scripts("epilog")
    return Finding("hooks", True, f"PrologSlurmctld and EpilogSlurmctld run {want}"
                   + (f", which runs the site's own {' and '.join(own)}" if own else ""))


def _hook_broken(site: Site, hook: str) -> str | None:
    """What keeps slurm-ipu-hook from doing what this site says, tried as slurmctld would start it:
    its settings are not what the site renders, or it is not this package's build (a Python
    upgrade without `make install`), or `slurm-ipu-hook --check` refuses what they name."""
    import subprocess

    from ..hooks.transport import source_id
    from .fragments import texts

    conf = site.path("hook_conf")
    try:
        text = Path(conf).read_text()
    except OSError as exc:
        return f"{conf}: {exc.strerror}"
    if text != texts(site)["slurm-ipu-hook.conf"]:
        return f"{conf} differs from what the site description renders"
    try:
        proc = subprocess.run([hook, "--check"], capture_output=True, text=True, timeout=10)
    except OSError as exc:
        return f"{hook}: {exc.strerror}"
    except subprocess.TimeoutExpired:
        return f"`{hook} --check` did not answer within 10 s"
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or [f"`{hook} --check` exited {proc.returncode}"])[-1]
    if f"(source {source_id()})" not in proc.stdout:
        return f"{hook} was built from another slurm-ipu than this one"
    return None


def check_timeout(site: Site, facts: Facts) -> Finding:
    raw = facts.config.get("PrologEpilogTimeout", "")
    m = re.match(r"(\d+)", raw)
    if not m:
        return Finding("timeout", False, f"PrologEpilogTimeout={raw or '(unset)'}",
                       f"set PrologEpilogTimeout={site.prolog_epilog_timeout} (the slurm.conf fragment has it)")
    timeout = int(m.group(1))
    longest = max(site.prolog.deadline, site.epilog.deadline)
    if timeout <= longest:
        return Finding("timeout", False, f"PrologEpilogTimeout={timeout} is not above the hooks' deadlines "
                       f"({longest:g} s)", f"set PrologEpilogTimeout={site.prolog_epilog_timeout}")
    return Finding("timeout", True, f"PrologEpilogTimeout={timeout} above the hooks' deadlines ({longest:g} s)")


def check_job_submit(site: Site, facts: Facts) -> Finding:
    from .fragments import texts

    if "lua" not in facts.config.get("JobSubmitPlugins", ""):
        return Finding("job_submit", False, f"JobSubmitPlugins={facts.config.get('JobSubmitPlugins') or '(none)'}",
                       "JobSubmitPlugins=lua (the slurm.conf fragment has it)")
    conf_dir = Path(facts.config.get("SLURM_CONF", f"{site.slurm.conf_dir}/slurm.conf")).parent
    path = conf_dir / "job_submit.lua"
    ours = texts(site)["job_submit.lua"]
    on_disk = _job_submit_files(site, path, ours)
    if on_disk.ok and (facts.probe is not None or "probe" in facts.errors):
        return _job_submit_runs(facts, path, ours)  # the files read right: and what slurmctld runs?
    return on_disk


def _job_submit_files(site: Site, path: Path, ours: str) -> Finding:
    """The job_submit.lua beside slurm.conf is ours for this site, or dofile()s it and calls it."""
    try:
        text = path.read_text()
    except OSError as exc:
        return Finding("job_submit", False, f"{path}: {exc.strerror}", f"copy the rendered job_submit.lua to {path}")
    if text == ours:
        return Finding("job_submit", True, f"{path} is ours, for a Pod of {site.pod.ipus} IPUs")
    loaded = re.findall(r"dofile\(\s*[\"']([^\"']+)[\"']\s*\)", text)
    if "slurm_ipu.job_submit" in text and loaded:
        for module in loaded:
            try:
                if Path(module).read_text() == ours:
                    return Finding("job_submit", True, f"{path} calls ours ({module}), for a Pod of "
                                   f"{site.pod.ipus} IPUs")
            except OSError:
                continue
        return Finding("job_submit", False, f"{path} loads {', '.join(loaded)}, which is not what the site renders "
                       "(another Pod size or release)", "copy the rendered job_submit.lua over it")
    return Finding("job_submit", False, f"{path} is not slurm-ipu's and does not call it",
                   "use the rendered job_submit.lua, or add the three-line snippet (docs/admin.md)")


def _job_submit_runs(facts: Facts, path: Path, ours: str) -> Finding:
    """check_job_submit from the held probe job: what slurmctld runs decides, not the files."""
    from .fragments import loaded_id

    probe, want = facts.probe, loaded_id(ours)
    snippet = "docs/admin.md, job_submit.lua"
    if probe is None:
        return Finding("job_submit", False, f"the held probe job could not be tried: {facts.errors['probe']}",
                       "check that root may submit a held --gres=ipu:1 job (sbatch --hold)")
    if "ipu" not in probe["licenses"]:
        return Finding("job_submit", False, f"a held --gres=ipu:1 job got Licenses={probe['licenses']}: slurmctld's "
                       f"job_submit.lua does not run slurm_ipu.job_submit", f"the dofile and the slurm_ipu.job_submit "
                       f"line in {path} ({snippet}), then restart slurmctld")
    if probe["modify"] == "accepted":
        after = probe["after"]
        return Finding("job_submit", False, f"a GRES update of a held IPU job went through (now {after['tres']}, "
                       f"Licenses={after['licenses']}): slurm_job_modify does not run slurm_ipu.job_modify",
                       f"its first line calls slurm_ipu.job_modify ({snippet}); restart slurmctld")
    running = probe["comment"].removeprefix(PROBE_COMMENT) if probe["comment"].startswith(PROBE_COMMENT) else None
    if running != want:
        loaded = running or "from before this release"
        return Finding("job_submit", False, f"slurmctld runs job_submit.lua code {loaded}, the site renders {want}",
                       f"put the rendered job_submit.lua in place, then `touch {path}` "
                       "(slurmctld reloads job_submit.lua, not what it dofile()s, at a submit after its time) or "
                       "restart slurmctld")
    return Finding("job_submit", True, f"slurmctld runs ours (code {want}): a held --gres=ipu:1 job got "
                   f"Licenses={probe['licenses']}, a GRES update of it was refused")


def check_licenses(site: Site, facts: Facts) -> Finding:
    lic = dict(_pairs(facts.config.get("Licenses", "")))
    gres_types = facts.config.get("GresTypes", "")
    problems = []
    if lic.get("ipu") != str(site.pod.ipus):
        problems.append(f"Licenses has ipu:{lic.get('ipu', '(none)')}, the Pod has {site.pod.ipus}")
    if "ipu" not in [t.strip() for t in gres_types.split(",")]:
        problems.append(f"GresTypes={gres_types or '(none)'} lacks ipu")
    if problems:
        return Finding("licenses", False, "; ".join(problems), "Include the rendered slurm.conf fragment, "
                       "then restart slurmctld (Licenses needs a restart)")
    return Finding("licenses", True, f"Licenses=ipu:{site.pod.ipus}, GresTypes has ipu")


def _pairs(text: str):
    for item in text.split(","):
        name, _, count = item.strip().partition(":")
        if name:
            yield name, count or "1"


def check_nodes(site: Site, facts: Facts) -> Finding:
    if not facts.nodes:
        return Finding("nodes", False, f"cannot list nodes ({facts.errors.get('nodes', 'none defined')})",
                       "check that slurmctld answers")
    want = f"ipu:{site.pod.ipus_per_host}"
    runs = site.placement()[0]  # without them job_submit.lua's constraint names features no node has
    bad = []
    for host in site.hosts:
        node = facts.nodes.get(host)
        gres = (node or {}).get("Gres", "(null)")
        lacking = [f for f in runs.get(host, []) if f not in (node or {}).get("AvailableFeatures", "").split(",")]
        if node is None:
            bad.append(f"{host} is not a Slurm node")
        elif want not in gres.split(","):
            bad.append(f"{host} has Gres={gres}")
        elif lacking:
            bad.append(f"{host} lacks the feature(s) {','.join(lacking)} (its runs of the allocation model)")
    strays = [n for n, f in facts.nodes.items() if n not in site.hosts and "ipu" in f.get("Gres", "")]
    bad += [f"{n} has IPUs but is not cabled to the Pod (pod.hosts)" for n in strays]
    features = " and the Features slurm-ipu.conf lists for each" if runs else ""
    if bad:
        return Finding("nodes", False, "; ".join(bad[:4]) + (" ..." if len(bad) > 4 else ""),
                       f"Gres={want}{features} on the NodeName lines of {site.pod.hosts} only, and the gres.conf "
                       "lines (slurm.conf.diff adds them)")
    return Finding("nodes", True, f"{len(site.hosts)} nodes with Gres={want}" + (" and their runs' Features" if runs
                                                                                 else ""))


def check_plugstack(site: Site, facts: Facts) -> Finding:
    conf = facts.config.get("PlugStackConfig", "(null)")
    if conf in ("", "(null)"):  # unset: plugstack.conf beside slurm.conf (what configless sites send)
        conf = str(Path(facts.config.get("SLURM_CONF") or f"{site.slurm.conf_dir}/slurm.conf").parent /
                   "plugstack.conf")
    lines = [ln for ln in plugstack_lines(conf) if "spank_ipu" in ln]
    fix = f"include the rendered plugstack-ipu.conf from {conf}, the same on login and compute nodes"
    if not lines:
        return Finding("plugstack", False, f"{conf} does not load spank_ipu.so", fix)
    if "enable_configless" in facts.config.get("SlurmctldParameters", ""):
        from ..slurm.conf import sent_plugstack_lines

        if not any("spank_ipu" in ln for ln in sent_plugstack_lines(conf, facts.slurm_version or "0.0")):
            return Finding("plugstack", False, f"{conf} loads spank_ipu.so through an include slurmctld does not "
                           "send to configless nodes: their jobs get no partition", f"put the line of "
                           f"plugstack-ipu.conf into {conf} itself (docs/admin.md, Configless sites)")
    words = shlex.split(lines[0])
    plugin = words[1] if len(words) > 1 else ""
    args = dict(w.split("=", 1) for w in words[2:] if "=" in w)
    want = {"vipu_host": site.ipuof_host, "vipu_port": str(site.ipuof_port),
            "prefix": site.partition.prefix, "helper": site.path("helper"),
            "allocation_model": "yes" if "allocation" in site.models else "no"}
    wrong = [f"{k}={args.get(k, '(unset)')} (site: {v})" for k, v in want.items() if args.get(k) != v]
    if wrong:
        return Finding("plugstack", False, "spank_ipu.so has " + ", ".join(wrong), fix)
    if not Path(plugin).is_file():
        return Finding("plugstack", False, f"{plugin} does not exist", _build(site, "installs it"))
    from ..slurm.releases import release

    built = built_for(Path(plugin))
    running = facts.slurm_version
    # Slurm loads a SPANK plugin of its own major and minor release (src/common/plugin.c masks the micro)
    if running and (built is None or release(built) != release(running)):
        return Finding("plugstack", False, f"{plugin} was built for Slurm {built or 'an unknown release'}, "
                       f"Slurm {running} runs", _build(site, "builds it against this Slurm"))
    return Finding("plugstack", True, f"{plugin} (built for Slurm {built}) with the site's controller and prefix")


def check_vipu(site: Site, facts: Facts) -> Finding:
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


def check_merged(site: Site, facts: Facts) -> Finding:
    """What the site's own files declare is what slurmctld runs: no key of the fragment set twice
    (Slurm keeps the last, silently dropping a site's GRES or licence), and every item the site
    declared for a list-valued key in effect."""
    from .merge import ITEM_NAMES, items, ours

    if facts.declared is None:
        return Finding("merged", False, f"cannot read slurm.conf ({facts.errors.get('declared')})",
                       "run doctor on the slurmctld host, where slurm.conf is")
    keys = {k.lower() for k in ours(site)}
    twice = {k: v for k, v in slurmconf.defined_twice(facts.declared).items() if k in keys}
    fix = ("slurm-ipu render --out DIR (merges them into slurm-ipu.conf), then apply DIR/slurm.conf.diff "
           "(docs/admin.md, step 3)")
    if twice:
        key, where = next(iter(twice.items()))
        places = " and ".join(f"{s.key}={s.value} at {s.where}" for s in where)
        return Finding("merged", False, f"{places}: Slurm keeps the last", fix)
    canonical = {k.lower(): k for k in ITEM_NAMES}
    for setting in facts.declared:
        key = canonical.get(setting.key.lower())
        if key is None:
            continue
        name, effective = ITEM_NAMES[key], facts.config.get(key, "")
        live = {name(i) for i in items(effective)}
        lost = [i for i in items(setting.value) if name(i) not in live]
        if lost:
            return Finding("merged", False, f"{setting.key} item {lost[0]} of {setting.where} is not in effect "
                           f"({key}={effective or '(none)'})", fix)
    return Finding("merged", True, "every key slurm-ipu.conf sets is set once, with the site's own values in effect")


def check_kept(site: Site, facts: Facts) -> Finding:
    """The site's own Slurm, as it runs, against its snapshot: a node's GRES, features, CPUs,
    memory, partitions and switch, the licences and partitions, and the job shapes it accepted."""
    from .snapshot import lost

    path = site.path("snapshot")
    if facts.snapshot is None and "kept" not in facts.errors:
        return Finding("kept", True, f"not compared: no snapshot at {path} (`slurm-ipu snapshot` records the site's "
                       "own before merging, docs/admin.md step 3)", skipped=True)
    if facts.kept is None:
        return Finding("kept", False, f"cannot compare with the snapshot ({facts.errors.get('kept')})",
                       "check that slurmctld answers, or record the snapshot again")
    gone = lost(facts.snapshot, facts.kept)
    if gone:
        more = f" (and {len(gone) - 3} more)" if len(gone) > 3 else ""
        return Finding("kept", False, "; ".join(gone[:3]) + more,
                       "give it back in the site's own files (a NodeName line's Gres= replaces its DEFAULT line's; "
                       "slurm-ipu render keeps both), restart slurmctld, and run doctor again")
    snap = facts.snapshot
    shapes = sum(v == "ok" for v in snap["shapes"].values())
    return Finding("kept", True, f"the site's own as in {path}: {len(snap['nodes'])} nodes, "
                   f"{len(snap['licences'])} licences, {shapes} job shapes")


def check_canary(site: Site, facts: Facts) -> Finding:
    """A job start's two steps, tried: job_submit.lua accepting an IPU job, and the hooks' create
    of its partition as the hooks' user."""
    if facts.test_submit != "ok":
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
    where = f"allocation {site.vipu.allocation or '(the default)'}"
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
                       "docs/admin.md, V-IPU only through Slurm)")
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


def _queued(site: Site) -> list[dict]:
    from ..hooks.journal import Journal

    return Journal(site.state_dir).entries()


def check_journal(site: Site, facts: Facts, now: float | None = None) -> Finding:
    now = time.time() if now is None else now
    queued = _queued(site)
    limit = 2 * site.reap.interval
    stale = [q for q in queued if now - float(q.get("time", 0)) > limit]
    if stale:
        names = ", ".join(q.get("partition", "?") for q in stale[:5])
        return Finding("journal", False, f"{len(stale)} removal(s) queued for over {limit:g} s: {names}",
                       "check V-IPU and the hook service's log (journalctl -u slurm-ipu-reaper)")
    return Finding("journal", True, f"{len(queued)} removal(s) queued, none older than {limit:g} s")


def check_orphans(site: Site, facts: Facts) -> Finding:
    from ..hooks.reap import orphans

    if facts.partitions is None or facts.jobs is None:
        why = facts.errors.get("vipu") or facts.errors.get("jobs")
        return Finding("orphans", False, f"cannot tell ({why})", "fix the vipu and Slurm items first")
    found = orphans([p.name for p in facts.partitions], facts.jobs, site.job_prefixes)
    # On its way out, not an orphan: its job's epilog has not ended, or its removal was journaled
    # when V-IPU was listed (the hook service drops the entry just after the removal, which may be
    # before this check: issue 41), or is now; or its job shows up in the look after the listing
    # (started after the first one). The jobs are read before the journal and the journal before
    # the listing, so a job seen ended had its epilog hand the removal over before the listing.
    queued = set(facts.queued or ()) | {q.get("partition") for q in _queued(site)}
    found = [(name, job) for name, job in found if name not in queued and facts.jobs.get(job) != ENDING
             and not _alive_later(facts.jobs_after, job)]
    if found:
        names = ", ".join(name for name, _ in found[:5])
        kinds = "/".join(sorted({site.kind_of(name) for name, _ in found}))
        return Finding("orphans", False, f"{len(found)} {kinds}(s) whose job is gone: {names}",
                       "slurm-ipu reap (the hook service does it every reap.interval)")
    what = " and ".join(f"{m}" for m in sorted(site.models))
    return Finding("orphans", True, f"every {what} under the prefix belongs to a live job")


def _alive_later(jobs_after: dict[int, str] | None, job: int) -> bool:
    from ..hooks.reap import LIVE_STATES

    return jobs_after is not None and jobs_after.get(job, "GONE") in (*LIVE_STATES, ENDING)


def check_accounting(site: Site, facts: Facts) -> Finding:
    host = site.accounting.slurmdbd_host
    if not host:
        return Finding("accounting", True, "no slurmdbd in the site description: sacct shows no IPUs")
    kind = facts.config.get("AccountingStorageType", "")
    tracked = [t.strip() for t in facts.config.get("AccountingStorageTRES", "").split(",")]
    missing = [t for t in ("gres/ipu", "license/ipu") if t not in tracked]
    if kind != "accounting_storage/slurmdbd":
        return Finding("accounting", False, f"the site has slurmdbd on {host}, slurmctld runs "
                       f"AccountingStorageType={kind or '(none)'}",
                       "set AccountingStorageType=accounting_storage/slurmdbd and restart slurmctld")
    if missing:
        return Finding("accounting", False, f"AccountingStorageTRES lacks {', '.join(missing)}: sacct and sreport "
                       "show no IPUs", "Include the rendered slurm.conf fragment "
                       "(AccountingStorageTRES=gres/ipu,license/ipu), then restart slurmctld")
    if facts.clusters is None:
        return Finding("accounting", False, f"slurmdbd does not answer ({facts.errors.get('slurmdbd')})",
                       f"start slurmdbd on {host} (systemctl start slurmdbd)")
    if site.cluster not in facts.clusters:
        return Finding("accounting", False, f"slurmdbd knows no cluster {site.cluster} "
                       f"({', '.join(facts.clusters) or 'none'})",
                       f"check ClusterName in slurm.conf, or sacctmgr add cluster {site.cluster}")
    return Finding("accounting", True, f"slurmdbd has cluster {site.cluster}, tracking gres/ipu and license/ipu")


def check_service(site: Site, facts: Facts) -> Finding:
    from ..hooks import remover
    from ..hooks.endpoint import socket_path

    if not remover.is_service(remover.holder(site.state_dir)):
        return Finding("service", False, "the hook service is not running: every IPU job's prolog and epilog "
                       "start Python (slower job turnover) and orphans wait for a manual reap",
                       "systemctl enable --now slurm-ipu-reaper")
    if not stat.S_ISSOCK(_lstat_mode(socket_path(site.state_dir))):
        return Finding("service", False, "the hook service runs, but without its hook socket (a slurm-ipu "
                       "older than slurm-ipu-hook?): every IPU job's hooks start Python",
                       "systemctl restart slurm-ipu-reaper")
    stalled = _stalled_pass(site)
    if stalled:
        return Finding("service", False, f"the hook service runs, but {stalled}: a thread is stuck (nothing "
                       "reaped, drained or counted)", "systemctl restart slurm-ipu-reaper, and report the last "
                       f"lines of {site.state_dir}/hooks.log")
    return Finding("service", True, "the hook service runs (slurm-ipu reap --watch) and takes IPU jobs' "
                   "prologs and epilogs on its socket")


def _stalled_pass(site: Site, now: float | None = None) -> str | None:
    """A periodic pass the running service has not ended for three of its intervals (and a
    deadline): in words, or None. Counted from the service's start at the latest (its lock file
    is written then), so a pass a service before it ended long ago is no evidence."""
    from ..hooks import remover, stats

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
    from ..hooks import remover
    from ..hooks.health import drained_by_us

    nodes = {name: (f.get("State", ""), f.get("Reason", "")) for name, f in facts.nodes.items()}
    ours = drained_by_us(nodes)
    if not ours:
        return Finding("drains", True, "no node drained by the health pass")
    shown = ", ".join(f"{n} ({nodes[n][1].split(' [', 1)[0]})" for n in ours[:4]) + \
        (f" and {len(ours) - 4} more" if len(ours) > 4 else "")
    if site.health.interval <= 0 or not remover.is_service(remover.holder(site.state_dir)):
        return Finding("drains", False, f"{len(ours)} node(s) drained by the health pass and no pass to lift them: "
                       f"{shown}", "start the hook service (systemctl enable --now slurm-ipu-reaper), or run "
                       "slurm-ipu health once their IPU-Machines are Up")
    return Finding("drains", True, f"{len(ours)} node(s) drained for failed IPU-Machines, lifted when they are Up: "
                   f"{shown}")


def check_metrics(site: Site, facts: Facts, now: float | None = None) -> Finding:
    """metrics.textfile: in a directory the hook service (slurm.user) can write and no one else
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
        return Finding("metrics", False, f"{folder} is not writable by {site.slurm.user}: the hook service "
                       "cannot write the textfile", f"chown {site.slurm.user} {folder}")
    stale = _stale_textfile(site, path, now)
    if stale:
        return Finding("metrics", False, stale, "check the hook service (journalctl -u slurm-ipu-reaper)")
    return Finding("metrics", True, f"{path} in a directory only {site.slurm.user} and root can write")


def _group_name(grp, gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _stale_textfile(site: Site, path: str, now: float | None) -> str | None:
    """While the service runs it writes the textfile every health.interval: far older is a
    service not writing it (node_exporter would serve the last numbers as current)."""
    from ..hooks import remover

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


def check_pods(site: Site, facts: Facts) -> Finding:
    """Multi-Pod: Slurm keeps jobs inside Pods only with the tree topology, one leaf switch per
    Pod holding exactly its hosts, and a max_switch_wait as long as job_submit.lua asks."""
    from .render import SWITCH_WAIT

    if not site.pods:
        return Finding("pods", True, "one Pod: no topology needed")
    fix = (f"render again and apply slurm.conf.diff (it merges the Pods into the site's own topology.conf) or copy "
           f"the rendered topology.conf, with TopologyPlugin=topology/tree and max_switch_wait={SWITCH_WAIT}; restart "
           "slurmctld")
    plugin = facts.config.get("TopologyPlugin", "")
    if "tree" not in plugin:
        return Finding("pods", False, f"TopologyPlugin={plugin or '(unset)'}: Slurm does not see the Pods", fix)
    m = re.search(r"max_switch_wait=(\d+)", facts.config.get("SchedulerParameters", ""))
    if not m or int(m.group(1)) < SWITCH_WAIT:
        return Finding("pods", False, f"max_switch_wait={m.group(1) if m else '300 (the default)'}: jobs stop "
                       "waiting for their Pods and may straddle them", fix)
    if facts.topology is None:
        return Finding("pods", False, f"cannot read Slurm's topology ({facts.errors.get('topology')})", fix)
    leaves = facts.topology
    wrong = [f"{h} is under {' and '.join(leaves.get(h, ['no switch']))}, not {p.name}" for p in site.pods
             for h in p.hosts if leaves.get(h) != [p.name]]
    # Slurm logs these and goes on: a node in several leaves, or in none (no job starts there)
    wrong += [f"{h} is under leaf switches {' and '.join(ls)}" for h, ls in sorted(leaves.items()) if len(ls) > 1
              and h not in site.hosts and not any(h in p.hosts for p in site.pods)]
    wrong += [f"{n} is under no switch: Slurm finds no path to it" for n in sorted(facts.nodes) if n not in leaves]
    if wrong:
        return Finding("pods", False, "; ".join(wrong[:3]) + (" ..." if len(wrong) > 3 else ""), fix)
    return Finding("pods", True, f"{len(site.pods)} Pods, each one switch of Slurm's topology "
                   f"({', '.join(p.name for p in site.pods)})")


STEP_NAME = "slurm-ipu-doctor-step"


def step_canaries(site: Site, facts: Facts) -> dict[str, str] | None:
    """`doctor --jobs`: what a job's task sees, on a host of each Pod: a 1-IPU srun step as root,
    through job_submit.lua, the prolog, the SPANK plugin on that node (configless nodes get their
    plugstack.conf from slurmctld) and the epilog. host -> 'ok' or what went wrong; None: not root."""
    from ..slurm.commands import SlurmCli

    if os.getuid() != 0:
        return None
    cli = SlurmCli.of_site(site, timeout=90)
    hosts = [pod.hosts[0] for pod in site.pods] or site.hosts[:1]
    return {host: _step(cli, site, host) for host in hosts}


def _step(cli, site: Site, host: str) -> str:
    try:
        text = cli.output("srun", "-N1", "-w", host, "--gres=ipu:1", "--immediate=30", "--time=1",
                          f"--job-name={STEP_NAME}", "/usr/bin/env")
    except SlurmIpuError as exc:
        busy = "Unable to allocate resources" in str(exc) or "busy" in str(exc)
        return f"busy: {exc}" if busy else str(exc)
    env = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    partition = env.get("IPUOF_VIPU_API_PARTITION_ID")
    want = rules.job_name(site.partition.prefix, env.get("SLURM_JOB_ID"))
    if partition is None:
        return "its task saw no IPUOF_VIPU_API_PARTITION_ID (the SPANK plugin is not loaded there)"
    return "ok" if partition == want else f"its task saw IPUOF_VIPU_API_PARTITION_ID={partition}, not {want}"


def check_steps(site: Site, steps: dict[str, str] | None) -> Finding:
    if steps is None:
        return Finding("steps", True, "a 1-IPU step on each Pod: needs root (it runs a job)", skipped=True)
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


CHECKS = (check_slurm, check_hooks, check_timeout, check_job_submit, check_licenses, check_nodes,
          check_plugstack, check_vipu, check_canary, check_merged, check_kept, check_queue, check_grants,
          check_state_dir, check_journal, check_orphans, check_service, check_drains, check_metrics,
          check_accounting,
          check_pods)


def diagnose(site: Site, facts: Facts) -> list[Finding]:
    return [_checked(check, site, facts) for check in CHECKS]


def _checked(check, site: Site, facts: Facts) -> Finding:
    """A check reading what its user may not (the state directory is root's and slurm.user's)
    says so in its one line instead of stopping doctor."""
    try:
        return check(site, facts)
    except PermissionError as exc:
        return Finding(check.__name__.removeprefix("check_"), True, f"{exc.filename or exc}: not readable by uid "
                       f"{os.getuid()} (run doctor as root for this item)", skipped=True)


def main(site_path: str, out=print, jobs: bool = False) -> int:
    from ..config import load, refuse_repeated_keys

    site = load(site_path)
    refuse_repeated_keys(site)
    facts = gather(site)
    findings = diagnose(site, facts)
    if jobs:  # last: its partitions come and go after every other item has read V-IPU
        findings.append(check_steps(site, step_canaries(site, facts)))
    for f in findings:
        out(f.line())
    bad, skipped = sum(not f.ok for f in findings), sum(f.skipped for f in findings)
    ok = len(findings) - bad - skipped
    tail = f", {skipped} skipped (their lines say why)" if skipped else ""
    out(f"{ok} ok, {bad} problem(s){tail}" if bad else f"all {ok} checks ok{tail}")
    return 1 if bad else 0
