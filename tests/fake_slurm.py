"""One Slurm for the unit and emulator tiers, at the subprocess boundary: FakeSlurm is the real
SlurmCli (slurm_ipu/slurm/commands.py) whose commands are answered here, from one state, as
Slurm's own commands print it. So a test exercises the argv the product builds and the parsers
that read Slurm's output, and asserts what Slurm would then show: a job's AdminComment, held or
cancelled, a node drained, a reservation made.

The state: jobs (state, batch and requeueable, reason, GRES), nodes (state, reason), licence-only
reservations, what was told to each job's srun (scontrol notify). `broken`: every command times
out, as with a slurmctld that does not answer."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from slurm_ipu.slurm.commands import COMMENT_MAX, SlurmCli


@dataclass
class Job:
    state: str = "RUNNING"
    batch: bool = True          # a batch job that may be requeued (BatchFlag=1 Requeue=1)
    reason: str | None = None   # why it waits (squeue's state_reason)
    tres: str = ""              # tres_per_node as Slurm writes it: gres:ipu:4
    comment: str = ""           # AdminComment
    held: bool = False


def _job(value) -> Job:
    """A test's shorthand: a state, or [state, batch] / [state, batch, reason, tres]."""
    if isinstance(value, Job):
        return value
    if isinstance(value, str):
        return Job(value)
    state, batch, *rest = value
    return Job(state, batch, *rest)


class FakeSlurm(SlurmCli):
    def __init__(self, jobs=None, broken: bool = False, gres: dict[int, int] | None = None, nodes=(),
                 ends=(), gone=(), shown: dict[str, str | None] | None = None, refuse=(),
                 requires_account: bool = False, default_account: str | None = None):
        super().__init__(None, "/usr/bin", timeout=10.0, runner=self._answer)
        self.queue: dict[int, Job] = {j: _job(v) for j, v in (jobs or {}).items()}
        for job, per in (gres or {}).items():  # a job only the hooks' query knows: its GRES
            self.queue.setdefault(job, Job("CONFIGURING")).tres = f"gres:ipu:{per}"
        for job in ends:  # srun/salloc or --no-requeue jobs: Slurm ends them on a failed prolog
            self.queue.setdefault(job, Job("CONFIGURING")).batch = False
        self.gone = set(gone)  # jobs that left slurmctld: every command on them fails
        self.nodes = {n: ["idle", "none"] for n in nodes}
        self.reservations = {"maint": "(null)", "slurm-ipu-maint": "ipu:2"}  # an admin's, not ours
        self.broken = broken
        self.version = "22.05.8"
        self.told: list[tuple[int, str, bool]] = []  # (job, text, whether the job was cancelled already)
        self.updates: list[list[str]] = []  # every command that changes something, as run
        self.queries: list[int] = []  # jobs whose GRES the hooks asked for
        self.processes = 0  # scontrol processes started
        # `scontrol show nodes|licenses|partition|topology` as a site's Slurm prints them (None: it
        # fails, as show topology does without a topology plugin), and the job shapes `sbatch
        # --test-only` refuses (any argument list holding one of these words)
        self.shown = dict(shown or {})
        self.refuse = tuple(refuse)
        self.requires_account = requires_account  # a site's job_submit refusing jobs without -A
        self.submitted: list[list[str]] = []  # every sbatch's arguments
        self.default_account = default_account  # with accounting: the association's default (sacctmgr)

    # --- what a test reads: Slurm's view ------------------------------------------------------

    @property
    def comments(self) -> dict[int, str]:
        return {j: job.comment for j, job in self.queue.items() if job.comment}

    @property
    def held(self) -> set[int]:
        return {j for j, job in self.queue.items() if job.held}

    @property
    def cancelled(self) -> set[int]:
        return {j for j, job in self.queue.items() if job.state == "CANCELLED"}

    # --- the commands -------------------------------------------------------------------------

    def _answer(self, argv, env=None, capture_output=True, text=True, errors=None, timeout=None, stdin=None,
                input=None):
        if self.broken:
            raise subprocess.TimeoutExpired(argv, timeout or 10.0)
        tool, args = argv[0].rsplit("/", 1)[-1], list(argv[1:])
        answer = getattr(self, f"_{tool}", None)
        if answer is None or args == ["--version"]:  # a command no test here needs, and every tool's version
            out = f"slurm {self.version}\n" if args == ["--version"] else ""
            return subprocess.CompletedProcess(argv, 0 if out else 1, out, "" if out else f"{tool}: not faked\n")
        try:
            out = answer(args, input)
        except SlurmSays as said:
            return subprocess.CompletedProcess(argv, 1, "", f"{said}\n")
        return subprocess.CompletedProcess(argv, 0, out or "", "")

    def _known(self, job: int) -> Job:
        """A job a hook acts on is one slurmctld runs the hook for: there, CONFIGURING, unless the
        test said otherwise (a job it named as gone fails, as Slurm's commands do)."""
        if job in self.gone:
            raise SlurmSays("slurm_load_jobs error: Invalid job id specified")
        return self.queue.setdefault(job, Job("CONFIGURING"))

    def _squeue(self, args, _input) -> str:
        if args == ["--json"]:
            return json.dumps({"jobs": [{"job_id": j, "job_state": job.state, "admin_comment": job.comment,
                                         "state_reason": job.reason or "None", "tres_per_node": job.tres}
                                        for j, job in self.queue.items()]})
        words = dict(a.split("=", 1) if "=" in a else (a, "") for a in args)
        ids = words.get("--jobs") or args[args.index("--jobs") + 1]
        asked = [int(j) for j in ids.split(",")]
        if words.get("--Format") == "tres-per-node:1000":
            self.queries.extend(asked)
            return "".join(f"{self.queue[j].tres or 'N/A'}\n" for j in asked if j in self.queue)
        return "".join(f"{j:<20}{self.queue[j].state:<16}{self.queue[j].comment or '(null)':<{COMMENT_MAX + 50}}\n"
                       for j in sorted(asked) if j in self.queue)

    def _scancel(self, args, _input) -> str:
        self.updates.append(["scancel", *args])
        for job in (a for a in args if a.isdigit()):  # by name or state (--name=...): the fake names no jobs
            self._known(int(job)).state = "CANCELLED"
        return ""

    def _sbatch(self, args, _input) -> str:
        self.submitted.append(args)
        if self.requires_account and not any(a.startswith(("--account=", "-A")) for a in args):
            failed = "allocation failure" if "--test-only" in args else "Batch job submission failed"
            raise SlurmSays(f"sbatch: error: lua-site: please name your project account\nsbatch: error: {failed}: "
                            "Unspecified error")
        if "--test-only" not in args:
            raise SlurmSays("sbatch: error: the fake runs no jobs; use the lab (tests/slurm)")
        if any(word in " ".join(args) for word in self.refuse):
            raise SlurmSays("sbatch: error: Requested node configuration is not available")
        return ""

    def _sacctmgr(self, args, _input) -> str:
        if "cluster" in args:
            return "t\n"
        if args[2:4] == ["show", "user"] and args[-1] == "format=defaultaccount":
            return f"{self.default_account}\n" if self.default_account else ""
        raise SlurmSays(f"sacctmgr: the fake knows no {args}")

    def _sinfo(self, _args, _input) -> str:
        return "".join(f"{n}|{s}|{r}\n" for n, (s, r) in self.nodes.items())

    def _scontrol(self, args, input) -> str:
        if not args:  # one command per line of stdin, each failing alone
            self.processes += 1
            failed = []
            for line in (input or "").splitlines():
                try:
                    self._scontrol_one(line.split())
                except SlurmSays as said:
                    failed.append(str(said))
            if failed:
                raise SlurmSays(failed[0])
            return ""
        if args[0] != "show":
            self.processes += 1
        return self._scontrol_one(args)

    def _scontrol_one(self, args) -> str:
        args = [a for a in args if a != "-o"]  # one line per record: what the fake prints anyway
        verb = args[0]
        if verb != "show":
            self.updates.append(["scontrol", *args])
        words = dict(a.split("=", 1) for a in args[1:] if "=" in a)
        if verb == "show" and args[1] == "job":
            job = self._known(int(args[-1]))
            return (f"JobId={args[-1]} JobState={job.state} BatchFlag={int(job.batch)} Requeue={int(job.batch)} "
                    f"AdminComment={job.comment or '(null)'}\n")
        if verb == "show" and args[-1] in self.shown:
            if self.shown[args[-1]] is None:
                raise SlurmSays(f"scontrol: error: no {args[-1]} here")
            return self.shown[args[-1]]
        if verb == "show" and args[1] == "reservation":
            return "".join(f"ReservationName={n} StartTime=now Nodes=(null) Licenses={lic} State=ACTIVE\n"
                           for n, lic in self.reservations.items())
        if verb == "show":
            raise SlurmSays(f"scontrol: show {args[1]}: not faked here")
        if "ReservationName" in words:
            if verb == "delete":
                del self.reservations[words["ReservationName"]]
            else:
                self.reservations[words["ReservationName"]] = words["Licenses"]
            return ""
        if verb == "update" and "JobId" in words:
            self._known(int(words["JobId"])).comment = words["AdminComment"][:COMMENT_MAX]
            return ""
        if verb == "update" and "NodeName" in words:
            node = words["NodeName"]
            self.nodes[node] = ["drained", words["Reason"]] if words.get("State") == "DRAIN" else ["idle", "none"]
            return ""
        job = self._known(int(args[1]))
        if verb == "hold":
            job.held = True
        elif verb == "notify":
            self.told.append((int(args[1]), args[2], job.state == "CANCELLED"))
        elif verb == "requeue":
            if not job.batch:
                raise SlurmSays("Requested operation not supported on this job")
            job.state = "PENDING"
        return ""


class SlurmSays(Exception):
    """What a Slurm command prints on stderr when it fails (exit 1)."""
