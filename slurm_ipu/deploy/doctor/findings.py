"""What doctor reports (Finding: one line per item) and what it reads first (Facts)."""

from __future__ import annotations

import re
from collections.abc import Sequence
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


@dataclass(frozen=True)
class Charge:
    """What every job doctor submits carries, so a site's own policy lets it through: its job_submit
    or its associations may require an account, a QOS or a partition. `found`: where the account came
    from when doctor was not given one (the association of the user running it)."""
    account: str | None = None
    qos: str | None = None
    partition: str | None = None
    found: str = ""

    def options(self) -> list[str]:
        return [f"--{k}={v}" for k, v in (("account", self.account), ("qos", self.qos),
                                          ("partition", self.partition)) if v]

    def said(self) -> str:
        return " ".join(self.options()) + (f" ({self.found})" if self.found else "") or "no account, QOS or partition"


GIVE = "--account, --qos, --partition (or SBATCH_ACCOUNT, SBATCH_QOS, SBATCH_PARTITION)"
# Slurm's own refusals that come from the site's accounts, QOS and partitions, not from slurm-ipu
# (src/common/slurm_errno.c): the probe is then not tried, and doctor says what to give it.
POLICY = re.compile(r"Invalid (account|qos|partition)|account/partition combination|not permitted to use this "
                    r"partition|Access/permission denied|Job violates accounting/QOS policy|User's group not permitted",
                    re.I)


POLICY_REFUSED = "refused by the site's rule: "  # a step canary's result when site_rule found one
FAILED = ("Batch job submission failed", "Unable to allocate resources", "Job submit/allocate failed")


def site_rule(said: Sequence[str] | str | None) -> str | None:
    """The site's own rule in what Slurm said refusing doctor's test job (its lines), or None when
    the refusal is slurm-ipu's or Slurm's for a reason of slurm-ipu's (a GRES it does not know). A
    job_submit's message is a line of its own before the command's `Batch job submission failed`;
    Slurm's own policy refusals are that line's reason."""
    lines = said.splitlines() if isinstance(said, str) else list(said or ())
    text = [line.rsplit("error: ", 1)[-1].strip() for line in lines if line.strip()]
    if not text or any("slurm-ipu" in line for line in text):
        return None
    failed = [n for n, line in enumerate(text) if line.startswith(FAILED)]
    if failed and failed[0] > 0:
        return text[failed[0] - 1][:200]  # the site's job_submit said it
    found = next((line for line in text if POLICY.search(line)), None)
    return found[:200] if found else None


def policy_skip(item: str, rule: str, charge: Charge) -> Finding:
    """A test job the site's own rule refused: not slurm-ipu's fault, and not checked."""
    return Finding(item, True, f"not tried: the site's own policy refused doctor's test job ({rule!r}; it carried "
                   f"{charge.said()}): give doctor what the rule asks with {GIVE}", skipped=True)


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
    charge: Charge = field(default_factory=Charge)  # what doctor's test jobs carry
    refusals: dict[str, tuple[str, ...]] = field(default_factory=dict)  # test job -> Slurm's lines refusing it
