"""What differs between the Slurm releases slurm-ipu supports, in one place.

Each entry names the release it starts at; docs/slurm.md says how each was measured (the lab on
Debian 12's 22.05, Debian 13's 24.11 in a chroot: `CLEAN_ROOM_SUITE=trixie make slurm-24.11`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

# The releases a site description may name. 22.05 (Debian 12), 24.11 (Debian 13) and 26.05
# (Debian unstable) run the real-Slurm tier in CI; the releases between them take the
# behaviours below from the release each starts at.
SUPPORTED = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")


def release(version: str) -> str:
    """'24.11.5' -> '24.11'."""
    return ".".join(version.split(".")[:2])


def at_least(version: str, first: str) -> bool:
    return tuple(int(x) for x in release(version).split(".")) >= tuple(int(x) for x in first.split("."))


def tres_prefix(version: str) -> str:
    """How Slurm spells a GRES in TRES strings (`scontrol show job`'s TresPerNode, job_submit.lua's
    tres_per_node): `gres:ipu:4` up to 23.02, `gres/ipu:4` from 23.11."""
    return "gres/" if at_least(version, "23.11") else "gres:"


def has_tres_per_task(version: str) -> bool:
    """`--tres-per-task` (a second way to name a GRES, which job_submit.lua must refuse for ipu)
    exists from 23.02 (src/common/slurm_opt.c)."""
    return at_least(version, "23.02")


def runs_every_controller_script_line(version: str) -> bool:
    """PrologSlurmctld/EpilogSlurmctld on several lines: from 24.05 slurmctld runs every line (in
    parallel, the job released when the first ends: prep.c counts one prolog per plugin); before,
    the last line replaces the others. A comma list is one path on every release (22.05 then runs
    none, 23.02+ does not start). src/common/read_config.c, S_P_ARRAY from 24.05."""
    return at_least(version, "24.05")


def has_or_licences(version: str) -> bool:
    """`-L 'a:1|b:1'` (one of several licences) from 25.05: job_submit.lua refuses it for ipu."""
    return at_least(version, "25.05")


# The data_parser plugins each release ships (src/plugins/data_parser/ at its tag); the last is
# what a plain `squeue --json` prints. 22.05 has none: its --json is the openapi plugin's v0.0.38.
_DATA_PARSERS = {
    "23.02": ("v0.0.39",), "23.11": ("v0.0.39", "v0.0.40"), "24.05": ("v0.0.39", "v0.0.40", "v0.0.41"),
    "24.11": ("v0.0.40", "v0.0.41", "v0.0.42"), "25.05": ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43"),
    "25.11": ("v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44"), "26.05": ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"),
}


def data_parsers(version: str) -> tuple[str, ...]:
    """The `squeue --json=<version>` formats this release can print (never pinned by slurm-ipu:
    the parser reads them all)."""
    return _DATA_PARSERS.get(release(version), ())


def cgroup_conf(version: str) -> str | None:
    """The lab's cgroup.conf, or None for none. From 24.05 slurmd will not start without a cgroup
    filesystem unless cgroup.conf says `CgroupPlugin=disabled`, a value 22.05 refuses; the lab
    needs no cgroup (proctrack/linuxproc, task/affinity)."""
    if not at_least(version, "24.05"):
        return None
    return "# The lab's cgroup.conf (slurm-ipu lab up): no cgroup plugin, so no cgroup filesystem needed.\n" \
           "CgroupPlugin=disabled\n"


def installed(sbin: str | Path = "/usr/sbin") -> str | None:
    """The release of the Slurm installed on this host ('24.11.5'), from `slurmctld -V`."""
    try:
        proc = subprocess.run([str(Path(sbin) / "slurmctld"), "-V"], capture_output=True, text=True, timeout=15,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = proc.stdout.split()
    return words[-1] if proc.returncode == 0 and words else None
