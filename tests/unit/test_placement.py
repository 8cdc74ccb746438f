"""Aligned placement inside ILDs and allocations, fragmentation included."""

import pytest

from slurm_ipu import rules
from slurm_ipu.emulator.model import cluster_from_dict, place
from slurm_ipu.errors import ConfigError, InsufficientIpus


def pod(ilds=1, allocations=None):
    return cluster_from_dict({"ilds": ilds, "allocations": allocations or {"default": "all"}})


def test_blocks_are_aligned_to_their_size():
    c = pod()
    free = set(range(64)) - {0}  # IPU 0 taken: an 8-block cannot start at 1..7
    assert place(c, rules.Shape(8), free) == list(range(8, 16))


def test_best_fit_keeps_large_blocks_whole():
    c = pod()
    free = set(range(64)) - set(range(0, 4))  # a 4-block used at the start
    # the next 4-block goes beside it, not at 32 or 60, so 32..63 stays one block
    assert place(c, rules.Shape(4), free) == [4, 5, 6, 7]
    assert place(c, rules.Shape(32), free) == list(range(32, 64))


def test_fragmentation_blocks_a_large_partition():
    c = pod()
    free = set(range(64)) - {0, 32}  # 62 IPUs free, but no aligned 64 and only ... no 32-block either
    with pytest.raises(InsufficientIpus, match="aligned block of 32"):
        place(c, rules.Shape(32), free)
    assert place(c, rules.Shape(16), free) == list(range(16, 32))


def test_multi_ild_takes_one_block_per_ild():
    c = pod(ilds=4)
    got = place(c, rules.Shape(128, 1, 2), set(range(256)))
    assert got == list(range(0, 128))
    free = set(range(256)) - {0}
    got = place(c, rules.Shape(128, 1, 2), free)
    assert {i // 64 for i in got} == {1, 2} and len(got) == 128


def test_allocation_limits_free_set():
    c = pod(ilds=4, allocations={"a": [f"ag{i}" for i in range(32)], "b": [f"ag{i}" for i in range(32, 64)]})
    assert c.allocation_ipus("b") == set(range(128, 256))
    assert place(c, rules.Shape(64), c.allocation_ipus("b"))[0] == 128


def test_pods_nest_their_allocations_and_cable_their_hosts():
    c = cluster_from_dict({"ilds": 2, "allocations": {"all": "all", "a": [f"ag{i}" for i in range(16)]},
                           "cabling": {0: "h[1-2]", 1: ["h3"]}})
    assert c.allocation_ipus("a") < c.allocation_ipus("all")
    assert c.remote_ilds("h1", range(60, 70)) == [1]
    assert c.remote_ilds("h3", range(60, 70)) == [0]
    assert c.remote_ilds("h9", [0]) == [0]  # a host cabled nowhere reaches nothing
    assert cluster_from_dict({"ilds": 2}).remote_ilds("h9", [0, 64]) == []  # no cabling: one Pod, all reach all


@pytest.mark.parametrize("doc,words", [
    ({"ilds": 0}, "ilds must be an integer from 1 to 1024, got 0"),
    ({"ilds": 100000000}, "ilds must be an integer from 1 to 1024, got 100000000"),
    ({"agents_per_ild": 12}, "power of two"),
    ({"ild": 2}, "did you mean 'ilds'"),
    ({"version": 2}, "unsupported version"),
    ({"allocations": {"a": ["ag99"]}}, "unknown agent 'ag99'"),
    ({"allocations": {"a": ["ag1"], "b": ["ag1"]}}, "shares agents"),
    ({"allocations": {"a": ["ag1", "ag2"], "b": ["ag2", "ag3"]}}, "allocations nest or stay apart"),
    ({"cabling": {1: "node1"}}, "ILDs 0..0"),
    ({"cabling": {0: "node[1-"}}, "cabling of ILD 0"),
    ({"cabling": ["node1"]}, "map an ILD number"),
    ({"remote_attach": "route"}, "not one of refuse, slow"),
    ({"admins": [10 ** 30]}, r"uid 1000000000000000000000000000000 is out of range; a uid is 0 to 4294967294"),
    ({"grants": {"default": [-1]}}, "uid -1 is out of range"),
    ({"cabling": {0: "n[1-" + "9" * 200000}}, r"hostlist 'n\[1-9{35}\.\.\.\(200006 characters\): unbalanced"),
    ({"remote_attach_delay": -1}, "0 to 60 seconds"),
    ([1, 2], "expected a mapping"),
])
def test_bad_cluster_descriptions(doc, words):
    with pytest.raises(ConfigError, match=words):
        cluster_from_dict(doc)
