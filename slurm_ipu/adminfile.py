"""Files an admin hands slurm-ipu (the site description, the hooks' config, the emulator's cluster
file), read with bounds: a regular file only, at most MAX_BYTES, UTF-8, and YAML at most
MAX_DEPTH deep in at most MAX_NODES nodes. A mistake (`render /dev/zero`, a binary file, YAML
nested 100,000 deep) is one line naming the file, not a hang, a traceback or a gigabyte of
memory. docs/admin.md states the bounds.

Why these: a site description is a few KB (a POD256 with its host lists under 10 KB); PyYAML
builds the document recursively (a deep one overflows the stack) and needs ~1 KB per node.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import ConfigError

MAX_BYTES = 256 * 1024
MAX_DEPTH = 32
MAX_NODES = 20_000


def read_text(path: str | Path, what: str, hint: str = "") -> str:
    """The file's text. Never blocks: a FIFO or device is refused before anything is read.
    `hint` follows the reason when the file cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror}{hint}") from None
    try:
        mode, size = _fstat(fd)
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
            raise ConfigError(f"{what} {path} is {kind}, not a file; give the path of the YAML file")
        data = _read_at_most(fd, MAX_BYTES + 1) if size <= MAX_BYTES else b""
    finally:
        os.close(fd)
    if size > MAX_BYTES or len(data) > MAX_BYTES:
        raise ConfigError(f"{what} {path} is over {MAX_BYTES // 1024} KiB (a site description is a few KB); "
                          "check the path")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r}); "
                          "save it as UTF-8") from None


def _fstat(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_mode, st.st_size


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, got = [], 0
    while got < limit:
        chunk = os.read(fd, min(65536, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def check_yaml_shape(text: str, source: str) -> None:
    """Refuse YAML deeper than MAX_DEPTH or larger than MAX_NODES before it is built: the event
    parser keeps its own stack (no recursion) and stops at the first node over a bound. Syntax
    errors are left to the loader, which reports them with their line."""
    import yaml

    fast = getattr(yaml, "CSafeLoader", None)
    try:
        _walk(yaml.parse(text, Loader=fast or yaml.SafeLoader), source)
    except yaml.YAMLError:
        if fast is None:
            return
        # libyaml stops at its own depth (1000) while scanning ahead, before the events reach ours;
        # the pure-Python parser has no such limit and no recursion: it finds the line.
        try:
            _walk(yaml.parse(text, Loader=yaml.SafeLoader), source)
        except yaml.YAMLError:
            return


def _walk(events, source: str) -> None:
    import yaml

    depth = nodes = 0
    for event in events:
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else 1
                raise ConfigError(f"{source}:{line}: nested over {MAX_DEPTH} levels deep; a site description "
                                  "is a few levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise ConfigError(f"{source}: over {MAX_NODES} YAML nodes; a site description has a few dozen")
