"""A small HTTP client for the emulator's API. Standard library only: the `vipu` shim runs it
on every call from the Slurm hooks, so start-up must stay lean."""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct

from ..errors import VipuError, VipuUnavailable
from ..rules import VIPU_PORT

API_VERSION = "1.18.0"  # the V-IPU release whose CLI and API the emulator follows

# Where the emulator serving loopback port P takes its callers: a unix socket in Linux's abstract
# namespace (nothing on disk, open to every user of this network namespace), named for the port,
# so every client that knows the controller's address finds it. On a unix socket the kernel tells
# the server who connected (SO_PEERCRED, fixed at connect), before a byte of the request is read:
# no caller can pass for another. The C `vipu` (spank/lab/vipu_fast.c) is built with this prefix.
#
# It tells the client who serves, too, and the client must ask: any user may bind an abstract name
# the emulator does not hold (after it died, or before it starts), and answer as the controller
# (every IPU-Machine down: root's health pass would drain every host). So every client checks the
# server's uid (check_server) before it sends a request. Beside it the emulator serves the same API
# at STATE_DIR/api-PORT.sock (server_socket), in a directory only its owner can write: nobody else
# can bind that name first, a stale one after a crash is the owner's to replace, so the emulator
# always starts again, and the lab's own commands, which know that directory, use it. Why not that
# path alone: a job's `vipu-emu attach` and every client that knows only IPUOF_VIPU_API_HOST/PORT
# must still find the server from the port.
SOCKET_PREFIX = "vipu-emu:"
SOCKET_DIR_ENV = "VIPU_EMU_SOCKET_DIR"  # the emulator's STATE_DIR: dial STATE_DIR/api-PORT.sock
OWNER_ENV = "VIPU_EMU_OWNER"            # the uid the emulator runs as (default: root or the caller)


def user_socket(port: int) -> str:
    """The emulator's API socket for loopback port `port` (abstract: a leading NUL)."""
    return f"\0{SOCKET_PREFIX}{int(port)}"


def server_socket(state_dir: str, port: int) -> str:
    """The same API at a path in the emulator's state directory, which only its owner can write."""
    return os.path.join(state_dir, f"api-{int(port)}.sock")


def shown(path: str) -> str:
    """A socket's name as messages show it (an abstract one with `@`, as ss and netstat do)."""
    return "@" + path[1:] if path.startswith("\0") else path


def trusted_owners(owner: int | None = None) -> frozenset[int]:
    """Whose server a client believes: the owner given (the lab's), else root and the caller itself
    (the safe-path rule the lab applies to its files: lab/trust.py)."""
    return frozenset({owner}) if owner is not None else frozenset({0, os.geteuid()})


def owner_from_env(environ=os.environ) -> int | None:
    text = environ.get(OWNER_ENV, "")
    if not text:
        return None
    if not text.isdigit():
        raise VipuError(f"{OWNER_ENV}={text!r} is not a uid; give the emulator owner's numeric uid (root: 0)")
    return int(text)


class NotTheEmulator(VipuUnavailable):
    """The socket is served by a process of a uid the client does not trust."""


def check_server(sock: socket.socket, path: str, owners: frozenset[int]) -> None:
    """Refuse, in one line, a server whose uid (SO_PEERCRED, the kernel's) is not one of owners."""
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid in owners:
        return
    expected = " or ".join(f"uid {u}" for u in sorted(owners))
    raise NotTheEmulator(f"V-IPU server at {shown(path)} is served by uid {uid}{_user(uid)} (pid {pid}), not by the "
                         f"emulator's owner ({expected}): another user's process holds its socket; stop it (kill "
                         f"{pid}) and start the emulator again (slurm-ipu lab up), or set {OWNER_ENV} to the uid "
                         "the emulator runs as")


def _user(uid: int) -> str:
    import pwd

    try:
        return f" ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return ""

# Same table as service.CODES, without importing the server side (and sqlite) here.
_ERRORS = {
    "INVALID_ARGUMENT": "InvalidPartition",
    "PERMISSION_DENIED": "PermissionDenied",
    "NOT_FOUND": "PartitionNotFound",
    "ALREADY_EXISTS": "PartitionExists",
    "RESOURCE_EXHAUSTED": "InsufficientIpus",
    "FAILED_PRECONDITION": "PartitionNotReady",
    "INTERNAL": "VipuUnavailable",
    "UNAVAILABLE": "VipuUnavailable",
    "DEADLINE_EXCEEDED": "VipuUnavailable",
}


class ApiError(VipuError):
    """Carries the wire code so the CLI can print it; `typed()` gives the real class."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code

    def typed(self) -> VipuError:
        from .. import errors

        cls = getattr(errors, _ERRORS.get(self.code, "VipuUnavailable"))
        return cls(str(self))


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float, owners: frozenset[int]):
        super().__init__("localhost", timeout=timeout)
        self._path, self._owners = path, owners

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
            check_server(sock, self._path, self._owners)  # before a byte of the request leaves
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Api:
    """The emulator's API as the caller this process is: on its unix socket (user_socket, or
    server_socket in socket_dir when given), where the server knows who connected, after checking
    who serves it (owner: the emulator's uid; default root or this caller); admin_socket: the
    admin API (faults, checks)."""

    def __init__(self, host: str = "127.0.0.1", port: int = VIPU_PORT, timeout: float = 30.0,
                 admin_socket: str | None = None, socket_dir: str | None = None, owner: int | None = None):
        self.host, self.port, self.timeout = host, port, timeout
        self.admin_socket, self.socket_dir = admin_socket, socket_dir
        self.owners = trusted_owners(owner)
        self._conn: http.client.HTTPConnection | None = None

    @property
    def where(self) -> str:
        return self.admin_socket or f"{self.host}:{self.port}"

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.admin_socket:
                self._conn = _UnixConnection(self.admin_socket, self.timeout, self.owners)
            else:
                _loopback_only(self.host, self.port)
                path = server_socket(self.socket_dir, self.port) if self.socket_dir else user_socket(self.port)
                self._conn = _UnixConnection(path, self.timeout, self.owners)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        try:
            conn = self._connection()
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        except NotTheEmulator:
            self.close()
            raise
        except (OSError, http.client.HTTPException) as exc:
            self.close()  # a broken keep-alive connection is never reused
            reason = "timed out" if isinstance(exc, TimeoutError | socket.timeout) else (
                getattr(exc, "strerror", None) or type(exc).__name__)
            raise ControllerUnreachable(f"V-IPU server unavailable at {self.where}: {reason}") from None
        try:
            doc = json.loads(payload or b"{}")
        except ValueError:
            if 400 <= resp.status < 500:  # the request itself was refused: sending it again cannot help
                raise ApiError("INVALID_ARGUMENT", f"V-IPU server at {self.where} refused the request "
                                                   f"(HTTP {resp.status})") from None
            raise VipuUnavailable(f"V-IPU server at {self.where} sent a reply that is not JSON") from None
        if resp.status >= 400:
            err = doc.get("error", {}) if isinstance(doc, dict) else {}
            raise ApiError(str(err.get("code", "INTERNAL")), str(err.get("message", f"HTTP {resp.status}")))
        return doc

    # Thin wrappers, named after the vipu verbs.
    def version(self) -> dict:
        return self.call("GET", "/v1/version")

    def list_partitions(self, allocation: str | None = None) -> list[dict]:
        query = f"?allocation={_quote(allocation)}" if allocation is not None else ""
        return self.call("GET", f"/v1/partitions{query}")["partitions"]

    def create_partition(self, **spec) -> dict:
        return self.call("POST", "/v1/partitions", spec)

    def get_partition(self, name: str) -> dict:
        return self.call("GET", f"/v1/partitions/{_quote(name)}")

    def remove_partition(self, name: str) -> dict:
        return self.call("DELETE", f"/v1/partitions/{_quote(name)}")

    def reset_partition(self, name: str) -> dict:
        return self.call("POST", f"/v1/partitions/{_quote(name)}/reset")

    def ipuof(self, name: str, gcd: int) -> dict:
        return self.call("GET", f"/v1/partitions/{_quote(name)}/ipuof?gcd={int(gcd)}")

    def clusters(self) -> list[dict]:
        return self.call("GET", "/v1/clusters")["clusters"]

    def allocations(self) -> list[dict]:
        return self.call("GET", "/v1/allocations")["allocations"]

    def create_allocation(self, name: str, agents: list[str] | None, grants: list[int] | None = None,
                          size: int | None = None) -> dict:
        """Of the IPU-Machines named, or (no agents) of `size` IPUs the controller picks."""
        body: dict = {"name": name, "grants": grants or []}
        if agents or size is None:
            body["agents"] = agents or []
        if size is not None:
            body["size"] = size
        return self.call("POST", "/v1/allocations", body)

    def get_allocation(self, name: str) -> dict:
        return self.call("GET", f"/v1/allocations/{_quote(name)}")

    def grant_allocation(self, name: str, grants: list[int]) -> dict:
        """Who may make partitions in a created allocation from now on (`update allocation --grant`)."""
        return self.call("POST", f"/v1/allocations/{_quote(name)}/grants", {"grants": grants})

    def remove_allocation(self, name: str) -> dict:
        return self.call("DELETE", f"/v1/allocations/{_quote(name)}")

    def agents(self) -> list[dict]:
        """`vipu-admin list agents`: the IPU-Machines and their health."""
        return self.call("GET", "/v1/agents")["agents"]

    def get_agent(self, name: str) -> dict:
        return self.call("GET", f"/v1/agents/{_quote(name)}")["agent"]

    def agent_fault(self, name: str, state: str, ipu: int | None = None) -> dict:
        """`vipu-emu fault agent NAME down|up|ipu-error N` (admin API)."""
        return self.call("POST", "/admin/faults/agent", {"agent": name, "state": state, "ipu": ipu})["agent"]

    def attach(self, partition: str, gcd: int, uid: int, host: str) -> dict:
        return self.call("POST", "/v1/attach", {"partition": partition, "gcd": gcd, "uid": uid, "host": host})

    def faults(self, **changes) -> dict:
        return self.call("POST", "/admin/faults", changes) if changes else self.call("GET", "/admin/faults")

    def clear_faults(self) -> dict:
        return self.call("DELETE", "/admin/faults")

    def down(self, seconds: float = 0) -> dict:
        return self.call("POST", "/admin/down", {"seconds": seconds})

    def up(self) -> dict:
        return self.call("POST", "/admin/up")

    def crash(self) -> dict:
        return self.call("POST", "/admin/crash")

    def stats(self) -> dict:
        return self.call("GET", "/admin/stats")["calls"]

    def served(self) -> int:
        """Requests the server has answered or dropped, on every listener."""
        return self.call("GET", "/admin/stats")["served"]

    def check(self) -> dict:
        return self.call("GET", "/admin/check")


class ControllerUnreachable(VipuUnavailable):
    """No answer at all: the `vipu` CLI words this as the real one does."""


def _loopback_only(host: str, port: int) -> None:
    """The emulator stands in for a controller on this machine: its client never resolves or
    contacts another address (a PopRun line naming vipu.my_domain must not become a DNS query)."""
    import ipaddress

    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise VipuUnavailable(f"V-IPU server unavailable at {host}:{port}: the emulator serves loopback only "
                          "(127.0.0.0/8, ::1, localhost); point --api-host at the lab's controller")


def _quote(name: str) -> str:
    """A partition name for a URL path; an invalid one is refused here, as the server would
    refuse it, instead of sending a request line http.server rejects as too long."""
    from urllib.parse import quote

    from ..rules import check_name

    return quote(check_name(name), safe="")
