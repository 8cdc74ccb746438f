"""The lab trusts only its owner, with real users: a user who creates a lab
directory first in a world-writable sticky directory (as the old default /var/tmp/slurm-ipu-lab
let anyone) and plants a hook and a pids.json in it gets nothing run, started or signalled by
root's `slurm-ipu lab up|down|status` or `slurm-ipu demo`; and root's default lab directory is
one no other user can create first. No lab runs here: the refusal comes before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from slurm_ipu.lab import trust

from .conftest import USERS

pytestmark = pytest.mark.slurm
PLANTER = USERS[0]
SLURM_IPU = str(Path(sys.executable).with_name("slurm-ipu"))  # the installed entry point, as make demo runs


@pytest.fixture(scope="module")
def planter() -> int:
    """A non-root user of this machine (created as the lab's users are, in tests/slurm/conftest.py)."""
    if os.geteuid() != 0:
        pytest.skip("the lab runs as root here; creating another user needs root")
    if subprocess.run(["id", "-u", PLANTER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PLANTER],
                       check=True, capture_output=True, timeout=60)
    return int(subprocess.run(["id", "-u", PLANTER], capture_output=True, text=True, check=True).stdout)


def as_planter(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={PLANTER}", f"--regid={PLANTER}", "--init-groups", "--", "sh", "-c",
                           script], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})


@pytest.fixture
def planted(planter):
    """A sticky world-writable directory like /var/tmp, and in it the default-shaped lab directory the
    planter made first: a hook that would leave a marker if anyone ran it, and a pids.json naming
    a root process (pid 1) for `lab down` to stop."""
    shared = Path(tempfile.mkdtemp(prefix="slurm-ipu-trust-", dir="/tmp"))
    shared.chmod(0o1777)
    lab, marker = shared / "slurm-ipu-lab", shared / "hook-ran"
    hook = lab / "install" / "libexec" / "slurm-ipu-hook"
    proc = as_planter(f"umask 022 && mkdir -p {hook.parent} && printf '#!/bin/sh\\ntouch {marker}\\n' > {hook} && "
                      f"chmod 755 {hook} && echo '{json.dumps({'munged': 1, 'slurmctld': 1})}' > {lab}/pids.json")
    assert proc.returncode == 0, proc.stderr
    assert lab.stat().st_uid == planter
    yield lab, marker
    shutil.rmtree(shared, ignore_errors=True)


def run(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SLURM_IPU, *argv], capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})})


def refusal(lab: Path, uid: int) -> str:
    return (f"slurm-ipu lab: {lab} belongs to {PLANTER} (uid {uid}), mode 0755, not to root: another user could "
            "choose what the lab runs or signals as root; use a lab directory of your own (--dir or "
            "$SLURM_IPU_LAB_DIR), e.g. the default /var/lib/slurm-ipu/lab")


def processes_naming(path: Path) -> list[str]:
    """Command lines of running processes that mention path (a daemon started for that lab)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in argv:
            found.append(argv)
    return found


def nothing_happened(lab: Path, marker: Path) -> None:
    assert not marker.exists(), "the planted hook ran"
    assert sorted(p.name for p in lab.iterdir()) == ["install", "pids.json"], "the lab wrote into it"
    assert json.loads((lab / "pids.json").read_text()) == {"munged": 1, "slurmctld": 1}
    assert not processes_naming(lab)


@pytest.mark.parametrize("action", ["up", "down", "status"])
def test_a_lab_directory_another_user_made_first_is_refused_in_one_line(planted, planter, action):
    lab, marker = planted
    proc = run("lab", action, "--dir", str(lab))
    assert (proc.returncode, proc.stderr.strip()) == (2, refusal(lab, planter)), proc.stderr
    assert proc.stdout == ""  # no export lines for `eval`
    nothing_happened(lab, marker)


def test_make_demo_refuses_it_too(planted, planter):
    """`make demo` runs `slurm-ipu demo`, which brings the lab up in the default directory."""
    lab, marker = planted
    proc = run("demo", env={"SLURM_IPU_LAB_DIR": str(lab)})
    assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (2, refusal(lab, planter)), proc.stderr
    nothing_happened(lab, marker)


def test_roots_default_lab_directory_is_under_no_world_writable_directory(planter, monkeypatch):
    monkeypatch.delenv("SLURM_IPU_LAB_DIR", raising=False)
    default = trust.default_dir()
    assert default == Path("/var/lib/slurm-ipu/lab")
    for level in (*reversed(default.parents), default):
        if not level.exists():
            break
        st = level.lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == 0, level
        assert not st.st_mode & 0o022, f"{level} is writable by group or other ({stat.S_IMODE(st.st_mode):04o})"
    trust.check_dir(default)
    # ...so the planter can neither make it (or what is missing above it) first, nor plant in it
    first = next((level for level in (*reversed(default.parents), default) if not level.exists()), None)
    proc = as_planter(f"mkdir {first or default / 'planted'}")
    assert proc.returncode != 0 and "Permission denied" in proc.stderr


# A user's stand-in for the emulator: an HTTP server on the emulator's abstract socket name
# (argv: socket prefix, port, the agents to report) that says every IPU-Machine is down, which a
# health pass that believed it would drain every host for. The system Python, nothing of ours.
SQUAT = r"""
import json, socketserver, sys
from http.server import BaseHTTPRequestHandler
prefix, port, agents = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
class Reply(BaseHTTPRequestHandler):
    def address_string(self):
        return "squatter"
    def log_message(self, *args):
        pass
    def answer(self):
        doc = {"agents": agents} if self.path.startswith("/v1/agents") else {"partitions": [], "version": "1.18.0"}
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_DELETE = answer
class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
Server("\0" + prefix + port, Reply).serve_forever()
"""


def _abstract_holder(port: int) -> int | None:
    """The uid serving the emulator's abstract socket name for `port`, None when nobody does."""
    import socket
    import struct

    from slurm_ipu.emulator.api import user_socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(user_socket(port))
        except OSError:
            return None
        return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]


def test_a_user_on_the_emulators_socket_is_not_believed_and_the_emulator_starts_again(clean_lab, users, capsys):
    """The emulator died; a user bound its socket's name and answers as the controller, with every
    IPU-Machine down. Root's clients refuse that server (its uid is not the emulator's owner), so
    root's health pass drains nothing; the emulator starts again beside it (its own socket is in a
    directory only root can write), the lab works, and the emulator takes the name back once the
    user's process is gone. The user cannot read the hooks' log either."""
    import pwd
    import signal

    from slurm_ipu import lab as labmod
    from slurm_ipu.emulator.api import SOCKET_PREFIX
    from slurm_ipu.errors import VipuUnavailable

    from ..waiting import wait_for
    from .conftest import wait_gone, wait_idle, wait_no_partitions

    lab, user = clean_lab, users[0]
    uid, port = pwd.getpwnam(user).pw_uid, lab.spec.vipu_port
    down = [dict(agent, status="Down") for agent in lab.admin().agents()]
    pids = labmod.load_pids(lab.spec)
    os.kill(pids["vipu-emu"]["pid"], signal.SIGKILL)
    wait_for("the emulator dead", lambda: not labmod._running(pids["vipu-emu"]), 10)
    squatter = lab.popen_as(user, "/usr/bin/python3", "-I", "-c", SQUAT, SOCKET_PREFIX, str(port), json.dumps(down),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("the user serving the emulator's socket name", lambda: _abstract_holder(port), 15,
                 until=lambda holder: holder == uid)
        # root's clients that know only the port: refused in one line naming the socket, uid and fix
        with pytest.raises(VipuUnavailable) as refused:
            lab.api().version()
        said = str(refused.value)
        assert f"uid {uid}" in said and f"@{SOCKET_PREFIX}{port}" in said and "kill" in said, said
        assert len(said.splitlines()) == 1, said
        cli = lab.run("vipu-emu", "cli", "--api-port", str(port), "list", "agents")
        assert cli.returncode == 1 and f"uid {uid}" in cli.stderr, cli.stderr
        # root's health pass, as the slurm-ipu service runs it: nothing drained
        lab.run("slurm-ipu", "health", "--site", lab.site, timeout=120)
        states = lab.node_states()
        assert not [n for n, s in states.items() if "drain" in s], states
        # the emulator starts again while the user still holds the name, and says who does
        capsys.readouterr()
        labmod.up(lab.spec)
        said = capsys.readouterr().err
        assert f"uid {uid}" in said and "kill" in said, said
        assert labmod._running(labmod.load_pids(lab.spec)["vipu-emu"])
        job = lab.sbatch("--gres=ipu:4", "-o", "/dev/null", "--wrap", "true")
        wait_gone(lab, job)
        wait_no_partitions(lab, 60, f"job {job}'s partition removed")
        wait_idle(lab)
        # the user cannot read the hooks' log (nor list the hooks' state)
        hooks_log = lab.spec.path("state", "hooks.log")
        assert hooks_log.exists()
        read = lab.run_as(user, "cat", str(hooks_log))
        assert read.returncode != 0 and "Permission denied" in read.stderr, read
    finally:
        squatter.kill()
        squatter.wait(10)
    # the name is free again: the emulator takes it back, and port-only clients reach it
    wait_for("the emulator serving its socket name again", lambda: _abstract_holder(port), 30,
             until=lambda holder: holder == 0)
    assert lab.api().version()["version"]
