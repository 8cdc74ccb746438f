"""The Slurm this node runs, for building against it: its prefix, its release and its headers.

Sites run Debian's slurm-wlm (prefix /usr, headers from libslurm-dev) or a Slurm they built
(often under /opt/slurm or /usr/local). `make install` builds the SPANK plugin against the
headers of exactly that Slurm and installs none itself: a SPANK plugin is loaded only
by the release it was compiled for (src/common/plugin.c compares major and minor), and a second
Slurm from apt beside a site's own is an outage waiting for a PATH change.

Found, in order: the prefix the admin names (SLURM_PREFIX); the running daemons' executables
(/proc/PID/exe of slurmctld, slurmd); the commands on PATH. The release is the daemon's own
`-V`; the headers' is slurm_version.h's SLURM_VERSION_NUMBER.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, SlurmError
from . import releases

DAEMONS = ("slurmctld", "slurmd")
COMMANDS = ("slurmd", "slurmctld", "srun")  # srun -V reads the configuration first: a last resort
SEARCH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class NodeSlurm:
    prefix: str
    version: str   # '22.05.8', what the node's Slurm says of itself
    program: str   # the executable that said it
    include: str   # the directory holding slurm/spank.h

    @property
    def plugin_dir(self) -> str:
        """Where this Slurm keeps its own plugins (its compiled-in PluginDir, libdir/slurm; Debian's
        /usr/lib/<multiarch>/slurm-wlm): the first candidate holding auth_munge.so, else the first
        that exists, else libdir/slurm. The SPANK plugin goes beside them."""
        root = Path(self.prefix)
        candidates = [root / "lib" / "slurm", root / "lib64" / "slurm",
                      *sorted(root.glob("lib/*-linux-gnu*/slurm-wlm")), *sorted(root.glob("lib/*-linux-gnu*/slurm"))]
        found = [c for c in candidates if (c / "auth_munge.so").is_file()] or [c for c in candidates if c.is_dir()]
        return str((found or candidates)[0])

    @property
    def cflags(self) -> list[str]:
        """-I for headers outside the compiler's own search path (an explicit -I/usr/include would
        reorder glibc's #include_next)."""
        return [] if self.include == "/usr/include" else [f"-I{self.include}"]


def running(proc: Path = Path("/proc")) -> list[str]:
    """The executables of the Slurm daemons running here."""
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() in DAEMONS:
                found.append(os.readlink(entry / "exe").removesuffix(" (deleted)"))
        except OSError:
            continue
    return sorted(set(found))


def _on_path(path: str) -> list[str]:
    return [found for name in COMMANDS if (found := shutil.which(name, path=path))]


def _version(program: str) -> str | None:
    from .commands import SlurmCli

    try:
        words = SlurmCli(None, str(Path(program).parent), 15).output(Path(program).name, "-V").split()
    except SlurmError:
        return None
    # `slurm 24.11.5`; Debian's `slurm-wlm 22.05.8`. Clients read the configuration first, daemons do not.
    ok = len(words) == 2 and words[0] in ("slurm", "slurm-wlm")
    return words[1] if ok and re.fullmatch(r"\d+\.\d+\.\d+\S*", words[1]) else None


def header_version(include: str) -> str | None:
    """'22.05.8' from include/slurm/slurm_version.h (SLURM_VERSION_NUMBER 0xMMmmuu)."""
    try:
        text = (Path(include) / "slurm" / "slurm_version.h").read_text()
    except OSError:
        return None
    found = re.search(r"#define\s+SLURM_VERSION_NUMBER\s+0x([0-9a-fA-F]+)", text)
    if not found:
        return None
    number = int(found.group(1), 16)
    return f"{number >> 16}.{(number >> 8) & 0xff:02d}.{number & 0xff}"


def find(prefix: str = "", proc: Path = Path("/proc"), path: str | None = None) -> NodeSlurm:
    """The node's Slurm, its headers checked to be of its release; ConfigError (one line) if not."""
    if prefix:
        base = Path(prefix)
        programs = [str(base / d / n) for d in ("sbin", "bin") for n in COMMANDS if (base / d / n).is_file()]
        if not programs:
            raise ConfigError(f"install: SLURM_PREFIX={prefix} has no sbin/slurmd, sbin/slurmctld or bin/srun; "
                              "name the directory Slurm was installed into (its --prefix)")
    else:
        programs = running(proc) or _on_path(path if path is not None else f"{os.environ.get('PATH', '')}:{SEARCH}")
        if not programs:
            raise ConfigError("install: no Slurm on this node (no slurmctld or slurmd running, no slurmd, slurmctld or "
                              "srun on PATH); install slurm-ipu after Slurm, or name it: make install "
                              "SLURM_PREFIX=/opt/slurm")
    program = programs[0]
    version = _version(program)
    if version is None:
        raise ConfigError(f"install: {program} -V does not say its Slurm release; name the Slurm this node runs: "
                          "make install SLURM_PREFIX=/its/prefix")
    root = Path(prefix) if prefix else Path(program).resolve().parent.parent
    return _checked(NodeSlurm(str(root), version, program, str(root / "include")))


def _checked(node: NodeSlurm) -> NodeSlurm:
    if not (Path(node.include) / "slurm" / "spank.h").is_file():
        debian = " (Debian: apt-get install libslurm-dev, of the same version)" if node.prefix == "/usr" else ""
        raise ConfigError(f"install: Slurm {node.version} ({node.program}) has no headers at "
                          f"{node.include}/slurm/spank.h; install that Slurm's development headers{debian}, or "
                          "name the prefix that has them: make install SLURM_PREFIX=/its/prefix")
    theirs = header_version(node.include)
    if theirs is None or releases.release(theirs) != releases.release(node.version):
        raise ConfigError(f"install: {node.include}/slurm/slurm_version.h is Slurm {theirs or 'of no version'}, but "
                          f"this node runs {node.version} ({node.program}); a SPANK plugin loads only in the release "
                          f"it was built for: install {releases.release(node.version)}'s headers, or set SLURM_PREFIX "
                          "to the Slurm this node runs")
    return node


def main(argv: list[str]) -> int:
    """`python -m slurm_ipu.slurm.installation [PREFIX]`: make install's first step, run by the
    system Python before anything is written, so a node without its Slurm's headers changes nothing."""
    import sys

    from ..cli_common import run_main

    def body() -> int:
        node = find(argv[0] if argv else "")
        print(f"install: Slurm {node.version} ({node.program}), headers {node.include}/slurm", file=sys.stderr)
        return 0

    return run_main(body, program="slurm-ipu")


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
