"""ipurun's command line: PopRun's option forms, config import/export, and refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ipu.errors import ConfigError, SlurmIpuError
from slurm_ipu.launcher import cli, partition, show
from slurm_ipu.launcher.options import OPTIONS
from slurm_ipu.launcher.plan import make_plan
from slurm_ipu.launcher.task import instance_env
from slurm_ipu.vipu import VipuClient

from .fake_vipu import FakeVipu


def vipu_with(**partitions):
    """A fake `vipu` holding these partitions (name=(size, GCDs)), and a client factory on it."""
    fake = FakeVipu()
    for name, (size, gcds) in partitions.items():
        fake(["vipu", "create", "partition", name, "--size", str(size), "--num-gcds", str(gcds)])
    fake.calls.clear()
    client = VipuClient(runner=fake, retries=0)
    return fake, lambda: client


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
    (["--offline-mode=maybe", "x"], "--offline-mode: 'maybe' is not a boolean; use yes/no"),
    (["--partition", "ipu", "x"], "srun option --partition needs its value as --partition=VALUE"),
    (["--vipu-alocation=a1", "x"], "unknown option '--vipu-alocation': neither ipurun's nor srun's; did you mean "
     "--vipu-allocation?"),
    (["--ntasks=4", "x"], r"--ntasks is set by ipurun \(use --num-instances\)"),
    (["--export-config=a.json", "--import-config=b.json", "x"], "--export-config and --import-config cannot be "
     "used together"),
    (["--tag-outptu", "x"], "did you mean --tag-output"),
    (["--num-instances", "2"], "no command to run"),
    (["--num-instances", "two", "x"], "--num-instances 'two': not an integer"),
    (["--num-replicas"], "--num-replicas needs a value"),
    (["--dry-run=yes", "x"], "--dry-run takes no value"),
])
def test_bad_command_lines(argv, words):
    with pytest.raises(ConfigError, match=words):
        cli.parse(argv)


def test_help_lists_every_option_from_the_table(capsys):
    with pytest.raises(SystemExit) as info:
        cli.parse(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert all(row[0] in text for row in OPTIONS) and "-H, --host VALUE" in text


def test_import_and_export_config(tmp_path):
    path = tmp_path / "run.json"
    ns, _, cmd = cli.parse(["--num-instances", "4", "--num-replicas", "8", f"--export-config={path}", "python3",
                            "train.py", "--lr=1"])
    assert cli.export_config(ns, cmd) == str(path)
    doc = json.loads(path.read_text())
    assert doc["num-instances"] == 4 and "export-config" not in doc
    assert doc["command"] == ["python3", "train.py", "--lr=1"]  # the program and its arguments too
    again = cli.export_config(ns, cmd)  # PopRun keeps the old file and stamps the new one's name
    assert again.startswith(f"{path}.") and json.loads(Path(again).read_text()) == doc and path.exists()
    ns.overwrite_config = True
    assert cli.export_config(ns, ["other"]) == str(path) and json.loads(path.read_text())["command"] == ["other"]
    ns2, _, cmd2 = cli.parse([f"--import-config={path}", "--num-replicas", "16"])
    assert (ns2.num_instances, ns2.num_replicas, cmd2) == (4, 16, ["other"])  # no command: the stored one
    ns3, _, cmd3 = cli.parse([f"--import-config={path}", "python3", "train.py", "--hyper-param=1"])
    assert cmd3 == ["python3", "train.py", "--hyper-param=1"]  # the command line wins
    path.write_text('{"num-instances": "four"}')
    with pytest.raises(ConfigError, match="--num-instances 'four': not an integer"):
        cli.parse([f"--import-config={path}", "x"])
    path.write_text('{"num-instancez": 2}')
    with pytest.raises(ConfigError, match="unknown option 'num-instancez'"):
        cli.parse([f"--import-config={path}", "x"])


def test_export_happens_only_after_every_option_is_checked(tmp_path):
    path = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.launcher.cli", "--num-instances", "3", "--num-replicas",
                           "8", "--offline-mode=1", f"--export-config={path}", "true"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and not path.exists()


@pytest.mark.parametrize("argv,env", [
    ([], {"POPLAR_ENGINE_OPTIONS": '{"autoReport.directory": "/x"}'}),
    # The guide's own quoting strips the JSON's double quotes: the check is textual.
    (["--mpi-local-args", '-x POPLAR_ENGINE_OPTIONS={autoReport.directory:/tmp/training/profile-directory}'], {}),
    (["--instance-mpi-local-args", '0:-x POPLAR_ENGINE_OPTIONS={"autoReport.directory":"/tmp/t/0"}'], {}),
])
def test_autoreport_conflicts_with_engine_options(argv, env):
    ns, extra, cmd = cli.parse(["--autoreport-dir=/r", "--num-instances=4", "--num-replicas=4", "--offline-mode",
                                *argv, "x"])
    with pytest.raises(ConfigError, match="autoreport-dir command line argument cannot be specified when "
                                          "POPLAR_ENGINE_OPTIONS contains autoReport.directory setting"):
        cli.build(ns, extra, cmd, env)


def test_srun_line_inside_an_allocation_step():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_STEP_ID": "0", "SLURM_CPUS_ON_NODE": "8"}
    ns, extra, cmd = cli.parse(["--num-instances", "8", "--num-replicas", "16", "train.py"])
    launch = cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(16, 1))[1])
    assert launch.srun[:9] == ["srun", "--nodes=4", "--ntasks=8", "--ntasks-per-node=2", "--distribution=block",
                               "--kill-on-bad-exit=1", "--label", "--cpu-bind=none", "--overlap"]
    assert launch.env["IPURUN_INSTANCES_PER_HOST"] == "2" and launch.cache_dir is None
    task = dict(env, **launch.env, SLURM_PROCID="3", SLURM_LOCALID="1")
    # per job and host, made by the node's job prolog where no user can write (spank/cache.c)
    assert instance_env(task, 3, 1)["POPDIST_EXECUTABLE_CACHE_PATH"] == "/var/cache/slurm-ipu/7"


@pytest.mark.parametrize("path,expected", [("/shared/cache", "/shared/cache"), ("", None)])
def test_explicit_or_empty_cache_path(path, expected):
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node1"}
    ns, extra, cmd = cli.parse([f"--executable-cache-path={path}", "train.py"])
    launch = cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(1, 1))[1])
    assert launch.cache_dir is None and launch.env["IPURUN_OWN_CACHE"] == "0"
    assert instance_env(dict(env, **launch.env), 0, 0).get("POPDIST_EXECUTABLE_CACHE_PATH") == expected


def test_wrapper_refuses_a_cache_directory_another_user_could_have_planted(tmp_path):
    planted = tmp_path / "ipurun-cache-7"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    env = {"PATH": "/usr/bin:/bin", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "IPURUN_NUM_INSTANCES": "1",
           "IPURUN_NUM_REPLICAS": "1", "IPURUN_IPUS_PER_REPLICA": "1", "IPURUN_INSTANCES_PER_HOST": "1",
           "IPURUN_PLACEMENT": "disabled", "IPURUN_CACHE_DIR": str(planted), "IPURUN_OWN_CACHE": "1"}
    proc = subprocess.run([sys.executable, "-S", "-I", cli.TASK, "--", "true"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2 and "is not a private directory" in proc.stderr
    planted.chmod(0o700)
    proc = subprocess.run([sys.executable, "-S", "-I", cli.TASK, "--", "true"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def test_local_run_removes_its_own_cache(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.launcher.cli", "--num-instances", "2", "--num-replicas",
                           "2", "--offline-mode=1", "sh", "-c", 'echo "$POPDIST_EXECUTABLE_CACHE_PATH"; '
                           'test -d "$POPDIST_EXECUTABLE_CACHE_PATH"'], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    paths = set(proc.stdout.split())
    assert len(paths) == 1 and paths.pop().startswith("/tmp/ipurun-cache-local-")
    assert not any(p.exists() for p in map(Path, proc.stdout.split()))


def test_srun_line_outside_an_allocation_asks_for_the_ipus():
    ns, extra, cmd = cli.parse(["--num-instances", "2", "--num-replicas", "4", "--ipus-per-replica", "2", "-H",
                                "n[1-2]", "x"])
    launch = cli.build(ns, extra, cmd, {})
    assert "--gres=ipu:4" in launch.srun and "--nodelist=n1,n2" in launch.srun


def test_topology_table_matches_poprun_layout():
    table = show.topology_table(make_plan(1, 4, 1, ["gc-poplar-02"]))
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
    assert proc.stderr.strip() == ("ipurun: 8 replicas do not divide evenly over 3 instances; "
                                   "use --num-instances 1, 2, 4, 8")


def test_gcds_come_from_the_partition_v_ipu_reports_in_one_read():
    """The job's --ipu-gcds (SPANK_IPU_GCDS) can be absent (salloc) or stale (an update on another
    host): instance k drives GCD k // (instances / GCDs) of the partition as V-IPU has it."""
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]", "SPANK_IPU_GCDS": "1",
           "IPUOF_VIPU_API_PARTITION_ID": "slurm_7", "TMPDIR": "/nonexistent"}
    fake, factory = vipu_with(slurm_7=(8, 2))
    ns, extra, cmd = cli.parse(["--num-instances", "4", "--num-replicas", "8", "x"])
    launch = cli.build(ns, extra, cmd, env, client_factory=factory)
    assert [i.gcd for i in launch.plan.instances()] == [0, 0, 1, 1] and launch.env["IPURUN_NUM_GCDS"] == "2"
    assert [c[:2] for c in fake.calls] == [["list", "partitions"]]
    ns, extra, cmd = cli.parse(["--num-instances", "3", "--num-replicas", "3", "-H", "node[1]", "x"])
    with pytest.raises(SlurmIpuError, match="cannot share them evenly; use a multiple of 2 instances, or submit the "
                                            "job with --ipu-gcds=1"):
        cli.build(ns, extra, cmd, env, client_factory=factory)


def test_salloc_shell_finds_the_jobs_partition_from_the_site_prefix(tmp_path):
    """No task, so no IPUOF_*: the partition is the site's prefix + the job id, and V-IPU is
    reached as the site description says, with the site's vipu but not the hooks' credentials
    file (root's: a user's own vipu configuration applies)."""
    site = tmp_path / "site.yaml"
    site.write_text("version: 1\ncluster: c\npartition:\n  prefix: pod7_\nvipu:\n  command: /opt/vipu/bin/vipu\n"
                    "  host: ctl\n  port: 8091\n  cli_config: /etc/slurm-ipu/hooks.hcl\n"
                    "pod: {ipus: 64, hosts: 'node[1-4]', ipus_per_host: 16}\n")
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_IPU_SITE": str(site)}
    ns, extra, cmd = cli.parse(["--num-instances", "4", "--num-replicas", "4", "x"])
    target = partition.locate(ns, env, inside=True)
    assert (target.name, target.host, target.port, target.command) == ("pod7_9", "ctl", 8091, ["/opt/vipu/bin/vipu"])
    launch = cli.build(ns, extra, cmd, env, client_factory=vipu_with(pod7_9=(4, 4))[1])
    assert [i.gcd for i in launch.plan.instances()] == [0, 1, 2, 3]


@pytest.mark.parametrize("argv,words", [
    (["--num-instances", "2", "--num-replicas", "32"], "32 replicas x 1 IPU.s. = 32 IPUs, but partition slurm_7 "
     "has 16; use --num-replicas 16 or fewer"),
    (["--num-instances", "2", "--num-replicas", "8", "--ipus-per-replica", "4"], "= 32 IPUs, but partition "
     "slurm_7 has 16; use --num-replicas 4 or fewer"),
    (["--num-instances", "2", "--num-replicas", "2", "--ipus-per-replica", "8"], "--ipus-per-replica 8: a replica "
     "takes 1, 2 or 4 IPUs .* use --ipus-per-replica 1 or 2 or 4"),
])
def test_a_request_larger_than_the_partition_is_refused_before_launch(argv, words):
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]", "IPUOF_VIPU_API_PARTITION_ID": "slurm_7"}
    ns, extra, cmd = cli.parse([*argv, "x"])
    with pytest.raises(SlurmIpuError, match=words):
        cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(16, 2))[1])


def test_a_job_without_ipus_is_told_so():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node1", "IPUOF_VIPU_API_PARTITION_ID": "slurm_7"}
    ns, extra, cmd = cli.parse(["x"])
    with pytest.raises(SlurmIpuError, match="partition slurm_7 does not exist: job 7 has no IPUs; submit it with "
                                            "--gres=ipu:N"):
        cli.build(ns, extra, cmd, env, client_factory=vipu_with()[1])
    ns, extra, cmd = cli.parse(["--vipu-partition", "other", "x"])
    with pytest.raises(SlurmIpuError, match="--vipu-partition other: no such partition"):
        cli.build(ns, extra, cmd, env, client_factory=vipu_with()[1])
    for step in ("slurm_7_0", "p7"):  # a step's, or Graphcore's p$SLURM_JOB_ID: still the job's name
        ns, extra, cmd = cli.parse(["x"])
        with pytest.raises(SlurmIpuError, match=f"partition {step} does not exist: job 7 has no IPUs"):
            cli.build(ns, extra, cmd, dict(env, IPUOF_VIPU_API_PARTITION_ID=step), client_factory=vipu_with()[1])


def test_a_job_whose_export_names_a_missing_partition_is_told_so_not_that_it_has_no_ipus():
    """A job with IPUs whose script exported a partition name of its own: the word is about the
    export, not a resubmission with --gres=ipu:N."""
    env = {"SLURM_JOB_ID": "38", "SLURM_JOB_NODELIST": "node1", "IPUOF_VIPU_API_PARTITION_ID": "mine",
           "IPUOF_VIPU_API_HOST": "127.0.0.1"}
    ns, extra, cmd = cli.parse(["--num-instances", "2", "--num-replicas", "2", "x"])
    with pytest.raises(SlurmIpuError) as refused:
        cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_38=(16, 1))[1])
    said = str(refused.value)
    assert said.startswith("partition mine does not exist (IPUOF_VIPU_API_PARTITION_ID names it)"), said
    assert "unset IPUOF_VIPU_API_PARTITION_ID to use job 38's own partition" in said and "--gres" not in said


def test_outside_an_allocation_the_gcds_are_the_ones_srun_asks_for():
    ns, extra, cmd = cli.parse(["--num-instances", "2", "--num-replicas", "4", "-H", "n[1-2]", "--ipu-gcds=2", "x"])
    launch = cli.build(ns, extra, cmd, {}, client_factory=_no_vipu)
    assert "--ipu-gcds=2" in launch.srun and [i.gcd for i in launch.plan.instances()] == [0, 1]


def _no_vipu():
    raise AssertionError("no V-IPU call expected")


def test_an_instance_killed_by_a_signal_is_the_root_cause():
    script = '[ "$SLURM_PROCID" = 1 ] && kill -9 $$; echo "done $SLURM_PROCID"'
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.launcher.cli", "--num-instances", "2", "--num-replicas",
                           "2", "--offline-mode", "bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 128 + 9, proc.stderr
    assert "ipurun: instance 1 failed first: killed by signal 9" in proc.stderr and "done 0" in proc.stdout


def test_dry_run_into_a_closed_pipe_is_quiet():
    # 256 instances print far more than a pipe holds, so ipurun is still writing when head leaves.
    proc = subprocess.run(f"{sys.executable} -m slurm_ipu.launcher.cli --num-instances 256 --num-replicas 256 "
                          "--process-placement=disabled --offline-mode=1 --dry-run true | head -1; "
                          "echo \"rc=${PIPESTATUS[0]}\"", shell=True, executable="/bin/bash", capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.splitlines()[0].startswith("ipurun plan: 256 instance(s)") and proc.stderr == ""
    assert proc.stdout.splitlines()[1] == "rc=141"


def test_verbose_says_the_plan_and_the_command_on_stderr_then_runs():
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.launcher.cli", "-v", "--num-instances", "2",
                           "--num-replicas", "4", "--offline-mode=1", "echo", "ran"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.split() == ["ran", "ran"]
    assert proc.stderr.splitlines()[:3] == [
        "ipurun: plan: 2 instance(s) x 2 replica(s) x 1 IPU(s) = 4 IPUs on 1 host(s), placement spreadnuma",
        "ipurun: V-IPU: none (offline, or no partition in this job)",
        "ipurun: local launch (offline, no Slurm): echo ran"]


def test_more_instances_than_allocated_cpus_overcommit_only_where_cpus_are_shared():
    """The README's own example: 4 instances in a 2-node job that has one CPU per node."""
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_CPUS_PER_NODE": "1(x2)",
           "IPUOF_VIPU_API_PARTITION_ID": "slurm_7"}
    ns, extra, cmd = cli.parse(["--num-instances", "4", "--num-replicas", "8", "x"])
    launch = cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(8, 2))[1])
    assert "--overcommit" in launch.srun
    ns, extra, cmd = cli.parse(["--num-instances", "4", "--num-replicas", "8", "--process-placement=close", "x"])
    with pytest.raises(SlurmIpuError, match="2 instances per host, but this allocation has 1 CPU"):
        cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(8, 2))[1])
    env["SLURM_JOB_CPUS_PER_NODE"] = "4,2"
    ns, extra, cmd = cli.parse(["--num-instances", "4", "--num-replicas", "8", "x"])
    assert "--overcommit" not in cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(8, 2))[1]).srun


@pytest.mark.parametrize("args,level", [(["-v"], 1), (["-vv"], 2), (["-vvv"], 3), (["--verbose", "-v"], 2),
                                        (["-v", "-vv"], 3), ([], 0)])
def test_verbosity_is_counted_as_poprun_counts_it(args, level):
    """PopRun's -v, -vv, -vvv: scripts written for it pass -vv."""
    ns, _extra, _cmd = cli.parse([*args, "--num-instances", "2", "true"])
    assert ns.verbose == level


def test_vv_shows_each_instance_s_environment_and_vvv_srun_s_own_messages():
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.launcher.cli", "-vv", "--num-instances", "2",
                           "--num-replicas", "4", "--offline-mode=1", "echo", "ran"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.split() == ["ran", "ran"]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ipurun: instance ")]
    assert len(lines) == 2 and "POPDIST_INSTANCE_INDEX=1" in lines[1] and "POPDIST_NUM_INSTANCES=2" in lines[0], lines
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_CPUS_PER_NODE": "4",
           "IPUOF_VIPU_API_PARTITION_ID": "slurm_7"}
    for flags, has in ((["-vvv"], True), (["-vv"], False)):
        ns, extra, cmd = cli.parse([*flags, "--num-instances", "2", "--num-replicas", "2", "x"])
        launch = cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(2, 1))[1])
        assert ("--verbose" in launch.srun) is has


# Command lines as Graphcore's own scripts write them (docs/ipurun.md), `poprun` -> `ipurun`.
GRAPHCORE_LINES = [
    ("-vv --vipu-partition=pod64 --host lr17-1-poplar-1,lr17-1-poplar-2,lr17-1-poplar-3,lr17-1-poplar-4 "
     "--update-partition=yes --print-topology=yes --mpi-global-args=\"--tag-output --allow-run-as-root  --mca "
     "oob_tcp_if_include 10.5.17.0/24 --mca btl_tcp_if_include 10.5.17.0/24 \" --num-replicas=16 --numa-aware=yes "
     "--num-ilds=4 --num-instances=4 --ipus-per-replica=4 python3 main.py train --config_file configs/train.yaml",
     {"verbose": 2, "vipu_partition": "pod64", "num_ilds": 4, "num_instances": 4, "process_placement": "spreadnuma",
      "update_partition": True}, 0),
    ("-vv --host h1,h2 --numa-aware 1 --mpi-global-args='--tag-output --allow-run-as-root --mca oob_tcp_if_include "
     "eno1 --mca btl_tcp_if_include eno1' --vipu-partition=p --update-partition=yes --reset-partition=no "
     "--vipu-server-host 10.1.3.101 --num-instances 2 --only-output-from-instance 0 --num-replicas 4 "
     "--ipus-per-replica 1 python3 train.py --config c",
     {"verbose": 2, "vipu_server_host": "10.1.3.101", "reset_partition": False, "only_output_from_instance": 0}, 0),
    ("--only-output-from-instance 0 --host h1,h2 --num-instances 2 --num-replicas 8 --ipus-per-replica 2 "
     "--vipu-server-host=10.0.0.1 --vipu-allocation=alloc --reset-partition=no --update-partition=yes "
     "--remove-partition=no --vipu-partition=p --print-topology=yes  --vipu-server-timeout=500 python3 train.py",
     {"vipu_allocation": "alloc", "remove_partition": False, "vipu_server_timeout": 500}, 0),
    ("--numa-aware=no --vipu-cluster c1 --vipu-partition-attempts 3 --distribute-ssh-key=yes --host-subnet "
     "10.5.17.0/24 --synchronise-python-venv=yes --synchronise-poplar-sdk=yes --allow-run-as-root 1 "
     "--num-instances 1 python3 x.py",
     {"process_placement": "disabled", "vipu_allocation": "c1"}, 7),
]


@pytest.mark.parametrize("line,values,notes", GRAPHCORE_LINES)
def test_poprun_lines_from_graphcore_scripts_parse(line, values, notes):
    import shlex

    opts, _extra, command = cli.parse(shlex.split(line))
    assert command[0] == "python3"
    assert {k: getattr(opts, k) for k in values} == values
    assert len(opts.notes) == notes and all(": " in n for n in opts.notes)


def test_version_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.launcher.cli", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("ipurun (slurm-ipu ") and proc.stdout.count("\n") == 1


def test_in_an_allocation_shell_with_nothing_configured_ipurun_says_what_to_set(tmp_path, monkeypatch):
    """salloc's shell has no IPUOF_* (no task): without a configuration ipurun stops with one line
    instead of letting vipu try localhost:8090."""
    from slurm_ipu import config

    monkeypatch.setattr(config.loader, "DEFAULT_SITE", str(tmp_path / "absent.yaml"))
    monkeypatch.setattr(config.loader, "installed", lambda key: None)
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_CPUS_PER_NODE": "4(x2)"}
    ns, extra, cmd = cli.parse(["--num-instances", "2", "--num-replicas", "2", "x"])
    with pytest.raises(ConfigError, match=f"no V-IPU controller known here: {tmp_path}/absent.yaml does not exist and "
                                          "IPUOF_VIPU_API_HOST is unset"):
        cli.build(ns, extra, cmd, env)


def test_a_hostfile_names_the_hosts_as_poprun_reads_it(tmp_path):
    """PopRun's --hostfile: one host per line; comments, blank lines and an MPI hostfile's slots=N
    are read past, a line may be a hostlist, and the step runs on exactly those hosts."""
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# the job's last two nodes\nnode3 slots=1\n\n  node4  # second\n")
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_JOB_CPUS_PER_NODE": "4(x4)",
           "IPUOF_VIPU_API_PARTITION_ID": "slurm_7"}
    ns, extra, cmd = cli.parse(["--hostfile", str(hosts), "--num-instances", "2", "--num-replicas", "2", "x"])
    launch = cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(2, 1))[1])
    assert "--nodelist=node3,node4" in launch.srun and "--nodes=2" in launch.srun
    hosts.write_text("node[1-2]\n")
    ns, extra, cmd = cli.parse(["--hostfile", str(hosts), "--num-instances", "2", "--num-replicas", "2", "x"])
    assert "--nodelist=node1,node2" in cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(2, 1))[1]).srun


@pytest.mark.parametrize("content,argv,message", [
    ("# nothing\n\n", [], "--hostfile {f} names no host; put one per line, or use --host"),
    ("node1\n", ["--host", "node2"], "--host node2 and --hostfile {f} both name the hosts; give one of them"),
    ("node9\n", [], "--host node9 is not in this job's nodes (node[1-4])"),
])
def test_a_hostfile_that_cannot_be_followed_is_one_line(tmp_path, content, argv, message):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(content)
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_JOB_CPUS_PER_NODE": "4(x4)",
           "IPUOF_VIPU_API_PARTITION_ID": "slurm_7"}
    ns, extra, cmd = cli.parse(["--hostfile", str(hosts), *argv, "--num-instances", "1", "x"])
    with pytest.raises(ConfigError) as err:
        cli.build(ns, extra, cmd, env, client_factory=vipu_with(slurm_7=(1, 1))[1])
    assert str(err.value) == message.format(f=hosts)


@pytest.mark.parametrize("argv,message", [
    (["-n", "2"], "-n is srun's --ntasks, which ipurun sets itself: use --num-instances"),
    (["-N2"], "-N is srun's --nodes, which ipurun sets itself: ipurun sets it from the hosts; use --host"),
    (["-p", "gpu"], "-p is srun's --partition: give it to ipurun as --partition=VALUE (srun's options go through "
                    "in their long form)"),
    (["-u"], "-u is srun's --unbuffered: give it to ipurun as --unbuffered (srun's options go through in their "
             "long form)"),
])
def test_srun_s_short_options_get_their_long_form_named(argv, message):
    """`ipurun ... -n 2` used to say '-n' was neither ipurun's nor srun's."""
    with pytest.raises(ConfigError) as err:
        cli.parse([*argv, "--num-instances", "2", "x"])
    assert str(err.value) == message


def test_outside_an_allocation_a_refused_srun_gets_ipurun_s_own_line(capsys):
    """The README's line run outside an allocation ended with srun's bare 'CPU
    count per node can not be satisfied'; ipurun now says what it asked for and what to do."""
    ns, extra, cmd = cli.parse(["--host", "node1", "--num-instances", "8", "--num-replicas", "8", "--offline-mode=1",
                                "true"])
    launch = cli.build(ns, extra, cmd, {})
    assert not launch.inside and launch.srun is not None
    launch.srun = ["/bin/sh", "-c", "echo 'srun: error: CPU count per node can not be satisfied' >&2; exit 1", "sh"]
    assert cli.run(launch) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "srun: error: CPU count per node can not be satisfied"
    assert err[1] == ("ipurun: srun started no instance (exit 1; Slurm's reason is above): outside an allocation it "
                      "asks Slurm itself for 1 node(s) with 8 instance(s) each; get the nodes first (salloc or sbatch "
                      "with -N and --gres=ipu:N) and run ipurun inside that job: it spreads the instances over the "
                      "job's nodes")


def test_an_instance_that_fails_gets_no_not_started_line(capsys):
    ns, extra, cmd = cli.parse(["--host", "node1", "--num-instances", "1", "--offline-mode=1", "true"])
    launch = cli.build(ns, extra, cmd, {})
    launch.srun = ["/bin/sh", "-c", "echo '0: boom'; exit 3", "sh"]
    assert cli.run(launch) == 3
    assert "started no instance" not in capsys.readouterr().err
