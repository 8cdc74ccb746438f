"""The slurm-ipu service (`slurm-ipu service`) and the hook wrapper's fast epilog path: an
ended job's partition goes, only ours goes, a requeued job keeps the partition it adopted, and
V-IPU trouble loses nothing. The wrapper is the real rendered shell script."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.hooks import prolog, reap
from slurm_ipu.hooks import service as service_module
from slurm_ipu.hooks.journal import Journal
from slurm_ipu.hooks.ledger import Ledger
from slurm_ipu.hooks.service import Service

from ..fake_slurm import FakeSlurm
from .conftest import write_conf
from .test_hooks import env, hooks_log


def queue(cfg, job: int) -> None:
    """What the slurm-ipu service's epilog writes: the job's end, now."""
    Journal(cfg.state_dir).add(f"slurm_{job}", job, "queued by the epilog")


class Clock:
    """Real time to start from (the V-IPU client checks deadlines against it), moved on by hand."""

    def __init__(self):
        self.now = time.monotonic()

    def __call__(self):
        return self.now


def test_the_service_removes_a_queued_partition_of_ours_and_leaves_a_stranger_s(fake, cfg):
    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0          # job 42: ours, recorded
    client.create_partition("slurm_43", 4)                             # made by someone else
    queue(cfg, 42)
    queue(cfg, 43)
    Service(cfg, client, FakeSlurm({}), clock=Clock()).step()
    assert sorted(fake.partitions) == ["slurm_43"]
    assert Journal(cfg.state_dir).names() == [] and Ledger(cfg.state_dir).get("slurm_42") is None
    log = hooks_log(cfg)
    assert "job 42: partition slurm_42 removed" in log and "slurm_43 is not ours" in log


def test_an_entry_a_crash_of_the_host_lost_is_covered_by_the_record(fake, cfg):
    """Journal entries are not fsynced (the creation record is): a crash of the host may lose one
    the epilog was answered for. The restarted service's first pass, a full reap, removes the
    partition of every recorded job that is over."""
    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0
    assert Journal(cfg.state_dir).names() == [] and "slurm_42" in fake.partitions  # no entry
    Service(cfg, client, FakeSlurm({}), clock=Clock()).step()
    assert fake.partitions == {} and Ledger(cfg.state_dir).get("slurm_42") is None


def test_an_empty_entry_a_crash_of_the_host_left_is_dropped_and_the_record_removes_it(fake, cfg):
    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0
    journal = Journal(cfg.state_dir)
    journal.dir.mkdir(parents=True, exist_ok=True)
    (journal.dir / "slurm_42.json").write_bytes(b"")  # renamed into place, its data never written
    Service(cfg, client, FakeSlurm({}), clock=Clock()).step()
    assert fake.partitions == {} and journal.names() == [] and Ledger(cfg.state_dir).get("slurm_42") is None


def two_ended_jobs(cfg) -> tuple[Clock, Service]:
    """Jobs 42 and 44 ran and ended, their removals queued; a service whose clock moves by hand."""
    client = cfg.vipu_client()
    for job in (42, 44):
        assert prolog.run(env(SLURM_JOB_ID=str(job)), cfg, client, FakeSlurm()) == 0
        queue(cfg, job)
    clock = Clock()
    service = Service(cfg, client, FakeSlurm({}), clock=clock)
    service.next_reap = float("inf")
    return clock, service


def test_v_ipu_down_keeps_every_entry_and_backs_off_then_recovers(fake, cfg):
    clock, service = two_ended_jobs(cfg)
    fake.failures = [("error: V-IPU server unavailable [UNAVAILABLE]", 1)] * 2
    assert service.step() == pytest.approx(1.0, abs=0.05)  # the removal thread sleeps out the backoff
    assert Journal(cfg.state_dir).names() == ["slurm_42", "slurm_44"]  # one failure stops the pass
    assert "retrying in 1s" in hooks_log(cfg)
    calls = len(fake.calls)
    clock.now += 0.5
    assert service.step() == pytest.approx(0.5, abs=0.05)  # woken within the backoff: no V-IPU call
    assert len(fake.calls) == calls
    clock.now += 1.0
    assert service.step() == service_module.JOURNAL_POLL_S
    assert fake.partitions == {} and Journal(cfg.state_dir).names() == []


def test_v_ipu_refusing_one_removal_backs_off_that_entry_alone(fake, cfg):
    """V-IPU answered and refused one removal (an allocation holding partitions, say): the other
    entries go in the same pass, and the refused one waits out its own backoff (item 2:
    one job's trouble held every other job's IPUs until the next full reap)."""
    clock, service = two_ended_jobs(cfg)
    fake.failures = [("error: partition slurm_42 is busy [FAILED_PRECONDITION]", 1)]
    assert service.step() == pytest.approx(1.0, abs=0.05)  # slurm_42's own backoff
    assert Journal(cfg.state_dir).names() == ["slurm_42"] and sorted(fake.partitions) == ["slurm_42"]
    assert "slurm-ipu service: slurm_42 not removed (partition slurm_42 is busy); retrying in 1s" in hooks_log(cfg)
    calls = len(fake.calls)
    clock.now += 0.5
    assert service.step() == pytest.approx(0.5, abs=0.05) and len(fake.calls) == calls  # not yet
    fake.failures = [("error: partition slurm_42 is busy [FAILED_PRECONDITION]", 1)]
    clock.now += 0.5
    assert service.step() == service_module.JOURNAL_POLL_S  # the journal's poll comes first
    assert "retrying in 2s" in hooks_log(cfg)  # refused again: twice as long
    calls = len(fake.calls)
    clock.now += 1.0
    assert service.step() == pytest.approx(1.0, abs=0.05) and len(fake.calls) == calls
    clock.now += 1.0
    assert service.step() == service_module.JOURNAL_POLL_S
    assert fake.partitions == {} and Journal(cfg.state_dir).names() == [] and service.later == {}


def test_a_removal_v_ipu_keeps_refusing_ages_and_its_wait_is_counted(fake, cfg):
    """A retry keeps the time the removal was first queued (doctor's journal check reports an entry
    queued too long; a retry that renewed it hid one V-IPU refused for hours), and the hook
    service's removal histogram counts each settled entry's whole wait."""
    from slurm_ipu.hooks import stats

    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0
    ledger = Ledger(cfg.state_dir)
    record = {k: v for k, v in ledger.get("slurm_42").items() if k not in ("partition", "time")}
    ledger.put("slurm_42", **dict(record, began=time.time() - 7200))  # it ran two hours ago
    journal = Journal(cfg.state_dir)
    journal.add("slurm_42", 42, "queued by the epilog", since=time.time() - 3600)  # and ended an hour ago
    clock = Clock()
    service = Service(cfg, client, FakeSlurm({}), clock=clock)
    service.next_reap = service.next_health = float("inf")
    fake.failures = [("error: partition slurm_42 is busy [FAILED_PRECONDITION]", 1)]
    service.step()
    entry = journal.get("slurm_42")
    assert entry["reason"] == "partition slurm_42 is busy" and time.time() - entry["time"] >= 3600
    clock.now += 1.0
    service.step()
    assert journal.names() == [] and fake.partitions == {}
    removal = stats.load(cfg.state_dir)["durations"]["removal"]
    assert removal["count"] == 1 and removal["sum"] >= 3600 and removal["buckets"] == [0] * len(stats.BUCKETS)
    assert stats.load(cfg.state_dir)["vipu_errors"] == {"not_ready": 1}


def test_an_entry_whose_prolog_holds_its_name_is_tried_again_soon_not_at_once(fake, cfg):
    """The removal thread neither spins on a name a prolog is still making nor leaves it for the
    slow journal poll."""
    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0
    queue(cfg, 42)
    service = Service(cfg, client, FakeSlurm({}), clock=Clock())
    service.next_reap = float("inf")
    ledger = Ledger(cfg.state_dir)
    fd = _hold(ledger._lock_path("slurm_42"))
    try:
        assert service.step() == service_module.BUSY_POLL_S
        assert "slurm_42" in fake.partitions and Journal(cfg.state_dir).names() == ["slurm_42"]
    finally:
        os.close(fd)
    assert service.step() == service_module.JOURNAL_POLL_S and fake.partitions == {}


def test_a_requeued_job_keeps_the_partition_it_adopted(fake, cfg):
    """Job 42's first run ended (its removal queued); Slurm requeued it and its next prolog ran
    before the service got to the entry: the prolog takes the name back, the service must not
    remove the partition the job now runs on."""
    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0
    queue(cfg, 42)
    assert prolog.run(env(SLURM_JOB_RESTART_COUNT="1"), cfg, client, FakeSlurm()) == 0
    Service(cfg, client, FakeSlurm({42: "RUNNING"}), clock=Clock()).step()
    assert list(fake.partitions) == ["slurm_42"]


def test_the_prolog_waits_for_a_removal_of_its_name_under_way(fake, tmp_path):
    """The remover holds the name's lock while it removes: the prolog waits for it (bounded by
    its deadline) instead of adopting a partition that is about to go."""
    cfg = config.load(str(write_conf(tmp_path, prolog={"deadline": 0.3})), environ={})
    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0
    queue(cfg, 42)
    fd = _hold(Ledger(cfg.state_dir)._lock_path("slurm_42"))
    try:
        assert prolog.run(env(SLURM_JOB_RESTART_COUNT="1"), cfg, client, FakeSlurm()) == 1
    finally:
        os.close(fd)
    assert "stayed locked past the deadline" in hooks_log(cfg)
    assert Journal(cfg.state_dir).names() == ["slurm_42"]  # untouched: that removal is still the remover's


def test_an_epilog_leaves_its_entry_to_the_service_and_the_service_works_it_off_as_it_stops(fake, cfg):
    """A Python epilog never waits on the slurm-ipu service (which holds the remover's role while it
    stops, its socket closed already): it queues and returns, and the service's last pass removes
    what was queued so."""
    from slurm_ipu.hooks import epilog, remover

    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0
    service = Service(cfg, client, FakeSlurm({}), clock=Clock())
    fd = remover.take(cfg.state_dir, remover.SERVICE, 0)
    try:
        started = time.monotonic()
        assert epilog.run(env(), cfg, client) == 0
        assert time.monotonic() - started < 1.0 and "slurm_42" in fake.partitions
        assert f"left queued: the slurm-ipu service (pid {os.getpid()}) removes it" in hooks_log(cfg)
        service._last_pass(time.monotonic() + 10)
    finally:
        remover.give_up(fd)
    assert fake.partitions == {} and Journal(cfg.state_dir).names() == []


def test_reap_by_hand_while_the_service_runs_is_the_service_s_reap(fake, cfg):
    """One remover: `slurm-ipu reap` asks the running slurm-ipu service, whose removal thread reaps at
    once; the admin sees its lines and its exit status."""
    import threading

    from slurm_ipu.hooks import remover, transport

    client = cfg.vipu_client()
    client.create_partition("slurm_7", 1)
    Ledger(cfg.state_dir).put("slurm_7", job_id=7)  # recorded, and job 7 is gone
    service = Service(cfg, client, FakeSlurm({}), clock=Clock())
    service.next_health = float("inf")
    fd = remover.take(cfg.state_dir, remover.SERVICE, 0)
    listener = transport.Listener(cfg, client, service.slurm, service.wake.set, None, service._ask, service.room)
    lines, codes = [], []
    asker = threading.Thread(target=lambda: codes.append(reap.run(cfg, client, FakeSlurm({}), out=lines.append)))
    try:
        asker.start()
        deadline = time.monotonic() + 10
        while service.asked.empty() and time.monotonic() < deadline:
            listener.serve(0.2)
        service.next_reap = float("inf")  # only the admin's reap runs in this pass
        service.step()
        asker.join(10)
    finally:
        listener.close()
        remover.give_up(fd)
    assert codes == [0] and lines == ["reap: removed slurm_7 (job 7 gone)"] and fake.partitions == {}


def test_reap_leaves_an_entry_queued_after_its_listings(fake, cfg):
    """A job that ends while reap runs is the service's: reap must not settle its entry as if
    the partition were gone (it was listed before the job ended)."""
    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0

    class EndsDuringReap(FakeSlurm):
        def active_jobs(self):
            queue(cfg, 42)          # the job ends between reap's two listings
            return {}

    fake.partitions.clear()         # listed as gone...
    reap.run(cfg, client, EndsDuringReap(), out=lambda _: None)
    assert Journal(cfg.state_dir).names() == ["slurm_42"]


def _hold(path) -> int:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_reap_keeps_the_record_of_a_partition_created_after_its_listing(fake, cfg):
    """A prolog that records and creates after reap listed V-IPU, for a job so short it is over
    when reap asks Slurm: the record must stay, or the job's removal finds "not ours" and the
    partition leaks (seen in the 300-job storm before this was fixed)."""
    client = cfg.vipu_client()

    class PrologAfterListing(FakeSlurm):
        def active_jobs(self):
            assert prolog.run(env(), cfg, client, FakeSlurm()) == 0   # job 42 starts...
            return {}                                                 # ...and is over already

    reap.run(cfg, client, PrologAfterListing(), out=lambda _: None)
    assert Ledger(cfg.state_dir).owns("slurm_42", 42)
    queue(cfg, 42)
    Service(cfg, client, FakeSlurm({}), clock=Clock()).step()
    assert fake.partitions == {}


def test_a_dead_service_s_words_in_the_lock_file_never_turn_an_epilog_away(fake, tmp_path):
    """The remover's lock file still names a service killed -9, while someone else holds the lock
    and has not written its own words yet: the epilog waits for the role (it is no service, which
    would remove the entry within a second) and removes its partition itself."""
    import subprocess
    import threading

    from slurm_ipu.hooks import epilog, remover

    cfg = config.load(str(write_conf(tmp_path, epilog={"deadline": 5})), environ={})
    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0
    dead = subprocess.Popen(["true"])
    dead.wait()
    remover.lock_path(cfg.state_dir).write_text(f"{dead.pid} service\n")
    fd = _hold(remover.lock_path(cfg.state_dir))
    threading.Timer(0.3, os.close, (fd,)).start()  # the other holder finishes
    assert epilog.run(env(), cfg, client) == 0
    assert fake.partitions == {} and Journal(cfg.state_dir).names() == []


def test_a_second_service_is_refused_and_a_service_waits_for_an_epilog_removing(fake, cfg):
    """One remover: a slurm-ipu service started beside a running one says so at once; one started while
    a Python epilog removes takes the role when that epilog is done."""
    import threading

    from slurm_ipu.errors import ConfigError
    from slurm_ipu.hooks import remover

    running = remover.take(cfg.state_dir, remover.SERVICE, 0)
    try:
        with pytest.raises(ConfigError, match=rf"slurm-ipu service: one already runs for .* \(pid {os.getpid()}\)"):
            Service(cfg, cfg.vipu_client(), FakeSlurm())._become_remover()
    finally:
        remover.give_up(running)
    epilog_fd = remover.take(cfg.state_dir, "epilog", 0)
    threading.Timer(0.3, remover.give_up, (epilog_fd,)).start()
    fd = Service(cfg, cfg.vipu_client(), FakeSlurm())._become_remover()
    try:
        assert remover.holder(cfg.state_dir) == (os.getpid(), remover.SERVICE)
    finally:
        remover.give_up(fd)


def test_a_reap_asked_at_a_takeover_runs_at_once_and_again_soon_while_slurm_does_not_answer(fake, cfg):
    """A job the new controller never knew (lost in the failover) holds a partition: the reap the
    takeover asks for (the file slurm-ipu-hook leaves) removes it at the next pass, not at
    reap.interval; while slurmctld does not answer yet, the reap and the request wait seconds."""
    client = cfg.vipu_client()
    assert prolog.run(env(), cfg, client, FakeSlurm()) == 0  # job 42's partition, then 42 was lost
    clock = Clock()
    slurm = FakeSlurm({}, broken=True)  # the new controller is not answering yet
    service = Service(cfg, client, slurm, clock=clock)
    service.next_reap = clock.now + 3600
    service.step()
    assert "slurm_42" in fake.partitions  # no request, no reap
    request = Path(cfg.state_dir) / "reap.request"
    request.touch()
    service.step()
    assert "slurm_42" in fake.partitions and request.exists()  # skipped: kept, retried soon
    assert service.next_reap == pytest.approx(clock.now + service_module.REAP_RETRY_S)
    slurm.broken = False
    clock.now += service_module.REAP_RETRY_S
    service.step()
    assert "slurm_42" not in fake.partitions and not request.exists()
    assert service.next_reap == pytest.approx(clock.now + cfg.reap.interval)
