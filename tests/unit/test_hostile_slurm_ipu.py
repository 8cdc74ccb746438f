"""Hostile and careless input to the admin's command, `slurm-ipu` (render, rules, status, doctor,
reap, lab): one line naming the value and the fix, exit code 2, no traceback, nothing started or
written (the hooks' entry point: test_hostile_hooks.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SITES = {
    "pod96.yaml": "version: 1\ncluster: x\nvipu: {host: v}\npod: {ipus: 96, hosts: 'n[1-6]', ipus_per_host: 16}\n",
    "nohost.yaml": "version: 1\ncluster: x\npod: {ipus: 64, hosts: 'n[1-4]', ipus_per_host: 16}\n",
    "broken.yaml": "version: 1\ncluster: x\n  pod: [\n",
    # A Pod of a few zeros too many (render ran for minutes, or a MemoryError), and
    # a 200 KB value (echoed whole on the error line)
    "podhuge.yaml": "version: 1\ncluster: x\nvipu: {host: v}\npod: {ipus: 6400000000000, hosts: 'n[1-6]', "
                    "ipus_per_host: 16}\n",
    "longhost.yaml": "version: 1\ncluster: x\nvipu: {host: " + "h" * 200000 + "}\npod: {ipus: 64}\n",
    # a 200 KB hostlist that does not parse (its error line named it whole)
    "longhosts.yaml": "version: 1\ncluster: x\nvipu: {host: v}\npod: {ipus: 64, ipus_per_host: 16, hosts: 'n[1-"
                      + "9" * 200000 + "'}\n",
}


@pytest.fixture
def here(tmp_path):
    for name, text in SITES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("argv,line", [
    (["rules", "--ipus", "96"], "slurm-ipu: --ipus 96: 96 IPUs is not a Pod size; use 4, 8, 16, 32, 64 or a multiple "
     "of 64 up to 1024 (whole IPU-Machines: IPU-POD16, POD64, POD128, POD256)"),
    (["rules", "--ipus", "6400000000000"], "slurm-ipu: --ipus 6400000000000: 6400000000000 IPUs is not a Pod size; "
     "use 4, 8, 16, 32, 64 or a multiple of 64 up to 1024 (whole IPU-Machines: IPU-POD16, POD64, POD128, POD256)"),
    (["rules", "--ipus", "x"], "slurm-ipu rules: error: argument --ipus: invalid int value: 'x'"),
    (["render", "{d}/pod96.yaml", "--out", "{d}/out"], "slurm-ipu: {d}/pod96.yaml:4: pod.ipus=96 is out of range; "
     "use a Pod size: 4, 8, 16, 32, 64 or a multiple of 64 up to 1024; a bigger cluster is pods:"),
    (["render", "{d}/podhuge.yaml", "--out", "{d}/out"], "slurm-ipu: {d}/podhuge.yaml:4: pod.ipus=6400000000000 is out "
     "of range; use a Pod size: 4, 8, 16, 32, 64 or a multiple of 64 up to 1024; a bigger cluster is pods:"),
    (["render", "{d}/longhost.yaml", "--out", "{d}/out"], "slurm-ipu: {d}/longhost.yaml:3: vipu.host='"
     + "h" * 39 + "...(200002 characters) is out of range; use a host name or address"),
    (["render", "{d}/longhosts.yaml", "--out", "{d}/out"], "slurm-ipu: {d}/longhosts.yaml:4: pod.hosts='n[1-"
     + "9" * 35 + "...(200006 characters): hostlist 'n[1-" + "9" * 35 + "...(200006 characters): unbalanced '['"),
    (["render", "{d}/nohost.yaml", "--out", "{d}/out"], "slurm-ipu: {d}/nohost.yaml:1: vipu.host must be set (the "
     "V-IPU controller's address (vipu --api-host); required unless controllers: names each)"),
    (["render", "{d}/broken.yaml", "--out", "{d}/out"], "slurm-ipu: {d}/broken.yaml:3: not valid YAML: mapping "
     "values are not allowed here"),
    (["render", "{d}/none.yaml", "--out", "{d}/out"], "slurm-ipu: site description {d}/none.yaml: No such file or "
     "directory; start from etc/site-pod128.yaml"),
    (["status", "--site", "{d}/broken.yaml"], "slurm-ipu: {d}/broken.yaml:3: not valid YAML: mapping values are not "
     "allowed here"),
    (["status", "--days", "0", "--site", "{d}/pod96.yaml"], "slurm-ipu status: error: argument --days: --days '0': "
     "use a number of days above 0, at most 3660"),
    (["doctor", "--site", "{d}/none.yaml"], "slurm-ipu: site description {d}/none.yaml: No such file or directory; "
     "start from etc/site-pod128.yaml"),
    (["reap", "--site", "{d}/none.yaml"], "slurm-ipu: site description {d}/none.yaml: No such file or directory; "
     "start from etc/site-pod128.yaml"),
    (["service", "--site", "{d}/broken.yaml"], "slurm-ipu: {d}/broken.yaml:3: not valid YAML: mapping values are not "
     "allowed here"),
    # the service's spelling in earlier releases' units and admins' scripts: the same service
    (["reap", "--watch", "--site", "{d}/broken.yaml"], "slurm-ipu: {d}/broken.yaml:3: not valid YAML: mapping values "
     "are not allowed here"),
    (["lab", "up", "--dir", "{d}/lab", "--nodes", "3"], "slurm-ipu lab: 3 nodes x 16 IPUs = 48 IPUs is not a Pod: "
     "use 4, 8, 16, 32, 64 or a multiple of 64 (e.g. --nodes 4 --ipus-per-node 16)"),
    (["lab", "up", "--dir", "{d}/lab", "--ctld-port", "99999"], "slurm-ipu lab: --ctld-port 99999 is not a port the "
     "lab can use; use 1024 to 65535"),
    (["lab", "up", "--dir", "{d}/lab", "--ctld-port", "17002"], "slurm-ipu lab: the lab's ports overlap "
     "(--ctld-port 17002, --node-port 17001, --vipu-port 8090, and 4 slurmd ports from --node-port); give each its "
     "own"),
    (["lab", "up", "--dir", "{d}/lab", "--accounting", "--db-port", "80"], "slurm-ipu lab: --db-port 80 is not a "
     "port the lab can use; use 1024 to 65535"),
])
def test_one_line_exit_2_nothing_written(here, argv, line):
    argv = [a.format(d=here) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", *argv], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (2, line.format(d=here))
    assert "Traceback" not in proc.stderr
    assert not (here / "out").exists() and not (here / "lab").exists()


def _hostile_files(d):
    """A non-UTF-8 file, YAML nested 100,000 deep (flow and block), a file over the size bound, a
    FIFO, a directory, a device."""
    import os

    (d / "latin1.yaml").write_bytes(b"version: 1\ncluster: caf\xe9\n")
    (d / "deepflow.yaml").write_text("version: 1\nx: " + "[" * 100_000 + "]" * 100_000 + "\n")
    (d / "deepblock.yaml").write_text("version: 1\n" + "".join("  " * i + f"k{i}:\n" for i in range(300)))
    (d / "big.yaml").write_text("version: 1\n" + "".join(f"k{i}: {i}\n" for i in range(300_000)))
    (d / "wide.yaml").write_text("version: 1\n" + "".join(f"k{i}: {i}\n" for i in range(15_000)))
    os.mkfifo(d / "fifo.yaml")
    (d / "dir.yaml").mkdir()


@pytest.mark.parametrize("name,line", [
    ("latin1.yaml", "slurm-ipu: site description {d}/latin1.yaml is not UTF-8 text (byte 23: b'\\xe9'); save it "
     "as UTF-8"),
    ("deepflow.yaml", "slurm-ipu: {d}/deepflow.yaml:2: nested over 32 levels deep; a site description is a few "
     "levels deep"),
    ("deepblock.yaml", "slurm-ipu: {d}/deepblock.yaml:34: nested over 32 levels deep; a site description is a few "
     "levels deep"),
    ("big.yaml", "slurm-ipu: site description {d}/big.yaml is over 256 KiB (a site description is a few KB); check "
     "the path"),
    ("wide.yaml", "slurm-ipu: {d}/wide.yaml: over 20000 YAML nodes; a site description has a few dozen"),
    ("fifo.yaml", "slurm-ipu: site description {d}/fifo.yaml is a FIFO, not a file; give the path of the YAML file"),
    ("dir.yaml", "slurm-ipu: site description {d}/dir.yaml is a directory, not a file; give the path of the YAML "
     "file"),
    ("/dev/zero", "slurm-ipu: site description /dev/zero is a device or socket, not a file; give the path of the "
     "YAML file"),
])
@pytest.mark.parametrize("command", ["render", "doctor", "status"])
def test_hostile_site_files_are_one_line_at_once(tmp_path, name, line, command):
    _hostile_files(tmp_path)
    path = name if name.startswith("/") else str(tmp_path / name)
    argv = ["render", path, "--out", str(tmp_path / "out")] if command == "render" else [command, "--site", path]
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", *argv], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})
    assert (proc.returncode, proc.stderr.strip()) == (2, line.format(d=tmp_path))
    assert not (tmp_path / "out").exists()
