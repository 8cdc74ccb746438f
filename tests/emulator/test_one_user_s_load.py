"""2,000 connections held idle by one user leave every other user's calls as they were (issue 35,
item 6): the emulator keeps at most PER_CALLER of a user's connections open (the rest are closed
unanswered), knows each caller in O(1) at accept, and closes idle connections itself. How long a
job start takes meanwhile is measured in tests/bench/idle_connections.py, not here."""

from __future__ import annotations

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


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("Threads:"))


@needs_root
def test_a_user_holding_2000_connections_does_not_starve_another(emu):
    argv = ["/usr/bin/python3", "-I", "-c", HOLD, str(emu.port), SOCKET_PREFIX, "2000"]
    hog = subprocess.Popen(as_user(NOBODY, argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        assert hog.stdout.readline().split() == ["holding", "2000"], hog.stderr.read()
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
