"""What ipurun prints without launching: PopRun's topology table and the dry run."""

from __future__ import annotations

import os

from . import numa
from .plan import Plan
from .task import instance_env  # the wrapper's own: the dry run shows exactly what each task sets


def topology_table(plan: Plan, host_pods: dict | None = None) -> str:
    """PopRun's --print-topology table: each level's cells centred over its replicas; on a
    multi-Pod site a row above the hosts says which Pod each sits in."""
    reps = plan.num_replicas
    width = max(3, len(str(reps - 1)) + 2)
    per_inst = plan.replicas_per_instance

    def row(label: str, cells: list[tuple[str, int]]) -> str:
        parts = [f"{text:^{span * (width + 1) - 1}}" for text, span in cells]
        return f"| {label:<9} |" + "|".join(parts) + "|"

    host_cells = [(plan.hosts[h], plan.instances_per_host * per_inst) for h in range(len(plan.hosts))]
    ild_cells = [(str(i), reps // plan.num_ilds) for i in range(plan.num_ilds)]
    rows = [row("hosts", host_cells), row("ILDs", ild_cells),
            row("instances", [(str(i), per_inst) for i in range(plan.num_instances)]),
            row("replicas", [(str(r), 1) for r in range(reps)])]
    if host_pods:
        pods: list[list] = []
        for host, span in host_cells:
            pod = host_pods.get(host, "?")
            if pods and pods[-1][0] == pod:
                pods[-1][1] += span
            else:
                pods.append([pod, span])
        rows.insert(0, row("Pods", [(p, n) for p, n in pods]))
    inner = len(rows[0]) - 2
    sep = "|" + "-" * 11 + "|" + "-" * (inner - 12) + "|"
    title = f"|{'ipurun topology':^{inner}}|"
    body = [line for r in rows for line in (r, sep)][:-1]
    return "\n".join([" " + "=" * inner, title, "|" + "=" * inner + "|", *body, " " + "-" * inner])


def partition_line(vipu) -> str:
    if vipu.name is None:
        return "V-IPU: none (offline, or no partition in this job)"
    shape = vipu.shape
    ilds = f", {shape.ilds} ILD(s)" if shape.ilds else ""
    action = ("create it (--update-partition)" if vipu.create
              else "recreate it with this shape (--update-partition)" if vipu.recreate
              else "reset it first" if vipu.reset else "use it as it is")
    size = f"{shape.size} IPUs, " if shape.size else ""
    return f"V-IPU partition {vipu.name}: {size}{shape.gcds} GCD(s){ilds}; {action}"


def summary(launch) -> list[str]:
    """The plan, the partition action and the command line: what --verbose and --dry-run open with."""
    plan, opts = launch.plan, launch.opts
    lines = [f"plan: {plan.num_instances} instance(s) x {plan.replicas_per_instance} replica(s) x "
             f"{plan.ipus_per_replica} IPU(s) = {plan.total_ipus} IPUs on {len(plan.hosts)} host(s), "
             f"placement {opts.process_placement}", partition_line(launch.vipu)]
    if launch.srun:
        lines.append("srun command: " + " ".join(launch.srun + launch.command))
    else:
        lines.append("local launch (offline, no Slurm): " + " ".join(launch.command))
    return lines


def verbose_block(launch, level: int = 1) -> str:
    """-v: the plan, the partition action, the command and mpirun notes; -vv and more: also each
    instance's environment (PopRun's -vv shows the mpirun line with every -x)."""
    notes = launch.mpi.notes if launch.mpi is not None else []
    lines = [*summary(launch), *notes]
    if level >= 2:
        base = dict(os.environ, **launch.env)
        for inst in launch.plan.instances():
            env = instance_env(base, inst.index, inst.local_index)
            lines.append(f"instance {inst.index} on {inst.host}: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())
                                                                            if k.startswith(("POPDIST_", "IPUOF_"))))
    return "\n".join(f"ipurun: {line}" for line in lines)


def dry_run(launch) -> None:
    plan, opts = launch.plan, launch.opts
    first, *rest = summary(launch)
    print("\n".join([f"ipurun {first}", *rest]))
    try:
        cpus = numa.read_topology("/")
    except numa.PlacementError:
        cpus = []
    print("per instance (CPU lists from this host's topology; each node binds from its own):")
    base = dict(os.environ, **launch.env)
    for inst in plan.instances():
        b, why = _binding(cpus, inst, plan, opts.process_placement)
        env = instance_env(base, inst.index, inst.local_index)
        print(f"  instance {inst.index}: host {inst.host} numa {numa.format_cpulist(b.numa) if b else '?'} "
              f"cpus {numa.format_cpulist(b.cpus) if b and b.cpus else why or 'unbound'}")
        print("    " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))


def _binding(cpus, inst, plan, strategy):
    """(binding, None), or (None, why) when this host could not make it: the nodes bind from
    their own topology, so a small launch host is no reason to fail the dry run."""
    if not cpus:
        return None, None
    try:
        return numa.bind(cpus, inst.local_index, plan.instances_per_host, strategy), None
    except numa.PlacementError as exc:
        return None, f"? (not on this host: {exc})"
