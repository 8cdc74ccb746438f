"""The SPANK plugin's per-instance setup (spank/instance.c), run by a driver without Slurm,
against the Python wrapper (launcher/task.py, what ipurun's local backend runs and --dry-run
shows) given the same plan and task: the same environment for the program, the same binding
report, the same silence, the same refusals."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ipu.launcher import task

from .conftest import build_driver

SPANK = Path(__file__).resolve().parents[2] / "spank"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not Path("/usr/include/slurm/spank.h").exists(),
                                reason="gcc and libslurm-dev missing: `make test` installs them")

PLAN = {"IPURUN_NUM_INSTANCES": "4", "IPURUN_NUM_REPLICAS": "8", "IPURUN_IPUS_PER_REPLICA": "2",
        "IPURUN_INSTANCES_PER_HOST": "2", "IPURUN_NUM_GCDS": "2", "IPURUN_PLACEMENT": "close",
        "IPURUN_REPORT_BINDINGS": "1", "SLURMD_NODENAME": "node2", "PATH": "/usr/bin:/bin"}


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build_driver(tmp_path_factory, "instance_driver")


def in_c(driver: str, env: dict, k: int, local: int, job: int = 7):
    proc = subprocess.run([driver, str(job), str(k), str(local)], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rc = int(lines[0].split("=")[1]) if lines else None
    return rc, dict(line.split("=", 1) for line in lines[1:]), proc.stderr


def in_python(env: dict, k: int, local: int, job: int = 7, cache_root: Path | None = None):
    env = dict(env, SLURM_PROCID=str(k), SLURM_LOCALID=str(local), SLURM_JOB_ID=str(job))
    argv = [sys.executable, "-S", "-I", task.TASK, "--", "/usr/bin/env"]
    if cache_root:  # the wrapper as srun runs it, with the root the C driver was built with
        argv[3:4] = ["-c", f"import sys; sys.path.insert(0, {str(Path(task.TASK).parent)!r}); import task; "
                           f"task.JOB_CACHE_ROOT = {str(cache_root)!r}; task.main(sys.argv[1:])"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    got = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    for key in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_JOB_ID"):
        got.pop(key, None)
    if "LC_CTYPE" not in env:
        got.pop("LC_CTYPE", None)  # Python's own locale coercion (PEP 538), not the wrapper's doing
    return (0 if proc.returncode == 0 else -1), got, proc.stderr


@pytest.mark.parametrize("extra", [
    {},
    {"IPURUN_NUM_GCDS": "1", "IPURUN_PLACEMENT": "spreadnuma", "IPURUN_VIPU_TIMEOUT": "30"},
    {"IPURUN_VIPU_HOST": "10.0.0.9", "IPURUN_VIPU_PORT": "8091", "IPURUN_VIPU_PARTITION_ID": "mine",
     "IPUOF_VIPU_API_HOST": "set-by-the-plugin"},
    {"IPURUN_OFFLINE": "1", "IPURUN_VIPU_HOST": "10.0.0.9", "IPUOF_VIPU_API_PARTITION_ID": "slurm_7"},
    {"IPURUN_INSTANCE_ENV_3": "A=1\x1fB=x=y\x1fEMPTY=", "IPURUN_INSTANCE_ENV_1": "A=other"},
    {"IPURUN_AUTOREPORT_DIR": "/reports", "IPURUN_PLACEMENT": "disabled", "IPURUN_REPORT_BINDINGS": "0"},
    {"IPURUN_ONLY_OUTPUT_FROM": "3"},
    {"IPURUN_PLACEMENT": "scattersocket"},
    {"IPURUN_GCD_MAP": "1,0,1,0"},
    {"IPURUN_GCD_MAP": "1,0,1,x"},
    {"IPURUN_GCD_MAP": "1,0,1,2"},
], ids=["plan", "spreadnuma", "vipu-options", "offline", "instance-env", "autoreport", "only-output-self",
        "scattersocket", "gcd-map", "gcd-map-bad", "gcd-map-out-of-range"])
def test_the_program_sees_what_the_python_wrapper_gives_it(driver, extra):
    env = dict(PLAN, **extra)
    c_rc, c_env, c_err = in_c(driver, env, 3, 1)
    py_rc, py_env, py_err = in_python(env, 3, 1)
    assert (c_rc, c_env, c_err) == (py_rc, py_env, py_err)


def test_a_multi_pod_gcd_map_overrides_the_block_rule(driver):
    assert in_c(driver, dict(PLAN, IPURUN_GCD_MAP="1,0,1,0"), 3, 1)[1]["IPUOF_VIPU_API_GCD_ID"] == "0"
    assert in_c(driver, PLAN, 3, 1)[1]["IPUOF_VIPU_API_GCD_ID"] == "1"


def test_the_executable_cache_is_made_private_and_named_alike(driver, tmp_path):
    env = dict(PLAN, IPURUN_CACHE_DIR=str(tmp_path / "deep" / "cache"))
    c = in_c(driver, env, 3, 1)
    shutil.rmtree(tmp_path / "deep")
    assert c == in_python(env, 3, 1) and c[1]["POPDIST_EXECUTABLE_CACHE_PATH"] == str(tmp_path / "deep" / "cache")


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("var") / "slurm-ipu"


@pytest.fixture(scope="module")
def root_driver(tmp_path_factory, cache_root):
    """The driver with IPU_JOB_CACHE_ROOT in the test's own directory, which stands in for root's."""
    return build_driver(tmp_path_factory, "instance_driver", cache_root=str(cache_root))


def job_cache(cache_root: Path, make) -> Path:
    shutil.rmtree(cache_root, ignore_errors=True)
    cache_root.mkdir(mode=0o711)
    make(cache_root / "7")
    return cache_root / "7"


@pytest.mark.parametrize("make,refusal", [
    (lambda p: p.mkdir(mode=0o700), None),
    (lambda p: None, "ipurun: instance 3: executable cache {p}: No such file or directory; this node's slurmd makes "
                     "it in its job prolog (restart slurmd once after installing slurm-ipu), or give "
                     "--executable-cache-path\n"),
    (lambda p: (p.mkdir(), p.chmod(0o777)), "not private"),
    (lambda p: (p.with_name("elsewhere").mkdir(mode=0o700), p.symlink_to(p.with_name("elsewhere"))), "not private"),
], ids=["made-by-the-prolog", "missing", "writable-by-others", "a-link"])
def test_the_job_s_cache_is_the_prolog_s_and_only_checked_as_in_python(root_driver, cache_root, make, refusal):
    path = job_cache(cache_root, make)
    there = os.path.lexists(path)
    env = dict(PLAN, IPURUN_OWN_CACHE="1")
    c, py = in_c(root_driver, env, 3, 1), in_python(env, 3, 1, cache_root=cache_root)
    if refusal is None:
        assert c == py and c[1]["POPDIST_EXECUTABLE_CACHE_PATH"] == str(path)
    else:  # a refused task runs nothing: what the driver's environment holds then is moot
        if refusal == "not private":
            refusal = (f"ipurun: instance 3: executable cache {path} is not a private directory of uid "
                       f"{os.getuid()}; remove it or give --executable-cache-path\n")
        assert (c[0], c[2]) == (py[0], py[2]) == (-1, refusal.format(p=path))
    assert os.path.lexists(path) == there  # a task never makes it: only root can, in root's directory


def test_another_instance_s_output_is_silenced(driver):
    env = dict(PLAN, IPURUN_ONLY_OUTPUT_FROM="0")
    proc = subprocess.run([driver, "7", "3", "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.stdout == "" and proc.stderr.startswith("ipurun: instance 3 host node2")  # the report comes first


@pytest.mark.parametrize("missing", ["IPURUN_NUM_INSTANCES", "IPURUN_IPUS_PER_REPLICA"])
def test_a_step_without_the_plan_fails_the_task_with_the_fix(driver, missing):
    env = {k: v for k, v in PLAN.items() if k != missing}
    rc, _, err = in_c(driver, env, 0, 0)
    assert rc == -1 and err.startswith("ipurun: task setup: missing or bad") and "run it through ipurun" in err


def test_a_placement_that_cannot_be_made_is_refused_as_in_python(driver):
    env = dict(PLAN, IPURUN_INSTANCES_PER_HOST="64", IPURUN_NUM_INSTANCES="64", IPURUN_NUM_REPLICAS="64")
    c_rc, _, c_err = in_c(driver, env, 3, 1)
    py_rc, _, py_err = in_python(env, 3, 1)
    assert (c_rc, c_err) == (py_rc, py_err) == (-1, c_err) and "64 instances share" in c_err


def test_a_value_too_long_for_the_task_fails_it_instead_of_being_dropped(driver):
    env = dict(PLAN, IPURUN_INSTANCE_ENV_3="BIG=" + "x" * 20000)
    rc, _, err = in_c(driver, env, 3, 1)
    assert rc == -1 and err == ("ipurun: instance 3: IPURUN_INSTANCE_ENV_3 is longer than this task can read "
                                "(16383 characters); shorten it\n")
