"""The example site description (etc/site-pod128.yaml) and the options' reference
(docs/options.md), both generated from the one option table, slurm_ipu/config.FIELDS. A unit
test keeps the files equal to what this prints; `make generated` rewrites them."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from ..config import FIELDS, Field

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "etc/site-pod128.yaml"
OPTIONS = "docs/options.md"
HEAD = """\
# slurm-ipu site description: an IPU-POD128 (two POD64s, each with its own 4 host servers of
# 16 IPUs) and slurmdbd. This is slurm-ipu's one configuration file: `slurm-ipu render` makes the
# fragments a site merges into its Slurm configuration from it, and `make install SITE=<this file>`
# puts it at install.site, where the hooks, ipurun, doctor and status read it.
# Generated from the option table (slurm_ipu/config/options.py) with every option at its default unless
# the example needs another value; docs/options.md describes each. `make generated` rewrites it.
version: 1
"""


def _value(f: Field):
    return f.example if f.example is not None else f.default


def _scalar(value) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=1000).splitlines()[0]


def _block(leaf: str, value, indent: str) -> list[str]:
    """A key and its value: a list of mappings as a YAML block, anything else on the key's line."""
    if isinstance(value, list) and value:
        out = [f"{indent}{leaf}:"]
        for item in value:
            pairs = [f"{k}: {_scalar(v)}" for k, v in item.items()]
            out.append(f"{indent}  - {pairs[0]}")
            out.extend(f"{indent}    {p}" for p in pairs[1:])
        return out
    return [f"{indent}{leaf}: {_scalar(value)}"]


PACKAGED_HEAD = """\
# slurm-ipu site description, as the Debian packages install it: describe your site here (the
# example is an IPU-POD128: two POD64s, each with its own 4 host servers of 16 IPUs), then run
# `slurm-ipu setup` and merge what `slurm-ipu render` writes (docs/admin.md, "Packages"). This is
# slurm-ipu's one configuration file: the hooks, ipurun, doctor and status read it here.
# docs/options.md (in the source) describes each option; install.prefix /usr is the packages' layout.
version: 1
"""


def packaged_yaml() -> str:
    """The site description the Debian packages install at /etc/slurm-ipu/site.yaml (a conffile)."""
    from ..config import PACKAGED

    return example_yaml(PACKAGED_HEAD, {"install.prefix": PACKAGED})


def example_yaml(head: str = HEAD, values: dict | None = None) -> str:
    values = values or {}
    lines, section = [head.rstrip("\n")], None
    for f in FIELDS:
        head, _, leaf = f.key.rpartition(".")
        if head != section:
            lines.append("")
            section = head
            if head:
                lines.append(f"{head}:")
        indent = "  " if head else ""
        lines.extend(textwrap.wrap(f.help, 100, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ",
                                   break_on_hyphens=False))
        lines.extend(_block(leaf or f.key, values.get(f.key, _value(f)), indent))
    return "\n".join(lines) + "\n"


def options_markdown() -> str:
    rows = ["# Site description options", "",
            "Generated from the option table in `slurm_ipu/config/options.py` (`make generated`); the example",
            f"`{EXAMPLE}` sets each. The site description is slurm-ipu's one configuration file: the hooks,",
            "the slurm-ipu service, `ipurun`, `doctor`, `status` and `render` all read it. An environment twin",
            "(`SLURM_IPU_<KEY>`) overrides the file for `ipurun`, `doctor`, `status` and `render`; the",
            "controller hooks and the slurm-ipu service read the file alone. Which file: `--site`, else",
            "`$SLURM_IPU_SITE`, else the one `make install` recorded, else `/etc/slurm-ipu/site.yaml`.", "",
            "| key | type | default | environment twin | meaning |", "|---|---|---|---|---|"]
    for f in FIELDS:
        default = "required" if f.required else "null" if f.default is None else _scalar(f.default)
        twin = f"`{f.env}`" if f.env else "-"
        rows.append(f"| `{f.key}` | {f.type.__name__} | `{default}` | {twin} | {f.help.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


SECTIONS = "slurm_ipu/config/sections.py"
INTERNAL = ("pods", "pod_groups", "controllers")  # the loader's checks read them into Site.pods,
# Site.groups and Site.controllers

SECTIONS_HEAD = '''"""The site description's typed sections: a frozen dataclass per section of the option table
(slurm_ipu/config/options.py), generated from it by `make generated` (slurm_ipu/deploy/example.py;
a unit test keeps this file equal to what it prints). A loaded Site holds one of each
(Site.freeze), so a key is read as `site.vipu.host`; a misspelt one fails where it is read, and a
test reads every such read in the package against the table."""

from __future__ import annotations

from dataclasses import dataclass
'''


def _annotation(f: Field) -> str:
    name = f.type.__name__
    return f"{name} | None" if f.default is None and not f.required else name


def _class(section: str) -> str:
    return "".join(w.capitalize() for w in section.split("_")) + "Section"


def sections_py() -> str:
    """The sections module: a class per dotted section, and Sections, what a Site holds."""
    by_section: dict[str, list[Field]] = {}
    top: list[Field] = []
    for f in FIELDS:
        if f.key in INTERNAL:
            continue
        head, dot, _ = f.key.partition(".")
        (by_section.setdefault(head, []) if dot else top).append(f)
    out = [SECTIONS_HEAD]
    for section, fields in by_section.items():
        out.append(f"\n@dataclass(frozen=True)\nclass {_class(section)}:")
        out.extend(f"    {f.key.partition('.')[2]}: {_annotation(f)}" for f in fields)
        out.append("")
    out.append("\nclass Sections:")
    out.append('    """What a loaded site holds: each top-level key, and each section (Site.freeze sets them)."""')
    out.extend(f"    {f.key}: {_annotation(f)}" for f in top)
    out.extend(f"    {section}: {_class(section)}" for section in by_section)
    out.append("\n")
    out.append("SECTIONS = {")
    out.extend(f'    "{s}": {_class(s)},' for s in by_section)
    out.append("}")
    out.append("TOP = (" + ", ".join(f'"{f.key}"' for f in top) + ")")
    return "\n".join(out) + "\n"


def generated() -> dict[str, str]:
    return {EXAMPLE: example_yaml(), OPTIONS: options_markdown(), SECTIONS: sections_py()}


def main() -> int:
    for rel, text in generated().items():
        (ROOT / rel).write_text(text)
        print(rel, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
