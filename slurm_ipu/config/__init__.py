"""slurm-ipu's configuration: the site description, one YAML file an admin writes and `make
install` puts at `install.site`. Every part reads that one file: the controller hooks and the hook
service, ipurun, doctor, status and render. The package, by responsibility:

- options.py: the option table (FIELDS), the only list of keys, types, defaults and ranges;
- sections.py: the typed, frozen sections a loaded site holds (generated from the table);
- loader.py: which file, its YAML, the environment twins and overrides (load, parse, locate);
- checks.py and grammar.py: what no single key can check (Pods, groups, models, deadlines);
- site.py: the Site every caller takes, and what follows from it (paths, models, names).

Only this package reads a key by its dotted name; everyone else reads `site.<section>.<key>`.
"""

from __future__ import annotations

from .loader import (
    MANIFEST,
    SITE_ENV,
    UPGRADING,
    default_site,
    flatten,
    installed,
    load,
    locate,
    parse,
    refuse_repeated_keys,
    reread,
)
from .options import BY_KEY, DEFAULT_SITE, EARLIER, FIELDS, POD128, PREFIX_CHARS, SUPPORTED_SLURM, Field, name_check
from .site import PACKAGED, PACKAGED_PATHS, Site
from .yamlkeys import key_lines

__all__ = ["BY_KEY", "DEFAULT_SITE", "EARLIER", "FIELDS", "MANIFEST", "PACKAGED", "PACKAGED_PATHS", "POD128",
           "PREFIX_CHARS", "SITE_ENV", "SUPPORTED_SLURM", "UPGRADING", "Field", "Site", "default_site", "flatten",
           "installed", "key_lines", "load", "locate", "name_check", "parse", "refuse_repeated_keys", "reread"]
