"""Who is calling the emulator, taken from the connection, never from what the caller says.

The real V-IPU controller authenticates its users (`--api-user-id`/`--api-access-key` when it runs
with `--secure`); the emulator stands in for it on one machine, so it asks the kernel instead. Its
API and admin sockets are unix sockets: the peer's credentials (SO_PEERCRED) are fixed when the
client connects, so the caller is known at accept, before a byte of the request is read, and no
later state of the client's socket (closed, half-closed, handed to another process) changes the
answer. The loopback TCP port, which IPUOF_VIPU_API_HOST/PORT name, cannot tell who connected:
its callers are ANONYMOUS, who may only ask what any host may (the version, the clusters).
"""

from __future__ import annotations

import socket
import struct

ANONYMOUS = -1  # a TCP caller: never root, never any user
ANONYMOUS_ROUTES = frozenset({"version", "clusters"})


def unix_peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]
