"""`make demo` before the lab exists: the emulator and the vipu contract, end to end."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from .emulator.process import EmulatorProcess


def _run(argv: list[str], shown: str) -> str:
    print(f"+ {shown}", flush=True)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    out = proc.stdout + proc.stderr
    print(out.rstrip(), flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"slurm-ipu demo: `{shown}` failed with exit {proc.returncode}")
    return out


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="slurm-ipu-demo-") as tmp:
        emu = EmulatorProcess.start(Path(tmp) / "vipu-emu", cluster="pod64")
        try:
            print(f"V-IPU emulator (IPU-POD64) on 127.0.0.1:{emu.port}, pid {emu.pid}")
            vipu = [sys.executable, "-m", "slurm_ipu.emulator.vipucli", "--api-host", "127.0.0.1", "--api-port", str(emu.port)]
            for args in (["create", "partition", "demo", "--size", "16", "--num-gcds", "2"],
                         ["list", "partitions"],
                         ["get", "partition", "demo", "--gcd", "1", "--ipu-configs"],
                         ["remove", "partition", "demo"],
                         ["list", "partitions"]):
                _run(vipu + args, "vipu " + " ".join(args))
        finally:
            emu.stop()
    print("demo: the partition was created, listed and removed; the emulator is stopped.")
    return 0
