"""Graphcore's own tools run against the emulator's CLI: their command lines verbatim (only the
controller's address is ours), read as their code reads the answers (/tmp survey of public code that
drives the V-IPU CLI; docs/vipu.md, "Forms Graphcore's tools run").

- caas-poplar-appliance (V-IPU 1.18.0, `vipu_ver` in group_vars), roles/ipum_infra/tasks/present.yml
  and absent.yml: `vipu-admin{{vipu_ver}} -H HOST -P 8091 ...`, JSON read with json_query and jq.
- poptorch python/distributed.py (2020, commit 2e0687a1): `vipu-cli -a --showjson ...`.
- popart tests/integration/distributed_replicated_graph_test.py: `shutil.which("vipu-cli")`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from slurm_ipu.emulator.api import Api
from slurm_ipu.emulator.process import EmulatorProcess
from slurm_ipu.emulator.vipucli import prog_name
from slurm_ipu.vipu.parse import parse_partitions

VIPU_VER = "1.18.0"  # caas group_vars/*.yaml: vipu_ver


@pytest.fixture
def tools(tmp_path):
    """A bin directory with the emulator's CLI under Graphcore's names (the lab adds bin/vipu-cli)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in (f"vipu-admin{VIPU_VER}", "vipu-cli"):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\nimport sys\nfrom slurm_ipu.emulator.vipucli import main\n"
                        "sys.exit(main())\n")
        path.chmod(0o755)
    return bin_dir


@pytest.fixture
def sh(tools, emu):
    """Runs one command line as a shell would split it, with the tools on PATH."""
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}

    def run(line: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(line.split(), capture_output=True, text=True, timeout=30,
                              env={**env, **(extra_env or {})})
    return run


def admin_cmd(emu, rest: str, **values) -> str:
    """`vipu-admin{{vipu_ver}} ... -H {{ vipu_servers[...]['floating_ip'] }} -P 8091 ...`, our address."""
    return rest.format(vipu=f"vipu-admin{VIPU_VER}", host="127.0.0.1", port=emu.port, **values)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def agent_ids(stdout: str) -> list[str]:
    # caas present.yml / absent.yml: `stdout | from_json | moreati.jq.jq('.allocation.spec.agent_ids')`
    return json.loads(stdout)["allocation"]["spec"]["agent_ids"]


def test_caas_builds_an_appliance_of_a_size_it_names(sh, emu, api):
    # caas roles/ipum_infra/tasks/present.yml: "Create the allocation of requested size"
    ok(sh(admin_cmd(emu, "{vipu} --showjson -H {host} -P {port} create allocation azimuth-1 --size 16")))
    # present.yml: "Get allocation properties" (with its --size), then the IPUMs it shuffles
    got = ok(sh(admin_cmd(emu, "{vipu} --showjson -H {host} -P {port} get allocation azimuth-1 --size 16")))
    assert agent_ids(got) == ["ag0", "ag1", "ag2", "ag3"]  # one ILD, consecutive
    assert json.loads(got)["allocation"]["id"] == "azimuth-1"
    assert json.loads(got)["allocation"]["spec"]["cluster_id"] == "pod64"
    # present.yml: "Create partition" (only rc != 0 is read)
    ok(sh(admin_cmd(emu, "{vipu} -H {host} -P {port} --showjson create partition user-part --size 16 "
                         "--allocation azimuth-1 --reconfigurable")))
    part = api.get_partition("user-part")["partition"]
    assert {i["agent"] for i in part["spec"]["ipus"]} == {"ag0", "ag1", "ag2", "ag3"}
    table = ok(sh(admin_cmd(emu, "{vipu} -H {host} -P {port} get allocation azimuth-1")))
    assert "azimuth-1" in table and "ag0 ag1 ag2 ag3" in table


def test_caas_learns_there_is_no_room_from_stderr(sh, emu, vipu):
    vipu("create", "partition", "busy", "--size", "4", check=True)  # holds ag0
    create = "{vipu} --showjson -H {host} -P {port} create allocation {name} --size {size}"
    picked = {}
    for name, size in (("a", 32), ("b", 16), ("c", 4), ("d", 8)):
        ok(sh(admin_cmd(emu, create, name=name, size=size)))
        picked[name] = agent_ids(ok(sh(admin_cmd(emu, "{vipu} --showjson -H {host} -P {port} get allocation {name}",
                                                 name=name))))
    # aligned runs around the busy machine: big ones first where they fit whole
    assert picked == {"a": [f"ag{k}" for k in range(8, 16)], "b": ["ag4", "ag5", "ag6", "ag7"], "c": ["ag1"],
                      "d": ["ag2", "ag3"]}
    proc = sh(admin_cmd(emu, create, name="e", size=4))
    # caas present.yml: when: '"no free allocation" in allocation_result.stderr'
    assert proc.returncode != 0 and "no free allocation" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "allocation e" in proc.stderr
    proc = sh(admin_cmd(emu, create, name="e", size=12))
    assert proc.returncode == 1 and "4, 8, 16, 32, 64 IPUs" in proc.stderr and "no free allocation" not in proc.stderr


def test_caas_tears_an_appliance_down(sh, emu, vipu):
    ok(sh(admin_cmd(emu, "{vipu} --showjson -H {host} -P {port} create allocation azimuth-1 --size 16")))
    for name, size in (("up1", "4"), ("up2", "8")):
        vipu("create", "partition", name, "--size", size, "--allocation", "azimuth-1", check=True)
    vipu("create", "partition", "elsewhere", "--size", "4", check=True)
    # caas absent.yml: "List partitions in our allocation (only)", then
    # json_query('partitions[*].id') of its stdout
    out = ok(sh(admin_cmd(emu, "{vipu}  -H {host} -P {port} list partitions --allocation azimuth-1 --showjson")))
    ids = [p["id"] for p in json.loads(out)["partitions"]]
    assert sorted(ids) == ["up1", "up2"]
    assert sorted(p.name for p in parse_partitions(out)) == ["up1", "up2"]  # our own client reads it too
    for part_var in ids:  # absent.yml: "Remove partitions in our allocation"
        ok(sh(admin_cmd(emu, "{vipu}  -H {host} -P {port} remove partition " + part_var + " --force")))
    # absent.yml: "List allocation - the return code shows if the expected alloc exists"
    got = ok(sh(admin_cmd(emu, "{vipu} -H {host} -P {port} --showjson get allocation azimuth-1")))
    assert agent_ids(got) == ["ag0", "ag1", "ag2", "ag3"]
    ok(sh(admin_cmd(emu, "{vipu}  -H {host} -P {port} remove allocation azimuth-1")))
    gone = sh(admin_cmd(emu, "{vipu} -H {host} -P {port} --showjson get allocation azimuth-1"))
    assert gone.returncode != 0 and gone.stdout == "" and gone.stderr.count("\n") == 1
    assert "allocation azimuth-1 not found" in gone.stderr
    # the comment above that list: "if allocation_name isn't known it throws an error"
    proc = sh(admin_cmd(emu, "{vipu}  -H {host} -P {port} list partitions --allocation azimuth-1 --showjson"))
    assert proc.returncode != 0 and "allocation azimuth-1 not found" in proc.stderr
    # present.yml: "Remove OLD allocation" passes --size too
    ok(sh(admin_cmd(emu, "{vipu} --showjson -H {host} -P {port} create allocation azimuth-0 --size 4")))
    ok(sh(admin_cmd(emu, "{vipu} -H {host} -P {port} remove allocation azimuth-0 --size 4")))
    assert [p["partition"]["id"] for p in json.loads(ok(vipu("list", "partitions", "--showjson")))] == ["elsewhere"]


def test_the_short_address_flags_also_follow_the_noun(sh, emu):
    out = ok(sh(admin_cmd(emu, "{vipu} list partitions -H {host} -P {port} --showjson")))
    assert json.loads(out) == []  # no --allocation: the array, as before


def test_poptorch_and_popart_find_and_drive_vipu_cli(sh, emu):
    env = {"VIPU_CLI_API_HOST": "127.0.0.1", "VIPU_CLI_API_PORT": str(emu.port)}  # poptorch gives no address
    cli = "vipu-cli -a --showjson "  # poptorch distributed.py _vipu_cli()
    version = ok(sh(cli + "--version", env))  # isAvailable(): success is all it reads
    assert version.startswith(f"vipu-cli {VIPU_VER}")
    # numIpus(): clusters[0]["spec"]["ipu_link_domains"][0]["ipus"]
    clusters = json.loads(ok(sh(cli + "list cluster", env)))
    assert len(clusters) == 1 and len(clusters[0]["spec"]["ipu_link_domains"][0]["ipus"]) == 64
    ok(sh(cli + "create partition pt --size 4 --num-gcds 2 --gcd-sync-replicas 4", env))  # createPartition()
    # listPartitions(): p["partition"]["id"], len(...["spec"]["ipus"]), ["num_gcds"], ["num_replicas"]
    listed = {p["partition"]["id"]: (len(p["partition"]["spec"]["ipus"]), p["partition"]["spec"]["num_gcds"],
                                     p["partition"]["spec"]["num_replicas"])
              for p in json.loads(ok(sh(cli + "list partition", env)))}
    assert listed == {"pt": (4, 2, 4)}
    ok(sh(cli + "reset partition pt", env))  # resetPartition()
    ok(sh(cli + "delete partition pt", env))  # deletePartition()
    assert json.loads(ok(sh(cli + "list partition", env))) == []


def test_popart_finds_vipu_cli_on_path(tools):
    # popart distributed_replicated_graph_test.py: `shutil.which("vipu-cli")` decides whether it runs
    assert shutil.which("vipu-cli", path=str(tools)) == str(tools / "vipu-cli")


@pytest.mark.parametrize("argv0,prog", [
    ("/opt/bin/vipu-cli", "vipu-cli"), ("vipu-admin1.18.0", "vipu-admin1.18.0"), ("vipu", "vipu"),
    ("/x/slurm_ipu/emulator/vipucli.py", "vipu"), ("-c", "vipu"), ("vipu-emu", "vipu"),
])
def test_the_cli_answers_to_each_graphcore_name(argv0, prog):
    assert prog_name(argv0) == prog


def test_a_size_picks_whole_pods_and_free_machines_anywhere_last(tmp_path):
    """pod256: a created allocation nests in the file's alloc-a (ILDs 0-1) or alloc-b (ILDs 2-3),
    never straddles them; machines that are not consecutive serve when nothing consecutive is free."""
    emu = EmulatorProcess.start(tmp_path / "state", cluster="pod256")
    try:
        api = Api("127.0.0.1", emu.port, timeout=10)
        with pytest.raises(Exception, match="no free allocation of 128 IPUs .* never equals nor straddles"):
            api.create_allocation("x", None, size=128)  # it would be alloc-a or alloc-b itself
        assert api.create_allocation("x", None, size=64)["agents"] == [f"ag{k}" for k in range(16)]
        api.create_allocation("y", ["ag32"])
        assert api.create_allocation("z", None, size=64)["agents"] == [f"ag{k}" for k in range(16, 32)]
        assert api.create_allocation("z2", None, size=64)["agents"] == [f"ag{k}" for k in range(48, 64)]
        for k in range(33, 48, 2):  # every other machine of ILD 2 in an allocation of its own
            api.create_allocation(f"odd{k}", [f"ag{k}"])
        assert api.create_allocation("w", None, size=16)["agents"] == ["ag34", "ag36", "ag38", "ag40"]
        with pytest.raises(Exception, match="no free allocation of 32 IPUs"):
            api.create_allocation("v", None, size=32)
        with pytest.raises(Exception, match="give --agents or --size, not both"):
            api.create_allocation("v", ["ag42"], size=4)
    finally:
        emu.stop()
