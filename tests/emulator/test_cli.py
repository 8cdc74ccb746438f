"""The vipu-compatible CLI against a running emulator."""

import json
import subprocess

import pytest

from .conftest import VIPU


def test_create_then_list_shows_active_partition(vipu):
    out = vipu("create", "partition", "p1", "--size", "8", check=True).stdout
    assert out.strip() == "create partition (p1): success."
    table = vipu("list", "partitions", check=True).stdout.splitlines()
    assert [c.strip() for c in table[0].split("|")] == ["Cluster", "Allocation", "Partition", "ILDs", "GW Routing",
                                                        "ILD Routing", "Size", "GCDs", "State"]
    row = [c.strip() for c in table[2].split("|")]
    assert row == ["pod64", "default", "p1", "1", "DEFAULT", "RINGSWNC", "8", "1", "ACTIVE"]
    # what scripts do with the table: grep ACTIVE | cut -d '|' -f 3
    assert [ln.split("|")[2].strip() for ln in table if "ACTIVE" in ln] == ["p1"]


@pytest.mark.parametrize("args,words", [
    (["--size", "3"], ["size 3", "1, 2, 4, 8, 16, 32, 64"]),
    (["--size", "0"], ["size 0", "1, 2, 4, 8, 16, 32, 64"]),
    (["--size", "128"], ["size 128", "1, 2, 4, 8, 16, 32, 64"]),
    (["--num-gcds", "3", "--size", "8"], ["--num-gcds 3", "1, 2, 4, 8"]),
])
def test_invalid_requests_fail_with_one_line_naming_valid_choices(vipu, args, words):
    proc = vipu("create", "partition", "px", *args)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0]
    assert "px" not in vipu("list", "partitions").stdout


def test_showjson_get_ipuof_remove_reset(vipu):
    vipu("create", "partition", "g", "--size", "16", "--num-gcds", "2", "--reconfigurable", check=True)
    parts = json.loads(vipu("list", "partitions", "--showjson", check=True).stdout)
    spec = parts[0]["partition"]["spec"]
    assert parts[0]["partition"]["id"] == "g" and spec["num_gcds"] == 2 and len(spec["ipus"]) == 16
    assert parts[0]["partition"]["status"]["state"] == "PS_ACTIVE" and spec["reconfigurable"] is True
    out = vipu("get", "partition", "g", "--gcd", "1", "--ipuof-configs", check=True).stdout.splitlines()
    doc = json.loads("\n".join(out[1:]))  # first line is a header, as `tail -n +2` expects
    gcd1 = doc["devices"]  # popart: len(j["devices"]); poptorch: j["attributes"].get("GCD Id")
    assert len(gcd1) == 8 and {i["gcd"] for i in gcd1} == {1} and doc["attributes"]["GCD Id"] == "1"
    assert set(i["id"] for i in gcd1).isdisjoint(i["id"] for i in spec["ipus"][:8])
    assert vipu("reset", "partition", "g", check=True).stdout.strip() == "reset partition (g): success."
    assert vipu("delete", "partition", "g", check=True).stdout.strip() == "delete partition (g): success."
    proc = vipu("remove", "partition", "g")
    assert proc.returncode == 1 and "not found" in proc.stderr


@pytest.mark.parametrize("flags,replicas", [
    (["--gcd-sync-replicas", "4"], 4),          # poptorch's tests: --size 4 --num-gcds 2 --gcd-sync-replicas 4
    (["--total-num-replicas=16"], 16),
    ([], 0),
])
def test_a_partition_shows_its_replica_count_as_poptorch_reads_it(vipu, flags, replicas):
    vipu("create", "partition", "r", "--size", "4", "--num-gcds", "2", *flags, check=True)
    spec = json.loads(vipu("list", "partitions", "--showjson", check=True).stdout)[0]["partition"]["spec"]
    assert (spec["num_gcds"], spec["num_replicas"], len(spec["ipus"])) == (2, replicas, 4)


def test_versions_and_allocations(vipu, emu):
    assert "1.18.0" in vipu("--version", check=True).stdout
    second = vipu("--server-version", check=True).stdout.splitlines()[1]
    assert second.split()[1] == f"127.0.0.1:{emu.port}"  # what config_pod.sh cuts out
    alloc = vipu("list", "allocations", check=True).stdout
    assert "default" in alloc and "ag15" in alloc


def test_globals_after_the_noun_and_env_address(emu, tmp_path):
    import subprocess
    import sys
    env = {"VIPU_CLI_API_HOST": "127.0.0.1", "VIPU_CLI_API_PORT": str(emu.port), "PATH": "/usr/bin:/bin"}
    base = [sys.executable, "-m", "slurm_ipu.emulator.vipucli"]
    proc = subprocess.run([*base, "list", "partitions", "--showjson"], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0 and json.loads(proc.stdout) == []
    hcl = tmp_path / "vipu-cli.hcl"
    hcl.write_text(f'api-host="127.0.0.1"\napi-port={emu.port}\n')
    proc = subprocess.run([*base, "--config", str(hcl), "list", "allocations"], capture_output=True, text=True,
                          timeout=30,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and "default" in proc.stdout


def test_unreachable_server_is_one_line(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.emulator.vipucli", "--api-host", "127.0.0.1",
                           "--api-port", "1", "list", "partitions"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr == "unable to connect to VIRM/V-IPU Controller at 127.0.0.1:1: context deadline exceeded\n"
    from slurm_ipu.errors import VipuUnavailable
    from slurm_ipu.vipu.parse import classify_error

    assert isinstance(classify_error(proc.stderr, 1), VipuUnavailable)  # transient: the client retries


def test_a_reader_that_leaves_early_gets_no_traceback(emu, vipu):
    for k in range(3):
        vipu("create", "partition", f"p{k}", "--size", "1", check=True)
    cmd = " ".join([*VIPU, "--api-host", "127.0.0.1", "--api-port", str(emu.port), "list", "partitions",
                    "--showjson"])
    # `true` is gone long before the CLI has started and prints: every write meets a closed pipe.
    proc = subprocess.run(["bash", "-c", f"{cmd} | true; echo ${{PIPESTATUS[0]}}"], capture_output=True, text=True,
                          timeout=30)
    assert proc.stdout.strip() == "141" and "Traceback" not in proc.stderr and "Error" not in proc.stderr


def test_list_cluster_answers_as_poptorch_reads_it(vipu):
    """Graphcore's tools count IPUs from `vipu list cluster --showjson`:
    len(clusters[0].spec.ipu_link_domains[0].ipus)."""
    import json

    clusters = json.loads(vipu("list", "cluster", "--showjson", check=True).stdout)
    assert len(clusters[0]["spec"]["ipu_link_domains"][0]["ipus"]) == 64
    assert clusters[0]["spec"]["num_ipus"] == 64
    table = vipu("list", "clusters", check=True).stdout
    assert "pod64" in table and "64" in table


@pytest.mark.parametrize("agents,ipus", [(["ag0", "ag1", "ag2"], 12), (["ag0", "ag1", "ag2", "ag3", "ag4"], 20)])
def test_an_allocation_of_no_valid_size_is_refused(agents, ipus):
    from slurm_ipu.emulator.model import cluster_from_dict
    from slurm_ipu.errors import ConfigError

    with pytest.raises(ConfigError, match=f"allocation 'a' holds {len(agents)} IPU-Machine\\(s\\) = {ipus} IPUs; "
                                          "an allocation is 4, 8, 16, 32, 64 IPUs or a multiple of 64"):
        cluster_from_dict({"allocations": {"all": "all", "a": agents}})
