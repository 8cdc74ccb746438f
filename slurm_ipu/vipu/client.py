"""VipuClient: everything slurm-ipu asks of V-IPU, through the `vipu` command contract.

The same code path runs on a real Pod (Graphcore's `vipu`) and against the emulator (the
lab's `vipu` shim). Every call is an argument list (no shell), has a hard timeout, and is
retried with backoff only when the failure is transient (unreachable, timed out, internal).
The tool's output reaches the log only when a call fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence

from ..errors import (
    ConfigError,
    PartitionExists,
    PartitionNotFound,
    PartitionNotReady,
    VipuError,
    VipuUnavailable,
)
from .command import run as run_command
from .parse import classify_error, parse_partitions, partition_from_json
from .types import Partition


def _log():
    """Only failures log: the prolog's common path never pays for importing logging."""
    import logging

    return logging.getLogger("slurm_ipu.vipu")


class VipuClient:
    """A plain class, not a dataclass: ipurun builds one on every launch (see types.py)."""

    def __init__(self, command: Sequence[str] = ("vipu",), host: str | None = None, port: int | None = None,
                 timeout: float = 10.0,          # seconds, per call
                 retries: int = 2,               # extra attempts for transient failures
                 backoff: float = 0.2,           # first pause; doubles each retry
                 emulator_flags: bool = False,   # pass --hosts/--owner-uid (the emulator's extensions)
                 runner: Callable[..., subprocess.CompletedProcess] | None = None,  # default: command.run
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 admin_command: Sequence[str] | None = None,  # vipu-admin: allocations; None: `command`
                 controller: str | None = None):  # its name on a site of several: its errors say it
        self.command, self.host, self.port, self.timeout = command, host, port, timeout
        self.controller = controller
        self.retries, self.backoff, self.emulator_flags = retries, backoff, emulator_flags
        self.runner, self.sleep, self.clock = runner, sleep, clock
        self.admin_command = admin_command or command
        self.observer: Callable[[VipuError], None] | None = None  # told of every failed call (hooks/stats.py)

    def with_sleep(self, sleep: Callable[[float], None]) -> VipuClient:
        """The same client pausing through `sleep` (the slurm-ipu service watches its prologs)."""
        twin = VipuClient(self.command, self.host, self.port, self.timeout, self.retries, self.backoff,
                          self.emulator_flags, self.runner, sleep, self.clock, self.admin_command, self.controller)
        twin.observer = self.observer
        return twin

    def __repr__(self) -> str:
        return f"VipuClient(command={self.command!r}, host={self.host!r}, port={self.port!r})"

    # --- plumbing -----------------------------------------------------------------------
    def argv(self, args: Sequence[str], admin: bool = False) -> list[str]:
        """The command line that runs `vipu args` on this client's controller (one that something
        other than this client runs: srun removes a step's partition with it, spank/step.c)."""
        argv = list(self.admin_command if admin else self.command)
        if self.host:
            argv += ["--api-host", self.host]
        if self.port:
            argv += ["--api-port", str(self.port)]
        return argv + list(args)

    def _once(self, args: Sequence[str], timeout: float, admin: bool = False) -> str:
        try:
            return self._call(args, timeout, admin)
        except VipuError as exc:
            if self.controller:  # which of the site's controllers failed: what an admin looks at first
                exc.args = (f"V-IPU controller {self.controller}: {exc}", *exc.args[1:])
            if self.observer is not None:
                self.observer(exc)
            raise

    def _call(self, args: Sequence[str], timeout: float, admin: bool) -> str:
        argv = self.argv(args, admin)
        try:
            proc = (self.runner or run_command)(argv, capture_output=True, text=True, timeout=timeout,
                                                stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise ConfigError(
                f"V-IPU command {argv[0]!r} not found; install vipu or set vipu.command in the slurm-ipu config"
            ) from None
        except subprocess.TimeoutExpired:
            _log().error("vipu call timed out after %.1fs: %s", timeout, " ".join(argv))
            late = VipuUnavailable(f"`{' '.join(args[:2])}` timed out after {timeout:g}s")
            late.kind = "timeout"
            raise late from None
        if proc.returncode != 0:
            _log().error("vipu call failed (exit %s): %s\n%s", proc.returncode, " ".join(argv),
                      _indent(proc.stdout + proc.stderr))
            raise classify_error(proc.stderr or proc.stdout, proc.returncode)
        return proc.stdout

    def run(self, args: Sequence[str], deadline: float | None = None, admin: bool = False) -> str:
        """Run one vipu command (admin: vipu-admin); retry transient failures while attempts and
        deadline last."""
        pause, attempt = self.backoff, 0
        while True:
            timeout = self.timeout if deadline is None else min(self.timeout, deadline - self.clock())
            if timeout <= 0:
                raise VipuUnavailable(f"`{' '.join(args[:2])}`: deadline passed before V-IPU answered")
            try:
                return self._once(args, timeout, admin)
            except VipuError as exc:
                out_of_time = deadline is not None and self.clock() + pause >= deadline
                if not exc.transient or attempt >= self.retries or out_of_time:
                    raise
                attempt += 1
                _log().warning("V-IPU transient failure (%s); retry %d/%d in %.2fs", exc, attempt, self.retries, pause)
                self.sleep(pause)
                pause *= 2

    # --- queries ------------------------------------------------------------------------
    def list_partitions(self, deadline: float | None = None) -> list[Partition]:
        return parse_partitions(self.run(["list", "partitions", "--showjson"], deadline))

    def allocations_json(self, deadline: float | None = None) -> str:
        """`vipu list allocations --showjson` as printed (ipurun reads each allocation's agents)."""
        return self.run(["list", "allocations", "--showjson"], deadline)

    def list_allocations(self, deadline: float | None = None) -> dict[str, list[str]]:
        """Allocation name -> its IPU-Machines (agents)."""
        try:
            doc = json.loads(self.allocations_json(deadline))
            return {str(a["id"]): [str(g) for g in a.get("agents", [])] for a in doc}
        except (ValueError, TypeError, KeyError):
            raise VipuUnavailable("`vipu list allocations --showjson` printed no allocation list") from None

    def list_agents(self, deadline: float | None = None) -> list[dict]:
        """`vipu-admin list agents --showjson`: every IPU-Machine, each with its `id` and `status`
        (Up, Down, Error; the emulator's form: docs/vipu.md, Agents)."""
        out = self.run(["list", "agents", "--showjson"], deadline, admin=True)
        try:
            doc = json.loads(out)
            agents = doc["agents"] if isinstance(doc, dict) else doc
            return [a for a in agents if isinstance(a, dict) and "id" in a and "status" in a]
        except (ValueError, TypeError, KeyError):
            raise VipuUnavailable("`vipu-admin list agents --showjson` printed no agent list") from None

    def get_partition(self, name: str, deadline: float | None = None) -> Partition | None:
        return next((p for p in self.list_partitions(deadline) if p.name == name), None)

    def version(self, deadline: float | None = None) -> str:
        return self.run(["--server-version"], deadline).strip()

    # --- changes ------------------------------------------------------------------------
    def create_partition(
        self, name: str, size: int, *, num_gcds: int | None = None, num_ilds: int | None = None,
        reconfigurable: bool = False, allocation: str | None = None, hosts: Sequence[str] = (),
        owner_uid: int | None = None, deadline: float | None = None,
    ) -> Partition | None:
        """The new partition when vipu's --showjson reply describes it (the emulator's does),
        else None: callers then list partitions to learn its state."""
        args = ["create", "partition", name, "--size", str(size), "--showjson"]
        if num_gcds:
            args += ["--num-gcds", str(num_gcds)]
        if num_ilds:
            args += ["--num-ilds", str(num_ilds)]
        if allocation:
            args += ["--allocation", allocation]
        if reconfigurable:
            args.append("--reconfigurable")
        if self.emulator_flags and hosts:
            args += ["--hosts", ",".join(hosts)]
        if self.emulator_flags and owner_uid is not None:
            args += ["--owner-uid", str(owner_uid)]
        out = self.run(args, deadline)
        try:
            return partition_from_json(json.loads(out))
        except (ValueError, VipuError):
            return None

    def remove_partition(self, name: str, missing_ok: bool = False, deadline: float | None = None) -> bool:
        """True if removed; False if it was already gone and missing_ok."""
        try:
            self.run(["remove", "partition", name], deadline)
        except PartitionNotFound:
            if missing_ok:
                return False
            raise
        return True

    def create_allocation(self, name: str, agents: Sequence[str], grants: Sequence[int] = (),
                          deadline: float | None = None) -> None:
        """`vipu-admin create allocation NAME --agents ...` (docs/vipu.md: the form is our choice
        where the record stops); grants (uids) go to the emulator only (--grant)."""
        args = ["create", "allocation", name, "--agents", ",".join(agents)]
        if self.emulator_flags and grants:
            args += ["--grant", ",".join(str(g) for g in grants)]
        self.run(args, deadline, admin=True)

    def remove_allocation(self, name: str, missing_ok: bool = False, deadline: float | None = None) -> bool:
        """Its partitions first (V-IPU refuses to remove an allocation holding any), then it.
        True if it was removed; False if it was already gone and missing_ok. On the emulator it is
        first granted to the caller alone: the job's user can make nothing new in it between the
        list and the remove (a loop of creates would keep it, and its IPUs, past the job)."""
        try:
            if self.emulator_flags:
                self.run(["update", "allocation", name, "--grant", str(os.getuid())], deadline, admin=True)
        except PartitionNotFound:
            if missing_ok:
                return False
            raise
        for part in self.list_partitions(deadline):
            if part.allocation == name:
                self.remove_partition(part.name, missing_ok=True, deadline=deadline)
        try:
            self.run(["remove", "allocation", name], deadline, admin=True)
        except PartitionNotFound:
            if missing_ok:
                return False
            raise
        return True

    def reset_partition(self, name: str, deadline: float | None = None) -> Partition | None:
        """The partition after the reset when vipu's --showjson reply describes it (the
        emulator's does), else None: callers then poll until it is ACTIVE again."""
        out = self.run(["reset", "partition", name, "--showjson"], deadline)
        try:
            return partition_from_json(json.loads(out))
        except (ValueError, VipuError):
            return None

    def wait_active(self, name: str, deadline: float, poll: float = 0.05) -> Partition:
        """Poll until ACTIVE; ERROR or the deadline raise PartitionNotReady."""
        pause, state = poll, None
        while True:
            try:
                part = self.get_partition(name, deadline)
            except VipuUnavailable:
                if state is None or self.clock() < deadline:
                    raise
                # The deadline ran out during a poll: the partition is late, V-IPU is not down.
                raise PartitionNotReady(f"partition {name} still {state} at the deadline") from None
            if part is None:
                raise PartitionNotFound(f"partition {name} disappeared while waiting for it to become ACTIVE")
            state = part.state
            if state == "ACTIVE":
                return part
            if part.state == "ERROR":
                raise PartitionNotReady(f"partition {name} went to ERROR instead of ACTIVE")
            if self.clock() + pause >= deadline:
                raise PartitionNotReady(f"partition {name} still {part.state} at the deadline")
            self.sleep(pause)
            pause = min(pause * 2, 1.0)

    def ensure_partition(self, name: str, size: int, deadline: float, **shape) -> Partition:
        """Idempotent create-and-wait: a partition already there with the same shape is ours
        (a retried create, a requeued job); one with another shape is an error."""
        try:
            created = self.create_partition(name, size, deadline=deadline, **shape)
            if created is not None and created.name == name and created.state == "ACTIVE":
                return created  # saves one `vipu list` on the prolog's path
        except PartitionExists:
            part = self.get_partition(name, deadline)
            want_gcds = shape.get("num_gcds") or 1
            if part is not None and (part.size != size or part.num_gcds != want_gcds):
                raise PartitionExists(
                    f"partition {name} exists with {part.size} IPUs/{part.num_gcds} GCD(s), "
                    f"not {size}/{want_gcds}; remove it (vipu remove partition {name})"
                ) from None
        return self.wait_active(name, deadline)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines()) or "    (no output)"
