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


def compress(hosts: list[str]) -> str:
    """['node1', 'node2', 'node4'] -> 'node[1-2,4]': runs of names that differ only in a trailing
    number (of one width, or unpadded) folded into one range each, order kept; expand() reads it
    back as the same list."""
    import re

    words: list[tuple[str, list[str]]] = []  # (head, numbers) in order; a name without a number alone
    for host in hosts:
        found = re.fullmatch(r"(.*?)(\d+)", host)
        if found is None:
            words.append((host, []))
            continue
        head, number = found.groups()
        if words and words[-1][1] and words[-1][0] == head and _same_form(words[-1][1][-1], number):
            words[-1][1].append(number)
        else:
            words.append((head, [number]))
    return ",".join(head if not numbers else head + numbers[0] if len(numbers) == 1 else
                    f"{head}[{_ranges(numbers)}]" for head, numbers in words)


def _same_form(a: str, b: str) -> bool:
    """Two numbers one range may hold: both unpadded, or both of one padded width; increasing."""
    padded = a.startswith("0") or b.startswith("0")
    return int(b) > int(a) and (len(a) == len(b) if padded else not (a.startswith("0") or b.startswith("0")))


def _ranges(numbers: list[str]) -> str:
    out, start = [], 0
    for i in range(1, len(numbers) + 1):
        if i == len(numbers) or int(numbers[i]) != int(numbers[i - 1]) + 1:
            lo, hi = numbers[start], numbers[i - 1]
            out.append(lo if lo == hi else f"{lo}-{hi}")
            start = i
    return ",".join(out)
