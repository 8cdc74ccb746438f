"""PopRun's --mpi-global-args, --mpi-local-args and --instance-mpi-local-args on srun.

PopRun hands these to mpirun; ipurun has no mpirun, so each mpirun option they carry gets the
meaning it has on srun, or is accepted as transport-only (it only tunes Open MPI's own
transport, which srun does not use), or is refused. One table, checked before anything starts.

| mpirun option               | on srun                                                        |
|-----------------------------|----------------------------------------------------------------|
| --tag-output                | ipurun's --tag-output ([1,<instance>]<stdout>: prefixes)        |
| -x VAR=value                | VAR=value in every instance (or in instance K, 'K:-x VAR=v')   |
| -x VAR                      | nothing to do: srun passes the whole environment               |
| --bind-to none/core/hwthread/socket/numa | --cpu-bind=none/cores/threads/sockets/ldoms (1)    |
| --map-by slot/core/hwthread/socket/numa/node | block order; node: --distribution=cyclic (1)      |
| --output-filename DIR       | --output/--error DIR/rank.<instance>.stdout/.stderr            |
| --mca K V, --gmca K V, --allow-run-as-root, --oversubscribe | accepted, no effect (-v says so)    |
(1) only with --process-placement=disabled, as PopRun respects them only then.
"""

from __future__ import annotations

import shlex

from ..errors import ConfigError

BIND_TO = {"none": "none", "core": "cores", "hwthread": "threads", "socket": "sockets", "numa": "ldoms"}
MAP_BY = {"slot": "block", "core": "block", "hwthread": "block", "socket": "block", "numa": "block",
          "node": "cyclic"}
TRANSPORT_FLAGS = ("--allow-run-as-root", "--oversubscribe")
TRANSPORT_PAIRS = ("--mca", "--gmca")  # each takes two words: a parameter and its value


class MpiArgs:
    """What the MPI options ask of the launch."""

    def __init__(self):
        self.tag_output = False
        self.env: dict[str, str] = {}                  # every instance
        self.instance_env: dict[int, dict[str, str]] = {}
        self.srun: list[str] = []
        self.distribution = "block"
        self.notes: list[str] = []                     # what -v reports as having no effect on srun


def _long(word: str) -> str:
    """mpirun takes single-dash long options too (-mca, -bind-to)."""
    return "-" + word if word.startswith("-") and not word.startswith("--") and len(word) > 2 else word


def _words(option: str, text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{option} {text!r}: {exc}; quote it as one shell word") from None


def _take(option: str, words: list[str], i: int, name: str) -> str:
    if i + 1 >= len(words):
        raise ConfigError(f"{option}: {name} needs a value")
    return words[i + 1]


def _export(option: str, spec: str, into: dict[str, str], out: MpiArgs) -> None:
    var, eq, value = spec.partition("=")
    if not var.isidentifier():
        raise ConfigError(f"{option}: -x {spec!r} is not VAR or VAR=value")
    if eq:
        into[var] = value
    else:
        out.notes.append(f"{option}: -x {var} has no effect: srun passes the whole environment")


def _placement(option: str, name: str, value: str, placement: str, out: MpiArgs) -> None:
    table = BIND_TO if name == "--bind-to" else MAP_BY
    if placement != "disabled":
        raise ConfigError(f"{option}: {name} {value} needs --process-placement=disabled (ipurun places instances "
                          "itself otherwise, as PopRun does)")
    key = value.split(":")[0]
    if key not in table:
        raise ConfigError(f"{option}: {name} {value}: use one of {', '.join(table)}")
    if name == "--bind-to":
        out.srun.append(f"--cpu-bind={table[key]}")
    else:
        out.distribution = table[key]


def parse_one(option: str, text: str, out: MpiArgs, placement: str, instance: int | None = None) -> None:
    words, i = _words(option, text), 0
    env = out.env if instance is None else out.instance_env.setdefault(instance, {})
    while i < len(words):
        word = _long(words[i])
        name, eq, inline = word.partition("=")
        if word == "-x":
            _export(option, _take(option, words, i, "-x"), env, out)
            i += 1
        elif name in ("--bind-to", "--map-by", "--output-filename") and option == "--mpi-global-args":
            value = inline if eq else _take(option, words, i, name)
            i += 0 if eq else 1
            if name == "--output-filename":
                out.srun += [f"--output={value}/rank.%t.stdout", f"--error={value}/rank.%t.stderr"]
            else:
                _placement(option, name, value, placement, out)
        elif word == "--tag-output" and option == "--mpi-global-args":
            out.tag_output = True
        elif word in TRANSPORT_FLAGS:
            out.notes.append(f"{option}: {word} has no effect on srun")
        elif name in TRANSPORT_PAIRS:
            if i + 2 >= len(words):
                raise ConfigError(f"{option}: {name} needs a parameter and a value")
            out.notes.append(f"{option}: {name} {words[i + 1]} {words[i + 2]} has no effect on srun (Open MPI "
                             "transport setting)")
            i += 2
        else:
            where = "" if option == "--mpi-global-args" else "; --bind-to, --map-by, --tag-output and " \
                    "--output-filename belong in --mpi-global-args"
            raise ConfigError(f"{option}: mpirun option {words[i]!r} has no meaning on srun; supported: -x, "
                              f"--tag-output, --bind-to, --map-by, --output-filename, --mca{where}")
        i += 1


def parse(opts, num_instances: int) -> MpiArgs:
    out = MpiArgs()
    placement = opts.process_placement
    if opts.mpi_global_args:
        parse_one("--mpi-global-args", opts.mpi_global_args, out, placement)
    if opts.mpi_local_args:
        parse_one("--mpi-local-args", opts.mpi_local_args, out, placement)
    for item in opts.instance_mpi_local_args or ():
        k, sep, text = item.partition(":")
        if not sep or not k.isdigit() or int(k) >= num_instances:
            raise ConfigError(f"--instance-mpi-local-args {item!r}: write 'K:ARGS' with K an instance from 0 to "
                              f"{num_instances - 1}")
        parse_one(f"--instance-mpi-local-args {k}:", text, out, placement, instance=int(k))
    return out


def engine_options_with_directory(args: MpiArgs) -> bool:
    """True if any -x POPLAR_ENGINE_OPTIONS sets autoReport.directory. Textual on purpose: the
    guide's own quoting strips the JSON's double quotes before ipurun sees the value."""
    envs = [args.env, *args.instance_env.values()]
    return any("autoReport.directory" in e.get("POPLAR_ENGINE_OPTIONS", "") for e in envs)
