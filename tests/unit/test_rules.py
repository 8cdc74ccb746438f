"""The rule table, driven by tables of requests (every rejection names the valid choices)."""

import pytest

from slurm_ipu import rules
from slurm_ipu.errors import InvalidPartition

GOOD = [
    # size, gcds, ilds, cluster_ilds -> expected shape (defaults: fewest ILDs, one GCD per ILD)
    (1, None, None, 1, rules.Shape(1, 1, 1)),
    (8, 2, None, 1, rules.Shape(8, 2, 1)),
    (8, 8, None, 1, rules.Shape(8, 8, 1)),
    (32, None, None, 1, rules.Shape(32, 1, 1)),   # 32 stays valid: the PopRun guide lists one
    (32, 2, 2, 4, rules.Shape(32, 2, 2)),         # the guide's part3: 32 IPUs, 2 ILDs, 2 GCDs
    (64, 64, None, 1, rules.Shape(64, 64, 1)),
    (64, 4, None, 1, rules.Shape(64, 4, 1)),      # 16 IPUs per GCD
    (128, None, None, 4, rules.Shape(128, 2, 2)),
    (128, 8, 4, 4, rules.Shape(128, 8, 4)),       # 32 per ILD as two GCDs of 16
    (192, None, None, 4, rules.Shape(192, 3, 3)),  # a multiple of 64: three ILDs of 64
    (256, None, None, 4, rules.Shape(256, 4, 4)),
]


@pytest.mark.parametrize("size,gcds,ilds,cluster_ilds,shape", GOOD)
def test_valid_shapes(size, gcds, ilds, cluster_ilds, shape):
    assert rules.check_shape(size, gcds, ilds, cluster_ilds=cluster_ilds) == shape


BAD = [
    # size, gcds, ilds, cluster_ilds, words the one-line message must contain
    (3, None, None, 1, ["size 3", "not 1, 2, 4, 8, 16, 32, 64 or a multiple of 64", "1, 2, 4, 8, 16, 32, 64"]),
    (96, None, None, 4, ["size 96", "not 1, 2, 4, 8, 16, 32, 64 or a multiple of 64", "128, 192, 256"]),
    (0, None, None, 1, ["size 0", "positive", "1, 2, 4, 8, 16, 32, 64"]),
    (-4, None, None, 1, ["size -4", "valid sizes"]),
    (128, None, None, 1, ["size 128", "exceeds the 64 IPUs", "1, 2, 4, 8, 16, 32, 64"]),
    (8, 3, None, 1, ["--num-gcds 3", "8 IPUs", "valid GCD counts: 1, 2, 4, 8"]),
    (8, 16, None, 1, ["--num-gcds 16", "1, 2, 4, 8"]),
    (8, 0, None, 1, ["--num-gcds 0"]),
    (64, 2, None, 1, ["--num-gcds 2", "64 IPUs", "valid GCD counts: 1, 4, 8, 16, 32, 64"]),  # 32 per GCD
    (128, 1, 2, 4, ["--num-gcds 1", "over 2 ILD(s)", "valid GCD counts: 2, 8, 16, 32, 64, 128"]),  # spans ILDs
    (128, None, 1, 4, ["--num-ilds 1", "valid ILD counts: 2, 4"]),
    (8, None, 3, 4, ["--num-ilds 3", "valid ILD counts: 1, 2, 4"]),
    (64, None, 2, 1, ["--num-ilds 2", "valid ILD counts: 1"]),
    ("8", None, None, 1, ["'8'", "valid sizes"]),
    (True, None, None, 1, ["True"]),
]


@pytest.mark.parametrize("size,gcds,ilds,cluster_ilds,words", BAD)
def test_rejections_name_value_and_choices(size, gcds, ilds, cluster_ilds, words):
    with pytest.raises(InvalidPartition) as info:
        rules.check_shape(size, gcds, ilds, cluster_ilds=cluster_ilds)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_published_size_tables():
    assert rules.valid_sizes(256) == [1, 2, 4, 8, 16, 32, 64, 128, 192, 256]
    assert [n for n in range(1, 300) if rules.is_valid_allocation(n)] == [4, 8, 16, 32, 64, 128, 192, 256]
    assert rules.REPLICA_SIZES == (1, 2, 4)
    assert rules.valid_gcds(64) == [1, 4, 8, 16, 32, 64]  # IPUs per GCD: 64, 16, 8, 4, 2, 1 (never 32)


@pytest.mark.parametrize("ipus,ok", [(4, True), (16, True), (64, True), (128, True), (192, True), (96, False),
                                     (2, False), (0, False), (100, False)])
def test_pod_sizes(ipus, ok):
    if ok:
        assert rules.check_pod(ipus) == ipus
    else:
        with pytest.raises(InvalidPartition, match=f"{ipus} IPUs is not a Pod size; use 4, 8, 16, 32, 64 or a "
                                                   "multiple of 64"):
            rules.check_pod(ipus)


@pytest.mark.parametrize("per_node,nodes,ok", [(4, 2, True), (16, 4, True), (3, 1, False), (8, 3, False),
                                               (16, 8, False)])
def test_job_request_total(per_node, nodes, ok):
    if ok:
        assert rules.check_job_request(per_node, nodes, 64) == per_node * nodes
    else:
        words = rf"--gres=ipu:{per_node} on {nodes} node\(s\) asks for {per_node * nodes} IPUs"
        with pytest.raises(InvalidPartition, match=words):
            rules.check_job_request(per_node, nodes, 64)


@pytest.mark.parametrize("size,expected", [(1, 1), (64, 1), (65, 2), (128, 2), (192, 3), (256, 4)])
def test_default_ilds(size, expected):
    assert rules.default_ilds(size) == expected


@pytest.mark.parametrize("name,parsed", [
    ("slurm_42", (42, None)), ("slurm_42_0", (42, 0)), ("slurm_42_17", (42, 17)),
    ("slurm_", None), ("slurm_42_", None), ("slurm_4x", None), ("slurm_42_1_2", None), ("other_42", None),
    ("slurm_\u0664\u0662", None),  # digits of another script: not a Slurm job id
])
def test_a_job_s_and_a_step_s_names_are_read_back_as_they_are_made(name, parsed):
    """One form, composed and read in one place: the hooks, the step helper, ipurun, reap and the
    emulator all use these (the SPANK plugin's is held to job_name by test_constants)."""
    assert rules.parse_name(name, "slurm_") == parsed
    if parsed is not None:
        job, step = parsed
        assert (rules.job_name("slurm_", job) if step is None else rules.step_name("slurm_", job, step)) == name
