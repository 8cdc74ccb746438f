"""Where the slurm-ipu service takes requests: one socket in the hooks' state directory. Its own module
so that what asks the service (reap's client side, doctor, the lab) needs none of the service."""

from __future__ import annotations

from pathlib import Path


def socket_path(state_dir: str) -> Path:
    return Path(state_dir) / "hooks.sock"
