"""`scontrol show topology`: which leaf switch each node hangs off. On a multi-Pod site each
Pod is one leaf switch (topology.conf, rendered from the site description)."""

from __future__ import annotations

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
