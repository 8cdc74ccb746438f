"""Building slurm-ipu's C where it runs, as the SPANK plugin is: every C program is a target of the
one Makefile of the C tree (spank/Makefile), and Python only says which and where.

The C tree is `spank/` in a checkout; pyproject.toml ships it inside the package as
`slurm_ipu.csrc`, so an installed slurm-ipu builds (and `doctor` checks) the hook without the
checkout. Which compiler, which flags, static or not (musl first: its start costs a third of
glibc's) is the Makefile's to say, once.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .errors import ConfigError, SlurmIpuError

MAKE_TIMEOUT = 180  # a program is a second's work; a driver of several sources a few


def c_tree() -> Path:
    """The C tree and its Makefile: the package's copy (slurm_ipu.csrc, mapped from spank/ by
    pyproject.toml), else the checkout's spank/ (a checkout never installed)."""
    from .fsutil import shipped_dir

    return shipped_dir("slurm_ipu.csrc", "spank")


def make(target: str, dest: Path, what: str, defs: Sequence[str] = (), **variables: str) -> Path:
    """`make TARGET` of the C tree into `dest`, built in a directory beside it and moved in whole:
    a running copy is never overwritten in place, a failed build never replaces a working one.
    defs: -D flags (each passed to the compiler as one word); variables: more make variables."""
    if shutil.which("make") is None:
        raise ConfigError(f"make not found: it builds {what} (apt-get install make gcc musl-tools)")
    dest = Path(os.path.abspath(dest))  # make runs in the C tree: a relative O would land there
    dest.parent.mkdir(parents=True, exist_ok=True)
    tree = c_tree()
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as out:
        argv = ["make", "-s", "-C", str(tree), target, f"O={out}",
                "DEFS=" + " ".join(shlex.quote(d) for d in defs), *(f"{k}={v}" for k, v in variables.items())]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=MAKE_TIMEOUT)
        built = Path(out) / (variables.get("NAME") or _PRODUCTS[target])
        if proc.returncode != 0 or not built.is_file():
            lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("make")]
            raise SlurmIpuError(f"building {what} (make {target} in {tree}) failed: "
                                f"{' / '.join(lines[-3:])[:300] or proc.returncode}")
        os.replace(built, dest)
    return dest


# What each target writes into O (spank/Makefile); `driver` writes its NAME.
_PRODUCTS = {"hook": "slurm-ipu-hook", "vipu-fast": "vipu-fast", "rawsubmit": "rawsubmit"}
