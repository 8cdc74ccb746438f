"""Scale: the 64-host lab (16 Pods of four hosts, grouped in pairs as POD128s)
under a storm of 1,000 IPU jobs from 1 IPU to two whole Pods, with cancels, time limits and a
V-IPU outage in the middle. Afterwards nothing is left in V-IPU or the hooks' state, no node is
drained and no job was held; the IPU/plain throughput is printed (storm.py measures it
properly). The whole test is bounded (BOUND seconds, the lab's start included)."""

from __future__ import annotations

import random
import subprocess
import time

import pytest

from slurm_ipu import lab as labmod
from slurm_ipu.slurm import releases

from ..waiting import wait_for
from .conftest import started_lab, wait_idle

BOUND = 900  # seconds for everything below: a slower run is a failure, not a wait
IPU_JOBS, PLAIN_JOBS = 1000, 200
# (nodes, IPUs per node): 1 IPU, a host's share, a host, two hosts, a whole Pod, two Pods (a group)
SHAPES = [(1, 1), (1, 4), (1, 16), (2, 8), (4, 16), (8, 16), (8, 4)]
OUTAGE = 5.0  # seconds V-IPU is down, half-way through the submissions


# Three minutes of CI on one release is the ask (22.05, the host's); the others run every
# other real-Slurm test.
pytestmark = pytest.mark.skipif(releases.release(releases.installed(labmod.SBIN) or "") != "22.05",
                                reason="the 64-host storm runs on Slurm 22.05 only (CI time)")


@pytest.fixture(scope="module")
def big():
    started = time.monotonic()
    with started_lab(nodes=64, pods=16) as handle:
        handle.started = started
        yield handle


def _submit(lab, argv: list[str]) -> str:
    proc = lab.run("sbatch", "--parsable", "-o", "/dev/null", *argv, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def _queue_empty(lab) -> bool:
    """Whether the queue is empty; a held job fails at once (it would wait for an admin)."""
    out = lab.run("squeue", "-h", "-o", "%A %T %r", timeout=60).stdout.split("\n")
    rows = [line.split() for line in out if line.strip()]
    held = [r for r in rows if len(r) > 2 and r[2].startswith("JobHeld")]
    assert not held, f"held: {held[:5]}"
    return not rows


def _drain_queue(lab, deadline: float) -> None:
    wait_for("the queue to empty", lambda: _queue_empty(lab), max(1.0, deadline - time.monotonic()), interval=0.5)


def test_a_storm_with_cancels_time_limits_and_an_outage_leaves_nothing(big):
    lab = big
    deadline = lab.started + BOUND
    start = time.monotonic()
    for nodes, _ in (random.Random(3).choice(SHAPES) for _ in range(PLAIN_JOBS)):
        _submit(lab, ["-N", str(nodes), "--wrap", "sleep 0.2"])
    _drain_queue(lab, deadline)
    plain = PLAIN_JOBS * 60 / (time.monotonic() - start)

    shapes = [random.Random(5).choice(SHAPES) for _ in range(IPU_JOBS)]
    start, admin = time.monotonic(), lab.admin()
    try:
        for k, (nodes, per) in enumerate(shapes):
            limited = k % 100 == 50
            job = _submit(lab, ["-N", str(nodes), f"--gres=ipu:{per}", *(["--time=1"] if limited else []),
                                "--wrap", "sleep 120" if limited else "sleep 0.2"])
            if k % 9 == 8:
                lab.run("scancel", job)
            if k == IPU_JOBS // 2:
                admin.down(OUTAGE)  # back by itself
    finally:
        admin.close()
    _drain_queue(lab, deadline)
    ipu = IPU_JOBS * 60 / (time.monotonic() - start)
    print(f"64-host storm: plain {plain:.0f} jobs/min, IPU {ipu:.0f} jobs/min (with cancels, a {OUTAGE:g} s V-IPU "
          f"outage, and the time-limited jobs' minute): ratio {ipu / plain:.2f}")

    # Epilogs that met the outage were journaled: the slurm-ipu service works them off (its removal
    # thread, or its periodic reap at the latest).
    state = lab.spec.path("state")
    wait_for("no partition, journal entry or creation record left",
             lambda: lab.partitions() == {} and not any(state.joinpath("pending-removal").glob("*.json"))
             and not any(state.joinpath("created").glob("*.json")),
             min(labmod.REAP_INTERVAL + 30, max(1.0, deadline - time.monotonic())))
    wait_idle(lab, min(60, max(1.0, deadline - time.monotonic())))
    ended = subprocess.run(["grep", "-c", "held after", str(state / "hooks.log")], capture_output=True, text=True)
    assert ended.stdout.strip() in ("", "0"), "a job was held after repeated prolog failures (hooks.log)"
