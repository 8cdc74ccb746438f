"""Start and stop a `vipu-emu serve` process we own (demo, lab, tests): by pid, with deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..fsutil import pid_alive, poll


@dataclass
class EmulatorProcess:
    state_dir: Path
    pid: int
    port: int
    host: str = "127.0.0.1"
    proc: subprocess.Popen | None = None

    @classmethod
    def start(cls, state_dir: Path, cluster: str = "pod64", port: int = 0, host: str = "127.0.0.1",
              log_path: Path | None = None, timeout: float = 15.0, detach: bool = False,
              socket_dir: Path | None = None) -> EmulatorProcess:
        state_dir.mkdir(parents=True, exist_ok=True)
        info_path = state_dir / "server.json"
        info_path.unlink(missing_ok=True)
        log = open(log_path or state_dir / "server.log", "ab")
        argv = [sys.executable, "-m", "slurm_ipu.emulator.main", "serve", "--state-dir", str(state_dir),
                "--cluster", cluster, "--host", host, "--port", str(port),
                *(["--socket-dir", str(socket_dir)] if socket_dir else [])]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=detach)
        log.close()

        def ready() -> dict | None:
            if info_path.exists():
                info = json.loads(info_path.read_text())
                if info.get("pid") == proc.pid:
                    return info
            if proc.poll() is not None:
                tail = (state_dir / "server.log").read_text(errors="replace")[-400:] if not log_path else ""
                raise ConfigError(f"vipu-emu exited with {proc.returncode} at start: {tail.strip()}")
            return None

        info = poll(ready, timeout, interval=0.02, max_interval=0.1)
        if info:
            return cls(state_dir, proc.pid, int(info["port"]), host, proc)
        proc.kill()
        proc.wait(5)
        raise ConfigError(f"vipu-emu did not come up within {timeout:g}s (state {state_dir})")

    @property
    def admin_socket(self) -> str:
        return str(self.state_dir / "admin.sock")

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_alive(self.pid)

    def _wait(self, timeout: float) -> bool:
        return bool(poll(lambda: not self.alive(), timeout, interval=0.02, max_interval=0.1))

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        os.kill(self.pid, signal.SIGTERM)
        if not self._wait(timeout):
            os.kill(self.pid, signal.SIGKILL)
            self._wait(timeout)

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self._wait(10.0)
