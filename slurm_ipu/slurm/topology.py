"""`scontrol show topology`: which leaf switch each node hangs off. On a multi-Pod site each
Pod is one leaf switch (topology.conf, rendered from the site description)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .hostlist import expand


def leaf_switches(text: str) -> dict[str, str]:
    """`scontrol show topology` -> {node: leaf switch}. Leaf switches are Level=0."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if words.get("Level") == "0" and words.get("SwitchName") and words.get("Nodes"):
            for host in expand(words["Nodes"]):
                out[host] = words["SwitchName"]
    return out


def leaf_sets(text: str) -> dict[str, list[str]]:
    """`scontrol show topology` -> {node: every leaf switch holding it} (Slurm logs "Multiple leaf
    switches contain nodes" and keeps going: doctor names such a node)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if words.get("Level") == "0" and words.get("SwitchName") and words.get("Nodes"):
            for host in expand(words["Nodes"]):
                out.setdefault(host, []).append(words["SwitchName"])
    return out


@dataclass(frozen=True)
class Switch:
    """A SwitchName line of topology.conf: its leaf nodes or child switches, as written."""
    name: str
    nodes: str | None
    switches: str | None
    path: str
    line: int
    span: int = 1

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def children(self) -> list[str]:
        return expand(self.switches) if self.switches else []


def read_conf(path: str) -> list[Switch]:
    """topology.conf's switches (topology/tree), read as slurmconf reads slurm.conf."""
    from .slurmconf import MAX_BYTES, logical_lines, pairs

    data = Path(path).read_bytes()[:MAX_BYTES + 1]
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path} is over {MAX_BYTES // 1024} KiB; not a topology.conf")
    out = []
    for number, span, line in logical_lines(data.decode("utf-8", "replace")):
        found = {k.lower(): v for k, v in pairs(line)}
        if "switchname" in found:
            out.append(Switch(found["switchname"], found.get("nodes"), found.get("switches"), path, number, span))
    return out
