"""A job's IPUs per node in a TRES list as Slurm writes it (squeue's tres-per-node, job_submit.lua's
tres_per_node): `gres:ipu:4`, `gres/ipu:4` (23.11's spelling), `gres:ipu` (one), `gres:ipu:mk2:4`
(a type), beside other items. Slurm keeps the last of a repeated GRES. job_submit.lua reads the
same grammar (gres_item in templates/job_submit/job_submit.lua.j2; tests/unit/test_gres.py holds the two
together)."""

from __future__ import annotations

import re

_COUNT = re.compile(r":(\d+)$")


def item_count(item: str, name: str) -> int | None:
    """One item's count when it names the GRES `name` (1 when it gives none), else None."""
    for prefix in (f"gres:{name}", f"gres/{name}"):
        if item.startswith(prefix):
            rest = item[len(prefix):]
            if rest and not rest.startswith(":"):
                return None  # another GRES whose name begins with ours (ipux)
            found = _COUNT.search(rest)
            return int(found.group(1)) if found else 1
    return None


def ipus_per_node(tres: str, name: str = "ipu") -> int:
    """'cpu=1,gres/ipu:16' -> 16; 0 when no item names the GRES."""
    per = 0
    for item in (tres or "").strip().split(","):
        count = item_count(item, name)
        if count is not None:
            per = count
    return per
