"""The V-IPU partition an ipurun run drives: which one, its real shape, and PopRun's
--update-partition and --reset-partition.

Which partition: --vipu-partition, else IPUOF_VIPU_API_PARTITION_ID (the SPANK plugin sets it in
every task of a job), else, inside an allocation whose shell is no task (salloc), the job's own:
the site's partition prefix + SLURM_JOB_ID, read from the slurm-ipu configuration.

Its shape (size, GCDs, ILDs, reconfigurable) comes from one V-IPU read per launch. The job's
--ipu-* options are not enough: in salloc no task carries them, --vipu-partition can name any
partition, and a partition can have been recreated by an earlier --update-partition on another
host. A GCD id computed from a guessed shape attaches the wrong IPUs without any error, so ipurun
asks V-IPU rather than guess. Offline runs, and launches that will create the partition
(outside an allocation: srun asks for --gres=ipu:N), read nothing.

Reset, as PopRun documents it: --reset-partition=yes resets before the run; unset resets a
non-reconfigurable partition, except on the job's first run, whose partition the prolog has
just created. A per-job run record on the launch host counts the runs.
"""

from __future__ import annotations

import os

from .. import rules
from ..errors import ConfigError, SlurmIpuError, VipuError
from .task import CACHE_ROOT


class Shape:
    __slots__ = ("gcds", "ilds", "reconfigurable", "size")

    def __init__(self, gcds: int = 1, ilds: int | None = None, reconfigurable: bool = False,
                 size: int | None = None):
        self.gcds, self.ilds, self.reconfigurable, self.size = gcds, ilds, reconfigurable, size

    @classmethod
    def of(cls, part) -> Shape:
        return cls(part.num_gcds, part.num_ilds, part.reconfigurable, part.size)


# The root the SPANK plugin's job epilog cleans: it removes STATE_ROOT/ipurun-job-<jobid>.json.
STATE_ROOT = CACHE_ROOT


def state_path(env: dict) -> str | None:
    job = env.get("SLURM_JOB_ID", "")
    return os.path.join(STATE_ROOT, f"ipurun-job-{job}.json") if job.isdigit() else None


def _trusted(fd: int) -> bool:
    """The record sits in /tmp under a name anyone can guess: believe it only if it is a
    regular file of ours that nobody else can write."""
    import stat

    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def read_state(env: dict) -> dict:
    path = state_path(env)
    if path is None:
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}  # the job's first run on this host (or a link someone planted: ignored)
    try:
        if not _trusted(fd):
            return {}
        import json  # only from a job's second run on

        doc = json.loads(os.read(fd, 65536) or b"{}")
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)


def write_state(env: dict, doc: dict) -> None:
    path = state_path(env)
    if path is None:
        return
    import json

    tmp = f"{path}.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)  # whole or not at all: a concurrent ipurun never reads half a file
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        # Losing the run count only costs one reset or one skipped reset, never a failure.


class Target:
    """Where the run's partition is and how to reach V-IPU; `name` None: no partition to read."""

    __slots__ = ("name", "host", "port", "command", "unknown")

    def __init__(self, name: str | None, host: str | None, port, command: list[str]):
        self.name, self.host, self.port, self.command = name, host, port, command
        self.unknown = None  # the missing configuration file, when nothing says where V-IPU is


def locate(opts, env: dict, inside: bool) -> Target:
    """The partition this run drives. Only salloc's shell (an allocation, no task, so no
    IPUOF_* from the SPANK plugin) needs the site configuration, for the prefix and V-IPU."""
    name = opts.vipu_partition or env.get("IPUOF_VIPU_API_PARTITION_ID")
    host = opts.vipu_server_host or env.get("IPUOF_VIPU_API_HOST")
    port = opts.vipu_server_port or env.get("IPUOF_VIPU_API_PORT")
    given = env.get("IPURUN_VIPU_COMMAND", "").split()
    if opts.offline_mode or not (inside or opts.vipu_partition):
        return Target(None, host, port, given or ["vipu"])
    if name and host:  # a task: `vipu` from PATH, as PopRun calls it (the configuration costs ~40 ms)
        return Target(name, host, port, given or ["vipu"])
    from .. import config

    path, _ = config.locate(env)
    if not os.path.exists(path):
        prefix = config.BY_KEY["partition.prefix"].default
        target = Target(name or rules.job_name(prefix, env["SLURM_JOB_ID"]), host, port, given or ["vipu"])
        target.unknown = None if host else path  # nothing says where V-IPU is
        return target
    from ..slurm.hostlist import expand

    site = config.load(path, environ=env)
    name = name or rules.job_name(site.partition.prefix, env["SLURM_JOB_ID"])
    # the site's vipu, without the hooks' credentials file (root's): a user's own vipu config
    # applies; on the controller of the job's nodes (a site may have several)
    controller = site.controller_of(expand(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""))
    return Target(name, host or controller.host, port or controller.port, given or [site.vipu.command])


def requested_shape(extra: list[str]) -> Shape:
    """Outside an allocation srun asks for the partition: its GCDs and ILDs are the --ipu-*
    options passed through to srun, if any (the SPANK plugin hands them to the prolog)."""
    shape = Shape()
    for arg in extra:
        name, _, value = arg.partition("=")
        if name in ("--ipu-gcds", "--ipu-ilds") and value.isdigit() and int(value) > 0:
            setattr(shape, name[6:], int(value))
        elif name == "--ipu-reconfigurable":
            shape.reconfigurable = True
    return shape


def fitting_gcds(gcds: int, instances: int) -> bool:
    """The instances share the partition's GCDs evenly (instance k drives GCD k // (n / G))."""
    return gcds <= instances and instances % gcds == 0


def poprun_gcds(size: int, instances: int, ilds: int | None) -> int:
    """GCDs for a partition ipurun creates: one per instance, as in PopRun's guide (32 replicas
    over 2 instances: a 32-IPU, 2-GCD partition), where V-IPU's rules allow it; otherwise the
    most GCDs that still divide the instances evenly."""
    for gcds in sorted((g for g in range(1, instances + 1) if instances % g == 0), reverse=True):
        try:
            rules.check_shape(size, gcds, ilds, cluster_ilds=max(ilds or 1, 1))
            return gcds
        except SlurmIpuError:
            continue
    return 1


class PartitionPlan:
    """What ipurun will do to the partition, decided before anything changes. step: the run's
    srun step gets a partition of its own (the allocation model), of `shape`; nothing to read."""

    def __init__(self, name: str | None, shape: Shape, state: dict, recreate: bool = False, reset: bool = False,
                 current=None, create: bool = False, allocation: str | None = None, step: bool = False):
        self.name, self.shape, self.state = name, shape, state
        self.recreate, self.reset, self.current = recreate, reset, current  # current: the Partition read
        self.create, self.allocation = create, allocation  # create: it does not exist; this run makes it
        self.step = step


def _host_ipus(site, env: dict) -> int:
    """The IPUs of each of the job's hosts (its Pod's ipus_per_host: a job stays in hosts of one
    size), from SLURM_JOB_NODELIST; the site's pod.ipus_per_host where the list names none of them."""
    from ..slurm.hostlist import expand

    sizes = site.host_ipus()
    mine = {sizes[h] for h in expand(env.get("SLURM_JOB_NODELIST", "")) if h in sizes}
    return mine.pop() if len(mine) == 1 else site.pod.ipus_per_host


def decide(opts, env: dict, instances: int, target: Target, client_factory, extra: list[str] = (),
           hosts: int = 1) -> PartitionPlan:
    """The partition's real shape and the V-IPU changes the run needs: one V-IPU read when
    there is a partition to drive, none offline; changes nothing."""
    state = read_state(env)
    if target.name is None:
        return PartitionPlan(None, requested_shape(extra), state)
    part = client_factory().get_partition(target.name)
    if part is None:
        site = allocation_site(env)  # the allocation model: the site, for the job's own allocation
        own = rules.job_name(site.allocation.prefix, env["SLURM_JOB_ID"]) if site else None
        if own and not opts.vipu_partition and _job_name(target.name, env, site):
            return _step_plan(opts, instances, hosts * _host_ipus(site, env), extra, state)
        if not opts.update_partition:
            raise ConfigError(_missing(target.name, env, opts, own))
        return PartitionPlan(target.name, _new_shape(opts, instances), state, create=True,
                             allocation=opts.vipu_allocation or own)
    shape, recreate = Shape.of(part), False
    if opts.update_partition:
        ilds = opts.num_ilds or part.num_ilds
        recreate = not fitting_gcds(part.num_gcds, instances) or ilds != part.num_ilds
        if recreate:
            shape = Shape(poprun_gcds(part.size, instances, ilds), ilds, False, part.size)
            _check(shape)
            if job_own(target.name, env):
                raise ConfigError(_kept(target.name, part, shape, env))
    elif opts.num_ilds and part.num_ilds and opts.num_ilds != part.num_ilds:
        # PopRun's rule: a partition of other ILDs is recreated only when asked to
        raise ConfigError(f"--num-ilds {opts.num_ilds}: partition {target.name} has {part.num_ilds} ILD(s); use "
                          f"--num-ilds {part.num_ilds} or leave it out"
                          + reshape_hint(target.name, env, ilds=opts.num_ilds))
    if opts.reset_partition is not None:
        reset = bool(opts.reset_partition)
    else:
        reset = not shape.reconfigurable and state.get("runs", 0) > 0
    return PartitionPlan(target.name, shape, state, recreate, reset and not recreate, part,
                         allocation=opts.vipu_allocation or part.allocation)


def job_own(name: str, env: dict) -> bool:
    """Whether `name` is the partition Slurm's hooks made for this job or one of its steps (the
    site's partition prefix, the job id, and for a step `_<step>`). No user may make such a name
    (the site keeps V-IPU to Slurm), so ipurun never removes one to recreate it: the job would lose
    its IPUs. Read on the paths that would reshape a partition only (the site description costs
    start-up)."""
    from .. import config

    job = env.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        return False
    prefix = config.BY_KEY["partition.prefix"].default
    path, _ = config.locate(env)
    try:
        prefix = config.load(path, environ=env).partition.prefix if os.path.exists(path) else prefix
    except (OSError, SlurmIpuError):
        pass
    parsed = rules.parse_name(name, prefix)
    return parsed is not None and parsed[0] == int(job)


def reshape_hint(name: str | None, env: dict, gcds: int | None = None, ilds: int | None = None) -> str:
    """How to get a partition of another shape, as advice appended to a refusal: the job's own is
    asked for when the job is submitted; one the user made is recreated by ipurun."""
    wanted = " ".join(f"--ipu-{k}={v}" for k, v in (("gcds", gcds), ("ilds", ilds)) if v)
    if name is not None and job_own(name, env):
        return f", or submit the job with {wanted} for a partition of that shape"
    what = f"{gcds} GCD(s)" if gcds else f"{ilds} ILD(s)"
    return f", or --update-partition=yes to recreate it with {what}"


def _kept(name: str, part, shape: Shape, env: dict) -> str:
    ilds = f" --ipu-ilds={shape.ilds}" if shape.ilds != part.num_ilds else ""
    return (f"--update-partition: {name} is job {env.get('SLURM_JOB_ID')}'s own partition ({part.num_gcds} GCD(s), "
            f"{part.num_ilds} ILD(s)), made by Slurm's hooks: ipurun leaves it as it is, since no user may make it "
            f"again. Run a multiple of {part.num_gcds} instances on it as it is, or submit the job with "
            f"--ipu-gcds={shape.gcds}{ilds} for this shape")


def _new_shape(opts, instances: int) -> Shape:
    """PopRun creates a partition of exactly the IPUs the replicas need, never reconfigurable."""
    size = opts.num_replicas * opts.ipus_per_replica
    shape = Shape(poprun_gcds(size, instances, opts.num_ilds), opts.num_ilds, False, size)
    _check(shape)
    return shape


def allocation_site(env: dict):
    """The site description, when the job's hosts are of the allocation model (its allocation is
    allocation.prefix + job id, where a partition this run creates goes unless --vipu-allocation
    says otherwise); else None. Read only when the partition is missing: the site description
    costs start-up."""
    from .. import config

    path, _ = config.locate(env)
    job = env.get("SLURM_JOB_ID", "")
    if not job.isdigit() or not os.path.exists(path):
        return None
    try:
        site = config.load(path, environ=env)
    except (OSError, SlurmIpuError):
        return None
    from ..slurm.hostlist import expand

    try:
        model = site.model_for(expand(env.get("SLURM_JOB_NODELIST", "")))
    except (ValueError, SlurmIpuError):
        return None
    return site if model == "allocation" else None


def _job_name(name: str, env: dict, site) -> bool:
    """Whether `name` is the job's own name (partition prefix + job id), which in the allocation
    model names no partition (unless allocation.partition) and no user may make."""
    return name == rules.job_name(site.partition.prefix, env.get("SLURM_JOB_ID"))


def _step_plan(opts, instances: int, size: int, extra: list[str], state: dict) -> PartitionPlan:
    """The allocation model, the job's own name: as for a plain srun, the run's step gets a
    partition of its own (prefix + job + _step, of the step's IPUs, made by the SPANK plugin
    under a name nobody else may take, removed when the step ends), with one GCD per instance
    where V-IPU allows (--ipu-gcds on the run's srun). Nothing here makes or reads a partition, so
    --update-partition has nothing to add."""
    ilds = max(1, size // rules.IPUS_PER_ILD)  # the job's hosts are a run: an aligned block, or whole ILDs
    if opts.num_ilds and opts.num_ilds != ilds:
        raise ConfigError(f"--num-ilds {opts.num_ilds}: this run's partition, the {size} IPUs of its hosts in the "
                          f"job's allocation, spans {ilds} ILD(s); use --num-ilds {ilds} or leave it out")
    given = requested_shape(extra)
    gcds = given.gcds if given.gcds > 1 else poprun_gcds(size, instances, ilds)
    return PartitionPlan(None, Shape(gcds, ilds, False, size), state, step=True)


def _missing(name: str, env: dict, opts, own: str | None = None) -> str:
    if own:
        return (f"partition {name} does not exist in job {env['SLURM_JOB_ID']}'s allocation {own}: create it "
                f"(vipu create partition {name} --allocation {own} --size N), or let ipurun create it with "
                "--update-partition=yes")
    if opts.vipu_partition:
        return (f"--vipu-partition {name}: no such partition on V-IPU; check `vipu list partitions` "
                "or leave --vipu-partition out to use the job's own")
    job = env.get("SLURM_JOB_ID", "?")
    if not named_after(name, job):  # the caller's own export (a Graphcore script's p$SLURM_JOB_ID)
        return (f"partition {name} does not exist (IPUOF_VIPU_API_PARTITION_ID names it): create it first, or "
                f"unset IPUOF_VIPU_API_PARTITION_ID to use job {job}'s own partition")
    from .hetenv import component_of

    group = component_of(env, job)
    if group is not None:  # hetjob.py: ipurun reads its component as the job
        return (f"partition {name} does not exist: component {group} of this heterogeneous job (job {job}) has no "
                "IPUs; run ipurun with --het-group=N, N the component that asked for them")
    return (f"partition {name} does not exist: job {job} has no IPUs; "
            "submit it with --gres=ipu:N (IPUs per node), or run with --offline-mode=yes")


def named_after(name: str, job: str) -> bool:
    """Whether `name` is this job's or one of its steps' partition names, as the SPANK plugin
    sets them: a prefix, the job id, and for a step `_<step>`."""
    head, sep, step = name.rpartition("_")
    if sep and step.isdigit() and head.endswith(job):
        name = head
    return job.isdigit() and name.endswith(job) and not name[:-len(job)][-1:].isdigit()


def _check(shape: Shape) -> None:
    try:
        rules.check_shape(shape.size, shape.gcds, shape.ilds, cluster_ilds=max(shape.ilds or 1, 1))
    except SlurmIpuError as exc:
        raise ConfigError(f"--update-partition: {exc}") from None


def apply(plan: PartitionPlan, env: dict, client_factory, deadline_s: float = 120.0) -> None:
    """Carry out the plan, then record the run. A failed recreate puts the old shape back,
    so the job never loses its partition to an update."""
    if plan.name is None:
        return
    import time

    if plan.create:
        client = client_factory()
        client.ensure_partition(plan.name, plan.shape.size, time.monotonic() + deadline_s,
                                num_gcds=plan.shape.gcds, num_ilds=plan.shape.ilds, allocation=plan.allocation)
    elif plan.recreate:
        _recreate(client_factory(), plan, time.monotonic() + deadline_s)
    elif plan.reset:
        client = client_factory()
        deadline = time.monotonic() + deadline_s
        after = client.reset_partition(plan.name, deadline)
        if after is None or after.state != "ACTIVE":  # one `vipu` call saved when the reply says ACTIVE
            client.wait_active(plan.name, deadline)
    write_state(env, {"runs": int(plan.state.get("runs", 0)) + 1})


def _recreate(client, plan: PartitionPlan, deadline: float) -> None:
    old, new = plan.current, plan.shape
    keep = {"reconfigurable": False, "allocation": plan.allocation, "hosts": list(old.hosts),
            "owner_uid": old.owner_uid}  # PopRun never creates a reconfigurable partition
    client.emulator_flags = bool(old.hosts)  # only the emulator reports hosts, and only it takes them back
    client.remove_partition(plan.name, missing_ok=True, deadline=deadline)
    try:
        client.ensure_partition(plan.name, old.size, deadline, num_gcds=new.gcds, num_ilds=new.ilds, **keep)
    except VipuError as exc:
        try:
            client.remove_partition(plan.name, missing_ok=True, deadline=deadline)
            client.ensure_partition(plan.name, old.size, deadline, num_gcds=old.num_gcds, num_ilds=old.num_ilds,
                                    **dict(keep, reconfigurable=old.reconfigurable, allocation=old.allocation))
        except VipuError as again:
            raise ConfigError(f"--update-partition: recreating {plan.name} failed ({exc}) and so did putting "
                              f"it back ({again}); ask your admin, the job has no partition now") from None
        raise ConfigError(f"--update-partition: V-IPU refused {plan.name} with {new.gcds} GCD(s) and "
                          f"{new.ilds} ILD(s) ({exc}); it is back as it was") from None


def make_client_factory(opts, target: Target):
    """A VipuClient on the run's controller, built on first use (its imports cost start-up)."""
    made = []

    def factory():
        if target.unknown:  # vipu would fall back to localhost:8090 and fail far from the cause
            raise ConfigError(f"no V-IPU controller known here: {target.unknown} does not exist and "
                              "IPUOF_VIPU_API_HOST is unset (this is no task of an IPU job); give "
                              "--vipu-server-host, or SLURM_IPU_SITE, or install slurm-ipu with SITE= on this host")
        if not made:
            from ..vipu import VipuClient

            made.append(VipuClient(command=target.command, host=target.host,
                                   port=int(target.port) if target.port else None,
                                   timeout=float(opts.vipu_server_timeout)))
        return made[0]
    return factory


def remove_created(plan: PartitionPlan, opts, client_factory, deadline_s: float = 120.0) -> None:
    """--remove-partition (default yes): a partition this run created goes when the run ends.
    A partition that existed before (the job's own, even if recreated) stays."""
    if not plan.create or not opts.remove_partition:
        return
    import time

    try:
        client_factory().remove_partition(plan.name, missing_ok=True, deadline=time.monotonic() + deadline_s)
    except VipuError as exc:
        import sys

        print(f"ipurun: could not remove partition {plan.name} that this run created ({exc}); remove it with "
              f"`vipu remove partition {plan.name}`", file=sys.stderr, flush=True)
