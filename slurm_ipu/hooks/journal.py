"""A journal of partitions waiting for removal, in STATE_DIR/pending-removal/.

Entries are written only through `Journal.add` (one format, in place before the hook answers):
by the slurm-ipu service, which queues an ended job's partition slurm-ipu-hook hands it, and
by the Python hooks when V-IPU refused a removal (reason given). One small file per partition,
written whole (tmp + rename), so parallel hooks never contend and a crash leaves either the
whole entry or none.

Not fsynced, unlike the creation record: an entry outlives the process that wrote it (a service
that dies after answering finds it when it starts again), and what a crash of the host itself
loses (an entry gone, or left empty and so read as unreadable and dropped), the record covers:
the slurm-ipu service's full reap at start removes every recorded partition whose job is over. An
fsync per ended job was the slurm-ipu service's largest kernel cost.

Epilogs (and the service giving back a partition nobody waited for) only add entries. Acting on
one, dropping it, or adding it again with V-IPU's refusal is the remover's alone (remover.py),
under the name's lock (removal.settle). A prolog never touches the journal: an entry queued
before the job's next attempt began is recognised by the record's `began` and left alone.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

from ..fsutil import read_json, remove, write_into


@functools.lru_cache(maxsize=8)
def _paths(state_dir: str) -> tuple[Path, str]:
    """Built once per state directory: the slurm-ipu service makes a Journal per request, and works
    in plain strings (no Path per entry)."""
    where = os.path.join(state_dir, "pending-removal")
    return Path(where), where


class Journal:
    def __init__(self, state_dir: str | Path):
        self.dir, self._dir = _paths(str(state_dir))

    def add(self, partition: str, job_id: int, reason: str, since: float | None = None) -> None:
        """Queue (or re-queue with the latest reason) a removal. `since`: when it was first queued,
        kept across retries, so an entry V-IPU keeps refusing ages (doctor reports it)."""
        first = since if isinstance(since, (int, float)) and not isinstance(since, bool) else time.time()
        entry = {"partition": partition, "job_id": job_id, "reason": reason, "time": first}
        write_into(self._dir, f"{partition}.json", json.dumps(entry), durable=False)

    def get(self, partition: str) -> dict | None:
        try:
            doc = read_json(os.path.join(self._dir, f"{partition}.json"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("partition"), str):
            return {"partition": partition, "job_id": None, "reason": "unreadable entry"}
        return doc

    def names(self) -> list[str]:
        """Partition names with an entry, oldest job first (names end in the job id)."""
        try:
            found = [e.name[:-5] for e in os.scandir(self._dir) if e.name.endswith(".json") and e.name[0] != "."]
        except FileNotFoundError:
            return []
        return sorted(found, key=lambda n: (len(n), n))

    def entries(self) -> list[dict]:
        return [e for e in map(self.get, self.names()) if e is not None]

    def drop(self, partition: str) -> None:
        remove(os.path.join(self._dir, f"{partition}.json"))
