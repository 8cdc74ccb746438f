"""The site description's typed sections: a frozen dataclass per section of the option table
(slurm_ipu/config/options.py), generated from it by `make generated` (slurm_ipu/deploy/example.py;
a unit test keeps this file equal to what it prints). A loaded Site holds one of each
(Site.freeze), so a key is read as `site.vipu.host`; a misspelt one fails where it is read, and a
test reads every such read in the package against the table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VipuSection:
    host: str | None
    port: int
    allocation: str | None
    command: str
    cli_config: str | None
    model: str
    admin_command: str
    timeout: float
    retries: int
    name_max: int
    emulator: bool
    emulator_cross_pod: str
    emulator_cross_pod_delay: float


@dataclass(frozen=True)
class AllocationSection:
    prefix: str
    partition: bool


@dataclass(frozen=True)
class IpuofSection:
    host: str | None
    port: int | None


@dataclass(frozen=True)
class PodSection:
    ipus: int | None
    hosts: str | None
    agents: str | None
    ipus_per_host: int


@dataclass(frozen=True)
class PartitionSection:
    prefix: str


@dataclass(frozen=True)
class PrologSection:
    deadline: float
    max_attempts: int


@dataclass(frozen=True)
class EpilogSection:
    deadline: float


@dataclass(frozen=True)
class ReapSection:
    interval: float


@dataclass(frozen=True)
class HealthSection:
    interval: float


@dataclass(frozen=True)
class MetricsSection:
    textfile: str | None


@dataclass(frozen=True)
class AccountingSection:
    slurmdbd_host: str | None


@dataclass(frozen=True)
class SlurmSection:
    version: str
    user: str
    site_prolog_slurmctld: str | None
    site_epilog_slurmctld: str | None
    conf_dir: str
    bin_dir: str
    plugin_dir: str


@dataclass(frozen=True)
class InstallSection:
    site: str
    unit_dir: str
    poprun: bool
    prefix: str


class Sections:
    """What a loaded site holds: each top-level key, and each section (Site.freeze sets them)."""
    cluster: str
    prolog_epilog_timeout: int
    state_dir: str
    vipu: VipuSection
    allocation: AllocationSection
    ipuof: IpuofSection
    pod: PodSection
    partition: PartitionSection
    prolog: PrologSection
    epilog: EpilogSection
    reap: ReapSection
    health: HealthSection
    metrics: MetricsSection
    accounting: AccountingSection
    slurm: SlurmSection
    install: InstallSection


SECTIONS = {
    "vipu": VipuSection,
    "allocation": AllocationSection,
    "ipuof": IpuofSection,
    "pod": PodSection,
    "partition": PartitionSection,
    "prolog": PrologSection,
    "epilog": EpilogSection,
    "reap": ReapSection,
    "health": HealthSection,
    "metrics": MetricsSection,
    "accounting": AccountingSection,
    "slurm": SlurmSection,
    "install": InstallSection,
}
TOP = ("cluster", "prolog_epilog_timeout", "state_dir")
