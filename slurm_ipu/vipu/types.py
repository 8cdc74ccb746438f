"""What slurm-ipu knows about a V-IPU partition, whatever `vipu` printed it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Partition:
    name: str
    size: int
    num_gcds: int = 1
    num_ilds: int = 1
    state: str = "ACTIVE"  # ACTIVE, PENDING, ERROR (the PS_ prefix is dropped)
    reconfigurable: bool = False
    allocation: str | None = None
    ipus: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    owner_uid: int | None = None
    extra: dict = field(default_factory=dict, compare=False, repr=False)
