"""Every fault mode, seen through VipuClient as the typed error the hooks will handle."""

import time

import pytest

from slurm_ipu import errors
from slurm_ipu.emulator.process import EmulatorProcess

from ..waiting import wait_for


def deadline(seconds=10.0):
    return time.monotonic() + seconds


def test_latency_beyond_the_timeout_is_unavailable(client, admin):
    admin.faults(latency=3)
    client.timeout, client.retries = 0.8, 0
    with pytest.raises(errors.VipuUnavailable, match="timed out"):
        client.list_partitions()
    admin.clear_faults()
    assert client.list_partitions() == []


def test_creation_delay_keeps_pending_then_active(client, admin):
    admin.faults(create_delay=3.0)
    client.create_partition("slow", 4)
    assert client.get_partition("slow").state == "PENDING"
    with pytest.raises(errors.PartitionNotReady, match="still PENDING"):
        client.wait_active("slow", deadline(1.0))
    assert client.wait_active("slow", deadline()).state == "ACTIVE"


@pytest.mark.parametrize("code,cls", [
    ("UNAVAILABLE", errors.VipuUnavailable),
    ("INTERNAL", errors.VipuUnavailable),
    ("RESOURCE_EXHAUSTED", errors.InsufficientIpus),
    ("PERMISSION_DENIED", errors.PermissionDenied),
    ("ALREADY_EXISTS", errors.PartitionExists),
    ("INVALID_ARGUMENT", errors.InvalidPartition),
])
def test_fail_next_calls_with_a_chosen_error(client, admin, code, cls):
    admin.faults(fail={"count": 2, "code": code, "op": "create"})
    client.retries = 0
    client.list_partitions()  # other operations are not affected
    with pytest.raises(cls, match="injected fault"):
        client.create_partition("f", 2)
    with pytest.raises(cls):
        client.create_partition("f", 2)
    client.create_partition("f", 2)  # the third call goes through
    assert client.get_partition("f").size == 2


def test_transient_fault_is_ridden_out_by_retries(client, admin):
    admin.faults(fail={"count": 1, "code": "UNAVAILABLE"})
    client.retries = 1
    client.create_partition("r", 1)
    assert client.get_partition("r") is not None


def test_error_state(client, admin):
    admin.faults(error_next=1)
    with pytest.raises(errors.PartitionNotReady, match="ERROR"):
        client.ensure_partition("bad", 4, deadline())
    client.remove_partition("bad")
    assert client.ensure_partition("good", 4, deadline()).state == "ACTIVE"


def test_down_refuses_connections_until_up(client, admin, emu):
    admin.down()
    client.retries = 0

    def refused() -> str | None:
        try:
            client.list_partitions()
        except errors.VipuUnavailable as exc:
            return str(exc)
        return None
    message = wait_for("the server to go down", refused, 2, 0.01)  # the listener closes just after the call
    assert "unable to connect to VIRM/V-IPU Controller" in message or "refused" in message.lower()
    admin.up()
    assert client.list_partitions() == []


def test_down_for_a_while_comes_back_by_itself(client, admin):
    admin.down(seconds=0.5)
    client.retries, client.backoff = 6, 0.1
    assert client.list_partitions() == []  # retries with backoff outlast the outage


def test_crash_then_restart_keeps_state(client, admin, emu):
    client.create_partition("keep", 8)
    admin.crash()
    wait_for("the emulator to exit", lambda: not emu.alive(), 10, 0.02)
    assert not emu.alive()
    client.retries = 0
    with pytest.raises(errors.VipuUnavailable):
        client.list_partitions()
    again = EmulatorProcess.start(emu.state_dir, port=emu.port)
    try:
        assert [(p.name, p.size, p.state) for p in client.list_partitions()] == [("keep", 8, "ACTIVE")]
    finally:
        again.stop()


@pytest.mark.parametrize("change", [{"latency": float("nan")}, {"latency": float("inf")}, {"latency": -5},
                                    {"create_delay": "soon"}])
def test_the_admin_api_refuses_seconds_that_would_wedge_it(admin, client, change):
    """Defence in depth behind `vipu-emu fault`'s own check: the server stays
    answering, with its faults unchanged."""
    from slurm_ipu.emulator.api import ApiError

    with pytest.raises(ApiError, match="use a number of seconds from 0 to 3600") as refused:
        admin.faults(**change)
    assert refused.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ApiError, match="use a number of seconds from 0 to 3600"):
        admin.down(float("nan"))
    assert admin.faults()["latency"] == 0 and client.list_partitions() == []


def test_an_over_long_partition_name_is_a_permanent_error(client, vipu):
    """A 120,000-character name: INVALID_ARGUMENT, never retried as V-IPU trouble."""
    name = "p" * 120_000
    for args in (("remove", "partition", name), ("get", "partition", name), ("create", "partition", name,
                                                                            "--size", "1")):
        proc = vipu(*args)
        assert proc.returncode == 1 and proc.stderr.strip().endswith("[INVALID_ARGUMENT]"), (args[0], proc.stderr)
        assert "120000 characters" in proc.stderr or "invalid partition name" in proc.stderr
    with pytest.raises(errors.InvalidPartition):
        client.remove_partition(name, deadline=deadline())
