"""The job's V-IPU partition as ipurun sees it: its shape (GCDs, ILDs, reconfigurable), and
PopRun's --update-partition and --reset-partition.

Cheap by default: the shape comes from the variables the SPANK plugin gives every task
(SPANK_IPU_GCDS, SPANK_IPU_ILDS, SPANK_IPU_RECONFIGURABLE: the job's --ipu-* options, which
the prolog created the partition with), overlaid by the job's state file on this host, where
an earlier ipurun of the same job recorded what it changed. V-IPU is called only to update
(which first reads the partition) or to reset, so a plain launch costs no V-IPU round trip.

Reset, as PopRun documents it: --reset-partition=yes resets before the run; unset resets a
non-reconfigurable partition, except on the job's first run, whose partition the prolog has
just created.
"""

from __future__ import annotations

import os

from ..errors import ConfigError, SlurmIpuError, VipuError
from .task import CACHE_ROOT


class Shape:
    __slots__ = ("gcds", "ilds", "reconfigurable", "size")

    def __init__(self, gcds: int = 1, ilds: int | None = None, reconfigurable: bool = False,
                 size: int | None = None):
        self.gcds, self.ilds, self.reconfigurable, self.size = gcds, ilds, reconfigurable, size

    def as_dict(self) -> dict:
        return {"gcds": self.gcds, "ilds": self.ilds, "reconfigurable": self.reconfigurable, "size": self.size}


def _count(env: dict, key: str) -> int | None:
    text = env.get(key, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


# The root the SPANK plugin's job epilog cleans: it removes STATE_ROOT/ipurun-job-<jobid>.json.
STATE_ROOT = CACHE_ROOT


def state_path(env: dict) -> str | None:
    job = env.get("SLURM_JOB_ID", "")
    return os.path.join(STATE_ROOT, f"ipurun-job-{job}.json") if job.isdigit() else None


def read_state(env: dict) -> dict:
    path = state_path(env)
    try:
        with open(path) as fh:
            text = fh.read()
        import json  # only from a job's second run on

        doc = json.loads(text)
        return doc if isinstance(doc, dict) else {}
    except (TypeError, OSError, ValueError):
        return {}  # no job, first run, or a file we cannot trust: start from the job's options


def write_state(env: dict, doc: dict) -> None:
    path = state_path(env)
    if path is None:
        return
    import json

    tmp = f"{path}.{os.getpid()}"
    try:
        with open(tmp, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)  # whole or not at all: a concurrent ipurun never reads half a file
    except OSError:
        pass  # losing the run count only costs one reset or one skipped reset, never a failure


def known_shape(env: dict, state: dict) -> Shape:
    shape = Shape(_count(env, "SPANK_IPU_GCDS") or 1, _count(env, "SPANK_IPU_ILDS"),
                  env.get("SPANK_IPU_RECONFIGURABLE") == "1")
    for key in ("gcds", "ilds", "reconfigurable", "size"):
        if state.get(key) is not None:
            setattr(shape, key, state[key])
    return shape


def fitting_gcds(gcds: int, instances: int) -> int:
    """The partition's GCD count if the instances share its GCDs evenly, else 1 (PopRun's
    default for a partition it creates)."""
    return gcds if gcds <= instances and instances % gcds == 0 else 1


class PartitionPlan:
    """What ipurun will do to the partition, decided before anything changes."""

    def __init__(self, name: str | None, shape: Shape, state: dict, recreate: bool = False, reset: bool = False,
                 current=None):
        self.name, self.shape, self.state = name, shape, state
        self.recreate, self.reset, self.current = recreate, reset, current  # current: the Partition read


def decide(opts, env: dict, instances: int, client_factory) -> PartitionPlan:
    """The shape the run will use and the V-IPU changes it needs. Reads V-IPU only with
    --update-partition; changes nothing."""
    state = read_state(env)
    shape = known_shape(env, state)
    name = opts.vipu_partition or env.get("IPUOF_VIPU_API_PARTITION_ID")
    if opts.offline_mode or not name:
        return PartitionPlan(None, shape, state)
    recreate, current = False, None
    if opts.update_partition:
        part = client_factory().get_partition(name)
        if part is None:
            raise ConfigError(f"--update-partition: partition {name} does not exist; "
                              "run inside the job that owns it, or give --vipu-partition")
        current, shape = part, Shape(part.num_gcds, part.num_ilds, part.reconfigurable, part.size)
        want = Shape(fitting_gcds(part.num_gcds, instances), opts.num_ilds or part.num_ilds,
                     part.reconfigurable, part.size)
        recreate = (want.gcds, want.ilds) != (part.num_gcds, part.num_ilds)
        if recreate:
            _check(want)
            shape = want
    if opts.reset_partition is not None:
        reset = bool(opts.reset_partition)
    else:
        reset = not shape.reconfigurable and state.get("runs", 0) > 0
    return PartitionPlan(name, shape, state, recreate, reset and not recreate, current)


def _check(shape: Shape) -> None:
    from .. import rules

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

    if plan.recreate:
        _recreate(client_factory(), plan, time.monotonic() + deadline_s)
    elif plan.reset:
        client = client_factory()
        deadline = time.monotonic() + deadline_s
        after = client.reset_partition(plan.name, deadline)
        if after is None or after.state != "ACTIVE":  # one `vipu` call saved when the reply says ACTIVE
            client.wait_active(plan.name, deadline)
    doc = dict(plan.shape.as_dict(), runs=int(plan.state.get("runs", 0)) + 1)
    write_state(env, doc)


def _recreate(client, plan: PartitionPlan, deadline: float) -> None:
    old, new = plan.current, plan.shape
    keep = {"reconfigurable": old.reconfigurable, "allocation": old.allocation, "hosts": list(old.hosts),
            "owner_uid": old.owner_uid}
    client.emulator_flags = bool(old.hosts)  # only the emulator reports hosts, and only it takes them back
    client.remove_partition(plan.name, missing_ok=True, deadline=deadline)
    try:
        client.ensure_partition(plan.name, old.size, deadline, num_gcds=new.gcds, num_ilds=new.ilds, **keep)
    except VipuError as exc:
        try:
            client.remove_partition(plan.name, missing_ok=True, deadline=deadline)
            client.ensure_partition(plan.name, old.size, deadline, num_gcds=old.num_gcds, num_ilds=old.num_ilds,
                                    **keep)
        except VipuError as again:
            raise ConfigError(f"--update-partition: recreating {plan.name} failed ({exc}) and so did putting "
                              f"it back ({again}); ask your admin, the job has no partition now") from None
        raise ConfigError(f"--update-partition: V-IPU refused {plan.name} with {new.gcds} GCD(s) and "
                          f"{new.ilds} ILD(s) ({exc}); it is back as it was") from None


def make_client_factory(opts, env: dict):
    """A VipuClient on the job's controller, built on first use (its imports cost start-up)."""
    made = []

    def factory():
        if not made:
            from ..vipu import VipuClient

            host = opts.vipu_server_host or env.get("IPUOF_VIPU_API_HOST")
            port = opts.vipu_server_port or env.get("IPUOF_VIPU_API_PORT")
            command = env.get("IPURUN_VIPU_COMMAND", "vipu").split()
            made.append(VipuClient(command=command, host=host, port=int(port) if port else None,
                                   timeout=float(opts.vipu_server_timeout)))
        return made[0]
    return factory
