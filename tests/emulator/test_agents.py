"""IPU-Machine health in the emulator: `vipu-emu fault agent NAME
down|up|ipu-error N`, `vipu-admin list agents` / `get agent NAME`, no partition or allocation on a
failed machine's IPUs, and a running partition over one shows it (ERROR, an attach error naming
the machine) until it is back. Seen as a user of the emulator sees it: its CLIs and the client."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from slurm_ipu import errors
from slurm_ipu.emulator.process import EmulatorProcess

EMU = [sys.executable, "-m", "slurm_ipu.emulator.main"]


def fault(emu, *words: str) -> subprocess.CompletedProcess:
    return subprocess.run([*EMU, "fault", "agent", *words, "--state-dir", str(emu.state_dir)],
                          capture_output=True, text=True, timeout=30)


def deadline(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


def test_a_machine_goes_down_and_comes_back_as_vipu_admin_shows_it(emu, vipu):
    proc = fault(emu, "ag3", "down")
    assert proc.returncode == 0 and json.loads(proc.stdout)["status"] == "Down", proc.stderr
    rows = {line.split("|")[0].strip(): [c.strip() for c in line.split("|")]
            for line in vipu("list", "agents", check=True).stdout.splitlines() if line.startswith(" ag")}
    assert len(rows) == 16 and rows["ag3"][3] == "Down" and rows["ag2"][3] == "Up", rows
    shown = vipu("get", "agent", "ag3", check=True).stdout
    for words in ("Agent ID ", "| ag3", "Status", "| Down", "Exporter URL", "http://127.0.0.1:2112/metrics",
                  "Num of IPUs", "IPUoF server version", "Platform"):
        assert words in shown, shown
    assert json.loads(vipu("get", "agent", "ag3", "--showjson", check=True).stdout)["agent"]["status"] == "Down"
    assert json.loads(fault(emu, "ag3", "up").stdout)["status"] == "Up"
    assert "ipus_in_error" not in json.loads(vipu("get", "agent", "ag3", "--showjson", check=True).stdout)["agent"]


def test_a_create_never_takes_a_failed_machine_s_ipus_and_says_which_when_it_must(emu, client):
    fault(emu, "ag0", "down")
    part = client.ensure_partition("p4", 4, deadline())
    assert not set(part.ipus) & {0, 1, 2, 3}, part.ipus
    client.remove_partition("p4")
    with pytest.raises(errors.InsufficientIpus, match=r"IPU-Machine ag0 is down: its IPUs are unavailable"):
        client.create_partition("all", 64)
    fault(emu, "ag0", "up")
    assert client.ensure_partition("all", 64, deadline()).size == 64


def test_one_ipu_in_error_keeps_its_machine_s_block_out_of_new_partitions(emu, client):
    assert json.loads(fault(emu, "ag0", "ipu-error", "2").stdout)["ipus_in_error"] == [2]
    made = [client.ensure_partition(f"p{k}", 1, deadline()) for k in range(3)]
    assert 2 not in {i for p in made for i in p.ipus}, [p.ipus for p in made]


def test_a_running_partition_over_a_failed_machine_is_error_and_refuses_attaches_until_it_is_back(emu, client,
                                                                                                   admin):
    part = client.ensure_partition("run", 8, deadline(), hosts=["node1"])
    agent = f"ag{part.ipus[0] // 4}"
    fault(emu, agent, "down")
    assert client.get_partition("run").state == "ERROR"
    with pytest.raises(errors.VipuError, match=f"partition run is ERROR, not ACTIVE: IPU-Machine {agent} is down"):
        admin.attach("run", 0, 0, "node1")
    fault(emu, agent, "up")
    assert client.get_partition("run").state == "ACTIVE"
    assert len(admin.attach("run", 0, 0, "node1")["ipus"]) == 8


def test_an_allocation_of_a_failed_machine_is_refused_and_one_by_size_skips_it(emu, admin):
    fault(emu, "ag1", "down")
    with pytest.raises(errors.VipuError, match="allocation c7: IPU-Machine ag1 is down") as refused:
        admin.create_allocation("c7", ["ag0", "ag1"], [1000])
    assert refused.value.code == "RESOURCE_EXHAUSTED"  # the machines are busy, not the request malformed
    made = admin.create_allocation("c8", None, [1000], size=8)
    assert "ag1" not in made["agents"], made


def test_a_failed_machine_stays_failed_across_a_controller_restart(tmp_path):
    first = EmulatorProcess.start(tmp_path / "state", cluster="pod16")
    try:
        assert fault(first, "ag2", "ipu-error", "1").returncode == 0
    finally:
        first.stop()
    again = EmulatorProcess.start(tmp_path / "state", cluster="pod16")
    try:
        from slurm_ipu.emulator.api import Api

        api = Api(admin_socket=again.admin_socket, timeout=10)
        assert [a["id"] for a in api.agents() if a["status"] != "Up"] == ["ag2"]
    finally:
        again.stop()


@pytest.mark.parametrize("words,message", [
    (["ag99", "down"], "unknown agent 'ag99'; agents are ag0..ag15"),
    (["ag1", "ipu-error", "7"], "fault agent ag1 ipu-error 7: give the IPU's index in its IPU-Machine, 0 to 3"),
])
def test_a_fault_on_no_such_machine_or_ipu_is_one_line_exit_2(emu, words, message):
    proc = fault(emu, *words)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
