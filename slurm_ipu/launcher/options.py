"""ipurun's options: one table, PopRun's forms, and a parser small enough to start fast.

ipurun owns the options in OPTIONS; any other `--name=value` before the command must be one of
srun's (srunopts.py) and goes to srun, as does each `--srun-arg=ARG`. Values: `--opt=value` or
`--opt value`. A boolean alone means yes; followed by yes/no/1/0/on/off/true/false and then
more words, it takes that word (PopRun's `--opt value` form); the last word is always the
command (`ipurun --report-bindings true` runs `true`). Write `--` before a command named like
an option value to be sure.
The parser is hand-written over the table, not argparse: ipurun's start-up is part of every
launch, and argparse alone costs more than the rest of the launcher's imports.
"""

from __future__ import annotations

import sys

from ..boolean import FALSE, TRUE, parse_bool
from ..errors import ConfigError
from .numa import STRATEGIES


def boolean(text) -> bool:
    value = parse_bool(text)
    if value is None:
        raise ValueError(f"{text!r} is not a boolean; use yes/no, 1/0, on/off")
    return value


def flag(_text) -> bool:
    return True  # marker kind: present means yes, takes no value


def count(_text) -> int:
    return 1  # marker kind: each time given adds one, takes no value (PopRun's -v, -vv, -vvv)


# flag, kind, default, exported to --export-config, help
OPTIONS: tuple[tuple[str, object, object, bool, str], ...] = (
    ("--num-instances", int, 1, True, "instances (processes); replicas are divided evenly among them"),
    ("--num-replicas", int, 1, True, "replicas in total"),
    ("--ipus-per-replica", int, 1, True, "IPUs per replica"),
    ("--num-ilds", int, None, True, "IPU-Link domains, at least one instance each (default: the partition's)"),
    ("--process-placement", str, "spreadnuma", True, f"one of {', '.join(STRATEGIES)}"),
    ("--print-topology", boolean, False, True, "print the hosts/ILDs/instances/replicas table"),
    ("--report-bindings", boolean, False, True, "each instance reports its host, NUMA nodes and CPUs"),
    ("--only-output-from-instance", int, None, True, "show only this instance's output (may hide errors)"),
    ("--tag-output", boolean, False, True, "prefix every line with [1,<instance>]<stdout>: as mpirun does"),
    ("--executable-cache-path", str, None, True,
     "executable cache; unset: one directory per host for this run, removed after; '' disables"),
    ("--autoreport-dir", str, None, True, "PopVision reports, one sub-directory per instance"),
    ("--offline-mode", boolean, False, True, "run without attaching IPUs"),
    ("--offline-target", str, None, True, "with --offline-mode: POPLAR_TARGET_OPTIONS for this system, e.g. pod16"),
    ("--mpi-global-args", str, None, True, "mpirun options for every instance, given their srun meaning "
     "(--tag-output, -x VAR=value, --bind-to, --map-by, --output-filename)"),
    ("--mpi-local-args", str, None, True, "mpirun options for each instance (-x VAR=value)"),
    ("--instance-mpi-local-args", list, None, True, "'K:ARGS': mpirun options for instance K only (repeatable)"),
    ("--vipu-partition", str, None, True, "partition to use (default: the job's, IPUOF_VIPU_API_PARTITION_ID)"),
    ("--vipu-allocation", str, None, True, "V-IPU allocation for a partition ipurun creates"),
    ("--vipu-server-host", str, None, True, "V-IPU host (default: the job's IPUOF_VIPU_API_HOST)"),
    ("--vipu-server-port", int, None, True, "V-IPU port (default: the job's IPUOF_VIPU_API_PORT)"),
    ("--vipu-server-timeout", int, 120, True, "IPUOF_VIPU_API_TIMEOUT for the instances, seconds"),
    ("--update-partition", boolean, False, True,
     "recreate the partition, same name, if its GCDs/ILDs do not fit; create it if it does not exist"),
    ("--remove-partition", boolean, True, True, "remove, when the run ends, a partition this run created"),
    ("--reset-partition", boolean, None, True,
     "reset the partition first; unset: reset a non-reconfigurable one between runs of a job"),
    ("--host", str, None, True, "hosts, PopRun syntax: host0,host1 or host[0-2,4]"),
    ("--hostfile", str, None, True, "a file of hosts, one per line (# comments; a line's first word), instead "
     "of --host"),
    ("--import-config", str, None, False, "read options from this JSON file; the command line wins"),
    ("--export-config", str, None, False, "write the effective options to this JSON file"),
    ("--overwrite-config", boolean, False, False,
     "let --export-config replace an existing file (otherwise a time stamp is appended to the name)"),
    ("--srun-arg", list, None, False, "pass ARG to srun untouched (repeatable): for options ipurun does not know"),
    ("--dry-run", flag, False, False, "print the plan, the srun line and each instance's binding; launch nothing"),
    ("--verbose", count, 0, False, "print the plan, the partition action and the srun line (stderr); -vv also "
     "each instance's environment, -vvv also srun's own messages (PopRun's counted -v)"),
    ("--debug", flag, False, False, "show tracebacks"),
)
ALIASES = {"-H": "--host", "-v": "--verbose"}
BY_FLAG = {row[0]: row for row in OPTIONS}

# Spellings of PopRun options that Graphcore's own scripts pass (docs/ipurun.md): older names, taken
# as the option that replaced them...
RENAMED = {"--vipu-cluster": "--vipu-allocation"}  # PopRun: deprecated, use --vipu-allocation
# ...and options with nothing to tune on Slurm, taken with a one-line note: (kind, why).
NOTHING_TO_DO = {
    "--vipu-partition-attempts": (int, "ipurun waits for the partition to be ACTIVE until --vipu-server-timeout"),
    "--host-subnet": (str, "srun starts the instances over Slurm's own connections, not SSH"),
    "--distribute-ssh-key": (boolean, "srun starts the instances; no SSH key is needed"),
    "--synchronise-python-venv": (boolean, "every node runs the job's own environment (shared filesystem)"),
    "--synchronise-poplar-sdk": (boolean, "every node runs the job's own environment (shared filesystem)"),
    "--allow-run-as-root": (boolean, "srun starts the instances; no mpirun refuses root"),
    "--version-format": (str, "ipurun's --version prints one line"),
}


def version_line() -> str:
    from .. import __version__

    return f"ipurun (slurm-ipu {__version__}): PopRun's options on Slurm's srun"


def dest(name: str) -> str:
    return name.lstrip("-").replace("-", "_")


class Options:
    """The effective options, as attributes (num_instances, offline_mode, ...)."""

    def __init__(self, values: dict):
        self.__dict__.update(values)

    def exported(self) -> dict:
        return {row[0][2:]: getattr(self, dest(row[0])) for row in OPTIONS if row[3]}


def usage() -> str:
    lines = ["usage: ipurun [OPTIONS] [--] COMMAND [ARGS...]", "",
             "PopRun's options on Slurm's srun; any other --name=value goes to srun.", ""]
    short = {v: k for k, v in ALIASES.items()}
    for name, kind, default, _, text in OPTIONS:
        form = f"{short[name]}, {name}" if name in short else name
        if kind is boolean:
            form += " [yes|no]"  # alone: yes
        elif kind not in (flag, count):
            form += " VALUE"
        shown = "" if default in (None, False) else " (default yes)" if default is True else f" (default {default})"
        lines.append(f"  {form:<34} {text}{shown}")
    return "\n".join(lines)


def _convert(name: str, kind, value: str):
    try:
        return kind(value)
    except ValueError as exc:
        what = "an integer" if kind is int else str(exc)
        raise ConfigError(f"{name} {value!r}: not {what}" if kind is int else f"{name}: {what}") from None


def parse(argv: list[str]) -> tuple[Options, list[str], list[str]]:
    """(options, srun pass-through, command). The command starts at `--` or the first word
    that is neither an option nor an option's value."""
    given: dict = {}
    srun_extra: list[str] = []
    notes: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg in ("-h", "--help"):
            print(usage())
            sys.exit(0)
        if len(arg) > 2 and arg.startswith("-v") and set(arg[1:]) == {"v"}:  # -vv, -vvv: PopRun counts its -v
            given["verbose"] = given.get("verbose", 0) + len(arg) - 1
            i += 1
            continue
        if arg == "--version":
            print(version_line())
            sys.exit(0)
        name, eq, value = arg.partition("=")
        name = ALIASES.get(name, name)
        if name == "--numa-aware":  # PopRun before --process-placement: yes is its default, no is disabled
            i, value = _value_of(argv, i, name, eq, value, boolean)
            if not _convert(name, boolean, value):
                given.setdefault("process_placement", "disabled")
            continue
        if name in NOTHING_TO_DO:
            kind, why = NOTHING_TO_DO[name]
            i, value = _value_of(argv, i, name, eq, value, kind)
            _convert(name, kind, value)
            notes.append(f"{name}: accepted, nothing to do on Slurm: {why}")
            continue
        if name in RENAMED:
            notes.append(f"{name}: PopRun's older name for {RENAMED[name]}; taken as that")
            name = RENAMED[name]
        row = BY_FLAG.get(name)
        if row is None:
            srun_extra.append(srun_option(arg, name, bool(eq)))
            i += 1
            continue
        kind = row[1]
        if kind is flag or kind is count:
            if eq:
                raise ConfigError(f"{name} takes no value")
            given[dest(name)] = given.get(dest(name), 0) + 1 if kind is count else True
        elif kind is boolean:
            # PopRun's `--opt yes` form, but only when a command still follows: in
            # `ipurun --report-bindings true`, `true` is the command.
            if not eq and i + 2 < len(argv) and argv[i + 1].lower() in TRUE + FALSE:
                i, value, eq = i + 1, argv[i + 1], "="
            given[dest(name)] = _convert(name, boolean, value) if eq else True
        else:
            if not eq:
                if i + 1 >= len(argv):
                    raise ConfigError(f"{name} needs a value")
                i, value = i + 1, argv[i + 1]
            if kind is list:
                given.setdefault(dest(name), []).append(value)
            else:
                given[dest(name)] = _convert(name, kind, value)
        i += 1
    command = argv[i:]
    srun_extra += given.pop("srun_arg", [])
    values = {dest(row[0]): row[2] for row in OPTIONS}
    if given.get("import_config"):
        if given.get("export_config"):
            raise ConfigError("--export-config and --import-config cannot be used together; export once, "
                              "then import")
        stored, stored_command = read_config(given["import_config"])
        values.update(stored)
        command = command or stored_command
    values.update(given)
    if not command:
        raise ConfigError("no command to run; usage: ipurun [OPTIONS] [--] COMMAND [ARGS...]")
    values["notes"] = notes
    return Options(values), srun_extra, command


def _value_of(argv: list[str], i: int, name: str, eq: str, value: str, kind) -> tuple[int, str]:
    """(index of the next word, the option's value): `--opt=v`, `--opt v`, or a boolean alone
    (yes), as the table's own options take them."""
    if eq:
        return i + 1, value
    if kind is boolean:
        if i + 2 < len(argv) and argv[i + 1].lower() in TRUE + FALSE:
            return i + 2, argv[i + 1]
        return i + 1, "yes"
    if i + 1 >= len(argv):
        raise ConfigError(f"{name} needs a value")
    return i + 2, argv[i + 1]


def srun_option(arg: str, name: str, has_value: bool) -> str:
    """An option ipurun does not own goes to srun, if srun has it; else a did-you-mean."""
    from . import srunopts

    bare = name[2:] if name.startswith("--") else None
    if bare in srunopts.OWNED:
        raise ConfigError(f"{name} is set by ipurun ({srunopts.OWNED[bare]})")
    if bare in srunopts.VALUED and not has_value:
        raise ConfigError(f"srun option {name} needs its value as {name}=VALUE when passed through ipurun")
    if bare is not None and srunopts.known(bare):
        return arg
    if said := srunopts.short_form(name):
        raise ConfigError(said)
    import difflib

    names = [row[0] for row in OPTIONS] + [f"--{o}" for o in srunopts.FLAGS | srunopts.VALUED]
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    hint = f"did you mean {near[0]}? " if near else ""
    raise ConfigError(f"unknown option {name!r}: neither ipurun's nor srun's; {hint}"
                      "(an option of a site's SPANK plugin goes through --srun-arg=ARG)")


def read_config(path: str) -> tuple[dict, list[str]]:
    """(options, command) stored by --export-config."""
    import json

    try:
        with open(path) as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise ConfigError(f"--import-config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"--import-config {path} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"--import-config {path}: expected a JSON object of options")
    command = doc.pop("command", [])
    if not isinstance(command, list) or not all(isinstance(w, str) for w in command):
        raise ConfigError(f"--import-config {path}: 'command' must be a list of words")
    out = {}
    for key, value in doc.items():
        row = BY_FLAG.get("--" + key.lstrip("-"))
        if row is None or not row[3]:
            raise ConfigError(f"--import-config {path}: unknown option {key!r}")
        out[dest(row[0])] = value if value is None or row[1] in (str, list) else _convert(row[0], row[1], value)
    return out, command


def export_config(opts: Options, command: list[str]) -> str:
    """Store the effective options and the command; an existing file is kept and the new one
    gets a time stamp in its name, unless --overwrite-config=yes. Returns the path written."""
    import json
    import os
    import time

    from ..fsutil import atomic_write

    path = opts.export_config
    if os.path.exists(path) and not opts.overwrite_config:
        path = f"{path}.{time.strftime('%Y%m%d-%H%M%S')}"
    doc = dict(opts.exported(), command=list(command))
    try:
        atomic_write(path, json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise ConfigError(f"--export-config {opts.export_config}: {exc.strerror}") from None
    return path
