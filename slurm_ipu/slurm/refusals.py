"""Whose rule refused a job: Slurm's commands print a job_submit plugin's message on a line of
its own before their own `Batch job submission failed` (or `allocation failure`, `Unable to
allocate resources`), and the site's accounts, QOS and partitions refuse in Slurm's own words.
doctor and the snapshot use it to tell a site's policy from something slurm-ipu broke."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Slurm's own refusals that come from the site's accounts, QOS and partitions, not from slurm-ipu
# (src/common/slurm_errno.c): the probe is then not tried, and doctor says what to give it.
POLICY = re.compile(r"Invalid (account|qos|partition)|account/partition combination|not permitted to use this "
                    r"partition|Access/permission denied|Job violates accounting/QOS policy|User's group not permitted",
                    re.I)


POLICY_REFUSED = "refused by the site's rule: "  # a test job's result when site_rule found one
FAILED = ("Batch job submission failed", "Unable to allocate resources", "Job submit/allocate failed",
          "allocation failure")


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


