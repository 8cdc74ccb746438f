"""`ipurun [OPTIONS] [--] COMMAND [ARGS...]`: PopRun's options on Slurm's srun.

ipurun owns the options in OPTIONS below; any other `--name=value` before the command, and each
`--srun-arg=ARG`, goes to srun untouched. A boolean option followed by yes/no/1/0/on/off/true/false
takes that word as its value (PopRun's `--opt value` form): write `--opt=value`, or `--` before a
command with such a name. Inside an allocation it runs one step of it (with
--overlap when already inside a step); outside one, srun asks for an allocation with the right
--gres=ipu:N so the prolog creates the partition. With --offline-mode and no allocation and no
--host, instances run on this machine without Slurm (PopRun's installation check).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..cli_common import run_main
from ..errors import ConfigError
from . import numa
from .plan import Plan, make_plan

TASK = str(Path(__file__).with_name("task.py"))
TRUE, FALSE = ("1", "yes", "on", "true"), ("0", "no", "off", "false")


def boolean(text: str) -> bool:
    low = str(text).strip().lower()
    if low in TRUE:
        return True
    if low in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; use yes/no, 1/0, on/off")


# flag, type, default, help. Booleans accept `--opt`, `--opt=yes`, `--opt no`, as PopRun does.
OPTIONS: tuple[tuple[str, object, object, str], ...] = (
    ("--num-instances", int, 1, "instances (processes); replicas are divided evenly among them"),
    ("--num-replicas", int, 1, "replicas in total"),
    ("--ipus-per-replica", int, 1, "IPUs per replica"),
    ("--num-ilds", int, 1, "IPU-Link domains; at least one instance per ILD"),
    ("--process-placement", str, "spreadnuma", f"one of {', '.join(numa.STRATEGIES)}"),
    ("--print-topology", boolean, False, "print the hosts/ILDs/instances/replicas table"),
    ("--report-bindings", boolean, False, "each instance reports its host, NUMA nodes and CPUs"),
    ("--only-output-from-instance", int, None, "show only this instance's output (may hide errors)"),
    ("--tag-output", boolean, False, "prefix every line with [1,<instance>]<stdout>: as mpirun does"),
    ("--executable-cache-path", str, None, "executable cache; unset: a per-run directory, removed after; '' disables"),
    ("--autoreport-dir", str, None, "PopVision reports, one sub-directory per instance"),
    ("--offline-mode", boolean, False, "run without attaching IPUs"),
    ("--vipu-partition", str, None, "partition to use (default: the job's, from IPUOF_VIPU_API_PARTITION_ID)"),
    ("--vipu-server-host", str, None, "V-IPU host (default: the job's IPUOF_VIPU_API_HOST)"),
    ("--vipu-server-port", int, None, "V-IPU port (default: the job's IPUOF_VIPU_API_PORT)"),
    ("--vipu-server-timeout", int, 120, "IPUOF_VIPU_API_TIMEOUT for the instances, seconds"),
    ("--update-partition", boolean, False, "recreate the job's partition when its GCDs do not match"),
    ("--reset-partition", boolean, None, "reset the partition before running"),
    ("--host", str, None, "hosts, PopRun syntax: host0,host1 or host[0-2,4]"),
)
NOT_EXPORTED = {"export_config", "import_config", "overwrite_config", "dry_run", "srun_arg", "verbose", "debug"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ipurun", description="PopRun's options on Slurm's srun",
                                allow_abbrev=False)
    for flag, kind, default, text in OPTIONS:
        names = ["-H", flag] if flag == "--host" else [flag]
        if kind is boolean:
            p.add_argument(*names, type=boolean, nargs="?", const=True, default=default, help=text)
        else:
            p.add_argument(*names, type=kind, default=default, help=text)
    p.add_argument("--import-config", help="read options from this JSON file; the command line wins")
    p.add_argument("--export-config", help="write the effective options to this JSON file")
    p.add_argument("--overwrite-config", type=boolean, nargs="?", const=True, default=False)
    p.add_argument("--srun-arg", action="append", default=[], help="pass ARG to srun (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the srun line; launch nothing")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str], list[str]]:
    """(options, srun pass-through, command). The command starts at `--` or the first word."""
    if "--" in argv:
        cut = argv.index("--")
        head, command = argv[:cut], argv[cut + 1:]
    else:
        cut = next((i for i, a in enumerate(argv) if not a.startswith("-") and not _is_value(argv, i)), len(argv))
        head, command = argv[:cut], argv[cut:]
    parser = build_parser()
    ns, extra = parser.parse_known_args(head)
    if ns.import_config:
        parser.set_defaults(**_read_config(ns.import_config))
        ns, extra = parser.parse_known_args(head)
    bad = [e for e in extra if not e.startswith("--") or "=" not in e]
    if bad:
        raise ConfigError(f"unknown option {bad[0]!r}; srun options pass through as --name=value or --srun-arg")
    if not command:
        raise ConfigError("no command to run; usage: ipurun [OPTIONS] [--] COMMAND [ARGS...]")
    return ns, extra + ns.srun_arg, command


_VALUED = {f for f, kind, _, _ in OPTIONS if kind is not boolean} | {"-H", "--import-config", "--export-config",
                                                                    "--srun-arg"}


def _is_value(argv: list[str], i: int) -> bool:
    """argv[i] is the value of the option before it (`--num-instances 2`, `--offline-mode no`)."""
    prev = argv[i - 1] if i else ""
    if prev in _VALUED:
        return True
    is_bool = any(prev == f for f, kind, _, _ in OPTIONS if kind is boolean) or prev == "--overwrite-config"
    return is_bool and argv[i].lower() in TRUE + FALSE


def _read_config(path: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"--import-config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"--import-config {path} is not JSON: {exc}") from None
    known = {f.lstrip("-").replace("-", "_") for f, *_ in OPTIONS}
    out = {}
    for key, value in doc.items():
        dest = key.lstrip("-").replace("-", "_")
        if dest not in known:
            raise ConfigError(f"--import-config {path}: unknown option {key!r}")
        out[dest] = value
    return out


def export_config(ns: argparse.Namespace) -> None:
    path = Path(ns.export_config)
    if path.exists() and not ns.overwrite_config:
        raise ConfigError(f"--export-config {path} exists; add --overwrite-config=yes to replace it")
    doc = {k.replace("_", "-"): v for k, v in vars(ns).items() if k not in NOT_EXPORTED}
    path.write_text(json.dumps(doc, indent=2) + "\n")


@dataclass
class Launch:
    ns: argparse.Namespace
    plan: Plan
    env: dict
    srun: list[str] | None     # None: the local (offline, no Slurm) backend
    command: list[str]
    cache_dir: str | None      # a per-run directory ipurun must remove afterwards


def check_autoreport(ns: argparse.Namespace, env: dict) -> None:
    if not ns.autoreport_dir:
        return
    try:
        opts = json.loads(env.get("POPLAR_ENGINE_OPTIONS") or "{}")
    except ValueError:
        raise ConfigError("POPLAR_ENGINE_OPTIONS is not JSON; fix it or unset it") from None
    if isinstance(opts, dict) and "autoReport.directory" in opts:
        raise ConfigError("--autoreport-dir conflicts with autoReport.directory in POPLAR_ENGINE_OPTIONS; keep one")


def hosts_for(ns: argparse.Namespace, env: dict) -> tuple[list[str], bool, bool]:
    """(hosts, inside an allocation, hosts are only part of the allocation)."""
    from ..slurm.hostlist import expand

    inside = bool(env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST"))
    wanted = expand(ns.host) if ns.host else []
    if inside:
        alloc = expand(env["SLURM_JOB_NODELIST"])
        outside = [h for h in wanted if h not in alloc]
        if outside:
            raise ConfigError(f"--host {outside[0]} is not in this job's nodes ({env['SLURM_JOB_NODELIST']})")
        hosts = wanted or alloc
        if not wanted and ns.num_instances < len(hosts):
            hosts = hosts[:ns.num_instances]
        return hosts, True, len(hosts) < len(alloc)
    if wanted:
        return wanted, False, False
    return [socket.gethostname() if ns.offline_mode else "[0]"], False, False


def build(ns: argparse.Namespace, srun_extra: list[str], command: list[str], env: dict) -> Launch:
    if ns.process_placement not in numa.STRATEGIES:
        raise ConfigError(f"--process-placement {ns.process_placement!r}; use one of {', '.join(numa.STRATEGIES)}")
    check_autoreport(ns, env)
    for flag, value in (("--update-partition", ns.update_partition), ("--reset-partition", ns.reset_partition)):
        if value:  # refused rather than silently ignored until ipurun talks to V-IPU itself
            raise ConfigError(f"{flag}=yes is not supported yet; recreate or reset with `vipu` before ipurun")
    hosts, inside, subset = hosts_for(ns, env)
    cpus = int(env["SLURM_CPUS_ON_NODE"]) if inside and env.get("SLURM_CPUS_ON_NODE", "").isdigit() else len(
        os.sched_getaffinity(0))
    plan = make_plan(ns.num_instances, ns.num_replicas, ns.ipus_per_replica, hosts, ns.num_ilds,
                     cpus_per_host=cpus if ns.process_placement != "disabled" else None)
    local = not inside and not ns.host and ns.offline_mode
    cache = ns.executable_cache_path
    own_cache = None
    if cache is None and (inside or local):
        cache = own_cache = f"/tmp/ipurun-cache-{env.get('SLURM_JOB_ID', 'local')}-{os.getpid()}"
    task_env = {
        "IPURUN_NUM_INSTANCES": str(plan.num_instances), "IPURUN_NUM_REPLICAS": str(plan.num_replicas),
        "IPURUN_IPUS_PER_REPLICA": str(plan.ipus_per_replica), "IPURUN_INSTANCES_PER_HOST": str(plan.instances_per_host),
        "IPURUN_NUM_GCDS": str(plan.num_gcds), "IPURUN_PLACEMENT": ns.process_placement,
        "IPURUN_VIPU_TIMEOUT": str(ns.vipu_server_timeout), "IPURUN_OFFLINE": "1" if ns.offline_mode else "0",
        "IPURUN_REPORT_BINDINGS": "1" if ns.report_bindings or ns.print_topology else "0",
        "IPURUN_ONLY_OUTPUT_FROM": "" if ns.only_output_from_instance is None else str(ns.only_output_from_instance),
        "IPURUN_CACHE_DIR": cache or "", "IPURUN_AUTOREPORT_DIR": ns.autoreport_dir or "",
        "IPURUN_VIPU_HOST": ns.vipu_server_host or "", "IPURUN_VIPU_PORT": str(ns.vipu_server_port or ""),
        "IPURUN_VIPU_PARTITION_ID": ns.vipu_partition or "",
    }
    srun = None if local else srun_line(ns, plan, inside, subset, env, srun_extra)
    return Launch(ns, plan, task_env, srun, command, own_cache)


def srun_line(ns, plan: Plan, inside: bool, subset: bool, env: dict, extra: list[str]) -> list[str]:
    argv = ["srun", f"--nodes={len(plan.hosts)}", f"--ntasks={plan.num_instances}",
            f"--ntasks-per-node={plan.instances_per_host}", "--distribution=block", "--kill-on-bad-exit=1", "--label"]
    if ns.process_placement != "disabled":
        argv.append("--cpu-bind=none")  # ipurun binds each instance itself, inside the step's CPUs
    if ns.host or subset:
        argv.append(f"--nodelist={','.join(plan.hosts)}")
    if inside and env.get("SLURM_STEP_ID") is not None:
        argv.append("--overlap")  # already inside a step: share its resources instead of waiting for them
    if not inside and not ns.offline_mode:
        per_node = plan.total_ipus // len(plan.hosts)
        argv.append(f"--gres=ipu:{per_node}")
    return argv + extra + [sys.executable, "-S", "-I", TASK, "--"]


def topology_table(plan: Plan) -> str:
    """PopRun's --print-topology table: each level's cells centred over its replicas."""
    reps = plan.num_replicas
    width = max(3, len(str(reps - 1)) + 2)
    per_inst = plan.replicas_per_instance

    def row(label: str, cells: list[tuple[str, int]]) -> str:
        parts = [f"{text:^{span * (width + 1) - 1}}" for text, span in cells]
        return f"| {label:<9} |" + "|".join(parts) + "|"

    insts = plan.instances()
    host_cells = [(plan.hosts[h], plan.instances_per_host * per_inst) for h in range(len(plan.hosts))]
    ild_cells = [(str(i), reps // plan.num_ilds) for i in range(plan.num_ilds)]
    rows = [row("hosts", host_cells), row("ILDs", ild_cells),
            row("instances", [(str(i.index), per_inst) for i in insts]),
            row("replicas", [(str(r), 1) for r in range(reps)])]
    inner = len(rows[0]) - 2
    sep = "|" + "-" * 11 + "|" + "-" * (inner - 12) + "|"
    title = f"|{'ipurun topology':^{inner}}|"
    return "\n".join([" " + "=" * inner, title, "|" + "=" * inner + "|", rows[0], sep, rows[1], sep, rows[2], sep,
                      rows[3], " " + "-" * inner])


def dry_run(launch: Launch) -> None:
    plan, ns = launch.plan, launch.ns
    print(f"ipurun plan: {plan.num_instances} instance(s) x {plan.replicas_per_instance} replica(s) x "
          f"{plan.ipus_per_replica} IPU(s) = {plan.total_ipus} IPUs on {len(plan.hosts)} host(s), "
          f"placement {ns.process_placement}")
    if launch.srun:
        print("srun command: " + " ".join(launch.srun + launch.command))
    else:
        print("local launch (offline, no Slurm): " + " ".join(launch.command))
    try:
        cpus = numa.read_topology("/")
    except numa.PlacementError:
        cpus = []
    print("per instance (CPU lists from this host's topology; each node binds from its own):")
    instance_env = wrapper_env_function()
    base = dict(os.environ, **launch.env)
    for inst in plan.instances():
        b = numa.bind(cpus, inst.local_index, plan.instances_per_host, ns.process_placement) if cpus else None
        env = instance_env(base, inst.index, inst.local_index)
        print(f"  instance {inst.index}: host {inst.host} numa {numa.format_cpulist(b.numa) if b else '?'} "
              f"cpus {numa.format_cpulist(b.cpus) if b and b.cpus else 'unbound'}")
        print("    " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))


def wrapper_env_function():
    """The wrapper's own instance_env, so the dry run shows exactly what each task will set."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ipurun_task", TASK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.instance_env


class Output:
    """Demultiplexes `--label`led output: forwards it (tagged or not) and keeps each
    instance's last lines for the root-cause report."""

    def __init__(self, tag: bool, keep: int = 10):
        self.tag, self.tails = tag, collections.defaultdict(lambda: collections.deque(maxlen=keep))
        self.first_failure: tuple[int, str] | None = None

    def line(self, text: str, stream) -> None:
        label, sep, rest = text.partition(": ")
        if sep and label.strip().isdigit():
            k = int(label)
            self.tails[k].append(rest)
            kind = "stdout" if stream is sys.stdout else "stderr"
            stream.write(f"[1,{k}]<{kind}>:{rest}\n" if self.tag else rest + "\n")
        else:
            self._srun_message(text)
            stream.write(text + "\n")
        stream.flush()

    def _srun_message(self, text: str) -> None:
        # srun: error: node2: task 3: Exited with exit code 1  /  task 3: Killed
        if self.first_failure is None and ": task " in text:
            words = text.split(": task ", 1)[1]
            num, _, what = words.partition(": ")
            if num.isdigit() and ("Exited" in what or "Killed" in what or "Terminated" in what or "signal" in what):
                self.first_failure = (int(num), text.split("error: ", 1)[-1])


def run_srun(launch: Launch) -> int:
    env = dict(os.environ, **launch.env)
    out = Output(launch.ns.tag_output)
    if launch.srun is None:
        return run_local(launch, env, out)
    proc = subprocess.Popen(launch.srun + launch.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    return _pump(proc, out, [proc])


def run_local(launch: Launch, env: dict, out: Output) -> int:
    procs = []
    for i in range(launch.plan.num_instances):
        e = dict(env, SLURM_PROCID=str(i), SLURM_LOCALID=str(i))
        procs.append(subprocess.Popen([sys.executable, "-S", "-I", TASK, "--", *launch.command], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL))
    return _pump_many(procs, out)


def _forward_signals(procs) -> None:
    def handler(sig, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def _pump(proc, out: Output, procs) -> int:
    _forward_signals(procs)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, sys.stdout)
    sel.register(proc.stderr, selectors.EVENT_READ, sys.stderr)
    _drain(sel, out, lambda stream, text: out.line(text, stream))
    rc = proc.wait()
    return report(out, rc)


def _pump_many(procs, out: Output) -> int:
    _forward_signals(procs)
    sel = selectors.DefaultSelector()
    for k, p in enumerate(procs):
        sel.register(p.stdout, selectors.EVENT_READ, (k, sys.stdout))
        sel.register(p.stderr, selectors.EVENT_READ, (k, sys.stderr))
    _drain(sel, out, lambda data, text: out.line(f"{data[0]}: {text}", data[1]))
    codes = [p.wait() for p in procs]
    failed = [(k, c) for k, c in enumerate(codes) if c != 0]
    if failed and out.first_failure is None:
        out.first_failure = (failed[0][0], f"exit code {failed[0][1]}")
    return report(out, failed[0][1] if failed else 0)


def _drain(sel, out: Output, emit) -> None:
    buffers: dict = {}
    while sel.get_map():
        for key, _ in sel.select():
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                rest = buffers.pop(key.fd, b"")
                if rest:
                    emit(key.data, rest.decode(errors="replace"))
                continue
            data = buffers.get(key.fd, b"") + chunk
            *lines, buffers[key.fd] = data.split(b"\n")
            for line in lines:
                emit(key.data, line.decode(errors="replace"))


def report(out: Output, rc: int) -> int:
    if rc == 0:
        return 0
    if out.first_failure is not None:
        k, what = out.first_failure
        print(f"ipurun: instance {k} failed first: {what}", file=sys.stderr)
        tail = list(out.tails.get(k, []))
        if tail:
            print(f"ipurun: last {len(tail)} line(s) of instance {k}:", file=sys.stderr)
            for line in tail:
                print(f"    {line}", file=sys.stderr)
        code = _code_of(what)
        return code if code is not None else rc
    return rc


def _code_of(what: str) -> int | None:
    if "exit code" in what:
        tail = what.rsplit("exit code", 1)[1].strip().split()[0]
        return int(tail) if tail.isdigit() else None
    for name in ("Killed", "Terminated"):
        if name in what:
            return 128 + (signal.SIGKILL if name == "Killed" else signal.SIGTERM)
    return None


def cleanup(launch: Launch) -> None:
    """Remove the per-run executable cache on every host, however the instances ended."""
    if not launch.cache_dir:
        return
    if launch.srun is None:
        import shutil

        shutil.rmtree(launch.cache_dir, ignore_errors=True)
        return
    subprocess.run(["srun", f"--nodes={len(launch.plan.hosts)}", f"--ntasks={len(launch.plan.hosts)}",
                    "--ntasks-per-node=1", "--overlap", f"--nodelist={','.join(launch.plan.hosts)}",
                    "rm", "-rf", "--", launch.cache_dir], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv

    def body() -> int:
        ns, extra, command = parse(argv)
        if ns.export_config:
            export_config(ns)
        launch = build(ns, extra, command, dict(os.environ))
        if ns.print_topology:
            print(topology_table(launch.plan))
        if ns.dry_run:
            dry_run(launch)
            return 0
        try:
            return run_srun(launch)
        finally:
            cleanup(launch)

    return run_main(body, debug=debug, program="ipurun")


if __name__ == "__main__":
    sys.exit(main())
