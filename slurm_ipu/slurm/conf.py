"""Slurm's configuration as slurm-ipu reads it: `scontrol show config` and plugstack.conf with its
includes (doctor checks them; uninstall refuses while they name what it removes)."""

from __future__ import annotations

import glob
import re
from pathlib import Path


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config`: `Key  = value` lines (the header and blank lines skipped). Keys
    listed one per script (`PrologSlurmctld[0]`, from 24.11: src/api/config_info.c) are joined
    under their name with commas."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        indexed = re.fullmatch(r"(\w+)\[\d+\]", key)
        if indexed:
            key = indexed.group(1)
            value = f"{out[key]},{value.strip()}" if key in out else value
        out[key] = value.strip()
    return out


def plugstack_lines(path: str, depth: int = 0) -> list[str]:
    """Non-comment lines of plugstack.conf, with its `include` globs followed (as Slurm does)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include") and depth < 4:
            for inc in sorted(glob.glob(line.split(None, 1)[1].strip())):
                out += plugstack_lines(inc, depth + 1)
        elif line:
            out.append(line)
    return out


def sent_plugstack_lines(path: str, version: str) -> list[str]:
    """The plugstack lines a configless node gets: plugstack.conf itself, and from 23.11 what it
    includes by a plain name beside it (slurmctld sends no absolute path and no glob)."""
    from .releases import at_least

    try:
        text = Path(path).read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include"):
            name = line.split(None, 1)[1].strip() if len(line.split()) > 1 else ""
            if at_least(version, "23.11") and name and "/" not in name and "*" not in name:
                out += plugstack_lines(str(Path(path).parent / name), 1)
        elif line:
            out.append(line)
    return out
