"""The SPANK plugin's parsers (spank/args.c), compiled with a small driver and no Slurm: the
plugstack arguments an admin writes and the --ipu-* values a user types."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import build_driver

SPANK = Path(__file__).resolve().parents[2] / "spank"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not Path("/usr/include/slurm/spank.h").exists(),
                                reason="gcc and libslurm-dev missing: `make test` installs them")


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build_driver(tmp_path_factory, "args_driver")


def run(driver: str, *args: str) -> str:
    proc = subprocess.run([driver, *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("value,slot", [("2", "2"), ("00000000002", "2"), ("1024", "1024"), ("0001", "1"),
                                        ("3", "3"), ("12", "12")])  # 3 ILDs, 12 GCDs: valid for 192 IPUs
def test_counts_are_stored_as_the_number_parsed(driver, value, slot):
    """Any count in range: which shapes a partition of the job's size may have is job_submit.lua's
    to say, from the rule table (rules.valid_gcds(192, 1) holds 3 and 12)."""
    assert run(driver, "count", "ipu-gcds", value, "1024").splitlines() == [f"rc=0 slot={slot}"]


@pytest.mark.parametrize("value", ["0", "-2", "2x", "", "2048", "99999999999999999999", " 2", "+2"])
def test_bad_counts_are_refused_with_the_fix(driver, value):
    out = run(driver, "count", "ipu-gcds", value, "1024")
    assert f"error: spank_ipu: --ipu-gcds={value}: not a count from 1 to 1024; use e.g. --ipu-gcds=2" in out
    assert "rc=-1 slot=\n" in out


@pytest.mark.parametrize("value,slot", [("4", "4"), ("192", "192"), ("0008", "8"), ("65536", "65536")])
def test_ipus_totals_are_any_positive_count(driver, value, slot):
    """--ipus=N (Graphcore's dialect): whether N is a partition size is job_submit.lua's to say."""
    assert run(driver, "total", value).splitlines() == [f"rc=0 slot={slot}"]


@pytest.mark.parametrize("value", ["0", "-4", "4x", "", " 4", "+4", "65537", "99999999999999999999"])
def test_bad_ipus_totals_are_refused_with_the_fix(driver, value):
    out = run(driver, "total", value)
    assert f"error: spank_ipu: --ipus={value}: not a number of IPUs from 1 to 65536; use e.g. --ipus=4" in out
    assert "rc=-1 slot=\n" in out


def test_plugstack_good(driver):
    out = run(driver, "plugstack", "vipu_host=fe80::1", "vipu_port=08091", "prefix=pod_a-", "debug=on",
              "helper=/opt/slurm-ipu/venv/bin/slurm-ipu", "allocation_model=yes")
    assert out == "rc=0 host=fe80::1 port=8091 prefix=pod_a- debug=1 helper=/opt/slurm-ipu/venv/bin/slurm-ipu alloc=1\n"


@pytest.mark.parametrize("args,words", [
    (["vipu_host=a b"], "vipu_host='a b' has character ' '; use letters, digits and '.-_:'"),
    (["vipu_host=h", "prefix=slurm:"], "prefix='slurm:' has character ':'; use letters, digits and '-_'"),
    (["vipu_host=h", "debug=maybe"], "debug='maybe' is not yes/no"),
    (["vipu_host=h", "vipu_port=70000"], "vipu_port='70000' is not a port (1-65535)"),
    (["vipu_host=h", "vipu_port= 80"], "vipu_port=' 80' is not a port"),
    (["vipu_host=h", "colour=red"], "unknown plugstack argument 'colour=red'; valid: vipu_host="),
    ([], "plugstack needs vipu_host="),
    (["vipu_host=" + "h" * 300], "is empty or longer than 255 characters"),
    (["vipu_host=h", "helper=slurm-ipu"], "helper='slurm-ipu' is not an absolute path"),
    (["vipu_host=h", "helper=/opt/x;rm"], "helper='/opt/x;rm' has character ';'"),
    (["vipu_host=h", "allocation_model=2"], "allocation_model='2' is not yes/no"),
])
def test_plugstack_refusals_name_the_argument_and_what_is_accepted(driver, args, words):
    out = run(driver, "plugstack", *args)
    assert words in out and out.splitlines()[-1].startswith("rc=-1"), out


@pytest.mark.parametrize("tres,ipus", [
    ("gres:ipu:4", 4),                     # 22.05's spelling of a step's or job's request
    ("gres/ipu:16", 16),                   # 23.02 and later
    ("gres/ipu", 1),                       # no count: one
    ("gres:gpu:2,gres:ipu:8", 8), ("gres/ipu:2;gres/gpu:1", 2),
    ("gres/ipux:4", 0), ("gres/gpu:4", 0), ("license/ipu:4", 0), ("", 0),
])
def test_the_ipus_a_tres_request_names(driver, tres, ipus):
    """spank/step.c: what srun reads from slurmctld's step and job records."""
    assert run(driver, "gres", tres) == f"ipus={ipus}\n"


def test_ipurun_s_own_option_is_offered_in_srun_only_and_ipu_means_ipus(driver):
    """Sbatch/salloc --help listed ipurun's internal --ipu-instance, and --ipu=4
    was an ambiguous abbreviation. tests/slurm/test_dialects.py checks both as Slurm shows them."""
    allocator = run(driver, "options", "allocator").split()
    assert "--ipu-instance" not in allocator and "--ipu=N" in allocator and "--ipus=N" in allocator
    for ctx in ("local", "remote"):  # slurmstepd must know it, or srun's value never reaches the task
        assert set(run(driver, "options", ctx).split()) == set(allocator) | {"--ipu-instance"}


@pytest.mark.parametrize("argv,said", [
    (["sbatch", "--gpus=4", "--wrap", "true"], "--gpus=4 asks for GPUs, and this cluster has none: ask for IPUs "
                                                "with --ipus=4 (the job's total)"),
    (["sbatch", "-N", "2", "-G", "8", "job.sh"], "--gpus=8 asks for GPUs"),
    (["salloc", "-G2"], "--gpus=2 asks for GPUs, and this cluster has none: ask for IPUs with --ipus=2"),
    (["srun", "--gpus-per-node", "ipu:4", "-N2", "app"], "--gpus-per-node=ipu:4 asks for GPUs of type ipu: ask for "
                                                         "IPUs with --gres=ipu:4 (IPUs per node)"),
    (["sbatch", "--gres=gpu:a100:2,ipu:4", "x.sh"], "--gres=gpu:a100:2,ipu:4 asks for GPUs, and this cluster has "
                                                    "none: ask for IPUs with --gres=ipu:2 (IPUs per node)"),
    (["srun", "--gres", "gpu", "app"], "--gres=gpu asks for GPUs, and this cluster has none: ask for IPUs with "
                                       "--gres=ipu:1"),
    (["srun", "--gpus-per-task=1", "app"], "ask for IPUs with --gres=ipu:N (IPUs per node) or --ipus=N"),
    # the command's own arguments are not Slurm's: the scan stops at the command
    (["srun", "-N", "2", "--job-name", "x", "python", "train.py", "--gpus", "4"], ""),
    (["srun", "--exclusive", "python", "train.py", "--gpus=4"], ""),
    (["sbatch", "--", "--gpus=4"], ""),
    (["sbatch", "--gres=ipu:4", "--gres-flags=enforce-binding", "job.sh"], ""),
    (["sbatch", "--gpus-per-node"], "--gpus-per-node= asks for GPUs"),  # a value missing: Slurm's own error follows
])
def test_gpu_habits_on_the_command_line_get_the_ipu_spelling(driver, argv, said):
    """Sbatch itself refuses `--gpus=4` where GresTypes has no gpu, before
    job_submit.lua could hint; the plugin reads the command line first (the RPC for GresTypes is
    tests/slurm/test_dialects.py's)."""
    out = run(driver, "habit", *argv).strip()
    assert (said in out) if said else out == "", out


def test_the_habit_scan_steps_over_exactly_the_values_srun_and_sbatch_take(driver):
    from slurm_ipu.launcher import srunopts

    short = {letter for letter, name in srunopts.SHORT.items() if name in srunopts.VALUED} | {"-a"}  # sbatch --array
    assert set(run(driver, "valued").split()) == srunopts.VALUED | srunopts.SUBMIT_VALUED | short


# The IPU GRES's near misses, as the plugin (spank/habits.c, what sbatch, salloc and srun type) and
# job_submit.lua (MISSPELT: -M, REST and libslurm submissions, which no client checked) tell them.
MISSPELT = [("ipus:4", "--gres=ipus:4 names no GRES here: IPUs are --gres=ipu:4 (IPUs per node)"),
            ("IPU:8", "--gres=IPU:8 names no GRES here: IPUs are --gres=ipu:8"),
            ("IPUS", "--gres=IPUS names no GRES here: IPUs are --gres=ipu:1"),
            ("ipu2:4", ""), ("ipu:4", ""), ("ipusb:4", "")]


@pytest.mark.parametrize("gres,said", MISSPELT)
def test_a_misspelt_ipu_gres_gets_the_same_word_from_the_plugin_and_job_submit(driver, tmp_path, gres, said):
    """Slurm alone says "Invalid generic resource (gres) specification". The plugin hints only if
    the cluster's GresTypes lacks that very name (a site's own GRES named ipus is left alone)."""
    from slurm_ipu.deploy import render

    from .test_job_submit_lua import GRES_REFUSED, values
    from .test_job_submit_lua import run as run_lua

    out = run(driver, "habit", "sbatch", f"--gres={gres}", "job.sh").strip()
    if not said:
        assert out == "", out
    else:
        assert out.startswith(said) and out.endswith(f"[unless GresTypes has {gres.split(':')[0]}]"), out
    lua = tmp_path / "job_submit.lua"
    lua.write_text(render.render("job_submit/job_submit.lua", values(64)))
    rc, _lic, _nodes, msg = run_lua(str(lua), {"tres_per_node": ",".join(f"gres/{g}" for g in gres.split(","))})
    assert (rc == GRES_REFUSED and said in msg) if said else "names no GRES" not in msg, msg


HOSTLISTS = ["node[1-4]", "node[01-10],gpu7", "ipu-host[1-2,5,8-9]", "a1,a2,b[3-4]", "rack2-n[08-11]",
             "n[1-3],m[10-12]"]
CANDIDATES = ["node1", "node4", "node5", "node01", "node10", "node001", "gpu7", "gpu", "ipu-host5", "ipu-host3",
              "ipu-host9", "a1", "a3", "b3", "b4x", "b5", "rack2-n08", "rack2-n8", "rack2-n11", "m11", "n0", "n2",
              "node", "node1a", ""]


@pytest.mark.parametrize("hostlist", HOSTLISTS)
def test_the_plugin_s_hostlist_match_is_slurm_s_hostlist(driver, hostlist):
    """A task's controller is its node's: the plugin matches the node's name against each
    controller's hostlist without expanding it. It must name exactly the hosts Python's hostlist
    (Slurm's grammar, which render compresses to) expands the list to."""
    from slurm_ipu.slurm.hostlist import expand

    names = set(expand(hostlist))
    out = run(driver, "has", hostlist, *[c for c in CANDIDATES if c])
    seen = dict(line.split() for line in out.splitlines())
    assert {n for n, v in seen.items() if v == "1"} == names & set(seen)
    out = run(driver, "has", hostlist, *sorted(names))
    assert all(line.endswith(" 1") for line in out.splitlines())


def test_each_task_is_given_its_node_s_controller(driver):
    out = run(driver, "controller", "vipu_host=first", "controller=node[1-2]@10.0.0.1:8090",
              "controller=node[3-4],spare9@fe80::2:18091", "--", "node1", "node4", "spare9", "login1")
    assert out.splitlines() == ["rc=0 controllers=2", "node1 10.0.0.1:8090", "node4 fe80::2:18091",
                                "spare9 fe80::2:18091", "login1 -"]


@pytest.mark.parametrize("arg,said", [
    ("controller=node1", "controller='node1' is not HOSTS@HOST:PORT"),
    ("controller=node1@h", "controller='node1@h' is not HOSTS@HOST:PORT"),
    ("controller=node1@h:99999", "controller='99999' is not a port"),
    ("controller=no de@h:1", "its hosts have character ' '"),
    ("controller=n1@h$x:1", "controller='h$x' has character '$'"),
])
def test_a_bad_controller_argument_is_refused_naming_it(driver, arg, said):
    out = run(driver, "controller", "vipu_host=h", arg, "--")
    assert "rc=-1" in out and said in out, out
