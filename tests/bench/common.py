"""What both benchmarks need: a lab of their own on free loopback ports, always taken down."""

from __future__ import annotations

import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_ipu import lab  # noqa: E402
from tests.slurm.conftest import _free_block  # noqa: E402


@contextmanager
def temporary_lab(nodes: int = 4, pods: int = 1, model: str = "partition", **more) -> Iterator[lab.LabSpec]:
    base = _free_block(nodes + 4)
    with tempfile.TemporaryDirectory(prefix="slurm-ipu-bench-") as tmp:
        spec = lab.LabSpec(dir=Path(tmp), nodes=nodes, pods=pods, ctld_port=base, node_port=base + 1,
                           vipu_port=base + nodes + 3, model=model, **more)
        # SIGTERM (a timeout, a kill) takes the lab down too: nothing of a benchmark outlives it.
        previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        lab.up(spec)
        try:
            yield spec
        finally:
            lab.down(spec)
            signal.signal(signal.SIGTERM, previous)
