"""PrologSlurmctld: create the job's V-IPU partition before any task starts (with vipu.model
allocation: the job's allocation of its hosts' IPU-Machines, run_allocation below).

Sized from SLURM_JOB_LICENSES (trusted; a heterogeneous job's later component, which Slurm gives
no licence, from its GRES: one squeue), named prefix + job id, shaped by the user's
--ipu-* options (validated), owned by the job's user and attachable from the job's nodes.
Idempotent: a re-run finds the partition its own earlier attempt created (the ledger's record)
and adopts it if it still fits the job, or replaces it if not (requeued to other nodes). A
partition under the job's name that slurm-ipu did not create is never adopted or removed.
Bounded: prolog.deadline covers every V-IPU call.

A started job's AdminComment names its partition (notes.py). Failures, by who can fix them (the
reason goes to hooks.log first, then the job's AdminComment, which `scontrol show job` shows and
which leaves the user's own Comment alone):
- the request itself (a shape V-IPU refuses): the job is cancelled at once, no requeue;
- V-IPU trouble (unreachable, not ready, out of IPUs): exit 1, so Slurm requeues a batch job;
  after prolog.max_attempts the job is held for an admin;
- out of IPUs because an IPU-Machine the job needs is not Up: requeued, and not counted towards
  prolog.max_attempts while the health pass runs (it keeps jobs off the machine: restarts.py);
- a foreign partition under the job's name: held at once for an admin to remove it;
- a state directory it cannot write (full, out of inodes): held at once, as a requeue meets the same
  disk;
- an environment the prolog refuses (a malformed --ipu-* value sent around the SPANK plugin, e.g.
  through Slurm's REST API): the same on every attempt, so held at once with the reason.
"""

from __future__ import annotations

import dataclasses
import os
import time

from .. import pods, rules
from ..errors import InsufficientIpus, InvalidPartition, PartitionExists, SlurmIpuError
from . import notes, removal, restarts
from .controllers import clients_of
from .hooklog import report
from .jobenv import JobContext
from .ledger import Ledger


class ForeignPartition(SlurmIpuError):
    """A partition under the job's name that slurm-ipu did not create for this job."""


class Misplaced(SlurmIpuError):
    """V-IPU put a partition over several Pods in ILDs that are not those of the job's hosts."""


class StateUnwritable(SlurmIpuError):
    """The hooks' state directory refused a write (full, out of inodes, read-only): the record
    that must precede a create cannot be made, and a requeue would meet the same disk."""


class MachineDown(InsufficientIpus):
    """V-IPU is short of IPUs while an IPU-Machine the job needs is not Up: the hardware's fault,
    not the job's, so the attempt does not count (while the health pass keeps jobs off it)."""


class SlurmUnread(SlurmIpuError):
    """Slurm did not say how many IPUs a heterogeneous job's later component asks for."""


class Abandoned(SlurmIpuError):
    """Nobody waits for this prolog any more (the slurm-ipu service ran it; Slurm killed the
    slurm-ipu-hook because the job was cancelled)."""


def run(ctx: JobContext, cfg, client, slurm=None, clock=time.monotonic, sleep=time.sleep, room=None) -> int:
    """room(name, deadline) -> how many journaled removals it settled: what a prolog short of IPUs
    asks of the remover (remover.py). By default it removes them itself if nobody else removes
    now (a Python prolog); the slurm-ipu service wakes its removal thread instead."""
    if ctx.ipus == 0 and ctx.het_offset:
        ctx, failed = _component(ctx, cfg, slurm)
        if failed is not None:
            return failed
    if ctx.ipus == 0:
        return 0  # not an IPU job: no V-IPU call, no Slurm query
    try:
        client = clients_of(cfg, client).of(ctx.nodes)  # its controller's (a site may have several)
    except SlurmIpuError as exc:
        return _fail(ctx, cfg, slurm, cfg.job_name(ctx.job_id, ctx.nodes), exc)

    def alone(name: str, deadline: float) -> int:
        return removal.make_room(cfg, client, name, deadline, clock)

    try:
        return _run(ctx, cfg, client, slurm, clock, sleep, room or alone)
    except OSError as exc:  # the state directory: a record, a lock or the journal could not be written
        name = ctx.partition(cfg.partition.prefix)
        return _fail(ctx, cfg, slurm, name, StateUnwritable(
            f"the hooks cannot write their state directory {cfg.state_dir}: {exc.strerror or exc}"))


def _component(ctx: JobContext, cfg, slurm) -> tuple[JobContext, int | None]:
    """A heterogeneous job's later component: Slurm gives it no licence (the first component alone
    may hold one), so its IPUs are its GRES on each of its nodes, read with the one Slurm query
    its hooks make (docs/slurm.md, "Heterogeneous jobs"). (ctx with its IPUs, None), or the
    prolog's exit when Slurm cannot say: a component that may have IPUs never starts without."""
    if slurm is None:
        return ctx, None
    try:
        per = slurm.ipus_per_node(ctx.job_id)
    except SlurmIpuError as exc:
        name = cfg.job_name(ctx.job_id, ctx.nodes)
        return ctx, _fail(ctx, cfg, slurm, name, SlurmUnread(f"its IPUs could not be read from Slurm: {exc}"))
    return dataclasses.replace(ctx, ipus=per * len(ctx.nodes)), None


def _run(ctx: JobContext, cfg, client, slurm, clock, sleep, make_room) -> int:
    name = ctx.partition(cfg.partition.prefix)
    try:
        model = cfg.model_for(ctx.nodes)  # Pods of both models: the same on every attempt
    except SlurmIpuError as exc:
        return _fail(ctx, cfg, slurm, name, exc)
    if model == "allocation":
        return run_allocation(ctx, cfg, client, slurm, clock, sleep, make_room)
    started, began = clock(), time.time()
    deadline = started + cfg.prolog.deadline
    try:
        allocation, ilds, room, expect = _where(ctx, cfg)
        shape = rules.check_shape(ctx.ipus, ctx.gcds, ilds, cluster_ilds=room)
        try:
            part = _ensure_with_room(cfg, name, deadline, clock, sleep, make_room,
                                     lambda: _ensure(ctx, shape, allocation, cfg, client, name, deadline, began),
                                     lambda: _machine_down(ctx, cfg, client, model, deadline))
            _check_ilds(part, expect)
        except SlurmIpuError:
            _undo(client, cfg, ctx, name, clock() + min(5.0, cfg.prolog.deadline))
            raise
    except SlurmIpuError as exc:
        return _fail(ctx, cfg, slurm, name, exc)
    report(cfg.state_dir, f"job {ctx.job_id}: partition {name} ACTIVE, {part.size} IPUs, "
                             f"{part.num_gcds} GCD(s), hosts {','.join(ctx.nodes)}"
                             f"{f', allocation {allocation}' if allocation else ''} ({clock() - started:.2f}s)")
    _name_it(cfg, slurm, ctx, notes.text("partition", name, part.size))
    return 0


def _where(ctx: JobContext, cfg) -> tuple[str | None, int | None, int, set[int] | None]:
    """Where the partition goes: (allocation, ILDs, ILDs the job may use, the ILDs it must lie
    in when V-IPU chooses them). On a multi-Pod site a job inside one Pod gets that Pod's
    allocation (its IPU-Machines sit with the job's hosts); a job over several Pods (job_submit.lua
    gives it whole Pods) gets the cluster's allocation and one partition ILD per ILD of those
    Pods, so each Pod holds the share its hosts' GRES count."""
    found = cfg.pods
    if not found:
        return cfg.vipu.allocation, ctx.ilds, max(1, cfg.pod.ipus // rules.IPUS_PER_ILD), None
    used = pods.spanned(found, ctx.nodes)
    if len(used) == 1:
        return used[0].name, ctx.ilds, used[0].ilds, None
    need = sum(p.ilds for p in used)
    if ctx.ilds not in (None, need):
        raise InvalidPartition(f"--ipu-ilds={ctx.ilds}: the job's hosts are in Pods "
                               f"{','.join(p.name for p in used)}, whose partition spans {need} ILD(s)")
    ids = cfg.ild_ids()
    where = pods.allocation_for(used, cfg.groups, cfg.controller_of(ctx.nodes).allocation)
    return where, need, need, {i for p in used for i in ids[p.name]}


def _check_ilds(part, expect: set[int] | None) -> None:
    """An allocation larger than the job's Pods (the cluster's, with more than two Pods and no
    group of exactly them) lets V-IPU choose the ILDs of a partition over some of them: one in
    another Pod's ILD would be unreachable from the job's hosts, so it is removed (the caller
    undoes) and the job requeued rather than started to fail."""
    got = pods.ilds_given(part) if expect is not None else None
    if got is None or set(got) <= expect:
        return
    raise Misplaced(f"V-IPU put it in ILD(s) {','.join(map(str, sorted(set(got))))}, but the job's hosts are cabled "
                    f"to ILD(s) {','.join(map(str, sorted(expect)))} (V-IPU chooses where a partition over Pods of no "
                    "single group goes: docs/pods.md, Several Pods)")


MACHINE_GRACE_S = 2.0  # refused this long for lack of IPUs, the prolog asks whether a machine failed


def _ensure_with_room(cfg, name: str, deadline: float, clock, sleep, make_room, make, down):
    """Slurm granted the IPUs (the licence), so V-IPU being short of them is V-IPU lagging:
    removals V-IPU refused earlier (the journal), or one still under way. Ask the remover for
    room (make_room()), then retry make() until the IPUs are there or the deadline passes; unless a machine the job
    needs has failed (down(): asked once, after MACHINE_GRACE_S of refusals: a removal under way
    frees its IPUs well within it), which waiting cannot mend."""
    pause, asked, since = 0.05, False, None
    ledger = Ledger(cfg.state_dir)
    while True:
        try:
            # The name's lock for one attempt (the record and the create), so a removal of this
            # name never runs between them; not while waiting for room: names share lock files,
            # and a finished job's partition behind the same lock would wait for this one while
            # this one waits for its IPUs.
            with ledger.lock(name, deadline):
                return make()
        except InsufficientIpus:
            if make_room(name, deadline):
                continue  # freed some: try again at once (each pass settles entries, so this ends)
            since = clock() if since is None else since
            if not asked and clock() - since >= MACHINE_GRACE_S:
                asked, failed = True, down()
                if failed is not None:
                    raise failed from None  # the refusal is the same; the cause is the machine
            if clock() + pause >= deadline:
                raise
            sleep(pause)
            pause = min(pause * 2, 1.0)


def _machine_down(ctx: JobContext, cfg, client, model: str, deadline: float) -> MachineDown | None:
    """MachineDown when an IPU-Machine the job could use is not Up (one `vipu-admin list agents`,
    only on this failure path): its hosts' machines (allocation model), its Pods' (partition
    model). V-IPU unreachable here is no evidence of a failed machine: None."""
    from .health import failures, machines_for

    mine = machines_for(cfg, ctx.nodes, model)
    try:
        bad = {a: why for a, why in failures(client.list_agents(deadline)).items() if a in mine}
    except SlurmIpuError:
        return None
    if not bad:
        return None
    return MachineDown(f"IPU-Machine {', '.join(f'{a} {why}' for a, why in sorted(bad.items()))}: "
                       "V-IPU cannot place the job's IPUs until it is back")


def _args(ctx: JobContext, shape, allocation: str | None) -> dict:
    """The create's arguments: the shape with the rule table's defaults filled in (a partition
    over several ILDs needs a GCD per ILD, which V-IPU's own default of one GCD would break)."""
    return {"num_gcds": shape.num_gcds, "num_ilds": shape.num_ilds, "reconfigurable": ctx.reconfigurable,
            "allocation": allocation, "hosts": list(ctx.nodes), "owner_uid": ctx.uid}


def _ensure(ctx: JobContext, shape, allocation, cfg, client, name: str, deadline: float, began: float):
    ledger = Ledger(cfg.state_dir)
    ours = ledger.owns(name, ctx.job_id)  # a record left by an earlier attempt of this same job
    # Recorded before the create: a prolog killed mid-create leaves a trace for epilog and reap.
    ledger.put(name, began=began, job_id=ctx.job_id, uid=ctx.uid, hosts=list(ctx.nodes), size=shape.size,
               gcds=shape.num_gcds, ilds=shape.num_ilds)
    try:
        created = client.create_partition(name, ctx.ipus, deadline=deadline, **_args(ctx, shape, allocation))
    except PartitionExists:
        created = _existing(ctx, shape, allocation, client, name, deadline, ours, ledger)
    if created is not None and created.name == name and created.state == "ACTIVE":
        return created  # saves one `vipu list` on the prolog's path
    return client.wait_active(name, deadline)


def _existing(ctx, shape, allocation, client, name: str, deadline: float, ours: bool, ledger: Ledger):
    part = client.get_partition(name, deadline)
    foreign = part is not None and part.owner_uid is not None and part.owner_uid != ctx.uid
    if not ours or foreign:
        ledger.drop(name)  # never mark someone else's partition as ours
        who = f" (owner uid {part.owner_uid})" if part is not None and part.owner_uid is not None else ""
        raise ForeignPartition(f"partition {name} already exists{who} and slurm-ipu did not create it for this job")
    if part is not None and _fits(part, shape, ctx):
        # An earlier attempt's partition, adopted: reset first, as PopRun does before a run on a
        # partition that is not reconfigurable, so the restarted job starts on clean IPUs and
        # links, not on whatever state the killed attempt left (a hang, an error state).
        return client.reset_partition(name, deadline=deadline)
    # Ours, but made for another placement or size (the job was requeued to other nodes): replace it.
    client.remove_partition(name, missing_ok=True, deadline=deadline)
    return client.create_partition(name, ctx.ipus, deadline=deadline, **_args(ctx, shape, allocation))


def _fits(part, shape, ctx: JobContext) -> bool:
    return ((part.size, part.num_gcds, part.num_ilds) == (shape.size, shape.num_gcds, shape.num_ilds)
            and (not part.hosts or sorted(part.hosts) == sorted(ctx.nodes)))


# --- the allocation model (Graphcore's host-IPU mapping) ----------------------------------------

def run_allocation(ctx: JobContext, cfg, client, slurm, clock, sleep, make_room) -> int:
    """The job's allocation: the IPU-Machines mapped to its hosts (cfg.agents_of), granted to its
    user (and the hooks' own user), named allocation.prefix + job id. The job makes its own
    partitions in it. The same record, lock, journal and failure rules as a partition's."""
    started, began = clock(), time.time()
    deadline = started + cfg.prolog.deadline
    name = ctx.partition(cfg.allocation.prefix)
    try:
        agents = cfg.agents_of(ctx.nodes)  # a host in no Pod: an admin's to fix (requeue, then hold)
        try:
            _ensure_with_room(cfg, name, deadline, clock, sleep, make_room,
                              lambda: _ensure_allocation(ctx, cfg, client, name, agents, deadline, began),
                              lambda: _machine_down(ctx, cfg, client, "allocation", deadline))
        except SlurmIpuError:
            _undo(client, cfg, ctx, name, clock() + min(5.0, cfg.prolog.deadline))
            raise
    except SlurmIpuError as exc:
        return _fail(ctx, cfg, slurm, name, exc, "allocation")
    report(cfg.state_dir, f"job {ctx.job_id}: allocation {name} of {','.join(agents)} ({_ipus(ctx.ipus)}) "
                             f"for uid {ctx.uid}, hosts {','.join(ctx.nodes)} ({clock() - started:.2f}s)")
    _name_it(cfg, slurm, ctx, notes.text("allocation", name, ctx.ipus))
    return 0


def _name_it(cfg, slurm, ctx: JobContext, text: str) -> None:
    """The job's AdminComment names what it got (notes.py). A restarted job's comment is a failed
    attempt's reason, stale as it starts: replaced now, as the prolog used to clear it; a first
    attempt's note waits for the slurm-ipu service's next pass."""
    if slurm is not None:
        _tell(cfg, slurm.admin_comment if ctx.restart_count > 0 else slurm.note, ctx.job_id, text)


def _ensure_allocation(ctx: JobContext, cfg, client, name: str, agents: list[str], deadline: float,
                       began: float) -> None:
    ledger = Ledger(cfg.state_dir)
    ours = ledger.owns(name, ctx.job_id)
    ledger.put(name, began=began, job_id=ctx.job_id, uid=ctx.uid, hosts=list(ctx.nodes), size=ctx.ipus, agents=agents)
    grants = sorted({ctx.uid, os.getuid()})  # the job's user, and the hooks (a requeue's cleanup)
    try:
        client.create_allocation(name, agents, grants, deadline=deadline)
    except PartitionExists:
        _existing_allocation(ctx, client, name, agents, grants, deadline, ours, ledger)
    except InvalidPartition as exc:
        busy = _held_by_a_job(cfg, client, name, agents, deadline)
        if busy is None:
            raise
        raise busy from exc
    if cfg.allocation.partition or ctx.het_job_id is not None:
        _default_partition(ctx, cfg, client, name, agents, deadline)


def _held_by_a_job(cfg, client, name: str, agents: list[str], deadline: float) -> InsufficientIpus | None:
    """A refusal of the job's machines while another job's allocation holds them (its epilog
    still queued) is the machines being busy, however the controller words it (the emulator
    says so; what a real one says is not public): the job waits for them, it is not cancelled."""
    from .reap import job_of

    for other, theirs in client.list_allocations(deadline).items():
        if other != name and set(theirs) & set(agents) and job_of(other, cfg.allocation.prefix) is not None:
            return InsufficientIpus(f"its IPU-Machines are still in allocation {other}")
    return None


def _existing_allocation(ctx, client, name: str, agents: list[str], grants: list[int], deadline: float, ours: bool,
                         ledger: Ledger) -> None:
    if not ours:
        ledger.drop(name)  # never mark someone else's allocation as ours
        raise ForeignPartition(f"allocation {name} already exists and slurm-ipu did not create it for this job")
    if sorted(client.list_allocations(deadline).get(name, [])) != sorted(agents):
        # Ours, but for other hosts (the job was requeued elsewhere): replace it.
        client.remove_allocation(name, missing_ok=True, deadline=deadline)
        client.create_allocation(name, agents, grants, deadline=deadline)
    # else: an earlier attempt of this job made it for these hosts: adopt it


def _default_partition(ctx: JobContext, cfg, client, allocation: str, agents: list[str], deadline: float) -> None:
    """allocation.partition, and every component of a heterogeneous job (docs/slurm.md: srun can
    tell only one component's tasks the partition made for a step, so each component's tasks name
    its own job's): the whole allocation as the partition the tasks' IPUOF variables name
    (an earlier attempt's is adopted if it fits; the epilog removes it with the allocation). One
    already there is adopted only if it is in this job's allocation and the job's user's: a
    partition of that name another user made first, of any size, is never the job's."""
    name, size = ctx.partition(cfg.partition.prefix), len(agents) * rules.IPUS_PER_AGENT
    try:
        made = client.create_partition(name, size, deadline=deadline, num_gcds=ctx.gcds, num_ilds=ctx.ilds,
                                       reconfigurable=ctx.reconfigurable, allocation=allocation,
                                       hosts=list(ctx.nodes), owner_uid=ctx.uid)
    except PartitionExists:
        made = _adoptable(ctx, client, name, size, allocation, deadline)
    if made is None or made.name != name or made.state != "ACTIVE":
        client.wait_active(name, deadline)


def _adoptable(ctx: JobContext, client, name: str, size: int, allocation: str, deadline: float):
    """The job's default partition an earlier attempt made: in its allocation, its user's, its size."""
    part = client.get_partition(name, deadline)
    if part is None:
        return None
    if part.allocation not in (None, allocation) or part.owner_uid not in (None, ctx.uid):
        raise ForeignPartition(f"partition {name} already exists (owner uid {part.owner_uid}, allocation "
                               f"{part.allocation}) and slurm-ipu did not create it for this job")
    if (part.size, part.num_gcds) != (size, ctx.gcds or 1):
        raise PartitionExists(f"partition {name} exists with {part.size} IPUs/{part.num_gcds} GCD(s), not "
                              f"{size}/{ctx.gcds or 1}; remove it (vipu remove partition {name})")
    return part


def _undo(client, cfg, ctx: JobContext, name: str, deadline: float) -> None:
    """Remove what a failed attempt of ours left (a PENDING or ERROR partition), and only that:
    without our record nothing is removed. The job is not running, so a failure here is left
    to `slurm-ipu reap` (the record stays for it)."""
    if not Ledger(cfg.state_dir).owns(name, ctx.job_id):
        return
    try:
        removal.remove_vipu(cfg, client, name, deadline)
    except SlurmIpuError:
        return
    Ledger(cfg.state_dir).drop(name)


def _ipus(n: int) -> str:
    return "1 IPU" if n == 1 else f"{n} IPUs"


def _sized(n: int) -> str:
    """' (16 IPUs)' in a failure line; nothing before the count is known."""
    return f" ({_ipus(n)})" if n else ""


def _fail(ctx: JobContext, cfg, slurm, name: str, exc: SlurmIpuError, what: str = "partition") -> int:
    why = f"job {ctx.job_id}: V-IPU {what} {name}{_sized(ctx.ipus)} not created: {exc}"
    attempts = ctx.restart_count + 1 - restarts.count(cfg.state_dir, ctx.job_id)  # hardware's are not the job's
    limit = cfg.prolog.max_attempts
    if isinstance(exc, Abandoned):
        report(cfg.state_dir, why + "; nothing left behind")
        return 1  # the job is gone: nothing to tell Slurm
    if isinstance(exc, InvalidPartition):
        why += "; the job is cancelled: the request cannot be met, fix it and submit again"
        act = "cancel"
    elif isinstance(exc, StateUnwritable):
        why += f"; held: an admin must free space in {cfg.state_dir}, then `scontrol release {ctx.job_id}`"
        act = "hold"
    elif isinstance(exc, ForeignPartition):
        why += (f"; held: an admin must remove it (vipu{'-admin' if what == 'allocation' else ''} remove {what} "
                f"{name}), then `scontrol release {ctx.job_id}`")
        act = "hold"
    elif slurm is not None and slurm.requeueable(ctx.job_id) is False:
        # Slurm ends it rather than requeue it: saying "requeued" would contradict what it shows
        why += "; Slurm ends it (an srun or salloc job, or --no-requeue, is not requeued): submit it again"
        act = "admin_comment"
    elif isinstance(exc, MachineDown) and cfg.health.interval > 0 and restarts.add(cfg.state_dir, ctx.job_id):
        why += "; requeued: a failed machine is not the job's fault, so this attempt is not counted (the health " \
               "pass keeps jobs off the machine until it is back)"
        act = "admin_comment"
    elif attempts >= limit:
        why += (f"; held after {attempts} attempts: an admin must fix V-IPU, then `scontrol release {ctx.job_id}`")
        act = "hold"
    else:
        why += f"; requeued (attempt {attempts} of {limit})"
        act = "admin_comment"
    report(cfg.state_dir, why)  # first: a slow or failing scontrol never hides the cause
    if slurm is not None:
        _notify(slurm, ctx.job_id, f"slurm-ipu: job {ctx.job_id}: V-IPU {what} {name}{_sized(ctx.ipus)} not "
                                   f"created: {exc} (the reason stays in `scontrol show job {ctx.job_id}`)")
        told = _tell(cfg, getattr(slurm, act), ctx.job_id, f"slurm-ipu: {why}")
        if act == "cancel" and told:
            # The job is cancelled already: a failing exit would make slurmctld requeue the job the
            # cancel just ended (seen on 24.11 when this exit reached slurmctld before the kill).
            return 0
    return 1


def refuse_env(env: dict, cfg, slurm, exc: SlurmIpuError) -> None:
    """The job's environment cannot be read (jobenv.from_env refused it). A requeue would bring
    back the same environment, so retrying only loops: the job is held at once with the reason
    in AdminComment. The caller still exits non-zero, so the job does not start."""
    job = env.get("SLURM_JOB_ID", "")
    why = f"job {job or '?'}: prolog refused its environment: {exc}"
    if not job.isdigit():
        report(cfg.state_dir, why, echo=False)  # no job to hold: slurmctld sees the exit status
        return
    why += f"; held: cancel it and submit again with valid --ipu-* options (scancel {job})"
    report(cfg.state_dir, why, echo=False)
    if slurm is not None:
        _tell(cfg, slurm.hold, int(job), f"slurm-ipu: {why}")


def _notify(slurm, job_id: int, text: str) -> None:
    """Before the job ends (a cancel ends it): srun and salloc print it. A batch job has no
    listener yet; its user reads the AdminComment, so a refused notify is not worth a log line."""
    try:
        slurm.notify(job_id, text)
    except SlurmIpuError:
        pass


def _tell(cfg, action, job_id: int, text: str) -> bool:
    """Best effort: the reason is in hooks.log already. True when Slurm took it."""
    try:
        action(job_id, text)
    except SlurmIpuError as exc:
        report(cfg.state_dir, f"job {job_id}: could not record this in Slurm: {exc}", echo=False)
        return False
    return True
