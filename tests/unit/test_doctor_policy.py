"""doctor on a site whose own policy governs its test jobs: what they carry (an account, a QOS, a
partition: options, sbatch's variables, the association's default account) and how a refusal by
the site's own rule is told from slurm-ipu's."""

from __future__ import annotations

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import doctor

from ..fake_slurm import FakeSlurm
from .test_doctor import items


def test_a_site_policy_refusing_doctor_s_jobs_is_named_and_skipped_not_a_problem(here):
    """A site whose own job_submit refuses jobs without -A: doctor's test jobs were refused and
    doctor said slurm-ipu was broken, with a fix that left only weakening the site's policy."""
    desc, _ = here
    slurm = FakeSlurm({7: "RUNNING"}, requires_account=True)
    facts = doctor.gather(desc, runner=slurm.runner)
    found = items(doctor.diagnose(desc, facts))["canary"]
    assert found.skipped and "the site's own policy refused doctor's test job ('lua-site: please name your " \
        "project account'; it carried no account, QOS or partition): give doctor what the rule asks with " \
        "--account, --qos, --partition" in found.line(), found.line()
    facts = doctor.gather(desc, runner=slurm.runner, charge=doctor.Charge("proj", "high", "ipu"))
    assert facts.test_submit == "ok"
    assert {"--account=proj", "--qos=high", "--partition=ipu"} <= set(slurm.submitted[-1])
    assert not items(doctor.diagnose(desc, facts))["canary"].skipped


@pytest.mark.parametrize("refusal,rule", [
    ("sbatch: error: lua-site: please name your project account\nsbatch: error: Batch job submission failed: "
     "Unspecified error", "lua-site: please name your project account"),
    # sbatch --test-only's words for the same (slurm_perror("allocation failure"))
    ("sbatch: error: lua-site: please name a QOS\nsbatch: error: allocation failure: Unspecified error",
     "lua-site: please name a QOS"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "Batch job submission failed: Invalid account or account/partition combination specified"),
    ("sbatch: error: Batch job submission failed: Invalid qos specification",
     "Batch job submission failed: Invalid qos specification"),
    ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size "
     "and/or time limits)", "Batch job submission failed: Job violates accounting/QOS policy (job submit limit, "
     "user's size and/or time limits)"),
    # slurm-ipu's own refusal, and Slurm's for a GRES it does not know: slurm-ipu's problems
    ("sbatch: error: slurm-ipu: --gres=ipu:3 is not a partition size\nsbatch: error: Batch job submission failed: "
     "Unspecified error", None),
    ("sbatch: error: Invalid generic resource (gres) specification", None),
    ("sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification", None),
    ("", None), (None, None),
])
def test_which_refusals_are_the_site_s_own_rule(refusal, rule):
    from slurm_ipu.slurm.refusals import site_rule

    assert site_rule(refusal) == rule


def test_doctor_names_the_default_account_of_its_user_s_association(here, mocker):
    """A site whose job_submit wants -A named, with accounting: sbatch would charge root's default
    account anyway, but the site's rule sees only what the job names."""
    desc, _ = here
    desc = config.reread(desc, accounting__slurmdbd_host="dbd")
    slurm = FakeSlurm({7: "RUNNING"}, requires_account=True, default_account="ops")
    facts = doctor.gather(desc, runner=slurm.runner)
    assert facts.test_submit == "ok" and "--account=ops" in slurm.submitted[-1]
    assert facts.charge.said() == "--account=ops (root's default account)"
    given = doctor.gather(desc, runner=slurm.runner, charge=doctor.Charge("proj"))
    assert given.charge.account == "proj" and "--account=proj" in slurm.submitted[-1]


@pytest.mark.parametrize("env,given,want", [
    ({"SBATCH_ACCOUNT": "a1"}, {}, doctor.Charge("a1")),
    ({"SLURM_ACCOUNT": "a2", "SLURM_QOS": "q"}, {}, doctor.Charge("a2", "q")),
    ({"SBATCH_ACCOUNT": "a1", "SBATCH_PARTITION": "p"}, {"account": "mine"}, doctor.Charge("mine", None, "p")),
    ({"SBATCH_QOS": "q1"}, {"qos": "q2", "partition": "ipu"}, doctor.Charge(None, "q2", "ipu")),
    ({}, {}, doctor.Charge())])
def test_doctor_takes_what_its_jobs_carry_from_its_options_else_sbatch_s_own_variables(here, mocker, monkeypatch,
                                                                                     env, given, want):
    desc, facts = here
    for name in ("ACCOUNT", "QOS", "PARTITION"):
        for prefix in ("SBATCH_", "SLURM_"):
            monkeypatch.delenv(prefix + name, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    gather = mocker.patch.object(doctor, "gather", return_value=facts)
    doctor.main(desc.source, out=lambda _: None, **given)
    assert gather.call_args.kwargs["charge"] == want
