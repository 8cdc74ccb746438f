"""`vipu-emu`: serve | cli | attach | fault | check."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys

from ..cli_common import run_main
from ..errors import AttachError, ConfigError
from ..rules import VIPU_PORT

FAULTS = ("latency", "create-delay", "fail", "error-next", "down", "up", "crash", "clear", "show", "agent")


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", help="the server's state directory: its admin socket DIR/admin.sock (the admin "
                   "API is served there only, to the server's owner and root; it works while the API is down)")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--port {text!r}: use 0 (a free port) to 65535")
    return port


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    top = argparse.ArgumentParser(prog="vipu-emu", description="V-IPU controller emulator")
    top.add_argument("--version", action="version", version=f"vipu-emu (slurm-ipu {__version__})")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = top.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the emulated controller on loopback")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=_port, default=VIPU_PORT, help="0 picks a free port (see STATE/server.json)")
    s.add_argument("--state-dir", default=os.path.expanduser("~/.local/state/vipu-emu"))
    s.add_argument("--cluster", default="pod64", help="preset (pod16, pod64, pod256) or YAML path")
    s.add_argument("--socket-dir", help="where the API socket api-PORT.sock goes (default: the state directory); "
                   "a directory only the server's owner can write (the lab's controllers share one)")
    s.add_argument("-v", "--verbose", action="store_true")

    sub.add_parser("cli", help="the vipu-compatible command line", add_help=False)

    a = sub.add_parser("attach", help="attach as a Poplar program would, from IPUOF_VIPU_API_*")
    a.add_argument("--hostname", help="default: $SLURMD_NODENAME, else this host's name")
    a.add_argument("--uid", type=int, help="default: the caller's uid")
    a.add_argument("--json", action="store_true")

    f = sub.add_parser("fault", help="inject or clear faults")
    _server_args(f)
    f.add_argument("kind", choices=FAULTS)
    f.add_argument("value", nargs="*", help="seconds for latency, create-delay, down; for agent: NAME "
                   "down|up|ipu-error N (an IPU-Machine fails or comes back)")
    f.add_argument("--count", type=int, default=1)
    f.add_argument("--code", default="UNAVAILABLE")
    f.add_argument("--op", default="any")

    c = sub.add_parser("check", help="check the no-double-allocation invariants")
    _server_args(c)
    return top


def _api(args):
    from .api import Api

    if not args.state_dir:
        raise ConfigError(f"{args.cmd}: give --state-dir DIR of the server (its admin API is served on "
                          "DIR/admin.sock only)")
    return Api(admin_socket=os.path.join(args.state_dir, "admin.sock"))


def cmd_fault(args) -> int:
    api = _api(args)
    from .service import fault_seconds

    kind = args.kind
    if kind == "agent":
        print(json.dumps(api.agent_fault(*_agent_fault(args.value))))
        return 0
    if kind in ("latency", "create-delay") and not args.value:
        raise ConfigError(f"fault {kind} needs a number of seconds, e.g. `vipu-emu fault {kind} 2`")
    try:
        if len(args.value) > 1:
            raise ValueError(f"fault {kind} takes one number of seconds, not {' '.join(args.value)}")
        value = fault_seconds(kind, float(args.value[0]) if args.value else 0.0)
    except ValueError as exc:
        raise ConfigError(f"{exc}" if "fault" in str(exc) else f"fault {kind} {args.value[0]}: not a number of "
                          "seconds") from None
    actions = {
        "latency": lambda: api.faults(latency=value),
        "create-delay": lambda: api.faults(create_delay=value),
        "fail": lambda: api.faults(fail={"count": args.count, "code": args.code, "op": args.op}),
        "error-next": lambda: api.faults(error_next=args.count),
        "down": lambda: api.down(value),
        "up": api.up,
        "crash": api.crash,
        "clear": api.clear_faults,
        "show": api.faults,
    }
    print(json.dumps(actions[kind]()))
    return 0


def _agent_fault(words: list[str]) -> tuple[str, str, int | None]:
    """`agent NAME down|up|ipu-error N` (the exact form scripts written against the emulator use)."""
    usage = "use `vipu-emu fault agent NAME down|up|ipu-error N` (e.g. agent ag0 down)"
    if len(words) == 2 and words[1] in ("down", "up"):
        return words[0], words[1], None
    if len(words) == 3 and words[1] == "ipu-error" and words[2].isdigit():
        return words[0], "ipu-error", int(words[2])
    raise ConfigError(f"fault agent {' '.join(words)}: {usage}")


def cmd_attach(args) -> int:
    from .api import SOCKET_DIR_ENV, Api, owner_from_env

    env = os.environ
    missing = [v for v in ("IPUOF_VIPU_API_HOST", "IPUOF_VIPU_API_PARTITION_ID") if not env.get(v)]
    if missing:
        raise AttachError(f"{', '.join(missing)} not set; run inside an IPU job or export them")
    port = env.get("IPUOF_VIPU_API_PORT", str(VIPU_PORT))
    gcd = env.get("IPUOF_VIPU_API_GCD_ID", "0")
    if not port.isdigit() or not gcd.isdigit():
        raise AttachError(f"IPUOF_VIPU_API_PORT={port!r} and IPUOF_VIPU_API_GCD_ID={gcd!r} must be numbers")
    host = args.hostname or env.get("SLURMD_NODENAME") or socket.gethostname()
    uid = os.getuid() if args.uid is None else args.uid
    try:
        timeout = float(env.get("IPUOF_VIPU_API_TIMEOUT", "120"))
    except ValueError:
        raise AttachError(f"IPUOF_VIPU_API_TIMEOUT={env['IPUOF_VIPU_API_TIMEOUT']!r} is not a number of seconds; "
                          "unset it or give e.g. 120") from None
    if not 0 < timeout < float("inf"):
        raise AttachError(f"IPUOF_VIPU_API_TIMEOUT={timeout:g} must be a positive number of seconds, e.g. 120")
    api = Api(env["IPUOF_VIPU_API_HOST"], int(port), timeout=min(timeout, 30.0),
              socket_dir=env.get(SOCKET_DIR_ENV) or None, owner=owner_from_env(env))
    from .api import ApiError

    try:
        got = api.attach(env["IPUOF_VIPU_API_PARTITION_ID"], int(gcd), uid, host)
    except ApiError as exc:
        print(f"ipuof: cannot attach: {exc} [{exc.code}]", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(got))
    else:
        ids = ",".join(str(i["id"]) for i in got["ipus"])
        print(f"attach: host={host} uid={uid} partition={got['partition']} gcd={got['gcd']} ipus={ids}")
    return 0


def cmd_check(args) -> int:
    result = _api(args).check()
    print(json.dumps(result))
    return 0 if result["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["cli"]:
        from .vipucli import main as vipu_main

        return vipu_main(argv[1:], prog="vipu-emu cli")
    args = build_parser().parse_args(argv)

    def dispatch() -> int:
        if args.cmd == "serve":
            from .server import main_serve

            return main_serve(args)
        return {"attach": cmd_attach, "fault": cmd_fault, "check": cmd_check}[args.cmd](args)

    return run_main(dispatch, debug=args.debug, program="vipu-emu")


if __name__ == "__main__":
    sys.exit(main())
