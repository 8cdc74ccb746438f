"""Submission through slurmrestd's JSON API, as a portal or a workflow engine submits: no sbatch,
no SPANK plugin on the client's side, the request's fields as JSON (`tres_per_node`,
`licenses`). An IPU job gets what sbatch's gets (its partition, in its task, gone after); a
request sbatch's users are refused is refused, with the closest error Slurm can name (a REST
client sees no job_submit message). API v0.0.42, the one 24.11 and 26.05 both serve."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from slurm_ipu import lab as labmod
from slurm_ipu.slurm import releases

from ..waiting import wait_for
from .conftest import SLURM_VERSION, wait_gone

pytestmark = [pytest.mark.usefixtures("users"),
              pytest.mark.skipif(not releases.at_least(SLURM_VERSION, "24.11"),
                                 reason=f"Slurm {SLURM_VERSION}: slurmrestd serves v0.0.42 from 24.11")]
USER = "slurmipu-a"
API = "v0.0.42"
# What the user's client runs: HTTP over slurmrestd's Unix socket (rest_auth/local: the peer's uid
# is the user, and must be slurmrestd's own).
CLIENT = """
import http.client, socket, sys
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(60)
        self.sock.connect(sys.argv[1])
conn = Unix("localhost", timeout=60)
body = sys.stdin.read()
conn.request(sys.argv[2], sys.argv[3], body=body or None, headers={"Content-Type": "application/json"})
reply = conn.getresponse()
print(reply.status)
print(reply.read().decode(errors="replace"))
"""


@pytest.fixture(scope="module")
def rest(lab, users):
    """slurmrestd as the user, on a socket of theirs: (the socket, the user's directory)."""
    binary = shutil.which("slurmrestd", path=f"{lab.spec.path('bin')}:{labmod.SBIN}:/usr/sbin:/usr/bin")
    assert binary, "slurmrestd is missing: `make test` installs Debian's slurmrestd"
    home = lab.spec.path("users", "rest")
    home.mkdir(exist_ok=True)
    uid = int(lab.run("id", "-u", USER, check=True).stdout)
    os.chown(home, uid, -1)
    sock = home / "rest.sock"
    sock.unlink(missing_ok=True)
    log = open(lab.spec.path("log", "slurmrestd.log"), "ab")
    proc = lab.popen_as(USER, binary, "-a", "rest_auth/local", "-s", "openapi/slurmctld", "-d", f"data_parser/{API}",
                        f"unix:{sock}", stdout=log, stderr=log)
    try:
        wait_for("slurmrestd listening", lambda: proc.poll() is not None or sock.exists(), 30)
        assert proc.poll() is None, lab.spec.path("log", "slurmrestd.log").read_text()[-2000:]
        yield sock, home
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def call(lab, rest, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    sock, _ = rest
    proc = lab.run_as(USER, "/usr/bin/python3", "-c", CLIENT, str(sock), method, path,
                      stdin=json.dumps(body) if body else "")
    assert proc.returncode == 0, proc.stderr
    status, _, text = proc.stdout.partition("\n")
    return int(status), json.loads(text)


def submit(lab, rest, **fields) -> tuple[int, dict]:
    _, home = rest
    job = {"name": "rest-ipu", "script": "#!/bin/sh\nprintenv IPUOF_VIPU_API_PARTITION_ID\n",
           "current_working_directory": str(home), "standard_output": f"{home}/rest-%j.out",
           "environment": ["PATH=/usr/bin:/bin"], **fields}
    return call(lab, rest, "POST", f"/slurm/{API}/job/submit", {"job": job})


def errors(reply: dict) -> list[str]:
    return [e.get("error", "") for e in reply.get("errors", [])]


@pytest.mark.parametrize("tres", ["gres/ipu:4", "gres:ipu:4"])
def test_an_ipu_job_through_rest_gets_its_partition_and_leaves_nothing(clean_lab, rest, tres):
    lab = clean_lab
    status, reply = submit(lab, rest, tres_per_node=tres, nodes="2")
    assert status == 200 and not errors(reply), reply
    job = int(reply["job_id"])
    wait_gone(lab, job)
    out = rest[1] / f"rest-{job}.out"
    assert out.read_text().split() == [f"slurm_{job}"], out.read_text()
    wait_for(f"slurm_{job} removed", lambda: f"slurm_{job}" not in lab.partitions(), 60)


@pytest.mark.parametrize("fields,error", [
    ({"tres_per_node": "gres/ipu:3"}, "Invalid generic resource (gres) specification"),
    ({"tres_per_node": "gres/ipu:32", "nodes": "4"}, "Invalid generic resource (gres) specification"),
    ({"licenses": "ipu:4"}, "Invalid license specification"),
])
def test_what_sbatch_refuses_rest_refuses_with_slurm_s_nearest_words(clean_lab, rest, fields, error):
    """A REST client sees no job_submit message: the code says what was wrong, not "Unspecified
    error", and no job exists."""
    lab = clean_lab
    status, reply = submit(lab, rest, **fields)
    assert status != 200 and error in errors(reply), reply
    assert lab.run("squeue", "-h", "-o", "%A").stdout.split() == []
    assert lab.partitions() == {}
