"""What the Debian packages carry that is built or rendered, not copied (templates/debian/rules runs
this at build time): slurm-ipu-hook, the site description they ship as a conffile (the option
table's example with install.prefix /usr, the packages' layout) and the slurm-ipu service's unit
rendered from it. Every value comes from the same table and templates as `make install`'s.

    python3 -m slurm_ipu.deploy.packaging OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path


def write(out: Path) -> None:
    from ..config import parse
    from ..fsutil import atomic_write
    from ..hooks.transport import build_hook
    from . import example, fragments

    out.mkdir(parents=True, exist_ok=True)
    text = example.packaged_yaml()
    atomic_write(out / "site.yaml", text, 0o644)
    site = parse(text, "/etc/slurm-ipu/site.yaml", None, None)
    atomic_write(out / "slurm-ipu.service", fragments.texts(site)["slurm-ipu.service"], 0o644)
    build_hook(out / "slurm-ipu-hook")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
