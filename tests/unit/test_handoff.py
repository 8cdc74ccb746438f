"""The prolog handed to the removal service (slurm_ipu/hooks/handoff.py): the real rendered
wrapper, run by /bin/sh, against the service's request loop in this process, with the fake
`vipu` at the subprocess boundary. What Slurm would see is the wrapper's exit status."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from slurm_ipu.deploy import fragments, render
from slurm_ipu.hooks import handoff
from slurm_ipu.hooks.journal import Journal
from slurm_ipu.hooks.ledger import Ledger
from slurm_ipu.hooks.removal import Service, service_lock

from .test_hooks import FakeSlurm, hooks_log

ENV = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_JOB_UID": "1000", "SLURM_JOB_NODELIST": "node[1-2]",
       "SLURM_JOB_LICENSES": "ipu:16", "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}


@pytest.fixture
def hook(tmp_path, cfg):
    """The wrapper, the service's lock held as the running service holds it, its request FIFO."""
    state = cfg["state_dir"]
    python = tmp_path / "python"  # stands in for the interpreter: records that Python was started
    python.write_text(f"#!/bin/sh\necho \"$SLURM_SCRIPT_CONTEXT\" >> {tmp_path}/python-ran\n")
    python.chmod(0o755)
    script = tmp_path / "slurm-ipu-hook"
    script.write_text(render.render("slurm-ipu-hook", {"hook": fragments.hook_paths(state) | {
        "config": str(tmp_path / "c.yaml"), "python": str(python), "prefix": "slurm_", "prolog_wait": 2}}))
    script.chmod(0o755)
    Path(state).mkdir(parents=True, exist_ok=True)
    lock = os.open(service_lock(state), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    requests = handoff.Lines(handoff.open_requests(state))
    yield script, requests
    os.close(requests.fd)
    os.close(lock)


def handed_over(script: Path, service: Service | None, requests, **over):
    """Run the wrapper as slurmctld would; the service (if any) serves it until it exits."""
    proc = subprocess.Popen([str(script)], env=dict(ENV, **over), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:
        if service is None:
            proc.wait(timeout=10)
        else:
            service.serve(requests, 0.05)
    if service is not None:
        service._finish_prologs()
    out, err = proc.communicate(timeout=10)
    return proc.returncode, err


def python_ran(script: Path) -> bool:
    return (script.parent / "python-ran").exists()


def spool(cfg) -> list[str]:
    return sorted(p.name for p in handoff.spool_dir(cfg["state_dir"]).iterdir())


def test_the_service_creates_the_partition_and_the_wrapper_starts_no_python(fake, cfg, hook):
    script, requests = hook
    code, _ = handed_over(script, Service(cfg, cfg.vipu_client(), FakeSlurm()), requests)
    assert code == 0 and not python_ran(script)
    assert fake.partitions["slurm_42"]["size"] == 16
    record = Ledger(cfg["state_dir"]).get("slurm_42")
    assert (record["job_id"], record["uid"], record["hosts"]) == (42, 1000, ["node1", "node2"])
    assert "job 42: partition slurm_42 ACTIVE, 16 IPUs" in hooks_log(cfg)
    assert spool(cfg) == []  # the environment file and the reply FIFO are gone


def test_a_v_ipu_failure_reaches_slurm_as_the_python_prolog_s_would(fake, cfg, hook):
    script, requests = hook
    slurm = FakeSlurm()
    fake.failures = [("error: V-IPU server unavailable [UNAVAILABLE]", 1)] * 50
    code, _ = handed_over(script, Service(cfg, cfg.vipu_client(), slurm), requests)
    assert code == 1 and fake.partitions == {}
    assert "requeued (attempt 1 of" in slurm.comments[42] and "not created" in hooks_log(cfg)


def test_a_bad_shape_option_is_refused_with_exit_2(fake, cfg, hook):
    script, requests = hook
    code, _ = handed_over(script, Service(cfg, cfg.vipu_client(), FakeSlurm()), requests, SPANK_IPU_GCDS="two")
    assert code == 2 and fake.partitions == {} and fake.calls == []
    assert "--ipu-gcds='two' is not a positive number" in hooks_log(cfg)


def test_a_service_that_never_answers_costs_a_bounded_wait_and_a_requeue(fake, cfg, hook):
    script, requests = hook
    started = time.monotonic()
    code, err = handed_over(script, None, requests)   # the lock is held, nobody reads the requests
    assert code == 1 and time.monotonic() - started < 10
    assert "the removal service did not answer the prolog within 2 s" in err
    assert "did not answer the prolog" in hooks_log(cfg) and spool(cfg) == [] and not python_ran(script)


def test_without_the_request_fifo_the_wrapper_runs_the_python_prolog(fake, cfg, hook):
    script, requests = hook
    handoff.request_fifo(cfg["state_dir"]).unlink()
    code, _ = handed_over(script, None, requests)
    assert code == 0 and python_ran(script) and fake.partitions == {}


@pytest.mark.parametrize("line", [b"prolog 42;rm -rf /\n", b"prolog ../../etc/passwd\n", b"create slurm_1\n"])
def test_requests_the_wrapper_never_writes_are_ignored(fake, cfg, hook, line):
    _, requests = hook
    service = Service(cfg, cfg.vipu_client(), FakeSlurm())
    os.write(requests.fd, line)
    service.serve(requests, 1)
    assert service.prologs == [] and fake.calls == [] and "ignored" in hooks_log(cfg)


def _request(cfg, token: str, **over) -> int:
    """What the wrapper leaves before it writes its request: the environment file and the reply
    FIFO, held open read-write as the wrapper holds it. Returns that fd (the wrapper's end)."""
    spool_dir = handoff.spool_dir(cfg["state_dir"])
    (spool_dir / f"{token}.env").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in dict(ENV, **over).items()))
    os.mkfifo(spool_dir / f"{token}.reply", 0o600)
    return os.open(spool_dir / f"{token}.reply", os.O_RDWR | os.O_NONBLOCK)


def test_a_request_for_another_job_s_environment_is_refused(fake, cfg, hook):
    """The token names the job; the environment must be that job's prolog."""
    wrapper_end = _request(cfg, "43.1")
    assert handoff.serve_prolog(cfg, cfg.vipu_client(), FakeSlurm(), "43.1") == 2
    assert os.read(wrapper_end, 16) == b"2\n"
    assert fake.calls == [] and "prolog request for job 42" in hooks_log(cfg)
    os.close(wrapper_end)


def test_a_wrapper_gone_before_its_turn_is_not_served(fake, cfg, hook):
    os.close(_request(cfg, "42.7"))  # Slurm killed it (the job was cancelled): no reader left
    assert handoff.serve_prolog(cfg, cfg.vipu_client(), FakeSlurm(), "42.7") == 1
    assert fake.calls == [] and "was gone before the removal service got to it" in hooks_log(cfg)
    assert spool(cfg) == []  # a killed wrapper's trap never ran: the service removes its files


def test_a_partition_made_for_a_wrapper_that_went_meanwhile_is_removed(fake, cfg, hook):
    """Cancelled while the service was creating: nobody will run the job on it, so it goes the
    way an ended job's partition goes (the journal), not to the periodic reap."""
    wrapper_end = _request(cfg, "42.8")
    handle = fake._handle

    def killed_during_create(args):
        if args[0] == "create":
            os.close(wrapper_end)
        return handle(args)

    fake._handle = killed_during_create
    assert handoff.serve_prolog(cfg, cfg.vipu_client(), FakeSlurm(), "42.8") == 0
    assert Journal(cfg["state_dir"]).names() == ["slurm_42"] and spool(cfg) == []
    Service(cfg, cfg.vipu_client(), FakeSlurm()).step()
    assert fake.partitions == {} and Ledger(cfg["state_dir"]).get("slurm_42") is None


def test_lines_wait_for_the_rest_of_a_partial_line():
    r, w = os.pipe()
    os.set_blocking(r, False)
    lines = handoff.Lines(r)
    os.write(w, b"prolog 1.2\nprolog 3")
    assert lines.read() == ["prolog 1.2"]
    assert lines.read() == []
    os.write(w, b".4\n")
    assert lines.read() == ["prolog 3.4"]
    os.close(r)
    os.close(w)


def test_sweep_removes_only_what_killed_wrappers_left_long_ago(cfg, hook):
    spool_dir = handoff.spool_dir(cfg["state_dir"])
    old, new = spool_dir / "1.2.env", spool_dir / "3.4.env"
    old.write_text("x")
    new.write_text("x")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert handoff.sweep(cfg["state_dir"], older_than=3600, now=time.time()) == 1
    assert spool(cfg) == ["3.4.env"]


def test_a_job_cancelled_during_its_create_leaves_no_partition_behind(fake, cfg, hook):
    """The race seen in the lab's storm: Slurm kills the wrapper and runs the epilog (which queues
    the removal) while the service's prolog thread is between its record and its create. The
    removal must wait for the prolog, or the create lands after it and nothing remembers it."""
    wrapper_end = _request(cfg, "42.9")
    service = Service(cfg, cfg.vipu_client(), FakeSlurm())
    handle = fake._handle

    def cancelled_mid_create(args):
        if args[0] == "create":
            os.close(wrapper_end)                      # Slurm kills the wrapper...
            queue_removal(cfg, 42)                     # ...its epilog queues the removal...
            service.step()                             # ...and the removal service gets to it first
        return handle(args)

    fake._handle = cancelled_mid_create
    handoff.serve_prolog(cfg, cfg.vipu_client(), FakeSlurm(), "42.9")
    service.step()
    assert fake.partitions == {} and Journal(cfg["state_dir"]).names() == []
    assert Ledger(cfg["state_dir"]).get("slurm_42") is None


def queue_removal(cfg, job: int) -> None:
    from .test_removal import queue

    queue(cfg, job)



def test_a_prolog_nobody_waits_for_stops_waiting_for_v_ipu_and_removes_its_partition(fake, cfg, hook):
    """Cancelled while the partition was still PENDING: the prolog does not wait on to its
    deadline for a job that is gone; it removes what it made at once."""
    wrapper_ends = [_request(cfg, "42.10")]
    fake.pending_polls = 1000                      # V-IPU would take until the deadline
    handle = fake._handle

    def cancelled_while_pending(args):
        if args[0] == "list" and wrapper_ends:
            os.close(wrapper_ends.pop())           # Slurm kills the wrapper at the first poll
        return handle(args)

    fake._handle = cancelled_while_pending
    started = time.monotonic()
    assert handoff.serve_prolog(cfg, cfg.vipu_client(), FakeSlurm(), "42.10") == 1
    assert time.monotonic() - started < 3          # not the deadline (5 s here)
    assert fake.partitions == {} and Ledger(cfg["state_dir"]).get("slurm_42") is None
    assert "the job ended while its partition was being made; nothing left behind" in hooks_log(cfg)
