"""What every slurm-ipu command does with errors: one line, exit 2, traceback only with --debug."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

from .errors import SlurmIpuError


def run_main(body: Callable[[], int], debug: bool = False, program: str | None = None) -> int:
    program = program or os.path.basename(sys.argv[0]) or "slurm-ipu"
    try:
        return body()
    except SlurmIpuError as exc:
        if debug:
            traceback.print_exc()
        print(exc.line(program), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        return 130
