"""The slurm.conf parser and the merge held to slurmctld, as the licence grammar
is: a seeded corpus of NodeName layouts (DEFAULT lines before, between and after, two DEFAULT
lines, a line's own Gres, typed GRES, nodes in an Include'd file, relative and absolute) is
loaded by a real slurmctld, and for every node the GRES `scontrol show node` reports must be the
one `slurmconf` reads (`Node.effective_gres`); then the same layout merged for Pod hosts node1
and node2 (the diff's edits applied) must show their own GRES plus ipu, the others unchanged.
slurmctld runs in the foreground on its own port with the session lab's munge, started and
stopped here by its pid; no slurmd is needed for the configured GRES."""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
from pathlib import Path

import pytest

from slurm_ipu import config
from slurm_ipu import lab as labmod
from slurm_ipu.deploy import merge
from slurm_ipu.deploy.snapshot import gres_items
from slurm_ipu.fsutil import poll
from slurm_ipu.slurm import slurmconf

from .conftest import SLURM_VERSION, _free_block

LAYOUTS = 6
NODES = 4
IPUS = 16


def layout(rng: random.Random) -> tuple[list[str], list[str]]:
    """(slurm.conf's NodeName lines, an Include'd file's): DEFAULT lines anywhere, with or without
    Gres; node lines with or without their own."""
    gres = ["gpu:1", "gpu:2", "gpu:tesla:1", "fpga:1", "gpu:1,fpga:1"]
    main, included = [], []
    for k in range(1, NODES + 1):
        if rng.random() < 0.5:
            main.append(f"NodeName=DEFAULT Gres={rng.choice(gres)}" if rng.random() < 0.7 else
                        f"NodeName=DEFAULT CPUs={rng.choice([1, 2])}")
        own = f" Gres={rng.choice(gres)}" if rng.random() < 0.3 else ""
        (included if k > 2 and rng.random() < 0.5 else main).append(f"NodeName=node{k} NodeAddr=127.0.0.1{own}")
    return main, included


def base_conf(d: Path, port: int, munge: str) -> str:
    host = socket.gethostname()
    return f"""ClusterName=corpus
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={munge}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmctldLogFile={d}/slurmctld.log
ProctrackType=proctrack/linuxproc
SelectType=select/cons_tres
GresTypes=gpu,fpga,ipu
PartitionName=all Nodes=ALL Default=YES
"""


def shown_gres(d: Path, port: int) -> dict[str, list[str]]:
    """Each node's GRES as the slurmctld started on that configuration reports it (ipu included)."""
    env = {"PATH": f"{labmod.SBIN.parent / 'bin'}:/usr/bin:/bin", "SLURM_CONF": str(d / "etc" / "slurm.conf")}
    (d / "state").mkdir(exist_ok=True)
    ctld = subprocess.Popen([str(labmod.SBIN / "slurmctld"), "-D", "-c", "-f", env["SLURM_CONF"]], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def nodes() -> str:
            try:
                proc = subprocess.run(["scontrol", "-o", "show", "nodes"], env=env, capture_output=True, text=True,
                                      timeout=10)
            except subprocess.TimeoutExpired:  # not listening yet: scontrol keeps trying to connect
                return ""
            said.append(proc.stderr.strip())
            return proc.stdout if proc.returncode == 0 else ""

        said: list[str] = []

        if not poll(lambda: ctld.poll() is not None or nodes().count("NodeName=") == NODES, 30) or ctld.poll():
            log = (d / "slurmctld.log").read_text(errors="replace") if (d / "slurmctld.log").exists() else ""
            raise AssertionError(f"slurmctld on {env['SLURM_CONF']} did not answer ({said[-1:]}, exit {ctld.poll()}): "
                                 f"{log[-1500:]}")
        text = nodes()
    finally:
        ctld.terminate()
        try:
            ctld.wait(20)
        except subprocess.TimeoutExpired:
            ctld.kill()
            ctld.wait(10)
    out = {}
    for line in text.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        items = re.sub(r"\([^)]*\)", "", fields.get("Gres", "")).replace("(null)", "").split(",")
        out[fields["NodeName"]] = sorted(i for i in items if i)
    return out


def site(tmp: Path, etc: Path) -> config.Site:
    (tmp / "site.yaml").write_text(f"""version: 1
cluster: corpus
vipu: {{host: 127.0.0.1}}
pod: {{ipus: {2 * IPUS}, hosts: "node[1-2]", ipus_per_host: {IPUS}}}
slurm: {{conf_dir: {etc}, version: "{'.'.join(SLURM_VERSION.split('.')[:2])}"}}
""")
    return config.load(str(tmp / "site.yaml"), environ={}, twins=False)


@pytest.mark.parametrize("seed", range(LAYOUTS))
def test_the_gres_slurm_gives_each_node_is_what_the_parser_reads_and_the_merge_adds_ipu(lab, tmp_path, seed):
    rng = random.Random(seed)
    main, included = layout(rng)
    etc = tmp_path / "etc"
    etc.mkdir()
    port = _free_block(1)
    munge = str(lab.spec.path("run", "munge.socket"))
    absolute = rng.random() < 0.5
    inc = etc / "nodes.conf"
    inc.write_text("".join(f"{line}\n" for line in included))
    (etc / "slurm.conf").write_text(base_conf(tmp_path, port, munge) + "".join(f"{line}\n" for line in main)
                                    + f"Include {inc if absolute else inc.name}\n")
    layout_text = (etc / "slurm.conf").read_text() + inc.read_text()
    read = {n: gres_items(node.effective_gres or "") for node in slurmconf.read(str(etc / "slurm.conf")).nodes
            if node.names != "DEFAULT" for n in [node.names]}
    assert shown_gres(tmp_path, port) == read, layout_text

    desc = site(tmp_path, etc)
    merged = merge.merge(desc, str(etc / "slurm.conf"))
    for path, (_, text) in merge.edits(merged, str(etc / "slurm.conf")).items():
        Path(path).write_text(text)
    # of the fragment, only the key this needs: the hooks and job_submit.lua are not installed here
    (etc / merge.FRAGMENT).write_text(f"GresTypes={merged.values['GresTypes']}\n")
    want = {n: sorted([*g, f"ipu:{IPUS}"]) if n in ("node1", "node2") else g for n, g in read.items()}
    got = shown_gres(tmp_path, port)
    assert got == want, (layout_text, (etc / "slurm.conf").read_text(), inc.read_text())
    assert not [p for p in os.listdir(tmp_path) if p.startswith("core")]
