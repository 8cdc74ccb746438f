"""What doctor reports (Finding: one line per item) and what it reads first (Facts)."""

from __future__ import annotations

from dataclasses import dataclass, field


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


def charged(account: str | None) -> list[str]:
    """The account option of every job doctor submits (a site's job_submit may require one)."""
    return [f"--account={account}"] if account else []


def refused_fix(facts: Facts, fix: str) -> str:
    """The fix for a test job the site refused: where doctor charged it to no account, a site's own
    policy requiring one is the likelier cause, and doctor can be given one."""
    if facts.account:
        return fix
    return (f"{fix}; if the site requires an account (its job_submit says so), run doctor with --account NAME "
            "(or SBATCH_ACCOUNT=NAME)")


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
    account: str | None = None  # the account doctor's test jobs were charged to (--account); None: none
