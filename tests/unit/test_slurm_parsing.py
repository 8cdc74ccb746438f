"""Hostlists and squeue --json, malformed input included."""

import pytest

from slurm_ipu.errors import ConfigError, SlurmError
from slurm_ipu.slurm.commands import parse_squeue_json
from slurm_ipu.slurm.hostlist import expand


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
])
def test_squeue_json(text, jobs):
    assert parse_squeue_json(text) == jobs


@pytest.mark.parametrize("text", ["", "[]", '{"nojobs": 1}', "not json"])
def test_squeue_json_malformed(text):
    with pytest.raises(SlurmError, match="unexpected"):
        parse_squeue_json(text)
