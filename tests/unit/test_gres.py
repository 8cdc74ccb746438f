"""A job's IPUs per node in a TRES list, read by Python (a heterogeneous job's later component:
the prolog reads them from squeue) and by job_submit.lua (every job): one grammar, held here to
the rendered Lua on the same corpus."""

from __future__ import annotations

import pytest

from slurm_ipu.deploy import render
from slurm_ipu.slurm.gres import ipus_per_node

from .test_job_submit_lua import LUA, run, values

CORPUS = [
    ("gres:ipu:4", 4),
    ("gres/ipu:16", 16),          # 23.11's spelling
    ("gres:ipu", 1),              # no count: one
    ("gres/ipu", 1),
    ("gres:gpu:1,gres:ipu:8", 8),
    ("gres/ipu:2,gres/gpu:1", 2),
    ("gres:ipu2:4", 0),           # another GRES whose name begins with ipu
    ("gres/ipux", 0),
    ("gres:gpu:2", 0),
    ("", 0),
    ("N/A", 0),                   # squeue's word for a job without any
]


@pytest.mark.parametrize("tres,per", CORPUS + [("gres:ipu:16,gres:ipu:1", 1), ("gres:ipu:mk2:4", 4),
                                                ("gres:ipu:4\n", 4)])
def test_python_reads_ipus_per_node(tres, per):
    assert ipus_per_node(tres) == per


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("lua") / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", values(64)))
    return str(path)


@pytest.mark.skipif(LUA is None, reason="lua5.1 missing: `make test` installs it")
@pytest.mark.parametrize("tres,per", CORPUS)
def test_job_submit_lua_reads_the_same_count(script, tres, per):
    """The licence the Lua writes for a one-node job is the count Python reads from the same list."""
    rc, lic, _nodes, msg = run(script, {"tres_per_node": tres, "min_nodes": 1})
    assert rc == 0, msg
    assert lic == (f"ipu:{per}" if per else "nil")
