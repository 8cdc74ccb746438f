"""Reading the cluster once, up front: Slurm's running configuration, nodes and jobs, V-IPU's
partitions, the journal; job_submit.lua tried on a held probe job. Every check is then a pure
function of the site and these facts."""

from __future__ import annotations

import os
import time

from ...config import Site
from ...errors import SlurmError, SlurmIpuError
from ...slurm import slurmconf
from ...slurm.conf import parse_show_config
from ..render import PROBE_NAME
from .canaries import ENDING, NotTried, _quiet, canary, try_as_job_user
from .findings import Charge, Facts


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


def gather(site: Site, runner=None, charge: Charge | None = None) -> Facts:
    from ...slurm.commands import SlurmCli

    facts = Facts(charge=charge or Charge())
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
        from ...slurm.topology import leaf_sets

        text = slurm("topology", "scontrol", "show", "topology")
        facts.topology = leaf_sets(text) if text is not None else None
    if site.accounting.slurmdbd_host:
        text = slurm("slurmdbd", "sacctmgr", "-n", "-P", "list", "cluster", "format=cluster")
        facts.clusters = text.split() if text is not None else None
        if facts.charge.account is None and text is not None:
            facts.charge = _default_account(cli, facts.charge)
    conf = facts.config.get("SLURM_CONF") or site.slurm_conf
    try:
        facts.declared = slurmconf.read(conf).settings
    except SlurmIpuError as exc:
        facts.errors["declared"] = str(exc)
    _gather_kept(site, cli, facts)
    try:
        cli.output("sbatch", "--test-only", *facts.charge.options(), "-N1", "--gres=ipu:1", "--time=1",
                   "--job-name", PROBE_NAME, "--wrap", "true")
        facts.test_submit = "ok"
    except SlurmError as exc:
        facts.test_submit, facts.refusals["test_submit"] = str(exc), exc.said
    try:
        from ...hooks.reap import job_objects

        # The journal before the listing and the jobs after it: a partition on its way out (its job
        # ended, the slurm-ipu service removing it) is never taken for an orphan (check_orphans).
        facts.queued = _queued_names(site)
        if len(site.controllers) > 1:
            _each_controller(site, facts, job_objects)
        else:
            facts.partitions = job_objects(site, site.vipu_client(), time.monotonic() + 20)
        facts.jobs_after = _jobs_again(cli)
        if len(site.controllers) == 1 and os.getuid() == 0:
            try:
                facts.canary = canary(site)
            except NotTried as exc:
                facts.errors["canary"] = str(exc)
        elif os.getuid() != 0:
            facts.errors["canary"] = f"needs root (it acts as slurm.user {site.slurm.user})"
        if len(site.controllers) == 1:
            facts.user_create = try_as_job_user(site, site.vipu_client())
    except SlurmIpuError as exc:
        facts.errors["vipu"] = str(exc)
    except Exception as exc:  # doctor reports; it does not crash on one broken part
        facts.errors["vipu"] = f"{type(exc).__name__}: {exc}"
    if os.getuid() == 0:
        try:
            facts.probe = probe_submit(cli, facts.slurm_version or site.slurm.version, facts.charge)
        except SlurmIpuError as exc:
            facts.errors["probe"] = str(exc)
            facts.refusals["probe"] = getattr(exc, "said", ())
    return facts


def _default_account(cli, charge: Charge) -> Charge:
    """The default account of the user running doctor, from its association: what sbatch charges
    a job without -A to, named, since a site's job_submit may refuse a job that names none."""
    import pwd
    from dataclasses import replace

    user = pwd.getpwuid(os.getuid()).pw_name
    text = cli.output_or_none(None, "", "sacctmgr", "-n", "-P", "show", "user", user, "format=defaultaccount")
    account = next(iter((text or "").split()), "")  # one line, one word: an account name has no blank
    return replace(charge, account=account, found=f"{user}'s default account") if account else charge


def probe_submit(cli, version: str, charge: Charge) -> dict:
    """job_submit.lua as slurmctld runs it, not as its file reads: a held 1-IPU job named
    PROBE_NAME (never started, cancelled at once) must get the ipu licence (our job_submit ran) and
    the code id of the loaded job_submit.lua in its AdminComment, and a GRES update of it must be
    refused (our job_modify ran: a site's job_modify that skips it lets a job's IPUs change
    while its licence, and so its partition, stays)."""
    from ...errors import SlurmError
    from ...slurm.releases import tres_prefix

    cli.output_or_none(None, "", "scancel", f"--name={PROBE_NAME}", "--state=PENDING")  # a killed doctor's
    job = cli.output("sbatch", "--parsable", "--hold", *charge.options(), f"--job-name={PROBE_NAME}",
                     "--gres=ipu:1", "-N1", "--time=1", "-o", "/dev/null", "--wrap", "true").strip().split(";")[0]
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
    from .. import snapshot

    try:
        facts.snapshot = snapshot.load(site.path("snapshot"))
        if facts.snapshot is not None:
            facts.kept = snapshot.record(cli, [shape.split() for shape in facts.snapshot["shapes"]],
                                         facts.charge.options())
    except SlurmIpuError as exc:
        facts.errors["kept"] = str(exc)


def _stuck(text: str) -> list[int]:
    """IPU jobs Slurm will never start as it is configured now: pending for BadConstraints (no node
    has the IPUs they ask for; after an un-merge, every one)."""
    from ...slurm.commands import parse_squeue

    return sorted(j.job_id for j in parse_squeue(text).values()
                  if j.state == "PENDING" and j.reason == "BadConstraints" and "ipu" in j.tres)


def job_states(text: str) -> dict[int, str]:
    """`squeue --json` -> {job: base state}, COMPLETING for a job whose epilog has not ended (one
    word up to data_parser v0.0.39, a flag beside the base state from v0.0.40)."""
    from ...slurm.commands import parse_squeue

    return {job_id: ENDING if ENDING in job.flags else job.state for job_id, job in parse_squeue(text).items()}


def _jobs_again(cli) -> dict[int, str] | None:
    """The second look at the jobs (None when it fails: the first one's error is what doctor reports)."""
    text = cli.output_or_none(None, "jobs", "squeue", "--json")
    try:
        return job_states(text) if text is not None else None
    except SlurmIpuError:
        return None


def _each_controller(site, facts: Facts, job_objects) -> None:
    """A site of several V-IPU controllers: each one's job objects, canary and job user's create,
    one controller at a time; one that does not answer is named (facts.down) and the others are
    still checked. The findings say the first controller that failed each check."""
    facts.partitions, facts.down = [], {}
    creates = []
    for controller in site.controllers:
        client = site.vipu_client(controller)
        try:
            with _quiet():  # the finding names the controller and says why: one line
                facts.partitions += job_objects(site, client, time.monotonic() + 20)
        except SlurmIpuError as exc:
            facts.down[controller.name] = str(exc)
            continue
        if os.getuid() == 0:
            try:
                found = canary(site, controller)
            except NotTried as exc:
                found = None
                facts.errors.setdefault("canary", f"V-IPU controller {controller.name}: {exc}")
            if found is not None and (facts.canary in (None, "ok")):
                facts.canary = found if found == "ok" else f"V-IPU controller {controller.name}: {found}"
        creates.append(try_as_job_user(site, client, controller))
    if facts.down:
        facts.errors["vipu"] = "; ".join(f"V-IPU controller {n}: {e}" for n, e in facts.down.items())
        if len(facts.down) == len(site.controllers):
            facts.partitions = None
    creates = [c for c in creates if c is not None]
    facts.user_create = next((c for c in creates if c != "refused"), "refused" if creates else None)


def _queued_names(site: Site) -> list[str] | None:
    try:
        return [q.get("partition") for q in _queued(site)]
    except OSError:  # not readable by this user: check_journal says so
        return None


def _queued(site: Site) -> list[dict]:
    from ...hooks.journal import Journal

    return Journal(site.state_dir).entries()
