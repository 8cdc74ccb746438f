"""The lab's supervision of the slurm-ipu service, as systemd supervises it on a site.

On a site, systemd runs `slurm-ipu service` with Restart=always, RestartSec=5
(templates/hooks/slurm-ipu.service.j2): a service that dies (a thread that died of an
exception ends it with exit 1, slurm_ipu/hooks/service.py) is started again. In the lab this small
process is the service's parent and does the same:

    python -m slurm_ipu.lab.supervise --record FILE [--delay S] [--burst N] [--interval S] -- ARGV...

- it starts ARGV and writes FILE (JSON, replaced whole): its own pid, the service's pid and start
  time, its state (`running`, `restarting`, `let-go`, `stopped`, `gave-up`), the restarts so far
  and the last exit. The lab reads the service's pid from there (lab/daemons.py load_pids): only
  this process knows it after a restart, and pids.json stays the lab's alone to write;
- a service that fails (a non-zero exit, or killed by a signal nobody sent through the lab) is
  started again after --delay seconds. A clean exit (status 0: someone stopped it with SIGTERM)
  is not: that is a stop, as `kill PID` of the service has always been;
- at most --burst restarts within --interval seconds, as systemd's StartLimitBurst: one more
  failure in that window and it gives up, says so on stderr (the lab's service.log), records
  `gave-up` (what `slurm-ipu lab status` shows) and exits 1;
- SIGTERM (or SIGINT): stop for good. The signal goes to the service, which stops as it does
  under systemd; after --stop-timeout seconds it is killed;
- SIGUSR1: let go (a drill that kills the service, lab/daemons.py stop_service): records `let-go`,
  then waits for the service to end without starting it again, and exits.

Standard library only, and nothing of the lab's: it must outlive whatever started it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time


class Supervisor:
    """The signal handlers only take note (self.asked); the main loop acts on it and writes the
    record, so the record is never written from two places at once."""

    def __init__(self, argv: list[str], record: str, delay: float, burst: int, interval: float,
                 stop_timeout: float, clock=time.monotonic):
        self.argv, self.record = argv, record
        self.delay, self.burst, self.interval, self.stop_timeout = delay, burst, interval, stop_timeout
        self.clock = clock
        self.child: subprocess.Popen | None = None
        self.restarts: list[float] = []  # when each restart in the start-limit window happened
        self.total = 0
        self.last_exit: str | None = None
        self.asked: str | None = None  # "stop" or "let-go", from a signal
        self.written = ""
        self.wake = threading.Event()  # a request ends the wait before a restart at once

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._ask_stop)
        signal.signal(signal.SIGINT, self._ask_stop)
        signal.signal(signal.SIGUSR1, self._ask_let_go)
        while True:
            if self.asked:
                return self._end("stopped", 0)
            self.child = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL)  # in our session: our signals reach it
            self._write("running")
            status = self._wait()
            self.last_exit = describe(status)
            pid = self.child.pid
            if self.asked:
                return self._end("stopped", 0)
            if status == 0:
                say(f"the slurm-ipu service (pid {pid}) exited cleanly (status 0): stopped, not started again")
                return self._end("stopped", 0)
            if not self._may_restart():
                say(f"the slurm-ipu service (pid {pid}) failed ({self.last_exit}) again: {self.burst} restarts within "
                    f"{self.interval:g} s already; giving up, as systemd's StartLimitBurst does (see service.log and "
                    "hooks.log; `slurm-ipu lab up` starts it again)")
                return self._end("gave-up", 1)
            say(f"the slurm-ipu service (pid {pid}) failed ({self.last_exit}); starting it again in {self.delay:g} s "
                f"(restart {len(self.restarts)} of at most {self.burst} within {self.interval:g} s)")
            self._write("restarting")
            self.wake.wait(self.delay)

    def _wait(self) -> int:
        """The service's exit status (negative: the signal that ended it), acting on requests."""
        stop_by = None
        while True:
            try:
                return self.child.wait(0.1)
            except subprocess.TimeoutExpired:
                pass
            if self.asked == "let-go" and self.written != "let-go":
                self._write("let-go")
            if self.asked == "stop" and stop_by is None:
                stop_by = self.clock() + self.stop_timeout
                self._signal(signal.SIGTERM)
            elif stop_by is not None and self.clock() > stop_by:
                say(f"the slurm-ipu service (pid {self.child.pid}) ignored SIGTERM for {self.stop_timeout:g} s; "
                    "sending SIGKILL")
                self._signal(signal.SIGKILL)
                stop_by = float("inf")

    def _signal(self, sig: int) -> None:
        try:
            self.child.send_signal(sig)
        except ProcessLookupError:
            pass

    def _may_restart(self) -> bool:
        now = self.clock()
        self.restarts = [t for t in self.restarts if now - t < self.interval]
        if len(self.restarts) >= self.burst:
            return False
        self.restarts.append(now)
        self.total += 1
        return True

    def _ask_stop(self, *_) -> None:
        self.asked = "stop"
        self.wake.set()

    def _ask_let_go(self, *_) -> None:
        if self.asked != "stop":
            self.asked = "let-go"
        self.wake.set()

    def _end(self, state: str, code: int) -> int:
        self._write(state)
        return code

    def _write(self, state: str) -> None:
        """The record, replaced whole: a reader sees the old one or the new one."""
        child = self.child.pid if self.child is not None else None
        doc = {"supervisor": {"pid": os.getpid(), "token": token(os.getpid())},
               "service": {"pid": child, "token": token(child) if child else None},
               "state": state, "restarts": self.total, "last_exit": self.last_exit,
               "limit": {"burst": self.burst, "interval": self.interval}}
        tmp = f"{self.record}.{os.getpid()}.tmp"
        # 0644 whatever the umask: the lab refuses a pid file others could write (lab/trust.py)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fd, 0o644)
            fh.write(json.dumps(doc))
        os.replace(tmp, self.record)
        self.written = state


def describe(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit {status}"


def token(pid: int | None) -> str | None:
    """The process's boot and start time, as the lab records it (fsutil.process_token): the same
    reading, kept here so this process imports nothing of the lab's."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
        with open(f"/proc/{pid}/stat", "rb") as fh:
            start = fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError, TypeError):
        return None
    return f"{boot}:{start}"


def say(msg: str) -> None:
    print(f"lab: {time.strftime('%Y-%m-%d %H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m slurm_ipu.lab.supervise",
                                description="start ARGV and start it again when it fails (the lab's slurm-ipu service)")
    p.add_argument("--record", required=True, help="where to keep the current pid and state (JSON)")
    p.add_argument("--delay", type=float, default=1.0, help="seconds before a restart (systemd's RestartSec)")
    p.add_argument("--burst", type=int, default=5, help="restarts allowed within --interval (StartLimitBurst)")
    p.add_argument("--interval", type=float, default=60.0, help="the start-limit window (StartLimitIntervalSec)")
    p.add_argument("--stop-timeout", type=float, default=12.0, help="SIGKILL the service this long after SIGTERM")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- the service's command line")
    args = p.parse_args(argv)
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        p.error("give the service's command line after --")
    return Supervisor(command, args.record, args.delay, args.burst, args.interval, args.stop_timeout).run()


if __name__ == "__main__":
    sys.exit(main())
