"""`slurm-ipu doctor`: the live cluster checked against its site description.

One line per item, `ok` or `PROBLEM` with what is wrong and the fix; exit 1 when anything is
wrong. Everything is read once up front (facts.py: Slurm's running configuration, its nodes, the
jobs, V-IPU's partitions), so a check is a pure function of the site and those facts, and the unit
tests feed facts without a cluster. The checks: Slurm's side (slurmchecks.py), V-IPU's and the
hooks' state (statechecks.py); the canaries they read: canaries.py.
"""

from __future__ import annotations

import os

from ...config import Site
from ...slurm.conf import parse_show_config, plugstack_lines  # noqa: F401 - doctor's, read by tests
from .canaries import CANARY_NAME, ENDING, canary, step_canaries, try_as_job_user  # noqa: F401 - the package's
from .facts import gather, job_states, parse_show_nodes, probe_submit  # noqa: F401 - the package's
from .findings import Charge, Facts, Finding
from .slurmchecks import (
    check_accounting,
    check_hooks,
    check_job_submit,
    check_kept,
    check_licenses,
    check_merged,
    check_nodes,
    check_plugstack,
    check_pods,
    check_slurm,
    check_timeout,
)
from .statechecks import (
    check_canary,
    check_drains,
    check_grants,
    check_journal,
    check_metrics,
    check_orphans,
    check_queue,
    check_service,
    check_state_dir,
    check_steps,
    check_vipu,
)

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


def charge(account: str | None, qos: str | None, partition: str | None) -> Charge:
    """What doctor's test jobs carry: the options, else sbatch's own input variables (an admin's
    SBATCH_ACCOUNT works for doctor as for sbatch), else nothing."""
    def given(value: str | None, name: str) -> str | None:
        return value or os.environ.get(f"SBATCH_{name}") or os.environ.get(f"SLURM_{name}") or None

    return Charge(given(account, "ACCOUNT"), given(qos, "QOS"), given(partition, "PARTITION"))


def main(site_path: str, out=print, jobs: bool = False, account: str | None = None, qos: str | None = None,
         partition: str | None = None) -> int:
    from ...config import load, refuse_repeated_keys

    site = load(site_path)
    refuse_repeated_keys(site)
    facts = gather(site, charge=charge(account, qos, partition))
    findings = diagnose(site, facts)
    if jobs:  # last: its partitions come and go after every other item has read V-IPU
        findings.append(check_steps(site, step_canaries(site, facts), facts.charge))
    for f in findings:
        out(f.line())
    bad, skipped = sum(not f.ok for f in findings), sum(f.skipped for f in findings)
    ok = len(findings) - bad - skipped
    tail = f", {skipped} skipped (their lines say why)" if skipped else ""
    out(f"{ok} ok, {bad} problem(s){tail}" if bad else f"all {ok} checks ok{tail}")
    return 1 if bad else 0
