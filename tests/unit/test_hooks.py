"""Controller-hook logic (prolog, epilog, reap) with a fake `vipu` at the subprocess boundary
and a fake Slurm backend: what the job, the user and the admin would see."""

from __future__ import annotations

import os
import time

import pytest

from slurm_ipu import config
from slurm_ipu.errors import ConfigError, SlurmError
from slurm_ipu.hooks import epilog, jobenv, prolog, reap, removal, restarts
from slurm_ipu.hooks.journal import Journal
from slurm_ipu.hooks.ledger import Ledger

from ..fake_slurm import FakeSlurm
from .conftest import write_conf


def env(**over):
    base = {"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "1000", "SLURM_JOB_NODELIST": "node[1-2]",
            "SLURM_JOB_LICENSES": "ipu:16", "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}
    base.update(over)
    return jobenv.from_env(base)


def hooks_log(cfg) -> str:
    path = f"{cfg.state_dir}/hooks.log"
    try:
        return open(path).read()
    except FileNotFoundError:
        return ""


# --- job environment ----------------------------------------------------------------------

@pytest.mark.parametrize("text,count", [
    ("ipu:8", 8), ("matlab:1,ipu:8", 8), ("ipu*4", 4), ("", 0), ("matlab:2", 0), ("ipu", 1), (";ipu:2;;x:1", 2),
    ("ipu:1,ipu:63", 64), ("ipu:4294967360", 64), ("ipu@db:4,ipu:2", 2), ("ipu: 4", 4),  # as slurmctld counts
])
def test_licence_count(text, count):
    assert jobenv.licence_count(text) == count


@pytest.mark.parametrize("over,words", [
    ({"SLURM_JOB_ID": ""}, "SLURM_JOB_ID is not set"),
    ({"SLURM_JOB_ID": "x1"}, "SLURM_JOB_ID='x1' is not a number"),
    ({"SLURM_JOB_LICENSES": "ipu:lots"}, "is not a licence list slurmctld accepts"),
    ({"SPANK_IPU_GCDS": "two"}, "--ipu-gcds='two'"),
    ({"SPANK_IPU_ILDS": "0"}, "--ipu-ilds='0'"),
    ({"SLURM_JOB_NODELIST": "node[1-"}, "unbalanced"),
])
def test_bad_hook_environment(over, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[")):
        env(**over)


@pytest.mark.parametrize("over", [{"SPANK_IPU_GCDS": "2 x"}, {"SLURM_JOB_LICENSES": "ipu:lots"},
                                  {"SPANK_IPU_ILDS": "0"}])
def test_a_refused_environment_holds_the_job_at_once_with_its_reason(cfg, over):
    """The same environment comes back on every requeue: held on the first attempt, not
    requeued past prolog.max_attempts."""
    raw = {"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "1000", "SLURM_JOB_NODELIST": "node1",
           "SLURM_JOB_LICENSES": "ipu:4", "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", **over}
    with pytest.raises(ConfigError) as refused:
        jobenv.from_env(raw)
    slurm = FakeSlurm()
    prolog.refuse_env(raw, cfg, slurm, refused.value)
    assert slurm.held == {42}
    assert slurm.comments[42].startswith(f"slurm-ipu: job 42: prolog refused its environment: {refused.value}; held:")
    assert f"prolog refused its environment: {refused.value}; held" in hooks_log(cfg)


def test_a_refused_environment_without_a_job_id_holds_nothing(cfg):
    slurm = FakeSlurm()
    prolog.refuse_env({"SLURM_JOB_ID": "4; x"}, cfg, slurm, ConfigError("SLURM_JOB_ID='4; x' is not a number"))
    assert (slurm.held, slurm.comments) == (set(), {})
    assert "job 4; x: prolog refused its environment" in hooks_log(cfg)


# --- prolog -------------------------------------------------------------------------------

def test_job_without_ipus_makes_no_vipu_call(fake, cfg):
    assert prolog.run(env(SLURM_JOB_LICENSES=""), cfg, cfg.vipu_client(), FakeSlurm()) == 0
    assert fake.calls == []


def test_prolog_creates_the_job_partition_sized_by_the_licence(fake, cfg):
    ctx = env(SPANK_IPU_GCDS="2", SPANK_IPU_RECONFIGURABLE="1")
    assert prolog.run(ctx, cfg, cfg.vipu_client(), FakeSlurm()) == 0
    part = fake.partitions["slurm_42"]
    assert (part["size"], part["gcds"]) == (16, 2)
    assert "--reconfigurable" in part["argv"]
    assert "partition slurm_42 ACTIVE, 16 IPUs, 2 GCD(s), hosts node1,node2" in hooks_log(cfg)


def test_prolog_passes_hosts_and_owner_to_the_emulator(fake, tmp_path):
    cfg = config.load(str(write_conf(tmp_path, vipu={"emulator": True})), environ={})
    prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm())
    argv = fake.partitions["slurm_42"]["argv"]
    assert argv[argv.index("--hosts") + 1] == "node1,node2" and argv[argv.index("--owner-uid") + 1] == "1000"


def test_prolog_is_idempotent(fake, cfg):
    for _ in range(2):  # a re-run after a crash, or a requeue, finds its own partition
        assert prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm()) == 0
    assert list(fake.partitions) == ["slurm_42"]


def test_prolog_failure_leaves_nothing_and_says_why(fake, cfg):
    fake.end_state = "ERROR"
    slurm = FakeSlurm()
    assert prolog.run(env(), cfg, cfg.vipu_client(), slurm) == 1
    assert fake.partitions == {}
    assert "V-IPU partition slurm_42 (16 IPUs) not created: partition slurm_42 went to ERROR" in slurm.comments[42]
    assert slurm.held == set()
    assert "not created" in hooks_log(cfg)


def test_a_one_ipu_job_s_failure_says_1_ipu(fake, cfg):
    fake.end_state = "ERROR"
    slurm = FakeSlurm()
    assert prolog.run(env(SLURM_JOB_LICENSES="ipu:1", SLURM_JOB_NODELIST="node1"), cfg, cfg.vipu_client(), slurm) == 1
    assert "V-IPU partition slurm_42 (1 IPU) not created" in slurm.comments[42]


def test_prolog_holds_a_job_that_keeps_failing(fake, cfg):
    fake.failures = [("error: V-IPU server unavailable [UNAVAILABLE]", 1)] * 2  # every retry of this attempt
    slurm = FakeSlurm()
    assert prolog.run(env(SLURM_JOB_RESTART_COUNT="2"), cfg, cfg.vipu_client(), slurm) == 1
    assert slurm.held == {42} and "held after 3 attempts: an admin must fix V-IPU, then `scontrol release 42`" \
        in slurm.comments[42]


def test_prolog_refuses_a_bad_shape_before_calling_vipu(fake, cfg):
    slurm = FakeSlurm()
    assert prolog.run(env(SPANK_IPU_GCDS="32"), cfg, cfg.vipu_client(), slurm) == 0  # cancelled: no requeue
    assert "--num-gcds 32 for a partition of 16 IPUs" in slurm.comments[42]
    assert fake.calls == []  # no create, and no removal of a partition that is not ours
    # It cannot heal: the job ends at once instead of going round the requeue loop.
    assert slurm.cancelled == {42} and "the job is cancelled: the request cannot be met" in slurm.comments[42]
    # srun/salloc print the notice: the job id, the reason, where it stays; sent before the cancel
    (job, text, after_cancel), = slurm.told
    assert job == 42 and not after_cancel
    assert text.startswith("slurm-ipu: job 42: V-IPU partition slurm_42 (16 IPUs) not created: ")
    assert "--num-gcds 32" in text and text.endswith("(the reason stays in `scontrol show job 42`)")


def test_a_notice_slurm_refuses_is_no_reason_to_lose_the_comment(fake, cfg):
    class RefusesNotices(FakeSlurm):
        def notify(self, job_id, text):
            raise SlurmError("`scontrol notify 42` failed: Job not running")

    slurm = RefusesNotices()
    assert prolog.run(env(SPANK_IPU_GCDS="32"), cfg, cfg.vipu_client(), slurm) == 0
    assert slurm.cancelled == {42} and "--num-gcds 32" in slurm.comments[42]
    assert "could not record" not in hooks_log(cfg)


def test_prolog_deadline_bounds_a_slow_partition(fake, tmp_path):
    cfg = config.load(str(write_conf(tmp_path, prolog={"deadline": 0.3})), environ={})
    fake.pending_polls = 10**9  # never ACTIVE
    slurm = FakeSlurm()
    assert prolog.run(env(), cfg, cfg.vipu_client(), slurm) == 1
    assert "still PENDING at the deadline" in slurm.comments[42]
    assert fake.partitions == {}


def component(**over):
    """A heterogeneous job's second component as Slurm runs its hooks: its own id, no licence."""
    return env(SLURM_JOB_ID="43", SLURM_JOB_LICENSES="", SLURM_HET_JOB_ID="42", SLURM_HET_JOB_OFFSET="1", **over)


def test_a_later_component_s_partition_is_sized_from_its_gres_with_one_query(fake, cfg):
    slurm = FakeSlurm(gres={43: 8})
    assert prolog.run(component(), cfg, cfg.vipu_client(), slurm) == 0
    assert fake.partitions["slurm_43"]["size"] == 16 and slurm.queries == [43]  # 8 per node on node[1-2]
    assert epilog.run(component(SLURM_SCRIPT_CONTEXT="epilog_slurmctld"), cfg, cfg.vipu_client()) == 0
    assert fake.partitions == {} and Ledger(cfg.state_dir).get("slurm_43") is None


def test_a_later_component_without_ipus_makes_no_vipu_call(fake, cfg):
    slurm = FakeSlurm()
    assert prolog.run(component(), cfg, cfg.vipu_client(), slurm) == 0
    assert epilog.run(component(SLURM_SCRIPT_CONTEXT="epilog_slurmctld"), cfg, cfg.vipu_client()) == 0
    assert fake.calls == [] and slurm.queries == [43]


def test_a_later_component_whose_ipus_slurm_cannot_say_does_not_start(fake, cfg):
    slurm = FakeSlurm(broken=True)
    assert prolog.run(component(), cfg, cfg.vipu_client(), slurm) == 1
    assert fake.calls == []
    assert "job 43: V-IPU partition slurm_43 not created: its IPUs could not be read from Slurm: `squeue" \
        in hooks_log(cfg)


def test_a_first_component_is_sized_by_its_licence_with_no_query(fake, cfg):
    slurm = FakeSlurm(gres={42: 8})
    assert prolog.run(env(SLURM_HET_JOB_ID="42", SLURM_HET_JOB_OFFSET="0"), cfg, cfg.vipu_client(), slurm) == 0
    assert fake.partitions["slurm_42"]["size"] == 16 and slurm.queries == []


# --- epilog -------------------------------------------------------------------------------

def test_epilog_removes_and_is_idempotent(fake, cfg):
    prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm())
    for _ in range(2):
        assert epilog.run(env(SLURM_SCRIPT_CONTEXT="epilog_slurmctld"), cfg, cfg.vipu_client()) == 0
    assert fake.partitions == {}
    assert "partition slurm_42 removed" in hooks_log(cfg) and "no partition of slurm-ipu's to remove" in hooks_log(cfg)
    assert Ledger(cfg.state_dir).get("slurm_42") is None


def test_the_python_epilog_takes_a_job_s_end_as_the_hook_service_does(fake, cfg):
    """One semantics: the removal is journaled first and the one remover takes
    it; a prolog still holding the name (the job was cancelled while its partition was made) is
    waited for within epilog.deadline, then the partition goes and the journal is empty."""
    import threading

    prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm())
    held, release = threading.Event(), threading.Event()

    def prolog_still_running():
        with Ledger(cfg.state_dir).lock("slurm_42", time.monotonic() + 5):
            held.set()
            release.wait(5)

    holder = threading.Thread(target=prolog_still_running)
    holder.start()
    assert held.wait(5)
    seen = []

    def pause(seconds):  # the epilog's wait: the entry is queued meanwhile; the prolog ends
        seen.append([e["reason"] for e in Journal(cfg.state_dir).entries()])
        release.set()
        holder.join(5)

    assert epilog.run(env(SLURM_SCRIPT_CONTEXT="epilog_slurmctld"), cfg, cfg.vipu_client(), sleep=pause) == 0
    assert seen[0] == ["queued by the epilog"] and fake.partitions == {} and Journal(cfg.state_dir).names() == []
    assert "partition slurm_42 removed" in hooks_log(cfg)


def test_epilog_journals_when_vipu_is_down_and_still_succeeds(fake, cfg):
    prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm())
    fake.failures = [("error: V-IPU server unavailable [UNAVAILABLE]", 1)] * 2
    assert epilog.run(env(), cfg, cfg.vipu_client()) == 0
    assert [e["partition"] for e in Journal(cfg.state_dir).entries()] == ["slurm_42"]
    assert Ledger(cfg.state_dir).owns("slurm_42", 42)  # reap will need it


def test_epilog_of_a_job_without_ipus_does_nothing(fake, cfg):
    assert epilog.run(env(SLURM_JOB_LICENSES="x:1"), cfg, cfg.vipu_client()) == 0
    assert fake.calls == []


# --- reap ---------------------------------------------------------------------------------

@pytest.mark.parametrize("jobs,expected", [
    ({}, ["slurm_1", "slurm_2"]),
    ({1: "RUNNING", 2: "RUNNING"}, []),
    ({1: "PENDING", 2: "SUSPENDED"}, ["slurm_1"]),
    ({1: "COMPLETED", 2: "CANCELLED"}, ["slurm_1", "slurm_2"]),
])
def test_orphans(jobs, expected):
    names = ["slurm_1", "slurm_2", "slurm_x", "mine", "slurm_"]
    assert [n for n, _ in reap.orphans(names, jobs, "slurm_")] == expected


def test_reap_removes_orphans_keeps_live_and_settles_the_journal(fake, cfg):
    client = cfg.vipu_client()
    for job in (1, 2, 3):
        client.create_partition(f"slurm_{job}", 1)
        Ledger(cfg.state_dir).put(f"slurm_{job}", job_id=job)  # as the prolog records them
    journal = Journal(cfg.state_dir)
    journal.add("slurm_1", 1, "V-IPU down")
    journal.add("slurm_9", 9, "V-IPU down")  # already gone by hand
    for job in (1, 2):  # restarts a failed machine caused: job 1's is of a job Slurm no longer lists
        restarts.add(cfg.state_dir, job)
        os.utime(f"{cfg.state_dir}/hardware/{job}", (time.time() - 60,) * 2)
    lines = []
    assert reap.run(cfg, client, FakeSlurm({2: "RUNNING", 3: "PENDING"}), dry_run=True, out=lines.append) == 0
    assert lines == ["reap: would remove slurm_1 (job 1 gone)", "reap: would remove slurm_3 (job 3 pending)"]
    assert sorted(fake.partitions) == ["slurm_1", "slurm_2", "slurm_3"] and len(journal.entries()) == 2
    lines.clear()
    assert reap.run(cfg, client, FakeSlurm({2: "RUNNING", 3: "PENDING"}), out=lines.append) == 0
    assert sorted(fake.partitions) == ["slurm_2"]
    assert journal.entries() == []
    assert (restarts.count(cfg.state_dir, 1), restarts.count(cfg.state_dir, 2)) == (0, 1)


def test_reap_never_overlaps_another_remover_it_waits_for_it_or_says_so(fake, cfg):
    """An admin's reap while a Python epilog or another reap is the remover (remover.py) waits
    for it to finish, or says who holds the role; a dry run only reads and never waits."""
    import threading

    from slurm_ipu.hooks import remover

    fd = remover.take(cfg.state_dir, "epilog", 0)
    release = threading.Timer(0.3, remover.give_up, (fd,))  # the epilog finishes
    try:
        with pytest.raises(ConfigError, match=r"a Python epilog \(pid \d+\) removes for .*let it finish"):
            reap.run(cfg, cfg.vipu_client(), FakeSlurm(), wait=0)
        assert reap.run(cfg, cfg.vipu_client(), FakeSlurm(), dry_run=True, wait=0, out=lambda _: None) == 0
    except BaseException:
        remover.give_up(fd)
        raise
    release.start()
    assert reap.run(cfg, cfg.vipu_client(), FakeSlurm(), out=lambda _: None) == 0
    release.join()
    assert remover.holder(cfg.state_dir) is None


# --- trust: only what slurm-ipu created for the job -----------------

def test_a_partition_planted_under_the_jobs_name_is_refused_and_never_removed(fake, cfg):
    """A user pre-creates slurm_<next job id>: the victim is held for an admin, and neither the
    prolog, the epilog nor reap touches the squatter's partition."""
    fake.plant("slurm_42", 16, owner_uid=4242)
    slurm = FakeSlurm()
    assert prolog.run(env(), cfg, cfg.vipu_client(), slurm) == 1
    assert slurm.held == {42} and "slurm-ipu did not create it for this job" in slurm.comments[42]
    assert "an admin must remove it (vipu remove partition slurm_42)" in slurm.comments[42]
    assert epilog.run(env(), cfg, cfg.vipu_client()) == 0
    lines = []
    assert reap.run(cfg, cfg.vipu_client(), FakeSlurm(), out=lines.append) == 0
    assert "slurm_42" in fake.partitions and fake.partitions["slurm_42"]["owner_uid"] == 4242
    assert lines == ["reap: left alone slurm_42 (job 42 gone): slurm-ipu did not create it"]
    assert not [c for c in fake.calls if c[0] == "remove"]


def test_a_planted_partition_is_refused_even_after_an_attempt_of_ours(fake, cfg):
    """Our first attempt died before its create reached V-IPU (a record, no partition); the
    squatter's partition that appeared since is still not ours."""
    Ledger(cfg.state_dir).put("slurm_42", job_id=42)
    fake.plant("slurm_42", 16, owner_uid=4242)
    slurm = FakeSlurm()
    assert prolog.run(env(), cfg, cfg.vipu_client(), slurm) == 1 and slurm.held == {42}
    assert Ledger(cfg.state_dir).get("slurm_42") is None and "slurm_42" in fake.partitions


def test_a_requeued_job_on_other_nodes_gets_a_partition_for_its_new_nodes(fake, tmp_path):
    cfg = config.load(str(write_conf(tmp_path, vipu={"emulator": True})), environ={})
    assert prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm()) == 0
    fake.failures = [("error: V-IPU server unavailable [UNAVAILABLE]", 1)] * 2
    epilog.run(env(), cfg, cfg.vipu_client())  # V-IPU down: journaled, the partition stays
    slurm = FakeSlurm()
    assert prolog.run(env(SLURM_JOB_NODELIST="node[3-4]", SLURM_JOB_RESTART_COUNT="1"), cfg, cfg.vipu_client(),
                      slurm) == 0
    assert fake.partitions["slurm_42"]["hosts"] == ["node3", "node4"]
    # the first run's removal, worked off by the next prolog short of IPUs, leaves what the job now runs on
    assert removal.make_room(cfg, cfg.vipu_client(), "slurm_44", time.monotonic() + 5) == 1
    assert fake.partitions["slurm_42"]["hosts"] == ["node3", "node4"] and Journal(cfg.state_dir).entries() == []
    assert "job 42: partition slurm_42 kept: the job's next attempt runs on it" in hooks_log(cfg)
    # the stale reason of the failed run gives way to the partition's name (hooks/notes.py)
    assert slurm.comments[42] == "slurm-ipu:partition=slurm_42,ipus=16"


def test_a_rerun_on_the_same_nodes_adopts_its_own_partition_reset(fake, tmp_path):
    """A restarted job keeps its earlier attempt's partition, reset first (clean IPUs and links
    after a killed attempt), never removed and made again."""
    cfg = config.load(str(write_conf(tmp_path, vipu={"emulator": True})), environ={})
    assert prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm()) == 0
    assert prolog.run(env(SLURM_JOB_RESTART_COUNT="1"), cfg, cfg.vipu_client(), FakeSlurm()) == 0
    verbs = [c[0] for c in fake.calls]
    assert verbs.count("remove") == 0 and list(fake.partitions) == ["slurm_42"]
    assert ["reset", "partition", "slurm_42", "--showjson"] in fake.calls and verbs.count("reset") == 1


def test_an_adopted_partition_that_cannot_be_reset_fails_the_start_and_goes(fake, tmp_path):
    cfg = config.load(str(write_conf(tmp_path, vipu={"emulator": True})), environ={})
    assert prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm()) == 0
    fake.reset_error = "error: partition slurm_42 cannot be reset [FAILED_PRECONDITION]\n"
    assert prolog.run(env(SLURM_JOB_RESTART_COUNT="1"), cfg, cfg.vipu_client(), FakeSlurm()) != 0
    assert "cannot be reset" in hooks_log(cfg) and [c[0] for c in fake.calls].count("reset") == 1
    assert list(fake.partitions) == []  # as any failed start: removed, the next attempt makes it new


def test_the_cause_is_logged_before_scontrol_and_survives_its_failure(fake, cfg):
    fake.end_state = "ERROR"
    assert prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm(broken=True)) == 1
    log = hooks_log(cfg)
    assert "partition slurm_42 went to ERROR" in log and "could not record this in Slurm" in log
    assert log.index("went to ERROR") < log.index("could not record this in Slurm")


def test_a_capacity_failure_works_off_the_journal_first(fake, cfg):
    """One journaled partition (V-IPU refused its removal for a while) no longer costs a
    Pod-sized job three failures and an admin hold."""
    client = cfg.vipu_client()
    fake.free = 64
    client.create_partition("slurm_7", 64)
    Ledger(cfg.state_dir).put("slurm_7", job_id=7)  # as the prolog of job 7 recorded it
    Journal(cfg.state_dir).add("slurm_7", 7, "V-IPU down")
    slurm = FakeSlurm()
    assert prolog.run(env(SLURM_JOB_LICENSES="ipu:64"), cfg, client, slurm) == 0
    assert list(fake.partitions) == ["slurm_42"] and Journal(cfg.state_dir).entries() == []
    assert "removed 1 journaled partition(s) to make room for slurm_42" in hooks_log(cfg)


def test_a_successful_first_run_makes_no_slurm_call(fake, cfg):
    slurm = FakeSlurm(broken=True)  # any call would fail loudly
    assert prolog.run(env(), cfg, cfg.vipu_client(), slurm) == 0 and slurm.comments == {}


@pytest.mark.parametrize("code,err", [(127, "/opt/vipu/bin/vipu: exec: vipu-bin: not found"),
                                      (126, "/opt/vipu/bin/vipu: Permission denied")])
def test_a_vipu_that_cannot_run_is_never_read_as_already_gone(fake, cfg, code, err):
    """`exec: ...: not found` (exit 127) once made the epilog log the partition
    as already gone, exit 0 and journal nothing: a silent leak."""
    prolog.run(env(), cfg, cfg.vipu_client(), FakeSlurm())
    fake.failures = [(err, code)]
    assert epilog.run(env(), cfg, cfg.vipu_client()) == 0
    assert [e["partition"] for e in Journal(cfg.state_dir).entries()] == ["slurm_42"]
    assert f"the vipu command could not run (exit {code}" in hooks_log(cfg) and "already gone" not in hooks_log(cfg)
    assert "slurm_42" in fake.partitions


def test_a_prolog_waits_for_ipus_a_finished_jobs_epilog_is_still_freeing(fake, cfg):
    """Slurm granted the IPUs, so V-IPU being short is V-IPU lagging (a removal under way): the
    prolog waits for the IPUs instead of failing the job (a lag this short does not even ask
    whether a machine failed)."""
    fake.failures = [("error: not enough free IPUs [RESOURCE_EXHAUSTED]", 1)] * 3
    slurm = FakeSlurm()
    assert prolog.run(env(), cfg, cfg.vipu_client(), slurm) == 0
    assert [c[:2] for c in fake.calls].count(["list", "agents"]) == 0
    assert [c[0] for c in fake.calls].count("create") == 4
    assert slurm.comments == {42: "slurm-ipu:partition=slurm_42,ipus=16"}  # the note, no reason: not a failure


def virtual_time():
    """(clock, sleep) for a prolog that waits to its deadline: time advances by its sleeps only,
    from now (the client's own deadline checks read the real clock)."""
    now = [time.monotonic()]
    return (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s))


def test_a_failed_machine_requeues_the_job_soon_without_counting_the_attempt(fake, cfg):
    """Out of IPUs with a machine of the job's Pod down: waiting to the deadline cannot mend it,
    and it is not the job's fault: requeued on every attempt, never held for it.
    A later failure of the job's own counts only its own attempts."""
    fake.free, fake.down = 12, {"ag3": "Down"}  # 16 of 64 asked; V-IPU has 12 left
    for count in range(5):
        slurm = FakeSlurm()
        clock, sleep = virtual_time()
        start = clock()
        assert prolog.run(env(SLURM_JOB_RESTART_COUNT=str(count)), cfg, cfg.vipu_client(), slurm,
                          clock=clock, sleep=sleep) == 1
        assert clock() - start < prolog.MACHINE_GRACE_S + 1.5  # a short grace, not the deadline (5 s here)
        assert slurm.held == set(), slurm.comments
        assert slurm.comments[42].endswith("IPU-Machine ag3 down: V-IPU cannot place the job's IPUs until it is "
                                           "back; requeued: a failed machine is not the job's fault, so this attempt "
                                           "is not counted (the health pass keeps jobs off the machine until it is "
                                           "back)")
    assert [c[:2] for c in fake.calls].count(["list", "agents"]) == 5  # asked once per attempt
    fake.down, fake.failures = {}, [("error: V-IPU server unavailable [UNAVAILABLE]", 1)] * 2
    slurm = FakeSlurm()
    assert prolog.run(env(SLURM_JOB_RESTART_COUNT="6"), cfg, cfg.vipu_client(), slurm) == 1
    assert slurm.held == set() and "requeued (attempt 2 of 3)" in slurm.comments[42]


def test_a_job_slurm_ends_rather_than_requeues_is_not_told_it_was_requeued(fake, cfg):
    """An srun or salloc job, or a --no-requeue batch job: Slurm ends it when its prolog fails, so
    hooks.log and its AdminComment say that, not "requeued"; a batch job is told its attempt."""
    fake.failures = [("error: V-IPU server unavailable [UNAVAILABLE]", 1)] * 4
    slurm = FakeSlurm(ends=[42])
    assert prolog.run(env(), cfg, cfg.vipu_client(), slurm) == 1
    said = slurm.comments[42]
    assert "; requeued" not in said and said.endswith("Slurm ends it (an srun or salloc job, or --no-requeue, is "
                                                    "not requeued): submit it again"), said
    assert said[len("slurm-ipu: "):] in hooks_log(cfg) and slurm.held == set()
    fake.failures = [("error: V-IPU server unavailable [UNAVAILABLE]", 1)] * 4
    slurm = FakeSlurm()
    assert prolog.run(env(), cfg, cfg.vipu_client(), slurm) == 1
    assert "requeued (attempt 1 of 3)" in slurm.comments[42]


def test_a_machine_of_another_pod_is_not_the_job_s_excuse(fake, tmp_path):
    cfg = config.load(str(write_conf(tmp_path, pods=[{"name": "a", "ilds": 1, "hosts": "node[1-4]"},
                                                     {"name": "b", "ilds": 1, "hosts": "node[5-8]"}],
                                     vipu={"allocation": "all"})), environ={})
    fake.agents, fake.free, fake.down = 32, 0, {"ag20": "Down"}  # pod b's (ag16-ag31); the job is on pod a's
    slurm = FakeSlurm()
    clock, sleep = virtual_time()
    assert prolog.run(env(SLURM_JOB_RESTART_COUNT="2"), cfg, cfg.vipu_client(), slurm, clock=clock, sleep=sleep) == 1
    assert slurm.held == {42} and "held after 3 attempts" in slurm.comments[42]


def test_without_the_health_pass_a_failed_machine_s_attempts_count(fake, tmp_path):
    """Nothing would keep the job off the machine: counted, so it is held instead of requeued forever."""
    cfg = config.load(str(write_conf(tmp_path, health={"interval": 0})), environ={})
    fake.free, fake.down = 0, {"ag0": "Down"}
    slurm = FakeSlurm()
    clock, sleep = virtual_time()
    assert prolog.run(env(SLURM_JOB_RESTART_COUNT="2"), cfg, cfg.vipu_client(), slurm, clock=clock, sleep=sleep) == 1
    assert slurm.held == {42} and "IPU-Machine ag0 down" in slurm.comments[42]


def test_a_job_waiting_for_room_never_waits_on_a_name_that_shares_its_lock(fake, cfg):
    """slurm_844 and slurm_908 share a lock file (they are striped): a job waiting for a finished
    job's partition to go must not hold the lock that partition's removal takes (seen in a storm
    on two Pods: a 128-IPU job's prolog timed out after 30 s and the job was requeued)."""
    store = Ledger(cfg.state_dir)
    assert store._lock_path("slurm_844") == store._lock_path("slurm_908")  # the collision itself
    client = cfg.vipu_client()
    fake.free = 64
    client.create_partition("slurm_908", 64)
    store.put("slurm_908", job_id=908)
    Journal(cfg.state_dir).add("slurm_908", 908, "queued by its epilog")
    assert prolog.run(env(SLURM_JOB_ID="844", SLURM_JOB_LICENSES="ipu:64"), cfg, client, FakeSlurm()) == 0
    assert list(fake.partitions) == ["slurm_844"]


def test_sixty_four_consecutive_jobs_take_sixty_four_distinct_locks(cfg):
    """Jobs running together have close ids: striped by job id they never share a lock (the
    byte-sum striping put 64 consecutive jobs in 15 locks, job N with job N+9)."""
    store = Ledger(cfg.state_dir)
    for first in (1, 844, 4_000_000_000):
        paths = {store._lock_path(f"slurm_{first + k}") for k in range(64)}
        assert len(paths) == 64, first


def test_a_cancel_slurm_refused_leaves_the_prolog_failing(fake, cfg):
    """Exit 0 only when the job is cancelled already; else the failing exit keeps it from starting."""
    slurm = FakeSlurm(broken=True)
    assert prolog.run(env(SPANK_IPU_GCDS="32"), cfg, cfg.vipu_client(), slurm) == 1
    assert slurm.cancelled == set() and "could not record this in Slurm" in hooks_log(cfg)
