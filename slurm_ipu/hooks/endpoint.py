"""Where the slurm-ipu service takes requests: one socket in the hooks' state directory. Its own module
so that what asks the service (reap's client side, doctor, the lab) needs none of the service."""

from __future__ import annotations

from pathlib import Path


def socket_path(state_dir: str) -> Path:
    return Path(state_dir) / "hooks.sock"


def reap_request_path(state_dir: str) -> Path:
    """A reap asked of whoever removes: slurm-ipu-hook makes it when its controller becomes the
    primary (SlurmctldPrimaryOnProg: a start, a takeover, a failback), so that a job that
    controller never knew (lost in the failover) does not keep its partition for reap.interval.
    A file, not the socket: the remover may run on another controller's host (docs/admin.md)."""
    return Path(state_dir) / "reap.request"
