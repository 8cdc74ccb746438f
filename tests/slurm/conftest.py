"""The real lab: Slurm (slurmctld + 4 slurmd, slurmdbd on a MariaDB) and the V-IPU emulator, on free loopback
ports in a directory of its own, up once per session and stopped by recorded pid.

Every wait is a poll with a deadline. When a test fails, the job's `scontrol show job` and the
tail of the logs are attached to the report.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_ipu import lab as labmod
from slurm_ipu.emulator.api import Api
from slurm_ipu.slurm import releases

from ..waiting import wait_for

pytestmark = pytest.mark.slurm

# tests/install/installed_tier.sh: this tier runs against the Debian packages, never the checkout.
if os.environ.get("SLURM_IPU_TEST_PACKAGES") and not labmod.FROM_PACKAGES:
    raise pytest.UsageError(f"SLURM_IPU_TEST_PACKAGES is set but slurm_ipu is {labmod.REPO}/slurm_ipu, not the "
                            "Debian packages' (/usr/lib/python3/dist-packages)")


# The Slurm under test, and how it spells a GRES in TRES strings (slurm_ipu/slurm/releases.py).
SLURM_VERSION = releases.installed(labmod.SBIN) or "0.0"
GRES = releases.tres_prefix(SLURM_VERSION)


# Which tests run where (CI within 25 minutes). `release`: on every Slurm release (the
# 24.11 and 26.05 chroots take only these: what reads or drives Slurm itself, whose behaviour a
# release changes); the rest run on the host's 22.05. `long`: the storms and the 64-host lab, in
# `make test-long` (a developer's run before a release), not in `make test`.
# test_hook_service (the service killed under a storm of jobs) is the host's alone: what it stresses is
# our service and hook, whose Slurm side every release's IPU jobs drive.
RELEASE = {"test_accounting", "test_admin", "test_adoption", "test_allocation_model", "test_conf_corpus",
           "test_configless", "test_controllers", "test_dialects", "test_heterogeneous", "test_hostlist_fuzz",
           "test_ipu_jobs",
           "test_hostile_jobs", "test_ipurun", "test_job_input", "test_licence_fuzz", "test_placement",
           "test_readme_examples", "test_rest",
           "test_submit_paths", "test_three_ilds", "test_trust",
           "test_health::test_a_failed_machine_shrinks_the_pool_until_it_is_back",
           "test_pods::test_a_site_topology_of_its_own_takes_the_pods_and_slurm_runs_it_with_no_error",
           # the constraints that keep a job to hosts of one size: Slurm's feature syntax
           "test_mixed_hosts::test_each_job_runs_on_hosts_of_one_size_with_its_partition_in_their_pod",
           "test_mixed_hosts::test_whole_hosts_of_the_smallest_size_that_holds_the_job_and_its_steps"}
LONG = {"test_big_lab", "test_storm", "test_hardware_storm",
        "test_allocation_model::test_a_storm_of_jobs_cancels_and_time_limits_leaves_nothing"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__ if item.module else ""
        if not module.startswith("tests.slurm."):
            continue
        name = module.rsplit(".", 1)[1]
        if name in RELEASE or f"{name}::{item.originalname}" in RELEASE:
            item.add_marker(pytest.mark.release)
        if name in LONG or f"{name}::{item.originalname}" in LONG:
            item.add_marker(pytest.mark.long)


def pytest_runtest_setup(item):
    """A module marked `steps` is one journey in order (tests/slurm/test_adoption.py): after a step
    fails, the later ones are not run (each would fail for the same cause), and say which failed."""
    failed = getattr(item.parent, "failed_step", None)
    if item.get_closest_marker("steps") is not None and failed is not None:
        pytest.skip(f"an earlier step failed: {failed}")


def pytest_addoption(parser):
    parser.addoption("--squeue-samples", default=None, metavar="DIR",
                     help="keep each `squeue --json` text the lab prints in DIR (tests/unit/fixtures/squeue)")


# Blocks handed out in this process: a lab never gets a block an earlier lab of the session had,
# whose ports a process of that lab (a job's srun, a slurmstepd) may still hold or be answered on.
# Each call drew from a generator seeded anew with the pid, so every lab of a session
# tried the same block first and consecutive module labs shared their ports.
_HANDED_OUT: list[range] = []
_RNG = random.Random()  # seeded from the OS: concurrent sessions (CI, another engineer's) differ


def _port_range() -> tuple[int, int]:
    """Where this run's labs take their ports: SLURM_IPU_TEST_PORTS=LOW-HIGH when two runs share the
    loopback (tests/tiers.sh runs the two release chroots side by side, each in a range of its own)."""
    text = os.environ.get("SLURM_IPU_TEST_PORTS") or "20000-30000"
    low, _, high = text.partition("-")
    return int(low), int(high)


def _free_block(count: int, tries: int = 50) -> int:
    low, high = _port_range()
    for _ in range(tries):
        base = _RNG.randrange(low, high - count)
        block = range(base, base + count)
        if any(block.start < old.stop and old.start < block.stop for old in _HANDED_OUT):
            continue
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", port))
                socks.append(s)
            _HANDED_OUT.append(block)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free block of loopback ports")


@dataclass
class Lab:
    spec: labmod.LabSpec

    @property
    def env(self) -> dict:
        return self.spec.env()

    @property
    def site(self) -> str:
        return str(self.spec.path("etc", "site.yaml"))

    def run(self, *argv: str, timeout: float = 60, check: bool = False, env: dict | None = None,
            stdin: str | None = None) -> subprocess.CompletedProcess:
        # In the lab's directory: a job's default slurm-<id>.out lands there, never in the checkout.
        # errors="replace": the queue may hold any bytes a user wrote (test_hostile_jobs.py)
        proc = subprocess.run(list(argv), env=env or self.env, capture_output=True, text=True, errors="replace",
                              timeout=timeout, input=stdin, cwd=self.spec.dir)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def _as(self, user: str, argv: tuple[str, ...]) -> tuple[list[str], dict]:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", *argv]
        return cmd, dict(self.env, HOME=str(self.spec.path("users")), USER=user, LOGNAME=user)

    def run_as(self, user: str, *argv: str, timeout: float = 60,
               stdin: str | None = None) -> subprocess.CompletedProcess:
        """argv as a non-root user, in the lab's shared submit directory."""
        cmd, env = self._as(user, argv)
        return subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout,
                              cwd=self.spec.path("users"), input=stdin)

    def popen_as(self, user: str, *argv: str, **kwargs) -> subprocess.Popen:
        """run_as, started and left running (the caller stops it)."""
        cmd, env = self._as(user, argv)
        return subprocess.Popen(cmd, env=env, cwd=self.spec.path("users"), text=True, **kwargs)

    def sbatch(self, *args: str, script: str | None = None) -> int:
        argv = ["sbatch", "--parsable", *args]
        proc = self.run(*argv, check=True, stdin=script)
        return int(proc.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """scontrol show job as a dict ({} once the job has left slurmctld's memory)."""
        proc = self.run("scontrol", "show", "job", "-o", str(job_id))
        if proc.returncode != 0:
            return {}
        out = {}
        for word in proc.stdout.split():
            key, _, value = word.partition("=")
            out.setdefault(key, value)
        return out

    def state(self, job_id: int) -> str:
        return self.job(job_id).get("JobState", "GONE")

    def wait_running(self, job_id: int, timeout: float = 60.0) -> None:
        """Until the job runs; on the deadline the failure shows its state and Slurm's reason."""
        wait_for(f"job {job_id} running", lambda: self.job(job_id), timeout,
                 until=lambda info: info.get("JobState") == "RUNNING")

    def api(self) -> Api:
        return Api("127.0.0.1", self.spec.vipu_port, timeout=10)

    def admin(self) -> Api:
        return Api(admin_socket=str(self.spec.path("vipu-emu", "admin.sock")), timeout=10)

    def partitions(self) -> dict[str, dict]:
        api = self.admin()
        try:
            return {p["partition"]["id"]: p["partition"] for p in api.list_partitions()}
        finally:
            api.close()

    def node_states(self) -> dict[str, str]:
        return labmod.node_states(self.spec)


def cancel_and_expect_clean(lab: Lab, job_id: int) -> None:
    """scancel, then what a user must see: the job gone, its partition removed, the nodes idle.

    Slurm now and then SIGKILLs the EpilogSlurmctld of a job cancelled while its prolog runs
    (a race inside slurmscriptd, docs/slurm.md). Then the slurm-ipu service's periodic reap, with
    nobody's help, must remove the recorded orphan within its interval (30 s in the lab)."""
    lab.run("scancel", str(job_id), check=True)
    wait_gone(lab, job_id)
    wait_no_partitions(lab, labmod.REAP_INTERVAL + 20, f"job {job_id}'s partition removed (at most one reap interval)")
    wait_idle(lab)


def _settled(lab: Lab, timeout: float = 10.0) -> bool:
    try:
        wait_no_partitions(lab, timeout)
        return True
    except AssertionError:
        return False


def wait_no_partitions(lab: Lab, timeout: float = 60.0, what: str = "no partition left") -> None:
    """V-IPU has no partition (the slurm-ipu service removes a job's a moment after its epilog answers)."""
    wait_for(what, lambda: sorted(lab.partitions()), timeout, until=lambda names: names == [])


def queue(lab: Lab) -> list[str]:
    return lab.run("squeue", "-h", "-o", "%A").stdout.split()


def wait_queue_empty(lab: Lab, timeout: float = 90.0, what: str = "no jobs left") -> None:
    wait_for(what, lambda: queue(lab), timeout, until=lambda jobs: jobs == [])


def wait_gone(lab: Lab, job_id: int, timeout: float = 90.0) -> None:
    wait_for(f"job {job_id} to finish", lambda: lab.state(job_id) in ("COMPLETED", "CANCELLED", "FAILED", "GONE",
                                                                      "TIMEOUT", "NODE_FAIL"), timeout)


def wait_logged(path: Path, words: str, timeout: float = 15.0) -> None:
    """A line with `words` in the log at path, which another process writes when it gets to it.
    The failure shows the log's last lines."""
    def seen():
        text = path.read_text(errors="replace") if path.exists() else ""
        return True if words in text else text.splitlines()[-5:]

    wait_for(f"{words!r} in {path.name}", seen, timeout, until=lambda found: found is True)


def all_idle(lab: Lab, states: dict[str, str] | None = None) -> bool:
    states = lab.node_states() if states is None else states
    return len(states) == lab.spec.nodes and all(s == "idle" for s in states.values())


def wait_idle(lab: Lab, timeout: float = 60.0, what: str = "every node idle") -> dict[str, str]:
    """Every node idle: a node stays COMPLETING until its job's epilog ends, after srun returns and
    after the job leaves the queue. The failure shows each node's state last read."""
    return wait_for(what, lab.node_states, timeout, until=lambda states: all_idle(lab, states))


@contextlib.contextmanager
def started_lab(prepare=None, **spec):
    """A lab of its own on free loopback ports, down (by recorded pid) and removed afterwards.
    prepare(spec), if given, runs before the lab starts (an own-conf lab's files: test_adoption.py)."""
    missing = [str(t) for t in (labmod.SBIN / "slurmctld", labmod.SBIN / "slurmd", labmod.MUNGED) if not t.exists()]
    if missing:
        pytest.fail(f"Slurm is not installed ({', '.join(missing)} missing): run `make test`, which installs it")
    nodes = spec.pop("nodes", 4)
    more = spec.get("controllers", 1) - 1  # each further controller's emulator: a port of its own
    base = _free_block(nodes + 6 + more)
    if more:
        spec["vipu_ports"] = tuple(range(base + nodes + 6, base + nodes + 6 + more))
    # Not under pytest's tmp (root-only): the lab's users must reach slurm.conf and its munge socket.
    root = Path(tempfile.mkdtemp(prefix="slurm-ipu-lab-", dir="/tmp"))
    started = None
    try:  # a failed start (or ^C during it) leaves neither processes nor the directory
        root.chmod(0o755)
        # A lab directory that does not exist yet, as for `make demo` on a fresh machine.
        spec = started = labmod.LabSpec(dir=root / "lab", nodes=nodes, ctld_port=base, node_port=base + 1,
                                        vipu_port=base + nodes + 3, dbd_port=base + nodes + 4,
                                        db_port=base + nodes + 5, **spec)
        if prepare is not None:
            prepare(spec)
        labmod.up(spec)
        shared = spec.path("users")
        shared.mkdir()
        shared.chmod(0o1777)  # the users' submit directory: job output lands here, never in the checkout
    except BaseException:
        if started is not None:
            labmod.down(started)
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield Lab(spec)
    finally:  # a failing body too: nothing of the lab outlives it
        recorded = labmod.load_pids(spec)
        labmod.down(spec)
        left = [key for key, rec in recorded.items() if key != "spec" and labmod._running(rec)]
        shutil.rmtree(root, ignore_errors=True)
    assert not left, f"lab down left {left} running"


@pytest.fixture(scope="session")
def lab():
    # With accounting, as a site runs it: MariaDB and slurmdbd of the lab's own.
    with started_lab(accounting=True) as handle:
        yield handle


USERS = ("slurmipu-a", "slurmipu-b")


@pytest.fixture(scope="session")
def users(lab) -> tuple[str, ...]:
    return ensure_users()


def ensure_users() -> tuple[str, ...]:
    """Two non-root users that exist on this machine (created once, as system users)."""
    if os.getuid() != 0:
        pytest.skip("creating the lab's users needs root")
    for name in USERS:
        if subprocess.run(["id", "-u", name], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                           check=True, capture_output=True, timeout=60)
    return USERS


@pytest.fixture(scope="session")
def rawsubmit(lab) -> str:
    """spank/tests/rawsubmit.c built against the Slurm under test (`make rawsubmit`): a submission
    through libslurm's API with exactly the fields given (no sbatch checks, no SPANK plugin), as a
    REST client sends."""
    from slurm_ipu.cbuild import make

    prefix = labmod.spec.SLURM_PREFIX  # a site-built Slurm: its headers and libslurm, found at run time too
    own = {} if str(prefix) == "/usr" else \
        {"SLURM_CFLAGS": f"-I{prefix}/include -L{prefix}/lib -Wl,-rpath,{prefix}/lib"}
    return str(make("rawsubmit", lab.spec.path("bin", "rawsubmit"), "the raw submitter", **own))


@pytest.fixture
def clean_lab(lab):
    """Each test starts with no jobs, no partitions, no faults, and idle nodes; and ends so."""
    admin = lab.admin()
    admin.up()
    admin.clear_faults()
    wait_queue_empty(lab)
    wait_idle(lab, what="all nodes idle")
    if not _settled(lab):
        # A previous test failed and left a partition (its own report says so): restore a clean
        # lab with the product's cleanup so one failure does not fail every test after it.
        lab.run("slurm-ipu", "reap", "--site", lab.site)
        wait_no_partitions(lab, 10, "no partition left by a previous test")
    admin.close()
    yield lab
    admin = lab.admin()  # a new handle: the test may have restarted the emulator
    admin.up()
    admin.clear_faults()
    jobs = queue(lab)
    if jobs:
        lab.run("scancel", *jobs)
    admin.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("steps") is not None:
        item.parent.failed_step = item.name  # the module's later steps build on this one
    if report.when == "call" and report.failed and "lab" in item.fixturenames:
        spec = item.funcargs["lab"].spec if "lab" in item.funcargs else None
        if spec is not None:
            for name in ("slurmctld.log", "vipu-emu.log"):
                path = spec.path("log", name)
                if path.exists():
                    tail = "\n".join(path.read_text(errors="replace").splitlines()[-30:])
                    report.sections.append((f"lab {name}", tail))
            hooks = spec.path("state", "hooks.log")
            if hooks.exists():
                report.sections.append(("lab hooks.log", "\n".join(hooks.read_text().splitlines()[-20:])))


PROBE = """#!/bin/bash
# What a task sees: its node, the IPUOF variables, and what an IPUoF attach would grant it.
echo "PROBE $SLURMD_NODENAME ${SLURM_PROCID:-b} $IPUOF_VIPU_API_HOST $IPUOF_VIPU_API_PORT \\
$IPUOF_VIPU_API_PARTITION_ID cfg=${IPUOF_CONFIG_PATH:-unset}"
echo "ATTACH $(%s attach 2>&1)"
"""


def _probe(path, attach: str) -> str:
    if not path.exists():
        path.write_text(PROBE % attach)
        path.chmod(0o755)
    return str(path)


def probe_script(lab: Lab) -> str:
    """The probe as root's tests run it: the emulator through this interpreter."""
    return _probe(lab.spec.path("bin", "ipu-probe"), f"{sys.executable} -m slurm_ipu.emulator.main")


def user_probe_script(lab: Lab) -> str:
    """The same probe for a user's task: the lab's own vipu-emu on PATH, not root's interpreter."""
    return _probe(lab.spec.path("users", "user-probe"), "vipu-emu")


def parse_probe(text: str) -> tuple[list[list[str]], list[dict]]:
    probes = [line.split()[1:] for line in text.splitlines() if line.startswith("PROBE ")]
    attaches = []
    for line in text.splitlines():
        if line.startswith("ATTACH "):
            fields = dict(w.split("=", 1) for w in line.split()[2:] if "=" in w)
            fields["ipus"] = [int(i) for i in fields.get("ipus", "").split(",") if i]
            fields["line"] = line
            attaches.append(fields)
    return probes, attaches
