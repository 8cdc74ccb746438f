"""ipurun's command line: PopRun's option forms, config import/export, and refusals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slurm_ipu.errors import ConfigError
from slurm_ipu.launcher import cli
from slurm_ipu.launcher.plan import make_plan


@pytest.mark.parametrize("argv,key,value,command", [
    (["--offline-mode=1", "echo", "hi"], "offline_mode", True, ["echo", "hi"]),
    (["--offline-mode", "no", "echo"], "offline_mode", False, ["echo"]),
    (["--offline-mode", "echo"], "offline_mode", True, ["echo"]),
    (["--print-topology=on", "--", "--weird"], "print_topology", True, ["--weird"]),
    (["--num-instances", "4", "prog", "--num-instances", "9"], "num_instances", 4, ["prog", "--num-instances", "9"]),
    (["-H", "host[0-2,4]", "x"], "host", "host[0-2,4]", ["x"]),
])
def test_poprun_option_forms(argv, key, value, command):
    ns, extra, cmd = cli.parse(argv)
    assert getattr(ns, key) == value and cmd == command and extra == []


def test_srun_options_pass_through():
    ns, extra, cmd = cli.parse(["--partition=ipu", "--srun-arg=--exclusive", "--num-instances=2", "run"])
    assert extra == ["--partition=ipu", "--exclusive"] and ns.num_instances == 2


@pytest.mark.parametrize("argv,words", [
    (["--offline-mode=maybe", "x"], "SystemExit"),
    (["--partition", "ipu", "x"], "unknown option '--partition'"),
    (["--num-instances", "2"], "no command to run"),
])
def test_bad_command_lines(argv, words):
    if words == "SystemExit":
        with pytest.raises(SystemExit):
            cli.parse(argv)
    else:
        with pytest.raises(ConfigError, match=words):
            cli.parse(argv)


def test_import_and_export_config(tmp_path):
    path = tmp_path / "run.json"
    ns, _, _ = cli.parse(["--num-instances", "4", "--num-replicas", "8", f"--export-config={path}", "x"])
    cli.export_config(ns)
    doc = json.loads(path.read_text())
    assert doc["num-instances"] == 4 and "export-config" not in doc
    with pytest.raises(ConfigError, match="--overwrite-config=yes"):
        cli.export_config(ns)
    ns2, _, _ = cli.parse([f"--import-config={path}", "--num-replicas", "16", "x"])
    assert (ns2.num_instances, ns2.num_replicas) == (4, 16)  # the command line wins
    path.write_text('{"num-instancez": 2}')
    with pytest.raises(ConfigError, match="unknown option 'num-instancez'"):
        cli.parse([f"--import-config={path}", "x"])


def test_autoreport_conflicts_with_engine_options():
    ns, extra, cmd = cli.parse(["--autoreport-dir=/r", "--offline-mode", "x"])
    with pytest.raises(ConfigError, match="conflicts with autoReport.directory"):
        cli.build(ns, extra, cmd, {"POPLAR_ENGINE_OPTIONS": '{"autoReport.directory": "/x"}'})


def test_srun_line_inside_an_allocation_step():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_STEP_ID": "0", "SLURM_CPUS_ON_NODE": "8"}
    ns, extra, cmd = cli.parse(["--num-instances", "8", "--num-replicas", "16", "train.py"])
    launch = cli.build(ns, extra, cmd, env)
    assert launch.srun[:9] == ["srun", "--nodes=4", "--ntasks=8", "--ntasks-per-node=2", "--distribution=block",
                               "--kill-on-bad-exit=1", "--label", "--cpu-bind=none", "--overlap"]
    assert launch.env["IPURUN_INSTANCES_PER_HOST"] == "2" and launch.cache_dir.startswith("/tmp/ipurun-cache-7-")


def test_srun_line_outside_an_allocation_asks_for_the_ipus():
    ns, extra, cmd = cli.parse(["--num-instances", "2", "--num-replicas", "4", "--ipus-per-replica", "2", "-H",
                                "n[1-2]", "x"])
    launch = cli.build(ns, extra, cmd, {})
    assert "--gres=ipu:4" in launch.srun and "--nodelist=n1,n2" in launch.srun


def test_topology_table_matches_poprun_layout():
    table = cli.topology_table(make_plan(1, 4, 1, ["gc-poplar-02"]))
    assert table.splitlines() == [
        " ===========================",
        "|      ipurun topology      |",
        "|===========================|",
        "| hosts     | gc-poplar-02  |",
        "|-----------|---------------|",
        "| ILDs      |       0       |",
        "|-----------|---------------|",
        "| instances |       0       |",
        "|-----------|---------------|",
        "| replicas  | 0 | 1 | 2 | 3 |",
        " ---------------------------",
    ]


def test_offline_installation_check_prints_hello_twice():
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.launcher.cli", "--num-instances", "2", "--num-replicas",
                           "2", "--offline-mode=1", "echo", "Hello world!"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["Hello world!", "Hello world!"]


def test_first_failing_instance_sets_the_exit_code_and_the_report():
    script = 'echo "line $SLURM_PROCID"; [ "$SLURM_PROCID" = 1 ] && exit 5; exit 0'
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.launcher.cli", "--num-instances", "2", "--num-replicas",
                           "2", "--offline-mode", "bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 5
    assert "ipurun: instance 1 failed first: exit code 5" in proc.stderr and "    line 1" in proc.stderr


def test_refusal_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.launcher.cli", "--num-instances", "3", "--num-replicas",
                           "8", "--offline-mode=1", "true"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "ipurun: 8 replicas do not divide evenly over 3 instances; use --num-instances 1, 2, 4, 8"


@pytest.mark.parametrize("flag", ["--update-partition=yes", "--reset-partition=1"])
def test_partition_changes_are_refused_not_ignored(flag):
    ns, extra, cmd = cli.parse([flag, "--offline-mode=1", "x"])
    with pytest.raises(ConfigError, match="not supported yet"):
        cli.build(ns, extra, cmd, {})
