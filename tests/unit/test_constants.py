"""One value, one source, across the languages the import graph cannot see: the
C side (the SPANK plugin, slurm-ipu-hook) writes a few of the Python side's values out again, since
it is built apart from the package; each pair is held equal here. (job_submit.lua, slurm-ipu-hook's
settings and the lab's C vipu are rendered or built from the Python values themselves.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_ipu import config, rules
from slurm_ipu.hooks import transport
from slurm_ipu.launcher import partition, task

ROOT = Path(__file__).resolve().parents[2]


def c_define(path: str, name: str) -> str:
    text = (ROOT / path).read_text()
    found = re.search(rf"^#define {name} (\S+)", text, re.M)
    assert found, f"{path} defines no {name}"
    return found.group(1).strip('"')


def c_default(path: str, field: str) -> str:
    """A default the plugstack parser strcpy()s into ipu_conf.FIELD before reading its arguments."""
    found = re.search(rf'strcpy\(ipu_conf\.{field}, "([^"]*)"\);', (ROOT / path).read_text())
    assert found, f"{path} sets no default {field}"
    return found.group(1)


@pytest.mark.parametrize("c_value,python_value", [
    (lambda: c_default("spank/args.c", "vipu_port"), lambda: str(rules.VIPU_PORT)),
    (lambda: c_default("spank/args.c", "vipu_port"), lambda: str(config.BY_KEY["vipu.port"].default)),
    (lambda: c_default("spank/args.c", "prefix"), lambda: config.BY_KEY["partition.prefix"].default),
    (lambda: c_define("spank/args.c", "PREFIX_CHARS"), lambda: config.PREFIX_CHARS),
    (lambda: c_define("spank/hook/hook.c", "NO_SERVICE"), lambda: str(transport.NO_SERVICE)),
    (lambda: c_define("spank/spank_ipu.h", "IPU_JOB_CACHE_ROOT"), lambda: task.JOB_CACHE_ROOT),
    (lambda: c_define("spank/cache.c", "STATE_FMT"), lambda: f"{partition.STATE_ROOT}/ipurun-job-%u.json"),
    (lambda: c_define("spank/instance.c", "MPOL_BIND"), lambda: str(task.MPOL_BIND)),
    (lambda: c_define("spank/spank_ipu.h", "IPU_TOTAL_MAX"), lambda: str(rules.MAX_CLUSTER_ILDS * rules.IPUS_PER_ILD)),
    (lambda: c_define("spank/spank_ipu.h", "IPU_GCDS_MAX"), lambda: str(rules.MAX_CLUSTER_ILDS * rules.IPUS_PER_ILD)),
    (lambda: c_define("spank/spank_ipu.h", "IPU_ILDS_MAX"), lambda: str(rules.MAX_CLUSTER_ILDS)),
], ids=["port", "port-option", "prefix", "prefix-chars", "no-service", "job-cache-root", "run-record", "mpol-bind",
        "ipus-max", "gcds-max", "ilds-max"])
def test_the_c_side_holds_the_python_side_s_value(c_value, python_value):
    assert c_value() == python_value()


def c_words(path: str, array: str) -> set[str]:
    found = re.search(rf"\*?{array}\[\] = \{{([^}}]*)\}}", (ROOT / path).read_text())
    assert found, f"{path} has no word list {array}[]"
    return set(re.findall(r'"([^"]*)"', found.group(1)))


def test_the_plugin_reads_a_boolean_option_with_the_python_side_s_words():
    from slurm_ipu import boolean

    assert (c_words("spank/args.c", "yes"), c_words("spank/args.c", "no")) == (set(boolean.TRUE), set(boolean.FALSE))


def test_the_plugin_names_a_job_s_partition_as_the_hooks_do():
    from slurm_ipu.hooks.jobenv import JobContext

    found = re.findall(r'snprintf\(partition, sizeof\(partition\), "([^"]*)", ipu_conf\.prefix, job_id\)',
                       (ROOT / "spank/spank_ipu.c").read_text())
    assert found, "spank/spank_ipu.c no longer names the partition from the prefix and the job id"
    context = JobContext(job_id=55, uid=0, nodes=("node1",), ipus=4)
    assert {fmt.replace("%s", "slurm_").replace("%u", "55") for fmt in found} == {context.partition("slurm_")}


def test_the_uninstall_removes_the_cache_root_the_launcher_and_the_plugin_use():
    """deploy may not import the launcher, so install.py names the job prolog's cache root itself."""
    from slurm_ipu.deploy import install

    assert install.JOB_CACHE_ROOT == task.JOB_CACHE_ROOT


def test_the_plugin_holds_partition_names_to_the_rule_table():
    """A step's partition name the plugin hands its tasks: rules.NAME_MAX characters and a NUL,
    of rules.NAME_CHARS."""
    assert c_define("spank/spank_ipu.h", "IPU_NAME_MAX") == str(rules.NAME_MAX + 1)
    found = re.search(r'strspn\(out, "([^"]+)"\)', (ROOT / "spank/spank_ipu.c").read_text())
    assert found and set(found.group(1)) == set(rules.NAME_CHARS) and len(found.group(1)) == len(rules.NAME_CHARS)


def test_the_plugin_sets_the_job_control_names_job_submit_lua_reads():
    from slurm_ipu.slurm import limits

    text = (ROOT / "spank/spank_ipu.c").read_text()
    names = set(re.findall(r'pass_on\(sp, "([A-Z_]+)"', text))
    assert names == set(limits.SPANK_COUNTS) | {"IPU_RECONFIGURABLE"}  # the counts job_submit.lua checks, a flag
    prolog_reads = (ROOT / "slurm_ipu/hooks/jobenv.py").read_text()  # slurmctld adds SPANK_ for the hooks
    assert all(f'"SPANK_{name}"' in prolog_reads for name in names - {"IPU_IPUS"})
