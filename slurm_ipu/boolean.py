"""yes/no as admins and users write it: the package's one boolean parser (the site
description's environment twins, ipurun's PopRun options). A module of its own, so ipurun's
start-up imports nothing else for it."""

from __future__ import annotations

TRUE, FALSE = ("1", "yes", "on", "true"), ("0", "no", "off", "false")


def parse_bool(text) -> bool | None:
    """True, False, or None for a word that is neither."""
    if isinstance(text, bool):
        return text
    low = str(text).strip().lower()
    return True if low in TRUE else False if low in FALSE else None
