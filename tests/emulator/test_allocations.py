"""Allocations an admin creates and removes: what the allocation-per-job
model (Graphcore's host-IPU mapping) needs of V-IPU. An admin makes `c<jobid>` of the IPU-Machines
of a job's hosts and grants it to the job's user; the user makes reconfigurable partitions in it;
nothing outside it takes its IPUs; removing it with partitions inside is refused (the epilog
removes them first); it outlives a controller restart."""

from __future__ import annotations

import os

import pytest

from slurm_ipu.emulator.api import Api
from slurm_ipu.emulator.process import EmulatorProcess

from .test_identity import call_as, needs_root

ALICE, BOB = 4101, 4102
AGENTS = ["ag0", "ag1", "ag2", "ag3"]  # one host's IPU-Machines: 16 IPUs


def test_an_admin_allocation_is_listed_with_its_machines_and_grants(vipu, api):
    out = vipu("create", "allocation", "c42", "--agents", ",".join(AGENTS), "--grant", f"{ALICE}", check=True)
    assert out.stdout.strip() == "create allocation (c42): success."
    listed = {a["id"]: a for a in api.allocations()}
    assert listed["c42"] == {"id": "c42", "agents": AGENTS, "num_ipus": 16, "created": True, "grants": [ALICE]}
    assert listed["default"]["created"] is False
    table = vipu("list", "allocations", check=True).stdout
    assert "c42" in table and "ag0 ag1 ag2 ag3" in table


@needs_root
def test_the_granted_user_makes_reconfigurable_partitions_in_it_and_no_one_else(emu, api):
    api.create_allocation("c42", AGENTS, [ALICE])
    create = {"name": "p42", "size": 16, "allocation": "c42", "reconfigurable": True}
    status, doc = call_as(BOB, emu.port, "POST", "/v1/partitions", create)
    assert status == 403 and "may not create partitions in allocation c42" in doc["error"]["message"]
    status, doc = call_as(ALICE, emu.port, "POST", "/v1/partitions", create)
    assert status == 201 and doc["partition"]["spec"]["owner_uid"] == ALICE, doc
    ipus = {i["id"] for i in doc["partition"]["spec"]["ipus"]}
    assert ipus == set(range(16))  # ag0-ag3's IPUs
    status, doc = call_as(ALICE, emu.port, "POST", "/v1/partitions", dict(create, name="p42b", size=4))
    assert status == 409 and doc["error"]["code"] == "RESOURCE_EXHAUSTED"  # the allocation is full
    status, doc = call_as(ALICE, emu.port, "POST", "/v1/allocations", {"name": "mine", "agents": ["ag8"]})
    assert status == 403 and "V-IPU administrators only" in doc["error"]["message"]


def test_a_partition_outside_never_takes_its_ipus(api):
    api.create_allocation("c42", AGENTS)
    with pytest.raises(Exception) as err:
        api.create_partition(name="big", size=64)  # the whole Pod, from the Pod's own allocation
    assert "not enough free IPUs" in str(err.value)
    part = api.create_partition(name="half", size=32)["partition"]
    assert {i["id"] for i in part["spec"]["ipus"]}.isdisjoint(range(16))


def test_a_job_s_allocation_of_the_whole_pod_nests_in_the_file_s(api):
    """An allocation-model job over every host of the Pod gets every IPU-Machine: the same machines
    as the cluster file's allocation of the Pod, which nests (it was refused as overlapping, and
    the prolog cancelled the job as a request that cannot be met)."""
    every = [f"ag{k}" for k in range(16)]
    listed = api.create_allocation("c7", every)
    assert listed["agents"] == every and listed["num_ipus"] == 64
    part = api.create_partition(name="p7", size=64, allocation="c7")["partition"]
    assert len(part["spec"]["ipus"]) == 64
    with pytest.raises(Exception) as err:
        api.create_partition(name="other", size=4)  # in the file's allocation: its machines are c7's
    assert "not enough free IPUs" in str(err.value)


@pytest.mark.parametrize("agents,words", [
    (["ag0", "ag1", "ag2"], "holds 3 IPU-Machine(s) = 12 IPUs; an allocation is 4, 8, 16, 32, 64 IPUs"),
    (["ag99"], "unknown agent 'ag99'; agents are ag0..ag15"),
    (["ag2", "ag3"], "its IPU-Machines are in allocation c42 already"),
    # The same machines, or some of them and others: busy (InsufficientIpus: the prolog waits for
    # a job's allocation whose epilog is still queued), never a bad request.
    (["ag0", "ag1", "ag2", "ag3"], "its IPU-Machines are in allocation c42 already"),
    (["ag2", "ag3", "ag4", "ag5"], "its IPU-Machines are in allocation c42 already"),
])
def test_what_cannot_be_an_allocation_is_refused_in_one_line(api, agents, words):
    api.create_allocation("c42", AGENTS)
    with pytest.raises(Exception) as err:
        api.create_allocation("c43", agents)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_machines_holding_a_partition_of_another_allocation_are_refused(api):
    api.create_partition(name="running", size=4)  # ag0, by best fit
    with pytest.raises(Exception) as err:
        api.create_allocation("c42", AGENTS)
    assert "hold partition(s) running of other allocations; remove them first" in str(err.value)


def test_removal_is_refused_while_partitions_live_in_it_then_allowed(vipu, api):
    api.create_allocation("c42", AGENTS)
    api.create_partition(name="p42", size=8, allocation="c42")
    refused = vipu("remove", "allocation", "c42")
    assert refused.returncode == 1
    assert refused.stderr.strip() == ("error: allocation c42 holds partition(s) p42; remove them first "
                                      "[FAILED_PRECONDITION]")
    vipu("remove", "partition", "p42", check=True)
    assert vipu("remove", "allocation", "c42", check=True).stdout.strip() == "remove allocation (c42): success."
    assert [a["id"] for a in api.allocations()] == ["default"]
    assert "is the cluster file's own; it is not removable" in vipu("remove", "allocation", "default").stderr
    assert "[NOT_FOUND]" in vipu("remove", "allocation", "c42").stderr
    # With the allocation gone its IPUs are the Pod's again.
    assert api.create_partition(name="whole", size=64)["partition"]["spec"]["size"] == 64


def test_a_created_allocation_outlives_a_restart(tmp_path):
    emu = EmulatorProcess.start(tmp_path / "state", cluster="pod64")
    try:
        Api("127.0.0.1", emu.port, timeout=10).create_allocation("c42", AGENTS, [ALICE])
    finally:
        emu.stop()
    emu = EmulatorProcess.start(tmp_path / "state", cluster="pod64")
    try:
        listed = {a["id"]: a for a in Api("127.0.0.1", emu.port, timeout=10).allocations()}
        assert listed["c42"]["agents"] == AGENTS and listed["c42"]["grants"] == [ALICE]
    finally:
        emu.stop()


def test_a_cluster_file_admin_may_create_allocations(tmp_path):
    if os.getuid() != 0:
        pytest.skip("needs root to act as another uid")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(f"name: c\nilds: 1\nadmins: [{ALICE}]\n")
    emu = EmulatorProcess.start(tmp_path / "state", cluster=str(cluster))
    try:
        status, doc = call_as(ALICE, emu.port, "POST", "/v1/allocations", {"name": "c7", "agents": AGENTS})
        assert status == 201 and doc["id"] == "c7", doc
        status, doc = call_as(BOB, emu.port, "DELETE", "/v1/allocations/c7")
        assert status == 403
        status, _ = call_as(ALICE, emu.port, "DELETE", "/v1/allocations/c7")
        assert status == 200
    finally:
        emu.stop()
