"""V-IPU, reached only through the `vipu` command contract."""

from .client import VipuClient
from .types import Partition

__all__ = ["VipuClient", "Partition"]
