"""Hostlists read as Slurm reads them, held to Slurm the way the licence grammar
is: a seeded corpus of node sets, written as hostlists by Slurm itself (`scontrol show hostlist`),
and of expressions written by hand, valid and not. For every expression `scontrol show hostnames`
accepts, Python's reader (slurm/hostlist.py: the hooks, doctor, ipurun, render) and job_submit.lua's
(partitions' node lists, which Slurm writes) give exactly Slurm's names in Slurm's order; every
one Slurm refuses, Python refuses too; where Slurm reads a malformed one as literal names, Python
refuses it in one line (the Lua only ever reads what Slurm wrote)."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from slurm_ipu.deploy import render
from slurm_ipu.errors import ConfigError
from slurm_ipu.slurm import licences, limits, releases
from slurm_ipu.slurm.hostlist import expand

from .conftest import SLURM_VERSION

LUA = shutil.which("lua5.1")
SETS, HAND = 150, 150
HARNESS = """slurm = { SUCCESS = 0, ERROR = -1, log_user = function() end, log_info = function() end }
dofile(%r)
for line in io.lines() do print(table.concat(slurm_ipu.expand(line), " ")) end
"""


def node_sets(rng: random.Random) -> list[list[str]]:
    out = []
    for _ in range(SETS):
        prefix = rng.choice(["node", "ipu-host", "n", "rack1-n", "gpu"])
        width = rng.choice([0, 0, 2, 3])
        picked = rng.sample(range(0, 300), rng.randint(1, 12))
        out.append([f"{prefix}{k:0{width}d}" if width else f"{prefix}{k}" for k in picked])
    return out


def hand_written(rng: random.Random) -> list[str]:
    parts = ["node[1-3]", "node[01-10]", "n[1,3,5-7]", "a[1-2]b[3-4]", "x", "node[3-1]", "node[1-", "node]1[",
             "node[a-b]", "node[1-3", "node[]", "node[1--3]", "node[,1]", "rack[1-2]-n[01-02]", "h[001-003]",
             "node[1-3],x", " node1", "node1 ", "node[1-3]x", "[1-3]", "node[10-12],node[1-2]"]
    return [",".join(rng.sample(parts, rng.randint(1, 3))) for _ in range(HAND)]


def scontrol_names(lab, exprs: list[str]) -> dict[str, list[str] | None]:
    out = {}
    for expr in exprs:
        proc = lab.run("scontrol", "show", "hostnames", expr)
        out[expr] = proc.stdout.split() if proc.returncode == 0 and proc.stdout.strip() else None
    return out


def lua_names(path: str, exprs: list[str], tmp_path) -> dict[str, list[str]]:
    harness = tmp_path / "h.lua"
    harness.write_text(HARNESS % path)
    proc = subprocess.run([LUA, str(harness)], input="".join(f"{e}\n" for e in exprs), capture_output=True,
                          text=True, timeout=60, check=True)
    return dict(zip(exprs, (line.split() for line in proc.stdout.splitlines()), strict=True))


def python_names(expr: str) -> list[str] | None:
    try:
        return expand(expr)
    except ConfigError:
        return None


@pytest.mark.skipif(LUA is None, reason="lua5.1 missing: `make test` installs it")
def test_every_hostlist_reads_as_slurm_reads_it(lab, tmp_path):
    rng = random.Random(36)
    written = [lab.run("scontrol", "show", "hostlist", ",".join(s), check=True).stdout.strip()
               for s in node_sets(rng)]
    exprs = list(dict.fromkeys(written + hand_written(rng)))
    truth = scontrol_names(lab, exprs)
    lua = tmp_path / "job_submit.lua"
    lua.write_text(render.render("job_submit/job_submit.lua", render.pod_values(64) | {
        "licences": licences.lua_values(SLURM_VERSION), "limits": limits.lua_values(), "ipus_per_host": 16,
        "gres_prefix": releases.tres_prefix(SLURM_VERSION), "whole_hosts": False, "mixed": False,
        "host_models": {}}))
    from_lua = lua_names(str(lua), exprs, tmp_path)
    # Slurm's own hostlists: all three read the same names. By hand: Python reads Slurm's names or
    # refuses in one line (Slurm takes `node[1-` or `node]1[` as literal names no node has: a typo
    # in pod.hosts is better refused than looked for), never a list of its own.
    wrong = [(e, truth[e], python_names(e)) for e in written if python_names(e) != truth[e]]
    wrong += [(e, truth[e], python_names(e)) for e in exprs if python_names(e) not in (None, truth[e])]
    wrong += [(e, truth[e], from_lua[e], "lua") for e in written if from_lua[e] != truth[e]]
    accepted = sum(v is not None for v in truth.values())
    print(f"hostlist fuzz, Slurm {SLURM_VERSION}: {len(exprs)} expressions, scontrol accepted {accepted}; "
          f"{len(wrong)} mismatch(es)")
    assert not wrong, wrong[:5]
