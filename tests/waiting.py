"""Polling with a deadline: how every test tier waits for a condition instead of sleeping.

A state that becomes true a moment after the action that causes it (a node idle once its epilog
ends, a partition gone once the slurm-ipu service removes it, a row in sacct once slurmdbd hears of
the job's end, a line in a log) is never asserted from one read: it is waited for here, and the
failure says what was read last. A one-shot read of the nodes' states failed on a
node still COMPLETING."""

from __future__ import annotations

import time


def wait_for(what: str, read, timeout: float = 60.0, interval: float = 0.2, until=None):
    """read()'s first value that until(value) accepts (by default: the first truthy value).

    On the deadline an AssertionError names `what` and the value read last, so a failure shows
    the state it stopped in (`until` given: read() returns the state itself, not a bool)."""
    accept = bool if until is None else until
    deadline = time.monotonic() + timeout
    while True:
        last = read()
        if accept(last):
            return last
        if time.monotonic() >= deadline:
            break
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
