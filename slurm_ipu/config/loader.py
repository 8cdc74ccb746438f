"""Reading the site description: which file (locate), its YAML with each key checked against
the option table (parse), the environment twins and the command line's overrides (load), then
the checks no single key can make (checks.py), after which the site's sections are frozen.

Precedence, in `load()` only: command-line overrides > SLURM_IPU_<KEY> environment > the file >
defaults. Which file: the caller's path (--site), else $SLURM_IPU_SITE, else the one the running
install recorded (its manifest), else /etc/slurm-ipu/site.yaml.

Errors are one line naming the file and line, the value and the valid range (ConfigError, exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..boolean import parse_bool
from ..errors import ConfigError, shown
from .checks import cross_checks
from .options import BY_KEY, DEFAULT_SITE, EARLIER, FIELDS, Field
from .site import Site
from .yamlkeys import _keys, key_lines

SITE_ENV = "SLURM_IPU_SITE"
MANIFEST = "share/slurm-ipu/manifest.json"  # under the install's PREFIX (deploy/install.py writes it)
UPGRADING = "docs/admin.md, Upgrading"


def installed(key: str) -> str | None:
    """What `make install` recorded for this install (its `site` path), found from the running
    interpreter: an install's commands run its own venv, PREFIX/venv. So an install with another
    install.site or PREFIX needs no environment variable. None when this is not such an install
    (a checkout, a test) or it recorded no site."""
    import json
    import sys

    try:
        doc = json.loads((Path(sys.prefix).parent / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def default_site() -> str:
    return installed("site") or DEFAULT_SITE


def locate(environ: dict | None = None, path: str | None = None) -> tuple[str, bool]:
    """(the site description's path, whether the caller or the environment named it)."""
    env = os.environ if environ is None else environ
    explicit = path or env.get(SITE_ENV)
    return (explicit, True) if explicit else (default_site(), False)



def refuse_repeated_keys(site: Site) -> None:
    """A key given twice in one mapping: YAML keeps the last and silently drops the first (a second
    `vipu:` section loses the first one's keys). Render, install and doctor refuse it; the hooks,
    which read a file these checked, skip the second parse."""
    seen: dict[tuple[int, str], int] = {}
    for mapping, name, line in _keys(site.text):  # the file parsed once already: no YAMLError here
        if (mapping, name) in seen:
            raise ConfigError(f"{site.source}:{line}: {name} is given twice (first at line {seen[mapping, name]}); "
                              "YAML keeps the last and drops the first: merge them into one")
        seen[mapping, name] = line


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


def _typed(where, f: Field, value: Any) -> Any:
    """A YAML value of the field's type (no string-to-number guessing: YAML typed it). where():
    the file and line, found only for an error (the hooks never pay for it)."""
    if f.type is bool:
        ok = isinstance(value, bool)
    else:
        ok = not isinstance(value, bool) and (isinstance(value, f.type) or f.type is float and isinstance(value, int))
    if not ok:
        raise ConfigError(f"{where()}: {f.key}={shown(value)} is not a {f.type.__name__} ({f.help})")
    return f.type(value)


def _from_text(f: Field, text: str) -> Any:
    """An environment twin's value, read as the field's type; the range is checked like the file's."""
    if f.type is bool:
        value = parse_bool(text)
        if value is None:
            raise ConfigError(f"environment: {f.env}={shown(text)} is not a bool; use yes or no")
        return value
    try:
        return f.type(text)
    except ValueError:
        raise ConfigError(f"environment: {f.env}={shown(text)} is not a {f.type.__name__} ({f.help})") from None


def _checked(where, f: Field, value: Any) -> Any:
    if value is None:
        if f.required:
            raise ConfigError(f"{where()}: {f.key} must be set ({f.help})")
        return None
    why = f.check(value) if f.check else None
    if why:
        raise ConfigError(f"{where()}: {f.key}={shown(value)} is out of range; use {why}")
    return value


def _document(text: str, source: str) -> dict:
    import yaml

    from ..adminfile import check_yaml_shape

    check_yaml_shape(text, source)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise ConfigError(f"{source}: a site description starts with 'version: 1' (see etc/site-pod128.yaml)")
    return doc


def _unknown(source: str, text: str, key: str) -> ConfigError:
    import difflib

    line = key_lines(text).get(key, 1)
    if key in EARLIER:
        return ConfigError(f"{source}:{line}: {key} belongs to an earlier slurm-ipu's config.yaml: the site "
                           f"description is the one file now; {_earlier_fix(key)} ({UPGRADING})")
    near = difflib.get_close_matches(key, BY_KEY, n=1)
    hint = f"; did you mean {shown(near[0])}?" if near else ""
    return ConfigError(f"{source}:{line}: unknown key {shown(key)}{hint}")


def _earlier_fix(key: str) -> str:
    if key == "install.config":
        return "replace it with install.site, where the site description is installed (/etc/slurm-ipu/site.yaml)"
    return "point --site or SLURM_IPU_SITE at the site description the old file was rendered from"


def parse(text: str, source: str, environ: dict | None = None, overrides: dict | None = None) -> Site:
    """A Site from the file's text; environ holds SLURM_IPU_<KEY> twins (None: none), overrides
    the command line's values by key."""
    given = flatten({k: v for k, v in _document(text, source).items() if k != "version"}, BY_KEY)
    for key in given:
        if key not in BY_KEY:
            raise _unknown(source, text, key)
    site = Site({}, source, text)
    for f in FIELDS:
        value, where = given.get(f.key, f.default), lambda key=f.key: site.at(key)
        if f.key in given and value is not None:
            value = _typed(where, f, value)
        twin = (environ or {}).get(f.env or "", "")
        if twin:
            value, where = _from_text(f, twin), lambda: "environment"
        if (overrides or {}).get(f.key) is not None:
            value, where = overrides[f.key], lambda: "command line"
        site.values[f.key] = _checked(where, f, value)
    cross_checks(site)
    site.freeze()
    return site


def reread(site: Site, **values: Any) -> Site:
    """The same file read again with some keys set otherwise (a dotted key written with '__' for
    '.': vipu__model="allocation"), every check run again; `site` stays as it is (frozen)."""
    return parse(site.text, site.source, overrides={k.replace("__", "."): v for k, v in values.items()})


def load(path: str | None = None, environ: dict | None = None, overrides: dict | None = None,
         twins: bool = True) -> Site:
    """The site description: path, else $SLURM_IPU_SITE, else the install's, else /etc/slurm-ipu/site.yaml.
    twins=False: the file alone decides (the controller hooks and the slurm-ipu service: nothing a job's
    environment holds may change where they send V-IPU calls)."""
    from ..adminfile import read_text

    env = os.environ if environ is None else environ
    where, explicit = locate(env, path)
    if not explicit and not os.path.lexists(where):
        raise ConfigError(f"site description {where} not found; install slurm-ipu with `make install SITE=...` or "
                          f"point {SITE_ENV} at the site description")
    text = read_text(where, "site description", "; start from etc/site-pod128.yaml")
    return parse(text, str(where), env if twins else None, overrides)
