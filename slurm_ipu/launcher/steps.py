"""The partition a step's tasks name. Run by the SPANK plugin in srun,
as the user, once per step with IPUs, after slurmctld created the step and before any task
(spank/step.c), through the install's own command (which every user can run):

    slurm-ipu step start JOB STEP IPUS PER_NODE JOB_PER_NODE NODES GCDS [HET]

IPUS is what Slurm granted the step (PER_NODE on each of NODES), JOB_PER_NODE the job's; HET,
for a component of a heterogeneous job, the job it belongs to (0 or absent: none). It
prints `create NAME` and, on a second line, the `vipu` command line (tab-separated) that removes
it, which srun runs itself when it exits (a second Python start there would double a step's
cost: docs/performance.md); or `use NAME` (one that exists: the user's own); or nothing (the
job's partition). It refuses in one line (exit 2) a step that cannot have the IPUs it asked
for. The rules:

- A job held as one partition (vipu.model partition, or allocation with allocation.partition,
  or a heterogeneous job's component: srun tells only one component's tasks what it chose for a
  step spanning several, so each component's tasks name its own whole partition, or the user's
  exported one where it is in the component's allocation) cannot be split: a step asking for
  fewer IPUs per node than the job has (GPU-style steps over a node's devices) is refused, never
  handed the whole partition silently; a step with all of its nodes' IPUs (srun without --gres:
  Slurm gives a step its job's GRES) gets the job's.
- A job held as an allocation (Graphcore's model) gets, per step, a partition of exactly the
  IPUs Slurm granted the step, named prefix + job + "_" + step, in the job's allocation, over the
  step's hosts, owned by the user. Except, for a step with all of its nodes' IPUs: the user
  exported IPUOF_VIPU_API_PARTITION_ID naming a partition in the job's allocation (Graphcore's
  scripts make `p$JOB` and export it): that one is kept, after one V-IPU read that it is there;
  or the user's own partitions hold the IPUs: the step runs, told in one line that no partition
  was made for it (`srun hostname` in such a job must not fail). A step on some of a Pod's hosts
  whose IPU-Machines V-IPU cannot make one partition of (pods.host_runs) is refused before V-IPU
  is asked, naming the groups of the job's hosts that work.

V-IPU's own checks decide who may attach; the names only say what a task attaches to.
"""

from __future__ import annotations

import os
import sys
import time

from .. import rules
from ..cli_common import run_main
from ..errors import ConfigError, InsufficientIpus, VipuError

USAGE = "usage: slurm-ipu step start JOB STEP IPUS PER_NODE JOB_PER_NODE NODES GCDS [HET]"


class StepRefused(ConfigError):
    """The step cannot have what it asked for; srun fails it before any task starts."""


class Step:
    __slots__ = ("job", "step", "ipus", "per_node", "job_per_node", "nodes", "gcds", "het")

    def __init__(self, job: int, step: int, ipus: int, per_node: int, job_per_node: int, nodes: list[str],
                 gcds: int = 1, het: int = 0):
        self.job, self.step, self.ipus, self.per_node = job, step, ipus, per_node
        self.job_per_node, self.nodes, self.gcds, self.het = job_per_node, nodes, gcds, het

    @property
    def label(self) -> str:
        return f"step {self.job}.{self.step}"

    @property
    def splits(self) -> bool:
        """Fewer IPUs per node than the job has: the GPU-style split of a node's devices."""
        return self.per_node < self.job_per_node


def decide(step: Step, site, client, env: dict, deadline: float) -> str:
    """What `start` prints (see the module's docstring)."""
    model = site.model_for(step.nodes)
    prefix = site.partition.prefix
    if model == "partition" or site.allocation.partition:
        return _whole(step, rules.job_name(prefix, step.job))
    allocation = f"{site.allocation.prefix}{step.job}"
    own = env.get("IPUOF_VIPU_API_PARTITION_ID", "")
    named = rules.parse_name(own, prefix)
    # The plugin set it: for this job or a step of it, or for a heterogeneous job's batch script
    # (its first component's name, which every component's srun inherits).
    mine = named is not None and named[0] in (step.job, step.het)
    if own and not mine and not step.splits:
        return _users(step, client, own, allocation, deadline)
    if step.het:
        return _whole(step, rules.job_name(prefix, step.job))
    _placeable(step, site, env)
    name = rules.step_name(prefix, step.job, step.step)
    try:
        client.ensure_partition(name, step.ipus, deadline, num_gcds=step.gcds if step.gcds > 1 else None,
                                allocation=allocation, hosts=step.nodes)
        removal = "\t".join(client.argv(["remove", "partition", name]))
    except InsufficientIpus as exc:
        if step.splits:
            raise StepRefused(f"{step.label}: no partition of {_ipus(step.ipus)} for it in job {step.job}'s "
                              f"allocation {allocation}: {exc}; `vipu list partitions` shows what holds them") from None
        print(f"slurm-ipu: {step.label}: no partition made for it ({exc}); its tasks name "
              f"{rules.job_name(prefix, step.job)}: export IPUOF_VIPU_API_PARTITION_ID to name one of yours",
              file=sys.stderr)
        return ""
    except VipuError as exc:
        raise StepRefused(f"{step.label}: no partition of {_ipus(step.ipus)} for it in job {step.job}'s allocation "
                          f"{allocation}: {exc}") from None
    return f"create {name}\n{removal}"


SHOWN_GROUPS = 4  # groups of hosts a refusal names, at most


def _placeable(step: Step, site, env: dict) -> None:
    """A step on some hosts of a Pod gets a partition only where their IPU-Machines are a run
    V-IPU can make one partition of (pods.host_runs: the rule Slurm places the job's hosts by).
    Elsewhere (`srun -N2 -w node[2-3]` in a job on node[1-4]) the create could only fail, and
    that failure would read as the user's partitions holding the IPUs; refused in one line naming
    the groups of the job's hosts that work. A step over several Pods is V-IPU's to judge."""
    from ..slurm.hostlist import compress, expand

    n, mine = len(step.nodes), set(step.nodes)
    pods = [hosts for hosts, _ in site.pod_agents()]
    home = [hosts for hosts in pods if mine <= set(hosts)]
    if n < 2 or not home or len(home[0]) == n:
        return
    runs = site.host_runs().get(n, [])
    if any(set(run) == mine for run in runs):
        return
    job = set(expand(env.get("SLURM_JOB_NODELIST", ""))) or set(home[0])
    fits = [compress(list(run)) for run in runs if set(run) <= job]
    groups = " or ".join(fits[:SHOWN_GROUPS]) + (" or ..." if len(fits) > SHOWN_GROUPS else "")
    where = f"on {groups} (srun -w), on all the job's nodes" if fits else "on all the job's nodes"
    raise StepRefused(f"{step.label} on {compress(step.nodes)}: V-IPU makes one partition of {n} hosts' "
                      "IPU-Machines only where they are an aligned block (docs/vipu.md, \"Where a partition's IPUs may "
                      f"sit\"): run it {where}, or with --gres=none if it needs no IPUs")


def _whole(step: Step, name: str) -> str:
    if not step.splits:
        return ""
    raise StepRefused(f"{step.label} asks for {step.per_node} IPU(s) per node, but job {step.job} holds its "
                      f"{step.job_per_node} per node as one V-IPU partition ({name}), which steps cannot split; leave "
                      "--gres out of srun to run on the job's partition, or run each piece as a job of its own "
                      "(sbatch --gres=ipu:N, or a job array)")


def _users(step: Step, client, own: str, allocation: str, deadline: float) -> str:
    part = client.get_partition(own, deadline)
    if part is not None and part.allocation == allocation:
        return f"use {own}"
    if step.het:  # a heterogeneous batch script's export, for another component: this one keeps its own
        return _whole(step, "")
    where = "does not exist" if part is None else f"is in allocation {part.allocation}"
    raise StepRefused(f"{step.label}: IPUOF_VIPU_API_PARTITION_ID={own} {where}, not in job {step.job}'s "
                      f"allocation {allocation}; create it there (vipu create partition {own} --allocation "
                      f"{allocation} --size N) or unset the variable to get a partition made for the step")


def _ipus(n: int) -> str:
    return "1 IPU" if n == 1 else f"{n} IPUs"


def _quiet_client_log() -> None:
    """The client logs a failed `vipu` call before raising; the refusal line says it already, and
    srun's user should read one line, not Python's fallback log handler's three."""
    import logging

    logging.getLogger("slurm_ipu.vipu").addHandler(logging.NullHandler())


def user_client(site, nodes=()):
    """The user's own vipu (a user's vipu config applies; never the hooks' credentials), on the
    controller of the job's `nodes` (a site may have several)."""
    from ..vipu import VipuClient

    controller = site.controller_of(nodes)
    return VipuClient(command=[site.vipu.command], host=controller.host, port=controller.port,
                      timeout=site.vipu.timeout, emulator_flags=site.vipu.emulator)


def _number(text: str, what: str) -> int:
    if not text.isdigit():
        raise ConfigError(f"{what} {text!r} is not a number; {USAGE}")
    return int(text)


def parse_start(args: list[str]) -> Step:
    if len(args) not in (7, 8):  # 7: a plugin built before heterogeneous jobs were told apart
        raise ConfigError(USAGE)
    from ..slurm.hostlist import expand

    job, step, ipus, per_node, job_per_node, nodes, gcds, het = [*args, "0"][:8]
    return Step(_number(job, "JOB"), _number(step, "STEP"), _number(ipus, "IPUS"), _number(per_node, "PER_NODE"),
                _number(job_per_node, "JOB_PER_NODE"), expand(nodes), _number(gcds, "GCDS"), _number(het, "HET"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv

    def body() -> int:
        from .. import config

        if argv[:1] != ["start"]:
            raise ConfigError(USAGE)
        step = parse_start(argv[1:])
        path, _ = config.locate(os.environ)
        site = config.load(path, environ=os.environ)
        _quiet_client_log()
        reply = decide(step, site, user_client(site, step.nodes), os.environ, time.monotonic() + site.prolog.deadline)
        if reply:
            print(reply, flush=True)
        return 0

    return run_main(body, debug="--debug" in argv, program="slurm-ipu")


if __name__ == "__main__":
    sys.exit(main())
