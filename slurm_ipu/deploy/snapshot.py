"""`slurm-ipu snapshot`: the site's own Slurm, as slurmctld runs it, recorded before adoption, so
that doctor can say afterwards that the site lost nothing.

Text can look right while Slurm runs something else (a NodeName line's Gres= replacing what its
NodeName=DEFAULT line gave, a topology that no longer reaches a node), so what is recorded is
what Slurm reports: each node's GRES, features, CPUs, memory and partitions (`scontrol show
nodes`), the licences (`scontrol show licenses`), each partition's nodes (`show partition`), each
node's leaf switch (`show topology`), and job shapes `sbatch --test-only` accepts (one per
partition, GRES and licence, plus the admin's own). slurm-ipu's own items (the ipu GRES and
licence) are left out, so a snapshot taken after the merge records the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError, SlurmError
from ..fsutil import atomic_write
from ..slurm.hostlist import expand
from ..slurm.refusals import POLICY_REFUSED, site_rule

OURS = "ipu"
SHAPE_NAME = "slurm-ipu-snapshot"  # sbatch --test-only starts nothing; the name says whose it was
NODE_FIELDS = {"CPUTot": "cpus", "RealMemory": "memory", "AvailableFeatures": "features"}


def _fields(line: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def gres_items(value: str) -> list[str]:
    """`gpu:tesla:2(S:0-1),ipu:16` -> ['gpu:tesla:2'] (sockets dropped, ours left out)."""
    out = []
    for item in re.sub(r"\([^)]*\)", "", value or "").split(","):
        item = item.strip()
        if item and item != "(null)" and item.split(":")[0] != OURS:
            out.append(item)
    return sorted(out)


def nodes(text: str) -> dict[str, dict]:
    out = {}
    for line in text.splitlines():
        f = _fields(line)
        if "NodeName" not in f:
            continue
        node = {key: f.get(field, "") for field, key in NODE_FIELDS.items()}
        node["gres"] = gres_items(f.get("Gres", ""))
        node["partitions"] = sorted(p for p in f.get("Partitions", "").split(",") if p and p != "(null)")
        out[f["NodeName"]] = node
    return out


def licences(text: str) -> dict[str, str]:
    return {f["LicenseName"]: f.get("Total", "") for f in map(_fields, text.splitlines())
            if f.get("LicenseName") and f["LicenseName"] != OURS}


def partitions(text: str) -> dict[str, dict]:
    out = {}
    for f in map(_fields, text.splitlines()):
        if "PartitionName" in f:
            names = f.get("Nodes", "")
            out[f["PartitionName"]] = {"nodes": sorted(expand(names)) if names not in ("", "(null)") else [],
                                       "state": f.get("State", "")}
    return out


def default_shapes(taken: dict) -> list[list[str]]:
    """A job the site runs today on each partition that is up, each GRES and each licence."""
    shapes = [["-p", name, "-N1"] for name, p in sorted(taken["partitions"].items()) if p["state"] == "UP"]
    gres = sorted({item.split(":")[0] for node in taken["nodes"].values() for item in node["gres"]})
    shapes += [[f"--gres={name}:1", "-N1"] for name in gres]
    shapes += [["-L", f"{name}:1", "-N1"] for name in sorted(taken["licences"])]
    return shapes


def try_shape(cli, shape: list[str], charge: Sequence[str] = ()) -> str:
    """'ok', or Slurm's first words refusing it (POLICY_REFUSED and the rule when the site's own
    rule refused it: slurm-ipu took nothing away). charge: what doctor's test jobs carry."""
    try:
        cli.output("sbatch", "--test-only", "--time=1", f"--job-name={SHAPE_NAME}", *charge, *shape, "--wrap", "true")
    except SlurmError as exc:
        if rule := site_rule(exc.said):
            return POLICY_REFUSED + rule
        return str(exc).split("failed: ", 1)[-1].removeprefix("sbatch: error: ")
    return "ok"


def record(cli, shapes: list[list[str]] | None = None, charge: Sequence[str] = ()) -> dict:
    """The site's Slurm as it runs now; shapes: the job shapes to try (None: the defaults, plus none)."""
    taken = {"nodes": nodes(cli.output("scontrol", "-o", "show", "nodes")),
             "licences": licences(cli.output("scontrol", "-o", "show", "licenses")),
             "partitions": partitions(cli.output("scontrol", "-o", "show", "partitions"))}
    try:
        from ..slurm.topology import leaf_switches

        taken["switches"] = leaf_switches(cli.output("scontrol", "show", "topology"))
    except SlurmError:
        taken["switches"] = {}  # no topology plugin: nothing to keep
    taken["shapes"] = {" ".join(s): try_shape(cli, s, charge) for s in (shapes if shapes is not None else
                                                                       default_shapes(taken))}
    return taken


def lost(before: dict, now: dict) -> list[str]:
    """What the site had in `before` and does not have now, one phrase each (node and item named)."""
    out = []
    for name, node in sorted(before["nodes"].items()):
        live = now["nodes"].get(name)
        if live is None:
            out.append(f"node {name} is gone")
            continue
        missing = [g for g in node["gres"] if g not in live["gres"]]
        if missing:
            has = ",".join(live["gres"]) or "none"
            out.append(f"node {name} lost Gres {','.join(missing)} (has {has} besides ipu)")
        for key in ("cpus", "memory", "features"):
            if node[key] != live[key]:
                out.append(f"node {name} {key} {node[key]} -> {live[key]}")
        gone = [p for p in node["partitions"] if p not in live["partitions"]]
        if gone:
            out.append(f"node {name} left partition {','.join(gone)}")
        if name in before["switches"] and name not in now["switches"]:
            out.append(f"node {name} is under no switch of the topology (was {before['switches'][name]})")
    for name, total in sorted(before["licences"].items()):
        if now["licences"].get(name) != total:
            out.append(f"licence {name} {total} -> {now['licences'].get(name, 'gone')}")
    for name, part in sorted(before["partitions"].items()):
        live = now["partitions"].get(name)
        if live is None or live["state"] != part["state"]:
            out.append(f"partition {name} {part['state']} -> {live['state'] if live else 'gone'}")
    for shape, said in sorted(before["shapes"].items()):
        if said == "ok" and now["shapes"].get(shape) != "ok" and not policy_refused(now, shape):
            out.append(f"`sbatch {shape}` was accepted, now: {now['shapes'].get(shape, 'not tried')}")
    return out


def policy_refused(now: dict, shape: str) -> str | None:
    """The site's own rule that refused a shape now (not something slurm-ipu took away)."""
    said = now["shapes"].get(shape, "")
    return said.removeprefix(POLICY_REFUSED) if said.startswith(POLICY_REFUSED) else None


def save(taken: dict, path: str) -> None:
    atomic_write(Path(path), json.dumps(taken, indent=1, sort_keys=True) + "\n", 0o644)


def load(path: str) -> dict | None:
    """The snapshot at path; None when there is none; ConfigError when it is not one."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"snapshot: {path} is not a snapshot ({exc}); record it again: slurm-ipu snapshot") from None
    if not isinstance(doc, dict) or not {"nodes", "licences", "partitions", "switches", "shapes"} <= set(doc):
        raise ConfigError(f"snapshot: {path} is not a snapshot; record it again: slurm-ipu snapshot")
    return doc


def main(site, shapes: list[str], out=print) -> int:
    import shlex

    from ..slurm.commands import SlurmCli

    cli = SlurmCli.of_site(site, timeout=30)
    path = site.path("snapshot")
    earlier = load(path) or {"shapes": {}}
    taken = record(cli, None)
    for shape in [*earlier["shapes"], *(" ".join(shlex.split(t)) for t in shapes)]:  # the admin's, kept
        if shape not in taken["shapes"]:
            taken["shapes"][shape] = try_shape(cli, shape.split())
    save(taken, path)
    refused = [s for s, said in taken["shapes"].items() if said != "ok"]
    out(f"snapshot: {path}: {len(taken['nodes'])} nodes, {len(taken['partitions'])} partitions, "
        f"{len(taken['licences'])} licences, {len(taken['shapes']) - len(refused)} job shapes Slurm accepts")
    for shape in refused:
        out(f"snapshot: `sbatch {shape}` is refused today ({taken['shapes'][shape]}): not compared")
    return 0
