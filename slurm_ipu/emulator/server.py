"""`vipu-emu serve`: the emulated V-IPU controller over HTTP/JSON on loopback.

Four listeners: the API on a unix socket named for the port (api.user_socket: what `vipu` and
`vipu-emu attach` talk to, which knows its caller), the same at STATE_DIR/api-PORT.sock (the lab's
commands: a name no other user can take, api.py says why), the same API on loopback TCP (the address
IPUOF_VIPU_API_HOST/PORT name; its callers are anonymous: identity.py), and an admin copy on a
unix socket in the state directory that stays up while the API is down, so a test can always
bring the server back. The `down` fault closes the TCP port; the API socket stays bound (so no
one else can take its name) and drops every request unanswered, as a controller that is down.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import signal
import socket
import socketserver
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ..errors import ConfigError, PermissionDenied, VipuError
from ..fsutil import atomic_write
from ..locks import try_lock
from ..rules import VIPU_PORT
from . import identity
from .api import API_VERSION, server_socket, shown, user_socket
from .model import Cluster, load_cluster
from .service import CODES, OPS, Service, code_of, fault_seconds

log = logging.getLogger("slurm_ipu.emulator")
MAX_BODY = 1 << 20
PER_CALLER = 256  # connections open at once per user (_Capped)
ALL_CALLERS = 1024  # ... and for all users together: the threads users can make are bounded
IDLE_S = 300.0  # a connection with no request for this long is closed
ROUTES: list[tuple[str, re.Pattern, str]] = [
    (m, re.compile(p), h)
    for m, p, h in [
        ("GET", r"^/v1/version$", "version"),
        ("GET", r"^/v1/partitions$", "list"),
        ("POST", r"^/v1/partitions$", "create"),
        ("GET", r"^/v1/partitions/(?P<name>[^/]+)$", "get"),
        ("DELETE", r"^/v1/partitions/(?P<name>[^/]+)$", "remove"),
        ("POST", r"^/v1/partitions/(?P<name>[^/]+)/reset$", "reset"),
        ("GET", r"^/v1/partitions/(?P<name>[^/]+)/ipuof$", "ipuof"),
        ("GET", r"^/v1/allocations$", "allocations"),
        ("POST", r"^/v1/allocations$", "create_allocation"),
        ("GET", r"^/v1/allocations/(?P<name>[^/]+)$", "get_allocation"),
        ("POST", r"^/v1/allocations/(?P<name>[^/]+)/grants$", "grant_allocation"),
        ("DELETE", r"^/v1/allocations/(?P<name>[^/]+)$", "remove_allocation"),
        ("GET", r"^/v1/clusters$", "clusters"),
        ("GET", r"^/v1/agents$", "agents"),
        ("GET", r"^/v1/agents/(?P<name>[^/]+)$", "get_agent"),
        ("POST", r"^/v1/attach$", "attach"),
        ("GET", r"^/admin/faults$", "faults_get"),
        ("POST", r"^/admin/faults$", "faults_set"),
        ("POST", r"^/admin/faults/agent$", "faults_agent"),
        ("DELETE", r"^/admin/faults$", "faults_clear"),
        ("POST", r"^/admin/down$", "down"),
        ("POST", r"^/admin/up$", "up"),
        ("POST", r"^/admin/crash$", "crash"),
        ("GET", r"^/admin/check$", "check"),
        ("GET", r"^/admin/stats$", "stats"),
    ]
]


class App:
    """Routes requests to the Service and owns the TCP listener's up/down life."""

    def __init__(self, service: Service, host: str, port: int):
        self.service = service
        self.host, self.port = host, port
        self.tcp: ThreadingHTTPServer | None = None
        self.is_down = False
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self.served = 0  # requests answered or dropped, on every listener (tests wait on it)

    # --- listener life ------------------------------------------------------------------
    def start_tcp(self) -> None:
        server = _TcpServer((self.host, self.port), Handler)
        server.app = self
        self.port = server.server_address[1]
        self.tcp = server
        self.is_down = False
        threading.Thread(target=server.serve_forever, args=(0.05,), name="vipu-tcp", daemon=True).start()

    def stop_tcp(self) -> None:
        server, self.tcp = self.tcp, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def go_down(self, seconds: float) -> None:
        with self._lock:
            if self._timer:
                self._timer.cancel()
            self.is_down = True
            self.stop_tcp()
            if seconds > 0:
                self._timer = threading.Timer(seconds, self.come_up)
                self._timer.daemon = True
                self._timer.start()

    def come_up(self) -> None:
        with self._lock:
            if self._timer:
                self._timer.cancel()
                self._timer = None
            if self.tcp is None:
                self.start_tcp()

    # --- request handling ---------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict, body: dict, uid: int, admin: bool) -> tuple[int, object]:
        for m, pattern, name in ROUTES:
            match = pattern.match(path)
            if match and m == method:
                if name.startswith(("faults", "down", "up", "crash", "check", "stats")):
                    return 200, getattr(self, f"_admin_{name}")(body)
                if not admin and self.is_down:
                    raise ConnectionAbortedError("down")
                if uid == identity.ANONYMOUS and name not in identity.ANONYMOUS_ROUTES:
                    raise PermissionDenied(
                        f"{method} {path}: an anonymous caller (loopback TCP) may ask only the version and the "
                        "clusters; the emulator knows its callers on its API socket, which `vipu` and "
                        "`vipu-emu attach` use")
                op = name if name in OPS else "get"
                self.service.before(op)
                return getattr(self, f"_api_{name}")(match.groupdict(), query, body, uid)
        return 404, {"error": {"code": "NOT_FOUND", "message": f"no route {method} {path}"}}

    def _api_version(self, _p, _q, _b, _u):
        return 200, {"version": API_VERSION, "host": self.host, "port": self.port, "emulator": True}

    def _api_list(self, _p, query, _b, uid):
        allocation = query.get("allocation", [None])[0]  # `list partitions --allocation A`
        return 200, {"partitions": self.service.list_partitions(uid, allocation)}

    def _api_create(self, _p, _q, body, uid):
        return 201, self.service.create(body, uid)

    def _api_get(self, p, _q, _b, uid):
        return 200, self.service.get_partition(p["name"], uid)

    def _api_remove(self, p, _q, _b, uid):
        self.service.remove(p["name"], uid)
        return 200, {"removed": p["name"]}

    def _api_reset(self, p, _q, _b, uid):
        return 200, self.service.reset(p["name"], uid)

    def _api_ipuof(self, p, query, _b, uid):
        gcd = _query_int(query, "gcd", 0)
        return 200, {"partition": p["name"], "gcd": gcd, "ipus": self.service.ipuof_config(p["name"], gcd, uid)}

    def _api_create_allocation(self, _p, _q, body, uid):
        return 201, self.service.create_allocation(body, uid)

    def _api_get_allocation(self, p, _q, _b, _u):
        return 200, self.service.get_allocation(p["name"])

    def _api_grant_allocation(self, p, _q, body, uid):
        return 200, self.service.grant_allocation(p["name"], body, uid)

    def _api_remove_allocation(self, p, _q, _b, uid):
        self.service.remove_allocation(p["name"], uid)
        return 200, {"removed": p["name"]}

    def _api_clusters(self, _p, _q, _b, _u):
        return 200, {"clusters": self.service.clusters()}

    def _api_allocations(self, _p, _q, _b, _u):
        return 200, {"allocations": self.service.allocations()}

    def _api_agents(self, _p, _q, _b, _u):
        return 200, {"agents": self.service.agents()}

    def _api_get_agent(self, p, _q, _b, _u):
        return 200, {"agent": self.service.agent(p["name"])}

    def _api_attach(self, _p, _q, body, caller):
        gcd = body.get("gcd", 0)
        if isinstance(gcd, bool) or not isinstance(gcd, int):
            raise CODES["INVALID_ARGUMENT"][1](f"invalid GCD {gcd!r}: must be an integer")
        uid = int(body.get("uid", caller))
        if uid != caller and caller != 0:  # root may probe as another user (`vipu-emu attach --uid`)
            raise PermissionDenied(f"uid {caller} may not attach as uid {uid}")
        return 200, self.service.attach(str(body.get("partition", "")), gcd, uid, str(body.get("host", "")))

    def _admin_faults_get(self, _b):
        return self.service.faults.as_dict()

    def _admin_faults_set(self, body):
        faults = self.service.faults
        with faults.lock:
            for key in ("latency", "create_delay"):
                if key in body:
                    setattr(faults, key, fault_seconds(key, body[key]))
            if "error_next" in body:
                faults.error_next = max(0, int(body["error_next"]))
            if "fail" in body:
                spec = body["fail"]
                code = str(spec.get("code", "UNAVAILABLE")).upper()
                op = str(spec.get("op", "any"))
                if code not in CODES or op not in (*OPS, "any"):
                    raise CODES["INVALID_ARGUMENT"][1](
                        f"invalid fault {code}/{op}; codes: {', '.join(CODES)}; ops: any, {', '.join(OPS)}"
                    )
                faults.fail.append([max(1, int(spec.get("count", 1))), code, op])
        return faults.as_dict()

    def _admin_faults_agent(self, body):
        ipu = body.get("ipu")
        return {"agent": self.service.set_agent_health(str(body.get("agent", "")), str(body.get("state", "")), ipu)}

    def _admin_faults_clear(self, _b):
        faults = self.service.faults
        with faults.lock:
            faults.latency = faults.create_delay = 0.0
            faults.error_next = 0
            faults.fail = []
        return faults.as_dict()

    def _admin_down(self, body):
        seconds = fault_seconds("down", body.get("seconds", 0))
        self.go_down(seconds)  # down before the reply: an `up` right after it is never overtaken
        return {"down": True, "seconds": seconds}

    def _admin_up(self, _b):
        self.come_up()
        return {"down": False, "port": self.port}

    def _admin_crash(self, _b):
        # Die like kill -9 would, a moment after the reply leaves: no cleanup at all.
        threading.Timer(0.05, lambda: os._exit(137)).start()
        return {"crashing": True}

    def _admin_stats(self, _b):
        with self.service.faults.lock:
            return {"calls": dict(self.service.calls), "served": self.served}

    def count(self) -> None:
        with self.service.faults.lock:
            self.served += 1

    def _admin_check(self, _b):
        return self.service.check_invariants()


def _query_int(query: dict, key: str, default: int) -> int:
    raw = query.get(key, [str(default)])[0]
    try:
        return int(raw)
    except ValueError:
        raise CODES["INVALID_ARGUMENT"][1](f"invalid {key} {raw!r}: must be an integer") from None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "vipu-emu"
    timeout = IDLE_S  # StreamRequestHandler: the socket's timeout, so an idle connection ends

    uid: int = identity.ANONYMOUS  # the caller's: from the kernel at accept (setup), never from the request

    def setup(self) -> None:
        super().setup()
        if self.connection.family == socket.AF_UNIX:
            self.uid = identity.unix_peer_uid(self.connection)
        else:
            # The headers and the body are two writes: with Nagle on, the body waits for the
            # client's delayed ACK of the headers, 40 ms per call on a kept-alive connection.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _admin(self, path: str) -> bool:
        """The admin API (faults, checks) is served on the admin socket only, to its owner and root."""
        on_admin = getattr(self.server, "admin", False)
        if path.startswith("/admin/") and not on_admin:
            raise PermissionDenied("the admin API is served on STATE_DIR/admin.sock only")
        if on_admin and self.uid not in (0, os.getuid()):
            raise PermissionDenied(f"uid {self.uid} may not use the admin socket")
        return on_admin

    def _serve(self, method: str) -> None:
        try:
            reply = self._reply(method)
        finally:
            self.server.app.count()  # before the reply leaves: a caller that left cannot make it miss
        if reply is None:  # dropped unanswered: the API is down
            self.close_connection = True
            return
        status, payload = reply
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reply(self, method: str) -> tuple[int, object] | None:
        url = urlsplit(self.path)
        try:
            body = self._body()
            return self.server.app.handle(method, url.path, parse_qs(url.query), body, self.uid,
                                          self._admin(url.path))
        except ConnectionAbortedError:
            return None
        except VipuError as exc:
            code = code_of(exc)
            return CODES[code][0], {"error": {"code": code, "message": str(exc)}}
        except (ValueError, TypeError) as exc:
            return 400, {"error": {"code": "INVALID_ARGUMENT", "message": str(exc)}}

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("request body too large")
        if not length:
            return {}
        data = json.loads(self.rfile.read(length))
        if not isinstance(data, dict):
            raise ValueError("request body must be a JSON object")
        return data

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self._serve("GET")

    def do_POST(self):  # noqa: N802
        self._serve("POST")

    def do_DELETE(self):  # noqa: N802
        self._serve("DELETE")

    def address_string(self) -> str:
        return str(self.client_address[0]) if self.client_address else "admin"

    def log_message(self, fmt: str, *args) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)


class _Capped(socketserver.ThreadingMixIn):
    """A thread per connection, at most PER_CALLER of them open per caller (all anonymous TCP
    callers count as one) and ALL_CALLERS for all callers together: a user holding thousands of
    connections idle gets the rest closed unanswered, and every other user's calls go on; many
    users doing so fill ALL_CALLERS, past which users' new connections are closed too. Root and
    the server's owner (the hooks, the lab) are not counted, so jobs still start and end. An idle
    connection is closed after IDLE_S."""

    daemon_threads = True
    request_queue_size = 1024  # a storm's hooks and tasks connect at once
    app: App

    def server_activate(self) -> None:
        super().server_activate()
        self.open: dict[int, int] = {}
        self.total = 0  # sum(self.open.values()), kept: the check at accept is O(1)
        self.open_lock = threading.Lock()

    def process_request(self, request, client_address) -> None:
        uid = identity.unix_peer_uid(request) if self.address_family == socket.AF_UNIX else identity.ANONYMOUS
        counted = uid not in (0, os.getuid())
        with self.open_lock:
            full = counted and (self.open.get(uid, 0) >= PER_CALLER or self.total >= ALL_CALLERS)
            if full:
                log.warning("uid %s holds %d connections, users %d; closing a new one", uid, self.open.get(uid, 0),
                            self.total)
                self.shutdown_request(request)
                return
            if counted:
                self.open[uid] = self.open.get(uid, 0) + 1
                self.total += 1
        threading.Thread(target=self._serve_counted, args=(request, client_address, uid if counted else None),
                         daemon=True).start()

    def _serve_counted(self, request, client_address, uid: int | None) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            if uid is not None:
                with self.open_lock:
                    self.open[uid] -= 1
                    self.total -= 1

    def connections(self) -> int:
        with self.open_lock:
            return self.total


class _TcpServer(_Capped, ThreadingHTTPServer):
    allow_reuse_address = True


class _UnixServer(_Capped, socketserver.UnixStreamServer):
    admin = False  # the admin socket's: the admin API, and up while the API is down


def _listen_unix(path: str, app: App, admin: bool) -> _UnixServer:
    server = _UnixServer(path, Handler)
    server.app, server.admin = app, admin
    threading.Thread(target=server.serve_forever, args=(0.05,), name="vipu-admin" if admin else "vipu-api",
                     daemon=True).start()
    return server


def check_loopback(host: str) -> None:
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"--host {host} is not a loopback address; the emulator serves loopback only (use 127.0.0.1)")


def serve(state_dir: Path, cluster: Cluster, host: str = "127.0.0.1", port: int = VIPU_PORT,
          socket_dir: Path | None = None) -> None:
    """Run until SIGTERM/SIGINT. Writes state_dir/server.json once both listeners are up.
    socket_dir: where the API socket api-PORT.sock goes, if not the state directory (the lab's
    several controllers share one, so clients find each by its port alone)."""
    check_loopback(host)
    if socket_dir is not None:
        _check_socket_dir(socket_dir)
    # Its files are its own (0600 in a 0711 directory: others may reach the API socket in it by
    # name, and neither list, read nor create anything there): partitions' owners and hosts are
    # shown to whom the API shows them, not to anyone who can read a database file.
    os.umask(0o077)
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o711)
    lock = _lock_state_dir(state_dir)
    from .store import Store

    store = Store(state_dir / "vipu.sqlite")
    _check_cluster(store, cluster)
    app = App(Service(cluster, store), host, port)
    try:
        app.start_tcp()
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port") from None
    stop = threading.Event()
    named = _NamedSocket(app, stop)
    own_path = server_socket(str(socket_dir or state_dir), app.port)
    Path(own_path).unlink(missing_ok=True)  # ours: nobody else can create anything there
    own = _listen_unix(own_path, app, admin=False)
    os.chmod(own_path, 0o666)  # every user connects; the server knows each one from the kernel
    admin_path = state_dir / "admin.sock"
    admin_path.unlink(missing_ok=True)
    admin = _listen_unix(str(admin_path), app, admin=True)
    info = {"pid": os.getpid(), "host": host, "port": app.port, "admin_socket": str(admin_path),
            "api_socket": own_path, "cluster": cluster.name}
    if named.squatter:
        info["squatter"] = named.squatter
    atomic_write(state_dir / "server.json", json.dumps(info), 0o600)
    log.info("vipu-emu serving %s on %s:%s (state %s)", cluster.name, host, app.port, state_dir)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(3600):
        pass
    app.stop_tcp()
    for server in (named.close(), own, admin):
        if server is not None:
            server.shutdown()
            server.server_close()
    for path in (admin_path, Path(own_path)):
        path.unlink(missing_ok=True)
    (state_dir / "server.json").unlink(missing_ok=True)
    store.close()
    os.close(lock)


class _NamedSocket:
    """The API on the abstract socket named for the port (api.user_socket), where clients that know
    only the port find it. Another user's process may hold that name (bound after this server died,
    or before it started): the kernel lets nobody take it from them, so the server starts without it,
    says whose it is, and takes it as soon as it is free (every RETAKE_S). Clients believe only the
    owner's server (api.check_server), never that process; the lab's use STATE_DIR/api-PORT.sock."""

    RETAKE_S = 1.0

    def __init__(self, app: App, stop: threading.Event):
        self.app, self.stop = app, stop
        self.server: _UnixServer | None = None
        self.squatter: dict | None = None
        self.lock = threading.Lock()
        try:
            self.server = _listen_unix(user_socket(app.port), app, admin=False)
            return
        except OSError as exc:
            holder = _holder(user_socket(app.port))
            if holder is None or holder["uid"] == os.getuid():
                app.stop_tcp()
                raise ConfigError(f"cannot take the API socket for port {app.port}: {exc.strerror} (another vipu-emu "
                                  "serves that port); choose another --port") from None
        self.squatter = holder
        log.warning("the API socket %s is held by pid %s (uid %s), not by this server: serving without it (clients "
                    "refuse that process) at %s only, until it is free; stop that process (kill %s)",
                    shown(user_socket(app.port)), holder["pid"], holder["uid"], "STATE_DIR/api-PORT.sock",
                    holder["pid"])
        threading.Thread(target=self._retake, name="vipu-api-retake", daemon=True).start()

    def _retake(self) -> None:
        while not self.stop.wait(self.RETAKE_S):
            try:
                server = _listen_unix(user_socket(self.app.port), self.app, admin=False)
            except OSError:
                continue
            with self.lock:
                if self.stop.is_set():
                    server.shutdown()
                    server.server_close()
                    return
                self.server = server
            log.info("the API socket %s is free again: serving it", shown(user_socket(self.app.port)))
            return

    def close(self) -> _UnixServer | None:
        with self.lock:
            self.stop.set()
            return self.server


def _holder(path: str) -> dict | None:
    """The pid and uid of whoever listens on the unix socket path (SO_PEERCRED gives a listener's
    credentials as of its listen()), None when nobody answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(path)
        except OSError:
            return None
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return {"pid": pid, "uid": uid}


def _check_socket_dir(path: Path) -> None:
    """A socket directory only the server's owner can write: nobody else may put a socket of
    theirs under the name clients dial."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"--socket-dir {path}: {exc.strerror}; give a directory of the server's owner") from None
    if not os.path.isdir(path) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise ConfigError(f"--socket-dir {path} must be a directory of uid {os.geteuid()} that no one else can "
                          f"write (chmod go-w {path})")


def _lock_state_dir(state_dir: Path) -> int:
    return try_lock(state_dir / "lock",
                    f"another server already uses state directory {state_dir}; stop it or pick another --state-dir")


def _check_cluster(store, cluster: Cluster) -> None:
    desc = json.dumps({"ilds": cluster.ilds, "agents_per_ild": cluster.agents_per_ild,
                       "allocations": {k: sorted(v) for k, v in cluster.allocations.items()}}, sort_keys=True)
    old = store.meta("cluster")
    if old is not None and old != desc and (store.partitions() or store.allocations()):
        raise ConfigError("the state directory holds partitions or created allocations of a different cluster; "
                          "remove them first or use a fresh --state-dir")
    store.set_meta("cluster", desc)




def main_serve(args) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s vipu-emu %(levelname)s %(message)s")
    serve(Path(args.state_dir), load_cluster(args.cluster), args.host, args.port,
          Path(args.socket_dir) if args.socket_dir else None)
    return 0


