"""How slurmctld reads a licence request (`-L`/`--licenses`, `scontrol update job Licenses=`), per
release: the reference job_submit.lua is rendered from and tested against (docs/slurm.md,
"Licence requests").

job_submit.lua sees the user's string before Slurm parses it, and must find every item Slurm
will count as the `ipu` licence: an item it misses is IPUs without a partition. So the rule is
Slurm's own, item by item, not a guess at what users usually type. Measured on 22.05.8 with the
lab's TRES oracle (`license/ipu=N` in `scontrol show job`'s TRES) and held by the licence fuzz
test of the real-Slurm tier on every supported release (tests/slurm/test_licence_fuzz.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import releases

INT32 = 1 << 32
LONG_MAX = (1 << 63) - 1
C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale


@dataclass(frozen=True)
class Grammar:
    """One release's licence syntax.

    items: characters that separate items (strtok_r: runs of them, and leading or trailing
    ones, make no empty item). counts: characters that start an item's count (the first one
    in the item). alternatives: the character joining items of which the job needs one
    (None before 25.05). fold_case: names compared without case.
    """

    items: str
    counts: str
    alternatives: str | None
    fold_case: bool

# Keyed by the release each grammar starts at (releases.SUPPORTED order).
_GRAMMARS = {
    # src/slurmctld/licenses.c _build_license_list: strtok_r(",;"), the count after ':' read
    # with strtol and stored as int32 (so 4294967360 is 64), spaces in a name refused.
    "22.05": Grammar(items=",;", counts=":", alternatives=None, fold_case=False),
}


# What slurmctld hands the controller hooks (SLURM_JOB_LICENSES) is a string it accepted; every
# release's accepted strings read the same under this one, the loosest of them all, so the hooks
# need not know the release.
HOOKS = Grammar(items=",;", counts=":*", alternatives="|", fold_case=True)


def grammar(version: str) -> Grammar:
    """The grammar of the newest entry at or before `version`'s release."""
    chosen = None
    for first, g in _GRAMMARS.items():
        if releases.at_least(version, first):
            chosen = g
    if chosen is None:
        chosen = _GRAMMARS["22.05"]
    return chosen


def lua_values(version: str) -> dict[str, str]:
    """What job_submit.lua.j2 renders for `version`: Lua patterns for an item and its name."""
    g = grammar(version)

    def cls(chars: str) -> str:
        return "".join(f"%{c}" for c in chars)  # %-escaped: literal in a Lua character class

    return {"release": releases.release(version), "separators": g.items, "counts": g.counts,
            "item": f"[^{cls(g.items)}]+", "name": f"^([^{cls(g.counts)}]*)",
            "fold_case": "true" if g.fold_case else "false"}


def _strtol(text: str) -> tuple[int, str] | None:
    """C's strtol(text, &end, 10): (value, the rest after the number), or None when no digit
    follows the optional white space and sign (end is then the start: not at the end)."""
    i = 0
    while i < len(text) and text[i] in C_SPACE:
        i += 1
    sign = 1
    if i < len(text) and text[i] in "+-":
        sign = -1 if text[i] == "-" else 1
        i += 1
    j = i
    while j < len(text) and text[j].isascii() and text[j].isdigit():
        j += 1
    if j == i:
        return None
    value = min(int(text[i:j]), LONG_MAX + (sign < 0)) * sign
    return value, text[j:]


def _int32(value: int) -> int:
    value %= INT32
    return value - INT32 if value >= INT32 // 2 else value


def _item(item: str, g: Grammar) -> tuple[str, int] | None:
    cut = min((i for i in (item.find(c) for c in g.counts) if i >= 0), default=-1)
    if cut < 0:
        name, count = item, 1
    else:
        name, rest = item[:cut], item[cut + 1:]
        if rest == "":
            count = 0  # strtol of "" reads 0 and ends at the end: Slurm takes it
        else:
            parsed = _strtol(rest)
            if parsed is None or parsed[1] != "":
                return None
            count = _int32(parsed[0])
    if any(c in C_SPACE for c in name) or count < 0:
        return None
    return (name.lower() if g.fold_case else name), count


def parse(text: str | None, g: Grammar) -> dict[str, int] | None:
    """{name: total count} as slurmctld counts it (repeated names add up), or None where Slurm
    refuses the string's syntax. Names are not checked against the cluster's licences here."""
    totals: dict[str, int] = {}
    for item in _split(text or "", g.items):
        got = _item(item, g)
        if got is None:
            return None
        totals[got[0]] = totals.get(got[0], 0) + got[1]
    return totals


def _split(text: str, seps: str) -> list[str]:
    """strtok_r: items between runs of separators, none empty."""
    out, cur = [], []
    for ch in text:
        if ch in seps:
            if cur:
                out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def count(text: str | None, name: str, g: Grammar) -> int:
    """How many of licence `name` the request holds (0 when Slurm would refuse it)."""
    totals = parse(text, g)
    return (totals or {}).get(name.lower() if g.fold_case else name, 0)


def reservation_count(text: str, name: str) -> int:
    """How many of licence `name` a reservation holds, from `scontrol show reservation`'s
    Licenses= (`ipu:4`, `ipu*4` on releases that print it so, `(null)` for none)."""
    for item in text.split(","):
        key, sep, value = item.replace("*", ":").partition(":")
        if key == name and sep and value.isdigit():
            return int(value)
    return 0
