"""The one configuration table: the site description's precedence (each layer tested), strict
keys, environment twins, the files generated from the table, an install finding its own file,
and the upgrade from the earlier two-file layout."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.boolean import parse_bool
from slurm_ipu.deploy import example
from slurm_ipu.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BASE = "version: 1\ncluster: c1\nvipu:\n  host: v\npod:\n  ipus: 64\n  hosts: n[1-4]\n  ipus_per_host: 16\n"


def write(tmp_path, text, name="site.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_each_layer_overrides_the_one_below(tmp_path):
    path = write(tmp_path, BASE.replace("  host: v\n", "  host: v\n  timeout: 5\n  retries: 4\n") +
                 "partition:\n  prefix: ipu_\n")
    env = {"SLURM_IPU_VIPU_RETRIES": "7", "SLURM_IPU_PARTITION_PREFIX": "env_"}
    site = config.load(path, overrides={"partition.prefix": "cli_"}, environ=env)
    assert site.vipu.timeout == 5.0          # file over default
    assert site.vipu.retries == 7            # env over file
    assert site.partition.prefix == "cli_"   # command line over env
    assert site.prolog.deadline == 60.0      # default


def test_the_hooks_read_the_file_alone(tmp_path):
    """A job's environment must not move the hooks' V-IPU calls: twins=False ignores every twin."""
    path = write(tmp_path, BASE)
    env = {"SLURM_IPU_VIPU_HOST": "evil.example.org", "SLURM_IPU_STATE_DIR": "/tmp/x"}
    site = config.load(path, environ=env, twins=False)
    assert (site.vipu.host, site.state_dir) == ("v", "/var/lib/slurm-ipu")
    assert config.load(path, environ=env).vipu.host == "evil.example.org"


def test_site_path_from_env(tmp_path):
    path = write(tmp_path, BASE.replace("ipus: 64", "ipus: 256"))
    assert config.load(environ={"SLURM_IPU_SITE": path}).pod.ipus == 256


@pytest.mark.parametrize("raw,value", [("yes", True), ("on", True), ("1", True), ("no", False), ("off", False)])
def test_booleans_from_env(tmp_path, raw, value):
    assert config.load(write(tmp_path, BASE), environ={"SLURM_IPU_VIPU_EMULATOR": raw}).vipu.emulator is value


@pytest.mark.parametrize("env,words", [
    ({"SLURM_IPU_VIPU_PORT": "0"}, "environment: vipu.port=0 is out of range; use from 1 to 65535"),
    ({"SLURM_IPU_VIPU_PORT": "many"}, "environment: SLURM_IPU_VIPU_PORT='many' is not a int"),
    ({"SLURM_IPU_VIPU_EMULATOR": "maybe"}, "SLURM_IPU_VIPU_EMULATOR='maybe' is not a bool; use yes or no"),
])
def test_environment_values_are_checked_like_the_file_s(tmp_path, env, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        config.load(write(tmp_path, BASE), environ=env)


def test_lists_have_no_twin():
    assert config.BY_KEY["pods"].env is None and config.BY_KEY["vipu.host"].env == "SLURM_IPU_VIPU_HOST"


@pytest.mark.parametrize("rel", sorted(example.generated()))
def test_the_example_and_the_options_reference_are_generated_from_the_table(rel):
    assert (ROOT / rel).read_text() == example.generated()[rel], f"regenerate {rel}: make generated"


def test_the_example_loads_and_sets_every_option():
    site = config.load(str(ROOT / example.EXAMPLE), environ={})
    assert (site.cluster, site.pod.ipus, [p.name for p in site.pods]) == ("ipupod128", 128, ["poda", "podb"])
    text = (ROOT / example.EXAMPLE).read_text()
    assert all(f"{f.key.rpartition('.')[2]}:" in text for f in config.FIELDS)
    options = (ROOT / example.OPTIONS).read_text()
    assert all(f"| `{f.key}` |" in options for f in config.FIELDS)


def test_a_missing_default_file_names_itself_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(config.loader, "DEFAULT_SITE", str(tmp_path / "absent.yaml"))
    with pytest.raises(ConfigError, match=f"site description {tmp_path}/absent.yaml not found; install slurm-ipu "
                                          "with `make install SITE=...` or point SLURM_IPU_SITE at"):
        config.load(environ={})
    with pytest.raises(ConfigError, match="missing.yaml: No such file or directory; start from etc/site-pod128.yaml"):
        config.load(str(tmp_path / "missing.yaml"), environ={})


@pytest.mark.skipif(Path(config.DEFAULT_SITE).exists(), reason="this machine has a site description")
def test_a_hook_without_its_configuration_says_which_file_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "epilog"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "5"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"slurm-ipu: site description {config.DEFAULT_SITE} not found; install "
                                   "slurm-ipu with `make install SITE=...` or point SLURM_IPU_SITE at the site "
                                   "description")


def test_an_install_s_commands_find_its_own_site(tmp_path, monkeypatch):
    """make install records where it put the site description (PREFIX's manifest); its commands,
    which run PREFIX/venv, read it with no environment variable."""
    prefix = tmp_path / "opt" / "slurm-ipu"
    (prefix / "share" / "slurm-ipu").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = write(elsewhere, BASE.replace("host: v", "host: 10.1.2.3\n  port: 8091"))
    (prefix / "share" / "slurm-ipu" / "manifest.json").write_text(json.dumps(
        {"prefix": str(prefix), "entries": [], "site": path}))
    monkeypatch.setattr(sys, "prefix", str(prefix / "venv"))
    assert config.default_site() == path
    site = config.load(environ={})
    assert (site.vipu.host, site.vipu.port, site.source) == ("10.1.2.3", 8091, path)
    other = write(tmp_path, BASE, "x.yaml")
    assert config.load(environ={"SLURM_IPU_SITE": other}).source == other


def test_outside_an_install_the_default_is_etc(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    assert config.default_site() == config.DEFAULT_SITE


@pytest.mark.parametrize("text,words", [
    (BASE + "install:\n  config: /etc/slurm-ipu/config.yaml\n",
     "site.yaml:10: install.config belongs to an earlier slurm-ipu's config.yaml: the site description is the one "
     "file now; replace it with install.site"),
    ("version: 1\nvipu:\n  command: vipu\n  emulator_flags: true\npod:\n  ipus: 64\n  pods: 'a:1:n[1-4]'\n",
     "site.yaml:4: vipu.emulator_flags belongs to an earlier slurm-ipu's config.yaml: the site description is the "
     "one file now; point --site or SLURM_IPU_SITE at the site description"),
])
def test_an_earlier_release_s_files_name_the_upgrade(tmp_path, text, words):
    with pytest.raises(ConfigError) as err:
        config.load(write(tmp_path, text), environ={})
    assert words in str(err.value) and "docs/admin.md, Upgrading" in str(err.value)


def test_error_lines_cost_the_hooks_nothing(tmp_path, mocker):
    """The key-to-line map is a second YAML parse: made only for an error message."""
    lines = mocker.spy(config.site, "key_lines")
    config.load(write(tmp_path, BASE), environ={})
    assert lines.call_count == 0
    with pytest.raises(ConfigError, match="site.yaml:4: vipu.host='a b'"):
        config.load(write(tmp_path, BASE.replace("host: v", "host: a b")), environ={})


@pytest.mark.parametrize("text,value", [("yes", True), ("Off", False), ("1", True), ("perhaps", None)])
def test_one_boolean_parser(text, value):
    assert parse_bool(text) is value


def test_a_section_given_twice_is_refused_where_an_admin_looks(tmp_path):
    """YAML keeps the last of two `vipu:` sections: the first one's port would be dropped silently."""
    path = write(tmp_path, BASE + "vipu:\n  host: v\n  port: 8091\n")
    site = config.load(path, environ={})  # the hooks read it as YAML does
    with pytest.raises(ConfigError, match=r"site.yaml:9: vipu is given twice \(first at line 3\); YAML keeps the "
                                          "last and drops the first: merge them into one"):
        config.refuse_repeated_keys(site)
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "render", path, "--out", str(tmp_path / "o"),
                           "--slurm-conf", "none"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "vipu is given twice" in proc.stderr and not (tmp_path / "o").exists()
    config.refuse_repeated_keys(config.load(write(tmp_path, BASE), environ={}))  # one of each: fine


def test_a_valid_multi_pod_site_costs_no_second_parse(tmp_path, mocker):
    lines = mocker.spy(config.site, "key_lines")
    site = config.load(str(ROOT / "etc" / "site-pod128.yaml"), environ={})
    assert lines.call_count == 0 and len(site.pods) == 2


# --- the allocation model ------------------------------------------------------

def _allocation_site(tmp_path, **pod):
    from .conftest import write_conf

    extra = {"vipu": {"model": "allocation"}}
    if pod:
        extra["pod"] = pod
    return config.load(str(write_conf(tmp_path, **extra)), environ={})


def test_a_host_s_ipu_machines_are_its_pod_s_in_hostlist_order(tmp_path):
    site = _allocation_site(tmp_path)  # node[1-4], 16 IPUs (4 IPU-Machines) each
    assert site.agents_of(["node2"]) == ["ag4", "ag5", "ag6", "ag7"]
    assert site.agents_of(["node1", "node4"]) == ["ag0", "ag1", "ag2", "ag3", "ag12", "ag13", "ag14", "ag15"]
    assert site.job_prefixes == ("c",) and site.models == {"allocation"} and site.model_for(["node9"]) == "allocation"


def test_pods_follow_each_other_in_the_mapping(tmp_path):
    from .conftest import write_conf

    pods = [{"name": "poda", "hosts": "node[1-4]"}, {"name": "podb", "hosts": "node[5-8]"}]
    site = config.load(str(write_conf(tmp_path, pods=pods, vipu={"model": "allocation", "allocation": "all"})),
                       environ={})
    assert site.agents_of(["node5"]) == ["ag16", "ag17", "ag18", "ag19"]


@pytest.mark.parametrize("over,words", [
    ({"vipu": {"model": "allocations"}}, "vipu.model='allocations'"),
    ({"vipu": {"model": "allocation"}, "pod": {"ipus_per_host": 6}},
     "pod.ipus_per_host=6 with vipu.model allocation: a host's jobs get its whole IPU-Machines of 4 IPUs each; use a "
     "multiple of 4"),
])
def test_what_the_allocation_model_cannot_be_is_one_line(tmp_path, over, words):
    from .conftest import write_conf

    with pytest.raises(ConfigError) as err:
        config.load(str(write_conf(tmp_path, **over)), environ={})
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_host_in_no_pod_has_no_machines_and_says_so(tmp_path):
    site = _allocation_site(tmp_path)
    with pytest.raises(ConfigError) as err:
        site.agents_of(["node1", "login1"])
    assert "host login1 is in no Pod of the site description" in str(err.value)


def test_a_default_that_breaks_a_rule_is_named_as_the_default(tmp_path):
    from .conftest import write_conf

    with pytest.raises(ConfigError) as err:  # epilog.deadline left at its default of 30
        config.load(str(write_conf(tmp_path, prolog_epilog_timeout=20)), environ={})
    assert "epilog.deadline=30 (the default) must be below prolog_epilog_timeout=20" in str(err.value)


# --- the model per Pod group, and IPU-Machine names ---------------------------

def _mixed(tmp_path, pods, groups=None, **extra):
    from .conftest import write_conf

    extra = {"vipu": {"allocation": "all", **extra.pop("vipu", {})}, **extra}
    if groups:
        extra["pod_groups"] = groups
    return config.load(str(write_conf(tmp_path, pods=pods, **extra)), environ={})


FOUR_PODS = [{"name": f"pod{c}", "hosts": f"node[{4 * k + 1}-{4 * k + 4}]"} for k, c in enumerate("abcd")]


def test_each_pod_has_its_model_its_own_its_group_s_or_the_site_s(tmp_path):
    pods = [dict(FOUR_PODS[0], model="allocation"), *FOUR_PODS[1:]]
    site = _mixed(tmp_path, pods, [{"name": "cd", "pods": ["podc", "podd"], "model": "allocation"}])
    assert site.models == {"allocation", "partition"}
    assert [p.name for p in site.pods_of_model("allocation")] == ["poda", "podc", "podd"]
    assert site.model_for(["node1", "node2"]) == "allocation" and site.model_for(["node5"]) == "partition"
    assert site.model_for([f"node{k}" for k in range(9, 17)]) == "allocation"  # group cd
    assert site.job_prefixes == ("c", "slurm_")
    assert site.job_name(42, ["node1"]) == "c42" and site.job_name(42, ["node5"]) == "slurm_42"
    assert site.kind_of("c42") == "allocation" and site.kind_of("slurm_42") == "partition"
    assert site.kind_of("c42x") == "partition"  # not a job's allocation name
    with pytest.raises(ConfigError) as err:
        site.model_for(["node1", "node5"])
    assert str(err.value) == ("the job's hosts are in Pods poda (allocation), podb (partition), of both V-IPU models; "
                              "a job gets one: give each model its own Slurm partition")
    assert site.job_name(7, ["node1", "node5"]) == "slurm_7"  # the prolog refused it: nothing of its was made
    # the agents of Pod c's first host: Pods a and b hold 16 IPU-Machines each before it
    assert site.agents_of(["node9"]) == ["ag32", "ag33", "ag34", "ag35"]


def test_a_site_of_one_model_never_looks_at_the_hosts(tmp_path):
    site = _mixed(tmp_path, FOUR_PODS, vipu={"model": "allocation"})
    assert site.models == {"allocation"} and site.model_for(["not-a-host"]) == "allocation"


@pytest.mark.parametrize("pods,groups,extra,words", [
    ([dict(FOUR_PODS[0], model="allocations"), *FOUR_PODS[1:]], None, {},
     "Pod poda: model='allocations' is out of range; use partition or allocation"),
    ([dict(FOUR_PODS[2], model="partition"), FOUR_PODS[0], FOUR_PODS[1], FOUR_PODS[3]],
     [{"name": "cd", "pods": ["podc", "podd"], "model": "allocation"}], {},
     "Pod podc: model=partition but its group cd has model=allocation; a group's Pods share one model"),
    ([dict(FOUR_PODS[2], model="allocation"), FOUR_PODS[0], FOUR_PODS[1], FOUR_PODS[3]],
     [{"name": "cd", "pods": ["podc", "podd"]}], {},
     "group cd: its Pods' models differ (podc: allocation, podd: partition); a job over them gets one V-IPU object: "
     "give the group one model"),
    (FOUR_PODS, [{"name": "cd", "pods": ["podc", "podd"], "model": "x"}], {},
     "group cd: model='x' is out of range; use partition or allocation"),
    ([dict(FOUR_PODS[0], model="allocation"), *FOUR_PODS[1:]], None, {"allocation": {"prefix": "slurm_c"}},
     "allocation.prefix='slurm_c' and partition.prefix='slurm_' with Pods of both models: neither may begin the "
     "other"),
    ([dict(FOUR_PODS[0], model="allocation"), *FOUR_PODS[1:]], None, {"pod": {"ipus_per_host": 2}},
     "pod.ipus_per_host=2 with vipu.model allocation"),
    ([dict(FOUR_PODS[0], agents="ag[1-15]"), *FOUR_PODS[1:]], None, {},
     "Pod poda: agents='ag[1-15]' must name the Pod's 16 IPU-Machines (64 IPUs, 4 each) once each, in V-IPU's "
     "order, as a hostlist (e.g. ag[01-16])"),
    ([dict(FOUR_PODS[0], agents="m[1-16]"), *FOUR_PODS[1:]], None, {"vipu": {"emulator": True}},
     "vipu.emulator with agents named: the emulator names its IPU-Machines ag0, ag1, ...; leave agents out"),
    (FOUR_PODS, None, {"pod": {"agents": "ag[1-64]"}}, "pod.agents and pods: both given"),
])
def test_what_a_model_or_agents_key_cannot_be_is_one_line(tmp_path, pods, groups, extra, words):
    with pytest.raises(ConfigError) as err:
        _mixed(tmp_path, pods, groups, **extra)
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_real_pod_s_ipu_machines_are_named_as_v_ipu_names_them(tmp_path):
    from .conftest import write_conf

    site = config.load(str(write_conf(tmp_path, vipu={"model": "allocation"}, pod={"agents": "ipum[01-16]"})),
                       environ={})
    assert site.agents_of(["node2"]) == ["ipum05", "ipum06", "ipum07", "ipum08"]
    pods = [dict(FOUR_PODS[0], agents="a-m[1-16]"), dict(FOUR_PODS[1], agents="b-m[1-16]")]
    site = _mixed(tmp_path, pods, vipu={"model": "allocation"})
    assert site.agents_of(["node4", "node5"]) == ["a-m13", "a-m14", "a-m15", "a-m16", "b-m1", "b-m2", "b-m3", "b-m4"]


# --- typed sections: a key is read as site.<section>.<key>, never by its dotted name -------------

SITE_NAMES = {"site", "cfg", "self.cfg", "self.site", "desc", "s", "spec.site"}


def _reads(root: Path):
    """(file, line, section, key) of every `<site>.<section>.<key>` read, and (file, line, key) of
    every `<site>["dotted.key"]`, in the Python under root (the config package left out)."""
    import ast

    from slurm_ipu.config import sections

    typed, by_name = [], []
    for path in sorted(root.rglob("*.py")):
        if "slurm_ipu/config/" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and \
                    node.value.attr in sections.SECTIONS and ast.unparse(node.value.value) in SITE_NAMES:
                typed.append((path, node.lineno, node.value.attr, node.attr))
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
                    node.slice.value in config.BY_KEY and ast.unparse(node.value) in SITE_NAMES:
                by_name.append((path, node.lineno, node.slice.value))
    return typed, by_name


def test_every_section_read_names_a_key_of_the_table():
    """A misspelt key (site.vipu.hots) is caught here, not as an AttributeError in a prolog."""
    import dataclasses

    from slurm_ipu.config import sections

    fields = {name: {f.name for f in dataclasses.fields(kind)} for name, kind in sections.SECTIONS.items()}
    typed, _ = _reads(ROOT / "slurm_ipu")
    wrong = [f"{p.relative_to(ROOT)}:{line}: {section}.{key}" for p, line, section, key in typed
             if key not in fields[section]]
    assert len(typed) > 100 and wrong == []


def test_nothing_outside_the_config_package_reads_a_key_by_its_dotted_name():
    _, by_name = _reads(ROOT / "slurm_ipu")
    _, in_tests = _reads(ROOT / "tests")
    assert [f"{p.relative_to(ROOT)}:{line}: {key}" for p, line, key in by_name + in_tests] == []


def test_a_loaded_site_is_typed_and_frozen(tmp_path):
    import dataclasses

    loaded = config.load(write(tmp_path, BASE), environ={})
    assert (loaded.vipu.host, loaded.vipu.port, loaded.prolog.deadline, loaded.cluster) == ("v", 8090, 60.0, "c1")
    with pytest.raises(TypeError):
        loaded["vipu.host"]  # noqa: B018 - the old way must fail, not read
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.vipu.host = "elsewhere"
    with pytest.raises(TypeError):
        loaded.values["vipu.host"] = "elsewhere"
    assert config.reread(loaded, vipu__host="elsewhere").vipu.host == "elsewhere" and loaded.vipu.host == "v"


def test_the_sections_hold_every_key_of_the_table_once():
    import dataclasses

    from slurm_ipu.config import sections
    from slurm_ipu.deploy.example import INTERNAL

    held = {f"{name}.{f.name}" for name, kind in sections.SECTIONS.items() for f in dataclasses.fields(kind)}
    assert held | set(sections.TOP) | set(INTERNAL) == set(config.BY_KEY)
    assert len(held) + len(sections.TOP) + len(INTERNAL) == len(config.BY_KEY)


# --- a Pod's own IPUs per host ------------------------------------------------

def test_a_pod_may_name_its_own_ipus_per_host_and_every_reader_takes_it_per_host(tmp_path):
    pods = [dict(FOUR_PODS[0], ipus_per_host=16), *FOUR_PODS[1:]]
    site = _mixed(tmp_path, pods)
    assert [p.ipus_per_host for p in site.pods] == [16, 16, 16, 16]
    assert site.host_ipus()["node1"] == site.host_ipus()["node16"] == 16
    assert site.host_agents()["node5"] == ["ag16", "ag17", "ag18", "ag19"]
    assert site.host_features() == {}  # hosts alike: no size class


def test_pods_of_different_host_sizes_are_classes_of_their_own(tmp_path):
    pods = [{"name": "poda", "hosts": "node[1-4]"}, {"name": "podb", "hosts": "node[5-6]", "ipus_per_host": 32},
            {"name": "podc", "hosts": "node7", "ipus_per_host": 64}, {"name": "podd", "hosts": "node[8-11]"}]
    site = _mixed(tmp_path, pods)
    assert [(c.size, c.pods, c.hosts, c.ilds, c.hostlist, c.ipus) for c in site.size_classes()] == [
        (16, 2, 4, 1, "node[1-4],node[8-11]", 128), (32, 1, 2, 1, "node[5-6]", 64), (64, 1, 1, 1, "node7", 64)]
    assert site.host_ipus() == {**{f"node{k}": 16 for k in (1, 2, 3, 4, 8, 9, 10, 11)}, "node5": 32, "node6": 32,
                                "node7": 64}
    assert site.host_agents()["node6"] == ["ag24", "ag25", "ag26", "ag27", "ag28", "ag29", "ag30", "ag31"]
    assert site.host_agents()["node7"] == [f"ag{k}" for k in range(32, 48)]
    assert site.host_features()["node5"] == ["ipuhost32"] and site.host_features()["node11"] == ["ipuhost16"]


def test_a_group_of_pods_is_of_one_host_size(tmp_path):
    pods = [{"name": "poda", "hosts": "node[1-4]"}, {"name": "podb", "hosts": "node[5-6]", "ipus_per_host": 32},
            *FOUR_PODS[2:]]
    with pytest.raises(ConfigError) as err:
        _mixed(tmp_path, pods, [{"name": "ab", "pods": ["poda", "podb"]}])
    assert "group ab: pods=['poda', 'podb'] have hosts of 2 IPU counts" in str(err.value)


@pytest.mark.parametrize("pod,words", [
    ({"ipus_per_host": 0}, "Pod poda: ipus_per_host=0 is out of range; use 1 to 64"),
    ({"ipus_per_host": "16"}, "Pod poda: ipus_per_host='16' is out of range"),
    ({"ipus_per_host": 32}, "Pod poda's ipus_per_host=32 on Pod poda's 4 hosts is 128 IPUs, more than its 64"),
    # Pods of one host size alike, or a job over several of them would take part of one
    ({"hosts": "node[1-2]"}, "Pods poda, podb, podc, podd have hosts of 16 IPUs but not alike sizes"),
])
def test_a_pod_s_ipus_per_host_that_cannot_stand_is_one_line(tmp_path, pod, words):
    with pytest.raises(ConfigError) as err:
        _mixed(tmp_path, [dict(FOUR_PODS[0], **pod), *FOUR_PODS[1:]])
    assert words in str(err.value) and "\n" not in str(err.value)
