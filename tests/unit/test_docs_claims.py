"""The docs' claims about the rendered slurm.conf hold (issue 24, item 6): every `Key=value` the
README or docs/ show for a key the fragment sets is in a render of the example site, merged with a
site slurm.conf holding the docs' example values of its own (gpu GRES, a matlab licence,
require_timelimit, gres/gpu accounting). A claim of a value the render does not produce fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import fragments, merge
from slurm_ipu.slurm import slurmconf

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SITE_OWN = ("GresTypes=gpu\nLicenses=matlab:10\nJobSubmitPlugins=lua,require_timelimit\n"
            "AccountingStorageTRES=gres/gpu\n")
ALL_KEYS = ("GresTypes", "Licenses", "PrologSlurmctld", "EpilogSlurmctld", "PrologEpilogTimeout",
            "JobSubmitPlugins", "PropagateResourceLimitsExcept", "TopologyPlugin", "SchedulerParameters",
            "AccountingStorageTRES")


def claims() -> list[tuple[str, str, str]]:
    pattern = re.compile(r"`(" + "|".join(ALL_KEYS) + r")=([^`<]*)`")
    return [(doc.name, m.group(1), m.group(2)) for doc in DOCS for m in pattern.finditer(doc.read_text())]


def rendered() -> dict[str, str]:
    return {s.key: s.value for s in slurmconf.read_text(_render())}


def _render() -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as etc:
        (Path(etc) / "slurm.conf").write_text(SITE_OWN)
        text = (ROOT / "etc" / "site-pod128.yaml").read_text().replace("conf_dir: /etc/slurm", f"conf_dir: {etc}")
        (Path(etc) / "site.yaml").write_text(text)
        site = config.load(str(Path(etc) / "site.yaml"), environ={})
        return fragments.texts(site, str(Path(etc) / "slurm.conf"))["slurm-ipu.conf"]


def test_the_docs_make_claims_to_check():
    assert len(claims()) >= 5


@pytest.mark.parametrize("doc,key,value", claims())
def test_each_claim_is_in_the_render(doc, key, value):
    got = rendered()
    assert key in got, f"{doc} shows `{key}={value}`, which the render does not set"
    items = set(got[key].split(","))
    assert set(value.split(",")) <= items, f"{doc} shows `{key}={value}`; the render has {key}={got[key]}"


def test_every_key_the_fragment_sets_is_one_the_merge_knows():
    site = config.load(str(ROOT / "etc" / "site-pod128.yaml"), environ={})
    assert set(merge.ours(site)) <= set(ALL_KEYS) == set(rendered())
