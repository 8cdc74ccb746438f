"""A started job's AdminComment names its partition (slurm_ipu/hooks/notes.py): the slurm-ipu service
writes a pass's notes with one scontrol reading its commands on stdin; Slurm is faked at the
subprocess boundary, as scontrol would take them."""

from __future__ import annotations

import pytest

from slurm_ipu.errors import SlurmError
from slurm_ipu.hooks import notes

from ..fake_slurm import FakeSlurm, Job


@pytest.fixture
def scontrol():
    return FakeSlurm({55: "RUNNING", 56: "RUNNING", 57: "RUNNING"}, gone=[99])


def batched(slurm: FakeSlurm) -> notes.BatchedNotes:
    return notes.BatchedNotes(slurm)


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
    scontrol.queue[98] = Job("RUNNING")  # listed by the squeue,
    scontrol.gone.add(98)  # gone by the write
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
    for job, said in {55: "site: billed to project X", 56: "slurm-ipu: job 56: IPU-Machine ag0 failed under its V-IPU "
                      "partition; requeued", 57: "slurm-ipu: job 57: ...; requeued (attempt 1 of 3)"}.items():
        scontrol.queue[job].comment = said
    scontrol.queue[56].state = "PENDING"
    for job in (55, 56, 57):
        slurm.note(job, notes.text("partition", f"slurm_{job}", 4))
    assert slurm.flush() == {57: "slurm-ipu:partition=slurm_57,ipus=4"}
    assert scontrol.comments[55] == "site: billed to project X" and scontrol.comments[56].endswith("requeued")


def test_a_job_whose_prolog_has_just_ended_gets_its_note(scontrol):
    """squeue shows the job CONFIGURING until slurmctld hears its PrologSlurmctld exit, which comes
    after the prolog queued the note: a flush in that moment still writes it (seen as a lost note
    in test_health, one CI run in several)."""
    slurm = batched(scontrol)
    scontrol.queue[55].state = "CONFIGURING"
    slurm.note(55, notes.text("partition", "slurm_55", 8))
    assert slurm.flush() == {55: "slurm-ipu:partition=slurm_55,ipus=8"}
    assert scontrol.comments[55] == "slurm-ipu:partition=slurm_55,ipus=8"
