"""The per-instance setup in Python: what ipurun's local backend (no Slurm) starts for each
instance, `python -S -I task.py -- COMMAND ARGS...`, and what --dry-run shows. Under Slurm the
SPANK plugin does the same in each task (spank/instance.c); tests hold the two equal.

It reads the plan's constants (IPURUN_*) and its place (SLURM_PROCID, SLURM_LOCALID), sets
PopDist's per-instance environment, binds CPUs (and memory, for spreadnuma) on the node where
it runs, then execs the command: binding precedes the user's program, so every thread inherits
it. Standard library only, so a task starts in milliseconds.
"""

from __future__ import annotations

import os
import stat
import sys

if __package__:  # imported by ipurun (the dry run shows what each task will set)
    from . import numa
else:  # run by srun as a script: this directory, without the package, on purpose
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numa  # noqa: E402

TASK = os.path.abspath(__file__)
CACHE_ROOT = "/tmp"  # the local backend's per-run cache (cli.cache_for) and the run record (partition.STATE_ROOT)
# The per-job caches under Slurm: the SPANK plugin's job prolog makes JOB_CACHE_ROOT/<jobid> as
# root, for the job's user alone, and its job epilog removes it (spank/cache.c, IPU_JOB_CACHE_ROOT).
JOB_CACHE_ROOT = "/var/cache/slurm-ipu"
MPOL_BIND = 2
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}


def fail(msg: str, code: int = 2) -> None:
    print(f"ipurun: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def membind(nodes: tuple[int, ...]) -> bool:
    """set_mempolicy(MPOL_BIND, nodes): memory of this process and the program it execs."""
    nr = SYS_SET_MEMPOLICY.get(os.uname().machine)
    if nr is None or not nodes:
        return False
    import ctypes  # only when there is memory to bind
    mask = 0
    for n in nodes:
        mask |= 1 << n
    buf = (ctypes.c_ulong * 16)(mask)
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(nr, MPOL_BIND, buf, ctypes.c_ulong(64 * 16)) == 0


def open_cache(path: str, own: bool, k: int, given: bool = True) -> None:
    """Check the executable cache, and make it if the path was given. The per-job one (not
    given) was made by the node's job prolog as root (spank/cache.c); an own one (ipurun chose
    it) is used only if it is a real directory of ours that nobody else can write, since Poplar
    loads executables from it."""
    try:
        if given:
            os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        fix = "" if given else ("this node's slurmd makes it in its job prolog (restart slurmd once after "
                                "installing slurm-ipu), or ")
        fail(f"instance {k}: executable cache {path}: {exc.strerror}; {fix}give --executable-cache-path")
    if own and (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022):
        fail(f"instance {k}: executable cache {path} is not a private directory of uid {os.getuid()}; "
             "remove it or give --executable-cache-path")


def gcd_of(env: dict, k: int, n: int, gcds: int) -> str:
    """IPURUN_GCD_MAP (a multi-Pod run: each instance's GCD in its own host's Pod), else the
    block rule: instance k drives GCD k // (instances per GCD)."""
    mapping = env.get("IPURUN_GCD_MAP", "").split(",")
    given = mapping[k] if k < len(mapping) else ""
    return str(int(given)) if given.isdigit() and int(given) < gcds else str(k // (n // gcds))


def instance_env(env: dict, k: int, local: int) -> dict:
    n, replicas = int(env["IPURUN_NUM_INSTANCES"]), int(env["IPURUN_NUM_REPLICAS"])
    per_host, gcds = int(env["IPURUN_INSTANCES_PER_HOST"]), int(env.get("IPURUN_NUM_GCDS", "1"))
    rpi = replicas // n
    out = {
        "POPDIST_NUM_TOTAL_REPLICAS": str(replicas),
        "POPDIST_NUM_IPUS_PER_REPLICA": env["IPURUN_IPUS_PER_REPLICA"],
        "POPDIST_NUM_LOCAL_REPLICAS": str(rpi),
        "POPDIST_REPLICA_INDEX_OFFSET": str(k * rpi),
        "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": "1",
        "POPDIST_LOCAL_INSTANCE_INDEX": str(local),
        "POPDIST_NUM_LOCAL_INSTANCES": str(per_host),
        "POPDIST_INSTANCE_INDEX": str(k),
        "POPDIST_NUM_INSTANCES": str(n),
        # PopDist derives instance index and count from the MPI environment: give it one.
        "OMPI_COMM_WORLD_RANK": str(k), "OMPI_COMM_WORLD_SIZE": str(n),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local), "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_host),
        "IPUOF_VIPU_API_GCD_ID": gcd_of(env, k, n, gcds),
        "IPUOF_VIPU_API_TIMEOUT": env.get("IPURUN_VIPU_TIMEOUT", "120"),
    }
    for key in ("HOST", "PORT", "PARTITION_ID"):
        if env.get(f"IPURUN_VIPU_{key}"):
            out[f"IPUOF_VIPU_API_{key}"] = env[f"IPURUN_VIPU_{key}"]
    if env.get("IPURUN_AUTOREPORT_DIR"):
        out["POPDIST_AUTOREPORT_DIRECTORY"] = env["IPURUN_AUTOREPORT_DIR"]  # PopDist adds one sub-directory each
    own = env.get(f"IPURUN_INSTANCE_ENV_{k}")
    if own:  # -x VAR=value given for this instance alone (--instance-mpi-local-args 'K:-x ...')
        out.update(entry.split("=", 1) for entry in own.split("\x1f") if "=" in entry[1:])
    cache = env.get("IPURUN_CACHE_DIR")
    if not cache and env.get("IPURUN_OWN_CACHE") == "1":
        cache = os.path.join(JOB_CACHE_ROOT, env.get("SLURM_JOB_ID", "<jobid>"))
    if cache:
        out["POPDIST_EXECUTABLE_CACHE_PATH"] = cache
    return out


def main(argv: list[str]) -> None:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        fail("task wrapper started without a command")
    env = dict(os.environ)
    try:
        k, local = int(env["SLURM_PROCID"]), int(env.get("SLURM_LOCALID", "0"))
        extra = instance_env(env, k, local)
    except (KeyError, ValueError) as exc:
        fail(f"task wrapper: missing or bad {exc} in the environment (run it through ipurun)")
    env.pop("IPUOF_CONFIG_PATH", None)  # as PopRun: instances find IPUs through V-IPU, never a stale file
    if env.get("IPURUN_OFFLINE") == "1":
        for key in ("HOST", "PORT", "PARTITION_ID", "GCD_ID"):
            extra.pop(f"IPUOF_VIPU_API_{key}", None)
            env.pop(f"IPUOF_VIPU_API_{key}", None)
    env.update(extra)
    if extra.get("POPDIST_EXECUTABLE_CACHE_PATH"):
        open_cache(extra["POPDIST_EXECUTABLE_CACHE_PATH"], env.get("IPURUN_OWN_CACHE") == "1", k,
                   given=bool(env.get("IPURUN_CACHE_DIR")))
    strategy = env.get("IPURUN_PLACEMENT", "spreadnuma")
    try:
        cpus = numa.read_topology("/")
        b = numa.bind(cpus, local, int(env["IPURUN_INSTANCES_PER_HOST"]), strategy)
    except numa.PlacementError as exc:
        fail(f"instance {k} on {env.get('SLURMD_NODENAME', '?')}: {exc}")
    if b.cpus:
        os.sched_setaffinity(0, b.cpus)
    # Binding memory to the host's only NUMA node would change nothing: skip the syscall.
    multi = len({c.numa for c in cpus}) > 1
    bound_mem = membind(b.numa) if b.membind and multi else False
    if env.get("IPURUN_REPORT_BINDINGS") == "1":
        print(f"ipurun: instance {k} host {env.get('SLURMD_NODENAME', os.uname().nodename)} local {local} "
              f"numa {numa.format_cpulist(b.numa) or '-'} cpus {numa.format_cpulist(b.cpus) or 'unbound'}"
              f"{' membind' if bound_mem else ''}", file=sys.stderr, flush=True)
    only = env.get("IPURUN_ONLY_OUTPUT_FROM")
    if only not in (None, "") and int(only) != k:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        fail(f"instance {k}: cannot run {argv[0]!r}: {exc.strerror}", 127)


if __name__ == "__main__":
    main(sys.argv[1:])
