"""A `vipu`-compatible command line for the emulator (`vipu-emu cli ...`, and the lab's `vipu`).

Grammar: `vipu [globals] <verb> <noun> [name] [flags]`, globals also accepted after the noun.
Output follows the documented forms (docs/vipu.md):
- successes: `<verb> partition (<name>): success.`
- `list partitions`: the user table as PopRun's guide shows it (Cluster | Allocation |
  Partition | ILDs | GW Routing | ILD Routing | Size | GCDs | State). `--showjson` prints a JSON array of
  {"partition": {"id", "spec": {"ipus", "num_gcds", "num_replicas", ...}, "status": {"state"}}}.
- `get partition NAME --ipu-configs` (or `--ipuof-configs`): one header line, then the GCD's
  IPUoF configuration as Graphcore's readers take it: {"devices": [one per IPU], "attributes":
  {"GCD Id": "<n>", ...}} (popart counts `devices`; poptorch reads `attributes["GCD Id"]`).
- `--server-version`: line 2 is `host: <host>:<port>` (what Graphcore scripts cut out).
- no controller answering: `unable to connect to VIRM/V-IPU Controller at HOST:PORT: context
  deadline exceeded` (PopRun's troubleshooting guide), exit status 1.
- the forms Graphcore's own tools run (docs/vipu.md, "Forms Graphcore's tools run"): `-H`/`-P` for
  --api-host/--api-port; `remove partition NAME --force`; `list partitions --allocation A`, whose
  --showjson is V-IPU 1.18's `{"partitions": [{"id", "spec", ...}]}`; `get allocation NAME`, whose
  --showjson is `{"allocation": {"id", "spec": {"cluster_id", "agent_ids"}}}`; `create allocation
  NAME --size N` (the controller picks the IPU-Machines; none free: `no free allocation`); the
  command names vipu, vipu-admin and vipu-cli (any with a version suffix) behave alike.
Choices where the record is silent (UNCONFIRMED upstream): other errors are one line on stderr,
`error: <message> [<CODE>]`, exit status 1; usage errors exit 2. Emulator-only flags:
`--hosts` (hosts allowed to attach) and `--owner-uid` (owner, for a root caller acting for a job).

Server address: --api-host/--api-port, else VIPU_CLI_API_HOST/VIPU_CLI_API_PORT, else the
`api-host`/`api-port` lines of --config or /etc/vipu/vipu-cli.hcl, else localhost:8090. The
emulator's socket: STATE_DIR/api-PORT.sock when VIPU_EMU_SOCKET_DIR names its state directory (the
lab's commands), else the abstract one named for the port; either is believed only when the kernel
says its server runs as VIPU_EMU_OWNER (a uid), or by default as root or the caller (api.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from .. import __version__
from ..errors import SlurmIpuError, VipuUnavailable
from ..rules import VIPU_PORT
from .api import API_VERSION, SOCKET_DIR_ENV, Api, ApiError, ControllerUnreachable, owner_from_env

DEFAULT_HCL = "/etc/vipu/vipu-cli.hcl"


def _globals(parser: argparse.ArgumentParser, suppress: bool) -> None:
    d = argparse.SUPPRESS if suppress else None
    parser.add_argument("-H", "--api-host", default=d)
    parser.add_argument("-P", "--api-port", type=int, default=d)
    parser.add_argument("--api-timeout", type=float, default=argparse.SUPPRESS if suppress else 30.0)
    parser.add_argument("--config", default=d, help="CLI config file (HCL, api-host/api-port lines)")
    parser.add_argument("--showjson", action="store_true", default=argparse.SUPPRESS if suppress else False)
    parser.add_argument("-a", dest="all", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="accepted for compatibility; every partition is always shown")


def build_parser(prog: str) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=prog, description="V-IPU command line (slurm-ipu emulator)")
    _globals(top, suppress=False)
    top.add_argument("--version", action="store_true")
    top.add_argument("--server-version", action="store_true")
    verbs = top.add_subparsers(dest="verb")
    leaf = argparse.ArgumentParser(add_help=False)
    _globals(leaf, suppress=True)

    create = verbs.add_parser("create").add_subparsers(dest="noun", required=True)
    p = create.add_parser("partition", parents=[leaf])
    p.add_argument("name")
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--num-gcds", "--gcds", dest="num_gcds", type=int)
    p.add_argument("--num-ilds", type=int)
    p.add_argument("--allocation")
    p.add_argument("--cluster", help="older spelling of --allocation")
    p.add_argument("--reconfigurable", action="store_true")
    p.add_argument("--total-num-replicas", type=int)
    p.add_argument("--gcd-sync-replicas", type=int)
    p.add_argument("--sync-type")
    p.add_argument("--routing")
    p.add_argument("--index", type=int)
    p.add_argument("--hosts", help="emulator: comma-separated hosts allowed to attach")
    p.add_argument("--owner-uid", type=int, help="emulator: owner uid (root callers only)")

    # vipu-admin's (the form is our choice where the record stops: docs/vipu.md): admins only.
    a = create.add_parser("allocation", parents=[leaf])
    a.add_argument("name")
    a.add_argument("--agents", help="comma-separated IPU-Machines (agents), e.g. ag0,ag1")
    a.add_argument("--size", type=int, help="IPUs, without --agents: the controller picks free IPU-Machines")
    a.add_argument("--grant", default="", help="emulator: comma-separated users or uids granted it (default: anyone)")

    # Emulator-only: who may make partitions in a created allocation from now on (the epilog's revoke).
    u = verbs.add_parser("update").add_subparsers(dest="noun", required=True).add_parser("allocation", parents=[leaf])
    u.add_argument("name")
    u.add_argument("--grant", required=True, help="emulator: comma-separated users or uids granted it from now on")

    for verb in ("remove", "delete", "reset"):
        sub = verbs.add_parser(verb).add_subparsers(dest="noun", required=True)
        r = sub.add_parser("partition", parents=[leaf])
        r.add_argument("name")
        if verb != "reset":
            r.add_argument("--force", action="store_true", help="accepted for compatibility; remove always removes")
            r = sub.add_parser("allocation", parents=[leaf])
            r.add_argument("name")
            r.add_argument("--size", type=int, help="accepted for compatibility; ignored")

    lst = verbs.add_parser("list").add_subparsers(dest="noun", required=True)
    for noun in ("partitions", "partition", "allocations", "allocation", "clusters", "cluster", "agents", "agent"):
        n = lst.add_parser(noun, parents=[leaf])
        if noun.startswith("partition"):
            n.add_argument("--allocation", help="only the partitions made in this allocation")

    get = verbs.add_parser("get").add_subparsers(dest="noun", required=True)
    g = get.add_parser("partition", parents=[leaf])
    g.add_argument("name")
    g.add_argument("--gcd", type=int, default=0)
    g.add_argument("--ipu-configs", "--ipuof-configs", dest="ipu_configs", action="store_true")
    g = get.add_parser("allocation", parents=[leaf])
    g.add_argument("name")
    g.add_argument("--size", type=int, help="accepted for compatibility; ignored")
    get.add_parser("agent", parents=[leaf]).add_argument("name")
    return top


def server_address(args: argparse.Namespace) -> tuple[str, int]:
    hcl = _read_hcl(args.config or DEFAULT_HCL, explicit=bool(args.config))
    host = args.api_host or os.environ.get("VIPU_CLI_API_HOST") or hcl.get("api-host") or "localhost"
    port = args.api_port or os.environ.get("VIPU_CLI_API_PORT") or hcl.get("api-port") or VIPU_PORT
    try:
        return host, int(port)
    except ValueError:
        raise SlurmIpuError(f"invalid V-IPU port {port!r}; set --api-port or VIPU_CLI_API_PORT to a number") from None


def _read_hcl(path: str, explicit: bool) -> dict[str, str]:
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as exc:
        if explicit:
            raise SlurmIpuError(f"cannot read --config {path}: {exc.strerror}") from None
        return {}
    return {k: v for k, v in re.findall(r'^\s*([\w-]+)\s*=\s*"?([^"\n]*?)"?\s*$', text, re.M)}


def table(headers: list[str], rows: list[list[str]], rule_above: bool = False) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "|".join(f" {c:<{w}} " for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    rule = "-" * (sum(widths) + 3 * len(widths) - 1)
    out = ([rule] if rule_above else []) + [line(headers), rule] + [line(r) for r in rows] + [rule]
    return "\n".join(out)


PARTITION_COLUMNS = ["Cluster", "Allocation", "Partition", "ILDs", "GW Routing", "ILD Routing", "Size", "GCDs",
                     "State"]  # as PopRun's guide shows `vipu list partition`


def partitions_table(parts: list[dict]) -> str:
    rows = []
    for item in parts:
        p = item["partition"]
        spec = p["spec"]
        rows.append([spec.get("cluster", "-"), spec["allocation"], p["id"], str(spec["num_ilds"]), "DEFAULT",
                     "RINGSWNC", str(spec["size"]), str(spec["num_gcds"]), p["status"]["state"].removeprefix("PS_")])
    return table(PARTITION_COLUMNS, rows)


def run(args: argparse.Namespace, api: Api, out=sys.stdout) -> int:
    verb, noun = args.verb, getattr(args, "noun", None)
    show_json = args.showjson
    if noun == "allocation" and verb != "list":
        return run_allocation(args, api, out)
    if noun in ("agent", "agents"):
        print(agents_text(api, verb, getattr(args, "name", None), show_json), file=out)
        return 0
    if verb == "create":
        spec = {"name": args.name, "size": args.size, "num_gcds": args.num_gcds, "num_ilds": args.num_ilds,
                "allocation": args.allocation or args.cluster, "reconfigurable": args.reconfigurable,
                # --gcd-sync-replicas R: the replicas synchronised across the GCDs, i.e. the total
                # (V-IPU guide, multi-GCD partitions); either is what `num_replicas` shows (poptorch reads it).
                "total_replicas": args.total_num_replicas or args.gcd_sync_replicas, "owner_uid": args.owner_uid,
                "hosts": [h for h in (args.hosts or "").split(",") if h]}
        doc = api.create_partition(**spec)
        print(json.dumps(doc, indent=2) if show_json else f"create partition ({args.name}): success.", file=out)
    elif verb in ("remove", "delete"):
        api.remove_partition(args.name)
        print(f"{verb} partition ({args.name}): success.", file=out)
    elif verb == "reset":
        doc = api.reset_partition(args.name)
        print(json.dumps(doc, indent=2) if show_json else f"reset partition ({args.name}): success.", file=out)
    elif verb == "list" and noun.startswith("partition"):
        print(list_partitions(api, args.allocation, show_json), file=out)
    elif verb == "list" and noun.startswith("cluster"):
        clusters = api.clusters()
        rows = [[c["id"], str(len(c["spec"]["ipu_link_domains"])), str(c["spec"]["num_ipus"])] for c in clusters]
        print(json.dumps(clusters, indent=2) if show_json else table(["Cluster", "ILDs", "IPUs"], rows, True),
              file=out)
    elif verb == "list":
        allocs = api.allocations()
        if show_json:
            print(json.dumps(allocs, indent=2), file=out)
        else:
            rows = [[a["id"], " ".join(a["agents"])] for a in allocs]
            print(table(["Allocation ID", "Agents"], rows, True), file=out)
    elif verb == "get" and args.ipu_configs:
        doc = api.ipuof(args.name, args.gcd)
        print(f"IPUoF configuration of partition {args.name} GCD {args.gcd}:", file=out)
        print(ipuof_document(args.name, args.gcd, doc["ipus"]), file=out)
    elif verb == "get":
        doc = api.get_partition(args.name)
        print(json.dumps(doc, indent=2) if show_json else partitions_table([doc]), file=out)
    return 0


def ipuof_document(name: str, gcd: int, ipus: list[dict]) -> str:
    """The GCD's IPUoF configuration: an object of `devices` (one per IPU, one per line: still one
    JSON document after `tail -n +2`, easy to grep) and `attributes`, whose "GCD Id" is a string
    (vipuuser.proto's PartitionConfig.Gcd; popart and poptorch read these two)."""
    devices = ",\n".join("    " + json.dumps(i) for i in ipus)
    attributes = json.dumps({"GCD Id": str(gcd), "Partition Id": name, "Num IPUs": str(len(ipus))})
    return f'{{\n  "devices": [\n{devices}\n  ],\n  "attributes": {attributes}\n}}'


def list_partitions(api: Api, allocation: str | None, show_json: bool) -> str:
    parts = api.list_partitions(allocation)
    if not show_json:
        return partitions_table(parts)
    if allocation is None:  # the 2020 vipu-cli's array, which poptorch and our own client read
        return json.dumps(parts, indent=2)
    # V-IPU 1.18's ListPartitionsReply, for the form only 1.18-era tools run: caas-poplar-appliance
    # reads `partitions[*].id` of `vipu-admin list partitions --allocation A --showjson`.
    return json.dumps({"partitions": [p["partition"] for p in parts]}, indent=2)


def run_allocation(args: argparse.Namespace, api: Api, out=sys.stdout) -> int:
    """vipu-admin's create, update (the emulator's grants), get, remove (or delete) allocation."""
    if args.verb == "create":
        agents = [a for a in (args.agents or "").split(",") if a]
        doc = api.create_allocation(args.name, agents, _uids(args.grant), size=args.size)
        print(json.dumps(doc, indent=2) if args.showjson else f"create allocation ({args.name}): success.", file=out)
    elif args.verb == "update":
        doc = api.grant_allocation(args.name, _uids(args.grant))
        print(json.dumps(doc, indent=2) if args.showjson else f"update allocation ({args.name}): success.", file=out)
    elif args.verb == "get":
        doc = api.get_allocation(args.name)
        print(json.dumps(doc, indent=2) if args.showjson else allocation_table(doc["allocation"]), file=out)
    else:
        api.remove_allocation(args.name)
        print(f"{args.verb} allocation ({args.name}): success.", file=out)
    return 0


# `vipu-admin list agents` / `get agent NAME`: the fields Graphcore's guide shows for `get agent`;
# the list's columns and the layout of both are UNCONFIRMED (docs/vipu.md, Agents).
AGENT_FIELDS = (("Agent ID", "id"), ("Host", "host"), ("Port", "port"), ("Status", "status"),
                ("Exporter URL", "exporter_url"), ("Platform", "platform"),
                ("IPUoF server version", "ipuof_server_version"), ("Num of IPUs", "num_ipus"))


def agents_text(api: Api, verb: str, name: str | None, show_json: bool) -> str:
    if verb == "get":
        agent = api.get_agent(name)
        if show_json:
            return json.dumps({"agent": agent}, indent=2)
        rows = [[label, str(agent[key])] for label, key in AGENT_FIELDS]
        if agent.get("ipus_in_error"):
            rows.append(["IPUs in error", ",".join(map(str, agent["ipus_in_error"]))])
        return table(["Property", "Value"], rows, True)
    agents = api.agents()
    if show_json:
        return json.dumps({"agents": agents}, indent=2)
    rows = [[a["id"], a["host"], str(a["port"]), a["status"], str(a["num_ipus"])] for a in agents]
    return table(["Agent ID", "Host", "Port", "Status", "Num of IPUs"], rows, True)


def allocation_table(alloc: dict) -> str:
    spec = alloc["spec"]
    row = [alloc["id"], spec["cluster_id"], " ".join(spec["agent_ids"]), str(alloc.get("num_ipus", "-"))]
    return table(["Allocation ID", "Cluster", "Agents", "IPUs"], [row], True)


def _uids(users: str) -> list[int]:
    import pwd

    out = []
    for user in (u.strip() for u in users.split(",") if u.strip()):
        try:
            out.append(int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid)
        except KeyError:
            raise SlurmIpuError(f"--grant {user}: no such user; give a user name or uid") from None
    return out


PROG = re.compile(r"vipu(-admin|-cli)?[0-9.]*")


def prog_name(argv0: str) -> str:
    """The name this was run by: vipu, vipu-admin or vipu-cli (poptorch's and popart's), also with
    a version suffix as Graphcore installs them side by side (vipu-admin1.18.0). Each behaves
    the same (the server decides who may do what); anything else (`python -m`) is `vipu`."""
    name = os.path.basename(argv0)
    return name if PROG.fullmatch(name) else "vipu"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    prog = prog or prog_name(sys.argv[0])
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.version:
        print(f"{prog} {API_VERSION} (slurm-ipu emulator {__version__})")
        return 0
    try:
        host, port = server_address(args)
        api = Api(host, port, timeout=args.api_timeout, socket_dir=os.environ.get(SOCKET_DIR_ENV) or None,
                  owner=owner_from_env())
        if args.server_version:
            info = api.version()
            print(f"version: {info['version']} (slurm-ipu emulator)\nhost: {host}:{port}")
            return 0
        if not args.verb:
            parser.print_usage(sys.stderr)
            return 2
        return run(args, api)
    except ApiError as exc:
        print(f"error: {exc} [{exc.code}]", file=sys.stderr)
        return 1
    except ControllerUnreachable:
        # The real vipu's wording (PopRun's troubleshooting guide), which clients recognise.
        print(f"unable to connect to VIRM/V-IPU Controller at {host}:{port}: context deadline exceeded",
              file=sys.stderr)
        return 1
    except SlurmIpuError as exc:
        code = "UNAVAILABLE" if isinstance(exc, VipuUnavailable) else "INVALID_ARGUMENT"
        print(f"error: {exc} [{code}]", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `vipu list ... | head`: the reader left; no traceback, as a C tool's SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 141


if __name__ == "__main__":
    sys.exit(main())
