"""Bounds on what a job brings to slurmctld and its controller hooks, enforced by job_submit.lua
at submit and modify (docs/slurm.md, "Bounded job input").

Why: slurmctld copies these fields into every PrologSlurmctld/EpilogSlurmctld environment, and
Slurm 22.05 dies on a large one (a 1.5 MB spank_job_env entry segfaults slurmctld in its
scheduler thread on every restart until the job is cancelled; 100 KB was fine); Linux refuses to
exec a program with any one environment string over 128 KiB (MAX_ARG_STRLEN), which fails the
hook. The bounds sit well below both and far above what a job needs.
"""

from __future__ import annotations

FIELD_BYTES = 16 * 1024    # any one string field below
SPANK_BYTES = 64 * 1024    # all of the job's SPANK environment (spank_job_env) together
SPANK_ITEMS = 128          # its entries

# The SPANK plugin's counts as the job carries them (spank_job_env entry -> the option it came
# from): a positive number of at most COUNT_DIGITS digits, checked at submit (job_submit.lua) by
# the rule the prolog applies (hooks/jobenv.py), so a raw libslurm submit of anything else is
# refused there, never carried into the prolog's logs.
SPANK_COUNTS = {"IPU_IPUS": "--ipus", "IPU_GCDS": "--ipu-gcds", "IPU_ILDS": "--ipu-ilds"}
COUNT_DIGITS = 9


def positive_count(raw: str) -> bool:
    return 0 < len(raw) <= COUNT_DIGITS and raw.isascii() and raw.isdigit() and int(raw) > 0


# job_desc fields (job_submit.lua's names) slurmctld hands the controller hooks as SLURM_JOB_*
# variables, or keeps per job and shows in every `scontrol show job`.
HOOK_FIELDS = ("name", "comment", "admin_comment", "work_dir", "std_out", "std_err", "std_in", "account", "wckey",
               "partition", "reservation", "qos", "features", "licenses", "dependency", "mail_user", "burst_buffer",
               "extra", "container")


def lua_values() -> dict:
    return {"field_bytes": FIELD_BYTES, "spank_bytes": SPANK_BYTES, "spank_items": SPANK_ITEMS,
            "fields": HOOK_FIELDS, "spank_counts": SPANK_COUNTS, "count_digits": COUNT_DIGITS}
