"""doctor's checks and status's view, fed facts without a cluster (the slurm tier breaks each item
in the real lab)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import doctor, fragments, status
from slurm_ipu.slurm import slurmconf
from slurm_ipu.vipu.types import Partition

from ..fake_slurm import FakeSlurm


def items(findings):
    return {f.item: f for f in findings}


def test_a_site_gres_dropped_or_a_key_set_twice_is_named(here):
    """A fragment merged literally (Include plus the site's own GresTypes line) drops the
    site's gpu GRES; doctor said "all ok". Now it names the key, both places and the fix."""
    desc, facts = here
    conf = Path(facts.config["SLURM_CONF"])
    conf.write_text(f"ClusterName=t\nGresTypes=gpu\nInclude {conf.parent}/slurm-ipu.conf\n")
    (conf.parent / "slurm-ipu.conf").write_text(fragments.texts(desc)["slurm-ipu.conf"])  # not merged
    facts.declared = slurmconf.read(str(conf)).settings
    facts.config["GresTypes"] = "ipu"
    found = items(doctor.diagnose(desc, facts))["merged"]
    assert not found.ok and f"GresTypes=gpu at {conf}:2 and GresTypes=ipu at {conf.parent}/slurm-ipu.conf:" in \
        found.detail and "slurm.conf.diff" in found.fix
    conf.write_text(f"ClusterName=t\n# slurm-ipu merged into slurm-ipu.conf: GresTypes=gpu\nInclude {conf.parent}/x\n")
    facts.declared = slurmconf.read(str(conf)).settings
    found = items(doctor.diagnose(desc, facts))["merged"]
    assert not found.ok and f"GresTypes item gpu of {conf}:2 is not in effect (GresTypes=ipu)" in found.detail


@pytest.mark.parametrize("canary,submit,words,fix", [
    ("uid 64030 may not create a partition owned by uid 1001 [PERMISSION_DENIED]", "ok",
     "the hooks' create of a 1-IPU partition as root failed: uid 64030 may not", "vipu.cli_config"),
    ("ok", "`sbatch --test-only -N1`: sbatch: error: Invalid generic resource (gres) specification",
     "sbatch --test-only --gres=ipu:1 was refused: `sbatch", "job_submit.lua"),
])
def test_doctor_tries_what_a_job_start_does(here, canary, submit, words, fix):
    desc, facts = here
    facts.canary, facts.test_submit = canary, submit
    found = items(doctor.diagnose(desc, facts))["canary"]
    assert not found.ok and words in found.detail and fix in found.fix


def test_the_canary_runs_as_the_hooks_user_with_the_hooks_flags(here, mocker):
    desc, _ = here
    calls = []

    def run(argv, **kw):
        calls.append(argv)

        if "create" in argv:
            return subprocess.CompletedProcess(argv, 1, "", "uid 64030 may not create a partition owned by uid "
                                               "65534 [PERMISSION_DENIED]")
        return subprocess.CompletedProcess(argv, 0, "", "")

    mocker.patch("slurm_ipu.vipu.client.run_command", side_effect=run)
    assert "may not create a partition owned by uid 65534" in doctor.canary(desc)
    create = next(c for c in calls if "create" in c)
    assert create[create.index("create") + 2] == doctor.CANARY_NAME and "--size" in create
    assert any("remove" in c or "delete" in c for c in calls)  # removed whatever happened


def test_a_matching_cluster_is_all_ok(here):
    desc, facts = here
    bad = [f.line() for f in doctor.diagnose(desc, facts) if not f.ok and f.item != "service"]
    assert bad == []


@pytest.mark.parametrize("change,item,words", [
    (lambda f: setattr(f, "slurm_version", "23.02.7"), "slurm", "site says slurm.version=22.05"),
    (lambda f: f.config.update(EpilogSlurmctld="/usr/local/epilog"), "hooks", "EpilogSlurmctld=/usr/local/epilog"),
    (lambda f: f.config.update(PrologEpilogTimeout="25 sec"), "timeout", "not above the hooks' deadlines (30 s)"),
    (lambda f: f.config.update(JobSubmitPlugins="require_timelimit"), "job_submit", "JobSubmitPlugins"),
    (lambda f: f.config.update(Licenses="ipu:128,fs:10"), "licenses", "ipu:128, the Pod has 64"),
    (lambda f: f.nodes["node3"].update(Gres="ipu:8"), "nodes", "node3 has Gres=ipu:8"),
    (lambda f: f.nodes.update(node9={"NodeName": "node9", "Gres": "ipu:16"}), "nodes", "node9 has IPUs"),
    (lambda f: setattr(f, "slurm_version", "23.02.1"), "plugstack", "built for Slurm 22.05.8, Slurm 23.02.1 runs"),
    (lambda f: setattr(f, "partitions", None), "vipu", "does not answer"),
    (lambda f: f.partitions.append(Partition("slurm_9", 4)), "orphans", "1 partition(s) whose job is gone: slurm_9"),
])
def test_each_check_names_what_differs_and_the_fix(here, change, item, words):
    desc, facts = here
    change(facts)
    found = items(doctor.diagnose(desc, facts))[item]
    assert not found.ok and words in found.detail and found.fix, found.line()


def test_allocation_model_nodes_without_their_runs_features_are_a_problem(here):
    """Without the features job_submit.lua's constraint names, every multi-host IPU job of the
    allocation model would be refused ("Invalid feature specification")."""
    desc, facts = here
    desc = config.reread(desc, vipu__model="allocation")
    found = items(doctor.diagnose(desc, facts))["nodes"]
    assert not found.ok and "node1 lacks the feature(s) ipugroup2_0" in found.detail and "Features" in found.fix
    for host, runs in {"node1": "ipugroup2_0", "node2": "gpu,ipugroup2_0", "node3": "ipugroup2_1",
                       "node4": "ipugroup2_1"}.items():
        facts.nodes[host]["AvailableFeatures"] = runs
    found = items(doctor.diagnose(desc, facts))["nodes"]
    assert found.ok and "their Features of slurm-ipu" in found.detail, found.line()


@pytest.mark.parametrize("moment", ["its epilog runs", "the service removes it", "its job started after"])
def test_a_partition_on_its_way_in_or_out_is_no_orphan(here, moment):
    """A job's partition between its epilog and the slurm-ipu service's removal is no orphan;
    a partition whose job is gone in both looks, with no removal queued, still is."""
    desc, facts = here
    facts.partitions.append(Partition("slurm_9", 4))
    facts.jobs_after = {7: "RUNNING"}
    if moment == "its epilog runs":
        facts.jobs[9] = doctor.ENDING
    elif moment == "the service removes it":
        facts.queued = ["slurm_9"]  # when V-IPU was listed; the entry is dropped since
    else:
        facts.jobs_after[9] = "RUNNING"
    assert items(doctor.diagnose(desc, facts))["orphans"].ok
    facts.jobs.pop(9, None)
    facts.queued, facts.jobs_after = [], {7: "RUNNING"}
    found = items(doctor.diagnose(desc, facts))["orphans"]
    assert not found.ok and "slurm_9" in found.detail


def test_gather_reads_the_journal_before_v_ipu_and_the_jobs_after_it(here, mocker):
    """The race the install-check could meet: job 9 ended (its epilog handed the removal to
    the slurm-ipu service) before doctor looked; the service removes slurm_9 and drops its journal entry
    while doctor lists V-IPU. The partition in the listing is no orphan."""
    from slurm_ipu.hooks.journal import Journal

    desc, _ = here
    journal = Journal(desc.state_dir)
    journal.add("slurm_9", 9, "handed over by the epilog")
    slurm = FakeSlurm({7: "RUNNING"})

    def listing(*_args):
        partitions = [Partition("slurm_7", 8), Partition("slurm_9", 4)]
        journal.drop("slurm_9")  # the service, meanwhile: removed, then its entry dropped
        return partitions

    mocker.patch("slurm_ipu.hooks.reap.job_objects", side_effect=listing)
    mocker.patch.object(doctor.facts, "canary", return_value="ok")
    mocker.patch.object(doctor.facts, "try_as_job_user", return_value="refused")
    facts = doctor.gather(desc, runner=slurm.runner)
    assert (facts.queued, facts.jobs_after) == (["slurm_9"], {7: "RUNNING"})
    assert items(doctor.diagnose(desc, facts))["orphans"].ok


def test_job_states_name_a_job_whose_epilog_has_not_ended_completing():
    text = json.dumps({"jobs": [{"job_id": 7, "job_state": "CONFIGURING"}, {"job_id": 8, "job_state": "COMPLETING"},
                                {"job_id": 9, "job_state": ["CANCELLED", "COMPLETING"]},
                                {"job_id": 10, "job_state": ["COMPLETED"]}]})
    assert doctor.job_states(text) == {7: "RUNNING", 8: "COMPLETING", 9: "COMPLETING", 10: "COMPLETED"}


def _hook_edit(desc, what: str) -> None:
    hook, conf = Path(desc.path("hook")), Path(desc.path("hook_conf"))
    if what == "settings":
        conf.write_text(conf.read_text().replace("prolog_wait=", "prolog_wait=9"))
    elif what == "old build":  # what a package upgrade without make install leaves
        hook.unlink()
        hook.write_text("#!/bin/sh\necho 'slurm-ipu-hook: ok (source 0123456789ab)'\n")
        hook.chmod(0o755)
    elif what == "python":
        Path(desc.python).unlink()


@pytest.mark.parametrize("what,words", [
    ("settings", "slurm-ipu-hook.conf differs from what the site description renders"),
    ("old build", "slurm-ipu-hook was built from another slurm-ipu than this one"),
    ("python", "venv/bin/python is missing or not executable"),
])
def test_the_hooks_item_tries_slurm_ipu_hook_as_slurmctld_would_start_it(here, what, words):
    desc, facts = here
    assert items(doctor.diagnose(desc, facts))["hooks"].ok
    _hook_edit(desc, what)
    found = items(doctor.diagnose(desc, facts))["hooks"]
    assert not found.ok and words in found.detail and "make install SITE=" in found.fix, found.line()


def test_vipu_credentials_must_exist_and_not_be_world_readable(here, tmp_path):
    desc, facts = here
    creds = tmp_path / "vipu-cli.hcl"
    desc = config.reread(desc, vipu__cli_config=str(creds))
    assert "vipu-cli.hcl: No such file" in items(doctor.diagnose(desc, facts))["vipu"].detail
    creds.write_text('api-user-id = "slurm"\n')
    creds.chmod(0o644)
    assert "world-readable" in items(doctor.diagnose(desc, facts))["vipu"].detail
    creds.chmod(0o600)
    assert items(doctor.diagnose(desc, facts))["vipu"].ok


def test_job_submit_as_a_module_of_the_site_s_script_is_ok_and_a_stale_copy_is_not(here):
    desc, facts = here
    conf = Path(desc.slurm.conf_dir)
    ours = conf / "job_submit_ipu.lua"
    (conf / "job_submit.lua").rename(ours)
    (conf / "job_submit.lua").write_text(f'dofile("{ours}")\nfunction slurm_job_submit(j, p, u) '
                                         "return slurm_ipu.job_submit(j, p, u) end\n")
    assert items(doctor.diagnose(desc, facts))["job_submit"].ok
    ours.write_text(ours.read_text().replace("POD_IPUS", "POD_IPUS_OLD", 1))
    assert "not what the site renders" in items(doctor.diagnose(desc, facts))["job_submit"].detail


def test_an_old_queued_removal_and_a_world_writable_state_dir(here):
    desc, facts = here
    queue = Path(desc.state_dir) / "pending-removal"
    queue.mkdir()
    (queue / "slurm_5.json").write_text(json.dumps({"partition": "slurm_5", "time": time.time() - 3600}))
    Path(desc.state_dir).chmod(0o777)
    found = items(doctor.diagnose(desc, facts))
    assert "1 removal(s) queued for over 600 s: slurm_5" in found["journal"].detail
    assert "world-writable" in found["state_dir"].detail


def test_gather_on_a_host_without_slurm_reports_problems_instead_of_crashing(here):
    desc, _ = here

    def runner(argv, **kw):
        raise FileNotFoundError(argv[0])

    facts = doctor.gather(desc, runner=runner)
    found = items(doctor.diagnose(desc, facts))
    assert not found["slurm"].ok and "cannot ask Slurm its version" in found["slurm"].detail
    assert not found["nodes"].ok and not found["vipu"].ok


def test_parsers_read_what_scontrol_prints():
    cfg = doctor.parse_show_config("Configuration data as of 2026-11-23T08:00:00\nAccountingStorageTRES   = cpu,mem\n"
                                   "Licenses                = ipu:64\nPrologSlurmctld         = /opt/x hook\n")
    assert cfg == {"AccountingStorageTRES": "cpu,mem", "Licenses": "ipu:64", "PrologSlurmctld": "/opt/x hook"}
    cfg = doctor.parse_show_config("PrologSlurmctld[0]      = /opt/a\nPrologSlurmctld[1]      = /opt/b\n")  # 24.11
    assert cfg == {"PrologSlurmctld": "/opt/a,/opt/b"}
    nodes = doctor.parse_show_nodes("NodeName=node1 Arch=x86_64 Gres=ipu:16 State=IDLE\n")
    assert nodes["node1"]["Gres"] == "ipu:16"
    assert status.parse_licenses("LicenseName=ipu Total=64 Used=8 Free=56 Reserved=0 Remote=no") == \
        {"total": 64, "used": 8}


def test_accounting_is_checked_only_when_the_site_has_slurmdbd(here, tmp_path):
    desc, facts = here
    assert doctor.check_accounting(desc, facts).ok  # no slurmdbd_host: nothing to check
    text = (tmp_path / "site.yaml").read_text() + "accounting: {slurmdbd_host: dbd.example.org}\n"
    (tmp_path / "acct.yaml").write_text(text)
    acct = config.load(tmp_path / "acct.yaml")
    good = {"AccountingStorageType": "accounting_storage/slurmdbd",
            "AccountingStorageTRES": "cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/ipu,license/ipu"}
    facts.config.update(good)
    facts.clusters = ["t"]
    assert doctor.check_accounting(acct, facts).ok
    cases = [
        ({"AccountingStorageType": "accounting_storage/none"}, ["t"], "AccountingStorageType=accounting_storage/none"),
        ({"AccountingStorageTRES": "cpu,mem,gres/ipu"}, ["t"], "AccountingStorageTRES lacks license/ipu"),
        ({}, None, "slurmdbd does not answer"),
        ({}, ["other"], "slurmdbd knows no cluster t (other)"),
    ]
    for change, clusters, words in cases:
        facts.config.update(good | change)
        facts.clusters = clusters
        found = doctor.check_accounting(acct, facts)
        assert not found.ok and words in found.detail and found.fix, (change, found)


def test_the_service_item_says_whether_prologs_are_handed_over(here):
    """Running with its socket and the client installed: ok. Running without the socket (an older
    service left after an upgrade): a problem with the restart. Not running: the enable."""
    import os

    from slurm_ipu.hooks import remover, transport

    desc, facts = here
    state = desc.state_dir
    os.makedirs(state, exist_ok=True)
    assert not items(doctor.diagnose(desc, facts))["service"].ok
    epilog = remover.take(state, "epilog", 0)  # a Python epilog removing for a moment is no service
    try:
        assert not items(doctor.diagnose(desc, facts))["service"].ok
    finally:
        remover.give_up(epilog)
    lock = remover.take(state, remover.SERVICE, 0)
    try:
        older = items(doctor.diagnose(desc, facts))["service"]
        assert not older.ok and "without its hook socket" in older.line()
        assert "systemctl restart slurm-ipu" in older.line()
        sock = transport.listen(state)
        now = items(doctor.diagnose(desc, facts))["service"]
        assert now.ok and "takes IPU jobs' prologs and epilogs" in now.line()
        sock.close()
    finally:
        remover.give_up(lock)


def test_a_running_service_whose_passes_stopped_is_a_problem(here):
    """A service that holds its lock and socket but has ended no reap or health pass for three of
    their intervals (a thread stuck) is no working service, and doctor says so; a service just
    started, whose last pass on file is a predecessor's, is given its intervals."""
    import os
    import time

    from slurm_ipu.hooks import remover, stats, transport

    desc, facts = here
    state = desc.state_dir
    os.makedirs(state, exist_ok=True)
    lock = remover.take(state, remover.SERVICE, 0)
    sock = transport.listen(state)
    try:
        counted = stats.Stats(state)
        counted.passed("reap")
        counted.passed("health")
        counted.save()
        assert items(doctor.diagnose(desc, facts))["service"].ok
        long_ago = time.time() - 3 * desc.health.interval - desc.epilog.deadline - 120
        os.utime(remover.lock_path(state), (long_ago, long_ago))          # started long ago
        assert items(doctor.diagnose(desc, facts))["service"].ok          # and passing
        counted.doc["passes"]["health"] = long_ago                          # its health passes stopped
        counted.save()
        stuck = items(doctor.diagnose(desc, facts))["service"]
        assert not stuck.ok and "its last health pass ended" in stuck.line() and "restart" in stuck.line()
        os.utime(remover.lock_path(state))                                 # a service just started
        assert items(doctor.diagnose(desc, facts))["service"].ok
    finally:
        sock.close()
        remover.give_up(lock)


@pytest.mark.parametrize("tried,ok,words", [
    ("refused", True, "a job's user (uid 65534) may not create partitions in allocation (the default)"),
    ("created", False, "created a partition in allocation (the default) around Slurm (removed again); fix: grant"),
    (None, True, "skipped  grants       a create in allocation (the default) as a job's user: needs root"),
    ("could not tell: vipu: timed out", False, "as a job's user could not tell: vipu: timed out"),
])
def test_grants_say_whether_a_job_user_can_go_around_slurm(here, tried, ok, words):
    desc, facts = here
    facts.user_create = tried
    finding = items(doctor.diagnose(desc, facts))["grants"]
    assert finding.ok is ok and words in finding.line(), finding.line()


def test_a_site_prolog_that_took_the_key_is_named_with_the_way_to_keep_both(here):
    """Slurm keeps one PrologSlurmctld: a site's own script there silently replaced ours (or ours
    theirs). Doctor names the site description key that runs both."""
    desc, facts = here
    facts.config["PrologSlurmctld"] = "/etc/slurm/site-prolog.sh"
    finding = items(doctor.diagnose(desc, facts))["hooks"]
    assert not finding.ok and "slurm.site_prolog_slurmctld: /etc/slurm/site-prolog.sh" in finding.line()


def test_a_site_hook_named_in_the_site_description_must_exist(here, tmp_path):
    desc, facts = here
    desc = config.reread(desc, slurm__site_epilog_slurmctld=str(tmp_path / "missing-epilog"))
    finding = items(doctor.diagnose(desc, facts))["hooks"]
    assert not finding.ok and "slurm.site_epilog_slurmctld" in finding.line() and "not executable" in finding.line()


def test_a_user_who_may_not_read_the_state_directory_gets_one_line_per_item_and_no_traceback(here, mocker):
    """Doctor and status run by a user. What they may not read (the state
    directory is root's and slurm.user's) is skipped with one line naming it; the rest is checked."""
    desc, facts = here
    denied = PermissionError(13, "Permission denied")
    denied.filename = f"{desc.state_dir}/pending-removal"
    mocker.patch("slurm_ipu.hooks.journal.Journal.names", side_effect=denied)
    mocker.patch("slurm_ipu.hooks.journal.Journal.entries", side_effect=denied)
    lines = []
    mocker.patch.object(doctor, "gather", return_value=facts)
    mocker.patch.object(doctor, "CHECKS", (doctor.check_slurm, doctor.check_journal))
    assert doctor.main(desc.source, out=lines.append) == 0
    assert lines[1] == (f"skipped  journal      {desc.state_dir}/pending-removal: not readable by uid "
                        f"{os.getuid()} (run doctor as root for this item)")
    assert lines[-1] == "all 1 checks ok, 1 skipped (their lines say why)"
    facts = {"partitions": [], "jobs": {}, "licenses": {}, "created": {}, "queued": [], "errors": {},
             "restricted": ["partition ages and queued removals: /var/lib/slurm-ipu is not readable by uid 1000 "
                            "(run status as root)"]}
    text = status.table(status.build(desc, facts))
    assert text[-1] == ("restricted: partition ages and queued removals: /var/lib/slurm-ipu is not readable by "
                        "uid 1000 (run status as root)")


def _probe(desc, licenses="ipu:1", modify="`scontrol update JobId=9` failed: Invalid license specification",
           comment=None):
    want = fragments.loaded_id(fragments.texts(desc)["job_submit.lua"])
    return {"licenses": licenses, "comment": f"slurm-ipu-job_submit.lua:{want}" if comment is None else comment,
            "tres": "gres:ipu:1", "modify": modify,
            "after": {"licenses": licenses, "tres": "gres:ipu:2" if modify == "accepted" else "gres:ipu:1"}}


@pytest.mark.parametrize("probe,words", [
    (dict(licenses="(null)"), "a held --gres=ipu:1 job got Licenses=(null): slurmctld's job_submit.lua does not run "
                              "slurm_ipu.job_submit"),
    (dict(modify="accepted"), "a GRES update of a held IPU job went through (now gres:ipu:2, Licenses=ipu:1): "
                              "slurm_job_modify does not run slurm_ipu.job_modify"),
    (dict(comment=""), "slurmctld runs job_submit.lua code from before this release, the site renders"),
    (dict(comment="slurm-ipu-job_submit.lua:0123456789abcdef"), "slurmctld runs job_submit.lua code 0123456789abcdef"),
])
def test_job_submit_is_judged_by_what_slurmctld_runs_on_a_held_probe_job(here, probe, words):
    """The files can read right (the test's job_submit.lua is ours) while
    slurmctld runs something else: a site's job_modify that skips ours, or code loaded before the
    file changed. The held probe job says which."""
    desc, facts = here
    facts.probe = _probe(desc, **probe)
    finding = items(doctor.diagnose(desc, facts))["job_submit"]
    assert not finding.ok and words in finding.detail, finding.line()
    facts.probe = _probe(desc)
    finding = items(doctor.diagnose(desc, facts))["job_submit"]
    assert finding.ok and "slurmctld runs ours (code " in finding.detail, finding.line()


def test_the_rendered_job_submit_lua_carries_its_own_code_id(here):
    desc, _ = here
    text = fragments.texts(desc)["job_submit.lua"]
    want = fragments.loaded_id(text)
    assert want and fragments.code_id(text) == want and "@@CODE_ID@@" not in text
    assert fragments.code_id(text.replace("POD_IPUS = 64", "POD_IPUS = 63")) != want  # any edit changes it


@pytest.mark.parametrize("steps,ok,words", [
    ({"node1": "ok", "node5": "ok"}, True, "ok       steps        a 1-IPU step on node1, node5: each task saw"),
    ({"node1": "ok", "node5": "its task saw no IPUOF_VIPU_API_PARTITION_ID (the SPANK plugin is not loaded there)"},
     False, "PROBLEM  steps        a 1-IPU step on node5: its task saw no IPUOF_VIPU_API_PARTITION_ID"),
    ({"node1": "busy: `srun -N1 -w node1` failed: Unable to allocate resources"}, True, "skipped  steps"),
    (None, True, "skipped  steps        a 1-IPU step on each Pod: needs root"),
])
def test_doctor_jobs_names_a_node_whose_tasks_miss_their_partition(here, steps, ok, words):
    desc, _ = here
    finding = doctor.check_steps(desc, steps)
    assert finding.ok is ok and words in finding.line(), finding.line()


def test_ipu_jobs_that_can_never_start_are_named_with_what_to_do(here):
    """After an un-merge (or a node's GRES gone), IPU jobs stay PENDING
    (BadConstraints) for ever; doctor names them. Read from squeue --json as 22.05 and 24.11 print it."""
    import json

    from slurm_ipu.deploy.doctor.facts import _stuck

    fixtures = Path(__file__).with_name("fixtures") / "squeue"
    for name in ("slurm-22.05.json", "slurm-24.11-v0.0.42.json"):
        doc = json.loads((fixtures / name).read_text())
        job = next(j for j in doc["jobs"] if "ipu" in j.get("tres_per_node", ""))
        job["state_reason"] = "BadConstraints"
        job["job_state"] = ["PENDING"] if isinstance(job["job_state"], list) else "PENDING"
        ident = job["job_id"]["number"] if isinstance(job["job_id"], dict) else job["job_id"]
        assert _stuck(json.dumps(doc)) == [ident], name
    desc, facts = here
    facts.stuck = [12, 13]
    line = items(doctor.diagnose(desc, facts))["queue"].line()
    assert line.startswith("PROBLEM  queue        IPU job(s) 12 13 pending for BadConstraints"), line
    assert "scancel 12 13" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="a directory of another owner needs root")
def test_the_metrics_item_refuses_a_textfile_directory_others_can_write(tmp_path):
    """node_exporter serves every *.prom in the directory: one other users can write lets them
    plant or replace slurm-ipu's numbers. slurm.user (root here) must be able to write it."""
    folder = tmp_path / "textfile"
    folder.mkdir(mode=0o755)
    base = {"version": 1, "cluster": "t", "state_dir": str(tmp_path / "state"), "slurm": {"user": "root"},
            "vipu": {"host": "127.0.0.1", "command": "/usr/bin/vipu"},
            "pod": {"ipus": 64, "hosts": "node[1-4]", "ipus_per_host": 16}}
    (tmp_path / "s.yaml").write_text(json.dumps({**base, "metrics": {"textfile": str(folder / "slurm_ipu.prom")}}))
    site = config.load(tmp_path / "s.yaml", environ={})
    assert doctor.check_metrics(site, doctor.Facts()).ok
    for mode, owner, words in ((0o1777, 0, "can be written by every user"), (0o775, 0, None),
                               (0o755, 65534, "can be written by uid 65534")):
        folder.chmod(mode)
        os.chown(folder, owner, 0 if words is None else 65534 if owner else 0)
        if words is None:  # group-writable for root's own group: still only root
            assert doctor.check_metrics(site, doctor.Facts()).ok
            os.chown(folder, 0, 65534)
            words = "can be written by group"
        found = doctor.check_metrics(site, doctor.Facts())
        assert not found.ok and words in found.line() and "chmod 755" in found.line(), found.line()
        os.chown(folder, 0, 0)
        folder.chmod(0o755)
    (tmp_path / "n.yaml").write_text(json.dumps(base))
    assert doctor.check_metrics(config.load(tmp_path / "n.yaml", environ={}), doctor.Facts()).ok


def test_the_drains_item_names_the_health_pass_s_drains_and_whether_a_pass_will_lift_them(here):
    from slurm_ipu.hooks import remover, transport

    desc, facts = here
    text = ("NodeName=node1 Arch=x86_64 State=IDLE Gres=ipu:16\n"
            "NodeName=node2 Arch=x86_64 State=IDLE+DRAIN Gres=ipu:16 Reason=slurm-ipu: IPU-Machine ag5 down "
            "[root@2026-11-27T06:40:01]\n"
            "NodeName=node3 Arch=x86_64 State=IDLE+DRAIN Gres=ipu:16 Reason=bad DIMM [admin@2026-11-27T06:00:00]\n")
    facts.nodes = doctor.parse_show_nodes(text)
    assert facts.nodes["node3"]["Reason"].startswith("bad DIMM") and facts.nodes["node2"]["Gres"] == "ipu:16"
    alone = items(doctor.diagnose(desc, facts))["drains"]
    assert not alone.ok and "node2 (slurm-ipu: IPU-Machine ag5 down)" in alone.line() and "node3" not in alone.line()
    os.makedirs(desc.state_dir, exist_ok=True)
    lock = remover.take(desc.state_dir, remover.SERVICE, 0)
    sock = transport.listen(desc.state_dir)
    try:
        found = items(doctor.diagnose(desc, facts))["drains"]
        assert found.ok and "1 node(s) drained for failed IPU-Machines" in found.line()
    finally:
        sock.close()
        remover.give_up(lock)


@pytest.mark.parametrize("include", ["plugstack.conf.d/*", "plugstack.conf.d/*.conf", "./plugstack.conf.d/ipu.conf"])
def test_a_relative_plugstack_include_is_read_beside_plugstack_conf_as_slurm_reads_it(here, tmp_path, include,
                                                                                      monkeypatch):
    """Slurm reads `include plugstack.conf.d/*` against plugstack.conf's directory; doctor read it
    against its own working directory, said PROBLEM for a plugin Slurm loads, and its fix loaded
    the plugin twice."""
    desc, facts = here
    conf = Path(facts.config["PlugStackConfig"])
    conf.write_text(f"include {include}\n")
    monkeypatch.chdir(tmp_path)  # anywhere but beside plugstack.conf
    found = items(doctor.diagnose(desc, facts))["plugstack"]
    assert found.ok, found.line()


def test_spank_ipu_loaded_twice_is_a_problem_naming_both_files(here):
    """Following the old fix on such a site: every srun printed `spank: option "ipus" provided by
    both spank_ipu.so and spank_ipu.so` and doctor said ok."""
    desc, facts = here
    conf = Path(facts.config["PlugStackConfig"])
    conf.write_text(conf.read_text() + "include plugstack.conf.d/*\n")
    found = items(doctor.diagnose(desc, facts))["plugstack"]
    assert not found.ok and "loads spank_ipu.so 2 times" in found.detail and "keep one" in found.fix
