"""The health pass (allocation model): a failed IPU-Machine drains the host it is
mapped to, with a reason naming it; the host is resumed when every machine of it is Up; a node an
admin drained is never touched; V-IPU unreachable changes nothing. Fakes at the subprocess
boundary: `vipu-admin` answers `list agents`, Slurm's sinfo/scontrol keep node states."""

from __future__ import annotations

import contextlib
import json
import subprocess

import pytest

from slurm_ipu import config, errors
from slurm_ipu.hooks import health, restarts

from ..fake_slurm import FakeSlurm as SharedSlurm
from .conftest import write_conf


def FakeSlurm(nodes, jobs=None):  # noqa: N802 - the shared fake, made with this module's hosts
    return SharedSlurm(jobs, nodes=nodes)


@pytest.fixture
def site(tmp_path):
    path = write_conf(tmp_path, vipu={"model": "allocation"})
    (tmp_path / "state").mkdir()  # the install makes it (`make install`, `slurm-ipu setup`)
    return config.load(str(path), environ={})


@pytest.fixture
def agents(mocker):
    state = {f"ag{k}": "Up" for k in range(16)}
    state["partitions"], state["allocations"] = [], []

    def vipu(argv, **_):
        if "list" in argv and ("partitions" in argv or "allocations" in argv):
            return subprocess.CompletedProcess(argv, 0, json.dumps(state[argv[argv.index("list") + 1]]), "")
        if "list" in argv and "agents" in argv:
            if state.get("unreachable"):
                return subprocess.CompletedProcess(argv, 1, "", "error: connection refused [UNAVAILABLE]\n")
            doc = {"agents": [{"id": a, **(s if isinstance(s, dict) else {"status": s})}  # dict: with ipus_in_error
                              for a, s in state.items() if a.startswith("ag")]}
            return subprocess.CompletedProcess(argv, 0, json.dumps(doc), "")
        return subprocess.CompletedProcess(argv, 2, "", "unexpected\n")

    mocker.patch("slurm_ipu.vipu.client.run_command", side_effect=vipu)
    mocker.patch("slurm_ipu.vipu.client.time.sleep")
    return state


def one_pass(site, slurm, lines=None):
    return health.run(site, site.vipu_client(), slurm, out=(lines.append if lines is not None else lambda _: None))


def test_a_failed_machine_drains_its_host_and_its_return_resumes_it(site, agents):
    slurm = FakeSlurm(site.hosts)
    agents["ag5"] = "Down"  # 16 IPUs per host: node2 has ag4-ag7
    lines = []
    assert one_pass(site, slurm, lines) == 1
    assert slurm.nodes["node2"] == ["drained", "slurm-ipu: IPU-Machine ag5 down"]
    assert all(slurm.nodes[n][0] == "idle" for n in ("node1", "node3", "node4"))
    assert lines == ["health: drain node2: slurm-ipu: IPU-Machine ag5 down"]
    assert one_pass(site, slurm) == 0  # nothing new: no Slurm update at all
    assert len(slurm.updates) == 1
    agents["ag5"] = "Up"
    assert one_pass(site, slurm) == 1 and slurm.nodes["node2"] == ["idle", "none"]
    assert json.loads(health.record_path(site.state_dir).read_text()) == {}


def test_a_node_an_admin_drained_is_never_drained_over_nor_resumed(site, agents):
    slurm = FakeSlurm(site.hosts)
    slurm.nodes["node1"] = ["drained", "bad DIMM (admin)"]
    agents["ag0"] = "Down"
    assert one_pass(site, slurm) == 0 and slurm.updates == []
    agents["ag0"] = "Up"
    assert one_pass(site, slurm) == 0 and slurm.nodes["node1"] == ["drained", "bad DIMM (admin)"]


def test_a_node_whose_drain_an_admin_took_over_is_theirs(site, agents):
    slurm = FakeSlurm(site.hosts)
    agents["ag8"] = "Down"
    one_pass(site, slurm)
    slurm.nodes["node3"] = ["drained", "RMA: replace the IPU-Machine"]  # the admin's reason now
    agents["ag8"] = "Up"
    assert one_pass(site, slurm) == 0 and slurm.nodes["node3"][1] == "RMA: replace the IPU-Machine"


def test_the_reason_follows_what_failed(site, agents):
    slurm = FakeSlurm(site.hosts)
    agents["ag12"] = "Down"
    one_pass(site, slurm)
    agents["ag13"] = "Error"
    one_pass(site, slurm)
    assert slurm.nodes["node4"][1] == "slurm-ipu: IPU-Machine ag12 down, ag13 error"
    agents["ag12"] = agents["ag13"] = "Up"
    one_pass(site, slurm)
    assert slurm.nodes["node4"] == ["idle", "none"]


def test_v_ipu_unreachable_changes_nothing(site, agents):
    slurm = FakeSlurm(site.hosts)
    agents["ag5"] = "Down"
    one_pass(site, slurm)
    agents["unreachable"] = True
    with pytest.raises(errors.VipuError):
        one_pass(site, slurm)
    assert slurm.nodes["node2"][0] == "drained" and len(slurm.updates) == 1


def test_the_partition_model_s_pool_shrinks_by_a_failed_machine_s_ipus_until_it_is_back(tmp_path, agents):
    """No host maps to a machine there: a licence-only reservation per failed machine holds its
    IPUs out of the pool Slurm schedules from, named after it; no node is drained."""
    (tmp_path / "state").mkdir()
    site = config.load(str(write_conf(tmp_path)), environ={})
    slurm = FakeSlurm(site.hosts)
    agents["ag0"] = "Down"
    lines = []
    assert one_pass(site, slurm, lines) == 1
    assert slurm.reservations == {"maint": "(null)", "slurm-ipu-maint": "ipu:2", "slurm-ipu-ag0": "ipu:4"}
    assert lines == ["health: reserve 4 IPU licence(s) as slurm-ipu-ag0: IPU-Machine ag0 is not Up"]
    assert all(state == "idle" for state, _ in slurm.nodes.values())
    assert one_pass(site, slurm) == 0  # held already: nothing to do
    agents["ag0"] = "Up"
    assert one_pass(site, slurm) == 1 and slurm.reservations == {"maint": "(null)", "slurm-ipu-maint": "ipu:2"}


def on(*agents: str) -> list[dict]:
    return [{"id": 0, "agent": a} for a in agents]


def test_a_running_batch_job_on_a_failed_machine_is_requeued_and_an_srun_job_told_and_cancelled(tmp_path, agents):
    """Its epilog removes the partition; the reservation keeps it off the machine."""
    (tmp_path / "state").mkdir()
    site = config.load(str(write_conf(tmp_path)), environ={})
    slurm = FakeSlurm(site.hosts, jobs={7: ["RUNNING", True], 8: ["RUNNING", False], 9: ["RUNNING", True],
                                        10: ["PENDING", True]})
    agents["partitions"] = [{"partition": {"id": f"slurm_{j}", "spec": {"size": 4, "ipus": on(a)}}}
                            for j, a in ((7, "ag0"), (8, "ag0"), (9, "ag5"), (10, "ag0"))]
    agents["ag0"] = "Down"
    lines = []
    one_pass(site, slurm, lines)
    assert [slurm.queue[j].state for j in (7, 8, 9)] == ["PENDING", "CANCELLED", "RUNNING"]
    assert slurm.comments[7] == ("slurm-ipu: job 7: IPU-Machine ag0 failed under its V-IPU partition; requeued, "
                                 "it will not start on that machine again")
    assert [text for _, text, _ in slurm.told] == ["slurm-ipu: job 8: IPU-Machine ag0 failed under its V-IPU "
                                                   "partition: the job is cancelled; submit it again"]
    assert "health: job 7: IPU-Machine ag0 failed under its V-IPU partition; requeued" in lines
    assert 10 not in slurm.comments  # pending already (requeued by an earlier pass): left alone
    assert restarts.count(site.state_dir, 7) == 1  # the hardware's restart: its prolog does not count it


def test_jobs_waiting_for_a_failed_machine_s_ipus_are_told_which_and_the_line_goes_when_it_is_back(tmp_path, agents):
    """Slurm's Reason says only `Licenses`: the pass tells each pending IPU job waiting for licences
    which machine holds its IPUs out, in AdminComment (scontrol show job), and clears that line
    when the machine is back; the prolog's reasons and jobs waiting for other reasons are left."""
    (tmp_path / "state").mkdir()
    site = config.load(str(write_conf(tmp_path)), environ={})
    slurm = FakeSlurm(site.hosts, jobs={5: ["PENDING", True, "Licenses", "gres:ipu:16"],
                                        6: ["PENDING", True, "Licenses", "gres:ipu:4"],
                                        7: ["PENDING", True, "Priority", "gres:ipu:4"],
                                        8: ["PENDING", True, "Licenses", ""],  # another licence
                                        9: ["PENDING", True, "Licenses", "gres:ipu:1"]})
    slurm.queue[6].comment = "slurm-ipu: job 6: V-IPU partition slurm_6 (4 IPUs) not created: ...; requeued"
    slurm.queue[9].comment = "slurm-ipu:partition=slurm_9,ipus=1"  # requeued by the pass: its last partition
    agents["ag0"] = "Down"
    one_pass(site, slurm)
    told = ("slurm-ipu: waiting for IPUs: IPU-Machine ag0 not Up: 4 IPUs held out of Slurm's pool until back "
            "(scontrol show reservation slurm-ipu-ag0)")
    assert slurm.comments[5] == told and slurm.comments[6].startswith("slurm-ipu: job 6: V-IPU")
    assert slurm.comments[9] == told
    assert 7 not in slurm.comments and 8 not in slurm.comments
    before = len(slurm.updates)
    one_pass(site, slurm)
    assert len(slurm.updates) == before  # nothing changed: no scontrol
    agents["ag0"] = "Up"
    slurm.queue[5].state = "RUNNING"  # it started as the reservation went
    one_pass(site, slurm)
    assert slurm.queue[5].comment == "" and slurm.comments[6].startswith("slurm-ipu: job 6: V-IPU")


def test_an_ipu_in_error_requeues_the_partition_on_it_and_leaves_those_on_the_machine_s_others(tmp_path, agents):
    """V-IPU places new 1- and 2-IPU partitions on a machine's IPUs that still work: requeuing every
    partition of the machine would restart such jobs at every pass. Slurm's pool still loses the
    whole machine (partitions of 4 IPUs or more take whole machines)."""
    (tmp_path / "state").mkdir()
    site = config.load(str(write_conf(tmp_path)), environ={})
    slurm = FakeSlurm(site.hosts, jobs={7: ["RUNNING", True], 8: ["RUNNING", True]})
    agents["partitions"] = [{"partition": {"id": f"slurm_{j}", "spec": {"size": len(ks), "ipus": [
        {"id": 8 + k, "agent": "ag2", "ipu_index_in_agent": k} for k in ks]}}} for j, ks in ((7, (2, 3)), (8, (0, 1)))]
    agents["ag2"] = {"status": "Error", "ipus_in_error": [2]}
    one_pass(site, slurm)
    assert (slurm.queue[7].state, slurm.queue[8].state) == ("PENDING", "RUNNING")
    assert slurm.reservations["slurm-ipu-ag2"] == "ipu:4"  # the whole machine: see health.run


def test_the_allocation_model_s_job_on_a_failed_machine_is_requeued_after_its_host_is_drained(site, agents):
    slurm = FakeSlurm(site.hosts, jobs={42: ["RUNNING", True]})
    agents["allocations"] = [{"id": "c42", "agents": ["ag4", "ag5", "ag6", "ag7"]}, {"id": "default", "agents": []}]
    agents["ag6"] = "Down"
    one_pass(site, slurm)
    assert slurm.nodes["node2"][0] == "drained" and slurm.queue[42].state == "PENDING"
    assert [u[1:3] for u in slurm.updates] == [["update", "NodeName=node2"], ["update", "JobId=42"],
                                               ["requeue", "42"]]  # the drain first, then the job


class DiesMidPass(SharedSlurm):
    """slurmctld killed in the middle of a pass: every `scontrol update` after the first
    `allowed` ones fails (scontrol's own error), until revived."""

    def __init__(self, nodes, jobs=None, allowed=1):
        super().__init__(jobs, nodes=nodes)
        self.allowed = allowed

    def _answer(self, argv, **kw):
        if argv[0].endswith("scontrol") and argv[1:2] == ["update"]:
            if self.allowed <= 0:
                return subprocess.CompletedProcess(argv, 1, "", "slurm_update error: Unable to contact slurm "
                                                   "controller (connect failure)\n")
            self.allowed -= 1
        return super()._answer(argv, **kw)


def test_a_pass_killed_between_its_drains_leaves_none_once_the_machines_are_back(site, agents):
    """The pass drained node2, then slurmctld died before node3 (or the service was SIGKILLed
    there): the next pass finishes what it meant, and once every machine is Up no drain of ours
    is left, recorded or not; an admin's drain (another reason) is never touched."""
    slurm = DiesMidPass(site.hosts, allowed=1)
    slurm.nodes["node4"] = ["drained", "bad DIMM (admin)"]
    agents["ag5"] = agents["ag9"] = agents["ag13"] = "Down"    # node2, node3, node4
    with pytest.raises(errors.SlurmError):
        one_pass(site, slurm)
    assert slurm.nodes["node2"][0] == "drained" and slurm.nodes["node3"][0] == "idle"
    # what the pass was about to do was written first
    assert set(health.drained_nodes(site.state_dir)) == {"node2", "node3"}
    slurm.allowed = 99                                           # slurmctld back
    one_pass(site, slurm)
    assert slurm.nodes["node3"] == ["drained", "slurm-ipu: IPU-Machine ag9 down"]
    agents["ag5"] = agents["ag9"] = agents["ag13"] = "Up"
    one_pass(site, slurm)
    assert [slurm.nodes[n] for n in ("node2", "node3")] == [["idle", "none"]] * 2
    assert slurm.nodes["node4"] == ["drained", "bad DIMM (admin)"]
    assert health.drained_nodes(site.state_dir) == {}


def test_a_drain_of_ours_the_record_does_not_know_is_lifted_when_its_machine_is_back(site, agents):
    """A pass SIGKILLed between its drain and its record (as before records were written first),
    or a record lost: Slurm still shows our reason, and that makes the drain ours."""
    slurm = FakeSlurm(site.hosts)
    slurm.nodes["node2"] = ["drained", "slurm-ipu: IPU-Machine ag5 down"]
    slurm.nodes["node3"] = ["drained", "slurm-ipu maintenance by hand"]  # an admin's words, not the pass's
    health.record_path(site.state_dir).unlink(missing_ok=True)
    lines: list[str] = []
    assert one_pass(site, slurm, lines) == 1
    assert slurm.nodes["node2"] == ["idle", "none"] and lines == [
        "health: resume node2: its IPU-Machines are all Up again"]
    assert slurm.nodes["node3"] == ["drained", "slurm-ipu maintenance by hand"]


def test_waiting_lines_a_killed_pass_left_are_cleared_by_the_next(tmp_path, agents):
    """The machine came back and its reservation went, then slurmctld died before the waiting
    lines were cleared (or the service was killed there): the next pass, and a restarted
    service's first, clears them, though no machine is down and no reservation is left."""
    (tmp_path / "state").mkdir()
    site = config.load(str(write_conf(tmp_path)), environ={})
    jobs = {j: ["PENDING", True, "Licenses", "gres:ipu:4"] for j in range(20, 30)}
    slurm = DiesMidPass(site.hosts, jobs=jobs, allowed=99)
    agents["ag3"] = "Down"
    one_pass(site, slurm)
    assert all(slurm.comments[j].startswith(health.WAITING) for j in jobs)
    agents["ag3"] = "Up"
    slurm.allowed = 0  # the reservation's delete is no `update`: it goes; every line's clear fails
    with contextlib.suppress(errors.SlurmError):
        one_pass(site, slurm)
    assert "slurm-ipu-ag3" not in slurm.reservations
    assert all(slurm.comments[j].startswith(health.WAITING) for j in jobs)
    slurm.allowed = 99
    one_pass(site, slurm)
    assert all(slurm.queue[j].comment == "" for j in jobs)
    assert not health.waiting_marker(site.state_dir).exists()
    before = len(slurm.updates)
    one_pass(site, slurm)                       # nothing down, nothing left: no squeue, no update
    assert len(slurm.updates) == before
