"""Slurm hostlist expressions (node[1-3,5], rack[1-2]-n[01-02]) without calling scontrol:
the controller hooks must not spend a Slurm query on what the string already says."""

from __future__ import annotations

from ..errors import ConfigError, shown

MAX_HOSTS = 1 << 16  # more hosts than any Slurm job has: a bigger expansion is a typo or an attack


def _split_top(expr: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"hostlist {shown(expr)}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ConfigError(f"hostlist {shown(expr)}: unbalanced '['")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _range(body: str, expr: str) -> list[str]:
    out = []
    for piece in body.split(","):
        lo, _, hi = piece.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ConfigError(f"hostlist {shown(expr)}: bad range {shown(piece)}; use forms like node[1-4,7]")
        hi = hi or lo
        if int(hi) < int(lo) or int(hi) - int(lo) > MAX_HOSTS:
            raise ConfigError(f"hostlist {shown(expr)}: range {shown(piece)} runs backwards or is too large")
        width = len(lo) if lo.startswith("0") else 0
        out += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
    return out


def _expand_one(word: str, expr: str) -> list[str]:
    start = word.find("[")  # str methods, not re: ipurun expands a hostlist on every launch
    end = word.find("]", start)
    if start < 0 or end < 0:
        return [word]
    head, body, tail = word[:start], word[start + 1:end], word[end + 1:]
    if tail and "[" not in tail:  # as Slurm's hostlist.c: text after a range only before another range
        rng = f"[{body}]" if len(body) <= 40 else f"[{body[:20]}...]"
        raise ConfigError(f"hostlist {shown(expr)}: {shown(tail)} after the range {rng}; Slurm reads text after a "
                          "range only when another range follows (rack[1-2]-n[1-4]): rename or list those hosts")
    numbers, rests = _range(body, expr), _expand_one(tail, expr)
    if len(numbers) * len(rests) > MAX_HOSTS:  # checked before the product is built
        raise ConfigError(f"hostlist {shown(expr)} names more than {MAX_HOSTS} hosts; check the ranges")
    return [head + n + rest for n in numbers for rest in rests]


def expand(expr: str) -> list[str]:
    """'node[1-2],gpu3' -> ['node1', 'node2', 'gpu3'] (order kept, duplicates kept)."""
    hosts: list[str] = []
    for word in _split_top(expr or ""):
        hosts += _expand_one(word, expr)
        if len(hosts) > MAX_HOSTS:
            raise ConfigError(f"hostlist {shown(expr)} names more than {MAX_HOSTS} hosts; check the ranges")
    return hosts
