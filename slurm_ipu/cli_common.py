"""What every slurm-ipu command does with errors: one line, exit 2, traceback only with --debug."""

from __future__ import annotations

import os
import sys

from .errors import SlurmIpuError


def run_main(body, debug: bool = False, program: str | None = None) -> int:
    """body() -> exit code. (No typing import: every CLI, ipurun included, starts through here.)"""
    program = program or os.path.basename(sys.argv[0]) or "slurm-ipu"
    try:
        return body()
    except SlurmIpuError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        print(exc.line(program), file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        # `ipurun --dry-run ... | head`: the reader left; say nothing more, as a killed-by-SIGPIPE
        # command would, and keep Python from complaining again while flushing stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        return 130
