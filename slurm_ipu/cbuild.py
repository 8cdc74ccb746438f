"""Building the small C programs slurm-ipu starts on every job's path (slurm-ipu-hook; the lab's
`vipu`), built where they run like the SPANK plugin.

Why musl first: these programs are started hundreds of times a minute in a storm of short jobs,
and each start pays its C library's own start-up before main(). glibc's runs its CPU feature and
cache probes (cpuid, which traps to the hypervisor on a virtual machine), musl's does almost
nothing. Measured on our 2-core VM, CPU per start of an empty program: dynamic glibc 0.51 ms,
static glibc 0.38 ms, static musl 0.14 ms (docs/performance.md). So: musl-gcc -static where
musl-gcc is (Debian's musl-tools), else gcc -static where glibc's libc.a is, else plain gcc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .errors import ConfigError, SlurmIpuError


def compilers() -> list[list[str]]:
    """The ways to build, cheapest start first: each a compiler command with its linking flag."""
    found = []
    if musl := shutil.which("musl-gcc"):
        found.append([musl, "-static"])
    if gcc := shutil.which("gcc"):
        found += [[gcc, "-static"], [gcc]]
    return found


def build(source: Path, dest: Path, flags: list[str], what: str) -> Path:
    """Compile `source` into `dest` (written whole: a running copy is never overwritten in place),
    by the first of compilers() that succeeds; a fraction of a second."""
    ways = compilers()
    if not ways:
        raise ConfigError(f"gcc not found: it builds {what} (apt-get install gcc musl-tools)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
    for cc in ways:
        proc = subprocess.run([*cc, "-O2", "-std=gnu11", "-Wall", *flags, "-o", str(tmp), str(source)],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            os.replace(tmp, dest)
            return dest
    tmp.unlink(missing_ok=True)
    raise SlurmIpuError(f"building {what} from {source} failed: {proc.stderr.strip()[:300]}")
