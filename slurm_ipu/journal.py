"""A durable journal of partitions the epilog could not remove (V-IPU was down).

One small file per partition, written atomically, so parallel epilogs never contend and a
crash leaves either the whole entry or none. `slurm-ipu reap` works through it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


class Journal:
    def __init__(self, state_dir: str | Path):
        self.dir = Path(state_dir) / "pending-removal"

    def add(self, partition: str, job_id: int, reason: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        entry = {"partition": partition, "job_id": job_id, "reason": reason, "time": time.time()}
        tmp = self.dir / f".{partition}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(entry, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.dir / f"{partition}.json")

    def entries(self) -> list[dict]:
        out = []
        for path in sorted(self.dir.glob("*.json")) if self.dir.exists() else []:
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                out.append({"partition": path.stem, "job_id": None, "reason": "unreadable entry"})
        return out

    def drop(self, partition: str) -> None:
        (self.dir / f"{partition}.json").unlink(missing_ok=True)
