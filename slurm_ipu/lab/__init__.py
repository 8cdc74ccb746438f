"""`slurm-ipu lab up|down|status`: a real Slurm cluster on one machine, plus the V-IPU emulator.

One slurmctld and N `slurmd -N nodeK` on loopback (docs/slurm.md),
configuration rendered from templates/, the `vipu` shim on the lab's own PATH only. Every
process the lab starts is recorded in LAB/pids.json by pid and start time (so a pid the kernel
has since given to another process, after a crash or a reboot, is never signalled); `down`
stops exactly those, and `up` on a partly dead lab restarts only what is dead.
Progress goes to stderr; stdout carries only `export NAME=value` lines for `eval`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import config, rules
from ..deploy import render
from ..errors import LabError
from ..fsutil import atomic_write, pid_alive, poll
from ..hooks.journal import Journal
from ..hooks.service import service_lock
from ..hooks.transport import build_client, socket_path
from ..slurm import releases
from . import trust
from .procs import _log_tail, _pid, _pid_in, _record, _run, _running, _stop_pid, _wait_pidfile, say

REPO = Path(__file__).resolve().parents[2]
SBIN = Path("/usr/sbin")
PREFIX = config.BY_KEY["partition.prefix"].default  # the lab leaves the prefix at its default
CLUSTER = "ipulab"
REAP_INTERVAL = 30.0  # the hook service's full reap: short, so drills see orphans go


@dataclass(frozen=True)
class LabSpec:
    # $SLURM_IPU_LAB_DIR, else a directory no other user can create first (trust.default_dir)
    dir: Path = field(default_factory=trust.default_dir)
    nodes: int = 4
    ipus_per_node: int = 16
    ctld_port: int = 16817
    node_port: int = 17001       # nodeK listens on node_port + K - 1
    vipu_port: int = 8090
    # --accounting: MariaDB and slurmdbd of the lab's own (lab/accounting.py)
    accounting: bool = False
    dbd_port: int = 16819
    db_port: int = 16820
    prolog_deadline: float = 30.0
    pods: int = 1                # > 1: the nodes split into that many Pods (one ILD or more each)
    epilog_deadline: float = 20.0
    # Installed mode: the product as `make install PREFIX=... SITE=<lab site>` put it (wrapper,
    # config, SPANK plugin, venv), checked, not written; None: the lab installs its own copy.
    prefix: str | None = None

    @property
    def pod_ipus(self) -> int:
        return self.nodes * self.ipus_per_node

    @property
    def node_names(self) -> list[str]:
        return [f"node{k}" for k in range(1, self.nodes + 1)]

    def path(self, *parts: str) -> Path:
        return self.dir.joinpath(*parts)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.path("etc", "slurm.conf"))
        # ipurun in an salloc shell reads the site's partition prefix and V-IPU from it; doctor and
        # status read it too.
        env["SLURM_IPU_SITE"] = str(self.path("etc", "site.yaml"))
        env["PATH"] = f"{self.path('bin')}:{env.get('PATH', '/usr/bin:/bin')}"
        return env


def check_spec(spec: LabSpec) -> None:
    if spec.nodes < 1 or spec.ipus_per_node < 1:
        raise LabError(f"--nodes {spec.nodes} and --ipus-per-node {spec.ipus_per_node} must be positive")
    ports = {"--ctld-port": spec.ctld_port, "--node-port": spec.node_port, "--vipu-port": spec.vipu_port}
    if spec.accounting:
        ports.update({"--dbd-port": spec.dbd_port, "--db-port": spec.db_port})
    for option, port in ports.items():
        last = port + spec.nodes - 1 if option == "--node-port" else port
        if not 1024 <= port <= last <= 65535:
            raise LabError(f"{option} {port}{f' (to {last}, one per node)' if last != port else ''} is not a port the "
                           "lab can use; use 1024 to 65535")
    taken = sorted(ports.values()) + list(range(spec.node_port + 1, spec.node_port + spec.nodes))
    if len(set(taken)) != len(taken):
        raise LabError(f"the lab's ports overlap ({', '.join(f'{k} {v}' for k, v in ports.items())}, and "
                       f"{spec.nodes} slurmd ports from --node-port); give each its own")
    total = spec.pod_ipus
    if spec.pods > 1 and (spec.nodes % spec.pods or total % (spec.pods * rules.IPUS_PER_ILD)):
        raise LabError(f"--pods {spec.pods}: {spec.nodes} nodes x {spec.ipus_per_node} IPUs do not split into "
                       f"{spec.pods} Pods of whole ILDs (64 IPUs); e.g. --nodes 8 --ipus-per-node 16 --pods 2")
    if spec.pods < 1:
        raise LabError(f"--pods {spec.pods} must be at least 1")
    if not rules.is_valid_allocation(total):
        raise LabError(f"{spec.nodes} nodes x {spec.ipus_per_node} IPUs = {total} IPUs is not a Pod: use 4, 8, 16, 32, "
                       "64 or a multiple of 64 (e.g. --nodes 4 --ipus-per-node 16)")


# --- configuration -----------------------------------------------------------------------

def context(spec: LabSpec) -> dict:
    """What the lab's own slurm.conf needs beyond the site's fragments (machine, ports, paths)."""
    host = socket.gethostname()
    mem = max(1024, (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // (1 << 20) // spec.nodes // 2)
    ctx = {
        "cluster_name": CLUSTER,
        "controller": {"hostname": host, "addr": "127.0.0.1", "port": spec.ctld_port},
        "slurm_user": "root",
        "paths": {k: str(spec.path(v)) for k, v in
                  {"state": "spool/ctld", "spool": "spool", "run": "run", "log": "log", "etc": "etc"}.items()},
        "nodes": [{"name": n, "hostname": host, "addr": "127.0.0.1", "port": spec.node_port + i,
                   "cpus": os.cpu_count() or 1, "memory_mb": mem, "ipus": spec.ipus_per_node}
                  for i, n in enumerate(spec.node_names)],
        "partition_name": "ipu",
        # A munged of the lab's own: no lab, test run or benchmark can stop another's.
        "munge_socket": str(spec.path("run", "munge.socket")),
        # A requeued job waits cred_expire (120 s by default) before it may start again: the lab's
        # requeue drills should not.
        "cred_expire": 30,
    }
    ctx["accounting"] = None
    if spec.accounting:
        from . import accounting

        ctx["accounting"] = accounting.context(spec)
    ctx.update(render.pod_values(spec.pod_ipus))
    return ctx


def site_description(spec: LabSpec) -> str:
    """The lab's site description: rendered and merged exactly as a site's would be (docs/admin.md),
    with every path inside the lab's directory."""
    doc = {
        "version": 1,
        "cluster": CLUSTER,
        "vipu": {"host": "127.0.0.1", "port": spec.vipu_port, "command": str(spec.path("bin", "vipu")),
                 "timeout": 5.0, "emulator": True},
        "pod": _pod_section(spec),
        "partition": {"prefix": PREFIX},
        "prolog": {"deadline": spec.prolog_deadline},
        "epilog": {"deadline": spec.epilog_deadline},
        "reap": {"interval": REAP_INTERVAL},
        "accounting": {"slurmdbd_host": "127.0.0.1" if spec.accounting else None},
        "prolog_epilog_timeout": int(spec.prolog_deadline * 2),
        "state_dir": str(spec.path("state")),
        "slurm": {"version": _slurm_release(), "user": "root", "conf_dir": str(spec.path("etc")),
                  "bin_dir": "/usr/bin", "plugin_dir": str(spec.path("lib"))},
        "install": {"prefix": spec.prefix or str(spec.path("install")),
                    "site": str(spec.path("etc", "site.yaml")), "unit_dir": str(spec.path("systemd"))},
    }
    if spec.pods > 1:
        doc["pods"] = _pods(spec)
        doc["vipu"]["allocation"] = "all"
    if spec.pods > 2 and spec.pods % 2 == 0:  # a POD256 as two pairs: podab and podcd
        names = [p["name"] for p in doc["pods"]]
        doc["pod_groups"] = [{"name": "pod" + names[k][-1] + names[k + 1][-1], "pods": names[k:k + 2]}
                             for k in range(0, len(names), 2)]
    import yaml

    return "# The lab's site description (written by `slurm-ipu lab up`).\n" + yaml.safe_dump(doc, sort_keys=False)


def _pod_section(spec: LabSpec) -> dict:
    if spec.pods == 1:
        return {"ipus": spec.pod_ipus, "hosts": f"node[1-{spec.nodes}]" if spec.nodes > 1 else "node1",
                "ipus_per_host": spec.ipus_per_node}
    return {"ipus_per_host": spec.ipus_per_node}


def _pods(spec: LabSpec) -> list[dict]:
    """Pods a, b, ... of equal consecutive node ranges (nodes 1-4 are Pod a of a 2-Pod 8-node lab)."""
    per = spec.nodes // spec.pods
    ilds = spec.pod_ipus // spec.pods // rules.IPUS_PER_ILD
    return [{"name": f"pod{chr(ord('a') + k)}", "hosts": f"node[{k * per + 1}-{(k + 1) * per}]" if per > 1
             else f"node{k + 1}", "ilds": ilds} for k in range(spec.pods)]


def _slurm_release() -> str:
    """The installed Slurm's release, as the lab's site description names it."""
    version = releases.installed(SBIN)
    if version is None or releases.release(version) not in releases.SUPPORTED:
        raise LabError(f"{SBIN / 'slurmctld'} -V says {version or 'nothing'}: the lab runs on Slurm "
                       f"{', '.join(releases.SUPPORTED)}; install one (apt-get install slurm-wlm)")
    return releases.release(version)


LAB_COMMANDS = {"ipurun": "slurm_ipu.launcher.cli", "slurm-ipu": "slurm_ipu.cli", "vipu-emu": "slurm_ipu.emulator.main"}


def _script(path: Path, body: str) -> None:
    atomic_write(path, body, 0o755)


def _link(path: Path, to: str) -> None:
    if path.is_symlink() and os.readlink(path) == to:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(to)
    os.replace(tmp, path)


def install_site(spec: LabSpec):
    """Render the lab's site description and put each fragment where its header says, as an admin
    merges them; the lab's 'install' is its interpreter's environment, linked as PREFIX/venv."""
    from ..deploy import fragments, merge

    etc = spec.path("etc")
    atomic_write(etc / "site.yaml", site_description(spec))
    desc = config.load(str(etc / "site.yaml"), twins=False)
    conf = str(etc / "slurm.conf")  # merged as a site's is (deploy/merge.py): its own keys, the diff applied
    texts = fragments.write(desc, etc / "site", conf)
    for path, (_, merged) in merge.edits(merge.merge(desc, conf), conf).items():
        atomic_write(path, merged)
    texts = {p.name: p.read_text() for p in texts}
    atomic_write(etc / "slurm-ipu.conf", texts["slurm-ipu.conf"])
    atomic_write(etc / "gres.conf", texts["gres-ipu.conf"])
    (etc / "plugstack.conf.d").mkdir(exist_ok=True)
    atomic_write(etc / "plugstack.conf.d" / "slurm-ipu.conf", texts["plugstack-ipu.conf"])
    atomic_write(etc / "plugstack.conf", f"include {etc}/plugstack.conf.d/*.conf\n")
    atomic_write(etc / "job_submit.lua", texts["job_submit.lua"])
    if "topology.conf" in texts:
        atomic_write(etc / "topology.conf", texts["topology.conf"])
    else:
        (etc / "topology.conf").unlink(missing_ok=True)
    if spec.prefix:
        _check_installed(spec, desc, texts)
        return desc
    libexec = spec.path("install", "libexec")
    libexec.mkdir(parents=True, exist_ok=True)
    _link(spec.path("install", "venv"), sys.prefix)
    _script(Path(desc.path("wrapper")), texts["slurm-ipu-hook"])
    client = Path(desc.path("client"))
    source = Path(__file__).resolve().parents[1] / "hooks" / "client.c"
    if not client.exists() or client.stat().st_mtime < source.stat().st_mtime:  # like bin/vipu-fast: once
        build_client(client)
    return desc


def _check_installed(spec: LabSpec, desc, texts: dict) -> None:
    """Installed mode: what make install put in place must be what this lab's site renders."""
    fix = (f"run `make install PREFIX={spec.prefix} SITE=<(slurm-ipu lab site --dir {spec.dir} "
           f"--prefix {spec.prefix})` first")
    path = desc.path("wrapper")
    try:
        same = Path(path).read_text() == texts["slurm-ipu-hook"]
    except OSError:
        same = False
    if not same:
        raise LabError(f"{path} is missing or not rendered from this lab's site; {fix}")
    if not Path(desc.path("plugin")).is_file():
        raise LabError(f"{desc.path('plugin')} is missing; {fix}")
    if Path(sys.prefix).resolve() != Path(spec.prefix, "venv").resolve():
        raise LabError(f"this slurm-ipu runs from {sys.prefix}, not the install in {spec.prefix}; "
                       f"run {spec.prefix}/venv/bin/slurm-ipu")


def write_files(spec: LabSpec) -> None:
    for sub in ("etc", "bin", "spool/ctld", "run", "log", "state", "vipu-emu"):
        spec.path(sub).mkdir(parents=True, exist_ok=True)
    for name in spec.node_names:
        spec.path("spool", name).mkdir(exist_ok=True)
    ctx = context(spec)
    atomic_write(spec.path("etc", "slurm.conf"), render.render("slurm.conf", ctx))
    if spec.accounting:
        atomic_write(spec.path("etc", "slurmdbd.conf"), render.render("slurmdbd.conf", ctx), 0o600)
    cgroup = releases.cgroup_conf(releases.installed(SBIN) or "0.0")
    if cgroup:
        atomic_write(spec.path("etc", "cgroup.conf"), cgroup)
    desc = install_site(spec)
    from ..deploy import fragments

    atomic_write(spec.path("etc", "vipu-emu.yaml"), fragments.emulator_cluster(desc))
    py = sys.executable
    address = (f"VIPU_CLI_API_HOST=${{VIPU_CLI_API_HOST:-127.0.0.1}} "
               f"VIPU_CLI_API_PORT=${{VIPU_CLI_API_PORT:-{spec.vipu_port}}}")
    _script(spec.path("bin", "vipu-py"),
            f"#!/bin/sh\n# The emulator's vipu-compatible command line.\n"
            f"{address} exec {py} -m slurm_ipu.emulator.vipucli \"$@\"\n")
    # The lab's `vipu`: create, remove, list and reset in C, as cheap as a native vipu; the rest in Python.
    fast = build_vipu_fast(spec)
    _script(spec.path("bin", "vipu"),
            "#!/bin/sh\n# The lab's V-IPU CLI: the emulator's vipu-compatible command line.\n" +
            (f"{address} VIPU_FAST_FALLBACK={spec.path('bin', 'vipu-py')} exec {fast} \"$@\"\n" if fast else
             f"exec {spec.path('bin', 'vipu-py')} \"$@\"\n"))
    # The product's own commands on the lab's PATH, run by the interpreter that has the package.
    for name, module in LAB_COMMANDS.items():
        _script(spec.path("bin", name), f"#!/bin/sh\nexec {py} -m {module} \"$@\"\n")


def build_vipu_fast(spec: LabSpec) -> Path | None:
    """bin/vipu-fast from the emulator's vipu_fast.c (gcc, a fraction of a second, once); None
    without gcc: the Python CLI does every call then, only slower."""
    source = Path(__file__).resolve().parents[1] / "emulator" / "vipu_fast.c"
    target = spec.path("bin", "vipu-fast")
    if target.exists() and source.exists() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    gcc = shutil.which("gcc")
    if not gcc or not source.exists():
        return None
    tmp = target.with_name(".vipu-fast.tmp")
    proc = subprocess.run([gcc, "-O2", "-o", str(tmp), str(source)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise LabError(f"building {source} failed: {proc.stderr.strip()[-300:]}")
    os.replace(tmp, target)
    return target


# --- processes ---------------------------------------------------------------------------

def check_trusted(spec: LabSpec) -> None:
    """Before the lab reads, runs or signals anything from its directory: refuse it if another user
    could have written it, or any file the lab executes or takes a pid from (trust.py's rule)."""
    trust.check_dir(spec.dir)
    trust.check_files(spec.dir, _used_files(spec))


def _used_files(spec: LabSpec) -> list[Path]:
    """pids.json and the pid files the lab reads (the pids it records, then signals; MariaDB's it
    never reads: the lab records the pid it started); bin/ (first on the PATH of every command the
    lab runs), lib/ (the SPANK plugin srun and slurmd load) and etc/ (the daemons' configuration,
    which names what they run), whatever is in them; the hook wrapper and its client slurmctld runs
    for every job (under the installed prefix in installed mode)."""
    daemons = ["slurmctld", "munged", "slurmdbd", *(f"slurmd-{n}" for n in spec.node_names)]
    prefix = Path(spec.prefix) if spec.prefix else spec.path("install")
    files = [spec.path("pids.json"), *(spec.path("run", f"{d}.pid") for d in daemons),
             prefix / "libexec" / "slurm-ipu-hook", prefix / "libexec" / "slurm-ipu-hook-client"]
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
    return _follow_restarts(spec, pids)


def _follow_restarts(spec: LabSpec, pids: dict) -> dict:
    """From 23.11 `scontrol reconfigure` restarts slurmctld and slurmd as new processes: a
    recorded daemon that is gone is followed to the pid in its pid file when that process runs
    this lab's slurm.conf (its command line says so), so `down` still stops exactly the lab's."""
    conf = str(spec.path("etc", "slurm.conf"))
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
        if conf.encode() in argv:
            pids[key] = _record(pid)
    return pids


def save_pids(spec: LabSpec, pids: dict) -> None:
    atomic_write(spec.path("pids.json"), json.dumps(pids, indent=1))


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
    _run([str(SBIN / "munged"), "--force", f"--socket={spec.path('run', 'munge.socket')}",
          f"--pid-file={pidfile}", f"--log-file={spec.path('log', 'munged.log')}",
          f"--seed-file={spec.path('run', 'munged.seed')}", f"--key-file={key}"], spec,
         log=spec.path("log", "munged.log"))
    pids["munged"] = _record(_wait_pidfile(pidfile, 10, "munged", spec.path("log", "munged.log")))


def start_emulator(spec: LabSpec, pids: dict) -> None:
    from ..emulator.process import EmulatorProcess

    if _running(pids.get("vipu-emu")):
        return
    say(f"starting the V-IPU emulator on 127.0.0.1:{spec.vipu_port}")
    emu = EmulatorProcess.start(spec.path("vipu-emu"), cluster=str(spec.path("etc", "vipu-emu.yaml")),
                                port=spec.vipu_port, log_path=spec.path("log", "vipu-emu.log"), detach=True)
    pids["vipu-emu"] = _record(emu.pid)


def start_slurm(spec: LabSpec, pids: dict) -> None:
    conf = str(spec.path("etc", "slurm.conf"))
    if not _running(pids.get("slurmctld")):
        spec.path("run", "slurmctld.pid").unlink(missing_ok=True)
        # -c (a clean start, no saved jobs) only for a new lab: a restart keeps the job queue.
        clean = ["-c"] if "slurmctld" not in pids else []
        say(f"starting slurmctld on port {spec.ctld_port}{'' if clean else ' (keeping its saved jobs)'}")
        _run([str(SBIN / "slurmctld"), *clean, "-f", conf], spec, log=spec.path("log", "slurmctld.log"))
        pids["slurmctld"] = _record(_wait_pidfile(spec.path("run", "slurmctld.pid"), 30, "slurmctld",
                                                  spec.path("log", "slurmctld.log")))
    for name in spec.node_names:
        key = f"slurmd-{name}"
        if _running(pids.get(key)):
            continue
        pidfile = spec.path("run", f"slurmd-{name}.pid")
        pidfile.unlink(missing_ok=True)
        _run([str(SBIN / "slurmd"), "-f", conf, "-N", name], spec, log=spec.path("log", f"slurmd-{name}.log"))
        pids[key] = _record(_wait_pidfile(pidfile, 30, f"slurmd {name}", spec.path("log", f"slurmd-{name}.log")))
    say(f"started slurmd {', '.join(spec.node_names)}")


def start_reaper(spec: LabSpec, pids: dict) -> None:
    """The hook service, as a site runs it from systemd: the hook wrapper queues ended jobs'
    partitions for it while it holds its lock."""
    if _running(pids.get("reaper")):
        return
    lock = service_lock(spec.path("state"))
    with open(spec.path("log", "reaper.log"), "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "slurm_ipu.cli", "reap", "--watch"], env=spec.env(),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    pids["reaper"] = _record(proc.pid)
    sock = socket_path(spec.path("state"))

    def started() -> bool:
        """The service writes its pid into its lock file once it holds the lock and listens. Read,
        never probed: taking the lock to test it can make the starting service find it held."""
        try:
            return lock.read_text().split()[0] == str(proc.pid) and sock.exists()
        except (OSError, IndexError):
            return False

    if not poll(lambda: started() or proc.poll() is not None, 15) or not started():
        raise LabError(f"the hook service did not start: {_log_tail(spec.path('log', 'reaper.log'))}")
    say(f"started the hook service (slurm-ipu reap --watch, pid {proc.pid})")


def stop_reaper(spec: LabSpec, sig: int = signal.SIGTERM) -> None:
    """Stop the hook service by its recorded pid (drills: the hooks without it, a crash)."""
    pids = load_pids(spec)
    rec = pids.pop("reaper", None)
    pid = _pid(rec)
    if _running(rec):
        if sig == signal.SIGTERM:
            _stop_pid(pid, "reaper")
        else:
            os.kill(pid, sig)
            poll(lambda: not pid_alive(pid), 10)
    save_pids(spec, pids)


def restart_reaper(spec: LabSpec) -> None:
    pids = load_pids(spec)
    start_reaper(spec, pids)
    save_pids(spec, pids)


def _drain_journal(spec: LabSpec, timeout: float = 15.0) -> None:
    """Before the service stops: the partitions of the jobs just cancelled are queued for it."""
    journal = Journal(spec.path("state"))
    poll(lambda: not journal.names(), timeout)


def slurm_cli(spec: LabSpec, timeout: float = 15.0):
    """The lab's Slurm commands, through the product's one Slurm interface."""
    from ..slurm.commands import SlurmCli

    return SlurmCli(str(spec.path("etc", "slurm.conf")), str(SBIN.parent / "bin"), timeout, environ=spec.env())


def _slurm(spec: LabSpec, tool: str, *args: str) -> str | None:
    """What a Slurm command prints, None when it fails (a lab starting or stopping)."""
    from ..errors import SlurmIpuError

    try:
        return slurm_cli(spec).output(tool, *args)
    except SlurmIpuError:
        return None


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
        # idle, or running jobs (a restart of a partly dead lab keeps them)
        if all(states.get(n, "").startswith(("idle", "mixed", "alloc")) for n in spec.node_names):
            return
        bad = [n for n in spec.node_names if states.get(n, "").startswith(("down", "drain"))]
        if bad and not resumed:
            _slurm(spec, "scontrol", "update", f"NodeName={','.join(bad)}", "State=RESUME")
            resumed = True
        time.sleep(0.3)
    raise LabError(f"nodes not up after {timeout:g}s ({last}); see {spec.path('log')}")


def ensure_spank(spec: LabSpec) -> None:
    so = REPO / "spank" / "spank_ipu.so"
    sources = list((REPO / "spank").glob("*.[ch]"))
    if so.exists() and all(so.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return
    say("building the SPANK plugin")
    proc = subprocess.run(["make", "-s", "-C", str(REPO / "spank")], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise LabError(f"building spank/ failed: {proc.stderr.strip()[-400:]}")


def install_spank(spec: LabSpec) -> None:
    """A copy in the lab, as an install puts it in Slurm's plugin directory: every user's sbatch
    and srun load it, and the checkout may sit where they cannot read."""

    ensure_spank(spec)
    lib = spec.path("lib")
    lib.mkdir(parents=True, exist_ok=True)
    atomic_write(lib / "spank_ipu.so", (REPO / "spank" / "spank_ipu.so").read_bytes(), 0o755)


def up(spec: LabSpec) -> None:
    check_spec(spec)
    trust.make_dir(spec.dir)  # before anything in it is read, written or started
    pids = load_pids(spec)    # checks what is in it (check_trusted)
    for tool in ("slurmctld", "slurmd", "munged"):
        if not (SBIN / tool).exists():
            raise LabError(f"{SBIN / tool} is missing; install Slurm and munge (apt-get install slurm-wlm munge), "
                           "or run `make demo`")
    if spec.accounting:
        from . import accounting

        accounting.check_installed()
    if not spec.prefix:
        install_spank(spec)  # installed mode: make install built and placed it
    others = any(_running(p) for k, p in pids.items() if k != "spec")
    if pids.get("spec") and pids["spec"] != _spec_key(spec) and others:
        raise LabError(f"a lab with other settings runs in {spec.dir}; `slurm-ipu lab down` first")
    write_files(spec)
    pids["spec"] = _spec_key(spec)
    before = {k for k, rec in pids.items() if k != "spec" and _running(rec)}
    try:
        try:
            start_munge(spec, pids)
            start_emulator(spec, pids)
            if spec.accounting:
                from . import accounting

                accounting.start_mariadb(spec, pids)
                accounting.start_slurmdbd(spec, pids)
            start_slurm(spec, pids)
            start_reaper(spec, pids)
        finally:
            save_pids(spec, pids)
        wait_idle(spec, pids)
    except BaseException:
        started = [k for k, rec in pids.items() if k != "spec" and k not in before and _running(rec)]
        say(f"start failed; stopping what this start started ({', '.join(started) or 'nothing'})")
        _stop_all(pids, started)
        save_pids(spec, pids)
        raise
    say(f"up: {spec.nodes} nodes x ipu:{spec.ipus_per_node}, V-IPU emulator on 127.0.0.1:{spec.vipu_port}"
        + (f", slurmdbd on 127.0.0.1:{spec.dbd_port}" if spec.accounting else ""))
    print_exports(spec)


def _spec_key(spec: LabSpec) -> dict:
    return {k: str(v) for k, v in asdict(spec).items()}


def print_exports(spec: LabSpec) -> None:
    print(f"export SLURM_CONF={spec.path('etc', 'slurm.conf')}")
    print(f"export SLURM_IPU_SITE={spec.path('etc', 'site.yaml')}")
    print(f"export PATH={spec.path('bin')}:$PATH")


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


def down(spec: LabSpec, cancel: bool = True) -> None:
    pids = load_pids(spec)
    if not pids:
        say(f"no lab recorded in {spec.dir}")
        return
    if cancel and _running(pids.get("slurmctld")):
        cancel_all(spec)
    if cancel and _running(pids.get("reaper")):
        _drain_journal(spec)
    _stop_all(pids, list(pids))
    spec.path("pids.json").unlink(missing_ok=True)
    say("down")


def _stop_all(pids: dict, keys: list[str]) -> None:
    """Stop the recorded processes named in keys, slurmd first, munged last."""
    order = [k for k in pids if k.startswith("slurmd-")] + ["slurmctld", "slurmdbd", "mariadb", "reaper", "vipu-emu",
                                                             "munged"]
    for key in order:
        rec = pids.get(key)
        if key in keys and _running(rec):
            say(f"stopping {key} (pid {_pid(rec)})")
            _stop_pid(_pid(rec), key)


def status(spec: LabSpec) -> int:
    pids = load_pids(spec)
    if not pids:
        say(f"no lab recorded in {spec.dir}")
        return 1
    alive = True
    for key, rec in pids.items():
        if key == "spec":
            continue
        ok = _running(rec)
        pid = _pid(rec) or "-"
        alive &= ok
        print(f"{key:<14} pid {pid:<8} {'running' if ok else 'STOPPED'}")
    if _running(pids.get("slurmctld")):
        for name, state in node_states(spec).items():
            print(f"{name:<14} {state}")
    return 0 if alive else 1
