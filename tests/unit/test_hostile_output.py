"""Whatever bytes a user puts in a job's name, comment, account, work directory or script path,
every reader of Slurm's output reads the queue: squeue prints them raw, and one undecodable job
name used to end the slurm-ipu service's removals (a strict UTF-8 decode) and every `status`, `doctor`
and metrics run with it.

The fake Slurm here is at the subprocess boundary: small executables in a bin directory of the
test's own print what the real squeue printed (the fixtures of every data_parser format) with
hostile bytes written into the user's fields, so SlurmCli's own subprocess call and decode run.
"""

from __future__ import annotations

import json
import random
import re
import shlex
from pathlib import Path

import pytest

from slurm_ipu.deploy import doctor, metrics
from slurm_ipu.slurm.commands import SlurmCli

SAMPLES = Path(__file__).parent / "fixtures" / "squeue"
# The fields a job's owner writes (sbatch -J, --comment, -A, --wckey, -D, -o, -e, -i, the script).
USER_FIELDS = ("name", "comment", "account", "wckey", "current_working_directory", "standard_output",
               "standard_error", "standard_input", "command")
# Bytes squeue prints as they are: everything but the quote and backslash its serializers escape.
RAW = bytes(b for b in range(1, 256) if b not in b'"\\')
SEEDS = range(40)


def hostile(rng: random.Random) -> bytes:
    """A value as a hostile user writes it: undecodable bytes, control characters, half a
    multi-byte sequence, long runs."""
    picks = [b"\xff\xfe", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x00"[:0], b"\x1b[2J", b"\n", b"\t", b"\r"]
    parts = [rng.choice(picks) for _ in range(rng.randint(1, 4))]
    parts += [bytes(rng.choice(RAW) for _ in range(rng.randint(0, 40)))]
    rng.shuffle(parts)
    return b"".join(parts)[: rng.choice((8, 64, 300, 5000))] or b"\xff"


def poisoned(sample: bytes, rng: random.Random) -> bytes:
    """The sample with each user field of each job (those present in this format) replaced by
    hostile bytes, as squeue writes them: inside the JSON string, unescaped."""
    def swap(match: re.Match) -> bytes:
        return match.group(1) + hostile(rng) + b'"'

    fields = b"|".join(f.encode() for f in USER_FIELDS)
    return re.sub(rb'("(?:' + fields + rb')":\s*")(?:[^"\\]|\\.)*"', swap, sample)


def fake_slurm(bin_dir: Path, outputs: dict[str, bytes]) -> None:
    """Executables named after Slurm's commands, each printing its bytes whatever its arguments."""
    bin_dir.mkdir(exist_ok=True)
    for tool, data in outputs.items():
        (bin_dir / f"{tool}.out").write_bytes(data)
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(bin_dir / f'{tool}.out'))}\n")
        script.chmod(0o755)


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.json")))
def test_squeue_json_with_hostile_fields_reads_every_job(tmp_path, sample):
    """Every job of every format is read, with its state, whatever its user wrote."""
    data = (SAMPLES / sample).read_bytes()
    want = {int(j["job_id"]["number"] if isinstance(j["job_id"], dict) else j["job_id"])
            for j in json.loads(data)["jobs"]}
    for seed in SEEDS:
        bad = poisoned(data, random.Random(seed))
        assert bad != data
        fake_slurm(tmp_path / "bin", {"squeue": bad})
        cli = SlurmCli(None, str(tmp_path / "bin"))
        assert set(cli.active_jobs()) == want, seed
        assert set(doctor.job_states(cli.output("squeue", "--json"))) == want


def test_fields_come_back_with_replacement_characters(tmp_path):
    """What is read is the user's text with U+FFFD where it was not UTF-8: shown, never fatal."""
    data = b'{"jobs": [{"job_id": 5, "job_state": "RUNNING", "name": "bad\xff\xfename", ' \
           b'"admin_comment": "a\x01b\xc3", "nodes": "node1"}]}'
    fake_slurm(tmp_path / "bin", {"squeue": data})
    cli = SlurmCli(None, str(tmp_path / "bin"))
    from slurm_ipu.slurm.commands import parse_squeue

    job = parse_squeue(cli.output("squeue", "--json"))[5]
    assert (job.state, job.admin_comment, job.nodes) == ("RUNNING", "a\x01b\ufffd", "node1")


@pytest.mark.parametrize("seed", range(10))
def test_squeue_columns_and_sinfo_with_hostile_bytes(tmp_path, seed):
    """The notes' `squeue --Format` read and the health pass's sinfo read: a line of hostile bytes
    among the real ones costs that line, never the others."""
    rng = random.Random(seed)
    columns = (f"{'12':<20}{'RUNNING':<16}slurm-ipu:partition=slurm_12\n").encode() + hostile(rng) + b"\n" + \
        (f"{'13':<20}{'PENDING':<16}".encode() + hostile(rng).replace(b"\n", b" ") + b"\n")
    sinfo = b"node1|idle|none\n" + hostile(rng).replace(b"\n", b" ") + b"\nnode2|drained|" + \
        hostile(rng).replace(b"\n", b" ") + b"\n"
    fake_slurm(tmp_path / "bin", {"squeue": columns, "sinfo": sinfo})
    cli = SlurmCli(None, str(tmp_path / "bin"))
    jobs = cli.jobs([12, 13])
    assert {12, 13} <= set(jobs) and jobs[12].state == "RUNNING" and jobs[13].state == "PENDING"
    reasons = cli.node_reasons()
    assert reasons["node1"] == ("idle", "") and reasons["node2"][0] == "drained"


def test_metrics_read_a_hostile_queue(tmp_path, cfg):
    """`slurm-ipu metrics` counts the IPU jobs of a queue holding hostile job names (V-IPU is
    not reachable here: its source is down, the jobs' series are still there)."""
    data = b'{"jobs": [{"job_id": 5, "job_state": "RUNNING", "name": "x\xff\n\x1b", "tres_per_node": "gres:ipu:4"},' \
           b' {"job_id": 6, "job_state": "PENDING", "name": "\xc3", "tres_per_node": "gres:ipu:4"}]}'
    fake_slurm(tmp_path / "bin", {"squeue": data, "scontrol": b""})
    facts = metrics.gather(cfg, slurm=SlurmCli(None, str(tmp_path / "bin")))
    assert "jobs" not in facts["errors"]
    text = metrics.render(metrics.families(cfg, facts))
    assert 'slurm_ipu_jobs{state="running"} 1' in text and 'slurm_ipu_jobs{state="pending"} 1' in text
    assert 'slurm_ipu_source_up{source="jobs"} 1' in text
