"""One error hierarchy for everything slurm-ipu raises on purpose.

CLIs turn a SlurmIpuError into one line on stderr and exit code 2 (no traceback unless
--debug). Anything else escaping is a bug and keeps its traceback.
"""


def shown(value: object, limit: int = 80) -> str:
    """A value as an error line names it: repr, cut to `limit` characters with its length said (a
    200 KB value from a site file or a request never fills a log line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit // 2]}...({len(text)} characters)"


class SlurmIpuError(Exception):
    """Root of every error slurm-ipu raises deliberately.

    `component` names who speaks in the one-line message; None means "the program that
    caught it" (slurm-ipu, ipurun, vipu-emu).
    """

    component: str | None = None
    exit_code = 2

    def line(self, default_component: str = "slurm-ipu") -> str:
        return f"{self.component or default_component}: {self}"


class ConfigError(SlurmIpuError):
    """Bad configuration or command-line input."""


class UnsafePath(ConfigError):
    """A path root would write through or into is not root's own (a link, another user's file or
    directory, a directory others can write)."""


class ServiceDied(SlurmIpuError):
    """A thread of the slurm-ipu service died of an exception: the service stopped, exit 1 (systemd
    and the lab start it again)."""

    exit_code = 1


class VipuError(SlurmIpuError):
    """V-IPU refused or failed a request."""

    component = "vipu"
    transient = False
    kind = "other"  # slurm_ipu_vipu_errors_total's label (hooks/stats.py)


class VipuUnavailable(VipuError):
    """The V-IPU controller could not be reached, timed out, or failed internally."""

    transient = True
    kind = "unavailable"


class PartitionExists(VipuError):
    kind = "exists"


class PartitionNotFound(VipuError):
    kind = "not_found"


class InsufficientIpus(VipuError):
    kind = "exhausted"


class InvalidPartition(VipuError):
    kind = "invalid"


class PermissionDenied(VipuError):
    kind = "denied"


class PartitionNotReady(VipuError):
    """The partition exists but is not ACTIVE (still PENDING, or in ERROR)."""

    kind = "not_ready"


class AttachError(SlurmIpuError):
    """What an IPUoF client would report when it cannot attach."""

    component = "ipuof"


class SlurmError(SlurmIpuError):
    """A Slurm command failed or printed something we cannot read. `said`: the command's own
    lines (bounded), where the message keeps the first: a refusal's second line says whose rule it
    was (sbatch: a job_submit's message, then `Batch job submission failed`)."""

    component = "slurm"

    def __init__(self, message: str, said: tuple[str, ...] = ()):
        super().__init__(message)
        self.said = said


class LabError(SlurmIpuError):
    component = "slurm-ipu lab"
