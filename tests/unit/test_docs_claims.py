"""The docs' claims about the rendered slurm.conf hold: every `Key=value` the
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
            "AccountingStorageTRES", "SlurmctldPrimaryOnProg")


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


# --- the names the docs give: paths in the repository, slurm-ipu's commands, make's targets ----

PATH_CLAIM = re.compile(r"`((?:slurm_ipu|spank|templates|tests|etc|docs|examples|\.ci)/[A-Za-z0-9_./-]*[A-Za-z0-9_/])`")
COMMAND_CLAIM = re.compile(r"`(?:sudo )?slurm-ipu ([a-z][a-z-]*)")
MAKE_CLAIM = re.compile(r"`(?:[A-Z_]+=\S+ )*make ([a-z][a-z0-9.-]*[a-z0-9])")
# Paths the docs give inside another directory (the lab's), not in the repository.
ELSEWHERE = {"etc/site.yaml"}


def _named(pattern: re.Pattern) -> list[tuple[str, str]]:
    return sorted({(doc.name, m.group(1)) for doc in DOCS for m in pattern.finditer(doc.read_text())})


def test_the_docs_name_paths_commands_and_targets():
    assert len(_named(PATH_CLAIM)) >= 20 and len(_named(COMMAND_CLAIM)) >= 10 and len(_named(MAKE_CLAIM)) >= 5


@pytest.mark.parametrize("doc,path", [(d, p) for d, p in _named(PATH_CLAIM) if p not in ELSEWHERE])
def test_each_path_the_docs_name_exists(doc, path):
    assert (ROOT / path).exists(), f"{doc} names `{path}`, which is not in the repository"


def _commands() -> set[str]:
    import argparse

    from slurm_ipu import cli

    subs = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(subs.choices) | {"step"}  # the SPANK plugin's, taken before the parser (cli.main)


@pytest.mark.parametrize("doc,command", _named(COMMAND_CLAIM))
def test_each_slurm_ipu_command_the_docs_name_exists(doc, command):
    assert command in _commands(), f"{doc} names `slurm-ipu {command}`, which slurm-ipu does not have"


@pytest.mark.parametrize("doc,target", _named(MAKE_CLAIM))
def test_each_make_target_the_docs_name_exists(doc, target):
    targets = set(re.findall(r"^([a-z][a-z0-9.-]*):", (ROOT / "Makefile").read_text(), re.M))
    assert target in targets, f"{doc} names `make {target}`, which the Makefile does not have"


# Measurements live in docs/performance.md, dated, with the command that made them;
# the other documents link there instead of copying a figure that then drifts.
FIGURE = re.compile(r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:ms|jobs/min|MiB resident)\b|\b\d+\.\d+x\b")


@pytest.mark.parametrize("doc", ["README.md", "docs/admin.md", "docs/design.md"])
def test_measurements_are_stated_only_in_performance_md(doc):
    found = [m.group(0) for m in FIGURE.finditer((ROOT / doc).read_text())]
    assert not found, f"{doc} states measured figures {found}: move them to docs/performance.md and link there"


def test_the_figure_pattern_finds_what_performance_md_states():
    assert len(FIGURE.findall((ROOT / "docs" / "performance.md").read_text())) >= 20
