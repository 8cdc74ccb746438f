"""`ipurun [OPTIONS] [--] COMMAND [ARGS...]`: PopRun's options on Slurm's srun.

Inside an allocation ipurun runs one step of it (with --overlap when already inside a step);
outside one, srun asks for an allocation with the right --gres=ipu:N so the prolog creates the
partition. With --offline-mode and no allocation and no --host, instances run on this machine
without Slurm (PopRun's installation check). Options: see options.py.

Start-up is part of every launch, so this module imports only what a plain launch needs; the
V-IPU client, json and the dry run load on demand.
"""

from __future__ import annotations

import os
import sys

from ..cli_common import run_main
from ..errors import ConfigError
from . import numa, partition
from .options import Options, export_config, parse
from .plan import Plan, make_plan
from .task import CACHE_ROOT, TASK


class Launch:
    """Everything decided before anything starts."""

    def __init__(self, opts: Options, plan: Plan, env: dict, srun: list[str] | None, command: list[str],
                 cache_dir: str | None, vipu: partition.PartitionPlan, client_factory):
        self.opts, self.plan, self.env, self.srun, self.command = opts, plan, env, srun, command
        self.cache_dir = cache_dir   # a cache ipurun itself must remove (local backend only)
        self.vipu, self.client_factory = vipu, client_factory


def check_autoreport(opts: Options, env: dict) -> None:
    if not opts.autoreport_dir or "autoReport.directory" not in env.get("POPLAR_ENGINE_OPTIONS", ""):
        return
    import json

    try:
        engine = json.loads(env["POPLAR_ENGINE_OPTIONS"])
    except ValueError:
        raise ConfigError("POPLAR_ENGINE_OPTIONS is not JSON; fix it or unset it") from None
    if isinstance(engine, dict) and "autoReport.directory" in engine:
        raise ConfigError("--autoreport-dir conflicts with autoReport.directory in POPLAR_ENGINE_OPTIONS; keep one")


def hosts_for(opts: Options, env: dict) -> tuple[list[str], bool, bool]:
    """(hosts, inside an allocation, hosts are only part of the allocation)."""
    from ..slurm.hostlist import expand

    inside = bool(env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST"))
    wanted = expand(opts.host) if opts.host else []
    if inside:
        alloc = expand(env["SLURM_JOB_NODELIST"])
        outside = [h for h in wanted if h not in alloc]
        if outside:
            raise ConfigError(f"--host {outside[0]} is not in this job's nodes ({env['SLURM_JOB_NODELIST']})")
        hosts = wanted or alloc
        if not wanted and opts.num_instances < len(hosts):
            hosts = hosts[:opts.num_instances]
        return hosts, True, len(hosts) < len(alloc)
    if wanted:
        return wanted, False, False
    return [os.uname().nodename if opts.offline_mode else "[0]"], False, False


def build(opts: Options, srun_extra: list[str], command: list[str], env: dict, client_factory=None) -> Launch:
    """Plan the run and check every option against it and the partition's real shape (one
    V-IPU read when there is a partition to drive)."""
    if opts.process_placement not in numa.STRATEGIES:
        raise ConfigError(f"--process-placement {opts.process_placement!r}; use one of {', '.join(numa.STRATEGIES)}")
    check_autoreport(opts, env)
    hosts, inside, subset = hosts_for(opts, env)
    cpus = int(env["SLURM_CPUS_ON_NODE"]) if inside and env.get("SLURM_CPUS_ON_NODE", "").isdigit() else len(
        os.sched_getaffinity(0))
    target = partition.locate(opts, env, inside)
    factory = client_factory or partition.make_client_factory(opts, target)
    vipu = partition.decide(opts, env, opts.num_instances, target, factory, srun_extra)
    plan = make_plan(opts.num_instances, opts.num_replicas, opts.ipus_per_replica, hosts,
                     opts.num_ilds or vipu.shape.ilds or 1, num_gcds=vipu.shape.gcds,
                     cpus_per_host=cpus if opts.process_placement != "disabled" else None,
                     partition=(vipu.name, vipu.shape.size) if vipu.name else None)
    local = not inside and not opts.host and opts.offline_mode
    cache, own_cache = opts.executable_cache_path, None
    if cache is None and local:
        cache = own_cache = os.path.join(CACHE_ROOT, f"ipurun-cache-local-{os.getpid()}")  # ipurun removes it
    # Under Slurm, unset: each task's wrapper uses CACHE_ROOT/ipurun-cache-<jobid>, one per job and
    # host, shared by the job's runs, removed by the node's job epilog however the job ends.
    task_env = {
        "IPURUN_NUM_INSTANCES": str(plan.num_instances), "IPURUN_NUM_REPLICAS": str(plan.num_replicas),
        "IPURUN_IPUS_PER_REPLICA": str(plan.ipus_per_replica), "IPURUN_INSTANCES_PER_HOST": str(plan.instances_per_host),
        "IPURUN_NUM_GCDS": str(plan.num_gcds), "IPURUN_PLACEMENT": opts.process_placement,
        "IPURUN_VIPU_TIMEOUT": str(opts.vipu_server_timeout), "IPURUN_OFFLINE": "1" if opts.offline_mode else "0",
        "IPURUN_REPORT_BINDINGS": "1" if opts.report_bindings or opts.print_topology else "0",
        "IPURUN_ONLY_OUTPUT_FROM": "" if opts.only_output_from_instance is None else str(opts.only_output_from_instance),
        "IPURUN_CACHE_DIR": cache or "", "IPURUN_OWN_CACHE": "1" if opts.executable_cache_path is None else "0",
        "IPURUN_AUTOREPORT_DIR": opts.autoreport_dir or "",
        "IPURUN_VIPU_HOST": opts.vipu_server_host or "", "IPURUN_VIPU_PORT": str(opts.vipu_server_port or ""),
        "IPURUN_VIPU_PARTITION_ID": opts.vipu_partition or "",
    }
    srun = None if local else srun_line(opts, plan, inside, subset, env, srun_extra)
    return Launch(opts, plan, task_env, srun, command, own_cache, vipu, factory)


def srun_line(opts: Options, plan: Plan, inside: bool, subset: bool, env: dict, extra: list[str]) -> list[str]:
    argv = ["srun", f"--nodes={len(plan.hosts)}", f"--ntasks={plan.num_instances}",
            f"--ntasks-per-node={plan.instances_per_host}", "--distribution=block", "--kill-on-bad-exit=1", "--label"]
    if opts.process_placement != "disabled":
        argv.append("--cpu-bind=none")  # ipurun binds each instance itself, inside the step's CPUs
    if opts.host or subset:
        argv.append(f"--nodelist={','.join(plan.hosts)}")
    if inside and env.get("SLURM_STEP_ID") is not None:
        argv.append("--overlap")  # already inside a step: share its resources instead of waiting for them
    if not inside and not opts.offline_mode:
        argv.append(f"--gres=ipu:{plan.total_ipus // len(plan.hosts)}")
    return argv + extra + [sys.executable, "-S", "-I", TASK, "--"]


def run(launch: Launch) -> int:
    from . import output

    partition.apply(launch.vipu, os.environ, launch.client_factory)  # reads the job id only
    env = dict(os.environ, **launch.env)
    out = output.Output(launch.opts.tag_output)
    if launch.srun is not None:
        return output.run_srun(launch.srun + launch.command, env, out)
    try:
        argv = [sys.executable, "-S", "-I", TASK, "--", *launch.command]
        envs = [dict(env, SLURM_PROCID=str(i), SLURM_LOCALID=str(i)) for i in range(launch.plan.num_instances)]
        return output.run_instances([argv] * len(envs), envs, out)
    finally:
        if launch.cache_dir:
            import shutil

            shutil.rmtree(launch.cache_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv

    def body() -> int:
        opts, extra, command = parse(argv)
        if opts.export_config:
            export_config(opts)
        launch = build(opts, extra, command, dict(os.environ))
        if opts.verbose and not opts.dry_run:
            from . import show

            print(show.verbose_block(launch), file=sys.stderr, flush=True)
        if opts.print_topology or opts.dry_run:
            from . import show

            if opts.print_topology:
                print(show.topology_table(launch.plan))
            if opts.dry_run:
                show.dry_run(launch)
                return 0
        return run(launch)

    return run_main(body, debug=debug, program="ipurun")


if __name__ == "__main__":
    sys.exit(main())
