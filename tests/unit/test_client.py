"""VipuClient against a fake `vipu` at the subprocess boundary (pytest-mock)."""

import subprocess

import pytest

from slurm_ipu import errors
from slurm_ipu.vipu import VipuClient

from .fake_vipu import FakeVipu


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


@pytest.fixture
def fake(mocker):
    vipu = FakeVipu()
    mocker.patch("slurm_ipu.vipu.client.run_command", side_effect=vipu)
    return vipu


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def client(clock):
    return VipuClient(command=["vipu"], host="127.0.0.1", port=8090, timeout=5, retries=2,
                      sleep=clock.sleep, clock=clock)


def test_create_passes_an_argument_list_with_server_and_shape(client, fake, mocker):
    run = mocker.patch("slurm_ipu.vipu.client.run_command", side_effect=fake)
    client.create_partition("slurm_9", 16, num_gcds=2, reconfigurable=True, hosts=["n1"], owner_uid=5)
    argv = run.call_args.args[0]
    assert argv == ["vipu", "--api-host", "127.0.0.1", "--api-port", "8090", "create", "partition", "slurm_9",
                    "--size", "16", "--showjson", "--num-gcds", "2", "--reconfigurable"]
    assert run.call_args.kwargs["timeout"] == 5
    assert "shell" not in run.call_args.kwargs


def test_emulator_flags_add_hosts_and_owner(fake, clock):
    c = VipuClient(emulator_flags=True, sleep=clock.sleep, clock=clock)
    c.create_partition("p", 4, hosts=["n1", "n2"], owner_uid=7)
    assert fake.partitions["p"]["argv"][-4:] == ["--hosts", "n1,n2", "--owner-uid", "7"]


def test_transient_failures_are_retried_with_backoff(client, fake, clock):
    fake.failures = [("error: down [UNAVAILABLE]", 1), ("error: down [UNAVAILABLE]", 1)]
    assert client.list_partitions() == []
    assert clock.sleeps == [0.2, 0.4]


def test_transient_failures_give_up_after_the_retries(client, fake, clock):
    fake.failures = [("error: down [UNAVAILABLE]", 1)] * 3
    with pytest.raises(errors.VipuUnavailable, match="down"):
        client.list_partitions()
    assert len(fake.calls) == 3


def test_permanent_failures_are_not_retried(client, fake, clock):
    fake.failures = [("error: invalid partition size 3 [INVALID_ARGUMENT]", 1)]
    with pytest.raises(errors.InvalidPartition, match="size 3"):
        client.create_partition("p", 3)
    assert len(fake.calls) == 1 and clock.sleeps == []


def test_timeouts_are_transient_then_unavailable(client, fake):
    fake.timeouts = 3
    with pytest.raises(errors.VipuUnavailable, match="timed out after 5s"):
        client.list_partitions()
    assert len(fake.calls) == 3


def test_every_failed_call_is_told_by_kind_to_the_observer(client, fake):
    """The slurm-ipu service's V-IPU error counter (hooks/stats.py): each attempt, retried or not, by
    its kind; a twin made for a prolog reports to the same observer."""
    seen = []
    client.observer = lambda exc: seen.append(exc.kind)
    fake.timeouts, fake.failures = 1, [("error: down [UNAVAILABLE]", 1)]
    assert client.list_partitions() == []
    fake.failures = [("error: only 2 IPUs free [RESOURCE_EXHAUSTED]", 1)]
    with pytest.raises(errors.InsufficientIpus):
        client.with_sleep(lambda s: None).create_partition("p", 4)
    assert seen == ["timeout", "unavailable", "exhausted"]


def test_deadline_bounds_retries_and_timeouts(client, fake, clock, mocker):
    fake.failures = [("error: x [UNAVAILABLE]", 1)] * 5
    run = mocker.patch("slurm_ipu.vipu.client.run_command", side_effect=fake)
    with pytest.raises(errors.VipuUnavailable):
        client.list_partitions(deadline=0.3)
    assert run.call_args_list[0].kwargs["timeout"] == pytest.approx(0.3)
    assert len(fake.calls) == 2  # a third attempt would start past the deadline


def test_missing_command_is_a_config_error(mocker, clock):
    mocker.patch("slurm_ipu.vipu.client.run_command", side_effect=FileNotFoundError("vipu"))
    with pytest.raises(errors.ConfigError, match="vipu.command"):
        VipuClient(sleep=clock.sleep, clock=clock).list_partitions()


def test_remove_missing_ok(client, fake):
    assert client.remove_partition("gone", missing_ok=True) is False
    with pytest.raises(errors.PartitionNotFound):
        client.remove_partition("gone")


def test_ensure_waits_for_active(client, fake, clock):
    fake.pending_polls = 3
    part = client.ensure_partition("slurm_1", 8, deadline=10.0)
    assert part.state == "ACTIVE" and part.size == 8
    assert len(clock.sleeps) == 3


def test_ensure_is_idempotent_for_the_same_shape(client, fake):
    client.ensure_partition("slurm_1", 8, deadline=10.0)
    assert client.ensure_partition("slurm_1", 8, deadline=10.0).name == "slurm_1"
    with pytest.raises(errors.PartitionExists, match="exists with 8 IPUs/1 GCD.*not 4/1"):
        client.ensure_partition("slurm_1", 4, deadline=10.0)


def test_ensure_reports_error_state(client, fake):
    fake.end_state = "ERROR"
    with pytest.raises(errors.PartitionNotReady, match="ERROR"):
        client.ensure_partition("slurm_2", 4, deadline=10.0)


def test_wait_active_stops_at_the_deadline(client, fake, clock):
    fake.pending_polls = 1000
    client.create_partition("slow", 4)
    with pytest.raises(errors.PartitionNotReady, match="still PENDING"):
        client.wait_active("slow", deadline=2.0)
    assert clock.now <= 2.0


def test_failure_output_is_logged_only_on_failure(client, fake, caplog):
    client.list_partitions()
    assert caplog.records == []
    fake.failures = [("error: nope [NOT_FOUND]", 1)]
    with pytest.raises(errors.PartitionNotFound):
        client.remove_partition("x")
    assert "error: nope [NOT_FOUND]" in caplog.text


def test_timeout_kills_and_reports(mocker, clock):
    mocker.patch("slurm_ipu.vipu.client.run_command", side_effect=subprocess.TimeoutExpired(["vipu"], 1))
    c = VipuClient(retries=0, timeout=1, sleep=clock.sleep, clock=clock)
    with pytest.raises(errors.VipuUnavailable, match="list partitions` timed out after 1s"):
        c.list_partitions()


def test_ensure_skips_the_listing_when_create_reports_active(client, fake):
    fake.create_json = True
    assert client.ensure_partition("slurm_3", 4, deadline=10.0).state == "ACTIVE"
    assert [c[0] for c in fake.calls] == ["create"]
    fake.pending_polls = 2
    assert client.ensure_partition("slurm_4", 4, deadline=10.0).state == "ACTIVE"
    assert [c[0] for c in fake.calls[1:]] == ["create", "list", "list"]


def test_deadline_running_out_during_a_poll_is_not_ready_not_unavailable(client, fake, clock):
    fake.pending_polls = 1
    client.create_partition("late", 4)
    fake.timeouts = 0

    def slow_list(*a, **k):  # the poll after the first PENDING one outlives the deadline
        clock.now = 5.0
        raise __import__("subprocess").TimeoutExpired(["vipu"], 1)

    real = fake.__call__
    calls = {"n": 0}

    def runner(argv, **kw):
        calls["n"] += 1
        return real(argv, **kw) if calls["n"] == 1 else slow_list()

    client.runner = runner
    client.retries = 0
    with pytest.raises(errors.PartitionNotReady, match="still PENDING at the deadline"):
        client.wait_active("late", deadline=5.0)
