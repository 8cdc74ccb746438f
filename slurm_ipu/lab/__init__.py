"""`slurm-ipu lab up|down|status`: a real Slurm cluster on one machine, plus the V-IPU emulator.

One slurmctld and N `slurmd -N nodeK` on loopback (docs/slurm.md),
configuration rendered from templates/, the `vipu` shim on the lab's own PATH only. Every
process the lab starts is recorded in LAB/pids.json by pid and start time (so a pid the kernel
has since given to another process, after a crash or a reboot, is never signalled); `down`
stops exactly those, and `up` on a partly dead lab restarts only what is dead. The slurm-ipu service
has a supervisor (supervise.py) that starts it again when it fails, as systemd does on a site;
it records the service's current pid in LAB/run/reaper.json, which load_pids reads.
Progress goes to stderr; stdout carries only `export NAME=value` lines for `eval`.
"""

from __future__ import annotations

from .. import rules
from ..errors import LabError
from . import trust
from .daemons import (
    _drain_journal,
    _slurm,
    _stop_all,
    cancel_all,
    check_trusted,
    load_pids,
    node_states,
    restart_service,
    save_pids,
    service_status,
    slurm_cli,
    start_emulator,
    start_munge,
    start_service,
    start_slurm,
    stop_service,
    wait_idle,
)
from .files import build_vipu_fast, context, install_site, install_spank, site_description, write_files
from .procs import _pid, _run, _running, _stop_pid, say
from .spec import (
    CLUSTER,
    FROM_PACKAGES,
    MUNGED,
    PREFIX,
    REAP_INTERVAL,
    REPO,
    SBIN,
    TWIN_GRES,
    LabSpec,
    _spec_key,
    check_spec,
)

# What callers reach as slurm_ipu.lab.<name> (the CLI, the demo, the tests).
__all__ = ["CLUSTER", "FROM_PACKAGES", "MUNGED", "PREFIX", "REAP_INTERVAL", "REPO", "SBIN", "TWIN_GRES", "LabSpec",
           "build_vipu_fast", "check_trusted", "context", "down", "install_site", "load_pids", "node_states",
           "restart_service", "save_pids", "site_description", "slurm_cli", "status", "stop_service", "up", "_run",
           "_running", "_slurm", "_stop_all", "_stop_pid"]


def up(spec: LabSpec) -> None:
    check_spec(spec)
    trust.make_dir(spec.dir)  # before anything in it is read, written or started
    pids = load_pids(spec)    # checks what is in it (check_trusted)
    for tool in (SBIN / "slurmctld", SBIN / "slurmd", MUNGED):
        if not tool.exists():
            raise LabError(f"{tool} is missing; install Slurm and munge (apt-get install slurm-wlm munge), "
                           "or run `make demo`")
    if spec.accounting:
        from . import accounting

        accounting.check_installed()
    for name in ("slurm.conf", "vipu-emu.yaml") if spec.own_conf else ():
        if not spec.path("etc", name).is_file():
            raise LabError(f"--own-conf: {spec.path('etc', name)} is missing; write the site's {name} there "
                           "first, or leave out --own-conf")
    if not spec.prefix and not spec.own_conf:
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
            if not spec.own_conf:
                start_service(spec, pids)
        finally:
            save_pids(spec, pids)
        wait_idle(spec, pids)
        if not spec.own_conf:
            _snapshot(spec)
    except BaseException:
        started = [k for k, rec in pids.items() if k != "spec" and k not in before and _running(rec)]
        say(f"start failed; stopping what this start started ({', '.join(started) or 'nothing'})")
        _stop_all(pids, started)
        save_pids(spec, pids)
        raise
    sizes = ", ".join(f"{h} x ipu:{rules.IPUS_PER_ILD // h}" for h in spec.pod_hosts)  # a POD64 on each Pod's hosts
    nodes = " (the site's own slurm.conf)" if spec.own_conf else f" ({sizes})" if sizes else \
        f" x ipu:{spec.ipus_per_node}"
    say(f"up: {spec.nodes} nodes{nodes}, V-IPU emulator on 127.0.0.1:{spec.vipu_port}"
        + (f", slurmdbd on 127.0.0.1:{spec.dbd_port}" if spec.accounting else ""))
    print_exports(spec)


def _snapshot(spec: LabSpec) -> None:
    """What an admin records before merging (`slurm-ipu snapshot`), for the lab's doctor to compare
    with: the lab starts merged, and a snapshot leaves slurm-ipu's own items out, so one taken
    now, at each start, is the same record."""
    from .. import config
    from ..deploy import snapshot
    from ..slurm.commands import SlurmCli

    site = config.load(str(spec.path("etc", "site.yaml")), twins=False)
    snapshot.save(snapshot.record(SlurmCli.of_site(site, timeout=30)), site.path("snapshot"))


def print_exports(spec: LabSpec) -> None:
    print(f"export SLURM_CONF={spec.path('etc', 'slurm.conf')}")
    if not spec.own_conf:
        print(f"export SLURM_IPU_SITE={spec.path('etc', 'site.yaml')}")
    print(f"export PATH={spec.path('bin')}:$PATH")


def down(spec: LabSpec, cancel: bool = True) -> None:
    pids = load_pids(spec)
    if not pids:
        say(f"no lab recorded in {spec.dir}")
        return
    if cancel and _running(pids.get("slurmctld")):
        cancel_all(spec)
    if cancel and _running(pids.get("service")):
        _drain_journal(spec)
    _stop_all(pids, list(pids))
    spec.path("pids.json").unlink(missing_ok=True)
    say("down")


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
        note = service_status(spec, pids) if key == "service" else ""
        print(f"{key:<14} pid {pid:<8} {'running' if ok else 'STOPPED'}{note}")
    if _running(pids.get("slurmctld")):
        for name, state in node_states(spec).items():
            print(f"{name:<14} {state}")
    return 0 if alive else 1
