"""A site's own slurm.conf, read as Slurm reads it (src/common/parse_config.c): `Key=Value` pairs,
several to a line, keys case-insensitive, `#` to the end of a line, a trailing `\\` joining the
next line, and `Include PATH` (a glob, relative to slurm.conf's directory) read in place. Node,
partition and other multi-line records are not global settings and are skipped.

render merges its fragment's list-valued keys with the values read here; doctor compares what the
files declare with what slurmctld runs (`scontrol show config`)."""

from __future__ import annotations

import glob
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError

# How `render`'s merge marks a site's line whose pairs moved into slurm-ipu.conf: what follows the
# mark is the moved pairs, read back as the site's own (so a re-render merges the same values).
MARK = "slurm-ipu merged into slurm-ipu.conf:"
# The end of a line the merge added to a site's file (a switch in its topology.conf): un-merge drops it.
ADDED = "# slurm-ipu added"
# The line above each line the merge changed: the site's own line as it was before slurm-ipu, kept
# through every re-render, so an un-merge gives it back byte for byte however often it merged.
WAS = "#slurm-ipu-was: "
RECORDS = {"nodename", "partitionname", "nodeset", "downnodes", "frontendname", "switchname", "slurmctldhost"}
MAX_FILES = 64   # Include loops and huge trees are an admin's mistake, named rather than followed
MAX_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Setting:
    key: str     # as written
    value: str
    path: str
    line: int    # 1-based, of the line the pair starts on
    span: int = 1  # physical lines of its logical line (continuations)
    merged: bool = False  # a pair render's merge moved (commented out behind MARK): not live in Slurm

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _uncomment(raw: str) -> str:
    """The line up to its `#` (an escaped `\\#` stays a '#')."""
    out, i = [], 0
    while i < len(raw):
        if raw.startswith("\\#", i):
            out.append("#")
            i += 2
            continue
        if raw[i] == "#":
            break
        out.append(raw[i])
        i += 1
    return "".join(out)


def logical_lines(text: str):
    """(first line number, number of lines, text) with comments cut and `\\` continuations joined."""
    pending, start = "", 0
    lines = text.splitlines()
    for number, raw in enumerate(lines, 1):
        line = _uncomment(raw).rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1]  # joined as is, as parse_config.c does
            continue
        yield start, number - start + 1, pending + line
        pending = ""
    if pending:
        yield start, len(lines) - start + 1, pending


def pairs(text: str) -> list[tuple[str, str]]:
    """`A=1 B="x y"` -> [('A', '1'), ('B', 'x y')]; a word without '=' is kept with value ''."""
    try:
        words = shlex.split(text, comments=False, posix=True)
    except ValueError:
        words = text.split()
    return [(k, v) for k, _, v in (w.partition("=") for w in words)]


@dataclass
class Conf:
    settings: list[Setting]
    files: list[str]      # every file read, slurm.conf first
    skipped: list[str]    # files an Include named that were not read (skip=)
    nodes: list[Node] = field(default_factory=list)  # the NodeName lines, DEFAULT ones included
    # The Gres NodeName=DEFAULT lines have set so far (read_config.c merges each DEFAULT line into
    # the defaults before it, and a node line without a key takes the default's).
    default_gres: str | None = None
    default_features: str | None = None


@dataclass(frozen=True)
class Node:
    """A NodeName line: its hostlist, its Gres (None: no Gres= on the line) and where it is;
    inherited: the Gres the NodeName=DEFAULT lines before it give it (what Slurm uses when the
    line has none)."""
    names: str
    gres: str | None
    path: str
    line: int
    span: int = 1
    inherited: str | None = None
    features: str | None = None            # Features= (or Feature=) on the line
    inherited_features: str | None = None  # what its NodeName=DEFAULT lines give it
    per_node: str | None = None            # a key of the line with a value per node (NodeAddr=...), if any

    @property
    def effective_gres(self) -> str | None:
        return self.gres if self.gres is not None else self.inherited

    @property
    def effective_features(self) -> str | None:
        return self.features if self.features is not None else self.inherited_features

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _per_node(key: str, value: str) -> bool:
    """A NodeName key with a value for each node of the line (NodeAddr=10.0.0.[1-4], Port=[6818-6821]):
    such a line cannot be cut into several without cutting that value too."""
    return key.lower() in ("nodeaddr", "nodehostname") or (key.lower() == "port" and any(c in value for c in "[,"))


def read(path: str, skip: set[str] | None = None) -> Conf:
    """Every global setting of slurm.conf and what it includes, in Slurm's order. skip: files not
    to read (slurm-ipu's own fragment, when re-rendering a site that includes it)."""
    base = os.path.dirname(os.path.abspath(path))
    conf = Conf([], [], [])
    _read(os.path.abspath(path), base, {os.path.abspath(p) for p in skip or ()}, conf)
    return conf


def _read(path: str, base: str, skip: set[str], conf: Conf) -> None:
    conf.files.append(path)
    if len(conf.files) > MAX_FILES:
        raise ConfigError(f"{path}: over {MAX_FILES} slurm.conf files through Include; is there an Include loop?")
    try:
        data = Path(path).read_bytes()[:MAX_BYTES + 1]
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path} is over {MAX_BYTES // 1024} KiB; not a slurm.conf")
    _parse(data.decode("utf-8", "replace"), path, base, skip, conf)


def read_text(text: str, path: str = "-") -> list[Setting]:
    """The global settings of one file's text (its Includes are not followed)."""
    conf = Conf([], [path], [])
    _parse(text, path, "/", set(), conf, includes=False)
    return conf.settings


def _parse(text: str, path: str, base: str, skip: set[str], conf: Conf, includes: bool = True) -> None:
    for number, raw in enumerate(text.splitlines(), 1):
        if MARK in raw:
            moved = raw.split(MARK, 1)[1]
            conf.settings.extend(Setting(k, v, path, number, 1, True) for k, v in pairs(moved) if k)
    for number, span, line in logical_lines(text):
        found = pairs(line)
        if not found:
            continue
        first = found[0][0].lower()
        if first == "include":
            if not includes:
                continue
            target = line.strip()[len("include"):].strip()
            named = os.path.abspath(target if target.startswith("/") else os.path.join(base, target))
            if named in skip:  # named, whether or not it is there yet
                conf.skipped.append(named)
                continue
            for inc in sorted(glob.glob(named)):
                inc = os.path.abspath(inc)
                if inc in skip:
                    conf.skipped.append(inc)
                else:
                    _read(inc, base, skip, conf)
            continue
        if first == "nodename":
            gres = [v for k, v in found if k.lower() == "gres"]
            features = [v for k, v in found if k.lower() in ("feature", "features")]
            per_node = next((k for k, v in found if _per_node(k, v)), None)
            node = Node(found[0][1], gres[-1] if gres else None, path, number, span, conf.default_gres,
                        features[-1] if features else None, conf.default_features, per_node)
            conf.nodes.append(node)
            if node.names.upper() == "DEFAULT":
                conf.default_gres = node.effective_gres
                conf.default_features = node.effective_features
            continue
        if first in RECORDS:
            continue
        conf.settings.extend(Setting(k, v, path, number, span) for k, v in found if k)


def last(settings: list[Setting]) -> dict[str, Setting]:
    """Key (lower case) -> the site's own value: the last live setting (the one Slurm keeps), else
    the last one render's merge moved into slurm-ipu.conf."""
    out = {s.key.lower(): s for s in settings if s.merged}
    out.update({s.key.lower(): s for s in settings if not s.merged})
    return out


def defined_twice(settings: list[Setting]) -> dict[str, list[Setting]]:
    """Live keys set more than once: Slurm keeps the last and logs 'specified more than once'."""
    seen: dict[str, list[Setting]] = {}
    for s in settings:
        if not s.merged:
            seen.setdefault(s.key.lower(), []).append(s)
    return {k: v for k, v in seen.items() if len(v) > 1}
