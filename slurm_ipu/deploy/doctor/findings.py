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
    down: dict[str, str] = field(default_factory=dict)  # several controllers: those that did not answer, why
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
