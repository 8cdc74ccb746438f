"""What slurm-ipu knows about a V-IPU partition, whatever `vipu` printed it."""

from __future__ import annotations

# A plain class, not a dataclass: ipurun reads a partition on every launch, and importing
# dataclasses (with inspect and ast) costs more start-up than the read itself.
_FIELDS = ("name", "size", "num_gcds", "num_ilds", "state", "reconfigurable", "allocation", "ipus", "hosts",
           "owner_uid")


class Partition:
    __slots__ = (*_FIELDS, "extra")

    def __init__(self, name: str, size: int, num_gcds: int = 1, num_ilds: int = 1,
                 state: str = "ACTIVE",  # ACTIVE, PENDING, ERROR (the PS_ prefix is dropped)
                 reconfigurable: bool = False, allocation: str | None = None, ipus: tuple[int, ...] = (),
                 hosts: tuple[str, ...] = (), owner_uid: int | None = None, extra: dict | None = None):
        set_ = object.__setattr__
        for key, value in zip(_FIELDS, (name, size, num_gcds, num_ilds, state, reconfigurable, allocation, ipus,
                                        hosts, owner_uid), strict=True):
            set_(self, key, value)
        set_(self, "extra", {} if extra is None else extra)  # not compared, not shown

    def __setattr__(self, key, value):
        raise AttributeError(f"Partition is read-only ({key})")

    def _key(self) -> tuple:
        return tuple(getattr(self, k) for k in _FIELDS)

    def __eq__(self, other) -> bool:
        return isinstance(other, Partition) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Partition({', '.join(f'{k}={getattr(self, k)!r}' for k in _FIELDS)})"
