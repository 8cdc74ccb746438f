"""The canaries: the hooks' own create and remove of a 1-IPU partition (or allocation), a job
user's own create tried as that user, and (doctor --jobs) a 1-IPU step on each host."""

from __future__ import annotations

import contextlib
import os
import time

from ... import rules
from ...config import Site
from ...errors import SlurmIpuError
from ...slurm.refusals import POLICY_REFUSED, site_rule
from ..render import PROBE_NAME
from .findings import Charge, Facts

ENDING = "COMPLETING"


PROBE_UID = 65534  # nobody: a user with no V-IPU grant, as a job's user


CANARY_NAME = "slurm-ipu-doctor-canary"


def _as_user(name: str) -> list[str]:
    """The argv prefix that runs a command as `name` (root only; [] when already that user)."""
    import pwd
    import shutil

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return []
    setpriv = shutil.which("setpriv")
    if entry.pw_uid == os.getuid() or os.getuid() != 0 or setpriv is None:
        return []
    return [setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", "--"]


def canary(site: Site, controller=None) -> str:
    """What a job start does at V-IPU, done once: as the hooks' user (slurm.user), with the hooks'
    vipu command, credentials and flags, a 1-IPU partition for a job's user (uid 65534) on the
    first host, in the allocation a job there gets, created and removed (on `controller`, by
    default the site's only one). "ok", or why not."""
    from ...vipu import VipuClient

    controller = controller or site.controllers[0]
    who = _as_user(site.slurm.user)
    client = VipuClient(command=[*who, *site.command_for(controller)], host=controller.host,
                        port=controller.port, timeout=site.vipu.timeout, retries=1,
                        emulator_flags=site.vipu.emulator, admin_command=[*who, *site.command_for(controller, True)])
    deadline = time.monotonic() + 3 * site.vipu.timeout
    mine = [p for p in site.pods if p.name in controller.pods]
    models = {site.model_for(p.hosts) for p in mine} or site.models
    if "allocation" in models:
        found = _canary_allocation(site, client, deadline, mine)
        if found != "ok" or "partition" not in models:
            return found
    pod = ([p for p in site.pods_of_model("partition") if p in mine] or mine or [None])[0]
    allocation, hosts = (pod.name, list(pod.hosts)) if pod else (controller.allocation, site.hosts)
    with _quiet():  # the finding carries the error: one line per item
        try:
            client.ensure_partition(CANARY_NAME, 1, deadline, allocation=allocation, hosts=hosts[:1],
                                    owner_uid=PROBE_UID)
        except SlurmIpuError as exc:
            return str(exc)
        finally:
            try:
                client.remove_partition(CANARY_NAME, missing_ok=True,
                                        deadline=time.monotonic() + site.vipu.timeout)
            except SlurmIpuError:
                pass
    return "ok"


class NotTried(SlurmIpuError):
    """The canary had nothing it could try without touching a job's (every IPU-Machine is taken)."""


def _canary_allocation(site: Site, client, deadline: float, pods=()) -> str:
    """The allocation model's job start: an allocation of one IPU-Machine no job holds, granted to
    a job's user, created and removed with vipu.admin_command as the hooks' user (among `pods`'
    machines when given: one controller's)."""
    from ...hooks.reap import job_of

    with _quiet():
        try:
            held = {a for name, agents in client.list_allocations(deadline).items()
                    if job_of(name, site.allocation.prefix) is not None for a in agents}
            hosts = [h for p in site.pods_of_model("allocation") if not pods or p in pods for h in p.hosts] or \
                site.hosts
            free = [a for a in site.agents_of(hosts) if a not in held]
            if not free:
                raise NotTried("every IPU-Machine of the Pod is in a job's allocation; not tried")
            client.create_allocation(CANARY_NAME, free[:1], [PROBE_UID], deadline=deadline)
        except NotTried:
            raise
        except SlurmIpuError as exc:
            return str(exc)
        finally:
            try:
                client.remove_allocation(CANARY_NAME, missing_ok=True, deadline=time.monotonic() + site.vipu.timeout)
            except SlurmIpuError:
                pass
    return "ok"


@contextlib.contextmanager
def _quiet():
    """The V-IPU client's own error log off: doctor reports each failure in its finding."""
    import logging

    log = logging.getLogger("slurm_ipu.vipu")
    was, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = was


def try_as_job_user(site: Site, hooks, controller=None) -> str | None:
    """What a job's user gets by asking V-IPU for a 1-IPU partition in the site's allocation
    directly, with the site's vipu command and none of the hooks' credentials: 'refused' (V-IPU
    only through Slurm), 'created' (then removed again with the hooks' client), or why it could
    not tell. None: not tried (only root can act as another user)."""
    import shutil

    from ...errors import PermissionDenied
    from ...vipu import VipuClient

    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or setpriv is None:
        return None
    user = VipuClient(command=[setpriv, f"--reuid={PROBE_UID}", f"--regid={PROBE_UID}", "--clear-groups", "--",
                               *site.vipu.command.split()],
                      host=(controller or site.controllers[0]).host, port=(controller or site.controllers[0]).port,
                      timeout=site.vipu.timeout, retries=1)
    deadline = time.monotonic() + 2 * site.vipu.timeout
    try:
        with _quiet():  # a refusal is the answer hoped for, not an error to log
            user.create_partition(PROBE_NAME, 1, deadline=deadline,
                                  allocation=(controller or site.controllers[0]).allocation)
    except PermissionDenied:
        return "refused"
    except SlurmIpuError as exc:
        return f"could not tell: {exc}"
    hooks.remove_partition(PROBE_NAME, missing_ok=True, deadline=time.monotonic() + site.vipu.timeout)
    return "created"


STEP_NAME = "slurm-ipu-doctor-step"


def step_canaries(site: Site, facts: Facts) -> dict[str, str] | None:
    """`doctor --jobs`: what a job's task sees, on a host of each Pod: a 1-IPU srun step as root,
    through job_submit.lua, the prolog, the SPANK plugin on that node (configless nodes get their
    plugstack.conf from slurmctld) and the epilog. host -> 'ok' or what went wrong; None: not root."""
    from ...slurm.commands import SlurmCli

    if os.getuid() != 0:
        return None
    cli = SlurmCli.of_site(site, timeout=90)
    hosts = [pod.hosts[0] for pod in site.pods] or site.hosts[:1]
    return {host: _step(cli, site, host, facts.charge) for host in hosts}


def _step(cli, site: Site, host: str, charge: Charge) -> str:
    try:
        text = cli.output("srun", *charge.options(), "-N1", "-w", host, "--gres=ipu:1", "--immediate=30", "--time=1",
                          f"--job-name={STEP_NAME}", "/usr/bin/env")
    except SlurmIpuError as exc:
        if rule := site_rule(getattr(exc, "said", ())):
            return f"{POLICY_REFUSED}{rule}"
        busy = "Unable to allocate resources" in str(exc) or "busy" in str(exc)
        return f"busy: {exc}" if busy else str(exc)
    env = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    partition = env.get("IPUOF_VIPU_API_PARTITION_ID")
    want = rules.job_name(site.partition.prefix, env.get("SLURM_JOB_ID"))
    if partition is None:
        return "its task saw no IPUOF_VIPU_API_PARTITION_ID (the SPANK plugin is not loaded there)"
    return "ok" if partition == want else f"its task saw IPUOF_VIPU_API_PARTITION_ID={partition}, not {want}"
