"""slurm-ipu's configuration: one OPTIONS table, from which the YAML schema, the environment
twins (SLURM_IPU_<KEY>) and the documentation all come.

Precedence, enforced in `load()` only: explicit overrides (command line) > SLURM_IPU_* env >
the YAML file (--config, else $SLURM_IPU_CONFIG, else /etc/slurm-ipu/config.yaml) > defaults.
The file starts with `version: 1`; an unknown key is an error that suggests the closest one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

DEFAULT_PATH = "/etc/slurm-ipu/config.yaml"
DEFAULT_SITE = "/etc/slurm-ipu/site.yaml"
MANIFEST = "share/slurm-ipu/manifest.json"  # under the install's PREFIX (deploy/install.py writes it)


def installed(key: str) -> str | None:
    """What `make install` recorded for this install (its `config` or `site` path), found from the
    running interpreter: an install's commands run its own venv, PREFIX/venv. So an install
    with another install.config or PREFIX needs no environment variable. None when this is not
    such an install (a checkout, a test) or it recorded no site."""
    import json
    import sys

    try:
        doc = json.loads((Path(sys.prefix).parent / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def default_path() -> str:
    return installed("config") or DEFAULT_PATH


def default_site() -> str:
    return installed("site") or DEFAULT_SITE


def _between(lo: float, hi: float, what: str = ""):
    def check(v):
        return None if lo <= v <= hi else f"from {lo:g} to {hi:g}{what}"
    return check


def _positive(v):
    return None if 0 < v < float("inf") else "a positive number of seconds"


def _pod(v):
    from .rules import is_valid_allocation

    return None if is_valid_allocation(v) else "a Pod size: 4, 8, 16, 32, 64 or a multiple of 64 (128, 192, 256, ...)"


def _parses(name: str, form: str):
    """A check by the Pod table's own parser (slurm_ipu/pods.py): None, or the form to use."""
    def check(v):
        from . import pods

        try:
            getattr(pods, name)(v)
        except ConfigError:
            return form
        return None
    return check


PREFIX_CHARS = "-_"  # what the SPANK plugin accepts in its prefix= argument (spank/args.c)


def _prefix(v):
    ok = 0 < len(v) < 32 and all(c.isascii() and (c.isalnum() or c in PREFIX_CHARS) for c in v)
    return None if ok else f"1 to 31 letters, digits and '{PREFIX_CHARS}' (the SPANK plugin's rule)"


_port = _between(1, 65535)


@dataclass(frozen=True)
class Option:
    key: str          # dotted YAML path
    type: type
    default: Any
    help: str
    check: Any = None  # value -> None if valid, else the valid range in words

    @property
    def env(self) -> str:
        return "SLURM_IPU_" + self.key.upper().replace(".", "_")


OPTIONS: tuple[Option, ...] = (
    Option("vipu.command", str, "vipu", "the V-IPU CLI the hooks run (an absolute path: hooks have no PATH)"),
    Option("vipu.host", str, None, "V-IPU controller host passed as --api-host; unset: vipu's own config"),
    Option("vipu.port", int, None, "V-IPU controller port passed as --api-port; unset: vipu's own config", _port),
    Option("vipu.timeout", float, 10.0, "seconds allowed for one vipu call", _positive),
    Option("vipu.retries", int, 2, "extra attempts for transient V-IPU failures", _between(0, 10)),
    Option("vipu.emulator_flags", bool, False, "pass the emulator's --hosts/--owner-uid (lab and tests only)"),
    Option("ipuof.host", str, None, "IPUOF_VIPU_API_HOST for tasks; unset: vipu.host"),
    Option("ipuof.port", int, 8090, "IPUOF_VIPU_API_PORT for tasks", _port),
    Option("partition.prefix", str, "slurm_", "partition name = prefix + job id (Graphcore's own plugin used slurm_)",
           _prefix),
    Option("partition.allocation", str, None, "V-IPU allocation to create partitions in; unset: the server's default"),
    Option("pod.ipus", int, 64, "IPUs in the Pod (the licence pool and the largest partition)", _pod),
    Option("pod.pods", str, None, "a multi-Pod cluster: NAME:ILDS:HOSTLIST per Pod, space-separated (rendered "
           "from the site's pods:); unset: one Pod",
           _parses("parse", "NAME:ILDS:HOSTLIST words, e.g. 'poda:1:node[1-4] podb:1:node[5-8]'")),
    Option("pod.groups", str, None, "groups of Pods with an allocation of their own: NAME=POD,POD per group, "
           "space-separated (rendered from the site's pod_groups:)",
           _parses("parse_groups", "NAME=POD,POD words, e.g. 'ab=poda,podb cd=podc,podd'")),
    Option("prolog.deadline", float, 60.0, "seconds the prolog may take in all; keep below PrologEpilogTimeout",
           _positive),
    Option("prolog.max_attempts", int, 3, "prolog failures before the job is held instead of requeued",
           _between(1, 100)),
    Option("epilog.deadline", float, 30.0, "seconds the epilog may take in all", _positive),
    Option("reap.interval", float, 300.0, "seconds between the removal service's full reaps (orphans whose job "
           "is gone)", _between(5, 86400)),
    Option("state_dir", str, "/var/lib/slurm-ipu", "creation records, removal journal, hooks.log, locks "
           "(root-only)"),
    Option("slurm.conf", str, "/etc/slurm/slurm.conf", "slurm.conf the hooks pass as SLURM_CONF"),
    Option("slurm.bin_dir", str, "/usr/bin", "where scontrol and squeue live (hooks have no PATH)"),
)
BY_KEY = {o.key: o for o in OPTIONS}


@dataclass(frozen=True)
class Config:
    values: dict[str, Any]
    source: str

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def vipu_client(self):
        from .vipu import VipuClient

        return VipuClient(command=self["vipu.command"].split(), host=self["vipu.host"], port=self["vipu.port"],
                          timeout=self["vipu.timeout"], retries=self["vipu.retries"],
                          emulator_flags=self["vipu.emulator_flags"])


def _coerce(opt: Option, value: Any, where: str) -> Any:
    if value is None:
        return None
    typed = _typed(opt, value, where)
    why = opt.check(typed) if opt.check else None
    if why:
        raise ConfigError(f"{where}: {opt.key}={value!r} is out of range; use {why}")
    return typed


def _typed(opt: Option, value: Any, where: str) -> Any:
    if opt.type is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
    else:
        try:
            if opt.type is not str and isinstance(value, bool):
                raise ValueError
            return opt.type(value)
        except (TypeError, ValueError):
            pass
    raise ConfigError(f"{where}: {opt.key}={value!r} is not a valid {opt.type.__name__} ({opt.help})")


def flatten(doc: dict, keys, prefix: str = "") -> dict[str, Any]:
    """Nested YAML sections -> dotted keys. A mapping that is itself a key stays whole; an empty
    section (`vipu:` with nothing under it) gives nothing, so its keys' defaults apply."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and full not in keys:
            out.update(flatten(value, keys, full + "."))
        elif value is None and full not in keys and any(k.startswith(full + ".") for k in keys):
            continue
        else:
            out[full] = value
    return out


def read_file(path: str, explicit: bool, required: bool = False) -> dict[str, Any]:
    from .adminfile import check_yaml_shape, read_text

    if not os.path.lexists(path):
        if explicit or required:
            raise ConfigError(f"config file {path} not found; create it from etc/slurm-ipu.yaml"
                              f"{'' if explicit else ' or point SLURM_IPU_CONFIG at yours'}")
        return {}
    text = read_text(path, "config file")
    import yaml

    check_yaml_shape(text, path)
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path} is not valid YAML{where}: {what}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping starting with 'version: 1'")
    version = doc.pop("version", None)
    if version != 1:
        raise ConfigError(f"{path}: version {version!r} is not supported; start the file with 'version: 1'")
    flat = flatten(doc, BY_KEY)
    for key in flat:
        if key not in BY_KEY:
            import difflib  # only for a mistake: every hook reads this file

            near = difflib.get_close_matches(key, BY_KEY, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(BY_KEY)}"
            raise ConfigError(f"{path}: unknown key {key!r}{hint}")
    return flat


def load(path: str | None = None, overrides: dict[str, Any] | None = None,
         environ: dict[str, str] | None = None, required: bool = False) -> Config:
    """required: the file must exist (the hooks: defaults would name no controller at all)."""
    env = os.environ if environ is None else environ
    explicit = path or env.get("SLURM_IPU_CONFIG")
    source = explicit or default_path()
    layers = [
        ("default", {o.key: o.default for o in OPTIONS}),
        (source, read_file(source, explicit=bool(explicit), required=required)),
        ("environment", {o.key: env[o.env] for o in OPTIONS if o.env in env}),
        ("command line", {k: v for k, v in (overrides or {}).items() if v is not None}),
    ]
    values: dict[str, Any] = {}
    for where, layer in layers:
        for key, value in layer.items():
            values[key] = _coerce(BY_KEY[key], value, where)
    return Config(values, source)


def example_yaml() -> str:
    """The commented example in etc/, generated from the table (a test keeps them equal)."""
    lines = ["# slurm-ipu configuration (/etc/slurm-ipu/config.yaml). Every key is optional.",
             "# Precedence: command line > SLURM_IPU_<KEY> environment > this file > defaults.",
             "version: 1"]
    section = None
    for opt in OPTIONS:
        head, _, leaf = opt.key.rpartition(".")
        if head != section:
            section = head
            if head:
                lines.append(f"{head}:")
        indent = "  " if head else ""
        default = "null" if opt.default is None else str(opt.default).lower() if opt.type is bool else opt.default
        lines.append(f"{indent}# {opt.help} (env {opt.env})")
        lines.append(f"{indent}{leaf or opt.key}: {default}")
    return "\n".join(lines) + "\n"
