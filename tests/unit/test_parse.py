"""Parsing of `vipu` output: JSON partitions and error lines, malformed input included."""

import json

import pytest

from slurm_ipu import errors
from slurm_ipu.vipu.parse import classify_error, parse_partitions

FULL = {"partition": {"id": "slurm_7", "spec": {"size": 8, "num_gcds": 2, "num_ilds": 1, "reconfigurable": True,
        "allocation": "default", "hosts": ["node1"], "owner_uid": 1000,
        "ipus": [{"id": i} for i in range(8)]}, "status": {"state": "PS_PENDING"}}}
# What poptorch relied on: only id and spec.ipus/num_gcds/num_replicas.
MINIMAL = {"partition": {"id": "p64", "spec": {"ipus": list(range(4)), "num_gcds": 1, "num_replicas": 4}}}


@pytest.mark.parametrize("text,expected", [
    ("[]", []),
    ("", []),
    (json.dumps([FULL]), [("slurm_7", 8, 2, "PENDING", True, (0, 1, 2, 3, 4, 5, 6, 7), ("node1",))]),
    (json.dumps([MINIMAL]), [("p64", 4, 1, "ACTIVE", False, (0, 1, 2, 3), ())]),
    (json.dumps({"partitions": [MINIMAL]}), [("p64", 4, 1, "ACTIVE", False, (0, 1, 2, 3), ())]),
    (json.dumps([{"id": "bare", "state": "ERROR", "spec": {"size": 2}}]), [("bare", 2, 1, "ERROR", False, (), ())]),
])
def test_parse_partitions(text, expected):
    got = [(p.name, p.size, p.num_gcds, p.state, p.reconfigurable, p.ipus, p.hosts) for p in parse_partitions(text)]
    assert got == expected


@pytest.mark.parametrize("text,words", [
    ("not json", "not JSON"),
    ("{\"partitions\": 3}", "expected a list"),
    ("42", "expected a list"),
    ("[1]", "unexpected partition entry"),
    ("[{\"partition\": {\"spec\": {}}}]", "KeyError"),
    ("[{\"partition\": {\"id\": \"x\", \"spec\": {\"size\": \"big\"}}}]", "ValueError"),
    ("[{\"partition\": {\"id\": \"x\", \"spec\": {\"ipus\": [{\"no\": 1}]}}}]", "KeyError"),
])
def test_malformed_partitions(text, words):
    with pytest.raises(errors.VipuError, match=words):
        parse_partitions(text)


@pytest.mark.parametrize("text,cls,message", [
    ("error: partition p1 already exists [ALREADY_EXISTS]\n", errors.PartitionExists, "partition p1 already exists"),
    ("error: partition p1 not found [NOT_FOUND]", errors.PartitionNotFound, "partition p1 not found"),
    ("error: not enough free IPUs [RESOURCE_EXHAUSTED]", errors.InsufficientIpus, "not enough free IPUs"),
    ("error: bad [INVALID_ARGUMENT]", errors.InvalidPartition, "bad"),
    ("error: x [PERMISSION_DENIED]", errors.PermissionDenied, "x"),
    ("error: x [FAILED_PRECONDITION]", errors.PartitionNotReady, "x"),
    ("error: boom [INTERNAL]", errors.VipuUnavailable, "boom"),
    ("error: V-IPU server unavailable at h:1: Connection refused [UNAVAILABLE]", errors.VipuUnavailable,
     "Connection refused"),
    # a real vipu's wording (unknown): phrases decide
    ("Error: rpc error: code = Unavailable desc = connection refused", errors.VipuUnavailable, "rpc error"),
    ("Partition slurm_3 already exists", errors.PartitionExists, "Partition slurm_3 already exists"),
    ("size must be a power of 2", errors.InvalidPartition, "power of 2"),
    ("something odd", errors.VipuError, "something odd"),
    ("", errors.VipuError, "exited with status 3"),
])
def test_classify_error(text, cls, message):
    err = classify_error(text, 3)
    assert type(err) is cls
    assert message in str(err)
    assert "[" not in str(err) or cls is errors.VipuError
