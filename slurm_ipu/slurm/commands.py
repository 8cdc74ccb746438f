"""Slurm through its own commands, behind one interface (SlurmBackend). No pyslurm backend: no
pyslurm release builds against a Slurm Debian ships (docs/slurm.md). Hooks run with a bare
environment, so SLURM_CONF and absolute paths are set here; every call has a timeout."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import SlurmError


class SlurmBackend(Protocol):
    def active_jobs(self) -> dict[int, str]: ...
    def admin_comment(self, job_id: int, text: str) -> None: ...
    def note(self, job_id: int, text: str) -> None: ...
    def hold(self, job_id: int, text: str) -> None: ...
    def cancel(self, job_id: int, text: str) -> None: ...
    def node_reasons(self) -> dict[str, tuple[str, str]]: ...
    def drain(self, node: str, reason: str) -> None: ...
    def resume(self, node: str) -> None: ...
    def licence_reservations(self, licence: str) -> dict[str, int]: ...
    def reserve_licences(self, name: str, licence: str, count: int, user: str, update: bool = False) -> None: ...
    def delete_reservation(self, name: str) -> None: ...
    def requeue(self, job_id: int, text: str) -> None: ...
    def notify(self, job_id: int, text: str) -> None: ...
    def requeueable(self, job_id: int) -> bool | None: ...
    def ipus_per_node(self, job_id: int) -> int: ...


# Up to data_parser v0.0.39 (23.02) job_state is one word, and a flag hides the base state
# (job_state_string() in src/common/slurm_protocol_defs.c): these flags are set only on a job
# whose base state is RUNNING. From v0.0.40 it is a list, base state first, then the flags.
_RUNNING_FLAGS = frozenset({"CONFIGURING", "SIGNALING", "RESIZING", "STOPPED"})


@dataclass(frozen=True)
class SqueueJob:
    job_id: int
    state: str           # the base state: PENDING, RUNNING, SUSPENDED, COMPLETED, ...
    flags: tuple[str, ...]
    user: str | None
    nodes: str | None
    start: int | None    # epoch seconds, None when unset
    reason: str | None = None  # why it waits (state_reason): BadConstraints, Resources, ...
    tres: str = ""       # tres_per_node as Slurm writes it: gres:ipu:4 (gres/ipu:4 from 23.11)
    admin_comment: str | None = None  # None where the format has no such field


def _number(value):
    """A number: plain up to v0.0.39, {"set": .., "infinite": .., "number": ..} from v0.0.40."""
    if isinstance(value, dict):
        return value.get("number") if value.get("set", True) and not value.get("infinite") else None
    return value


def _state(value) -> tuple[str, tuple[str, ...]]:
    if isinstance(value, list):
        words = [str(w) for w in value]
        return (words[0], tuple(words[1:])) if words else ("UNKNOWN", ())
    word = str(value or "UNKNOWN")
    return ("RUNNING", (word,)) if word in _RUNNING_FLAGS else (word, ())


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def parse_squeue(text: str) -> dict[int, SqueueJob]:
    """`squeue --json` of every release from 22.05 (data_parser v0.0.39 to v0.0.45 and 22.05's
    own format; samples of each in tests/unit/fixtures/squeue)."""
    try:
        # strict=False: a control character a user put in a job's name, raw in a string, is still
        # that string (Slurm's serializers differ in what they escape)
        jobs = json.loads(text, strict=False)["jobs"]
        out = {}
        for job in jobs:
            job_id = int(_number(job["job_id"]))
            state, flags = _state(job.get("job_state"))
            start = _number(job.get("start_time"))
            out[job_id] = SqueueJob(job_id, state, flags, job.get("user_name") or None, job.get("nodes") or None,
                                    int(start) if start else None, job.get("state_reason") or None,
                                    job.get("tres_per_node") or "", _text(job.get("admin_comment")))
        return out
    except (ValueError, KeyError, TypeError):
        raise SlurmError(f"`squeue --json` printed something unexpected: {text[:120]!r}") from None


# What slurm-ipu writes into an AdminComment, at most: a prolog's reason with a failed machine's
# name and the requeue's why runs to about 280 characters, and was cut mid-sentence at 250.
COMMENT_MAX = 500
_ID_W, _STATE_W = 20, 16  # squeue --Format widths: a job id and a state fit; the comment is the rest


def parse_job_columns(text: str) -> dict[int, SqueueJob]:
    """`squeue --noheader --Format=JobID:20,State:16,admin_comment:<COMMENT_MAX + 50>` lines."""
    out = {}
    for line in text.splitlines():
        ident, state = line[:_ID_W].strip(), line[_ID_W:_ID_W + _STATE_W].strip()
        if ident.isdigit():
            comment = line[_ID_W + _STATE_W:].strip()
            out[int(ident)] = SqueueJob(int(ident), state, (), None, None, None,
                                        admin_comment="" if comment == "(null)" else comment)
    return out


def parse_squeue_json(text: str) -> dict[int, str]:
    """{job_id: base state}."""
    return {job_id: job.state for job_id, job in parse_squeue(text).items()}


@dataclass
class SlurmCli:
    """Every Slurm command slurm-ipu runs: the hooks' (a bare environment: SLURM_CONF and absolute
    paths set here), and doctor's, status's, ipurun's, install's and the lab's queries. Each call
    has a timeout; a failure is a SlurmError naming the command and Slurm's first words."""
    conf: str | None                  # SLURM_CONF; None: the caller's own (ipurun in a job)
    bin_dir: str = "/usr/bin"
    timeout: float = 10.0
    runner: Callable[..., subprocess.CompletedProcess] | None = None  # default: subprocess.run
    environ: dict | None = None       # the caller's environment (ipurun); None: a bare one

    @classmethod
    def of_site(cls, site, timeout: float = 15.0, runner=None) -> SlurmCli:
        return cls(site.slurm_conf, site.slurm.bin_dir, timeout, runner)

    @classmethod
    def of_user(cls, environ: dict, timeout: float = 20.0) -> SlurmCli:
        """The user's Slurm (ipurun): the commands on their PATH, their SLURM_CONF if any."""
        import shutil

        found = shutil.which("scontrol", path=environ.get("PATH"))
        return cls(None, str(Path(found).parent) if found else "/usr/bin", timeout, environ=environ)

    def output(self, tool: str, *args: str, extra: dict | None = None) -> str:
        """What `tool args` prints; SlurmError when it cannot run or fails."""
        return self._run(tool, *args, extra=extra)

    def output_or_none(self, errors: dict | None, key: str, tool: str, *args: str,
                       extra: dict | None = None) -> str | None:
        """What `tool args` prints, or None with the failure kept in errors[key] (doctor and status
        report each item in one line; the lab just tries again)."""
        try:
            return self._run(tool, *args, extra=extra)
        except SlurmError as exc:
            if errors is not None:
                errors[key] = str(exc)
            return None

    def _run(self, tool: str, *args: str, extra: dict | None = None, stdin: str | None = None) -> str:
        argv = [str(Path(self.bin_dir) / tool), *args]
        env = dict(self.environ) if self.environ is not None else {"PATH": f"{self.bin_dir}:/usr/bin:/bin"}
        if self.conf:
            env["SLURM_CONF"] = self.conf
        env.update(extra or {})
        try:
            given = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
            # errors="replace": a job's name, comment, work directory or script path is any bytes
            # its user chose, and squeue prints them as they are; a strict decode let one job name
            # stop every reader of the queue (the slurm-ipu service's removals among them).
            proc = (self.runner or subprocess.run)(argv, env=env, capture_output=True, text=True, errors="replace",
                                                   timeout=self.timeout, **given)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found; set slurm.bin_dir in the site description") from None
        except OSError as exc:
            raise SlurmError(f"`{tool}`: {exc}") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"`{tool} {' '.join(args[:2])}` timed out after {self.timeout:g}s") from None
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip().splitlines() or ["no message"]
            raise SlurmError(f"`{tool} {' '.join(args[:3])}` failed: {said[0][:200]}",
                             tuple(line[:300] for line in said[:8]))
        return proc.stdout

    def show_config(self) -> dict[str, str]:
        from .conf import parse_show_config

        return parse_show_config(self._run("scontrol", "show", "config"))

    def topology(self) -> dict[str, str]:
        """host -> its leaf switch (a Pod), from `scontrol show topology`."""
        from .topology import leaf_switches

        return leaf_switches(self._run("scontrol", "show", "topology"))

    def active_jobs(self) -> dict[int, str]:
        return parse_squeue_json(self._run("squeue", "--json"))

    def jobs(self, job_ids: list[int]) -> dict[int, SqueueJob]:
        """These jobs' state and AdminComment; those that left are absent. Not `--json`: 22.05
        ignores every filter with it and dumps the whole queue (in a storm, every second)."""
        try:
            out = self._run("squeue", "--noheader", "--jobs", ",".join(map(str, job_ids)),
                            f"--Format=JobID:{_ID_W},State:{_STATE_W},admin_comment:{COMMENT_MAX + 50}")
        except SlurmError:  # all of them gone ("Invalid job id specified"), or slurmctld not answering
            return {}
        return parse_job_columns(out)

    # AdminComment, not Comment: the user's own --comment stays theirs, and every user still
    # sees ours in `scontrol show job` (measured on 22.05).
    def admin_comment(self, job_id: int, text: str) -> None:
        self._run("scontrol", "update", f"JobId={job_id}", f"AdminComment={text[:COMMENT_MAX]}")

    def note(self, job_id: int, text: str) -> None:
        """A started job's note (hooks/notes.py): its AdminComment at once."""
        self.admin_comment(job_id, text)

    def admin_comments(self, notes: dict[int, str]) -> None:
        """Several jobs' AdminComments with one scontrol, its commands on stdin (a text holds no
        blank: scontrol's own tokens keep quotes). A failed line fails alone; scontrol exits 1."""
        lines = "".join(f"update JobId={job} AdminComment={text[:COMMENT_MAX]}\n" for job, text in notes.items())
        self._run("scontrol", stdin=lines)

    def hold(self, job_id: int, text: str) -> None:
        self.admin_comment(job_id, text)
        self._run("scontrol", "hold", str(job_id))

    def notify(self, job_id: int, text: str) -> None:
        """A line on the stderr of the job's srun or salloc (SRUN_USER_MSG), which otherwise
        prints only "Nodes ... are still not ready" when PrologSlurmctld fails."""
        self._run("scontrol", "notify", str(job_id), text[:400])

    def node_reasons(self) -> dict[str, tuple[str, str]]:
        """Node -> (state, reason) for every node (sinfo lists a node once per partition)."""
        out = {}
        for line in self._run("sinfo", "-N", "-h", "-o", "%N|%T|%E").splitlines():
            name, _, rest = line.partition("|")
            state, _, reason = rest.partition("|")
            if name:
                out[name.strip()] = (state.strip(), "" if reason.strip() == "none" else reason.strip())
        return out

    def drain(self, node: str, reason: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason[:200]}")

    def resume(self, node: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=RESUME")

    def licence_reservations(self, licence: str) -> dict[str, int]:
        """Reservation name -> how many of `licence` it holds (those holding any)."""
        from .licences import reservation_count

        out = {}
        for line in self._run("scontrol", "show", "reservation", "-o").splitlines():
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            count = reservation_count(fields.get("Licenses", ""), licence)
            if fields.get("ReservationName") and count:
                out[fields["ReservationName"]] = count
        return out

    def reserve_licences(self, name: str, licence: str, count: int, user: str, update: bool = False) -> None:
        """A licence-only reservation (no nodes) that no job asks for: the pool shrinks by `count`."""
        if update:
            self._run("scontrol", "update", f"ReservationName={name}", f"Licenses={licence}:{count}")
            return
        self._run("scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now",
                  "Duration=infinite", f"Users={user}", f"Licenses={licence}:{count}", "Flags=ANY_NODES")

    def delete_reservation(self, name: str) -> None:
        self._run("scontrol", "delete", f"ReservationName={name}")

    def requeueable(self, job_id: int) -> bool | None:
        """Whether Slurm requeues this job when its PrologSlurmctld fails: a batch job that may be
        requeued (BatchFlag=1 Requeue=1); srun and salloc jobs, and --no-requeue ones, end instead.
        None when Slurm cannot say. Read only on a prolog's failure, never per job."""
        try:
            words = self._run("scontrol", "show", "job", "-o", str(job_id)).split()
        except SlurmError:
            return None
        fields = dict(w.split("=", 1) for w in words if "=" in w)
        if "BatchFlag" not in fields or "Requeue" not in fields:
            return None
        return fields["BatchFlag"] == "1" and fields["Requeue"] == "1"

    def ipus_per_node(self, job_id: int) -> int:
        """The IPUs per node a job's GRES asks for (0: none, or the job is gone). For a
        heterogeneous job's later component, which Slurm gives no licence. One field alone on the
        line, so nothing a user wrote (a name, a comment) shares it."""
        from .gres import ipus_per_node

        return ipus_per_node(self._run("squeue", "--noheader", f"--jobs={job_id}", "--Format=tres-per-node:1000"))

    def requeue(self, job_id: int, text: str) -> None:
        """A batch job back to the queue, the reason first (Slurm refuses it for srun/salloc jobs)."""
        self.admin_comment(job_id, text)
        self._run("scontrol", "requeue", str(job_id))

    def cancel(self, job_id: int, text: str) -> None:
        """The reason first: slurmctld kills the prolog that cancels its own job."""
        self.admin_comment(job_id, text)
        self._run("scancel", str(job_id))
