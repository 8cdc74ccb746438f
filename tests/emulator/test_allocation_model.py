"""The allocation-per-job model's hooks against the real emulator: the prolog
makes `c<jobid>` of the IPU-Machines mapped to the job's hosts, granted to its user; the user makes
reconfigurable partitions in it (Graphcore's scripts); the epilog removes them and it; a requeue
adopts or replaces it; someone else's allocation under the name is never taken; reap removes an
orphan with its partitions."""

from __future__ import annotations

import json
import subprocess

import pytest

from slurm_ipu import config
from slurm_ipu.hooks import epilog, jobenv, prolog, reap
from slurm_ipu.hooks.ledger import Ledger
from slurm_ipu.vipu import VipuClient

from ..fake_slurm import FakeSlurm
from .conftest import VIPU
from .test_identity import call_as, needs_root

ALICE = 4201


@pytest.fixture
def site(tmp_path, emu):
    path = tmp_path / "site.yaml"
    path.write_text(json.dumps({
        "version": 1, "cluster": "c", "state_dir": str(tmp_path / "state"),
        "vipu": {"host": "127.0.0.1", "port": emu.port, "model": "allocation", "emulator": True, "retries": 1},
        "pod": {"ipus": 64, "hosts": "node[1-4]", "ipus_per_host": 16}, "prolog": {"deadline": 3}}))
    cfg = config.load(str(path), environ={})
    client = VipuClient(command=VIPU, admin_command=VIPU, host="127.0.0.1", port=emu.port, timeout=10, retries=1,
                        backoff=0.05, emulator_flags=True)
    return cfg, client


def job(job_id=42, nodes="node[1-2]", uid=ALICE, restart=0, ipus=32, **more):
    return jobenv.from_env({"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": str(uid), "SLURM_JOB_NODELIST": nodes,
                            "SLURM_JOB_LICENSES": f"ipu:{ipus}", "SLURM_JOB_RESTART_COUNT": str(restart),
                            "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", **more})


def test_the_job_gets_its_hosts_machines_makes_partitions_in_them_and_the_epilog_removes_all(site, api, vipu):
    cfg, client = site
    assert prolog.run(job(), cfg, client, FakeSlurm()) == 0
    allocs = {a["id"]: a for a in api.allocations()}
    assert allocs["c42"]["agents"] == [f"ag{i}" for i in range(8)]  # node1: ag0-3, node2: ag4-7
    assert allocs["c42"]["grants"] == [0, ALICE]
    # What Graphcore's scripts do in the job (as root here; as the user below).
    vipu("create", "partition", "p42", "--allocation", "c42", "--size", "16", "--reconfigurable", check=True)
    vipu("create", "partition", "p42b", "--allocation", "c42", "--size", "16", check=True)
    assert epilog.run(job(), cfg, client) == 0
    assert [a["id"] for a in api.allocations()] == ["default"]
    assert api.list_partitions() == []
    with open(f"{cfg.state_dir}/hooks.log") as log:
        assert "job 42: allocation c42 removed" in log.read()


@needs_root
def test_only_the_job_s_user_makes_partitions_in_it(site, emu):
    cfg, client = site
    assert prolog.run(job(), cfg, client, FakeSlurm()) == 0
    create = {"name": "p42", "size": 32, "allocation": "c42", "reconfigurable": True}
    status, doc = call_as(ALICE + 1, emu.port, "POST", "/v1/partitions", create)
    assert status == 403, doc
    status, doc = call_as(ALICE, emu.port, "POST", "/v1/partitions", create)
    assert status == 201 and {i["agent"] for i in doc["partition"]["spec"]["ipus"]} == {f"ag{i}" for i in range(8)}
    assert epilog.run(job(), cfg, client) == 0


def test_a_requeue_adopts_its_allocation_or_replaces_it_on_other_hosts(site, api):
    cfg, client = site
    assert prolog.run(job(), cfg, client, FakeSlurm()) == 0
    assert prolog.run(job(restart=1), cfg, client, FakeSlurm()) == 0  # same hosts: adopted
    assert prolog.run(job(nodes="node[3-4]", restart=2), cfg, client, FakeSlurm()) == 0
    allocs = {a["id"]: a["agents"] for a in api.allocations()}
    assert allocs["c42"] == [f"ag{i}" for i in range(8, 16)]


def test_someone_else_s_allocation_under_the_job_s_name_holds_the_job(site, api):
    cfg, client = site
    api.create_allocation("c42", ["ag0", "ag1"])  # an admin's, by hand
    slurm = FakeSlurm()
    assert prolog.run(job(), cfg, client, slurm) == 1
    assert 42 in slurm.held and "allocation c42 already exists and slurm-ipu did not create it" in slurm.comments[42]
    assert "vipu-admin remove allocation c42" in slurm.comments[42]
    assert epilog.run(job(), cfg, client) == 0  # not ours: left alone
    assert "c42" in {a["id"] for a in api.allocations()}


def test_machines_still_held_by_an_ended_job_fail_the_start_for_a_requeue(site, api):
    cfg, client = site
    api.create_allocation("c7", ["ag0", "ag1", "ag2", "ag3"])  # someone's, on node1's machines
    slurm = FakeSlurm()
    assert prolog.run(job(), cfg, client, slurm) == 1
    assert 42 not in slurm.held and "requeued" in slurm.comments[42]
    assert {a["id"] for a in api.allocations()} == {"default", "c7"}  # nothing half-made left
    assert Ledger(cfg.state_dir).get("c42") is None


def test_reap_removes_an_orphan_allocation_with_its_partitions(site, api, vipu):
    cfg, client = site
    assert prolog.run(job(7, "node1"), cfg, client, FakeSlurm()) == 0
    assert prolog.run(job(8, "node2"), cfg, client, FakeSlurm()) == 0
    vipu("create", "partition", "p7", "--allocation", "c7", "--size", "16", check=True)
    lines = []
    assert reap.run(cfg, client, FakeSlurm({8: "RUNNING"}), out=lines.append) == 0
    assert lines == ["reap: removed c7 (job 7 gone)"]
    assert {a["id"] for a in api.allocations()} == {"default", "c8"}
    assert api.list_partitions() == []


def test_a_host_in_no_pod_requeues_the_job_with_the_reason(site, api):
    cfg, client = site
    slurm = FakeSlurm()
    assert prolog.run(job(nodes="node9"), cfg, client, slurm) == 1
    assert "host node9 is in no Pod of the site description" in slurm.comments[42] and 42 not in slurm.held
    assert {a["id"] for a in api.allocations()} == {"default"}


def with_default_partition(tmp_path):
    """The site fixture's description with allocation.partition on."""
    path = tmp_path / "site.yaml"
    doc = json.loads(path.read_text())
    doc["allocation"] = {"partition": True}
    path.write_text(json.dumps(doc))
    return config.load(str(path), environ={})


def test_allocation_partition_makes_the_whole_allocation_the_tasks_partition(site, tmp_path, api):
    _, client = site
    cfg = with_default_partition(tmp_path)
    assert prolog.run(job(), cfg, client, FakeSlurm()) == 0
    assert prolog.run(job(restart=1), cfg, client, FakeSlurm()) == 0  # a requeue adopts both
    (part,) = [p["partition"] for p in api.list_partitions()]
    assert (part["id"], part["spec"]["allocation"], part["spec"]["size"], part["spec"]["owner_uid"]) == \
        ("slurm_42", "c42", 32, ALICE)
    assert sorted(part["spec"]["hosts"]) == ["node1", "node2"]
    assert epilog.run(job(), cfg, client) == 0
    assert api.list_partitions() == [] and [a["id"] for a in api.allocations()] == ["default"]


@pytest.mark.parametrize("het", [{"SLURM_HET_JOB_ID": "41", "SLURM_HET_JOB_OFFSET": "1"},
                                 {"SLURM_PACK_JOB_ID": "41", "SLURM_PACK_JOB_OFFSET": "1"}])
def test_a_heterogeneous_component_s_allocation_is_held_as_its_tasks_partition(site, api, het):
    """Each component of a heterogeneous job runs the hooks under its own job id (Slurm 22.05 says
    SLURM_PACK_JOB_ID, later releases SLURM_HET_JOB_ID too). srun tells a step's choice to one
    component's tasks only, so each component's allocation is its tasks' partition, as with
    allocation.partition, and the epilog removes both."""
    cfg, client = site
    assert not cfg.allocation.partition
    assert prolog.run(job(42, nodes="node2", ipus=16, **het), cfg, client, FakeSlurm()) == 0
    (part,) = [p["partition"] for p in api.list_partitions()]
    assert (part["id"], part["spec"]["allocation"], part["spec"]["size"], part["spec"]["owner_uid"]) == \
        ("slurm_42", "c42", 16, ALICE)
    assert epilog.run(job(42, nodes="node2", ipus=16, **het), cfg, client) == 0
    assert api.list_partitions() == [] and [a["id"] for a in api.allocations()] == ["default"]


@pytest.mark.parametrize("owner", [4202, ALICE])
def test_a_default_partition_someone_else_made_first_is_never_adopted(site, tmp_path, api, owner):
    """allocation.partition: a user who made `slurm_<next job>` first, in another allocation, or of
    another owner, used to have it adopted when its size matched; the victim then could not attach
    it. A controller that keeps no names (a real one, as far as the record shows) is modelled by
    creating it as an admin here, in another job's allocation, of another user or of the job's
    own: the prolog holds the job with the reason, and the partition stays for an admin to judge."""
    _, client = site
    cfg = with_default_partition(tmp_path)
    api.create_allocation("c9", ["ag12", "ag13"], [owner])
    client.create_partition("slurm_42", 8, allocation="c9", owner_uid=owner)
    slurm = FakeSlurm()
    assert prolog.run(job(), cfg, client, slurm) == 1
    said = slurm.comments[42]
    assert 42 in slurm.held and "partition slurm_42 already exists" in said and "did not create it" in said, said
    part = client.get_partition("slurm_42")
    assert (part.allocation, part.owner_uid) == ("c9", owner)


def test_the_next_job_on_a_host_waits_out_the_last_one_s_queued_removal(site, api):
    """The storm's case: job 41's epilog only queued c41 (the slurm-ipu service removes it a moment
    later) when job 42 starts on the same host. The same machines are busy, not a bad request:
    the prolog works the queue off and makes c42, instead of cancelling the job."""
    from slurm_ipu.hooks.journal import Journal

    cfg, client = site
    assert prolog.run(job(41, "node1"), cfg, client, FakeSlurm()) == 0
    Journal(cfg.state_dir).add("c41", 41, "queued by the epilog")
    slurm = FakeSlurm()
    assert prolog.run(job(42, "node1"), cfg, client, slurm) == 0, slurm.comments
    assert {a["id"] for a in api.allocations()} == {"default", "c42"}


def test_a_controller_that_calls_busy_machines_a_bad_request_still_gets_the_job_waited_for(site, api, admin):
    """What a real V-IPU answers for machines in another allocation is not public: refused as
    INVALID_ARGUMENT while a job's allocation holds them, the job still waits, it is not cancelled."""
    from slurm_ipu.hooks.journal import Journal

    cfg, client = site
    assert prolog.run(job(41, "node1"), cfg, client, FakeSlurm()) == 0
    Journal(cfg.state_dir).add("c41", 41, "queued by the epilog")
    admin.faults(fail={"count": 1, "code": "INVALID_ARGUMENT", "op": "create_allocation"})
    slurm = FakeSlurm()
    assert prolog.run(job(42, "node1"), cfg, client, slurm) == 0, slurm.comments
    assert {a["id"] for a in api.allocations()} == {"default", "c42"} and 42 not in slurm.cancelled


# A job's user making partitions in its allocation as fast as they can while the epilog runs (issue
# 35, item 2): before, the epilog listed and removed the partitions, then found new ones in the way of
# the allocation's removal and left it, with its IPU-Machines, until the loop stopped. Each create is
# size 1, and the oldest goes once 16 are there, so the loop never runs out of room by itself.
CREATE_LOOP = """
import http.client, json, socket, sys, time
port, prefix, allocation = sys.argv[1:4]
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect("\\0" + prefix + port)
conn, made, end = Unix("localhost", timeout=10), 0, time.monotonic() + 60
def call(method, path, body=None):
    conn.request(method, path, body=json.dumps(body) if body else None, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read() or b"{}")
for k in range(100000):
    if time.monotonic() > end:
        print("still creating at the deadline")
        break
    status, doc = call("POST", "/v1/partitions", {"name": f"z{k}", "size": 1, "allocation": allocation})
    if status == 201:
        made += 1
        if k >= 16:
            call("DELETE", f"/v1/partitions/z{k - 16}")
    elif made:
        print(f"made {made}, then {status} {doc['error']['code']}: {doc['error']['message']}")
        break
"""


@needs_root
def test_a_user_creating_partitions_as_the_job_ends_keeps_nothing(site, emu, api):
    from slurm_ipu.emulator.api import SOCKET_PREFIX

    from ..waiting import wait_for
    from .test_identity import SETPRIV

    cfg, client = site
    assert prolog.run(job(), cfg, client, FakeSlurm()) == 0
    argv = [SETPRIV, f"--reuid={ALICE}", f"--regid={ALICE}", "--clear-groups", "/usr/bin/python3", "-I", "-c",
            CREATE_LOOP, str(emu.port), SOCKET_PREFIX, "c42"]
    loop = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        wait_for("the user's loop to make partitions in c42", lambda: len(api.list_partitions("c42")) >= 4, timeout=30)
        assert epilog.run(job(), cfg, client) == 0
        out, err = loop.communicate(timeout=60)
    finally:
        loop.kill()
        loop.wait(10)
    assert [a["id"] for a in api.allocations()] == ["default"] and api.list_partitions() == []
    assert "then 403 PERMISSION_DENIED: uid 4201 may not create partitions in allocation c42" in out, (out, err)
    with open(f"{cfg.state_dir}/hooks.log") as log:
        assert "job 42: allocation c42 removed" in log.read()
    status, doc = call_as(ALICE, emu.port, "POST", "/v1/attach", {"partition": "z20", "gcd": 0, "host": "node1"})
    assert status == 404 and doc["error"]["code"] == "NOT_FOUND"
