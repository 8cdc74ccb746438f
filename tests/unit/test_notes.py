"""A started job's AdminComment names its partition (slurm_ipu/hooks/notes.py): the hook service
writes a pass's notes with one scontrol reading its commands on stdin; Slurm is faked at the
subprocess boundary, as scontrol would take them."""

from __future__ import annotations

import subprocess

import pytest

from slurm_ipu.errors import SlurmError
from slurm_ipu.hooks import notes
from slurm_ipu.slurm.commands import SlurmCli


class FakeScontrol:
    """scontrol: one command from argv, or (none given) one per line of stdin, as its own
    tokenizer splits them; a job not in `live` fails its line alone and the exit is 1. squeue
    --json: the live jobs, RUNNING unless `pending` says otherwise, with their AdminComment."""

    def __init__(self, live):
        self.live = set(live)
        self.pending: set[int] = set()
        self.configuring: set[int] = set()  # the prolog answered; slurmctld has not heard it exit yet
        self.vanishing: set[int] = set()  # listed by squeue, gone by the update
        self.comments: dict[int, str] = {}
        self.processes = 0

    def __call__(self, argv, env=None, capture_output=True, text=True, errors=None, timeout=None, stdin=None,
                 input=None):
        if argv[0].endswith("squeue"):  # --noheader --jobs IDS --Format=JobID:20,State:16,admin_comment:300
            asked = {int(j) for j in argv[argv.index("--jobs") + 1].split(",")}
            out = "".join(f"{j:<20}{self._state(j):<16}"
                          f"{self.comments.get(j) or '(null)':<300}\n"
                          for j in sorted((self.live | self.vanishing) & asked))
            return subprocess.CompletedProcess(argv, 0, out, "")
        self.processes += 1
        commands = [argv[1:]] if len(argv) > 1 else [line.split() for line in (input or "").splitlines()]
        failed = False
        for words in commands:
            fields = dict(w.split("=", 1) for w in words[1:])
            job = int(fields["JobId"])
            if job not in self.live:
                failed = True
                continue
            self.comments[job] = fields["AdminComment"]
        if failed:
            return subprocess.CompletedProcess(argv, 1, "", "slurm_update error: Invalid job id specified\n")
        return subprocess.CompletedProcess(argv, 0, "", "")

    def _state(self, job: int) -> str:
        return "PENDING" if job in self.pending else "CONFIGURING" if job in self.configuring else "RUNNING"


@pytest.fixture
def scontrol():
    return FakeScontrol(live={55, 56, 57})


def batched(scontrol) -> notes.BatchedNotes:
    return notes.BatchedNotes(SlurmCli(None, "/usr/bin", runner=scontrol))


def test_a_pass_s_notes_go_to_slurm_in_one_scontrol(scontrol):
    slurm = batched(scontrol)
    slurm.note(55, notes.text("partition", "slurm_55", 8))
    slurm.note(56, notes.text("allocation", "c56", 32))
    assert scontrol.comments == {}  # queued until the pass
    assert len(slurm.flush()) == 2
    assert scontrol.processes == 1
    assert scontrol.comments == {55: "slurm-ipu:partition=slurm_55,ipus=8", 56: "slurm-ipu:allocation=c56,ipus=32"}
    assert slurm.flush() == {} and scontrol.processes == 1  # nothing queued: no process


def test_a_later_word_on_a_job_is_never_overwritten_by_its_queued_note(scontrol):
    slurm = batched(scontrol)
    slurm.note(55, notes.text("partition", "slurm_55", 8))
    slurm.admin_comment(55, "slurm-ipu: job 55: requeued (attempt 1 of 3)")
    slurm.flush()
    assert scontrol.comments == {55: "slurm-ipu: job 55: requeued (attempt 1 of 3)"}


def test_a_job_that_ended_before_its_note_is_skipped_or_fails_alone(scontrol):
    slurm = batched(scontrol)
    scontrol.vanishing = {98}  # it ends between the squeue and the write
    for job in (55, 98, 99, 57):  # 99 ended before the pass: squeue no longer lists it
        slurm.note(job, notes.text("partition", f"slurm_{job}", 1))
    with pytest.raises(SlurmError, match="Invalid job id"):
        slurm.flush()
    assert set(scontrol.comments) == {55, 57}
    assert slurm.flush() == {}  # not tried again


def test_a_note_is_one_token_and_told_from_the_prolog_s_reasons():
    for text in (notes.text("partition", "slurm_5", 16), notes.text("allocation", "c5", 64)):
        assert text.split() == [text] and notes.is_note(text)
    assert not notes.is_note("slurm-ipu: job 5: V-IPU partition slurm_5 (4 IPUs) not created: ...")
    assert not notes.is_note(None) and not notes.is_note("")


def test_a_note_never_covers_an_admin_s_comment_or_a_job_that_stopped_running(scontrol):
    """One squeue before the write: a job requeued meanwhile (by an admin's `slurm-ipu health`, in
    another process) keeps its reason, and an AdminComment not of slurm-ipu's stays; an earlier
    attempt's reason of ours gives way, the job runs now."""
    slurm = batched(scontrol)
    scontrol.comments = {55: "site: billed to project X", 56: "slurm-ipu: job 56: IPU-Machine ag0 failed under "
                         "its V-IPU partition; requeued", 57: "slurm-ipu: job 57: ...; requeued (attempt 1 of 3)"}
    scontrol.pending = {56}
    for job in (55, 56, 57):
        slurm.note(job, notes.text("partition", f"slurm_{job}", 4))
    assert slurm.flush() == {57: "slurm-ipu:partition=slurm_57,ipus=4"}
    assert scontrol.comments[55] == "site: billed to project X" and scontrol.comments[56].endswith("requeued")


def test_a_job_whose_prolog_has_just_ended_gets_its_note(scontrol):
    """squeue shows the job CONFIGURING until slurmctld hears its PrologSlurmctld exit, which comes
    after the prolog queued the note: a flush in that moment still writes it (seen as a lost note
    in test_health, one CI run in several)."""
    slurm = batched(scontrol)
    scontrol.configuring = {55}
    slurm.note(55, notes.text("partition", "slurm_55", 8))
    assert slurm.flush() == {55: "slurm-ipu:partition=slurm_55,ipus=8"}
    assert scontrol.comments[55] == "slurm-ipu:partition=slurm_55,ipus=8"
