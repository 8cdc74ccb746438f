"""Polling with a deadline: how every test tier waits for a condition instead of sleeping."""

from __future__ import annotations

import time


def wait_for(what: str, predicate, timeout: float = 60.0, interval: float = 0.2):
    """predicate()'s first truthy value; AssertionError naming `what` when the deadline passes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
