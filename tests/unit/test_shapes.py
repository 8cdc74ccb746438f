"""Every partition shape a user can ask for, through the whole submit path, against the rule
table: the SPANK plugin takes any --ipu-gcds/--ipu-ilds count in its range (spank/args.c), and
job_submit.lua, rendered from rules.py, accepts exactly the (size, GCDs, ILDs) rules.check_shape
accepts. Every valid size of a 1,024-IPU Pod (16 ILDs, hosts of 64), every ILD count 1-16 and
every GCD count 1-64 plus each size's valid ones: one Lua process runs them all."""

from __future__ import annotations

import subprocess

import pytest

from slurm_ipu import rules
from slurm_ipu.deploy import render
from slurm_ipu.errors import InvalidPartition

from .test_job_submit_lua import LUA, values
from .test_spank_args import driver, run  # noqa: F401 - driver is a fixture

POD, PER_HOST = 1024, 64
POD_ILDS = POD // rules.IPUS_PER_ILD

LOOP = """
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_INVALID_LICENSES = 2040,
          log_user = function() end, log_info = function() end }
dofile(%(path)r)
for _, c in ipairs(%(cases)s) do
  local env = {}
  if c[4] > 0 then table.insert(env, "IPU_GCDS=" .. c[4]) end
  if c[5] > 0 then table.insert(env, "IPU_ILDS=" .. c[5]) end
  local job = { tres_per_node = "gres:ipu:" .. c[2], min_nodes = c[3], max_nodes = c[3], spank_job_env = env }
  print(c[1] .. " " .. c[4] .. " " .. c[5] .. " " .. slurm_job_submit(job, {}, 0))
end
"""


def cases() -> list[tuple[int, int, int, int, int]]:
    """(size, per node, nodes, GCDs or 0, ILDs or 0) for every shape asked for."""
    out = []
    for size in rules.valid_sizes(POD):
        nodes = max(1, size // PER_HOST)
        gcds = sorted(set(range(1, 65)) | {g for n in range(1, POD_ILDS + 1) for g in rules.valid_gcds(size, n)})
        for ilds in range(0, POD_ILDS + 1):
            out.extend((size, size // nodes, nodes, g, ilds) for g in [0, *gcds] if g <= size)
    return out


def expected(size: int, gcds: int, ilds: int) -> bool:
    try:
        rules.check_shape(size, gcds or None, ilds or None, cluster_ilds=POD_ILDS)
    except InvalidPartition:
        return False
    return True


@pytest.mark.skipif(LUA is None, reason="lua5.1 missing: `make test` installs it")
def test_job_submit_lua_accepts_exactly_the_shapes_the_rule_table_accepts(tmp_path):
    path = tmp_path / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", values(POD, per_host=PER_HOST)))
    asked = cases()
    table = "{" + ",".join("{" + ",".join(map(str, c)) + "}" for c in asked) + "}"
    proc = subprocess.run([LUA, "-"], input=LOOP % {"path": str(path), "cases": table}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = {tuple(map(int, line.split()[:3])): line.split()[3] == "0" for line in proc.stdout.splitlines()}
    assert len(got) == len(asked) > 10_000
    wrong = [(s, g, n, ok) for (s, g, n), ok in got.items() if ok != expected(s, g, n)]
    assert wrong == []


def test_the_plugin_passes_on_every_count_the_rule_table_can_accept(driver):  # noqa: F811 - the fixture
    """Each GCD and ILD count some shape up to 1,024 IPUs has: the plugin's parser stores it."""
    counts = {g for s in rules.valid_sizes(POD) for n in range(1, POD_ILDS + 1) for g in rules.valid_gcds(s, n)}
    for option, slot, given in (("ipu-gcds", "gcds", counts), ("ipu-ilds", "ilds", set(range(1, POD_ILDS + 1))),
                                ("ipus", "ipus", set(rules.valid_sizes(POD)))):
        lines = run(driver, "typed", option, *map(str, sorted(given))).splitlines()
        want = [f"rc=0 {slot}={v}" for v in sorted(given)]
        assert [" ".join(w for w in line.split() if w.startswith(("rc=", f"{slot}="))) for line in lines] == want
