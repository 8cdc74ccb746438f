"""Merge, never override: `render` against a hand-written site's slurm.conf.
The fragment carries the site's own values of every key it sets, slurm.conf.diff (applied with
GNU patch, as an admin would) leaves no key defined twice, a re-render after the merge changes
nothing, `patch -R` gives the site's files back byte for byte, and two values that cannot both
stand are one line naming the key, both values and the way out."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.deploy import fragments, merge
from slurm_ipu.errors import ConfigError
from slurm_ipu.slurm import slurmconf

ROOT = Path(__file__).resolve().parents[2]
PATCH = shutil.which("patch")

SITE_CONF = """\
# A site that ran Slurm before slurm-ipu.
ClusterName=ipupod128
SlurmctldHost=ctl
GresTypes=gpu
SlurmctldTimeout=60 Licenses=matlab:10,fluent*4   # two keys on a line
JobSubmitPlugins=job_submit/lua,require_timelimit
PrologEpilogTimeout=600
SchedulerParameters=bf_continue,max_switch_wait=600
TaskPlugin=task/affinity,task/cgroup
Include site-accounting.conf
NodeName=ipu-host[1-8] Gres=gpu:1 CPUs=4
PartitionName=all Nodes=ALL Default=YES
"""
ACCOUNTING = "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageTRES=gres/gpu\n"


@pytest.fixture
def site(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text(SITE_CONF)
    (etc / "site-accounting.conf").write_text(ACCOUNTING)
    text = (ROOT / "etc" / "site-pod128.yaml").read_text().replace("conf_dir: /etc/slurm", f"conf_dir: {etc}")
    (tmp_path / "site.yaml").write_text(text)
    return config.load(str(tmp_path / "site.yaml"), environ={}), etc


def fragment_values(text: str) -> dict[str, str]:
    return {s.key: s.value for s in slurmconf.read_text(text)}


def test_the_fragment_carries_the_site_s_own_values(site):
    desc, etc = site
    values = merge.merge(desc, str(etc / "slurm.conf")).values
    assert values["GresTypes"] == "gpu,ipu"
    assert values["Licenses"] == "matlab:10,fluent*4,ipu:128"
    assert values["JobSubmitPlugins"] == "job_submit/lua,require_timelimit"  # lua once, as the site spells it
    assert values["PrologEpilogTimeout"] == "600"  # the site's, above our deadlines
    assert values["SchedulerParameters"] == "bf_continue,max_switch_wait=31536000"  # ours replaces the site's wait
    assert values["AccountingStorageTRES"] == "gres/gpu,gres/ipu,license/ipu"  # from the included file
    rendered = fragments.texts(desc, str(etc / "slurm.conf"))
    assert fragment_values(rendered["slurm-ipu.conf"])["Licenses"] == "matlab:10,fluent*4,ipu:128"


@pytest.mark.skipif(PATCH is None, reason="GNU patch is not installed")
def test_the_diff_merges_and_unmerges_mechanically(site, tmp_path):
    desc, etc = site
    before = {p.name: p.read_bytes() for p in etc.iterdir()}
    out = tmp_path / "out"
    fragments.write(desc, out, str(etc / "slurm.conf"))
    subprocess.run([PATCH, "-s", "-d", "/", "-p1", "-i", str(out / "slurm.conf.diff")], check=True, timeout=30)
    shutil.copy(out / "slurm-ipu.conf", etc / "slurm-ipu.conf")
    merged = slurmconf.read(str(etc / "slurm.conf"))
    assert slurmconf.defined_twice(merged.settings) == {}  # no key is set twice: Slurm logs no error
    live = slurmconf.last(merged.settings)
    assert (live["grestypes"].value, live["slurmctldtimeout"].value) == ("gpu,ipu", "60")
    assert live["grestypes"].path == str(etc / "slurm-ipu.conf")
    # A re-render after the merge reads the moved values back: the same fragment, nothing to change.
    again = fragments.texts(desc, str(etc / "slurm.conf"))
    assert again["slurm-ipu.conf"] == (out / "slurm-ipu.conf").read_text() and fragments.DIFF not in again
    subprocess.run([PATCH, "-s", "-R", "-d", "/", "-p1", "-i", str(out / "slurm.conf.diff")], check=True, timeout=30)
    (etc / "slurm-ipu.conf").unlink()
    assert {p.name: p.read_bytes() for p in etc.iterdir()} == before


@pytest.mark.parametrize("line,words", [
    ("PrologSlurmctld=/etc/slurm/prolog-ctld.sh", "slurm.conf:13: PrologSlurmctld=/etc/slurm/prolog-ctld.sh is the "
     "site's own, and slurm-ipu-hook takes PrologSlurmctld's place: name it in the site description "
     "(slurm.site_prolog_slurmctld: /etc/slurm/prolog-ctld.sh) and render again"),
    ("EpilogSlurmctld=/a.sh,/b.sh", "EpilogSlurmctld=/a.sh,/b.sh is one path to Slurm, not a list (22.05 then runs "
     "no EpilogSlurmctld, 23.02 and later do not start): write one EpilogSlurmctld line per script, or name them"),
    ("EpilogSlurmctld=/etc/slurm/epilog-ctld.sh", "(slurm.site_epilog_slurmctld: /etc/slurm/epilog-ctld.sh)"),
    ("TopologyPlugin=topology/block", "TopologyPlugin=topology/block, and the site's Pods need topology/tree"),
    ("Licenses=ipu:64", "Licenses has ipu:64, and the Pod is ipu:128: the ipu licence is slurm-ipu's"),
    ("PropagateResourceLimits=ALL", "PropagateResourceLimits=ALL passes the submitting shell's memlock limit"),
    ("GresTypes=gpu,\\\n  fpga", "GresTypes is on a line continued with '\\'; put it on a line of its own"),
])
def test_values_that_cannot_both_stand_are_one_line(site, line, words):
    desc, etc = site
    (etc / "slurm.conf").write_text(SITE_CONF + line + "\n")
    with pytest.raises(ConfigError) as err:
        fragments.texts(desc, str(etc / "slurm.conf"))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_site_prolog_named_in_the_site_description_is_run_by_the_hook(site, tmp_path):
    desc, etc = site
    (etc / "slurm.conf").write_text(SITE_CONF + "PrologSlurmctld=/etc/slurm/prolog-ctld.sh\n")
    text = (tmp_path / "site.yaml").read_text().replace("site_prolog_slurmctld: null",
                                                         "site_prolog_slurmctld: /etc/slurm/prolog-ctld.sh")
    (tmp_path / "site.yaml").write_text(text)
    rendered = fragments.texts(config.load(str(tmp_path / "site.yaml"), environ={}), str(etc / "slurm.conf"))
    assert fragment_values(rendered["slurm-ipu.conf"])["PrologSlurmctld"] == "/opt/slurm-ipu/libexec/slurm-ipu-hook"
    assert "\nsite_prolog=/etc/slurm/prolog-ctld.sh\n" in rendered["slurm-ipu-hook.conf"]
    assert "+# slurm-ipu merged into slurm-ipu.conf: PrologSlurmctld=/etc/slurm/prolog-ctld.sh" in rendered[
        fragments.DIFF]


@pytest.mark.parametrize("release,runs", [("22.05", "/b.sh"), ("23.11", "/b.sh"), ("24.05", "/a.sh,/b.sh"),
                                          ("26.05", "/a.sh,/b.sh")])
def test_several_controller_prolog_lines_are_named_as_the_release_runs_them(site, tmp_path, release, runs):
    """Two PrologSlurmctld lines. Up to 23.11 Slurm runs the last; from 24.05 it
    runs both (in parallel). render goes on only when the site description names what runs, so
    slurm-ipu-hook, which takes the key's place, runs exactly those, in order."""
    desc, etc = site
    (etc / "slurm.conf").write_text(SITE_CONF + "PrologSlurmctld=/a.sh\nPrologSlurmctld=/b.sh\n")
    text = (tmp_path / "site.yaml").read_text().replace("version: '22.05'", f"version: '{release}'")
    (tmp_path / "site.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        fragments.texts(config.load(str(tmp_path / "site.yaml"), environ={}), str(etc / "slurm.conf"))
    said = str(err.value)
    assert f"(slurm.site_prolog_slurmctld: {runs}" in said and "PrologSlurmctld is set on 2 lines" in said
    both = "," in runs  # from 24.05 Slurm runs every line; before, only the last, and the first never ran
    first = SITE_CONF.count("\n") + 1  # the two lines' numbers in slurm.conf
    assert f"slurm.conf:{first} /a.sh ({'runs' if both else 'never ran'})" in said, said
    assert f"slurm.conf:{first + 1} /b.sh (runs)" in said, said
    assert ("runs every line" if both else "runs only the last line") in said, said
    (tmp_path / "site.yaml").write_text(text.replace("site_prolog_slurmctld: null", f"site_prolog_slurmctld: {runs}"))
    rendered = fragments.texts(config.load(str(tmp_path / "site.yaml"), environ={}), str(etc / "slurm.conf"))
    assert [line for line in rendered["slurm-ipu-hook.conf"].splitlines() if line.startswith("site_prolog=")] == \
        [f"site_prolog={path}" for path in runs.split(",")]
    moved = [line for line in rendered[fragments.DIFF].splitlines() if line.startswith("+# slurm-ipu merged")
             and "PrologSlurmctld" in line]
    assert moved == ["+# slurm-ipu merged into slurm-ipu.conf: PrologSlurmctld=/a.sh",
                     "+# slurm-ipu merged into slurm-ipu.conf: PrologSlurmctld=/b.sh"]  # no line of theirs stays live


def test_the_pod_s_nodename_lines_get_ipu_in_their_gres_through_the_diff(site):
    """slurmctld counts a node's GRES from its NodeName line: the diff adds ipu there too, keeping
    the site's own items and comment, so `patch -R` takes it out again with the rest."""
    desc, etc = site
    conf = SITE_CONF.replace("NodeName=ipu-host[1-8] Gres=gpu:1 CPUs=4\n",
                             "NodeName=ipu-host[1-4] Gres=gpu:1 CPUs=4\nNodeName=ipu-host[5-8] CPUs=4  # rack 2\n"
                             "NodeName=DEFAULT CPUs=8\nNodeName=login1 CPUs=2\n")
    (etc / "slurm.conf").write_text(conf)
    _, merged = merge.edits(merge.merge(desc, str(etc / "slurm.conf")), str(etc / "slurm.conf"))[
        str((etc / "slurm.conf").resolve())]
    lines = merged.splitlines()
    assert "NodeName=ipu-host[1-4] Gres=gpu:1,ipu:16 CPUs=4" in lines
    assert "NodeName=ipu-host[5-8] CPUs=4 Gres=ipu:16 # rack 2" in lines
    assert "NodeName=DEFAULT CPUs=8" in lines and "NodeName=login1 CPUs=2" in lines
    (etc / "slurm.conf").write_text(merged.replace("Include slurm-ipu.conf\n", ""))
    assert merge.merge(desc, str(etc / "slurm.conf")).gres == []  # a re-render leaves right lines alone


@pytest.mark.parametrize("lines,want", [
    # the Pod's line inherits the DEFAULT's GPU: Gres= on it would replace the default, so it keeps gpu
    ("NodeName=DEFAULT CPUs=4 Gres=gpu:1\nNodeName=ipu-host[1-8]\n", "NodeName=ipu-host[1-8] Gres=gpu:1,ipu:16"),
    # a later DEFAULT line without Gres keeps the earlier one's (read_config.c merges DEFAULT lines)
    ("NodeName=DEFAULT Gres=gpu:2\nNodeName=DEFAULT CPUs=8\nNodeName=ipu-host[1-8]\n",
     "NodeName=ipu-host[1-8] Gres=gpu:2,ipu:16"),
    # a line's own Gres replaces the default's: only its own items stay
    ("NodeName=DEFAULT Gres=gpu:2\nNodeName=ipu-host[1-8] Gres=fpga:1\n", "NodeName=ipu-host[1-8] Gres=fpga:1,ipu:16"),
    # a DEFAULT line after the Pod's line gives it nothing
    ("NodeName=ipu-host[1-8]\nNodeName=DEFAULT Gres=gpu:2\n", "NodeName=ipu-host[1-8] Gres=ipu:16"),
])
def test_the_pod_s_hosts_keep_the_gres_their_default_line_gives_them(site, lines, want):
    """`NodeName=DEFAULT ... Gres=gpu:1` then the Pod's line without Gres: the
    merge writes the inherited items with ipu, never ipu alone (which dropped the site's GPUs)."""
    desc, etc = site
    (etc / "slurm.conf").write_text(SITE_CONF.replace("NodeName=ipu-host[1-8] Gres=gpu:1 CPUs=4\n", lines))
    _, merged = merge.edits(merge.merge(desc, str(etc / "slurm.conf")), str(etc / "slurm.conf"))[
        str((etc / "slurm.conf").resolve())]
    assert want in merged.splitlines(), merged
    (etc / "slurm.conf").write_text(merged.replace("Include slurm-ipu.conf\n", ""))
    assert merge.merge(desc, str(etc / "slurm.conf")).gres == []


def test_a_nodename_line_with_pod_hosts_and_others_is_one_line_naming_it(site):
    desc, etc = site
    (etc / "slurm.conf").write_text(SITE_CONF.replace("NodeName=ipu-host[1-8]", "NodeName=ipu-host[1-9]"))
    with pytest.raises(ConfigError) as err:
        merge.merge(desc, str(etc / "slurm.conf"))
    assert "slurm.conf:11: NodeName=ipu-host[1-9] names Pod hosts and others (ipu-host9)" in str(err.value)
    assert "split the line" in str(err.value) and "\n" not in str(err.value)


@pytest.fixture
def alloc_site(site, tmp_path):
    """The same site, its Pods in the allocation model: host runs ipu-host[1-2], [3-4], [5-6], [7-8]."""
    _, etc = site
    path = tmp_path / "site.yaml"
    path.write_text(path.read_text().replace("  model: partition\n", "  model: allocation\n", 1))
    return config.load(str(path), environ={}), etc


def _merged_conf(desc, etc) -> str:
    return merge.edits(merge.merge(desc, str(etc / "slurm.conf")), str(etc / "slurm.conf"))[
        str((etc / "slurm.conf").resolve())][1]


def test_allocation_model_hosts_get_their_runs_as_features_beside_the_site_s_own(alloc_site):
    desc, etc = alloc_site
    conf = SITE_CONF.replace("NodeName=ipu-host[1-8] Gres=gpu:1 CPUs=4\n",
                             "NodeName=DEFAULT Features=ib\nNodeName=ipu-host[1-2] Gres=gpu:1 CPUs=4\n"
                             "NodeName=ipu-host[3-4] Feature=avx512 CPUs=4  # rack 2\nNodeName=ipu-host5\n"
                             "NodeName=ipu-host6 Features=ib,ipugroup2_9\nNodeName=ipu-host[7-8]\n")
    (etc / "slurm.conf").write_text(conf)
    merged = _merged_conf(desc, etc)
    lines = merged.splitlines()
    assert "NodeName=ipu-host[1-2] Gres=gpu:1,ipu:16 CPUs=4 Features=ib,ipugroup2_0" in lines
    assert "NodeName=ipu-host[3-4] Feature=avx512,ipugroup2_1 CPUs=4 Gres=ipu:16 # rack 2" in lines
    assert "NodeName=ipu-host5 Gres=ipu:16 Features=ib,ipugroup2_2" in lines
    assert "NodeName=ipu-host6 Features=ib,ipugroup2_2 Gres=ipu:16" in lines  # a stale run replaced
    (etc / "slurm.conf").write_text(merged.replace("Include slurm-ipu.conf\n", ""))
    again = merge.merge(desc, str(etc / "slurm.conf"))
    assert again.features == [] and again.gres == []  # a re-render leaves right lines alone
    back = merge.unmerge(desc, str(etc / "slurm.conf"))
    assert back[str((etc / "slurm.conf").resolve())][1] == conf


def test_a_nodename_line_over_several_runs_is_split_and_unmerged_byte_for_byte(alloc_site):
    """The usual `NodeName=ipu-host[1-8] ...`: one line per run, the first in its place (its
    comment kept), the others added after it; a re-render changes nothing, unmerge gives it back."""
    desc, etc = alloc_site
    conf = SITE_CONF.replace("CPUs=4\n", "CPUs=4  # the Pod\n", 1)
    (etc / "slurm.conf").write_text(conf)
    merged = _merged_conf(desc, etc)
    lines = merged.splitlines()
    at = lines.index("NodeName=ipu-host[1-2] Gres=gpu:1,ipu:16 CPUs=4 Features=ipugroup2_0 # the Pod")
    assert lines[at - 1] == "#slurm-ipu-was: NodeName=ipu-host[1-8] Gres=gpu:1 CPUs=4  # the Pod"
    assert lines[at + 1:at + 4] == [f"NodeName=ipu-host[{a}-{a + 1}] Gres=gpu:1,ipu:16 CPUs=4 Features=ipugroup2_{k} "
                                    "# slurm-ipu added" for k, a in ((1, 3), (2, 5), (3, 7))]
    (etc / "slurm.conf").write_text(merged.replace("Include slurm-ipu.conf\n", ""))
    again = merge.merge(desc, str(etc / "slurm.conf"))
    assert again.features == [] and again.gres == [], again.features
    back = merge.unmerge(desc, str(etc / "slurm.conf"))
    assert back[str((etc / "slurm.conf").resolve())][1] == conf


def test_a_nodename_line_over_two_runs_with_an_address_per_node_is_refused_with_the_split(alloc_site):
    desc, etc = alloc_site
    (etc / "slurm.conf").write_text(SITE_CONF.replace("CPUs=4\n", "CPUs=4 NodeAddr=10.0.0.[1-8]\n", 1))
    with pytest.raises(ConfigError) as err:
        merge.merge(desc, str(etc / "slurm.conf"))
    text = str(err.value)
    assert "NodeName=ipu-host[1-8] names hosts of different runs of the allocation model and gives each node its " \
           "own NodeAddr" in text
    assert "ipu-host[1-2]: Features=ipugroup2_0; ipu-host[3-4]: Features=ipugroup2_1" in text and "\n" not in text


def test_the_fragment_names_each_host_s_runs(alloc_site):
    desc, _ = alloc_site
    text = fragments.texts(desc)["slurm-ipu.conf"]
    assert "#   ipu-host[1-2]: Features=ipugroup2_0" in text.splitlines()
    assert "#   ipu-host[7-8]: Features=ipugroup2_3" in text.splitlines()


def test_a_site_limiting_what_it_propagates_keeps_its_own_line(site):
    desc, etc = site
    (etc / "slurm.conf").write_text(SITE_CONF + "PropagateResourceLimits=NOFILE,STACK\n")
    values = merge.merge(desc, str(etc / "slurm.conf")).values
    assert "PropagateResourceLimitsExcept" not in values  # the two exclude each other; theirs passes no memlock


def test_render_says_when_it_did_not_merge(tmp_path):
    site = ROOT / "tests" / "unit" / "golden" / "site-pod64.yaml"
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "render", str(site), "--out", str(tmp_path / "o"),
                           "--slurm-conf", "none"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "render: not merged with a slurm.conf (--slurm-conf none)" in proc.stderr


def test_slurm_conf_is_read_as_slurm_reads_it(tmp_path):
    """Several pairs a line, quotes, `\\#`, continuations, case-insensitive keys, Include globs
    relative to slurm.conf, node and partition records skipped, an Include loop named."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "a.conf").write_text("licenses=fluent:2\n")
    (tmp_path / "conf.d" / "b.conf").write_text("GresTypes=gpu # gpus\n")
    (tmp_path / "slurm.conf").write_text(
        'ClusterName=c SlurmctldTimeout=60\nSchedulerParameters="bf_continue,x=a b"\nMailProg=/bin/ma\\#il\n'
        "TaskPlugin=task/affinity,\\\ntask/cgroup\nNodeName=n1 Gres=gpu:1\nPartitionName=p Nodes=ALL\n"
        "Include conf.d/*.conf\n")
    conf = slurmconf.read(str(tmp_path / "slurm.conf"))
    got = {s.key: (s.value, s.line, s.span) for s in conf.settings}
    assert got["SlurmctldTimeout"] == ("60", 1, 1) and got["SchedulerParameters"][0] == "bf_continue,x=a b"
    assert got["MailProg"][0] == "/bin/ma#il" and got["TaskPlugin"] == ("task/affinity,task/cgroup", 4, 2)
    assert slurmconf.last(conf.settings)["licenses"].path == str(tmp_path / "conf.d" / "a.conf")
    assert "NodeName" not in got and "PartitionName" not in got and len(conf.files) == 3
    (tmp_path / "conf.d" / "a.conf").write_text(f"Include {tmp_path}/slurm.conf\n")
    with pytest.raises(ConfigError, match="over 64 slurm.conf files through Include; is there an Include loop"):
        slurmconf.read(str(tmp_path / "slurm.conf"))


@pytest.mark.skipif(PATCH is None, reason="GNU patch is not installed")
def test_unmerge_gives_the_site_s_files_back_after_any_number_of_re_renders(site, tmp_path):
    """Merge, change the site description (the Pod's hosts get 8 IPUs, not
    16) and merge that diff too, then a line of the site's own later: `slurm-ipu unmerge`
    writes one diff back to the files as they were before slurm-ipu (with the site's later line),
    from what the merge left in them, not from the last diff render wrote."""
    desc, etc = site
    conf = SITE_CONF.replace("NodeName=ipu-host[1-8] Gres=gpu:1 CPUs=4\n",
                             "NodeName=DEFAULT Gres=gpu:1\nNodeName=ipu-host[1-8] CPUs=4  # racks 1-2\n")
    (etc / "slurm.conf").write_text(conf)
    before = {p.name: p.read_bytes() for p in etc.iterdir()}

    def merged_with(description) -> None:
        out = tmp_path / "out"
        fragments.write(description, out, str(etc / "slurm.conf"))
        if (out / fragments.DIFF).exists():
            subprocess.run([PATCH, "-s", "-d", "/", "-p1", "-i", str(out / fragments.DIFF)], check=True, timeout=30)
            (out / fragments.DIFF).unlink()
        shutil.copy(out / "slurm-ipu.conf", etc / "slurm-ipu.conf")

    merged_with(desc)
    assert "NodeName=ipu-host[1-8] CPUs=4 Gres=gpu:1,ipu:16 # racks 1-2" in (etc / "slurm.conf").read_text()
    text = (tmp_path / "site.yaml").read_text().replace("ipus_per_host: 16", "ipus_per_host: 8")
    (tmp_path / "site.yaml").write_text(text)
    merged_with(config.load(str(tmp_path / "site.yaml"), environ={}))
    assert "NodeName=ipu-host[1-8] CPUs=4 Gres=gpu:1,ipu:8 # racks 1-2" in (etc / "slurm.conf").read_text()
    with open(etc / "slurm.conf", "a") as f:
        f.write("MailProg=/usr/bin/site-mail\n")  # the site's own change, later: it stays
    before["slurm.conf"] += b"MailProg=/usr/bin/site-mail\n"
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "unmerge", "--site", str(tmp_path / "site.yaml"),
                           "--out", str(tmp_path / "back")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    subprocess.run([PATCH, "-s", "-d", "/", "-p1", "-i", str(tmp_path / "back" / "slurm.conf.unmerge.diff")],
                   check=True, timeout=30)
    (etc / "slurm-ipu.conf").unlink()
    assert {p.name: p.read_bytes() for p in etc.iterdir()} == before
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "unmerge", "--site", str(tmp_path / "site.yaml"),
                           "--out", str(tmp_path / "again")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "nothing of slurm-ipu's in" in proc.stderr


def _configless(etc: Path, plugstack: str | None) -> None:
    (etc / "slurm.conf").write_text(SITE_CONF.replace("SlurmctldHost=ctl\n",
                                                      "SlurmctldHost=ctl\nSlurmctldParameters=enable_configless\n"))
    (etc / "plugstack.conf.d").mkdir()
    (etc / "plugstack.conf.d" / "pyxis.conf").write_text("required /usr/lib/slurm/spank_pyxis.so\n")
    if plugstack is not None:
        (etc / "plugstack.conf").write_text(plugstack)


def _patched(desc, etc: Path, out: Path) -> None:
    fragments.write(desc, out, str(etc / "slurm.conf"))
    subprocess.run([PATCH, "-s", "-d", "/", "-p1", "-i", str(out / fragments.DIFF)], check=True, timeout=30)
    shutil.copy(out / "slurm-ipu.conf", etc / "slurm-ipu.conf")


@pytest.mark.skipif(PATCH is None, reason="GNU patch missing: `make test` installs it")
@pytest.mark.parametrize("plugstack", [None, "include {etc}/plugstack.conf.d/*.conf\n",
                                       "include plugstack.conf.d/*  # relative, as Slurm resolves it\n"])
def test_a_configless_site_gets_the_plugin_s_line_in_plugstack_conf_itself(site, tmp_path, plugstack):
    """A configless site with its own plugstack.conf.d include: slurmctld sends plugstack.conf and
    never what an absolute path or a glob names, so an IPU job ran without its partition. The diff
    puts the line in plugstack.conf itself, keeps the site's include, renders again to nothing new,
    and unmerges byte for byte."""
    from slurm_ipu.slurm.conf import plugstack_entries, sent_plugstack_lines

    desc, etc = site
    _configless(etc, plugstack and plugstack.format(etc=etc))
    before = {p.name: p.read_bytes() for p in etc.iterdir() if p.is_file()}
    _patched(desc, etc, tmp_path / "out")
    sent = sent_plugstack_lines(str(etc / "plugstack.conf"), "22.05")
    assert [ln for ln in sent if "spank_ipu" in ln] == [fragments.plugin_line(
        fragments.texts(desc)["plugstack-ipu.conf"]).split("#")[0].strip()]
    loaded = [ln for _, ln in plugstack_entries(str(etc / "plugstack.conf"))]
    assert sum("spank_ipu" in ln for ln in loaded) == 1
    assert any("spank_pyxis" in ln for ln in loaded) == (plugstack is not None)  # the site's own stays
    again = fragments.texts(desc, str(etc / "slurm.conf"))
    assert "plugstack.conf" not in again.get(fragments.DIFF, "")
    back = merge.unmerge(desc, str(etc / "slurm.conf"))
    for path, (_, text) in back.items():
        Path(path).write_text(text)
    (etc / "slurm-ipu.conf").unlink()
    if plugstack is None:
        assert (etc / "plugstack.conf").read_text() == ""  # made by the merge: empty again, for the admin to remove
        (etc / "plugstack.conf").unlink()
    assert {p.name: p.read_bytes() for p in etc.iterdir() if p.is_file()} == before


def test_a_configless_site_s_changed_description_updates_the_line_the_merge_added(site, tmp_path):
    desc, etc = site
    _configless(etc, f"include {etc}/plugstack.conf.d/*.conf\n")
    _patched(desc, etc, tmp_path / "one")
    moved = config.reread(desc, partition__prefix="ipu_")
    _patched(moved, etc, tmp_path / "two")
    lines = [ln for ln in (etc / "plugstack.conf").read_text().splitlines() if "spank_ipu" in ln]
    assert len(lines) == 1 and "prefix=ipu_ " in lines[0] and lines[0].endswith(slurmconf.ADDED), lines


@pytest.mark.parametrize("where,words", [
    ("included", "plugstack.conf.d/slurm-ipu.conf, included by {etc}/plugstack.conf, loads spank_ipu.so, which "
                 "configless nodes never get"),
    ("PlugStackConfig", "PlugStackConfig=/etc/slurm/spank.conf on a configless site: its nodes read their own copy"),
])
def test_a_configless_site_whose_plugin_line_nodes_never_get_is_one_line(site, where, words):
    desc, etc = site
    _configless(etc, f"include {etc}/plugstack.conf.d/*.conf\n")
    if where == "included":  # the non-configless advice, followed on a configless site
        (etc / "plugstack.conf.d" / "slurm-ipu.conf").write_text(fragments.texts(desc)["plugstack-ipu.conf"])
    else:
        with open(etc / "slurm.conf", "a") as f:
            f.write("PlugStackConfig=/etc/slurm/spank.conf\n")
    with pytest.raises(ConfigError, match="render: ") as refused:
        fragments.texts(desc, str(etc / "slurm.conf"))
    assert words.format(etc=etc) in str(refused.value) and "\n" not in str(refused.value)


def test_a_site_that_is_not_configless_keeps_its_plugstack_conf(site):
    desc, etc = site
    (etc / "plugstack.conf").write_text(f"include {etc}/plugstack.conf.d/*.conf\n")
    assert "plugstack.conf" not in fragments.texts(desc, str(etc / "slurm.conf")).get(fragments.DIFF, "")


# --- hosts of different IPU counts ----------------------------------------------------------------

@pytest.fixture
def sizes_site(site, tmp_path):
    """Pod b cabled to two hosts of 32 IPUs (ipu-host[5-6]) beside Pod a's four of 16."""
    _, etc = site
    path = tmp_path / "site.yaml"
    path.write_text(path.read_text().replace("    hosts: ipu-host[5-8]\n",
                                             "    hosts: ipu-host[5-6]\n    ipus_per_host: 32\n", 1))
    return config.load(str(path), environ={}), etc


def test_each_host_gets_the_gres_and_size_feature_of_its_pod(sizes_site, tmp_path):
    desc, etc = sizes_site
    conf = SITE_CONF.replace("NodeName=ipu-host[1-8] Gres=gpu:1 CPUs=4\n",
                             "NodeName=ipu-host[1-4] Gres=gpu:1 CPUs=4\nNodeName=ipu-host[5-6] CPUs=8\n")
    (etc / "slurm.conf").write_text(conf)
    lines = _merged_conf(desc, etc).splitlines()
    assert "NodeName=ipu-host[1-4] Gres=gpu:1,ipu:16 CPUs=4 Features=ipuhost16" in lines
    assert "NodeName=ipu-host[5-6] CPUs=8 Gres=ipu:32 Features=ipuhost32" in lines
    texts = fragments.texts(desc, str(etc / "slurm.conf"))
    gres = [line for line in texts["gres-ipu.conf"].splitlines() if line.startswith("NodeName=")]
    assert gres == ["NodeName=ipu-host[1-4] Name=ipu Count=16", "NodeName=ipu-host[5-6] Name=ipu Count=32"]
    hint = texts["slurm-ipu.conf"]
    assert "# Add Gres=ipu:32 to the NodeName line(s) of: ipu-host[5-6]" in hint and "#   ipu-host[5-6]: " \
        "Features=ipuhost32" in hint
    (etc / "slurm.conf").write_text(_merged_conf(desc, etc).replace("Include slurm-ipu.conf\n", ""))
    again = merge.merge(desc, str(etc / "slurm.conf"))
    assert again.features == [] and again.gres == []  # a re-render leaves right lines alone
    assert merge.unmerge(desc, str(etc / "slurm.conf"))[str((etc / "slurm.conf").resolve())][1] == conf


def test_a_nodename_line_over_hosts_of_two_sizes_is_refused_with_the_split(sizes_site):
    desc, etc = sizes_site
    (etc / "slurm.conf").write_text(SITE_CONF.replace("ipu-host[1-8]", "ipu-host[1-6]"))
    with pytest.raises(ConfigError) as err:
        merge.merge(desc, str(etc / "slurm.conf"))
    assert "NodeName=ipu-host[1-6] names hosts of Pods with different IPUs per host; split the line by Pod" \
        in str(err.value) and "\n" not in str(err.value)


def test_a_site_s_own_primary_on_program_stays(site):
    """Slurm runs one SlurmctldPrimaryOnProg: the site's is kept (it may run slurm-ipu-hook for the
    reap at takeover, docs/admin.md), ours is set where the site has none."""
    desc, etc = site
    assert merge.merge(desc, str(etc / "slurm.conf")).values["SlurmctldPrimaryOnProg"] == desc.path("hook")
    (etc / "slurm.conf").write_text(SITE_CONF + "SlurmctldPrimaryOnProg=/etc/slurm/vip-up.sh\n")
    merged = merge.merge(desc, str(etc / "slurm.conf"))
    assert merged.values["SlurmctldPrimaryOnProg"] == "/etc/slurm/vip-up.sh"
