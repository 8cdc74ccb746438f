"""Hostlists and squeue --json, malformed input included."""

from pathlib import Path

import pytest

from slurm_ipu.errors import ConfigError, SlurmError
from slurm_ipu.slurm.commands import parse_squeue, parse_squeue_json
from slurm_ipu.slurm.hostlist import compress, expand


@pytest.mark.parametrize("expr,hosts", [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[1-2,4]", ["node1", "node2", "node4"]),
    ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
    ("node[1-2],login", ["node1", "node2", "login"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("", []),
])
def test_expand(expr, hosts):
    assert expand(expr) == hosts


@pytest.mark.parametrize("expr,words", [
    ("node[1-", "unbalanced '['"), ("node1]", "unbalanced ']'"), ("node[a-b]", "bad range"),
    ("node[3-1]", "backwards"), ("node[1--2]", "bad range"),
])
def test_expand_rejects(expr, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[")):
        expand(expr)


@pytest.mark.parametrize("text,jobs", [
    ('{"jobs": []}', {}),
    ('{"jobs": [{"job_id": 7, "job_state": "RUNNING"}, {"job_id": 8, "job_state": "PENDING"}]}',
     {7: "RUNNING", 8: "PENDING"}),
    ('{"jobs": [{"job_id": 7, "job_state": ["RUNNING", "CONFIGURING"]}]}', {7: "RUNNING"}),
    # up to 23.02 a flag hides the base state; these flags are set only on running jobs
    ('{"jobs": [{"job_id": 7, "job_state": "SIGNALING"}, {"job_id": 8, "job_state": "CONFIGURING"}]}',
     {7: "RUNNING", 8: "RUNNING"}),
    ('{"jobs": [{"job_id": 7, "job_state": "COMPLETING"}, {"job_id": 8, "job_state": ["COMPLETED", "COMPLETING"]}]}',
     {7: "COMPLETING", 8: "COMPLETED"}),
    ('{"jobs": [{"job_id": {"set": true, "infinite": false, "number": 9}, "job_state": []}]}', {9: "UNKNOWN"}),
])
def test_squeue_json(text, jobs):
    assert parse_squeue_json(text) == jobs


@pytest.mark.parametrize("text", ["", "[]", '{"nojobs": 1}', "not json", '{"jobs": [{"job_state": "RUNNING"}]}',
                                  '{"jobs": [{"job_id": "x"}]}', '{"jobs": 3}'])
def test_squeue_json_malformed(text):
    with pytest.raises(SlurmError, match="unexpected"):
        parse_squeue_json(text)


SAMPLES = Path(__file__).parent / "fixtures" / "squeue"


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.json")))
def test_squeue_json_of_every_release(sample):
    """What each release prints for the lab test's three jobs (tests/slurm/test_trust.py, run with
    --squeue-samples): a finished job, a 2-node IPU job running since `start`, a held one."""
    jobs = sorted(parse_squeue((SAMPLES / sample).read_text()).values(), key=lambda j: j.state)
    finished = ["COMPLETED"] if sample == "slurm-22.05.json" else []  # later releases list no finished job
    assert [j.state for j in jobs] == [*finished, "PENDING", "RUNNING"]
    held, running = jobs[-2:]
    assert (running.user, running.nodes) == ("root", "node[1-2]")
    assert running.start and running.start > 1_700_000_000
    assert (held.nodes, held.user) == (None, "root")


def test_every_data_parser_has_a_sample():
    from slurm_ipu.slurm import releases

    formats = {p.stem.split("-")[-1] for p in SAMPLES.glob("*.json")}
    wanted = {v for r in releases.SUPPORTED for v in releases.data_parsers(r)} | {"22.05"}
    assert wanted <= formats, sorted(wanted - formats)


def test_a_configless_node_gets_plugstack_conf_and_only_plain_named_includes_from_23_11(tmp_path):
    from slurm_ipu.slurm.conf import sent_plugstack_lines

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "ipu.conf").write_text("required /lib/spank_ipu.so\n")
    (tmp_path / "ipu.conf").write_text("required /lib/spank_ipu.so plain\n")
    conf = tmp_path / "plugstack.conf"
    conf.write_text(f"optional /lib/site.so\ninclude {tmp_path}/d/*.conf\ninclude ipu.conf\n")
    assert sent_plugstack_lines(str(conf), "22.05.8") == ["optional /lib/site.so"]
    assert sent_plugstack_lines(str(conf), "24.11.5") == ["optional /lib/site.so", "required /lib/spank_ipu.so plain"]


def test_text_after_a_range_is_read_only_before_another_range_as_slurm_does():
    """scontrol show hostnames: node[1-3]x is "Invalid hostlist", rack[1-2]-n[01-02] four names
    (tests/slurm/test_hostlist_fuzz.py holds the reader to scontrol on every release)."""
    import pytest

    from slurm_ipu.errors import ConfigError
    from slurm_ipu.slurm.hostlist import expand

    assert expand("rack[1-2]-n[01-02]") == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    with pytest.raises(ConfigError, match=r"'x' after the range \[1-3\]; Slurm reads text after a range only"):
        expand("node[1-3]x")


@pytest.mark.parametrize("hosts,text", [
    (["node1", "node2", "node4"], "node[1-2,4]"),
    (["n01", "n02", "n10"], "n[01-02,10]"),
    (["n9", "n10"], "n[9-10]"),
    (["n1", "n01"], "n1,n01"),  # one padded, one not: two words
    (["n3", "n1"], "n3,n1"),  # order kept
    (["login", "r1-n1", "r1-n2"], "login,r1-n[1-2]"),
])
def test_compress_folds_numbered_runs_that_expand_reads_back(hosts, text):
    assert compress(hosts) == text and expand(text) == hosts
