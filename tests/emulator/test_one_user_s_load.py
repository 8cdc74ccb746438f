"""2,000 connections held idle by one user leave every other user's calls as they were: the
emulator keeps at most PER_CALLER of a user's connections open (the rest are closed
unanswered), knows each caller in O(1) at accept, and closes idle connections itself. How long a
job start takes meanwhile is measured in tests/bench/idle_connections.py, not here."""

from __future__ import annotations

import select
import subprocess

from slurm_ipu.emulator import server
from slurm_ipu.emulator.api import SOCKET_PREFIX

from ..waiting import wait_for
from .test_identity import NOBODY, as_user, call_as, needs_root

HOLD = """
import resource, socket, sys
port, prefix, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 64), hard))
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\\0" + prefix + port)
    held.append(s)
print("holding", len(held), flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def _first_line(proc: subprocess.Popen, timeout: float = 60) -> list[str]:
    """The hog's first line, within `timeout`: a server that stopped accepting (its listen
    queue full) leaves a hog blocked in connect, and the test must fail, not hang."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().split() if ready else ["no line within", f"{timeout:g}s"]


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("Threads:"))


@needs_root
def test_a_user_holding_2000_connections_does_not_starve_another(emu):
    argv = ["/usr/bin/python3", "-I", "-c", HOLD, str(emu.port), SOCKET_PREFIX, "2000"]
    hog = subprocess.Popen(as_user(NOBODY, argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        assert _first_line(hog) == ["holding", "2000"]
        # Every connection past the cap was closed unanswered: the server's threads settle there.
        wait_for("the emulator to close the hog's connections past its cap",
                 lambda: _threads(emu.pid) <= server.PER_CALLER + 16 or None, timeout=60)
        alice = 4201
        status, doc = call_as(alice, emu.port, "POST", "/v1/partitions", {"name": "alices", "size": 4})
        assert status == 201 and doc["partition"]["spec"]["owner_uid"] == alice
        status, _ = call_as(alice, emu.port, "DELETE", "/v1/partitions/alices")
        assert status == 200
    finally:
        hog.stdin.close()
        hog.wait(30)
    wait_for("the hog's threads to end with its connections", lambda: _threads(emu.pid) <= 16 or None, timeout=60)


@needs_root
def test_many_users_holding_connections_fill_a_bounded_pool_and_the_hooks_calls_go_on(emu):
    """Past ALL_CALLERS open for all users together, users' new connections are closed: the
    threads users can make are bounded. Root's (the hooks') calls are not counted. Unbounded,
    1,280 connections left the emulator unable to start a thread ("can't start new thread"),
    its listen queue full and every caller blocked."""
    users = range(4301, 4301 + (server.ALL_CALLERS // server.PER_CALLER) + 1)  # one user more than fits
    hogs = [subprocess.Popen(as_user(uid, ["/usr/bin/python3", "-I", "-c", HOLD, str(emu.port), SOCKET_PREFIX,
                                           str(server.PER_CALLER)]),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
            for uid in users]
    try:
        for hog in hogs:
            assert _first_line(hog) == ["holding", str(server.PER_CALLER)]
        wait_for("the emulator to close what is past its bound for all users",
                 lambda: _threads(emu.pid) <= server.ALL_CALLERS + 16 or None, timeout=60)
        status, doc = call_as(0, emu.port, "POST", "/v1/partitions", {"name": "hooks", "size": 4})
        assert status == 201, doc
        assert call_as(0, emu.port, "DELETE", "/v1/partitions/hooks")[0] == 200
    finally:
        for hog in hogs:
            hog.stdin.close()
        for hog in hogs:
            try:
                hog.wait(30)
            except subprocess.TimeoutExpired:  # still blocked in connect: ours to stop
                hog.kill()
                hog.wait(30)
    wait_for("the hogs' threads to end with their connections", lambda: _threads(emu.pid) <= 16 or None, timeout=60)
