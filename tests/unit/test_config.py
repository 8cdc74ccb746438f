"""Configuration: one precedence order, each layer tested; strict keys; the example stays true."""

from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return str(p)


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "absent.yaml"))
    cfg = config.load(environ={})
    assert cfg["partition.prefix"] == "slurm_" and cfg["vipu.port"] is None


def test_each_layer_overrides_the_one_below(tmp_path):
    path = write(tmp_path, "version: 1\nvipu:\n  timeout: 5\n  retries: 4\npartition:\n  prefix: ipu_\n")
    env = {"SLURM_IPU_VIPU_RETRIES": "7", "SLURM_IPU_PARTITION_PREFIX": "env_"}
    cfg = config.load(path, overrides={"partition.prefix": "cli_"}, environ=env)
    assert cfg["vipu.timeout"] == 5.0          # file over default
    assert cfg["vipu.retries"] == 7            # env over file
    assert cfg["partition.prefix"] == "cli_"   # command line over env
    assert cfg["prolog.deadline"] == 60.0      # default


def test_config_path_from_env(tmp_path):
    path = write(tmp_path, "version: 1\npod:\n  ipus: 256\n")
    assert config.load(environ={"SLURM_IPU_CONFIG": path})["pod.ipus"] == 256


@pytest.mark.parametrize("text,words", [
    ("version: 1\nvipu:\n  comand: x\n", "did you mean 'vipu.command'"),
    ("version: 2\n", "start the file with 'version: 1'"),
    ("vipu:\n  port: 1\n", "version None"),
    ("version: 1\nvipu:\n  port: many\n", "vipu.port='many' is not a valid int"),
    ("version: 1\nvipu:\n  emulator_flags: maybe\n", "not a valid bool"),
    ("- 1\n", "expected a mapping"),
    ("version: 1\n  bad: [\n", "not valid YAML at line 2, column 6"),
    ("version: 1\nprolog:\n  deadline: -5\n", "prolog.deadline=-5 is out of range; use a positive number of seconds"),
    ("version: 1\nvipu:\n  port: 99999\n", "vipu.port=99999 is out of range; use from 1 to 65535"),
    ("version: 1\npod:\n  ipus: 96\n", "pod.ipus=96 is out of range; use a Pod size"),
    ("version: 1\npartition:\n  prefix: slurm job\n", "partition.prefix='slurm job' is out of range; use 1 to 31 "
     "letters, digits and '-_'"),
    ("version: 1\nprolog:\n  max_attempts: 0\n", "prolog.max_attempts=0 is out of range; use from 1 to 100"),
    ("version: 1\nepilog:\n  deadline: .nan\n", "epilog.deadline=nan is out of range"),
])
def test_bad_files_name_the_key_and_the_fix(tmp_path, text, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        config.load(write(tmp_path, text), environ={})


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        config.load(str(tmp_path / "missing.yaml"), environ={})


@pytest.mark.parametrize("raw,value", [("yes", True), ("on", True), ("1", True), ("no", False), ("off", False)])
def test_booleans_from_env(raw, value):
    assert config.load(environ={"SLURM_IPU_VIPU_EMULATOR_FLAGS": raw})["vipu.emulator_flags"] is value


def test_example_file_is_generated_from_the_table_and_loads():
    example = ROOT / "etc" / "slurm-ipu.yaml"
    assert example.read_text() == config.example_yaml(), (
        "regenerate: python -c 'from slurm_ipu.config import example_yaml; print(example_yaml(), end=\"\")' "
        "> etc/slurm-ipu.yaml")
    cfg = config.load(str(example), environ={})
    assert all(cfg[o.key] == o.default for o in config.OPTIONS)


def test_hooks_name_a_missing_default_file(tmp_path, monkeypatch):
    """A hook without /etc/slurm-ipu/config.yaml would talk to no controller at all: say so."""
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "absent.yaml"))
    with pytest.raises(ConfigError, match="absent.yaml not found; create it from etc/slurm-ipu.yaml or point "
                                          "SLURM_IPU_CONFIG at yours"):
        config.load(environ={}, required=True)


def test_environment_values_are_range_checked_too():
    with pytest.raises(ConfigError, match="environment: vipu.port='0' is out of range"):
        config.load(environ={"SLURM_IPU_VIPU_PORT": "0"})


@pytest.mark.skipif(Path(config.DEFAULT_PATH).exists(), reason="this machine has a site configuration")
def test_a_hook_without_its_configuration_says_which_file_in_one_line():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "epilog"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "5"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"slurm-ipu: config file {config.DEFAULT_PATH} not found; create it from "
                                   "etc/slurm-ipu.yaml or point SLURM_IPU_CONFIG at yours")


def test_an_install_s_commands_find_its_own_config_and_site(tmp_path, monkeypatch):
    """make install records where it put the config and the site description (PREFIX's manifest);
    its commands, which run PREFIX/venv, read them with no environment variable (issue 24, item 4)."""
    import json
    import sys

    prefix = tmp_path / "opt" / "slurm-ipu"
    (prefix / "share" / "slurm-ipu").mkdir(parents=True)
    conf = tmp_path / "elsewhere" / "config.yaml"
    conf.parent.mkdir()
    conf.write_text("version: 1\nvipu: {host: 10.1.2.3, port: 8091}\n")
    (prefix / "share" / "slurm-ipu" / "manifest.json").write_text(json.dumps(
        {"prefix": str(prefix), "entries": [], "config": str(conf), "site": str(tmp_path / "elsewhere/site.yaml")}))
    monkeypatch.setattr(sys, "prefix", str(prefix / "venv"))
    assert config.default_path() == str(conf) and config.default_site() == str(tmp_path / "elsewhere/site.yaml")
    cfg = config.load(environ={})
    assert (cfg["vipu.host"], cfg["vipu.port"], cfg.source) == ("10.1.2.3", 8091, str(conf))
    (tmp_path / "x.yaml").write_text("version: 1\n")
    assert config.load(environ={"SLURM_IPU_CONFIG": str(tmp_path / "x.yaml")}).source == str(tmp_path / "x.yaml")


def test_outside_an_install_the_defaults_are_etc(tmp_path, monkeypatch):
    import sys

    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    assert (config.default_path(), config.default_site()) == (config.DEFAULT_PATH, config.DEFAULT_SITE)
