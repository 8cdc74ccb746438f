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


def _plugstack_text(path: str) -> list[tuple[str, str]]:
    """plugstack.conf's lines without comments and blanks, each with what it includes ('' for a
    plugin line); [] when the file cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            words = line.split(None, 1)
            out.append((line, words[1].strip() if words[0] == "include" and len(words) > 1 else ""))
    return out


def plugstack_entries(path: str, depth: int = 0) -> list[tuple[str, str]]:
    """(file, line) of each non-comment line plugstack.conf stands for, its `include` globs followed
    as Slurm follows them: a relative pattern is read beside the file that includes it
    (src/common/spank.c, _spank_conf_include), never against the reader's working directory."""
    out = []
    for line, included in _plugstack_text(path):
        if line.startswith("include") and depth < 4:
            pattern = included if not included or included.startswith("/") else \
                str(Path(path).parent / included)
            for inc in sorted(glob.glob(pattern)) if pattern else ():
                out += plugstack_entries(inc, depth + 1)
        else:
            out.append((path, line))
    return out


def plugstack_lines(path: str) -> list[str]:
    """Non-comment lines of plugstack.conf, with its `include` globs followed (plugstack_entries)."""
    return [line for _, line in plugstack_entries(path)]


def sent_plugstack_lines(path: str, version: str) -> list[str]:
    """The plugstack lines a configless node gets: plugstack.conf itself, and from 23.11 what it
    includes by a plain name beside it (slurmctld sends no absolute path and no glob)."""
    from .releases import at_least

    out = []
    for line, included in _plugstack_text(path):
        if not line.startswith("include"):
            out.append(line)
        elif at_least(version, "23.11") and included and "/" not in included and "*" not in included:
            out += [line for _, line in plugstack_entries(str(Path(path).parent / included), 1)]
    return out
