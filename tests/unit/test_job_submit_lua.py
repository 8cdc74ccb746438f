"""The rendered job_submit.lua, run by lua5.1 (the Lua Slurm 22.05 embeds) against a stub
`slurm` table: submit and modify requests in, licence or one-line refusal out."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from slurm_ipu.deploy import render
from slurm_ipu.errors import ConfigError
from slurm_ipu.hooks import jobenv
from slurm_ipu.slurm import licences, limits, releases

from .conftest import write_conf

LUA = shutil.which("lua5.1")
pytestmark = pytest.mark.skipif(LUA is None, reason="lua5.1 missing: `make test` installs it")
NO_VAL = 4294967294
REFUSED = 2040  # ESLURM_INVALID_LICENSES, as the harness defines it
GRES_REFUSED = 2072  # ESLURM_INVALID_GRES, the same

HARNESS = """
local msgs = {}
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_INVALID_LICENSES = 2040, ESLURM_INVALID_GRES = 2072,
          log_user = function(fmt, ...) table.insert(msgs, string.format(fmt, ...)) end,
          log_info = function(fmt, ...) table.insert(msgs, string.format(fmt, ...)) end }
dofile(%(path)r)
msgs = {}  -- forget the load message
local job = %(job)s
local rc
local parts = %(parts)s
if %(modify)s then rc = slurm_job_modify(job, %(rec)s, parts, 0) else rc = slurm_job_submit(job, parts, 0) end
print(rc .. "\\t" .. tostring(job.licenses) .. "\\t" .. tostring(job.min_nodes) .. "\\t" .. table.concat(msgs, "\\030"))
"""


def values(pod_ipus: int, version: str = "22.05", per_host: int | None = None) -> dict:
    """What the site's render gives job_submit.lua.j2: the Pod's sizes, its hosts' IPUs (here all
    of the Pod's unless given) and Slurm's syntax."""
    return render.pod_values(pod_ipus) | {"licences": licences.lua_values(version), "limits": limits.lua_values(),
                                          "ipus_per_host": per_host or pod_ipus,
                                          "gres_prefix": releases.tres_prefix(version), "whole_hosts": False,
                                          "mixed": False, "host_models": {}}


@pytest.fixture(scope="module")
def lua_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("lua") / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", values(64)))
    return str(path)


def lua_table(d: dict) -> str:
    def val(v):
        if isinstance(v, list):  # spank_job_env: a table indexed from 0, as Slurm hands it over
            return "{" + ", ".join(f"[{i}] = {val(x)}" for i, x in enumerate(v)) + "}"
        return f'"{v}"' if isinstance(v, str) else str(v)
    return "{" + ", ".join(f"{k} = {val(v)}" for k, v in d.items()) + "}"


@pytest.fixture(scope="module")
def lua_256(tmp_path_factory):
    path = tmp_path_factory.mktemp("lua256") / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", values(256)))
    return str(path)


def run(lua_file, job: dict, rec: dict | None = None) -> tuple[int, str, str, str]:
    code = HARNESS % {"path": lua_file, "job": lua_table(job), "rec": lua_table(rec or {}),
                      "modify": "true" if rec is not None else "false", "parts": "{}"}
    proc = subprocess.run([LUA, "-"], input=code, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    rc, lic, nodes, msg = proc.stdout.rstrip("\n").split("\t")
    return int(rc), lic, nodes, msg


@pytest.mark.parametrize("job,licence,nodes", [
    ({"tres_per_node": "gres:ipu:4", "min_nodes": 2, "max_nodes": 2}, "ipu:8", "2"),
    ({"tres_per_node": "gres:ipu:4", "min_nodes": NO_VAL, "max_nodes": NO_VAL}, "ipu:4", "1"),
    ({"tres_per_node": "gres:ipu:4", "het_job_offset": 0}, "ipu:4", "1"),  # a heterogeneous job's first component
    ({"tres_per_node": "gres:ipu:4", "het_job_offset": NO_VAL}, "ipu:4", "1"),
    # A later component: Slurm takes licences from a heterogeneous job's first component alone
    # (24.11 and later refuse another's), so its IPUs are its GRES, which the prolog reads back.
    ({"tres_per_node": "gres:ipu:16", "het_job_offset": 1}, "nil", "1"),
    ({"tres_per_node": "gres/ipu:8", "het_job_offset": 3, "min_nodes": 2}, "nil", "2"),
    ({"spank_job_env": ["IPU_IPUS=32"], "het_job_offset": 1, "min_nodes": 2}, "nil", "2"),
    ({"tres_per_node": "gres/ipu:16", "min_nodes": 4}, "ipu:64", "4"),
    ({"tres_per_node": "gres:ipu", "min_nodes": 1}, "ipu:1", "1"),
    ({"tres_per_node": "gres:gpu:1,gres:ipu:8", "licenses": "matlab:1", "min_nodes": 1}, "matlab:1,ipu:8", "1"),
    ({"min_nodes": 3}, "nil", "3"),  # not an IPU job: untouched
    ({"tres_per_node": "gres:ipu2:4", "min_nodes": 1}, "nil", "1"),  # another GRES whose name starts with ipu
    ({"tres_per_task": "gres/gpu:1", "min_nodes": 1}, "nil", "1"),
    ({"licenses": "ipu2:1|matlab:1", "min_nodes": 1}, "ipu2:1|matlab:1", "1"),
    ({"licenses": "ipu@db:8", "min_nodes": 1}, "ipu@db:8", "1"),  # a remote licence of its own name
    ({"licenses": "IPU:8", "min_nodes": 1}, "IPU:8", "1"),  # 22.05 compares names with case: not ipu
    # the user's other licences are kept as written
    ({"tres_per_node": "gres:ipu:1", "licenses": "matlab:1;;matlab2*2", "min_nodes": 1}, "matlab:1,matlab2*2,ipu:1",
     "1"),
])
def test_submit_accepts_and_sets_the_licence(lua_file, job, licence, nodes):
    rc, lic, got_nodes, msg = run(lua_file, job)
    assert (rc, lic, got_nodes, msg) == (0, licence, nodes, "")


@pytest.mark.parametrize("job,words", [
    ({"tres_per_node": "gres:ipu:3"},
     "asks for 3 IPUs, not a valid partition size; valid totals: 1, 2, 4, 8, 16, 32, 64"),
    ({"tres_per_node": "gres:ipu:8", "min_nodes": 3}, "on 3 node(s) asks for 24 IPUs"),
    ({"tres_per_node": "gres:ipu:32", "min_nodes": 4}, "128 IPUs, more than the Pod's 64"),
    ({"tres_per_node": "gres:ipu:0"}, "at least 1 IPU per node"),
    ({"tres_per_node": "gres:ipu:4", "min_nodes": 2, "max_nodes": 4}, "fixed node count"),
    ({"licenses": "ipu:8"}, "not with the ipu licence (-L ipu:8)"),
    ({"licenses": ";ipu:64"}, "not with the ipu licence (-L ipu:64)"),  # ';' separates items too
    ({"licenses": "matlab:1;;ipu"}, "not with the ipu licence (-L ipu)"),
    ({"licenses": "ipu:4294967360"}, "not with the ipu licence (-L ipu:4294967360)"),  # Slurm reads 64
    ({"licenses": "ipu: 4"}, "not with the ipu licence (-L ipu: 4)"),
    ({"tres_per_node": "gres:ipu:16,gres:ipu:1"}, "--gres gres:ipu:16,gres:ipu:1 names ipu 2 times; give it once"),
    ({"tres_per_node": "gres/ipu:16,gres/ipu:1", "min_nodes": 1}, "names ipu 2 times"),
    # an ipu licence beside the GRES, whatever its separator: refused, not dropped
    ({"tres_per_node": "gres:ipu:1", "licenses": "matlab:1;ipu:63"}, "-L ipu:63: the ipu licence is slurm-ipu's, "
                                                                     "set from --gres=ipu:N; leave it out of -L"),
    ({"tres_per_node": "gres:ipu:1", "licenses": ";ipu:63;;matlab*2"}, "-L ipu:63: the ipu licence is slurm-ipu's"),
    ({"licenses": "ipu:4", "spank_job_env": ["IPU_IPUS=4"]}, "-L ipu:4: the ipu licence is slurm-ipu's"),
    # the site's ipu GRES is untyped (Gres=ipu:N): a typed request fits no node
    ({"tres_per_node": "gres:ipu:mk2:2", "min_nodes": 1}, "--gres=ipu:mk2:2 names a GRES type, and IPUs have none "
                                                          "here; use --gres=ipu:2"),
    ({"tres_per_node": "gres/ipu:foo:4"}, "--gres=ipu:foo:4 names a GRES type"),
    ({"tres_per_node": "gres/ipu:foo"}, "--gres=ipu:foo:1 names a GRES type"),
    ({"tres_per_task": "gres/ipu:2"}, "--tres-per-task=gres/ipu:2: ask for IPUs per node with --gres=ipu:N"),
    ({"tres_per_task": "cpu:2,gres:ipu:1"}, "--tres-per-task=cpu:2,gres:ipu:1"),
    ({"tres_per_job": "gres/ipu:64"}, "--tres-per-job=gres/ipu:64"),
    ({"tres_per_socket": "gres:ipu:1"}, "--tres-per-socket=gres:ipu:1"),
    ({"licenses": "ipu:64|matlab:1"}, "licence ipu:64|matlab:1: the ipu licence cannot be one of several choices"),
    ({"licenses": "matlab:1|ipu:64", "tres_per_node": "gres:ipu:4"}, "the ipu licence cannot be one of several"),
    # a later component's request is held to the same sizes as any job's
    ({"tres_per_node": "gres:ipu:3", "het_job_offset": 1}, "asks for 3 IPUs, not a valid partition size"),
    ({"tres_per_node": "gres:ipu:16", "het_job_offset": 1, "min_nodes": 1, "max_nodes": 2},
     "IPU jobs need a fixed node count"),
])
def test_submit_refuses_with_one_line(lua_file, job, words):
    """One line for sbatch's user, and the closest code Slurm can name for a client that shows no
    user message (slurmrestd's JSON errors): the licence's, or the GRES's, never "Unspecified"."""
    rc, _lic, _nodes, msg = run(lua_file, job)
    assert msg.startswith("slurm-ipu: ") and words in msg and "\x1e" not in msg  # one message
    assert rc == (REFUSED if "licence" in words else GRES_REFUSED), (rc, words)


@pytest.mark.parametrize("job,words", [
    ({"tres_per_job": "gres:gpu:ipu:8"}, "--gpus=ipu:8 asks for GPUs of type ipu: ask for IPUs with --ipus=8 "
                                         "(the job's total)"),
    ({"tres_per_node": "gres/gpu:ipu:4"}, "--gpus-per-node=ipu:4 (or --gres=gpu:ipu:4) asks for GPUs of type ipu: ask "
                                          "for IPUs with --gres=ipu:4 (IPUs per node)"),
    ({"tres_per_task": "cpu:2,gres/gpu:ipu:1"}, "--gpus-per-task=ipu:1 asks for GPUs of type ipu: ask for IPUs with "
                                                "--gres=ipu:N (IPUs per node) or --ipus=N"),
    ({"tres_per_socket": "gres:gpu:ipu", "tres_per_node": "gres:ipu:4"}, "--gpus-per-socket=ipu:1 asks for GPUs"),
])
def test_gpus_of_type_ipu_are_told_how_to_ask_for_ipus(lua_file, job, words):
    """On a site with GPUs the client passes them, and Slurm's own answer is a
    bare 'Invalid generic resource (gres) specification'."""
    rc, _lic, _nodes, msg = run(lua_file, job)
    assert rc == GRES_REFUSED and msg.startswith("slurm-ipu: ") and words in msg and "\x1e" not in msg, msg


@pytest.mark.parametrize("tres,words", [
    ("gres:ipus:4", "--gres=ipus:4 names no GRES here: IPUs are --gres=ipu:4 (IPUs per node)"),
    ("gres/IPU:8", "--gres=IPU:8 names no GRES here: IPUs are --gres=ipu:8"),
    ("gres/gpu:1,gres/IPUS:2", "--gres=IPUS:2 names no GRES here: IPUs are --gres=ipu:2"),
])
def test_a_misspelt_ipu_gres_is_told_the_spelling(lua_file, tres, words):
    """Slurm alone says only 'Invalid generic resource (gres) specification'; the advice followed
    (the same count as --gres=ipu:N) is accepted."""
    rc, _lic, _nodes, msg = run(lua_file, {"tres_per_node": tres})
    assert rc == GRES_REFUSED and msg.startswith("slurm-ipu: ") and words in msg, msg
    fixed = words.split("IPUs are --gres=")[1].split()[0]
    assert run(lua_file, {"tres_per_node": f"gres/{fixed}"})[0] == 0


def test_a_site_s_gpu_jobs_pass_untouched(lua_file):
    for job in ({"tres_per_job": "gres:gpu:4"}, {"tres_per_node": "gres/gpu:a100:2,gres/ipu:4"},
                {"tres_per_task": "gres/gpu:1"}, {"tres_per_node": "gres/gpu"}):
        assert run(lua_file, job)[0] == 0, job


@pytest.mark.parametrize("change,rec,result", [
    ({"min_nodes": 4}, {"tres_per_node": "gres:ipu:4", "min_nodes": 2, "licenses": "ipu:8"}, (0, "ipu:16")),
    ({"min_nodes": 3}, {"tres_per_node": "gres:ipu:4", "min_nodes": 2, "licenses": "ipu:8"}, (REFUSED, None)),
    # The GRES count is fixed at submit (Slurm kept the licence this script wrote
    # while refusing the TRES, or kept the old GRES count beside it); restated, it changes nothing.
    ({"tres_per_node": "gres:ipu:8"}, {"tres_per_node": "gres:ipu:4", "min_nodes": 2}, (REFUSED, None)),
    ({"tres_per_node": "gres/ipu:4", "min_nodes": 4}, {"tres_per_node": "gres:ipu:4", "min_nodes": 2},
     (0, "ipu:16")),
    ({"licenses": "ipu:64"}, {"tres_per_node": "gres:ipu:4", "min_nodes": 2}, (REFUSED, None)),
    ({"time_limit": 5}, {"tres_per_node": "gres:ipu:4", "min_nodes": 2}, (0, "nil")),
    ({"min_nodes": 2}, {"min_nodes": 1}, (0, "nil")),  # not an IPU job
    # A licence added by modify to a job without IPU GRES (with or without NumNodes).
    ({"licenses": "ipu:64", "min_nodes": 1}, {"min_nodes": 1}, (REFUSED, None)),
    ({"licenses": "ipu:64"}, {"min_nodes": 1}, (REFUSED, None)),
    ({"licenses": "matlab:1,ipu:8"}, {"tres_per_node": "gres:ipu:4", "min_nodes": 2}, (REFUSED, None)),
    # Other licences change on an IPU job: its ipu licence is recomputed, not dropped.
    ({"licenses": "matlab:1"}, {"tres_per_node": "gres:ipu:4", "min_nodes": 2, "licenses": "ipu:8"},
     (0, "matlab:1,ipu:8")),
    # GRES added by modify, given twice or removed: refused.
    ({"tres_per_node": "gres:ipu:4"}, {"min_nodes": 1}, (REFUSED, None)),
    ({"tres_per_node": "gres/ipu:4", "min_nodes": 2}, {"min_nodes": 1}, (REFUSED, None)),
    ({"tres_per_node": "gres:ipu:16,gres:ipu:1"}, {"min_nodes": 1}, (REFUSED, None)),
    ({"tres_per_node": ""}, {"tres_per_node": "gres:ipu:4", "min_nodes": 1, "licenses": "ipu:4"}, (REFUSED, None)),
    ({"tres_per_node": "gres:gpu:1"}, {"tres_per_node": "gres:ipu:4", "min_nodes": 1, "licenses": "ipu:4"},
     (REFUSED, None)),
    ({"tres_per_task": "gres/ipu:1"}, {"min_nodes": 1}, (REFUSED, None)),
    ({"min_nodes": 2, "max_nodes": 4}, {"tres_per_node": "gres:ipu:4", "min_nodes": 1}, (REFUSED, None)),
    # A heterogeneous job's later component keeps its IPUs as GRES alone: no licence, ever.
    ({"min_nodes": 2}, {"tres_per_node": "gres:ipu:16", "min_nodes": 1, "het_job_offset": 1}, (0, "nil")),
    ({"min_nodes": 3}, {"tres_per_node": "gres:ipu:16", "min_nodes": 1, "het_job_offset": 1}, (REFUSED, None)),
])
def test_modify_keeps_licence_and_gres_consistent(lua_file, change, rec, result):
    rc, lic, _nodes, msg = run(lua_file, change, rec)
    assert rc == result[0], msg
    if rc == REFUSED:  # scontrol says "Invalid license specification"; the reason is in slurmctld's log
        assert msg.startswith("slurm-ipu: refused job modify: "), msg
    if result[1] is not None:
        assert lic == result[1]


SPANK = "_SLURM_SPANK_OPTION_spank_ipu_ipu_gcds=8"  # the other entry Slurm puts there (measured, 22.05)


@pytest.mark.parametrize("job,words", [
    ({"tres_per_node": "gres:ipu:4", "spank_job_env": [SPANK, "IPU_GCDS=8"]},
     "--ipu-gcds=8: a partition of 4 IPUs over 1 ILD(s) has 1, 2, 4 GCD(s)"),
    ({"tres_per_node": "gres:ipu:16", "spank_job_env": ["IPU_ILDS=2"]},
     "--ipu-ilds=2: a partition of 16 IPUs on this Pod spans 1 ILD(s)"),
    ({"tres_per_node": "gres:ipu:16", "min_nodes": 4, "spank_job_env": ["IPU_GCDS=2"]},
     "--ipu-gcds=2: a partition of 64 IPUs over 1 ILD(s) has 1, 4, 8, 16, 32, 64 GCD(s)"),
])
def test_impossible_shapes_are_refused_at_submit(lua_file, job, words):
    rc, _lic, _nodes, msg = run(lua_file, job)
    assert rc == GRES_REFUSED and words in msg, msg


@pytest.mark.parametrize("job,licence", [
    ({"tres_per_node": "gres:ipu:4", "min_nodes": 2, "spank_job_env": ["IPU_GCDS=2", "IPU_ILDS=1"]}, "ipu:8"),
    ({"tres_per_node": "gres:ipu:4", "spank_job_env": [SPANK]}, "ipu:4"),
])
def test_possible_shapes_pass(lua_file, job, licence):
    assert run(lua_file, job)[:2] == (0, licence)


BIG = "x" * (limits.FIELD_BYTES + 1)


@pytest.mark.parametrize("job,words", [
    ({"comment": BIG}, f"job field comment is {limits.FIELD_BYTES + 1} bytes, over slurm-ipu's bound of "
                       f"{limits.FIELD_BYTES}; shorten it"),
    ({"name": BIG, "tres_per_node": "gres:ipu:4"}, "job field name is"),
    ({"work_dir": BIG}, "job field work_dir is"),
    ({"spank_job_env": ["A=" + "x" * 1_500_000]}, "the job's SPANK environment is 1500002 bytes, over slurm-ipu's "
                                                   f"bound of {limits.SPANK_BYTES}"),
    ({"spank_job_env": [f"K{i}=1" for i in range(limits.SPANK_ITEMS + 1)]},
     f"the job's SPANK environment has {limits.SPANK_ITEMS + 1} entries"),
])
def test_oversized_job_input_is_refused_at_submit(lua_file, job, words):
    rc, _lic, _nodes, msg = run(lua_file, job)
    assert rc == -1 and msg.startswith("slurm-ipu: ") and words in msg, msg  # no Slurm code says "too big"


@pytest.mark.parametrize("value", ["two", "0", "1234567890", "x" * 60_000, "1e3", "-2"])
@pytest.mark.parametrize("key", ["IPU_GCDS", "IPU_ILDS"])  # what the prolog reads (IPU_IPUS is the GRES by then)
def test_a_count_the_prolog_would_refuse_is_refused_at_submit_in_the_same_words(lua_file, key, value):
    """A libslurm submit of IPU_GCDS=<60,000 x> passed job_submit.lua (digits only
    were read) and the prolog logged it whole, 60 KB per job, until the state directory was full."""
    rc, _lic, _nodes, msg = run(lua_file, {"tres_per_node": "gres:ipu:4", "spank_job_env": [f"{key}={value}"]})
    with pytest.raises(ConfigError) as prolog_said:
        jobenv.from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "0", "SLURM_JOB_NODELIST": "n1",
                         "SLURM_JOB_LICENSES": "ipu:4", f"SPANK_{key}": value})
    assert rc == GRES_REFUSED and msg == f"slurm-ipu: {prolog_said.value}", msg
    assert len(msg) < 200


def test_an_ipus_count_that_is_no_number_is_refused(lua_file):
    rc, _lic, _nodes, msg = run(lua_file, {"spank_job_env": ["IPU_IPUS=4x"]})
    assert rc == GRES_REFUSED and msg == "slurm-ipu: --ipus='4x' is not a positive number; use e.g. --ipus=2", msg


def test_job_input_at_the_bounds_passes(lua_file):
    job = {"comment": "x" * limits.FIELD_BYTES, "tres_per_node": "gres:ipu:4",
           "spank_job_env": ["A=" + "x" * (limits.SPANK_BYTES - 2)]}
    assert run(lua_file, job)[:2] == (0, "ipu:4")


def test_an_oversized_comment_is_refused_on_modify(lua_file):
    rc, _lic, _nodes, msg = run(lua_file, {"comment": BIG}, {"min_nodes": 1})
    assert rc == REFUSED and "refused job modify: job field comment is" in msg, msg


def test_a_256_pod_takes_multiples_of_64_and_keeps_gcds_inside_ilds(lua_256):
    assert run(lua_256, {"tres_per_node": "gres:ipu:64", "min_nodes": 3})[:2] == (0, "ipu:192")
    rc, _lic, _nodes, msg = run(lua_256, {"tres_per_node": "gres:ipu:48", "min_nodes": 2})
    assert rc == GRES_REFUSED and "valid totals: 1, 2, 4, 8, 16, 32, 64, 128, 192, 256" in msg
    rc, _lic, _nodes, msg = run(lua_256, {"tres_per_node": "gres:ipu:64", "min_nodes": 2,
                                          "spank_job_env": ["IPU_GCDS=1"]})
    assert rc == GRES_REFUSED and "--ipu-gcds=1: a partition of 128 IPUs over 2 ILD(s) has 2, 8, 16, 32, 64, 128" in msg


# --- licence grammar: job_submit.lua against Slurm's (slurm_ipu/slurm/licences.py) ----------

FUZZ = """
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_INVALID_LICENSES = 2040, ESLURM_INVALID_GRES = 2072,
          log_user = function() end, log_info = function() end }
dofile(%(path)r)
local function hex(s)
  return (string.gsub(s or "", ".", function(c) return string.format("%%02x", string.byte(c)) end))
end
for _, case in ipairs({%(cases)s}) do
  local job = { licenses = case[1], tres_per_node = case[2], min_nodes = case[3], max_nodes = case[3] }
  local rc = slurm_job_submit(job, {}, 0)
  print(rc .. " " .. (job.licenses and ("=" .. hex(job.licenses)) or "nil"))
end
"""


KNOWN = {"ipu", "ipu@db", "matlab@db"}  # the licences the real-Slurm fuzz test's lab has


def lua_str(text: str) -> str:
    return '"' + "".join(f"\\{b}" for b in text.encode()) + '"'


@pytest.mark.parametrize("version", ["22.05"])
def test_no_licence_string_gets_an_ipu_count_its_gres_does_not_ask_for(tmp_path, version):
    """2,000 seeded licence strings, each with or without an IPU GRES, through job_submit.lua:
    whatever it lets through, Slurm's grammar counts exactly the GRES's IPUs as the ipu licence
    (0 without GRES), and a valid string naming no ipu is never refused. The real-Slurm tier runs
    the same corpus against slurmctld (tests/slurm/test_licence_fuzz.py)."""
    from tests.licence_corpus import corpus

    path = tmp_path / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", values(64, version)))
    cases = corpus(2000)
    rows = ", ".join(f"{{{lua_str(s)}, {lua_str(f'gres:ipu:{g[0]}') if g else 'nil'}, {g[1] if g else 1}}}"
                     for s, g in cases)
    proc = subprocess.run([LUA, "-"], input=FUZZ % {"path": str(path), "cases": rows}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    grammar = licences.grammar(version)
    wrong = []
    for (text, gres), line in zip(cases, proc.stdout.splitlines(), strict=True):
        rc, out = line.split(" ")
        asked = gres[0] * gres[1] if gres else 0
        result = bytes.fromhex(out[1:]).decode() if out != "nil" else None
        if rc == "0" and licences.parse(result, grammar) is not None:
            if licences.count(result, "ipu", grammar) != asked:
                wrong.append((text, gres, result))
        parsed = licences.parse(text, grammar)
        known = parsed is not None and set(parsed) <= KNOWN  # else Slurm refuses the names anyway
        if gres is None and known and "ipu" not in parsed and (rc != "0" or result != text):
            wrong.append((text, gres, f"refused or changed: {rc} {result!r}"))
    assert not wrong, f"{len(wrong)} of {len(cases)} strings: {wrong[:10]}"


# --- --ipus=N, Graphcore's dialect -------------------------------------

@pytest.fixture(scope="module")
def lua_16(tmp_path_factory):
    """The lab's Pod: 64 IPUs on hosts of 16, Slurm 24.11 (gres/ipu in TRES strings)."""
    path = tmp_path_factory.mktemp("lua16") / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", values(64, "24.11", per_host=16)))
    return str(path)


def ipus(total: int, **job) -> dict:
    return {"spank_job_env": [f"_SLURM_SPANK_OPTION_spank_ipu_ipus={total}", f"IPU_IPUS={total}"], **job}


def run_tres(lua_file, job: dict, parts: dict | None = None) -> tuple[int, str, str, str]:
    """rc, licence, tres_per_node, message. parts: Slurm's partition list (name -> fields)."""
    code = HARNESS.replace('tostring(job.min_nodes)', 'tostring(job.tres_per_node)') % {
        "path": lua_file, "job": lua_table(job), "rec": "{}", "modify": "false",
        "parts": "{" + ", ".join(f'["{k}"] = {lua_table(v)}' for k, v in (parts or {}).items()) + "}"}
    proc = subprocess.run([LUA, "-"], input=code, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    rc, lic, tres, msg = proc.stdout.rstrip("\n").split("\t")
    return int(rc), lic, tres, msg


@pytest.mark.parametrize("job,licence,tres", [
    (ipus(4), "ipu:4", "gres/ipu:4"),
    (ipus(1), "ipu:1", "gres/ipu:1"),
    (ipus(8, min_nodes=2, max_nodes=2), "ipu:8", "gres/ipu:4"),
    (ipus(64, min_nodes=4), "ipu:64", "gres/ipu:16"),
    (ipus(8, min_nodes=2, tres_per_node="gres/ipu:4"), "ipu:8", "gres/ipu:4"),  # both, agreeing
    (ipus(4, tres_per_node="gres/gpu:1", licenses="matlab:1"), "matlab:1,ipu:4", "gres/gpu:1,gres/ipu:4"),
])
def test_ipus_is_the_job_s_total_spread_over_its_nodes(lua_16, job, licence, tres):
    assert run_tres(lua_16, job) == (0, licence, tres, "")


@pytest.mark.parametrize("job,line", [
    (ipus(3), "slurm-ipu: --ipus=3 on 1 node(s) asks for 3 IPUs, not a valid partition size; valid totals: 1, 2, 4, "
              "8, 16, 32, 64"),
    (ipus(8, min_nodes=3), "slurm-ipu: --ipus=8 does not spread evenly over 3 node(s); no partition size spreads "
                           "evenly over 3 nodes: for 8 IPUs use -N 1, 2, 4"),
    (ipus(6, min_nodes=2), "slurm-ipu: --ipus=6 on 2 node(s) asks for 6 IPUs, not a valid partition size; valid "
                           "totals: 1, 2, 4, 8, 16, 32, 64"),  # spreads (3 each), but no such size; 2 nodes take others
    (ipus(7, min_nodes=2), "slurm-ipu: --ipus=7 does not spread evenly over 2 node(s); on 2 node(s) ask for one of 2, "
                           "4, 8, 16, 32 IPUs, or another -N"),
    ({"tres_per_node": "gres/ipu:4", "min_nodes": 3}, "slurm-ipu: --gres=ipu:4 on 3 node(s) asks for 12 IPUs, not a "
     "valid partition size; valid totals: 1, 2, 4, 8, 16, 32, 64; no partition size spreads evenly over 3 nodes: use "
     "-N 1, 2, 4"),
    (ipus(8, min_nodes=2, tres_per_node="gres/ipu:2"), "slurm-ipu: --ipus=8 and --gres=ipu:2 on 2 node(s) (4 IPUs) "
                                                       "disagree; give one of them"),
    (ipus(32), "slurm-ipu: --ipus=32 on 1 node(s) puts 32 IPUs on a node; a node has 16: use -N 2 or more"),
    ({"tres_per_node": "gres/ipu:64"}, "slurm-ipu: --gres=ipu:64 on 1 node(s) asks for 64 IPUs per node; a node has "
     "16: for 64 IPUs use -N 4 --gres=ipu:16 (IPUs per node), or --ipus=64 -N 4"),
    ({"tres_per_node": "gres/ipu:32", "min_nodes": 2}, "slurm-ipu: --gres=ipu:32 on 2 node(s) asks for 32 IPUs per "
     "node; a node has 16: for 64 IPUs use -N 4 --gres=ipu:16 (IPUs per node), or --ipus=64 -N 4"),
    (ipus(128, min_nodes=4), "slurm-ipu: --ipus=128 on 4 node(s) asks for 128 IPUs, more than the Pod's 64; valid "
                             "totals: 1, 2, 4, 8, 16, 32, 64"),
    (ipus(8, min_nodes=2, max_nodes=4), "slurm-ipu: IPU jobs need a fixed node count"),
])
def test_bad_ipus_requests_are_refused_with_one_line(lua_16, job, line):
    rc, _lic, _tres, msg = run_tres(lua_16, job)
    assert rc == GRES_REFUSED and msg.startswith(line), msg


@pytest.fixture(scope="module")
def lua_whole_hosts(tmp_path_factory):
    """The allocation model (vipu.model: allocation): the lab's Pod, a job takes its hosts whole;
    rendered from the site description, as `slurm-ipu render` does."""
    from slurm_ipu import config
    from slurm_ipu.deploy import fragments

    tmp = tmp_path_factory.mktemp("luawhole")
    site = config.load(str(write_conf(tmp, vipu={"model": "allocation"}, slurm={"version": "24.11"})))
    path = tmp / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", fragments.context(site)))
    return str(path)


@pytest.mark.parametrize("job,licence,tres,said", [
    ({"tres_per_node": "gres/ipu:4", "min_nodes": 2}, "ipu:32", "gres/ipu:16", "4 IPUs per node raised to 16"),
    ({"tres_per_node": "gres/gpu:1,gres/ipu:1", "min_nodes": 1}, "ipu:16", "gres/gpu:1,gres/ipu:16", "1 IPUs"),
    ({"tres_per_node": "gres/ipu:16", "min_nodes": 4}, "ipu:64", "gres/ipu:16", ""),
    (ipus(8, min_nodes=2), "ipu:32", "gres/ipu:16", "4 IPUs per node raised to 16"),
    ({"min_nodes": 3}, "nil", "nil", ""),  # not an IPU job: untouched
])
def test_in_the_allocation_model_a_job_takes_its_hosts_whole(lua_whole_hosts, job, licence, tres, said):
    rc, lic, got, msg = run_tres(lua_whole_hosts, job)
    assert (rc, lic, got) == (0, licence, tres) and said in msg


def test_in_the_allocation_model_a_host_count_that_is_no_allocation_is_refused(lua_whole_hosts):
    rc, _, _, msg = run_tres(lua_whole_hosts, {"tres_per_node": "gres/ipu:4", "min_nodes": 3})
    assert rc != 0 and "asks for 48 IPUs, not a valid partition size" in msg


def run_features(lua_file, job: dict, rec: dict | None = None) -> tuple[int, str, str]:
    """rc, the job's constraint (--constraint, job_desc.features) and the message."""
    code = HARNESS.replace('tostring(job.min_nodes)', 'tostring(job.features)') % {
        "path": lua_file, "job": lua_table(job), "rec": lua_table(rec or {}),
        "modify": "true" if rec is not None else "false", "parts": "{}"}
    proc = subprocess.run([LUA, "-"], input=code, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    rc, _, features, msg = proc.stdout.rstrip("\n").split("\t")
    return int(rc), features, msg


RUNS2 = "[ipugroup2_0|ipugroup2_1]"  # the lab's Pod: node[1-2] and node[3-4]


@pytest.mark.parametrize("job,features", [
    ({"tres_per_node": "gres/ipu:16", "min_nodes": 2}, RUNS2),
    (ipus(8, min_nodes=2), RUNS2),  # Graphcore's dialect, raised to whole hosts
    ({"tres_per_node": "gres/ipu:16", "min_nodes": 2, "features": "intel|amd"}, f"(intel|amd)&{RUNS2}"),
    ({"tres_per_node": "gres/ipu:16", "min_nodes": 2, "features": RUNS2}, RUNS2),  # ours, not doubled
    ({"tres_per_node": "gres/ipu:16", "min_nodes": 1, "features": "intel"}, "intel"),  # one host: any
    ({"tres_per_node": "gres/ipu:16", "min_nodes": 4}, "nil"),  # the whole Pod
    ({"min_nodes": 2, "features": "intel"}, "intel"),  # no IPUs: untouched
])
def test_a_multi_host_allocation_model_job_is_kept_to_runs_of_hosts_v_ipu_can_partition(lua_whole_hosts, job,
                                                                                          features):
    rc, got, _ = run_features(lua_whole_hosts, job)
    assert (rc, got) == (0, features)


def test_a_constraint_that_cannot_be_combined_with_the_runs_is_refused_in_one_line(lua_whole_hosts):
    rc, _, msg = run_features(lua_whole_hosts, {"tres_per_node": "gres/ipu:16", "min_nodes": 2,
                                                "features": "[rack1|rack2]"})
    assert rc == GRES_REFUSED and msg.count("\n") == 0
    assert "--constraint=[rack1|rack2]: brackets or counts cannot" in msg


@pytest.mark.parametrize("change,rec,features", [
    # NumNodes 2 -> 1: the runs go, the user's own constraint stays
    ({"min_nodes": 1}, {"tres_per_node": "gres/ipu:16", "min_nodes": 2, "features": f"(intel)&{RUNS2}"}, "intel"),
    ({"min_nodes": 1}, {"tres_per_node": "gres/ipu:16", "min_nodes": 2, "features": RUNS2}, ""),
    # 1 -> 2: the runs come
    ({"min_nodes": 2}, {"tres_per_node": "gres/ipu:16", "min_nodes": 1, "features": "intel"}, f"(intel)&{RUNS2}"),
    # a new constraint on a 2-host job keeps the runs
    ({"features": "amd"}, {"tres_per_node": "gres/ipu:16", "min_nodes": 2, "features": RUNS2}, f"(amd)&{RUNS2}"),
    ({"features": ""}, {"tres_per_node": "gres/ipu:16", "min_nodes": 2, "features": f"(amd)&{RUNS2}"}, RUNS2),
])
def test_modify_keeps_the_runs_to_the_job_s_host_count(lua_whole_hosts, change, rec, features):
    rc, got, msg = run_features(lua_whole_hosts, change, rec)
    assert (rc, got) == (0, features), msg


@pytest.mark.parametrize("job", [{"tres_per_node": "gres/ipu:64"}, {"tres_per_node": "gres/ipu:32"},
                                 {"tres_per_node": "gres/ipu:32", "min_nodes": 2}, ipus(64), ipus(32)])
def test_too_many_ipus_per_node_gets_advice_that_is_accepted_when_followed(lua_16, job):
    """A per-node count over a host's IPUs used to be told "use -N 4 or more", which multiplies the
    total: --gres=ipu:64 on 4 nodes asks for 256. Each way the advice names is accepted."""
    import re

    rc, _lic, _tres, msg = run_tres(lua_16, job)
    assert rc == GRES_REFUSED, msg
    followed = []
    for nodes, per in re.findall(r"use -N (\d+) --gres=ipu:(\d+)", msg):
        followed.append({"tres_per_node": f"gres/ipu:{per}", "min_nodes": int(nodes), "max_nodes": int(nodes)})
    for total, nodes in re.findall(r"--ipus=(\d+) -N (\d+)", msg):
        followed.append(ipus(int(total), min_nodes=int(nodes), max_nodes=int(nodes)))
    for nodes in re.findall(r"use -N (\d+) or more$", msg):
        followed.append(ipus(int(job["spank_job_env"][1].split("=")[1]), min_nodes=int(nodes), max_nodes=int(nodes)))
    assert followed, msg
    for advised in followed:
        rc, lic, _tres, said = run_tres(lua_16, advised)
        assert rc == 0 and lic.startswith("ipu:"), (msg, advised, said)


@pytest.mark.parametrize("job,licence,tres,said", [
    ({"tres_per_node": "gres/ipu:4", "min_nodes": 1, "shared": 0}, "ipu:16", "gres/ipu:16",
     "4 IPUs per node raised to 16: --exclusive gives the job its nodes' every IPU"),
    (ipus(8, min_nodes=2, shared=0), "ipu:32", "gres/ipu:16", "4 IPUs per node raised to 16"),
    ({"tres_per_node": "gres/ipu:16", "min_nodes": 2, "shared": 0}, "ipu:32", "gres/ipu:16", ""),
    ({"tres_per_node": "gres/ipu:4", "min_nodes": 1, "shared": 2}, "ipu:4", "gres/ipu:4", ""),  # --exclusive=user
    ({"tres_per_node": "gres/ipu:4", "min_nodes": 1}, "ipu:4", "gres/ipu:4", ""),
])
def test_an_exclusive_job_s_licence_and_gres_are_its_nodes_every_ipu(lua_16, job, licence, tres, said):
    """Slurm allocates and accounts an --exclusive job's nodes' every GRES: its licence (and so
    its partition) were the request's, 4 where accounting said gres/ipu=16."""
    rc, lic, got, msg = run_tres(lua_16, job)
    assert (rc, lic, got) == (0, licence, tres) and said in msg, msg


@pytest.mark.parametrize("shape,ok", [(["IPU_ILDS=3"], True), (["IPU_ILDS=3", "IPU_GCDS=12"], True),
                                      (["IPU_GCDS=3"], True), (["IPU_ILDS=2"], False), (["IPU_GCDS=8"], False)])
def test_a_192_ipu_partition_takes_the_shapes_the_rule_table_gives_it(tmp_path, shape, ok):
    """rules.valid_ilds(192) is [3], rules.valid_gcds(192, 3) is 3, 12, 24, 48, 96, 192: the SPANK
    plugin passes any count on, and this file, rendered from the table, decides."""
    path = tmp_path / "job_submit.lua"
    path.write_text(render.render("job_submit/job_submit.lua", values(256, per_host=64)))
    rc, lic, _, msg = run(str(path), {"tres_per_node": "gres:ipu:64", "min_nodes": 3, "spank_job_env": shape})
    assert (rc == 0 and lic == "ipu:192") if ok else (rc == GRES_REFUSED and "IPUs" in msg), (rc, lic, msg)
