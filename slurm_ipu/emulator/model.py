"""The emulated hardware: IPU-Link domains of IPU-Machines (agents), allocations, and which
host servers are cabled to which ILD.

IPUs are numbered globally: IPU i sits on agent i // 4, and agent a in ILD a // agents_per_ild.
Agents are named ag0, ag1, ... in that order.

Allocations may nest (a Pod's allocation inside the whole cluster's, as a multi-Pod site's
topology tree has them) but never partly overlap: an IPU is then in one chain of allocations,
and a partition's IPUs are free or not whatever allocation it was created in.

Cabling (docs/vipu.md, "Hosts and ILDs"): each ILD lists the hosts cabled to its IPU-Machines
(one Pod's hosts sit with that Pod's IPU-Machines). A host attaching to IPUs of an ILD it is not
cabled to is refused (`remote_attach: refuse`, the default), or served after
`remote_attach_delay` seconds (`remote_attach: slow`, a fabric that routes between Pods).
Without cabling every host reaches every ILD, as on a single Pod.

Grants (docs/vipu.md, "Who may make partitions"): an allocation may list the users granted it,
as V-IPU's own users and allocations do. Then only they (and root, the emulator's admin) may
create partitions on its IPU-Machines (the nearest grant around an allocation decides, and those
of allocations nested inside it), and create them for another owner (the hooks make a job's
partition for its user); a partition's owner may still remove or reset it. A site whose Slurm
allocation is granted to the hooks' user alone hands IPUs out only through Slurm. Allocations an
admin creates at run time (service.py, stored) join the file's, with their own grants.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from .. import rules
from ..errors import ConfigError, InsufficientIpus, shown

PRESETS_DIR = Path(__file__).with_name("clusters")
_KEYS = ("version", "name", "ilds", "agents_per_ild", "allocations", "cabling", "remote_attach",
         "remote_attach_delay", "grants", "admins", "reserved")
REMOTE_ATTACH = ("refuse", "slow")


@dataclass(frozen=True)
class Cluster:
    name: str
    ilds: int
    agents_per_ild: int
    allocations: dict[str, frozenset[int]]  # allocation name -> agent indices
    cabling: dict[int, frozenset[str]] = None  # ILD -> hosts cabled to it; None: every host, every ILD
    remote_attach: str = "refuse"
    remote_attach_delay: float = 0.0
    grants: dict[str, frozenset[int]] = None  # allocation -> uids granted it; None: no grants anywhere
    admins: frozenset[int] = frozenset()  # besides root: who may create and remove allocations
    # Name prefixes of jobs' V-IPU objects (prefix + job id): such names are the admins' (the hooks')
    reserved: tuple[str, ...] = ()

    def reserved_name(self, name: str) -> str | None:
        """The reserved prefix `name` is a job's name under (a prefix then a digit), else None."""
        return next((p for p in self.reserved if name.startswith(p) and name[len(p):len(p) + 1].isdigit()), None)

    def job_step_name(self, name: str, allocation: str) -> bool:
        """Whether `name` is a step's partition of the job whose allocation is `allocation`
        (prefix + job + "_" + step, in allocation prefix + job): the SPANK plugin makes those as the
        job's user, so the job's names stay the job's, never another user's."""
        prefix, owner = self.reserved_name(name), self.reserved_name(allocation)
        if prefix is None or owner is None:
            return False
        named, holder = rules.parse_name(name, prefix), rules.parse_name(allocation, owner)
        return named is not None and named[1] is not None and holder is not None and holder == (named[0], None)

    def grants_over(self, allocation: str) -> list[frozenset[int]]:
        """The grant lists that apply to `allocation`: the nearest one around it (its own, else
        that of the smallest allocation holding it: an admin's grant of a Pod's allocation inside
        the site's is the more specific one), and those of every allocation nested inside it,
        whose IPUs a partition made here could take."""
        grants = self.grants or {}
        mine = self.allocations[allocation]
        around = sorted((len(self.allocations[n]), n) for n in grants if mine <= self.allocations[n])
        lists = [grants[around[0][1]]] if around else []
        return lists + [uids for n, uids in grants.items() if self.allocations[n] < mine]

    def granted(self, allocation: str, uid: int) -> bool | None:
        """True: `uid` holds every grant over `allocation`; False: some grant leaves it out;
        None: no grant covers the allocation (anyone may use it)."""
        lists = self.grants_over(allocation)
        return None if not lists else all(uid in uids for uids in lists)

    @property
    def ipus_per_ild(self) -> int:
        return self.agents_per_ild * rules.IPUS_PER_AGENT

    @property
    def num_agents(self) -> int:
        return self.ilds * self.agents_per_ild

    @property
    def total_ipus(self) -> int:
        return self.ilds * self.ipus_per_ild

    def allocation_ipus(self, allocation: str) -> set[int]:
        return self.allocation_ipus_of(self.allocations[allocation])

    @staticmethod
    def allocation_ipus_of(agents) -> set[int]:
        per = rules.IPUS_PER_AGENT
        return {a * per + k for a in agents for k in range(per)}

    def ild_of(self, ipu: int) -> int:
        return ipu // self.ipus_per_ild

    def remote_ilds(self, host: str, ipus) -> list[int]:
        """The ILDs among `ipus` that `host` is not cabled to (none without cabling)."""
        if not self.cabling:
            return []
        return sorted({self.ild_of(i) for i in ipus if host not in self.cabling.get(self.ild_of(i), ())})

    def describe_ipu(self, ipu: int) -> dict:
        agent = ipu // rules.IPUS_PER_AGENT
        return {
            "id": ipu,
            "agent": f"ag{agent}",
            "ild": agent // self.agents_per_ild,
            "ipu_index_in_agent": ipu % rules.IPUS_PER_AGENT,
        }


def load_cluster(spec: str) -> Cluster:
    """spec: a preset name (pod16, pod64, pod256) or a path to a YAML description."""
    path = Path(spec)
    if not path.suffix:
        path = PRESETS_DIR / f"{spec}.yaml"
        if not path.exists():
            names = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
            raise ConfigError(
                f"unknown cluster preset {shown(spec)}; use one of {', '.join(names)} "
                "or a path to a YAML file"
            )
    import yaml  # lazy: only `serve` needs it

    from ..adminfile import check_yaml_shape, read_text

    text = read_text(path, "cluster file")
    check_yaml_shape(text, str(path))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}".replace("\n", " ")) from None
    return cluster_from_dict(data, str(path))


def _positive_int(data: dict, key: str, default: int, most: int, where: str) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= most:
        raise ConfigError(f"{where}: {key} must be an integer from 1 to {most}, got {shown(value)}")
    return value


def cluster_from_dict(data: object, where: str = "cluster") -> Cluster:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with keys {', '.join(_KEYS)}")
    for key in data:
        if key not in _KEYS:
            near = difflib.get_close_matches(str(key), _KEYS, n=1)
            hint = f" (did you mean {shown(near[0])}?)" if near else ""
            raise ConfigError(f"{where}: unknown key {shown(key)}{hint}")
    if data.get("version", 1) != 1:
        raise ConfigError(f"{where}: unsupported version {shown(data.get('version'))}; use 1")
    ilds = _positive_int(data, "ilds", 1, rules.MAX_CLUSTER_ILDS, where)
    per_ild = _positive_int(data, "agents_per_ild", rules.AGENTS_PER_ILD, rules.AGENTS_PER_ILD, where)
    if not rules.is_power_of_two(per_ild):
        raise ConfigError(f"{where}: agents_per_ild must be a power of two, got {per_ild}")
    allocations = _allocations(data.get("allocations") or {"default": "all"}, ilds * per_ild, where)
    remote = data.get("remote_attach", "refuse")
    if remote not in REMOTE_ATTACH:
        raise ConfigError(f"{where}: remote_attach {shown(remote)} is not one of {', '.join(REMOTE_ATTACH)}")
    delay = data.get("remote_attach_delay", 0.0)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 60:
        raise ConfigError(f"{where}: remote_attach_delay must be 0 to 60 seconds, got {shown(delay)}")
    admins = data.get("admins") or []
    if not isinstance(admins, list):
        raise ConfigError(f"{where}: admins must list the users who may create allocations (e.g. [slurm])")
    reserved = data.get("reserved") or []
    if not isinstance(reserved, list) or not all(isinstance(p, str) and 0 < len(p) <= 32 for p in reserved):
        raise ConfigError(f"{where}: reserved must list name prefixes of jobs' partitions (e.g. [slurm_, c]), got "
                          f"{shown(reserved)}")
    return Cluster(str(data.get("name", "cluster")), ilds, per_ild, allocations,
                   _cabling(data.get("cabling"), ilds, where), remote, float(delay),
                   _grants(data.get("grants"), allocations, where), frozenset(_uid(u, where) for u in admins),
                   tuple(reserved))


def _grants(raw: object, allocations: dict, where: str) -> dict[str, frozenset[int]] | None:
    """{allocation: [user name or uid, ...]}."""
    if raw in (None, {}):
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: grants must map an allocation to the users granted it (e.g. default: [slurm])")
    out = {}
    for name, users in raw.items():
        if name not in allocations:
            raise ConfigError(f"{where}: grants names allocation {shown(name)}; allocations: {', '.join(allocations)}")
        if not isinstance(users, list) or not users:
            raise ConfigError(f"{where}: grants of {name}: list the users granted it (e.g. [slurm])")
        out[str(name)] = frozenset(_uid(u, where) for u in users)
    return out


UID_MAX = 2**32 - 2  # uid_t's largest, (uid_t)-1 being "no user"


def _uid(user: object, where: str) -> int:
    import pwd

    if isinstance(user, int) and not isinstance(user, bool) and 0 <= user <= UID_MAX:
        return user
    if isinstance(user, int) and not isinstance(user, bool):
        raise ConfigError(f"{where}: uid {shown(user)} is out of range; a uid is 0 to {UID_MAX}")
    try:
        return pwd.getpwnam(str(user)).pw_uid
    except KeyError:
        raise ConfigError(f"{where}: grants: no user {shown(user)} on this machine; give a user name or uid") from None


def _cabling(raw: object, ilds: int, where: str) -> dict[int, frozenset[str]] | None:
    """{ILD: hostlist or [hosts]}: a host is cabled to one ILD's IPU-Machines, or to several
    (a Pod of several ILDs); an ILD left out has no host of its own."""
    if raw in (None, {}):
        return None
    from ..slurm.hostlist import expand

    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: cabling must map an ILD number to its hosts (e.g. 0: node[1-4])")
    out: dict[int, frozenset[str]] = {}
    for ild, hosts in raw.items():
        if isinstance(ild, bool) or not isinstance(ild, int) or not 0 <= ild < ilds:
            raise ConfigError(f"{where}: cabling names ILD {shown(ild)}; this cluster has ILDs 0..{ilds - 1}")
        try:
            names = expand(hosts) if isinstance(hosts, str) else [str(h) for h in hosts or []]
        except Exception as exc:  # the hostlist parser's message says what is wrong
            raise ConfigError(f"{where}: cabling of ILD {ild}: {exc}") from None
        out[ild] = frozenset(names)
    return out


def _allocations(raw: object, num_agents: int, where: str) -> dict[str, frozenset[int]]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: allocations must map a name to 'all' or agent names")
    out: dict[str, frozenset[int]] = {}
    for name, agents in raw.items():
        idx = range(num_agents) if agents == "all" else [agent_index(a, num_agents, where) for a in agents or []]
        chosen = frozenset(idx)
        problem = allocation_problem(str(name), chosen, out)
        if problem:
            raise ConfigError(f"{where}: {problem}")
        out[str(name)] = chosen
    return out


def allocation_problem(name: str, chosen: frozenset[int], others: dict[str, frozenset[int]],
                       equal_ok: bool = False) -> str | None:
    """Why `chosen` agents cannot be allocation `name` beside `others` (None: they can): the
    V-IPU guide's sizes, and allocations nest or stay apart. equal_ok: the same machines as one of
    `others` nest too (a job's allocation of a whole Pod inside the cluster file's allocation of
    that Pod); between the file's own allocations two of the same machines are a typing slip."""
    if not rules.is_valid_allocation(len(chosen) * rules.IPUS_PER_AGENT):
        return (f"allocation {shown(name)} holds {len(chosen)} IPU-Machine(s) = {len(chosen) * rules.IPUS_PER_AGENT} "
                "IPUs; an allocation is 4, 8, 16, 32, 64 IPUs or a multiple of 64 (1, 2, 4, 8, 16 IPU-Machines or "
                "multiples of 16)")
    for other, theirs in others.items():
        if chosen & theirs and ((chosen == theirs and not equal_ok) or not (chosen <= theirs or theirs <= chosen)):
            return (f"allocation {shown(name)} shares agents with allocation {shown(other)} without one holding the "
                    "other; "
                    "allocations nest or stay apart")
    return None


def agent_index(agent: object, num_agents: int, where: str) -> int:
    text = str(agent)
    if text.startswith("ag") and text[2:].isdigit() and int(text[2:]) < num_agents:
        return int(text[2:])
    raise ConfigError(f"{where}: unknown agent {shown(text)}; agents are ag0..ag{num_agents - 1}")


# --- placement -------------------------------------------------------------------------

def place(cluster: Cluster, shape: rules.Shape, free: set[int]) -> list[int]:
    """Choose IPUs for `shape` among `free` ones: an aligned block of size/ILDs in each of
    `num_ilds` ILDs. Best fit: prefer blocks inside busy regions, so large blocks stay whole
    (a buddy allocator's habit); ties go to the lowest address."""
    block = shape.ipus_per_ild
    per_ild = cluster.ipus_per_ild
    best: list[tuple[tuple, list[int]]] = []
    for ild in range(cluster.ilds):
        base = ild * per_ild
        options = [
            (_busyness(start, block, base, per_ild, free), list(range(start, start + block)))
            for start in range(base, base + per_ild, block)
            if all(i in free for i in range(start, start + block))
        ]
        if options:
            best.append(min(options))
    if len(best) < shape.num_ilds:
        raise InsufficientIpus(
            f"not enough free IPUs for a partition of {shape.size} IPUs over {shape.num_ilds} "
            f"ILD(s): {len(free)} free, none in an aligned block of {block} in enough ILDs; "
            "remove a partition or ask for fewer IPUs"
        )
    chosen = sorted(best)[: shape.num_ilds]
    return sorted(i for _, ipus in chosen for i in ipus)


def _busyness(start: int, block: int, base: int, per_ild: int, free: set[int]) -> tuple:
    """Sort key: more busy IPUs in the enclosing 2x, 4x, ... blocks sorts first."""
    key = []
    size = block * 2
    while size <= per_ild:
        lo = base + ((start - base) // size) * size
        key.append(-sum(1 for i in range(lo, lo + size) if i not in free))
        size *= 2
    return (tuple(key), start)
