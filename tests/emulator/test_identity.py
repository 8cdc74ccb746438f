"""The emulator knows its caller from the connection, not from what the caller claims, and
serves its admin API on the admin socket only.

A non-root caller is a real process of another uid (setpriv), speaking raw HTTP with the
system Python, so nothing of ours runs on its side to be trusted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from slurm_ipu.emulator.api import SOCKET_PREFIX

from ..waiting import wait_for

NOBODY = 65534
SETPRIV = shutil.which("setpriv")
# argv: method path body port transport socket-prefix. "unix": the API socket `vipu` uses (abstract:
# the NUL is added here, argv cannot carry it); "tcp": the loopback port IPUOF_VIPU_API_PORT names.
CALL = """
import http.client, json, socket, sys
method, path, body, port, transport, prefix = sys.argv[1:7]
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect("\\0" + prefix + port)
conn = (http.client.HTTPConnection("127.0.0.1", int(port), timeout=10) if transport == "tcp"
        else Unix("localhost", timeout=10))
conn.request(method, path, body=body or None, headers={"X-Vipu-Uid": "0", "Content-Type": "application/json"})
resp = conn.getresponse()
print(resp.status, resp.read().decode())
"""


def as_user(uid: int, argv: list[str]) -> list[str]:
    if uid != os.getuid():
        argv = [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
    return argv


def call_as(uid: int, port: int, method: str, path: str, body: dict | None = None,
            transport: str = "unix") -> tuple[int, dict]:
    argv = ["/usr/bin/python3", "-I", "-c", CALL, method, path, json.dumps(body) if body else "", str(port),
            transport, SOCKET_PREFIX]
    proc = subprocess.run(as_user(uid, argv), capture_output=True, text=True, timeout=30, cwd="/")
    assert proc.returncode == 0, proc.stderr
    status, _, text = proc.stdout.partition(" ")
    return int(status), json.loads(text)


needs_root = pytest.mark.skipif(os.getuid() != 0 or SETPRIV is None, reason="needs root and setpriv")


@needs_root
def test_a_forged_uid_header_changes_nothing(emu, api):
    api.create_partition(name="roots", size=4)  # owned by root, the caller
    status, doc = call_as(NOBODY, emu.port, "DELETE", "/v1/partitions/roots")
    assert status == 403 and "belongs to uid 0, not uid 65534" in doc["error"]["message"]
    status, doc = call_as(NOBODY, emu.port, "POST", "/v1/attach", {"partition": "roots", "gcd": 0, "uid": 0,
                                                                  "host": "node1"})
    assert status == 403 and "uid 65534 may not attach as uid 0" in doc["error"]["message"]
    status, doc = call_as(NOBODY, emu.port, "POST", "/v1/partitions", {"name": "mine", "size": 4, "owner_uid": 0})
    assert status == 403 and "may not create a partition owned by uid 0" in doc["error"]["message"]
    assert [p["partition"]["id"] for p in api.list_partitions()] == ["roots"]


@needs_root
def test_a_user_granted_an_allocation_still_creates_only_for_themselves(emu, api):
    """Inside their job's allocation a user made partitions owned by another user,
    under names that user's scripts or jobs then found taken."""
    api.create_allocation("c9", ["ag0", "ag1"], [NOBODY])
    status, doc = call_as(NOBODY, emu.port, "POST", "/v1/partitions",
                          {"name": "p10", "size": 4, "allocation": "c9", "owner_uid": 4343})
    assert status == 403 and "a user creates partitions of their own" in doc["error"]["message"]
    status, doc = call_as(NOBODY, emu.port, "POST", "/v1/partitions", {"name": "p9", "size": 4, "allocation": "c9"})
    assert status == 201 and doc["partition"]["spec"]["owner_uid"] == NOBODY


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_the_admin_api_is_not_served_on_the_api(emu, admin, transport):
    status, doc = call_as(os.getuid(), emu.port, "POST", "/admin/crash", transport=transport)
    assert status == 403 and "admin API is served on STATE_DIR/admin.sock only" in doc["error"]["message"]
    assert admin.check()["ok"]  # the server is still up, and the socket answers


def test_a_tcp_caller_is_anonymous_even_root(emu, api):
    """The TCP port cannot tell who connected: root's own calls there are an anonymous caller's."""
    api.create_partition(name="roots", size=4)
    status, doc = call_as(os.getuid(), emu.port, "GET", "/v1/version", transport="tcp")
    assert status == 200 and doc["emulator"] is True
    for method, path, body in [("DELETE", "/v1/partitions/roots", None), ("GET", "/v1/partitions", None),
                               ("GET", "/v1/partitions/roots", None), ("POST", "/v1/partitions/roots/reset", None),
                               ("POST", "/v1/partitions", {"name": "anon", "size": 4}),
                               ("POST", "/v1/attach", {"partition": "roots", "gcd": 0, "uid": 0, "host": "h"}),
                               ("POST", "/v1/allocations", {"name": "c1", "agents": ["ag0"]})]:
        status, doc = call_as(os.getuid(), emu.port, method, path, body, transport="tcp")
        assert status == 403 and "an anonymous caller (loopback TCP)" in doc["error"]["message"], (method, path)
    assert [p["partition"]["id"] for p in api.list_partitions()] == ["roots"]


# A caller that sends a request whose body keeps the server parsing, and closes at once (the
# emulator once read the caller's uid from /proc/net/tcp after the body, when a closed
# client's entry reads uid 0). 50 times on each transport, all without waiting for a reply.
RACE = """
import json, socket, sys
port, prefix, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = json.dumps({"name": "stolen", "size": 4, "owner_uid": 0, **{f"k{i}": i for i in range(50000)}}).encode()
for i in range(count):
    for transport in ("unix", "tcp"):
        for method, path in (("DELETE", "/v1/partitions/roots"), ("POST", "/v1/partitions")):
            if transport == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect("\\0" + prefix + port)
            else:
                s = socket.create_connection(("127.0.0.1", int(port)))
            head = f"{method} {path} HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: {len(body)}\\r\\n\\r\\n".encode()
            s.sendall(head + body)
            s.close()
print("sent")
"""


@needs_root
def test_a_caller_that_closes_mid_request_acts_as_itself(emu, api, admin):
    api.create_partition(name="roots", size=4)
    before = admin.served()
    argv = ["/usr/bin/python3", "-I", "-c", RACE, str(emu.port), SOCKET_PREFIX, "50"]
    proc = subprocess.run(as_user(NOBODY, argv), capture_output=True, text=True, timeout=120, cwd="/")
    assert proc.returncode == 0 and "sent" in proc.stdout, proc.stderr
    wait_for("the server to have handled all 200 requests", lambda: admin.served() >= before + 200, timeout=120)
    parts = {p["partition"]["id"]: p["partition"]["spec"]["owner_uid"] for p in api.list_partitions()}
    assert parts == {"roots": 0}


# --- grants: V-IPU only through Slurm --------------------------------

GRANTED_CLUSTER = """version: 1
name: granted
ilds: 1
allocations:
  slurm: all
  poda: [ag0, ag1, ag2, ag3]
grants:
  slurm: [{hooks}]
admins: [{hooks}]
reserved: ["slurm_", "c"]
"""


@pytest.fixture
def granted(tmp_path):
    """A Pod whose only allocation is granted to the hooks' user (uid 4242 here: not root, as a
    site's SlurmUser), with a Pod allocation nested in it that names no grant of its own."""
    from slurm_ipu.emulator.process import EmulatorProcess

    path = tmp_path / "cluster.yaml"
    path.write_text(GRANTED_CLUSTER.format(hooks=HOOKS))
    proc = EmulatorProcess.start(tmp_path / "state", cluster=str(path))
    yield proc
    proc.stop()


HOOKS, ALICE = 4242, NOBODY


@needs_root
def test_only_the_granted_user_creates_in_a_granted_allocation(granted):
    create = {"name": "hog", "size": 64, "allocation": "slurm"}
    status, doc = call_as(ALICE, granted.port, "POST", "/v1/partitions", create)
    assert status == 403 and doc["error"]["code"] == "PERMISSION_DENIED"
    assert "may not create partitions in allocation slurm: it is granted to other users" in doc["error"]["message"]
    # nor in an allocation nested in it, whose IPUs are the granted allocation's too
    status, doc = call_as(ALICE, granted.port, "POST", "/v1/partitions", dict(create, allocation="poda", size=16))
    assert status == 403 and "allocation poda" in doc["error"]["message"]
    # the hooks' user makes a job's partition for the job's user, who may then reset or remove it
    status, doc = call_as(HOOKS, granted.port, "POST", "/v1/partitions",
                          {"name": "slurm_7", "size": 4, "allocation": "slurm", "owner_uid": ALICE})
    assert status == 201 and doc["partition"]["spec"]["owner_uid"] == ALICE
    call_as(HOOKS, granted.port, "POST", "/v1/partitions", {"name": "slurm_8", "size": 4, "allocation": "slurm",
                                                             "owner_uid": 4343})
    status, doc = call_as(ALICE, granted.port, "GET", "/v1/partitions")  # her job's partition only
    assert status == 200 and [p["partition"]["id"] for p in doc["partitions"]] == ["slurm_7"]
    status, doc = call_as(HOOKS, granted.port, "GET", "/v1/partitions")
    assert sorted(p["partition"]["id"] for p in doc["partitions"]) == ["slurm_7", "slurm_8"]
    call_as(HOOKS, granted.port, "DELETE", "/v1/partitions/slurm_8")
    status, doc = call_as(ALICE, granted.port, "POST", "/v1/partitions/slurm_7/reset")
    assert status == 200, doc
    status, _ = call_as(ALICE, granted.port, "DELETE", "/v1/partitions/slurm_7")
    assert status == 200


@needs_root
def test_without_a_grant_a_user_creates_only_for_themselves(emu):
    status, doc = call_as(NOBODY, emu.port, "POST", "/v1/partitions", {"name": "mine", "size": 4})
    assert status == 201 and doc["partition"]["spec"]["owner_uid"] == NOBODY


def test_grants_name_known_allocations_and_users():
    from slurm_ipu.emulator.model import cluster_from_dict
    from slurm_ipu.errors import ConfigError

    with pytest.raises(ConfigError, match="grants names allocation 'nope'; allocations: default"):
        cluster_from_dict({"grants": {"nope": [0]}})
    with pytest.raises(ConfigError, match="no user 'no-such-user-here' on this machine"):
        cluster_from_dict({"grants": {"default": ["no-such-user-here"]}})
    cluster = cluster_from_dict({"grants": {"default": ["root"]}})
    assert cluster.granted("default", 0) is True and cluster.granted("default", 5) is False
    assert cluster_from_dict({}).granted("default", 5) is None


@needs_root
def test_another_user_s_partition_is_not_shown_by_get_or_ipuof_either(granted):
    """`list` hid other users' partitions, but get and the IPUoF configuration
    showed any of them (owner, hosts, IPUs) to anyone who named it."""
    for name, owner in (("slurm_7", ALICE), ("slurm_8", 4343)):
        status, _ = call_as(HOOKS, granted.port, "POST", "/v1/partitions",
                            {"name": name, "size": 4, "allocation": "slurm", "owner_uid": owner, "hosts": ["node1"]})
        assert status == 201
    for path in ("/v1/partitions/slurm_8", "/v1/partitions/slurm_8/ipuof?gcd=0"):
        status, doc = call_as(ALICE, granted.port, "GET", path)
        assert status == 403 and "partition slurm_8 is not yours (uid 65534)" in doc["error"]["message"], path
        assert "4343" not in json.dumps(doc) and "node1" not in json.dumps(doc)
    status, doc = call_as(ALICE, granted.port, "GET", "/v1/partitions/slurm_7")
    assert status == 200 and doc["partition"]["spec"]["hosts"] == ["node1"]
    status, doc = call_as(HOOKS, granted.port, "GET", "/v1/partitions/slurm_8/ipuof?gcd=0")
    assert status == 200 and len(doc["ipus"]) == 4


def test_the_emulator_s_files_are_its_own(emu, api):
    api.create_partition(name="p", size=4)
    # others may reach the API socket in it by name (api-PORT.sock), never list, read or create
    assert os.stat(emu.state_dir).st_mode & 0o777 == 0o711
    assert os.stat(emu.state_dir / f"api-{emu.port}.sock").st_mode & 0o777 == 0o666
    for name in ("vipu.sqlite", "server.json"):
        assert os.stat(emu.state_dir / name).st_mode & 0o077 == 0, name


@needs_root
def test_a_job_s_name_is_the_hooks_alone(granted):
    """Inside their own allocation a user made `slurm_<another job>`, and that job
    was held for an admin when its prolog found the name taken."""
    from slurm_ipu.emulator.api import Api

    status, doc = call_as(HOOKS, granted.port, "POST", "/v1/partitions",  # the hooks, an admin: theirs to make
                          {"name": "slurm_8", "size": 4, "allocation": "slurm", "owner_uid": ALICE})
    assert status == 201 and doc["partition"]["spec"]["owner_uid"] == ALICE
    Api("127.0.0.1", granted.port, timeout=10).create_allocation("c9", ["ag4", "ag5"], [ALICE])
    for name in ("slurm_10", "c11", "slurm_0x"):
        status, doc = call_as(ALICE, granted.port, "POST", "/v1/partitions", {"name": name, "size": 4,
                                                                            "allocation": "c9"})
        assert status == 403 and f"partition name {name} is reserved" in doc["error"]["message"], doc
    for name in ("p10", "slurm_x", "cats"):  # a user's own names
        status, doc = call_as(ALICE, granted.port, "POST", "/v1/partitions", {"name": name, "size": 1,
                                                                            "allocation": "c9"})
        assert status == 201, doc


@needs_root
def test_a_job_s_steps_are_named_by_its_user_inside_its_allocation_only(granted):
    """`srun` makes a step's partition (prefix + job + _ + step) as the job's user, in the
    job's allocation; the name stays reserved everywhere else and for everyone else."""
    from slurm_ipu.emulator.api import Api

    api = Api("127.0.0.1", granted.port, timeout=10)
    api.create_allocation("c9", ["ag4", "ag5"], [ALICE])
    api.create_allocation("c12", ["ag6"], [ALICE])
    for name, where in (("slurm_9_3", "c9"), ("slurm_9_4", "c9")):
        status, doc = call_as(ALICE, granted.port, "POST", "/v1/partitions", {"name": name, "size": 4,
                                                                            "allocation": where})
        assert status == 201 and doc["partition"]["spec"]["owner_uid"] == ALICE, doc
    for name, where in (("slurm_10_3", "c9"), ("slurm_9_5", "c12"), ("slurm_9_x", "c9"), ("slurm_9", "c9")):
        status, doc = call_as(ALICE, granted.port, "POST", "/v1/partitions", {"name": name, "size": 1,
                                                                            "allocation": where})
        assert status == 403 and f"partition name {name} is reserved" in doc["error"]["message"], (name, doc)
    status, doc = call_as(4343, granted.port, "POST", "/v1/partitions", {"name": "slurm_9_6", "size": 1,
                                                                       "allocation": "c9"})
    assert status == 403 and "may not create partitions in allocation c9" in doc["error"]["message"], doc
