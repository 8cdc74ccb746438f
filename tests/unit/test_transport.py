"""The hooks handed to the running service (slurm_ipu/hooks/transport.py): the real slurm-ipu-hook
with its rendered settings, run as slurmctld runs it, against the service's listener in this
process, with the fake `vipu` at the subprocess boundary. What Slurm would see is the hook's exit
status; what the admin would see is hooks.log."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from slurm_ipu.deploy import fragments
from slurm_ipu.hooks import transport
from slurm_ipu.hooks.journal import Journal
from slurm_ipu.hooks.ledger import Ledger
from slurm_ipu.hooks.service import Service

from ..fake_slurm import FakeSlurm
from ..waiting import wait_for
from .conftest import place_hook
from .test_hooks import hooks_log

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc missing: `make test` installs it")
ENV = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_JOB_UID": "1000", "SLURM_JOB_NODELIST": "node[1-2]",
       "SLURM_JOB_LICENSES": "ipu:16", "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}


@pytest.fixture
def hook(tmp_path, cfg, hook_binary):
    """slurm-ipu-hook, with a stand-in for the interpreter that records that Python ran."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho \"$SLURM_SCRIPT_CONTEXT\" >> {tmp_path}/python-ran\n")
    python.chmod(0o755)
    Path(cfg.state_dir).mkdir(parents=True, exist_ok=True)
    return place_hook(hook_binary, tmp_path / "slurm-ipu-hook", fragments.hook_paths(cfg.state_dir) | {
        "site": str(tmp_path / "c.yaml"), "python": str(python), "prolog_wait": 2})


@pytest.fixture
def listener(cfg, fake):
    service = Service(cfg, cfg.vipu_client(), FakeSlurm())
    lis = transport.Listener(cfg, service.clients, service.slurm, service.wake.set)
    yield lis, service
    lis.close()


def run_hook(script: Path, listener=None, **over) -> tuple[int, str]:
    """Run slurm-ipu-hook as slurmctld would; the listener (if any) serves it until it exits."""
    proc = subprocess.Popen([str(script)], env=dict(ENV, **over), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:
        if listener is None:
            proc.wait(timeout=10)
        else:
            listener.serve(0.05)
    if listener is not None:
        listener.finish(time.monotonic() + 10, time.monotonic)
    _, err = proc.communicate(timeout=10)
    return proc.returncode, err


def python_ran(script: Path) -> list[str]:
    path = script.parent / "python-ran"
    return path.read_text().split() if path.exists() else []


def test_the_service_creates_the_partition_and_the_hook_starts_no_python(fake, cfg, hook, listener):
    code, _ = run_hook(hook, listener[0])
    assert code == 0 and python_ran(hook) == []
    assert fake.partitions["slurm_42"]["size"] == 16
    record = Ledger(cfg.state_dir).get("slurm_42")
    assert (record["job_id"], record["uid"], record["hosts"]) == (42, 1000, ["node1", "node2"])
    assert "job 42: partition slurm_42 ACTIVE, 16 IPUs" in hooks_log(cfg)


def test_the_epilog_is_journaled_before_the_answer_and_answered_at_once(fake, cfg, hook, listener):
    lis, service = listener
    code, _ = run_hook(hook, lis, SLURM_SCRIPT_CONTEXT="epilog_slurmctld")
    assert code == 0 and python_ran(hook) == [] and service.wake.is_set()
    entry = Journal(cfg.state_dir).get("slurm_42")
    assert (entry["job_id"], entry["reason"]) == (42, "queued by the epilog") and entry["time"] > 0


def test_a_job_without_ipus_never_reaches_the_service(fake, cfg, hook, listener):
    code, _ = run_hook(hook, listener[0], SLURM_JOB_LICENSES="matlab:1")
    assert code == 0 and python_ran(hook) == [] and fake.calls == []


def test_a_v_ipu_failure_reaches_slurm_as_the_python_prolog_s_would(fake, cfg, hook, listener):
    lis, service = listener
    fake.failures = [("error: V-IPU server unavailable [UNAVAILABLE]", 1)] * 50
    code, _ = run_hook(hook, lis)
    assert code == 1 and fake.partitions == {}
    assert "requeued (attempt 1 of" in service.slurm.comments[42] and "not created" in hooks_log(cfg)


def test_a_refused_environment_is_held_and_answered_2(fake, cfg, hook, listener):
    lis, service = listener
    code, _ = run_hook(hook, lis, SPANK_IPU_GCDS="two")
    assert code == 2 and fake.calls == [] and service.slurm.held == {42}
    assert "--ipu-gcds='two' is not a positive number" in hooks_log(cfg)


def test_without_the_service_the_hook_runs_the_python_hook_at_once(fake, cfg, hook):
    started = time.monotonic()
    for context in ("prolog_slurmctld", "epilog_slurmctld"):
        code, _ = run_hook(hook, SLURM_SCRIPT_CONTEXT=context)
        assert code == 0
    assert python_ran(hook) == ["prolog_slurmctld", "epilog_slurmctld"] and time.monotonic() - started < 5


def test_a_service_that_dies_with_the_request_leaves_the_hook_to_python_at_once(fake, cfg, hook):
    """Killed (or restarted) after it took the request: the connection ends without an answer,
    and slurm-ipu-hook runs it in Python, with no wait."""
    server = transport.listen(cfg.state_dir)

    def die_with_it():
        conn, _ = server.accept()
        transport.read_request(conn)
        conn.close()

    taker = threading.Thread(target=die_with_it)
    taker.start()
    started = time.monotonic()
    code, _ = run_hook(hook)
    taker.join(10)
    server.close()
    assert code == 0 and python_ran(hook) == ["prolog_slurmctld"] and time.monotonic() - started < 5


def test_a_service_that_never_answers_costs_a_bounded_wait_and_a_requeue(fake, cfg, hook):
    server = transport.listen(cfg.state_dir)  # listening, never accepting
    started = time.monotonic()
    code, err = run_hook(hook)
    server.close()
    assert code == 1 and time.monotonic() - started < 10 and python_ran(hook) == []
    assert "the slurm-ipu service did not answer the prolog within 2 s" in err


def request(verb: str, **over) -> tuple[socket.socket, socket.socket]:
    """(service end, client end) of a request as the client sends it."""
    service_end, client_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    client_end.sendall(verb.encode() + b"\n" + b"".join(f"{k}={v}".encode() + b"\0"
                                                         for k, v in dict(ENV, **over).items()))
    client_end.shutdown(socket.SHUT_WR)
    return service_end, client_end


def serve(cfg, conn, slurm=None) -> None:
    transport.serve(conn, cfg, cfg.vipu_client(), slurm or FakeSlurm(), lambda: None)


@pytest.mark.parametrize("verb", ["create", "prolog 42;rm -rf /", ""])
def test_requests_the_client_never_sends_are_ignored(fake, cfg, verb):
    service_end, client_end = request(verb)
    serve(cfg, service_end)
    assert client_end.recv(16) == b"" and fake.calls == [] and "ignored" in hooks_log(cfg)


def test_a_prolog_request_in_another_context_is_refused(fake, cfg):
    service_end, client_end = request("prolog", SLURM_SCRIPT_CONTEXT="epilog_slurmctld")
    serve(cfg, service_end)
    assert client_end.recv(16) == b"2\n" and fake.calls == []
    assert "prolog request in context 'epilog_slurmctld' refused" in hooks_log(cfg)


def test_only_root_and_the_service_user_may_ask(fake, cfg, hook, listener, hook_binary, tmp_path_factory):
    """The socket is the service user's alone (no group or other bits): another user's hook cannot connect, so
    it falls back to Python (here /bin/false), which cannot read the hooks' config either."""
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv")
    sock = transport.socket_path(cfg.state_dir)
    assert sock.stat().st_mode & 0o077 == 0  # the service user's alone
    where = tmp_path_factory.mktemp("anyone")
    where.chmod(0o755)
    hook = place_hook(hook_binary, where / "slurm-ipu-hook", fragments.hook_paths(cfg.state_dir) | {
        "site": "/etc/hostname", "python": "/bin/false", "prolog_wait": 2})
    proc = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(hook)],
                            env=ENV)  # subprocess.run is the fake vipu's here
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        listener[0].serve(0.05)
    assert proc.wait(timeout=10) == 1 and fake.calls == []


def test_a_partition_made_for_a_client_that_went_meanwhile_is_removed(fake, cfg):
    """Cancelled while the service was creating: nobody will run the job on it, so it goes the
    way an ended job's partition goes (the journal), not to the periodic reap."""
    service_end, client_end = request("prolog")
    handle = fake._handle

    def killed_during_create(args):
        if args[0] == "create":
            client_end.close()
        return handle(args)

    fake._handle = killed_during_create
    serve(cfg, service_end)
    assert Journal(cfg.state_dir).names() == ["slurm_42"]
    Service(cfg, cfg.vipu_client(), FakeSlurm()).step()
    assert fake.partitions == {} and Ledger(cfg.state_dir).get("slurm_42") is None


def test_a_job_cancelled_during_its_create_leaves_no_partition_behind(fake, cfg):
    """The race seen in the lab's storm: Slurm kills the client and runs the epilog (which queues
    the removal) while the service's prolog thread is between its record and its create. The
    removal must wait for the prolog, or the create lands after it and nothing remembers it."""
    from .test_removal import queue

    service_end, client_end = request("prolog")
    service = Service(cfg, cfg.vipu_client(), FakeSlurm())
    handle = fake._handle

    def cancelled_mid_create(args):
        if args[0] == "create":
            client_end.close()                         # Slurm kills the client...
            queue(cfg, 42)                             # ...its epilog queues the removal...
            service.step()                             # ...and the removal thread gets to it first
        return handle(args)

    fake._handle = cancelled_mid_create
    serve(cfg, service_end)
    service.step()
    assert fake.partitions == {} and Journal(cfg.state_dir).names() == []
    assert Ledger(cfg.state_dir).get("slurm_42") is None


def test_a_prolog_nobody_waits_for_stops_waiting_for_v_ipu_and_removes_its_partition(fake, cfg):
    """Cancelled while the partition was still PENDING: the prolog does not wait on to its
    deadline for a job that is gone; it removes what it made at once."""
    service_end, client_end = request("prolog")
    ends = [client_end]
    fake.pending_polls = 1000                      # V-IPU would take until the deadline
    handle = fake._handle

    def cancelled_while_pending(args):
        if args[0] == "list" and ends:
            ends.pop().close()                     # Slurm kills the client at the first poll
        return handle(args)

    fake._handle = cancelled_while_pending
    started = time.monotonic()
    serve(cfg, service_end)
    assert time.monotonic() - started < 3          # not the deadline (5 s here)
    assert fake.partitions == {} and Ledger(cfg.state_dir).get("slurm_42") is None
    assert "the job ended while its partition was being made; nothing left behind" in hooks_log(cfg)


def test_a_new_service_replaces_a_dead_one_s_socket_and_old_fifo_files(cfg):
    state = Path(cfg.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    dead = transport.listen(cfg.state_dir)
    dead.close()                                   # killed: its socket file stays, nobody listens
    (state / "requests.fifo").write_text("")
    (state / "prolog-requests").mkdir()
    transport.remove_legacy(cfg.state_dir)
    fresh = transport.listen(cfg.state_dir)
    assert not (state / "requests.fifo").exists() and not (state / "prolog-requests").exists()
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.connect(str(transport.socket_path(cfg.state_dir)))
    probe.close()
    fresh.close()


def test_prolog_threads_stay_for_the_next_prolog_and_none_waits_behind_another():
    workers = transport.Workers()
    release, seen = threading.Event(), []

    def job(name, block):
        seen.append((name, threading.get_ident()))
        if block:
            release.wait(10)

    workers.submit(job, "slow", True)      # holds its thread
    workers.submit(job, "quick", False)    # gets a second one at once
    wait_for("both jobs to start", lambda: len(seen) == 2, timeout=10, interval=0.01)
    assert [name for name, _ in seen] == ["slow", "quick"] and seen[0][1] != seen[1][1]
    workers.wait(time.monotonic() + 0.2, time.monotonic)   # bounded: "slow" still runs
    assert workers.busy == 1
    release.set()
    workers.wait(time.monotonic() + 10, time.monotonic)
    assert (workers.busy, workers.idle) == (0, 2)
    threads = threading.active_count()
    for k in range(5):                      # one after the other: the same threads, none new
        workers.submit(job, f"next{k}", False)
        workers.wait(time.monotonic() + 10, time.monotonic)
    assert threading.active_count() == threads and {i for _, i in seen[2:]} <= {i for _, i in seen[:2]}


def test_an_epilog_the_service_cannot_journal_is_left_to_the_python_hook(fake, cfg, hook, listener, mocker):
    """The accept loop journals epilogs itself: a failure there (a full disk) must not end the
    service; the hook gets no answer and runs the Python epilog, which says why."""
    mocker.patch("slurm_ipu.hooks.journal.write_into", side_effect=OSError(28, "No space left on device"))
    code, _ = run_hook(hook, listener[0], SLURM_SCRIPT_CONTEXT="epilog_slurmctld")
    assert code == 0 and python_ran(hook) == ["epilog_slurmctld"]
    assert "could not take the epilog: OSError(28, 'No space left on device')" in hooks_log(cfg)
    code, _ = run_hook(hook, listener[0])  # the same listener still serves
    assert code == 0 and fake.partitions["slurm_42"]["size"] == 16


@pytest.mark.parametrize("where", ["removals", "hook-prolog"])
def test_a_thread_that_dies_ends_the_service_with_its_traceback(fake, cfg, hook, mocker, where):
    """A daemon's worker never dies alone: an unexpected exception in the removal thread (a
    user's job name once did it) or in a prolog's thread stops the whole service with exit 1 and
    the traceback in hooks.log, so systemd (Restart=always) or the lab starts it again, instead of
    a process that holds the remover's role and removes nothing."""
    from slurm_ipu.errors import ServiceDied

    if where == "removals":
        mocker.patch.object(Service, "step", side_effect=RuntimeError("boom in a pass"))
    else:
        mocker.patch.object(transport.Listener, "_timed", side_effect=RuntimeError("boom in a prolog"))

        def prolog():  # once the service listens: its prolog goes to a worker thread (a hook that
            # connected between the socket's bind and its listen ran Python instead: again)
            wait_for("the service's socket", transport.socket_path(cfg.state_dir).exists, timeout=20)
            deadline = time.monotonic() + 20
            while not service.died and time.monotonic() < deadline:
                run_hook(hook)
        threading.Thread(target=prolog, daemon=True).start()
    service = Service(cfg, cfg.vipu_client(), FakeSlurm())
    bound = threading.Timer(30, service._stop)  # bounded, should the death go unnoticed
    bound.start()
    before = threading.excepthook
    try:
        with pytest.raises(ServiceDied, match=f"its {where} thread died"):
            service.run()   # returns at once: no stop signal was sent
    finally:
        bound.cancel()
    log = hooks_log(cfg)
    assert f"the {where} thread died; stopping (exit 1)" in log and "RuntimeError: boom" in log
    assert "Traceback (most recent call last)" in log and log.rstrip().endswith("(traceback above)")
    assert threading.excepthook is before
    assert not transport.socket_path(cfg.state_dir).exists()   # the hooks go to Python at once
