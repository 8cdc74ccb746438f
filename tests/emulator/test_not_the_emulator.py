"""A process of another user on the emulator's socket name is not the emulator: every client (the
Python CLI and API, the lab's C `vipu`) asks the kernel who serves before it sends a request and
refuses it in one line; the emulator starts beside it, serves at STATE_DIR/api-PORT.sock (a name
nobody else can take), and takes the abstract name back once it is free."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from slurm_ipu.emulator.api import SOCKET_PREFIX, Api, NotTheEmulator
from slurm_ipu.emulator.process import EmulatorProcess

from ..waiting import wait_for
from .conftest import VIPU, built_vipu_fast
from .test_identity import NOBODY, as_user, needs_root

# Answers every request with 200 and no partitions, as a controller that has none (system Python).
SQUAT = r"""
import socketserver, sys
from http.server import BaseHTTPRequestHandler
class Reply(BaseHTTPRequestHandler):
    def address_string(self):
        return "squatter"
    def log_message(self, *args):
        pass
    def do_GET(self):
        body = b'{"partitions": [], "version": "1.18.0"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
socketserver.UnixStreamServer("\0" + sys.argv[1] + sys.argv[2], Reply).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serves(port: int) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(f"\0{SOCKET_PREFIX}{port}")
            return True
        except OSError:
            return False


@pytest.fixture
def squatter():
    port = _free_port()
    proc = subprocess.Popen(as_user(NOBODY, ["/usr/bin/python3", "-I", "-c", SQUAT, SOCKET_PREFIX, str(port)]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    try:
        wait_for("nobody's process on the emulator's socket name", lambda: _serves(port), 15)
        yield port, proc
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def fast(tmp_path):
    return str(built_vipu_fast(tmp_path)[1])


def refusal(port: int, pid: int) -> str:
    return (f"V-IPU server at @{SOCKET_PREFIX}{port} is served by uid {NOBODY} (nobody) (pid {pid}), not by the "
            f"emulator's owner (uid 0): another user's process holds its socket; stop it (kill {pid}) and start "
            "the emulator again (slurm-ipu lab up), or set VIPU_EMU_OWNER to the uid the emulator runs as")


@needs_root
def test_every_client_refuses_another_users_server_in_one_line(squatter, fast):
    port, proc = squatter
    with pytest.raises(NotTheEmulator) as refused:
        Api("127.0.0.1", port, timeout=10).list_partitions()
    # SO_PEERCRED gives the listener's pid: setpriv execs, so it is the squatter's own
    assert str(refused.value) == refusal(port, proc.pid)
    for command in ([fast], VIPU):
        out = subprocess.run([*command, "--api-host", "127.0.0.1", "--api-port", str(port), "list", "partitions",
                              "--showjson"], capture_output=True, text=True, timeout=30)
        assert (out.returncode, out.stdout, out.stderr) == (1, "", f"error: {refusal(port, proc.pid)} [UNAVAILABLE]\n")
    # an explicit owner: the one uid believed
    out = subprocess.run([*VIPU, "--api-port", str(port), "list", "partitions"], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "VIPU_EMU_OWNER": str(NOBODY)})
    assert out.returncode == 0, out.stderr


@needs_root
def test_the_emulator_starts_beside_it_and_takes_the_name_back(squatter, fast, tmp_path):
    port, proc = squatter
    emu = EmulatorProcess.start(tmp_path / "state", cluster="pod16", port=port)
    try:
        info = json.loads((tmp_path / "state" / "server.json").read_text())
        assert info["squatter"] == {"pid": proc.pid, "uid": NOBODY}
        assert "is held by pid" in (tmp_path / "state" / "server.log").read_text()
        own = {**os.environ, "VIPU_EMU_SOCKET_DIR": str(tmp_path / "state")}
        address = ["--api-host", "127.0.0.1", "--api-port", str(port)]
        for command in ([fast], VIPU):
            for call in (["create", "partition", "p", "--size", "4"], ["remove", "partition", "p"]):
                out = subprocess.run([*command, *address, *call], capture_output=True, text=True, timeout=30, env=own)
                assert out.returncode == 0, out.stderr
        proc.kill()
        proc.wait(10)
        api = Api("127.0.0.1", port, timeout=10)
        wait_for("the emulator on its socket name again", lambda: _version(api), 15)
    finally:
        emu.stop()


def _version(api: Api) -> str | None:
    try:
        return api.version()["version"]
    except NotTheEmulator:
        return None
    except Exception:  # not bound yet (ControllerUnreachable): asked again
        return None
