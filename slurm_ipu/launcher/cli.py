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
from .hetjob import component_env
from .options import Options, export_config, parse
from .plan import Plan, make_plan
from .task import CACHE_ROOT, TASK


class Launch:
    """Everything decided before anything starts."""

    def __init__(self, opts: Options, plan: Plan, env: dict, srun: list[str] | None, command: list[str],
                 cache_dir: str | None, vipu: partition.PartitionPlan, client_factory, mpi=None, host_pods=None,
                 inside: bool = False, job_env: dict | None = None):
        self.opts, self.plan, self.env, self.srun, self.command = opts, plan, env, srun, command
        self.job_env = os.environ if job_env is None else job_env  # as ipurun read its job (hetjob.py)
        self.cache_dir = cache_dir   # a cache ipurun itself must remove (local backend only)
        self.vipu, self.client_factory = vipu, client_factory
        self.mpi = mpi               # what the --mpi-* options asked (None without them)
        self.host_pods = host_pods or {}  # multi-Pod sites: host -> Pod, for --print-topology
        self.inside = inside              # inside an allocation: srun uses its nodes (else it asks for some)


AUTOREPORT_CONFLICT = ("autoreport-dir command line argument cannot be specified when POPLAR_ENGINE_OPTIONS "
                       "contains autoReport.directory setting")


def check_autoreport(opts: Options, env: dict, mpi) -> None:
    """PopRun's rule: PopDist gives every instance its own report directory under
    --autoreport-dir, so POPLAR_ENGINE_OPTIONS may not fix one, whether it comes from the
    environment or from -x in --mpi-local-args / --instance-mpi-local-args."""
    if not opts.autoreport_dir:
        return
    if "autoReport.directory" in env.get("POPLAR_ENGINE_OPTIONS", ""):
        raise ConfigError(f"{AUTOREPORT_CONFLICT} (in the environment); keep one")
    if mpi is not None:
        from .mpiargs import engine_options_with_directory

        if engine_options_with_directory(mpi):
            raise ConfigError(f"{AUTOREPORT_CONFLICT} (through -x in the MPI arguments); keep one")


def check_options(opts: Options, srun_extra: list[str]) -> None:
    """Combinations of options, checked before anything is read or started."""
    if opts.process_placement not in numa.STRATEGIES:
        raise ConfigError(f"--process-placement {opts.process_placement!r}; use one of {', '.join(numa.STRATEGIES)}")
    if opts.process_placement != "disabled" and any(a.startswith("--cpu-bind") for a in srun_extra):
        raise ConfigError("--cpu-bind: ipurun binds instances itself; add --process-placement=disabled to bind "
                          "with srun's --cpu-bind instead")
    if opts.hostfile and opts.host:
        raise ConfigError(f"--host {opts.host} and --hostfile {opts.hostfile} both name the hosts; give one of them")
    if opts.offline_target and not opts.offline_mode:
        raise ConfigError(f"--offline-target {opts.offline_target} is for offline compiles; add --offline-mode=yes")


def mpi_args(opts: Options):
    if not (opts.mpi_global_args or opts.mpi_local_args or opts.instance_mpi_local_args):
        return None
    from . import mpiargs

    return mpiargs.parse(opts, opts.num_instances)


def hosts_for(opts: Options, env: dict) -> tuple[list[str], bool, bool]:
    """(hosts, inside an allocation, hosts are only part of the allocation)."""
    from ..slurm.hostlist import expand

    inside = bool(env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST"))
    wanted = expand(opts.host) if opts.host else read_hostfile(opts.hostfile) if opts.hostfile else []
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


def read_hostfile(path: str) -> list[str]:
    """PopRun's --hostfile: one host per line; blank lines and `#` comments skipped, and a line's
    words after its first (an MPI hostfile's `slots=N`) left to the plan, which places instances
    itself. Each line may be a hostlist (node[1-4]), as --host takes."""
    from ..adminfile import read_text
    from ..slurm.hostlist import expand

    text = read_text(path, "ipurun --hostfile", "; give a file of hosts, one per line")
    hosts = [h for line in text.splitlines() if (word := line.split("#", 1)[0].split()) for h in expand(word[0])]
    if not hosts:
        raise ConfigError(f"--hostfile {path} names no host; put one per line, or use --host")
    return list(dict.fromkeys(hosts))


def build(opts: Options, srun_extra: list[str], command: list[str], env: dict, client_factory=None) -> Launch:
    """Plan the run and check every option against it and the partition's real shape (one
    V-IPU read when there is a partition to drive). Nothing starts or changes here."""
    check_options(opts, srun_extra)
    env = component_env(env, srun_extra)
    mpi = mpi_args(opts)
    check_autoreport(opts, env, mpi)
    hosts, inside, subset = hosts_for(opts, env)
    local = not inside and not (opts.host or opts.hostfile) and opts.offline_mode
    cpus = cpus_per_host(env, inside, local)
    target = partition.locate(opts, env, inside)
    factory = client_factory or partition.make_client_factory(opts, target)
    vipu = partition.decide(opts, env, opts.num_instances, target, factory, srun_extra, hosts=len(hosts))
    if vipu.step and not any(a.startswith("--ipu-gcds=") for a in srun_extra):
        srun_extra = [*srun_extra, f"--ipu-gcds={vipu.shape.gcds}"]  # the step partition's shape
    plan = make_plan(opts.num_instances, opts.num_replicas, opts.ipus_per_replica, hosts,
                     opts.num_ilds or vipu.shape.ilds or 1, num_gcds=vipu.shape.gcds,
                     cpus_per_host=cpus if opts.process_placement in numa.ONE_CORE_EACH else None,
                     partition=(vipu.name, vipu.shape.size) if vipu.name else
                     (f"{target.name}_<step>", vipu.shape.size) if vipu.step else None,
                     distribution=mpi.distribution if mpi else "block",
                     reshape=lambda gcds: partition.reshape_hint(vipu.name, env, gcds=gcds))
    cache, own_cache = cache_for(opts, plan, local)
    task_env = instance_constants(opts, plan, cache, mpi, vipu.name)
    host_pods, gcd_map = pod_placement(plan, vipu, factory, env, inside, opts.print_topology)
    if gcd_map is not None:
        task_env["IPURUN_GCD_MAP"] = ",".join(map(str, gcd_map))
    if mpi is not None:
        srun_extra = srun_extra + mpi.srun
    if inside and cpus is not None and plan.instances_per_host > cpus:
        # Only placements that share CPUs get here (the plan refuses the one-core-each ones):
        # more instances than the allocation's CPUs on a host is then fine, as with PopRun.
        srun_extra = [*srun_extra, "--overcommit"]
    if opts.verbose >= 3:  # PopRun's -vvv: the launcher's own messages too
        srun_extra = [*srun_extra, "--verbose"]
    srun = None if local else srun_line(opts, plan, inside, subset, env, srun_extra)
    return Launch(opts, plan, task_env, srun, command, own_cache, vipu, factory, mpi, host_pods, inside, env)


def pod_placement(plan: Plan, vipu, factory, env: dict, inside: bool, show: bool):
    """Multi-Pod: (host -> Pod, GCD per instance) so every instance drives its own Pod's IPUs;
    ({}, None) for a partition in one ILD (no read at all unless `show`) or a site without Pods."""
    part = vipu.current if inside and not vipu.recreate else None
    if not inside or (part is None or plan.num_gcds < 2) and not show:
        return {}, None
    from . import pods

    host_pods, gcd_pods = pods.read(part, factory, env, show)
    return host_pods, pods.assign(plan, host_pods, gcd_pods) if gcd_pods else None


def cpus_per_host(env: dict, inside: bool, local: bool) -> int | None:
    """CPUs each host gives the run, where known before launch: the fewest the allocation has
    on any of its nodes (SLURM_JOB_CPUS_PER_NODE: "4(x2),2"), or this machine's for a local
    run. Other hosts (-H outside an allocation) bind from their own."""
    if inside:
        counts = [int(c.split("(")[0]) for c in env.get("SLURM_JOB_CPUS_PER_NODE", "").split(",")
                  if c.split("(")[0].isdigit()]
        if counts:
            return min(counts)
        return int(env["SLURM_CPUS_ON_NODE"]) if env.get("SLURM_CPUS_ON_NODE", "").isdigit() else None
    return len(os.sched_getaffinity(0)) if local else None


def cache_for(opts: Options, plan: Plan, local: bool) -> tuple[str | None, str | None]:
    """(the cache path the instances get, one ipurun must remove itself). As PopRun: none for
    one instance on one host unless a path is given; '' disables; a path given is kept.
    Otherwise, locally, one directory for this run that ipurun removes; under Slurm, each
    task uses JOB_CACHE_ROOT/<jobid>, one per job and host, shared by the job's runs, which the
    node's job prolog makes as root for the job's user alone and its job epilog removes however
    the job ends (spank/cache.c)."""
    cache = opts.executable_cache_path
    if cache is None and plan.num_instances == 1 and len(plan.hosts) == 1:
        return "", None
    if cache is None and local:
        # random bits: in /tmp a name others can guess is one they can plant first
        cache = os.path.join(CACHE_ROOT, f"ipurun-cache-local-{os.getpid()}-{os.urandom(8).hex()}")
        return cache, cache
    return cache, None


def instance_constants(opts: Options, plan: Plan, cache: str | None, mpi, partition: str | None) -> dict:
    """What every instance's wrapper reads (IPURUN_*), and what every instance gets as is.
    partition: the one this run drives (--vipu-partition, else the IPUOF_VIPU_API_PARTITION_ID
    the caller exported, as Graphcore's scripts export p$SLURM_JOB_ID): the instances attach to
    it, not to the job's own, which the SPANK plugin names in every task."""
    own = opts.executable_cache_path is None and cache != ""
    env = {
        "IPURUN_NUM_INSTANCES": str(plan.num_instances), "IPURUN_NUM_REPLICAS": str(plan.num_replicas),
        "IPURUN_IPUS_PER_REPLICA": str(plan.ipus_per_replica),
        "IPURUN_INSTANCES_PER_HOST": str(plan.instances_per_host),
        "IPURUN_NUM_GCDS": str(plan.num_gcds), "IPURUN_PLACEMENT": opts.process_placement,
        "IPURUN_VIPU_TIMEOUT": str(opts.vipu_server_timeout), "IPURUN_OFFLINE": "1" if opts.offline_mode else "0",
        "IPURUN_REPORT_BINDINGS": "1" if opts.report_bindings or opts.print_topology else "0",
        "IPURUN_ONLY_OUTPUT_FROM": "" if opts.only_output_from_instance is None
        else str(opts.only_output_from_instance),
        "IPURUN_CACHE_DIR": cache or "", "IPURUN_OWN_CACHE": "1" if own else "0",
        "IPURUN_AUTOREPORT_DIR": opts.autoreport_dir or "",
        "IPURUN_VIPU_HOST": opts.vipu_server_host or "", "IPURUN_VIPU_PORT": str(opts.vipu_server_port or ""),
        "IPURUN_VIPU_PARTITION_ID": opts.vipu_partition or partition or "",
    }
    if opts.offline_target:
        from .offline import target_options

        env["POPLAR_TARGET_OPTIONS"] = target_options(opts.offline_target, plan.total_ipus)
    if mpi is not None:
        env.update(mpi.env)
        for k, extra in mpi.instance_env.items():
            env[f"IPURUN_INSTANCE_ENV_{k}"] = encode_instance_env(extra)
    return env


def encode_instance_env(extra: dict[str, str]) -> str:
    """-x for one instance, as the task side reads it (C in the SPANK plugin): K=V entries
    separated by the ASCII unit separator, which no variable may then contain."""
    for key, value in extra.items():
        if "\x1f" in key + value or "=" in key:
            raise ConfigError(f"-x {key}=...: a variable name without '=' and values without the "
                              "control character \\x1f, please")
    return "\x1f".join(f"{key}={value}" for key, value in extra.items())


def srun_line(opts: Options, plan: Plan, inside: bool, subset: bool, env: dict, extra: list[str]) -> list[str]:
    argv = ["srun", f"--nodes={len(plan.hosts)}", f"--ntasks={plan.num_instances}",
            f"--ntasks-per-node={plan.instances_per_host}", f"--distribution={plan.distribution}",
            "--kill-on-bad-exit=1", "--label"]
    if opts.process_placement != "disabled":
        argv.append("--cpu-bind=none")  # ipurun binds each instance itself, inside the step's CPUs
    if opts.host or opts.hostfile or subset:
        argv.append(f"--nodelist={','.join(plan.hosts)}")
    if inside and env.get("SLURM_STEP_ID") is not None:
        argv.append("--overlap")  # already inside a step: share its resources instead of waiting for them
    if not inside and not opts.offline_mode:
        argv.append(f"--gres=ipu:{plan.total_ipus // len(plan.hosts)}")
    # Each task sets up its own instance in the SPANK plugin (spank/instance.c): no process of
    # ours per instance, and no Python needed on the nodes. An srun without the plugin refuses
    # the option, rather than starting instances with no PopDist environment.
    return argv + extra + ["--ipu-instance"]


def run(launch: Launch) -> int:
    from . import output

    partition.apply(launch.vipu, launch.job_env, launch.client_factory)
    try:
        env = dict(os.environ, **launch.env)
        out = output.Output(launch.opts.tag_output or (launch.mpi is not None and launch.mpi.tag_output))
        if launch.srun is not None:
            rc = output.run_srun(launch.srun + launch.command, env, out)
            if rc != 0 and not out.tails and out.first_failure is None:  # Slurm's refusal, before any instance
                print(not_started(launch, rc), file=sys.stderr, flush=True)
            return rc
        argv = [sys.executable, "-S", "-I", TASK, "--", *launch.command]
        envs = [dict(env, SLURM_PROCID=str(i), SLURM_LOCALID=str(i)) for i in range(launch.plan.num_instances)]
        return output.run_instances([argv] * len(envs), envs, out)
    finally:
        if launch.cache_dir:
            import shutil

            shutil.rmtree(launch.cache_dir, ignore_errors=True)
        partition.remove_created(launch.vipu, launch.opts, launch.client_factory)


def not_started(launch: Launch, rc: int) -> str:
    """ipurun's own line when srun started no instance (srun's reason is above it)."""
    plan = launch.plan
    said = f"ipurun: srun started no instance (exit {rc}; Slurm's reason is above)"
    if launch.inside:
        return said
    per = plan.total_ipus // len(plan.hosts)
    ipus = "" if launch.opts.offline_mode else f" and {per} IPUs"
    return (f"{said}: outside an allocation it asks Slurm itself for {len(plan.hosts)} node(s) with "
            f"{plan.instances_per_host} instance(s){ipus} each; get the nodes first (salloc or sbatch with -N and "
            "--gres=ipu:N) and run ipurun inside that job: it spreads the instances over the job's nodes")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv

    def body() -> int:
        opts, extra, command = parse(argv)
        for note in opts.notes:  # PopRun options that mean nothing here: said once, not refused
            print(f"ipurun: {note}", file=sys.stderr, flush=True)
        launch = build(opts, extra, command, dict(os.environ))
        if opts.export_config:  # only once every option has been checked, as PopRun does
            written = export_config(opts, command)
            if opts.verbose:
                print(f"ipurun: options and command stored in {written}", file=sys.stderr, flush=True)
        if opts.verbose and not opts.dry_run:
            from . import show

            print(show.verbose_block(launch, opts.verbose), file=sys.stderr, flush=True)
        if opts.print_topology or opts.dry_run:
            from . import show

            if opts.print_topology:
                print(show.topology_table(launch.plan, launch.host_pods))
            if opts.dry_run:
                show.dry_run(launch)
                return 0
        return run(launch)

    return run_main(body, debug=debug, program="ipurun")


if __name__ == "__main__":
    sys.exit(main())
