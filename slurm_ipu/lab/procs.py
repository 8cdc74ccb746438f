"""The lab's processes: started with their output in a log, recorded by pid and start time, and
stopped by that record only (so a pid the kernel gave to another process is never signalled)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ..errors import LabError
from ..fsutil import pid_alive, poll, process_token, same_process


def say(msg: str) -> None:
    print(f"lab: {msg}", file=sys.stderr, flush=True)


def _pid_in(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def _wait_pidfile(path: Path, timeout: float, what: str, log: Path) -> int:
    pid = poll(lambda: _pid_in(path), timeout)
    if pid:
        return pid
    raise LabError(f"{what} did not start within {timeout:g}s: {_log_tail(log)} (log: {log})")


def _stop_pid(pid: int, what: str, timeout: float = 15.0) -> None:
    if not pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    if not poll(lambda: not pid_alive(pid), timeout):
        say(f"{what} (pid {pid}) ignored SIGTERM for {timeout:g}s; sending SIGKILL")
        os.kill(pid, signal.SIGKILL)


def _record(pid: int) -> dict:
    return {"pid": pid, "token": process_token(pid)}


def _running(rec) -> bool:
    """A recorded process is still the one the lab started."""
    if isinstance(rec, int):  # written by a version that kept no start time
        return pid_alive(rec)
    return isinstance(rec, dict) and same_process(rec.get("pid"), rec.get("token"))


def _pid(rec) -> int | None:
    return rec.get("pid") if isinstance(rec, dict) else rec if isinstance(rec, int) else None


def _run(argv: list[str], spec, timeout: float = 30.0, check: bool = True,
         log: Path | None = None) -> subprocess.CompletedProcess:
    """`spec` is the LabSpec (its environment). log: where the command writes its reasons when it
    prints none (slurmd, slurmctld, munged)."""
    proc = subprocess.run(argv, env=spec.env(), capture_output=True, text=True, errors="replace",
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip()[:300]
        if not said and log is not None:
            said = f"{_log_tail(log)} (log: {log})"
        raise LabError(f"`{' '.join(argv)}` failed ({proc.returncode}): {said or 'no message'}")
    return proc


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"
