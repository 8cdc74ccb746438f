"""The lab's processes: munge, the V-IPU emulator, slurmctld and the slurmd nodes, the hook
service; each recorded by pid and start time in LAB/pids.json (procs.py), stopped only by those
records. Slurm is asked through the product's SlurmCli."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..errors import LabError
from ..fsutil import atomic_write, pid_alive, poll
from ..hooks.endpoint import socket_path
from ..hooks.journal import Journal
from ..hooks.remover import lock_path as remover_lock
from . import trust
from .procs import _log_tail, _pid, _pid_in, _record, _run, _running, _stop_pid, _wait_pidfile, say
from .spec import CONTROLLERS, MUNGED, SBIN, LabSpec


def check_trusted(spec: LabSpec) -> None:
    """Before the lab reads, runs or signals anything from its directory: refuse it if another user
    could have written it, or any file the lab executes or takes a pid from (trust.py's rule)."""
    trust.check_dir(spec.dir)
    trust.check_files(spec.dir, _used_files(spec))


def hook_files(spec: LabSpec) -> list[Path]:
    """slurm-ipu-hook and its settings: the lab's own, make install's under its prefix, or the
    Debian packages' (config.PACKAGED_PATHS)."""
    from ..config import PACKAGED, PACKAGED_PATHS

    if spec.prefix == PACKAGED:
        return [Path(PACKAGED_PATHS["hook"]), Path(PACKAGED_PATHS["hook_conf"])]
    prefix = Path(spec.prefix) if spec.prefix else spec.path("install")
    return [prefix / "libexec" / "slurm-ipu-hook", prefix / "libexec" / "slurm-ipu-hook.conf"]


def _used_files(spec: LabSpec) -> list[Path]:
    """pids.json and the pid files the lab reads (the pids it records, then signals; MariaDB's it
    never reads: the lab records the pid it started); bin/ (first on the PATH of every command the
    lab runs), lib/ (the SPANK plugin srun and slurmd load) and etc/ (the daemons' configuration,
    which names what they run), whatever is in them; slurm-ipu-hook, which slurmctld runs for every
    job, and its settings (under the installed prefix in installed mode)."""
    daemons = ["slurmctld", "munged", "slurmdbd", *(f"slurmd-{n}" for n in spec.node_names)]
    files = [spec.path("pids.json"), *(spec.path("run", f"{d}.pid") for d in daemons), supervision(spec),
             *hook_files(spec)]
    for sub in ("bin", "lib", "etc"):
        files.append(spec.path(sub))
        try:
            files += sorted(spec.path(sub).iterdir())
        except OSError:  # not made yet, or refused by the check that follows
            pass
    return files


def load_pids(spec: LabSpec) -> dict:
    check_trusted(spec)
    try:
        pids = json.loads(spec.path("pids.json").read_text())
    except (OSError, ValueError):
        return {}
    return _supervised(spec, _follow_restarts(spec, pids))


SUPERVISOR = "supervisor"  # pids.json's key of lab/supervise.py, the slurm-ipu service's parent


def supervision(spec: LabSpec) -> Path:
    """What lab/supervise.py records: the slurm-ipu service's current pid, its restarts, its state."""
    return spec.path("run", "reaper.json")


def supervised(spec: LabSpec) -> dict:
    try:
        doc = json.loads(supervision(spec).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _supervised(spec: LabSpec, pids: dict) -> dict:
    """pids["service"]: the service the supervisor recorded (it alone knows the pid after a
    restart), when the record is the recorded supervisor's."""
    doc = supervised(spec)
    sup, service = doc.get("supervisor"), doc.get("service")
    if isinstance(sup, dict) and isinstance(service, dict) and _pid(pids.get(SUPERVISOR)) == sup.get("pid") \
            and service.get("pid"):
        pids["service"] = {"pid": service["pid"], "token": service.get("token")}
    return pids


def _follow_restarts(spec: LabSpec, pids: dict) -> dict:
    """From 23.11 `scontrol reconfigure` restarts slurmctld and slurmd as new processes: a
    recorded daemon that is gone is followed to the pid in its pid file when that process is this
    lab's (its command line says so), so `down` still stops exactly the lab's."""
    daemons = {"slurmctld": spec.path("run", "slurmctld.pid")}
    daemons.update({f"slurmd-{n}": spec.path("run", f"slurmd-{n}.pid") for n in spec.node_names})
    for key, pidfile in daemons.items():
        if key not in pids or _running(pids[key]):
            continue
        pid = _pid_in(pidfile)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if pid else []
        except OSError:
            argv = []
        if _lab_daemon(spec, key, argv):
            pids[key] = _record(pid)
    return pids


def _lab_daemon(spec: LabSpec, key: str, argv: list[bytes]) -> bool:
    """Whether a daemon's command line is this lab's `key`: it names the lab's slurm.conf, or, a
    configless slurmd (which names none: _slurmd_argv), the lab's controller and its node."""
    if str(spec.path("etc", "slurm.conf")).encode() in argv:
        return True
    node = key.removeprefix("slurmd-").encode()
    server = f"127.0.0.1:{spec.ctld_port}".encode()
    return key.startswith("slurmd-") and any(argv[i:i + 2] == [b"--conf-server", server] for i in range(len(argv))) \
        and any(argv[i:i + 2] == [b"-N", node] for i in range(len(argv)))


def save_pids(spec: LabSpec, pids: dict) -> None:
    """The supervised service's pid is the supervisor's to record (run/reaper.json), not kept here."""
    kept = {k: v for k, v in pids.items() if not (k == "service" and SUPERVISOR in pids)}
    atomic_write(spec.path("pids.json"), json.dumps(kept, indent=1))


def start_munge(spec: LabSpec, pids: dict) -> None:
    if _running(pids.get("munged")):
        return
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        raise LabError(f"munge has no key ({key}); reinstall munge (apt-get install munge)")
    pidfile = spec.path("run", "munged.pid")
    pidfile.unlink(missing_ok=True)
    say("starting munged (the lab's own socket)")
    # --force: run as root, beside any system munged, with a socket only this lab uses.
    _run([str(MUNGED), "--force", f"--socket={spec.path('run', 'munge.socket')}",
          f"--pid-file={pidfile}", f"--log-file={spec.path('log', 'munged.log')}",
          f"--seed-file={spec.path('run', 'munged.seed')}", f"--key-file={key}"], spec,
         log=spec.path("log", "munged.log"))
    pids["munged"] = _record(_wait_pidfile(pidfile, 10, "munged", spec.path("log", "munged.log")))


def start_emulator(spec: LabSpec, pids: dict) -> None:
    """The V-IPU emulator, or one per controller (--controllers): each its own state directory,
    all their API sockets in the first's (clients find each by its port alone)."""
    from ..emulator.process import EmulatorProcess

    for k, port in enumerate(spec.controller_ports):
        key = spec.emulator_key(k)
        if _running(pids.get(key)):
            continue
        say(f"starting the V-IPU emulator{f' of controller {spec.controller_names[k]}' if k else ''} on "
            f"127.0.0.1:{port}")
        emu = EmulatorProcess.start(spec.path(key), cluster=str(spec.path("etc", f"{key}.yaml")), port=port,
                                    log_path=spec.path("log", f"{key}.log"), detach=True,
                                    socket_dir=spec.path("vipu-emu") if k else None)
        pids[key] = _record(emu.pid)
    _say_squatter(spec)


def _say_squatter(spec: LabSpec) -> None:
    """One line when another user's process holds the emulator's abstract socket name (server.py,
    _NamedSocket): the lab's own commands do not need it, clients that know only the port refuse it."""
    from ..emulator.api import shown, user_socket

    try:
        held = json.loads(spec.path("vipu-emu", "server.json").read_text()).get("squatter")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(held, dict):
        say(f"the emulator's socket {shown(user_socket(spec.vipu_port))} is held by pid {held.get('pid')} (uid "
            f"{held.get('uid')}), not the emulator: the lab's commands use {spec.path('vipu-emu')}/api-"
            f"{spec.vipu_port}.sock and clients that know only the port refuse that process; stop it (kill "
            f"{held.get('pid')}) and the emulator takes the name back")


def start_slurm(spec: LabSpec, pids: dict) -> None:
    conf = str(spec.path("etc", "slurm.conf"))
    if not _running(pids.get("slurmctld")):
        spec.path("run", "slurmctld.pid").unlink(missing_ok=True)
        # -c (a clean start, no saved jobs) only for a new lab: a restart keeps the job queue.
        clean = ["-c"] if "slurmctld" not in pids else []
        say(f"starting slurmctld on port {spec.ctld_port}{'' if clean else ' (keeping its saved jobs)'}")
        argv = [str(SBIN / "slurmctld"), *clean, "-f", conf]
        _run(_controller_argv(spec, 0, argv) if spec.backup else argv, spec, log=spec.path("log", "slurmctld.log"))
        pids["slurmctld"] = _record(_wait_pidfile(spec.path("run", "slurmctld.pid"), 30, "slurmctld",
                                                  spec.path("log", "slurmctld.log")))
    if spec.backup and not _running(pids.get(BACKUP)):
        _start_backup(spec, pids, conf)
    for name in spec.node_names:
        key = f"slurmd-{name}"
        if _running(pids.get(key)):
            continue
        pidfile = spec.path("run", f"slurmd-{name}.pid")
        pidfile.unlink(missing_ok=True)
        _run(_slurmd_argv(spec, conf, name), spec, log=spec.path("log", f"slurmd-{name}.log"))
        pids[key] = _record(_wait_pidfile(pidfile, 30, f"slurmd {name}", spec.path("log", f"slurmd-{name}.log")))
    say(f"started slurmd {', '.join(spec.node_names)}")


BACKUP = "slurmctld-backup"  # LabSpec.backup's second controller, ctl2


def _start_backup(spec: LabSpec, pids: dict, conf: str) -> None:
    """ctl2, in standby until ctl1 stops answering: never with -c (a backup's start recovers the
    shared state, it must not clear it)."""
    own = {"pid": spec.path("run", f"{BACKUP}.pid"), "log": spec.path("log", f"{BACKUP}.log")}
    for path in own.values():
        path.write_bytes(b"")  # what the namespace's bind mounts put over slurmctld's own names
    say(f"starting the backup slurmctld ({CONTROLLERS[1][0]} on {CONTROLLERS[1][1]})")
    _run(_controller_argv(spec, 1, [str(SBIN / "slurmctld"), "-f", conf]), spec, log=own["log"])
    pids[BACKUP] = _record(_wait_pidfile(own["pid"], 30, "the backup slurmctld", own["log"]))


def _controller_argv(spec: LabSpec, k: int, slurmctld: list[str]) -> list[str]:
    """Controller k (LabSpec.backup) as if on a machine of its own: a UTS namespace with its
    SlurmctldHost name (slurmctld tells primary from backup by the hostname), /etc/hosts naming
    both, and for the backup its own pid file and log over slurmctld's names (a slurmctld kills the
    one its pid file names at start: one file for both would stop the primary)."""
    name, _ = CONTROLLERS[k]
    hosts = spec.path("run", "ctl-hosts")
    if k == 0:
        try:
            own = Path("/etc/hosts").read_text()
        except OSError:
            own = "127.0.0.1 localhost\n"
        atomic_write(hosts, "".join(f"{addr} {host}\n" for host, addr in CONTROLLERS) + own)
    mounts = [f"mount --bind {hosts} /etc/hosts"]
    if k == 1:
        mounts += [f"mount --bind {spec.path('run', f'{BACKUP}.pid')} {spec.path('run', 'slurmctld.pid')}",
                   f"mount --bind {spec.path('log', f'{BACKUP}.log')} {spec.path('log', 'slurmctld.log')}"]
    propagation = "private" if _root_is_mounted() else "unchanged"
    return ["unshare", "--uts", "--mount", "--propagation", propagation, "--", "/bin/sh", "-c",
            f"hostname {name} && {' && '.join(mounts)} && exec {' '.join(slurmctld)}"]


def _root_is_mounted() -> bool:
    """Whether this process's / is a mount point (not inside a chroot of a plain directory)."""
    try:
        return any(line.split()[4] == "/" for line in Path("/proc/self/mountinfo").read_text().splitlines())
    except (OSError, IndexError):
        return True


def _slurmd_argv(spec: LabSpec, conf: str, name: str) -> list[str]:
    if not spec.configless:
        return [str(SBIN / "slurmd"), "-f", conf, "-N", name]
    # A node with no configuration of its own: a mount namespace where the lab's etc is empty and
    # /run is the lab's, with its munge socket at munge's default name (slurmd authenticates its
    # configuration fetch before it has an AuthInfo to read: src/common/fetch_config.c).
    run, empty = spec.path("run", "ns"), spec.path("run", "no-etc")
    (run / "munge").mkdir(parents=True, exist_ok=True)
    empty.mkdir(exist_ok=True)
    link = run / "munge" / "munge.socket.2"
    if not link.is_symlink():
        link.symlink_to(spec.path("run", "munge.socket"))
    slurmd = f"env -u SLURM_CONF {SBIN / 'slurmd'} --conf-server 127.0.0.1:{spec.ctld_port} -N {name}"
    # In a chroot "/" is no mount point and its propagation cannot change: the clean room that runs
    # the lab there has made the whole mount namespace private already (tests/install/clean_room.sh).
    propagation = "private" if _root_is_mounted() else "unchanged"
    return ["unshare", "--mount", "--propagation", propagation, "--", "/bin/sh", "-c",
            f"mount --bind {run} /run && mount --bind {empty} {spec.path('etc')} && exec {slurmd}"]


def start_service(spec: LabSpec, pids: dict) -> None:
    """The slurm-ipu service, as a site runs it from systemd: slurm-ipu-hook queues ended jobs'
    partitions for it while it is the remover (it holds remover.lock). Started by its supervisor
    (lab/supervise.py), which starts it again when it fails, as systemd's Restart=always does."""
    if _running(pids.get("service")) and _running(pids.get(SUPERVISOR)):
        return
    if _running(pids.get(SUPERVISOR)):  # between restarts, or a service it no longer watches
        _stop_supervisor(spec, pids)
    if _running(pids.get("service")):  # a service started without one (an older lab): as it was
        return
    lock, record = remover_lock(spec.path("state")), supervision(spec)
    record.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "slurm_ipu.lab.supervise", "--record", str(record), "--",
            sys.executable, "-m", "slurm_ipu.cli", "service"]
    with open(spec.path("log", "service.log"), "ab") as log:
        proc = subprocess.Popen(argv, env=spec.env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
    pids[SUPERVISOR] = _record(proc.pid)
    sock = socket_path(spec.path("state"))

    def started() -> int | None:
        """The service's pid once it holds the remover's lock (it writes its pid there) and listens.
        Read, never probed: taking the lock to test it would delay the starting service."""
        service = supervised(spec).get("service") or {}
        try:
            held = lock.read_text().split()[0] == str(service.get("pid")) and sock.exists()
        except (OSError, IndexError):
            return None
        return service["pid"] if held and _running(service) else None

    if not poll(lambda: started() or proc.poll() is not None, 15) or not started():
        _stop_supervisor(spec, pids)
        raise LabError(f"the slurm-ipu service did not start: {_log_tail(spec.path('log', 'service.log'))}")
    _supervised(spec, pids)
    say(f"started the slurm-ipu service (slurm-ipu service, pid {started()}; supervised by pid {proc.pid}, which "
        "starts it again if it fails)")


def _stop_supervisor(spec: LabSpec, pids: dict) -> None:
    """SIGTERM: the supervisor stops the service (SIGTERM too) and itself, restarting nothing."""
    rec = pids.pop(SUPERVISOR, None)
    if _running(rec):
        _stop_pid(_pid(rec), "the slurm-ipu service's supervisor", timeout=20)  # it waits up to 12 s for the service


def stop_service(spec: LabSpec, sig: int = signal.SIGTERM) -> None:
    """Stop the slurm-ipu service by its recorded pid (drills: the hooks without it, a crash). SIGTERM
    stops it for good; any other signal is a drill: its supervisor lets go first, so the service
    killed stays dead until restart_service."""
    pids = load_pids(spec)
    rec, sup = pids.pop("service", None), pids.get(SUPERVISOR)
    pid = _pid(rec)
    if sig == signal.SIGTERM:
        _stop_supervisor(spec, pids)
        if _running(rec):  # unsupervised, or the supervisor did not get it stopped
            _stop_pid(pid, "service")
    else:
        if _running(sup):
            os.kill(_pid(sup), signal.SIGUSR1)
            poll(lambda: supervised(spec).get("state") in ("let-go", "stopped") or not _running(sup), 10)
        if _running(rec):
            os.kill(pid, sig)
            poll(lambda: not pid_alive(pid), 10)
        if _running(sup):  # it ends once its service has
            poll(lambda: not _running(sup), 10)
        pids.pop(SUPERVISOR, None)
    save_pids(spec, pids)


def restart_service(spec: LabSpec) -> None:
    pids = load_pids(spec)
    start_service(spec, pids)
    save_pids(spec, pids)


def service_status(spec: LabSpec, pids: dict) -> str:
    """What `lab status` adds to the service's line: its restarts after a failure, or that its
    supervisor gave up."""
    doc = supervised(spec)
    sup = doc.get("supervisor") or {}
    if not pids.get(SUPERVISOR) or _pid(pids.get(SUPERVISOR)) != sup.get("pid"):
        return ""
    restarts, last = doc.get("restarts") or 0, doc.get("last_exit")
    if doc.get("state") == "gave-up":
        limit = doc.get("limit") or {}
        return (f" (failed: {last}; gave up after {restarts} restarts, at most {limit.get('burst')} within "
                f"{limit.get('interval')} s: see {spec.path('log', 'service.log')}; `slurm-ipu lab up` starts it)")
    if doc.get("state") == "restarting":
        return f" (failed: {last}; starting again, restart {restarts})"
    return f" (restarted {restarts} times after a failure, last: {last})" if restarts else ""


def _drain_journal(spec: LabSpec, timeout: float = 15.0) -> None:
    """Before the service stops: the partitions of the jobs just cancelled are queued for it."""
    journal = Journal(spec.path("state"))
    poll(lambda: not journal.names(), timeout)


def slurm_cli(spec: LabSpec, timeout: float = 15.0, environ: dict | None = None):
    """The lab's Slurm commands, through the product's one Slurm interface."""
    from ..slurm.commands import SlurmCli

    return SlurmCli(str(spec.path("etc", "slurm.conf")), str(SBIN.parent / "bin"), timeout,
                    environ=spec.env() if environ is None else environ)


def _slurm(spec: LabSpec, tool: str, *args: str) -> str | None:
    """What a Slurm command prints, None when it fails (a lab starting or stopping)."""
    return slurm_cli(spec).output_or_none(None, tool, tool, *args)


def node_states(spec: LabSpec) -> dict[str, str]:
    text = _slurm(spec, "sinfo", "-h", "-N", "-o", "%N %T") or ""
    return dict(line.split()[:2] for line in text.splitlines() if len(line.split()) >= 2)


def wait_idle(spec: LabSpec, pids: dict, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    resumed = False
    while time.monotonic() < deadline:
        for key, rec in pids.items():
            if key.startswith(("slurm", "vipu", "mariadb")) and not _running(rec):
                pid = _pid(rec)
                log = spec.path("log", "slurmctld.log" if key == "slurmctld" else f"{key}.log")
                raise LabError(f"{key} (pid {pid}) exited during start: {_log_tail(log)}")
        states = node_states(spec)
        line = ", ".join(f"{n} {states.get(n, '?')}" for n in spec.node_names)
        if line != last:
            say(f"nodes: {line}")
            last = line
        # idle, or running jobs (a restart of a partly dead lab keeps them), or from 24.11 planned
        # (up, kept for a pending job the scheduler will start there)
        if all(states.get(n, "").startswith(("idle", "mixed", "alloc", "planned")) for n in spec.node_names):
            return
        bad = [n for n in spec.node_names if states.get(n, "").startswith(("down", "drain"))]
        if bad and not resumed:
            _slurm(spec, "scontrol", "update", f"NodeName={','.join(bad)}", "State=RESUME")
            resumed = True
        time.sleep(0.3)
    raise LabError(f"nodes not up after {timeout:g}s ({last}); see {spec.path('log')}")


def cancel_all(spec: LabSpec, timeout: float = 60.0) -> None:
    jobs = (_slurm(spec, "squeue", "-h", "-o", "%A") or "").split()
    if not jobs:
        return
    say(f"cancelling {len(jobs)} job(s)")
    _slurm(spec, "scancel", *jobs)

    def left() -> list[str]:
        return (_slurm(spec, "squeue", "-h", "-o", "%A") or "").split()

    if not poll(lambda: not left(), timeout):
        say(f"jobs still present after {timeout:g}s: {left()}")


def _stop_all(pids: dict, keys: list[str]) -> None:
    """Stop the recorded processes named in keys, slurmd first, munged last."""
    order = [k for k in pids if k.startswith("slurmd-")] + ["slurmctld", BACKUP, "slurmdbd", "mariadb", SUPERVISOR,
                                                             "service", "vipu-emu",
                                                             *(k for k in pids if k.startswith("vipu-emu-")), "munged"]
    for key in order:
        rec = pids.get(key)
        if key in keys and _running(rec):
            say(f"stopping {key} (pid {_pid(rec)})")
            _stop_pid(_pid(rec), key)
