"""A seeded corpus of licence requests (`-L` strings) for the licence fuzz tests: the unit tier
runs it through job_submit.lua against Slurm's grammar (slurm_ipu/slurm/licences.py), the
real-Slurm tier against slurmctld itself. Same seed, same strings, on every machine.

Built from the pieces Slurm's parser reacts to: every item and alternative separator, counts
that strtol reads in surprising ways (signs, spaces, leading zeros, int32 wrap-around), names
that differ from `ipu` only in case, a remote server or a suffix, and empty items."""

from __future__ import annotations

import random

# Items Slurm takes (with the lab's licences: ipu, and the remote matlab@db and ipu@db), many
# of them read in surprising ways, and items it refuses; most strings are built from the first
# kind, so that most strings count.
GOOD_NAMES = ["ipu", "ipu", "ipu", "matlab@db", "matlab@db", "ipu@db"]
GOOD_COUNTS = ["", ":1", ":2", ":4", ":8", ":0", ":", ": 4", ":\t4", ":+4", ": +4", ":-0", ":04", ":010",
               ":4294967297", ":4294967360", ":4294967296"]
BAD_NAMES = ["IPU", "Ipu", "IPU@db", "ipu2", "ipux", " ipu", "ipu ", "i pu", "matlab", "", "ipu|ipu", "ipu*2"]
BAD_COUNTS = [":-4", ":4x", ":0x4", ":4294967295", ":2147483647", ":9223372036854775807", ":99999999999999999999",
              "*4", "*1", "*", ":2:2", ":4 ", "*64", ":63", ":64", ": "]
GOOD_SEPARATORS = [",", ",", ";", ";", ",,", ";;", ",;"]
BAD_SEPARATORS = ["|", " ", ", ", " ,", "\t"]
EDGES = [""] * 10 + [",", ";", ",,", ";;", "|", " "]


def item(rng: random.Random) -> str:
    name = rng.choice(GOOD_NAMES if rng.random() < 0.85 else BAD_NAMES)
    return name + rng.choice(GOOD_COUNTS if rng.random() < 0.85 else BAD_COUNTS)


def request(rng: random.Random) -> str:
    parts = [item(rng) for _ in range(rng.choice((1, 1, 2, 2, 3, 4)))]
    text = parts[0]
    for part in parts[1:]:
        text += rng.choice(GOOD_SEPARATORS if rng.random() < 0.9 else BAD_SEPARATORS) + part
    return rng.choice(EDGES) + text + rng.choice(EDGES)


# (IPUs per node, nodes) a job asks with --gres=ipu:N -N n; None: no IPU GRES.
GRES = [None, None, (1, 1), (4, 1), (2, 2), (16, 1)]


def corpus(count: int, seed: int = 2305) -> list[tuple[str, tuple[int, int] | None]]:
    """`count` distinct licence strings, each with the GRES its job asks for."""
    rng = random.Random(seed)
    seen: dict[str, tuple[int, int] | None] = {}
    fixed = [";ipu:64", "ipu:4294967360", "matlab@db:1;ipu:63", "ipu:1,ipu:63", "IPU:4", "ipu: 4", ",,ipu,,", ""]
    for text in fixed:
        seen[text] = None
    for _ in range(count * 20):
        if len(seen) >= count:
            break
        text = request(rng)
        if text not in seen:
            seen[text] = rng.choice(GRES)
    return list(seen.items())[:count]


# TRES requests as `scontrol update` takes them: every field that can name a
# GRES, and values built from IPU items in each spelling (22.05's `gres:`, 23.11's `gres/`, Gres='s
# bare name), counts Slurm reads in surprising ways, a GRES type, other GRES and TRES beside them.
TRES_FIELDS = ["Gres", "TresPerNode", "TresPerJob", "TresPerTask"]
TRES_NAMES = ["gres/ipu", "gres:ipu", "ipu", "gres/IPU", "gres/ipu:mk2", "gres/ipux", "gres/twin", "cpu", "gres/gpu"]
TRES_COUNTS = ["", ":1", ":2", ":4", ":16", ":64", ":0", ":04", ":+4", ": 4", ":4294967297", ":-4", ":4x"]
TRES_SEPARATORS = [",", ",", ";", ",,"]


def tres_item(rng: random.Random) -> str:
    return rng.choice(TRES_NAMES) + rng.choice(TRES_COUNTS)


def tres_corpus(count: int, seed: int = 3505) -> list[tuple[str, str]]:
    """`count` distinct (field, value) updates."""
    rng = random.Random(seed)
    seen: dict[tuple[str, str], None] = {}
    for _ in range(count * 20):
        if len(seen) >= count:
            break
        items = [tres_item(rng) for _ in range(rng.choice((1, 1, 2, 3)))]
        value = items[0]
        for part in items[1:]:
            value += rng.choice(TRES_SEPARATORS) + part
        seen.setdefault((rng.choice(TRES_FIELDS), value), None)
    return list(seen)[:count]
