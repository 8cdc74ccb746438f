"""Render the Slurm and emulator configuration from templates/ (jinja2, StrictUndefined)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from .. import __version__, rules
from ..errors import ConfigError
from ..pods import CLASS_PREFIX, RUN_PREFIX


def templates_dir() -> Path:
    """$SLURM_IPU_TEMPLATES, else the templates installed with the package (slurm_ipu.templates,
    mapped from the checkout's templates/ by pyproject.toml), else the checkout's own."""
    env = os.environ.get("SLURM_IPU_TEMPLATES")
    if env:
        return Path(env)
    from ..fsutil import shipped_dir

    return shipped_dir("slurm_ipu.templates", "templates")


def render(name: str, context: dict) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["shq"] = shlex.quote  # every path a shell script names, quoted
    env.filters["line"] = one_line  # a value of a key=value line (slurm-ipu-hook.conf)
    try:
        return env.get_template(f"{name}.j2").render(version=__version__, **context)
    except jinja2.TemplateNotFound:
        raise ConfigError(f"template {name}.j2 not found in {templates_dir()}; set SLURM_IPU_TEMPLATES") from None
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"template {name}.j2 needs a value the Pod description lacks: {exc}") from None


def one_line(value) -> str:
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ConfigError(f"{text!r}: a path with a line break cannot be named in slurm-ipu-hook.conf; rename it")
    return text


# doctor's held probe job: job_submit.lua writes its code id into that job's AdminComment, so
# doctor sees which code slurmctld has loaded, not only which file is on disk.
PROBE_NAME = "slurm-ipu-doctor-probe"  # never a job's: those are the prefix and a job id
PROBE_COMMENT = "slurm-ipu-job_submit.lua:"  # + the code id (fragments.code_id); no space: one word in scontrol

# Seconds a job may wait for its Pods (job_submit.lua's --switches); slurm.conf's
# SchedulerParameters=max_switch_wait must be at least this, or Slurm straddles Pods sooner.
SWITCH_WAIT = 31536000


def pod_values(pod_ipus: int) -> dict:
    """What the templates derive from the rule table: valid sizes and the emulator's shape."""
    ilds = max(1, pod_ipus // rules.IPUS_PER_ILD)
    agents = pod_ipus // rules.IPUS_PER_AGENT
    sizes = rules.valid_sizes(pod_ipus)
    # For job_submit.lua: per size, the ILD counts this Pod allows and the GCD counts for each.
    shapes = {s: {"default_ilds": rules.default_ilds(s),
                  "ilds": {n: rules.valid_gcds(s, n) for n in rules.valid_ilds(s, ilds)}} for s in sizes}
    return {"pod_ipus": pod_ipus, "sizes": sizes, "shapes": shapes,
            "emulator": {"ilds": ilds, "agents_per_ild": agents // ilds}, "pods": [], "switch_wait": SWITCH_WAIT,
            "probe_name": PROBE_NAME, "probe_comment": PROBE_COMMENT,
            # a site without the allocation model: no host runs (fragments.placement_values)
            "runs": {}, "run_counts": [1], "hosts_per_pod": 1, "run_prefix": RUN_PREFIX, "host_features": [],
            # hosts alike: no size classes (fragments.class_values)
            "classes": [], "class_prefix": CLASS_PREFIX,
            # one V-IPU controller (fragments.controller_context)
            "controllers": [], "pods_per_job": 0}
