"""What the slurm-ipu service counts for `slurm-ipu metrics`: how long the hooks it
runs take, how long an ended job's V-IPU object waits to be removed, and V-IPU's failed calls by
kind. Kept in memory (prologs, epilogs and removals run in the service's threads) and written to
STATE_DIR/hook-stats.json after each removal pass that removed something, at each reap and health
pass and at stop, which `slurm-ipu metrics` reads; a restarted service carries on from that file,
so the counters only grow.

Hooks run by slurm-ipu-hook's Python fallback (while the service is down) are not counted: each is
its own short process, and a shared file written per job would cost every job a lock.
"""

from __future__ import annotations

import json
import os
import threading
import time

FILE = "hook-stats.json"
# Seconds: a prolog's V-IPU create is tens of ms, a slow controller seconds, prolog.deadline 60 s;
# removals wait in the journal while V-IPU is unreachable (backoff up to a minute, reap.interval).
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
TIMED = ("prolog", "epilog", "removal")


def path_of(state_dir: str) -> str:
    return os.path.join(state_dir, FILE)


PASSES = ("reap", "health")  # the service's periodic passes, each one's last end kept (epoch seconds)


def empty() -> dict:
    return {"durations": {name: {"buckets": [0] * len(BUCKETS), "sum": 0.0, "count": 0} for name in TIMED},
            "vipu_errors": {}, "passes": {}}


def load(state_dir: str) -> dict | None:
    """The service's last written counters; None if it never wrote any (or they cannot be read)."""
    try:
        with open(path_of(state_dir)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if not _valid(doc):
        return None
    passes = doc.get("passes")  # absent in what a service before it wrote
    doc["passes"] = {k: v for k, v in passes.items() if k in PASSES and isinstance(v, (int, float))} \
        if isinstance(passes, dict) else {}
    return doc


def _valid(doc) -> bool:
    try:
        return all(len(doc["durations"][n]["buckets"]) == len(BUCKETS) for n in TIMED) and \
            isinstance(doc["vipu_errors"], dict)
    except (KeyError, TypeError):
        return False


class Stats:
    """The counters, shared by the service's threads."""

    def __init__(self, state_dir: str):
        self.state_dir = state_dir
        self.lock = threading.Lock()
        self.doc = load(state_dir) or empty()

    def observe(self, name: str, seconds: float) -> None:
        """One `name` (prolog, epilog, removal) that took `seconds`."""
        seconds = max(0.0, seconds)
        with self.lock:
            hist = self.doc["durations"][name]
            for k, upper in enumerate(BUCKETS):
                if seconds <= upper:
                    hist["buckets"][k] += 1
                    break
            hist["sum"] += seconds
            hist["count"] += 1

    def vipu_error(self, exc) -> None:
        """A `vipu` call that failed (each attempt of a retried one), by its kind."""
        kind = getattr(exc, "kind", "other")
        with self.lock:
            self.doc["vipu_errors"][kind] = self.doc["vipu_errors"].get(kind, 0) + 1

    def passed(self, name: str) -> None:
        """A periodic pass (PASSES) ended, ran or skipped: doctor and the metrics tell a service
        whose passes stopped (a thread stuck) from one that works."""
        with self.lock:
            self.doc["passes"][name] = time.time()

    def save(self) -> None:
        """Whole or not at all; a failure to write (a full disk) is the caller's to log."""
        from ..fsutil import atomic_write

        with self.lock:
            text = json.dumps(self.doc, sort_keys=True)
        atomic_write(path_of(self.state_dir), text + "\n", 0o644)
