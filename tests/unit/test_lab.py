"""The lab's process handling, without Slurm: the error a failed start gives."""

from __future__ import annotations

import pytest

from slurm_ipu import lab
from slurm_ipu.errors import LabError


def test_a_daemon_that_fails_silently_is_explained_by_its_log(tmp_path):
    """slurmd exits 1 printing nothing when /sys/fs/cgroup is missing; the reason is in its log."""
    log = tmp_path / "slurmd-node1.log"
    log.write_text("[t] error: No filesystem mounted on /sys/fs/cgroup\n"
                   "[t] error: Unable to initialize cgroup plugin\n")
    spec = lab.LabSpec(dir=tmp_path)
    with pytest.raises(LabError) as err:
        lab._run(["false"], spec, log=log)
    assert "Unable to initialize cgroup plugin" in str(err.value) and str(log) in str(err.value)
    with pytest.raises(LabError, match="no message"):
        lab._run(["false"], spec)


def test_release_differences_live_in_one_table():
    from slurm_ipu.slurm import releases

    assert releases.release("24.11.5") == "24.11"
    assert (releases.tres_prefix("22.05.8"), releases.tres_prefix("23.11.1"), releases.tres_prefix("24.11.5")) == \
        ("gres:", "gres/", "gres/")


def test_the_lab_disables_the_cgroup_plugin_only_where_slurm_knows_the_value():
    from slurm_ipu.slurm import releases

    assert releases.cgroup_conf("22.05.8") is None and releases.cgroup_conf("23.11.4") is None
    assert "CgroupPlugin=disabled" in releases.cgroup_conf("24.05.1")
    assert "CgroupPlugin=disabled" in releases.cgroup_conf("26.05.5")
