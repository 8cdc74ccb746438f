"""`slurm-ipu`: the admin and hook entry point. Each subcommand lives in its own module and is
imported only when chosen, so the Slurm hooks pay for nothing they do not use."""

from __future__ import annotations

import argparse
import sys

from . import __version__
from .cli_common import run_main


def build_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="slurm-ipu", description="Graphcore IPU Pods on stock Slurm")
    top.add_argument("--version", action="version", version=f"slurm-ipu {__version__}")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = top.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("rules", help="print the partition rules and the valid sizes for a Pod")
    r.add_argument("--ipus", type=int, default=64, help="IPUs in the Pod (default 64)")
    r.add_argument("--ilds", type=int, default=None, help="ILDs in the Pod (default: IPUs / 64)")

    sub.add_parser("demo", help="start the emulator, create, list and remove a partition, stop it")
    return top


def cmd_rules(args) -> int:
    from . import rules

    ilds = args.ilds or max(1, args.ipus // rules.IPUS_PER_ILD)
    for key, text in rules.RULES.items():
        print(f"{key:<11} {text}")
    print(f"{'sizes':<11} {', '.join(map(str, rules.valid_sizes(args.ipus)))}")
    for size in rules.valid_sizes(args.ipus):
        ilds_ok = rules.valid_ilds(size, ilds)
        print(f"  size {size:>4}: gcds {','.join(map(str, rules.valid_gcds(size)))}; ilds {','.join(map(str, ilds_ok))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def dispatch() -> int:
        if args.cmd == "demo":
            from .demo import main as demo_main

            return demo_main()
        return {"rules": cmd_rules}[args.cmd](args)

    return run_main(dispatch, debug=args.debug, program="slurm-ipu")


if __name__ == "__main__":
    sys.exit(main())
