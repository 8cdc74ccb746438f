"""tests/waiting.py, the one poll helper of every tier: it returns the value it waited
for, and on its deadline names what it waited for and the state it read last."""

from __future__ import annotations

import itertools

import pytest

from ..waiting import wait_for


def test_the_first_accepted_value_is_returned():
    reads = iter(["completing", "completing", "idle"])
    assert wait_for("node1 idle", lambda: next(reads), 5, 0.001, until=lambda s: s == "idle") == "idle"
    counts = itertools.count()
    assert wait_for("a truthy read", lambda: next(counts), 5, 0.001) == 1


def test_the_deadline_names_what_and_the_state_last_read():
    states = iter([{"node1": "completing"}, {"node1": "completing"}] + [{"node1": "mixed"}] * 1000)
    with pytest.raises(AssertionError, match=r"waiting for every node idle \(last: \{'node1': 'mixed'\}\)"):
        wait_for("every node idle", lambda: next(states), 0.05, 0.01, until=lambda s: s == {"node1": "idle"})


def test_a_read_is_made_at_the_deadline_itself():
    reads = []
    with pytest.raises(AssertionError):
        wait_for("never", lambda: reads.append(1), 0.0)
    assert len(reads) == 1
