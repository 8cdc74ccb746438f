"""The lab's settings (LabSpec: its directory, nodes, ports, Pods, accounting) and their checks."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import config, rules
from ..errors import LabError
from . import trust

REPO = Path(__file__).resolve().parents[2]
# This slurm_ipu is the Debian packages' (slurm-ipu-lab beside slurm-ipu): the lab then takes
# slurm-ipu-hook and the SPANK plugin from those packages instead of building them from a checkout.
FROM_PACKAGES = REPO == Path("/usr/lib/python3/dist-packages")
EXAMPLES = Path("/usr/share/slurm-ipu-lab/examples") if FROM_PACKAGES else REPO / "examples"
PACKAGES_PLUGIN_DIR = config.BY_KEY["slurm.plugin_dir"].default  # where slurm-ipu-spank puts spank_ipu.so
# The Slurm the lab runs: Debian's, or a site's own build under another prefix
# (SLURM_IPU_SLURM_PREFIX=/opt/slurm: tests/install/site_built.sh). munged is Debian's either way.
SLURM_PREFIX = Path(os.environ.get("SLURM_IPU_SLURM_PREFIX") or "/usr")
SBIN = SLURM_PREFIX / "sbin"
MUNGED = Path("/usr/sbin/munged")
PREFIX = config.BY_KEY["partition.prefix"].default  # the lab leaves the prefix at its default
CLUSTER = "ipulab"
REAP_INTERVAL = 30.0  # the slurm-ipu service's full reap: short, so drills see orphans go
MODELS = ("partition", "allocation", "mixed")
TWIN_GRES = "twin"  # LabSpec.twin_gres's name
MODEL_PARTITIONS = {"allocation": "ipu-alloc", "partition": "ipu-part"}  # --model mixed: Slurm's, per model


@dataclass(frozen=True)
class LabSpec:
    # $SLURM_IPU_LAB_DIR, else a directory no other user can create first (trust.default_dir)
    dir: Path = field(default_factory=trust.default_dir)
    nodes: int = 4
    ipus_per_node: int = 16
    ctld_port: int = 16817
    node_port: int = 17001       # nodeK listens on node_port + K - 1
    vipu_port: int = rules.VIPU_PORT
    # --accounting: MariaDB and slurmdbd of the lab's own (lab/accounting.py)
    accounting: bool = False
    dbd_port: int = 16819
    db_port: int = 16820
    prolog_deadline: float = 30.0
    pods: int = 1                # > 1: the nodes split into that many Pods (one ILD or more each)
    epilog_deadline: float = 20.0
    # Installed mode: the product as `make install PREFIX=... SITE=<lab site>` put it (slurm-ipu-hook,
    # config, SPANK plugin, venv), checked, not written; None: the lab installs its own copy.
    prefix: str | None = None
    # Own configuration: Slurm starts from the slurm.conf (and what it names) already in DIR/etc,
    # a site's own files as an admin wrote them (tests/slurm/test_adoption.py): the lab writes none
    # of Slurm's configuration, installs nothing and starts no slurm-ipu service (the site's install
    # does); the emulator reads DIR/etc/vipu-emu.yaml.
    own_conf: bool = False
    # vipu.model of the lab's site: 'partition' (a partition per job) or 'allocation' (Graphcore's
    # host-IPU mapping: an allocation per job, its hosts' IPU-Machines; the job makes partitions);
    # 'mixed' (--pods 2 or more): Pod a takes the allocation model, the others the partition model,
    # and Slurm has a partition of each model's hosts beside the default one of all (MODEL_PARTITIONS)
    model: str = "partition"
    # the slurm-ipu service's full reap (reap.interval); benchmarks that pile up state set it long
    reap_interval: float = REAP_INTERVAL
    # Configless (SlurmctldParameters=enable_configless): each slurmd starts with --conf-server and
    # sees neither the lab's etc nor the host's /run (a mount namespace of its own), so it runs
    # only what slurmctld sends it, as a node without /etc/slurm does (docs/admin.md, Configless)
    configless: bool = False
    # install.poprun of the lab's site: `poprun` on the lab's PATH is ipurun (scripts written for PopRun)
    poprun: bool = False
    # A site's own GRES beside ipu: `twin`, as many per node as IPUs, which slurm-ipu does not handle
    # (no hooks, no licence): the storm's plain jobs ask it so that they pack nodes as IPU jobs do and
    # the ratio measures the hooks alone (tests/bench/storm.py)
    twin_gres: bool = False
    # Hosts of different IPU counts: POD64s cabled to this many hosts each (4, 2, 1: hosts of 16, 32
    # and 64 IPUs; Graphcore cables a Pod64 to one, two or four host servers); --nodes is their sum
    # and --pods their number. (): every node has --ipus-per-node.
    pod_hosts: tuple[int, ...] = ()
    # A backup controller: slurmctld ctl1 on 127.0.0.1 (the primary) and ctl2 on 127.0.0.2, each in a
    # UTS and mount namespace of its own (its hostname, its pid file and log), sharing the state
    # directory, as two SlurmctldHost lines on two machines do (lab/daemons.py, docs/admin.md)
    backup: bool = False
    # Several V-IPU controllers: the nodes split into this many Pods (--pods), each a vPOD (or POD64s)
    # with an emulator of its own on a port of its own: the first on vipu_port, the others on
    # vipu_ports (by default the ports after vipu_port). Each has a Slurm partition of its hosts.
    controllers: int = 1
    vipu_ports: tuple[int, ...] = ()

    def __post_init__(self):
        if self.controllers > 1 and self.pods == 1:  # a Pod per controller unless told otherwise
            object.__setattr__(self, "pods", self.controllers)

    @property
    def controller_names(self) -> list[str]:
        return [f"ctl{chr(ord('a') + k)}" for k in range(self.controllers)]

    @property
    def controller_ports(self) -> list[int]:
        return [self.vipu_port, *(self.vipu_ports or range(self.vipu_port + 1, self.vipu_port + self.controllers))]

    def emulator_key(self, k: int) -> str:
        """The pids record (and state directory) of controller k's emulator: the first is the lab's
        one emulator of old, vipu-emu."""
        return "vipu-emu" if k == 0 else f"vipu-emu-{self.controller_names[k]}"

    @property
    def pod_ipus(self) -> int:
        if self.pod_hosts:
            return len(self.pod_hosts) * rules.IPUS_PER_ILD
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
        if not self.own_conf:  # with a site's own files, its install says where its description is
            env["SLURM_IPU_SITE"] = str(self.path("etc", "site.yaml"))
        slurm = "" if SLURM_PREFIX == Path("/usr") else f"{SLURM_PREFIX / 'bin'}:"  # sbatch and the rest
        env["PATH"] = f"{self.path('bin')}:{slurm}{env.get('PATH', '/usr/bin:/bin')}"
        return env


# LabSpec.backup: each controller's hostname (its UTS namespace's) and address
CONTROLLERS = (("ctl1", "127.0.0.1"), ("ctl2", "127.0.0.2"))


def check_spec(spec: LabSpec) -> None:
    if spec.nodes < 1 or spec.ipus_per_node < 1:
        raise LabError(f"--nodes {spec.nodes} and --ipus-per-node {spec.ipus_per_node} must be positive")
    ports = {"--ctld-port": spec.ctld_port, "--node-port": spec.node_port, "--vipu-port": spec.vipu_port}
    ports.update({f"controller {name}'s port": port for name, port in
                  zip(spec.controller_names[1:], spec.controller_ports[1:], strict=True)})
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
    if spec.pod_hosts:
        _check_pod_hosts(spec)
    total = spec.pod_ipus
    if spec.controllers > 1:
        _check_controllers(spec)
    elif spec.pods > 1 and not spec.pod_hosts and (spec.nodes % spec.pods or total % (spec.pods * rules.IPUS_PER_ILD)):
        raise LabError(f"--pods {spec.pods}: {spec.nodes} nodes x {spec.ipus_per_node} IPUs do not split into "
                       f"{spec.pods} Pods of whole ILDs (64 IPUs); e.g. --nodes 8 --ipus-per-node 16 --pods 2")
    if spec.own_conf and (spec.accounting or spec.prefix or spec.pods > 1):
        raise LabError("--own-conf starts Slurm from the site's own files: --accounting, --prefix and --pods "
                       "describe a configuration the lab writes; leave them out")
    if spec.backup and (spec.configless or spec.own_conf):
        raise LabError("--backup gives the lab's own slurm.conf two SlurmctldHost lines: leave --configless and "
                       "--own-conf out")
    if spec.pods < 1:
        raise LabError(f"--pods {spec.pods} must be at least 1")
    if spec.model not in MODELS:
        raise LabError(f"--model {spec.model}: use {', '.join(MODELS)}")
    if spec.model == "mixed" and spec.pods < 2:
        raise LabError("--model mixed gives Pod a the allocation model and the others the partition model: use "
                       "--pods 2 or more (e.g. --nodes 8 --pods 2)")
    if spec.own_conf:  # the site's own files say which nodes have IPUs; --ipus-per-node is not used
        return
    if not rules.is_valid_allocation(total):
        raise LabError(f"{spec.nodes} nodes x {spec.ipus_per_node} IPUs = {total} IPUs is not a Pod: use 4, 8, 16, 32, "
                       "64 or a multiple of 64 (e.g. --nodes 4 --ipus-per-node 16)")


def _check_controllers(spec: LabSpec) -> None:
    """--controllers N: N Pods of equal nodes, each a vPOD (4 to 32 IPUs) or whole ILDs."""
    n = spec.controllers
    if spec.pods != n or spec.pod_hosts or spec.own_conf or spec.model == "mixed":
        raise LabError(f"--controllers {n} gives each controller one Pod of the nodes: leave --pods (or give {n}), "
                       "--pod-hosts, --own-conf and --model mixed out")
    if len(spec.vipu_ports) not in (0, n - 1):
        raise LabError(f"--controllers {n}: give the other controllers' {n - 1} port(s), or none")
    per = spec.pod_ipus // n
    if spec.nodes % n or not (per in (4, 8, 16, 32) or per % rules.IPUS_PER_ILD == 0):
        raise LabError(f"--controllers {n}: {spec.nodes} nodes x {spec.ipus_per_node} IPUs do not split into {n} "
                       "vPODs of 4, 8, 16 or 32 IPUs or Pods of whole ILDs; e.g. --nodes 4 --ipus-per-node 8 "
                       "--controllers 2")


def _check_pod_hosts(spec: LabSpec) -> None:
    given = ",".join(map(str, spec.pod_hosts))
    if any(h not in (1, 2, 4, 8, 16) for h in spec.pod_hosts) or len(spec.pod_hosts) < 2:
        raise LabError(f"--pod-hosts {given}: give two or more Pods, each of 1, 2, 4, 8 or 16 hosts (a POD64's "
                       "64 IPUs on each), e.g. --pod-hosts 4,2,1")
    if spec.nodes != sum(spec.pod_hosts) or spec.pods != len(spec.pod_hosts) or spec.twin_gres:
        raise LabError(f"--pod-hosts {given} makes {sum(spec.pod_hosts)} nodes in {len(spec.pod_hosts)} Pods: leave "
                       "--nodes, --pods and the twin GRES out")


def _spec_key(spec: LabSpec) -> dict:
    return {k: str(v) for k, v in asdict(spec).items()}
