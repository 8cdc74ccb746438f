"""The partitions slurm-ipu created, one record per partition in STATE_DIR/created/.

The prolog writes the record before it asks V-IPU to create the partition, so a prolog killed
mid-create still leaves a trace for the epilog and `slurm-ipu reap`. Only a partition with a
record of its job is ever adopted or removed by the hooks: a partition someone else made under
the job's name (a user guessing the next job id) is refused and left alone. Records are small
files written whole (tmp + rename), so parallel hooks never contend and a crash leaves either
the whole record or none.
"""

from __future__ import annotations

import functools
import json
import os
import time
import zlib
from pathlib import Path

from .. import locks
from ..fsutil import read_json, remove, write_into

LOCK_STRIPES = 64  # partitions share this many lock files (never removed: flock needs them to stay)


def stripe(partition: str) -> int:
    """The lock file a name takes. By job id (a name's trailing number), so jobs running at the
    same time, whose ids are close, never share one: 64 consecutive jobs take 64 locks. Other
    names (none of ours) by a checksum."""
    digits = len(partition) - len(partition.rstrip("0123456789"))
    key = int(partition[-digits:]) if digits else zlib.crc32(partition.encode())
    return key % LOCK_STRIPES


@functools.lru_cache(maxsize=8)
def _paths(state_dir: str) -> tuple[Path, str, str]:
    """Built once per state directory: the slurm-ipu service makes a Ledger per request, and works in
    plain strings (no Path per record)."""
    where = os.path.join(state_dir, "created")
    return Path(where), where, os.path.join(state_dir, "name-locks")


class Ledger:
    def __init__(self, state_dir: str | Path):
        self.dir, self._dir, self.locks = _paths(str(state_dir))

    def lock(self, partition: str, deadline: float):
        """Held by the prolog while it makes `partition`, and taken by whoever removes it: a
        removal queued for a job cancelled mid-prolog (the slurm-ipu service keeps a handed-over
        prolog running after Slurm killed its slurm-ipu-hook) must not run between the record and
        the create, or the create lands after the removal and nothing remembers it."""
        return locks.hold(self._lock_path(partition), deadline)

    def busy(self, partition: str) -> bool:
        """A prolog is making it now: what a listing shows of it may be out of date."""
        return locks.is_held(self._lock_path(partition))

    def _lock_path(self, partition: str) -> str:
        return os.path.join(self.locks, str(stripe(partition)))

    def get(self, partition: str) -> dict | None:
        try:
            doc = read_json(os.path.join(self._dir, f"{partition}.json"))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def put(self, partition: str, **record) -> None:
        doc = dict(record, partition=partition, time=time.time())
        write_into(self._dir, f"{partition}.json", json.dumps(doc))

    def drop(self, partition: str) -> None:
        remove(os.path.join(self._dir, f"{partition}.json"))

    def owns(self, partition: str, job_id: int) -> bool:
        record = self.get(partition)
        return record is not None and record.get("job_id") == job_id
