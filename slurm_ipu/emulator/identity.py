"""Who is calling the emulator, taken from the connection, never from what the caller says.

The real V-IPU controller authenticates its users; the emulator stands in for it on one machine,
so it can ask the kernel instead. On the admin unix socket: SO_PEERCRED. On the loopback TCP API:
the kernel's socket table (/proc/net/tcp, /proc/net/tcp6) lists the caller's end of the
connection with the uid that owns it, as identd does. A caller it cannot place is refused.
"""

from __future__ import annotations

import ipaddress
import socket
import struct


def unix_peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _proc_addr(host: str, port: int) -> str:
    """An address as /proc/net/tcp* prints it: each 32-bit word of the address in host byte
    order (little-endian here), in hex, then the port."""
    packed = ipaddress.ip_address(host).packed
    words = [packed[i:i + 4][::-1] for i in range(0, len(packed), 4)]
    return "".join(w.hex().upper() for w in words) + f":{port:04X}"


def tcp_peer_uid(client: tuple, server: tuple, proc: str = "/proc/net") -> int | None:
    """The uid owning the client's end of a loopback TCP connection to `server`."""
    version = ipaddress.ip_address(client[0]).version
    local, remote = _proc_addr(client[0], client[1]), _proc_addr(server[0], server[1])
    table = f"{proc}/tcp6" if version == 6 else f"{proc}/tcp"
    try:
        with open(table) as fh:
            next(fh, None)  # header
            for line in fh:
                fields = line.split()
                if len(fields) > 7 and fields[1] == local and fields[2] == remote:
                    return int(fields[7])
    except OSError:
        return None
    return None
