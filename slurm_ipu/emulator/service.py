"""What the emulated V-IPU controller does, independent of how requests arrive.

State names follow the API enum PopRun logs (PS_PENDING, PS_ACTIVE, PS_ERROR); tables show
them without the prefix. A partition is PENDING until its ready_at time (the injected
creation delay), then it shows the state it was created to reach (ACTIVE, or ERROR when a
fault asked for it). Both are stored, so the state is the same after a restart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from .. import rules
from ..errors import (
    InsufficientIpus,
    InvalidPartition,
    PartitionExists,
    PartitionNotFound,
    PartitionNotReady,
    PermissionDenied,
    SlurmIpuError,
    VipuError,
    VipuUnavailable,
)
from .model import Cluster, agent_index, allocation_problem, place
from .store import Store

# Error codes on the wire (gRPC-style, as V-IPU's API is), and the typed error for each.
CODES: dict[str, tuple[int, type[VipuError]]] = {
    "INVALID_ARGUMENT": (400, InvalidPartition),
    "PERMISSION_DENIED": (403, PermissionDenied),
    "NOT_FOUND": (404, PartitionNotFound),
    "ALREADY_EXISTS": (409, PartitionExists),
    "RESOURCE_EXHAUSTED": (409, InsufficientIpus),
    "FAILED_PRECONDITION": (412, PartitionNotReady),
    "INTERNAL": (500, VipuUnavailable),
    "UNAVAILABLE": (503, VipuUnavailable),
    "DEADLINE_EXCEEDED": (504, VipuUnavailable),
}
OPS = ("create", "remove", "get", "list", "reset", "ipuof", "attach", "allocations", "version", "create_allocation",
       "remove_allocation", "get_allocation", "grant_allocation", "agents")


def code_of(exc: VipuError) -> str:
    for code, (_, cls) in CODES.items():
        if type(exc) is cls:
            return code
    return "INTERNAL"


MAX_FAULT_SECONDS = 3600.0
AGENT_STATES = ("up", "down", "ipu-error")
AGENT_PORT_BASE = 8080      # an emulated IPU-Machine's agent port, as `vipu-admin create agent --port` has it
EXPORTER_PORT = 2112        # V-IPU's per-machine OpenMetrics exporter port (shown, not served)
API_VERSION_TEXT = "1.18.0-emulated"


def fault_seconds(kind: str, value) -> float:
    """A fault's seconds (latency, create delay, down time): a finite number from 0 to an hour.
    NaN or infinity would wedge the server's timers and sleeps; a negative number is a mistake,
    not 0."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 <= seconds <= MAX_FAULT_SECONDS:  # also false for NaN
        raise ValueError(f"fault {kind} {value}: use a number of seconds from 0 to {MAX_FAULT_SECONDS:g}")
    return seconds


@dataclass
class Faults:
    """Injected misbehaviour. Kept in memory: a restart (or a crash) clears it."""

    latency: float = 0.0
    create_delay: float = 0.0
    error_next: int = 0
    fail: list[list] = field(default_factory=list)  # [remaining, code, op or "any"]
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take_failure(self, op: str) -> str | None:
        with self.lock:
            for entry in self.fail:
                if entry[0] > 0 and entry[2] in ("any", op):
                    entry[0] -= 1
                    code = entry[1]
                    self.fail = [e for e in self.fail if e[0] > 0]
                    return code
        return None

    def take_error_next(self) -> bool:
        with self.lock:
            if self.error_next > 0:
                self.error_next -= 1
                return True
        return False

    def as_dict(self) -> dict:
        return {
            "latency": self.latency,
            "create_delay": self.create_delay,
            "error_next": self.error_next,
            "fail": [{"count": c, "code": k, "op": o} for c, k, o in self.fail],
        }


class Service:
    def __init__(self, cluster: Cluster, store: Store):
        self.base = cluster  # the cluster file's: its allocations and grants
        self.store = store
        self.faults = Faults()
        self.calls: dict[str, int] = {}  # API calls per operation, for tests ("no V-IPU call")
        self._lock = threading.Lock()  # serialises placement: no IPU is handed out twice
        self.machine_faults = store.agent_faults()  # failed IPU-Machines (stored; read on every view)
        self._rebuild()

    def _rebuild(self) -> None:
        """The cluster as it stands: the file's allocations and grants, and the ones admins created
        (stored, so they outlive a restart)."""
        made = self.store.allocations()
        self.dynamic = {a["name"]: frozenset(a["agents"]) for a in made}
        grants = dict(self.base.grants or {})
        grants.update({a["name"]: frozenset(a["grants"]) for a in made if a["grants"]})
        self.cluster = replace(self.base, allocations={**self.base.allocations, **self.dynamic}, grants=grants or None)

    # --- fault plumbing -----------------------------------------------------------------
    def before(self, op: str) -> None:
        with self.faults.lock:
            self.calls[op] = self.calls.get(op, 0) + 1
        if self.faults.latency > 0:
            time.sleep(self.faults.latency)
        code = self.faults.take_failure(op)
        if code:
            cls = CODES[code][1]
            raise cls(f"injected fault: {op} failed with {code}")

    # --- views --------------------------------------------------------------------------
    def _view(self, rec: dict, now: float | None = None) -> dict:
        now = time.time() if now is None else now
        state = "PENDING" if now < rec["ready_at"] else rec["state"]
        failed = self._failed_in(rec["ipus"])
        if failed:
            state = "ERROR"  # for as long as the machine is failed: back to its own state after
        view = {
            "id": rec["name"],
            "spec": {
                "size": rec["size"],
                "num_gcds": rec["num_gcds"],
                "num_ilds": rec["num_ilds"],
                "num_replicas": rec["total_replicas"],
                "reconfigurable": rec["reconfigurable"],
                "allocation": rec["allocation"],
                "cluster": self.cluster.name,
                "owner_uid": rec["owner_uid"],
                "hosts": rec["hosts"],
                "ipus": [self.cluster.describe_ipu(i) for i in rec["ipus"]],
            },
            "status": {"state": f"PS_{state}", "created_at": rec["created_at"]},
        }
        if failed:
            view["status"]["health"] = failed
        return view

    def list_partitions(self, caller_uid: int | None = None, allocation: str | None = None) -> list[dict]:
        """Every partition (or those made in `allocation`); on a cluster with grants, a caller who
        holds none of a partition's allocation sees it only if it is theirs (a job's user: their
        job's partition)."""
        if allocation is not None and allocation not in self.cluster.allocations:
            raise PartitionNotFound(f"allocation {allocation} not found; allocations: "
                                    f"{', '.join(self.cluster.allocations)}")
        now = time.time()
        return [{"partition": self._view(r, now)} for r in self.store.partitions()
                if self._visible(r, caller_uid) and allocation in (None, r["allocation"])]

    def _visible(self, rec: dict, uid: int | None) -> bool:
        if uid is None or uid == 0 or uid == rec["owner_uid"]:
            return True
        return self.cluster.granted(rec["allocation"], uid) is not False

    def get_partition(self, name: str, caller_uid: int | None = None) -> dict:
        """One partition, to whom `list` shows it (its owner, and those granted its allocation)."""
        return {"partition": self._view(self._shown(name, caller_uid))}

    def _shown(self, name: str, caller_uid: int | None) -> dict:
        rec = self.store.get(name)
        if rec is None:
            raise PartitionNotFound(f"partition {name} not found")
        if not self._visible(rec, caller_uid):
            raise PermissionDenied(f"partition {name} is not yours (uid {caller_uid}); `vipu list partitions` shows "
                                   "those you may see")
        return rec

    def clusters(self) -> list[dict]:
        """`vipu list cluster --showjson`, as poptorch reads it: each cluster's IPU-Link domains
        with their IPUs (it counts len(clusters[0].spec.ipu_link_domains[0].ipus))."""
        c = self.cluster
        domains = [{"id": k, "ipus": [c.describe_ipu(i) for i in range(k * c.ipus_per_ild, (k + 1) * c.ipus_per_ild)]}
                   for k in range(c.ilds)]
        return [{"id": c.name, "spec": {"ipu_link_domains": domains, "num_ipus": c.total_ipus,
                                        "agents": [f"ag{a}" for a in range(c.num_agents)]}}]

    def allocations(self) -> list[dict]:
        grants = self.cluster.grants or {}
        return [
            {"id": name, "agents": [f"ag{a}" for a in sorted(agents)], "num_ipus": len(agents) * rules.IPUS_PER_AGENT,
             "created": name in self.dynamic, "grants": sorted(grants.get(name, ()))}
            for name, agents in self.cluster.allocations.items()
        ]

    def get_allocation(self, name: str) -> dict:
        """`vipu-admin get allocation NAME --showjson` in V-IPU 1.18's shape: caas-poplar-appliance
        reads `.allocation.spec.agent_ids` (names from vipuuser.proto's Allocation and
        AllocationSpec); the emulator's num_ipus, created and grants sit beside `spec`."""
        entry = next((a for a in self.allocations() if a["id"] == name), None)
        if entry is None:
            raise PartitionNotFound(f"allocation {name} not found; `vipu-admin list allocations` lists them")
        spec = {"cluster_id": self.cluster.name, "agent_ids": entry["agents"]}
        return {"allocation": {"id": name, "spec": spec, "num_ipus": entry["num_ipus"], "created": entry["created"],
                               "grants": entry["grants"]}}

    # --- allocations an admin makes (`vipu-admin create|remove allocation`) -----------------
    def _admin(self, caller_uid: int) -> bool:
        return caller_uid == 0 or caller_uid in self.base.admins

    def _admin_only(self, caller_uid: int, what: str) -> None:
        if not self._admin(caller_uid):
            raise PermissionDenied(f"uid {caller_uid} may not {what}: V-IPU administrators only (vipu-admin; the "
                                   "emulator's admins: root and the cluster file's admins list)")

    def create_allocation(self, req: dict, caller_uid: int) -> dict:
        """An allocation of the named IPU-Machines (`agents`), or of `size` IPUs' worth the emulator
        picks (`create allocation NAME --size N`), granted to the uids given (none: anyone may use
        it). It may sit inside a file's allocation (a job's inside its Pod's) but never overlaps
        another created one, nor holds IPUs a partition outside it uses."""
        self._admin_only(caller_uid, "create allocations")
        name = rules.check_name(str(req.get("name", "")))
        by_size = req.get("agents") is None and req.get("size") is not None
        agents = None if by_size else self._named_agents(name, req)
        size = self._allocation_size(name, req) if by_size else 0
        grants = _uids(name, req.get("grants") or [])
        with self._lock:
            if name in self.cluster.allocations:
                raise PartitionExists(f"allocation {name} already exists")
            agents = agents if agents is not None else self._free_agents(name, size)
            # Machines in another created allocation are busy (a job's, its epilog still to come),
            # not a malformed request: checked after the size rule, before the file's nesting rule.
            size = allocation_problem(name, agents, {})
            if size:
                raise InvalidPartition(size)
            taken = [n for n, theirs in self.dynamic.items() if theirs & agents]
            if taken:
                raise InsufficientIpus(f"allocation {name}: its IPU-Machines are in allocation {taken[0]} already")
            failed = self._failed_in(self.cluster.allocation_ipus_of(agents))
            if failed:
                raise InsufficientIpus(f"allocation {name}: {'; '.join(failed)}")
            problem = allocation_problem(name, agents, self.base.allocations, equal_ok=True)
            if problem:
                raise InvalidPartition(problem)
            ipus = self.cluster.allocation_ipus_of(agents)
            users = sorted({r["name"] for r in self.store.partitions() if set(r["ipus"]) & ipus})
            if users:
                raise InsufficientIpus(f"allocation {name}: its IPU-Machines hold partition(s) {', '.join(users)} "
                                       "of other allocations; remove them first")
            self.store.insert_allocation(name, sorted(agents), grants, time.time())
            self._rebuild()
        return next(a for a in self.allocations() if a["id"] == name)

    def _named_agents(self, name: str, req: dict) -> frozenset[int]:
        raw = req.get("agents")
        if req.get("size") is not None:
            raise InvalidPartition(f"allocation {name}: give --agents or --size, not both")
        if not isinstance(raw, list) or not raw:
            raise InvalidPartition(f"allocation {name}: name its IPU-Machines (--agents ag0,ag1,...) or give "
                                   "--size N (IPUs)")
        try:
            return frozenset(agent_index(a, self.base.num_agents, f"allocation {name}") for a in raw)
        except Exception as exc:  # model's ConfigError: the agent named is not this cluster's
            raise InvalidPartition(str(exc)) from None

    def _allocation_size(self, name: str, req: dict) -> int:
        size = _int(req, "size")
        if not rules.is_valid_allocation(size):
            raise InvalidPartition(f"allocation {name} --size {size}: an allocation is 4, 8, 16, 32, 64 IPUs or a "
                                   "multiple of 64 (1, 2, 4, 8, 16 IPU-Machines or multiples of 16)")
        if size > self.base.total_ipus:
            raise InvalidPartition(f"allocation {name} --size {size}: this cluster has {self.base.total_ipus} IPUs; "
                                   "ask for fewer")
        return size

    def _free_agents(self, name: str, size: int) -> frozenset[int]:
        """`--size N`'s IPU-Machines: N/4 free ones (in no created allocation, holding no
        partition), consecutive in one ILD where they can be, nesting with the file's allocations
        as named ones must. None to be had: `no free allocation` (caas-poplar-appliance looks for
        those words on stderr)."""
        count = size // rules.IPUS_PER_AGENT
        free = self._unheld_agents()
        for chosen in _agent_choices(count, free, self.base.agents_per_ild, self.base.num_agents):
            if allocation_problem(name, chosen, self.base.allocations) is None:
                return chosen
        why = "" if len(free) < count else (" (a created allocation never equals nor straddles the cluster "
                                             f"file's allocations: {', '.join(self.base.allocations)})")
        raise InsufficientIpus(f"allocation {name}: no free allocation of {size} IPUs ({count} IPU-Machines): "
                               f"{len(free)} IPU-Machine(s) are in no created allocation and hold no partition{why}; "
                               "remove an allocation or ask for a smaller --size")

    def _unheld_agents(self) -> list[int]:
        taken = set().union(*self.dynamic.values())
        held = {i // rules.IPUS_PER_AGENT for i in self.store.used_ipus()}
        failed = set(self.machine_faults)
        return [a for a in range(self.base.num_agents) if a not in taken and a not in held and a not in failed]

    def grant_allocation(self, name: str, req: dict, caller_uid: int) -> dict:
        """`vipu-admin update allocation NAME --grant U,...`: the users who may make partitions in an
        allocation an admin created, from now on. A job's epilog narrows its allocation to the hooks'
        own user before it removes what is inside: a create by the job's user after that is refused
        (the grant is checked under the placement lock), so nothing new appears between the epilog's
        list and its remove. An empty list is refused: it would open the allocation to anyone."""
        self._admin_only(caller_uid, "change allocations")
        grants = _uids(name, req.get("grants"))
        if not grants:
            raise InvalidPartition(f"allocation {name}: --grant names no user; an allocation granted to no one is "
                                   "open to anyone, so give at least one (e.g. root)")
        with self._lock:
            if name not in self.dynamic:
                if name in self.cluster.allocations:
                    raise InvalidPartition(f"allocation {name} is the cluster file's own; its grants are the file's")
                raise PartitionNotFound(f"allocation {name} not found")
            self.store.set_grants(name, grants)
            self._rebuild()
        return next(a for a in self.allocations() if a["id"] == name)

    def remove_allocation(self, name: str, caller_uid: int) -> None:
        """Refused while partitions live in it (they would lose their IPU-Machines under a running
        job): remove them first, as slurm-ipu's epilog does. A file's allocation is not removable."""
        self._admin_only(caller_uid, "remove allocations")
        with self._lock:
            if name not in self.dynamic:
                if name in self.cluster.allocations:
                    raise InvalidPartition(f"allocation {name} is the cluster file's own; it is not removable")
                raise PartitionNotFound(f"allocation {name} not found")
            inside = sorted(r["name"] for r in self.store.partitions() if r["allocation"] == name)
            if inside:
                raise PartitionNotReady(f"allocation {name} holds partition(s) {', '.join(inside)}; remove them first")
            self.store.delete_allocation(name)
            self._rebuild()

    # --- changes ------------------------------------------------------------------------
    def create(self, req: dict, caller_uid: int) -> dict:
        name = rules.check_name(str(req.get("name", "")))
        shape = rules.check_shape(
            _int(req, "size"), _opt_int(req, "num_gcds"), _opt_int(req, "num_ilds"),
            cluster_ilds=self.cluster.ilds, ipus_per_ild=self.cluster.ipus_per_ild,
        )
        owner = _opt_int(req, "owner_uid")
        owner = caller_uid if owner is None else owner
        with self._lock:  # the allocations and grants as they stand now: an epilog's revoke never races a create
            allocation = self._allocation(req.get("allocation"))
            rules.check_size(shape.size, len(self.cluster.allocation_ipus(allocation)), f"allocation {allocation}")
            self._may_create(allocation, caller_uid, owner, name)
            if self.store.get(name) is not None:
                raise PartitionExists(f"partition {name} already exists")
            mine = self.cluster.allocation_ipus(allocation)
            failed = self._failed_ipus()
            free = mine - self.store.used_ipus() - self._held_inside(allocation)
            try:
                ipus = place(self.cluster, shape, free - set(failed))
            except InsufficientIpus as exc:
                lost = sorted({why for ipu, why in failed.items() if ipu in free})
                if not lost:
                    raise
                raise InsufficientIpus(f"{exc} ({'; '.join(lost)}: its IPUs are unavailable)") from None
            now = time.time()
            record = {
                "name": name, "size": shape.size, "num_gcds": shape.num_gcds,
                "num_ilds": shape.num_ilds, "reconfigurable": int(bool(req.get("reconfigurable"))),
                "allocation": allocation, "owner_uid": owner,
                "hosts": [str(h) for h in req.get("hosts") or []],
                "state": "ERROR" if self.faults.take_error_next() else "ACTIVE",
                "ready_at": now + self.faults.create_delay, "created_at": now,
                "total_replicas": _opt_int(req, "total_replicas") or 0,
            }
            self.store.insert(record, ipus)
        return self.get_partition(name)

    def _may_create(self, allocation: str, caller_uid: int, owner: int, name: str) -> None:
        prefix = self.cluster.reserved_name(name)
        if prefix and not self._admin(caller_uid) and not self.cluster.job_step_name(name, allocation):
            raise PermissionDenied(f"partition name {name} is reserved: {prefix}<job id> names a Slurm job's partition "
                                   "(made by the hooks); choose another name")
        granted = caller_uid == 0 or self.cluster.granted(allocation, caller_uid)
        if granted is False:
            raise PermissionDenied(f"uid {caller_uid} may not create partitions in allocation {allocation}: it is "
                                   "granted to other users (this site hands out its IPUs through Slurm: ask for them "
                                   "with --gres=ipu:N)")
        if owner != caller_uid and not self._admin(caller_uid):
            # A granted user may not either: inside their job's allocation a user made partitions
            # for others, under others' names. The hooks are admins.
            raise PermissionDenied(f"uid {caller_uid} may not create a partition owned by uid {owner}: a user creates "
                                   "partitions of their own; only V-IPU administrators (the hooks) create for others")

    def _held_inside(self, allocation: str) -> set[int]:
        """IPUs of created allocations inside `allocation` (jobs' allocations in a Pod's): a
        partition made in the larger one never takes them."""
        mine = self.cluster.allocations[allocation]
        return set().union(*(self.cluster.allocation_ipus(n) for n, agents in self.dynamic.items()
                             if n != allocation and agents < mine))

    def _allocation(self, name: object) -> str:
        allocs = self.cluster.allocations
        if name in (None, ""):
            if len(self.base.allocations) == 1:  # the file's one: created ones are always named
                return next(iter(self.base.allocations))
            raise InvalidPartition(
                f"this cluster has {len(self.base.allocations)} allocations; choose one with --allocation "
                f"({', '.join(self.base.allocations)})"
            )
        if name not in allocs:
            raise InvalidPartition(f"unknown allocation {name!r}; allocations: {', '.join(allocs)}")
        return str(name)

    def _owned(self, name: str, caller_uid: int) -> dict:
        rec = self.store.get(name)
        if rec is None:
            raise PartitionNotFound(f"partition {name} not found")
        if caller_uid not in (0, rec["owner_uid"]) and not self.cluster.granted(rec["allocation"], caller_uid):
            raise PermissionDenied(f"partition {name} belongs to uid {rec['owner_uid']}, not uid {caller_uid}")
        return rec

    def remove(self, name: str, caller_uid: int) -> None:
        with self._lock:
            self._owned(name, caller_uid)
            self.store.delete(name)

    def reset(self, name: str, caller_uid: int) -> dict:
        with self._lock:
            self._owned(name, caller_uid)
            self.store.set_state(name, "ACTIVE", time.time() + self.faults.create_delay)
        return self.get_partition(name)

    # --- what an IPUoF client sees ------------------------------------------------------
    # --- IPU-Machine health (`vipu-emu fault agent NAME down|up|ipu-error N`) ------------------
    # What a real controller reports when a machine fails is not public (docs/vipu.md, Agents):
    # here a failed machine's IPUs (all four when it is down, the one in error otherwise) are never
    # placed (a create or an allocation that needs them is RESOURCE_EXHAUSTED, naming the
    # machine), and a partition holding one shows ERROR, and refuses attaches, until it is back.
    def set_agent_health(self, agent: str, state: str, ipu: int | None = None) -> dict:
        try:
            index = agent_index(agent, self.base.num_agents, "fault agent")
        except SlurmIpuError as exc:
            raise InvalidPartition(str(exc)) from None
        if state not in AGENT_STATES:
            raise InvalidPartition(f"fault agent {agent} {state}: use one of {', '.join(AGENT_STATES)}")
        if state == "ipu-error" and (isinstance(ipu, bool) or not isinstance(ipu, int)
                                     or not 0 <= ipu < rules.IPUS_PER_AGENT):
            raise InvalidPartition(f"fault agent {agent} ipu-error {ipu}: give the IPU's index in its IPU-Machine, "
                                   f"0 to {rules.IPUS_PER_AGENT - 1}")
        with self._lock:
            self.store.set_agent_fault(index, None if state == "up" else state,
                                       ipu if state == "ipu-error" else None, time.time())
            self.machine_faults = self.store.agent_faults()
        return self.agent(f"ag{index}")

    def _failed_ipus(self) -> dict[int, str]:
        """Every IPU of a failed machine, with why."""
        out = {}
        for agent, fault in self.machine_faults.items():
            base = agent * rules.IPUS_PER_AGENT
            if fault["state"] == "down":
                out.update({base + k: f"IPU-Machine ag{agent} is down" for k in range(rules.IPUS_PER_AGENT)})
            else:
                out[base + fault["ipu"]] = f"IPU {fault['ipu']} of IPU-Machine ag{agent} is in error"
        return out

    def _failed_in(self, ipus) -> list[str]:
        failed = self._failed_ipus() if self.machine_faults else {}
        return sorted({failed[i] for i in ipus if i in failed})

    def agents(self) -> list[dict]:
        """`vipu-admin list agents`: every IPU-Machine, with its health."""
        return [self._agent_view(a, self.machine_faults.get(a)) for a in range(self.base.num_agents)]

    def agent(self, name: str) -> dict:
        try:
            index = agent_index(name, self.base.num_agents, "agent")
        except SlurmIpuError:
            raise PartitionNotFound(f"agent {name} not found; `vipu-admin list agents` lists them") from None
        return self._agent_view(index, self.machine_faults.get(index))

    def _agent_view(self, index: int, fault: dict | None) -> dict:
        """The fields `vipu-admin get agent` shows (Agent ID, Host, Port, Status, Exporter URL,
        Platform, IPUoF server version, Num of IPUs); an emulated machine's host is the emulator's
        own address, and nothing serves its exporter URL."""
        status = "Up" if fault is None else ("Down" if fault["state"] == "down" else "Error")
        view = {"id": f"ag{index}", "host": "127.0.0.1", "port": AGENT_PORT_BASE + index, "status": status,
                "exporter_url": f"http://127.0.0.1:{EXPORTER_PORT}/metrics", "platform": "IPU-M2000",
                "ipuof_server_version": API_VERSION_TEXT, "num_ipus": rules.IPUS_PER_AGENT,
                "ild": index // self.base.agents_per_ild}
        if fault is not None:
            view["since"] = fault["since"]
            if fault["ipu"] is not None:
                view["ipus_in_error"] = [fault["ipu"]]
        return view

    def gcd_ipus(self, name: str, gcd: int) -> tuple[dict, list[int]]:
        rec = self.store.get(name)
        if rec is None:
            raise PartitionNotFound(f"partition {name} not found")
        if not 0 <= gcd < rec["num_gcds"]:
            raise InvalidPartition(
                f"invalid GCD {gcd} for partition {name}: it has {rec['num_gcds']} GCD(s), "
                f"use 0..{rec['num_gcds'] - 1}"
            )
        per = rec["size"] // rec["num_gcds"]
        return rec, rec["ipus"][gcd * per:(gcd + 1) * per]

    def ipuof_config(self, name: str, gcd: int, caller_uid: int | None = None) -> list[dict]:
        self._shown(name, caller_uid)
        _, ipus = self.gcd_ipus(name, gcd)
        return [dict(self.cluster.describe_ipu(i), gcd=gcd) for i in ipus]

    def attach(self, name: str, gcd: int, uid: int, host: str) -> dict:
        """Refuse exactly as an IPUoF client would be refused; else the GCD's IPUs."""
        rec, ipus = self.gcd_ipus(name, gcd)
        status = self._view(rec)["status"]
        if status["state"] != "PS_ACTIVE":
            why = f": {'; '.join(status['health'])}" if status.get("health") else ""
            raise PartitionNotReady(f"partition {name} is {status['state'][3:]}, not ACTIVE{why}")
        if uid != rec["owner_uid"]:
            raise PermissionDenied(f"partition {name} belongs to uid {rec['owner_uid']}, not uid {uid}")
        if rec["hosts"] and host not in rec["hosts"]:
            raise PermissionDenied(
                f"host {host} may not attach to partition {name} (allowed: {', '.join(rec['hosts'])})"
            )
        remote = self._reach(name, gcd, host, ipus)
        return {"partition": name, "gcd": gcd, "host": host, "uid": uid, "remote_ilds": remote,
                "ipus": [self.cluster.describe_ipu(i) for i in ipus]}

    def _reach(self, name: str, gcd: int, host: str, ipus: list[int]) -> list[int]:
        """The cabling: a host reaches the IPU-Machines of its own Pod's ILDs; another Pod's are
        refused, or slow where the site's fabric routes between Pods."""
        remote = self.cluster.remote_ilds(host, ipus)
        if not remote:
            return remote
        if self.cluster.remote_attach == "refuse":
            raise PermissionDenied(
                f"host {host} is not cabled to ILD {','.join(map(str, remote))}, where GCD {gcd} of partition "
                f"{name} lies; run this instance on a host of that Pod")
        time.sleep(self.cluster.remote_attach_delay)  # the modelled cost of crossing Pods
        return remote

    def check_invariants(self) -> dict:
        """Used by tests and `vipu-emu check`: every held IPU exists and sits in its allocation."""
        problems = []
        with self._lock:  # one snapshot: a remove between the two reads is not a broken invariant
            for name, ipus in self.store.ipus_by_partition().items():
                rec = self.store.get(name)
                if rec is None:
                    problems.append(f"IPUs {ipus} held by partition {name}, which does not exist")
                    continue
                allowed = self.cluster.allocation_ipus(rec["allocation"])
                if len(ipus) != rec["size"] or not set(ipus) <= allowed:
                    problems.append(f"partition {name} holds {ipus}")
            used = len(self.store.used_ipus())
        return {"ok": not problems, "problems": problems, "used": used}


def _agent_choices(count: int, free: list[int], per_ild: int, num_agents: int) -> Iterator[frozenset[int]]:
    """Sets of `count` free IPU-Machines, best first: aligned consecutive runs (inside one ILD when
    `count` fits one), then the first free ones of one ILD, then the first free ones anywhere."""
    have = set(free)
    for start in range(0, num_agents - count + 1, min(count, per_ild)):
        run = frozenset(range(start, start + count))
        if run <= have:
            yield run
    for ild in range(num_agents // per_ild):
        mine = [a for a in free if a // per_ild == ild]
        if len(mine) >= count:
            yield frozenset(mine[:count])
    if len(free) >= count:
        yield frozenset(free[:count])


def _uids(name: str, grants: object) -> list[int]:
    if not isinstance(grants, list) or any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in grants):
        raise InvalidPartition(f"allocation {name}: grants must be uids, got {grants!r}")
    return grants


def _int(req: dict, key: str) -> int:
    value = req.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPartition(f"invalid --{key.replace('_', '-')} {value!r}: must be an integer")
    return value


def _opt_int(req: dict, key: str) -> int | None:
    return None if req.get(key) is None else _int(req, key)
