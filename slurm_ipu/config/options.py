"""The option table: every key of the site description with its type, default, range and help.
FIELDS is the only such table; the typed sections (sections.py), the environment twins
(SLURM_IPU_<KEY>), the example site file (etc/site-pod128.yaml) and docs/options.md are generated
from it (slurm_ipu/deploy/example.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..rules import NAME_MAX, VIPU_PORT
from ..slurm import releases

DEFAULT_SITE = "/etc/slurm-ipu/site.yaml"
SUPPORTED_SLURM = releases.SUPPORTED


# --- range checks: value -> None if valid, else the valid range in words ---------------------

def _between(lo: float, hi: float):
    def check(v):
        return None if lo <= v <= hi else f"from {lo:g} to {hi:g}"
    return check


def _positive(v):
    return None if 0 < v <= 86400 else "a positive number of seconds, at most 86400 (a day)"


def _pod_size(v):
    from ..rules import POD_SIZES, is_pod_size

    return None if is_pod_size(v) else f"a Pod size: {POD_SIZES}; a bigger cluster is pods:"


PREFIX_CHARS = "-_"  # what the SPANK plugin accepts in its prefix= argument (spank/args.c)


def _prefix(v):
    ok = 0 < len(v) < 32 and all(c.isascii() and (c.isalnum() or c in PREFIX_CHARS) for c in v)
    return None if ok else f"1 to 31 letters, digits and '{PREFIX_CHARS}' (the SPANK plugin's rule)"


def _abs(v: str):
    return None if v.startswith("/") and "\n" not in v else "an absolute path"


def _plain_path(v: str):
    ok = v.startswith("/") and not any(c.isspace() for c in v)
    return None if ok else "an absolute path without spaces"


def _plain_paths(v: str):
    """One or more absolute paths, comma-separated (a site's several controller scripts)."""
    ok = all(_plain_path(item) is None for item in v.split(","))
    return None if ok else "absolute paths without spaces, separated by ','"


def _version(v: str):
    return None if v in SUPPORTED_SLURM else f"one of {', '.join(SUPPORTED_SLURM)}"


def name_check(v: str):
    ok = 0 < len(v) <= 40 and all(c.isascii() and (c.isalnum() or c in "-_") for c in v)
    return None if ok else "1 to 40 letters, digits, '-' and '_'"


def _host(v: str):
    ok = 0 < len(v) <= 253 and all(c.isascii() and (c.isalnum() or c in "-._:") for c in v)
    return None if ok else "a host name or address"


def _model(v: str):
    return None if v in ("partition", "allocation") else "partition or allocation"


def _cross_pod(v: str):
    return None if v in ("refuse", "slow") else "refuse or slow"


_port = _between(1, 65535)



# --- the table --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    key: str          # dotted YAML path
    type: type
    default: Any
    help: str
    check: Any = None
    required: bool = False
    example: Any = None  # the value etc/site-pod128.yaml shows; None: the default

    @property
    def env(self) -> str | None:
        """Its environment twin; lists (the Pods) have none."""
        return None if self.type is list else "SLURM_IPU_" + self.key.upper().replace(".", "_")


POD128 = [{"name": "poda", "hosts": "ipu-host[1-4]", "ilds": 1}, {"name": "podb", "hosts": "ipu-host[5-8]", "ilds": 1}]

FIELDS = (
    Field("cluster", str, None, "the Slurm cluster's name (ClusterName)", name_check, required=True,
          example="ipupod128"),
    Field("vipu.host", str, None, "the V-IPU controller's address (vipu --api-host); required unless "
          "controllers: names each", _host, example="vipu.ipupod128.example.org"),
    Field("vipu.port", int, VIPU_PORT, "the V-IPU controller's port (vipu --api-port)", _port),
    Field("vipu.allocation", str, None, "the V-IPU allocation partitions are created in (with pods: the one "
          "holding every Pod; each Pod has its own, named like the Pod); null: the controller's default",
          name_check, example="all"),
    Field("vipu.command", str, "/usr/bin/vipu", "the vipu command the hooks run (an absolute path: hooks have no "
          "PATH)", _plain_path),
    Field("vipu.cli_config", str, None, "the vipu CLI's config file with the hooks' V-IPU credentials "
          "(vipu --config); null: none", _plain_path, example="/etc/slurm-ipu/vipu-cli.hcl"),
    Field("vipu.model", str, "partition", "what the prolog makes for an IPU job: 'partition' (one V-IPU partition "
          "sized to the job) or 'allocation' (Graphcore's host-IPU mapping: an allocation of the IPU-Machines of the "
          "job's hosts, granted to its user, who makes partitions in it; docs/admin.md)", _model),
    Field("vipu.admin_command", str, "/usr/bin/vipu-admin", "with vipu.model allocation: the vipu-admin command "
          "the hooks create and remove jobs' allocations with (an absolute path)", _plain_path),
    Field("vipu.timeout", float, 10.0, "seconds allowed for one vipu call", _positive),
    Field("vipu.retries", int, 2, "extra attempts of a vipu call that failed transiently", _between(0, 10)),
    Field("vipu.name_max", int, NAME_MAX, "the longest partition or allocation name the V-IPU controller takes; "
          "Graphcore does not publish its limit, so the default is the emulator's: lower it to what your "
          "controller accepts, and the prefixes are held to it for the largest job and step ids Slurm hands out",
          _between(20, NAME_MAX)),
    Field("vipu.emulator", bool, False, "the controller is vipu-emu (labs, drills): pass it each job's hosts "
          "and owner (--hosts/--owner-uid), which a real controller does not take"),
    Field("vipu.emulator_cross_pod", str, "refuse", "with vipu.emulator and pods: an attach from a host to another "
          "Pod's IPUs is refused ('refuse'), or served after vipu.emulator_cross_pod_delay ('slow')", _cross_pod),
    Field("vipu.emulator_cross_pod_delay", float, 0.5, "seconds a 'slow' cross-Pod attach takes (the emulator)",
          _between(0, 60)),
    Field("allocation.prefix", str, "c", "with vipu.model allocation: a job's allocation is prefix + job id "
          "(Graphcore's scripts use c${SLURM_JOB_ID})", _prefix),
    Field("allocation.partition", bool, False, "with vipu.model allocation: also create, in the job's allocation, "
          "a partition of all its IPUs named partition.prefix + job id (the IPUOF_VIPU_API_PARTITION_ID its tasks "
          "get), owned by the job's user, who may remove or replace it"),
    Field("ipuof.host", str, None, "IPUOF_VIPU_API_HOST in tasks; null: vipu.host", _host),
    Field("ipuof.port", int, None, "IPUOF_VIPU_API_PORT in tasks; null: vipu.port", _port),
    Field("pod.ipus", int, None, "IPUs in the Pod (64 per ILD); not with pods: (their sum)", _pod_size),
    Field("pod.hosts", str, None, "the host servers cabled to the Pod, as a Slurm hostlist (ipu-host[1-8]); "
          "not with pods: (theirs)"),
    Field("pod.agents", str, None, "with vipu.model allocation: the Pod's IPU-Machines as V-IPU names its agents, "
          "in V-IPU's order, as a hostlist (ag[01-16]); a Pod of pods: has its own agents key; null: ag0, ag1, ... "
          "counted over the Pods (the emulator's names)"),
    Field("pod.ipus_per_host", int, None, "IPUs each host's jobs may ask for (--gres=ipu:N), its Gres count",
          _between(1, 64), required=True, example=16),
    Field("pods", list, None, "a multi-Pod cluster, instead of pod.ipus/pod.hosts: each Pod's name (its V-IPU "
          "allocation and Slurm switch), hosts (a hostlist), ilds (IPU-Link domains of 64 IPUs, default 1), "
          "ipus_per_host (default pod.ipus_per_host; Pods may differ, and a job stays on hosts of one "
          "size) and model (its jobs' V-IPU model, default vipu.model)",
          example=POD128),
    Field("controllers", list, None, "with pods: several V-IPU controllers (a vPOD per tenant, or a controller "
          "per Pod), instead of vipu.host: each one's name (its label in messages and metrics), host, pods (the "
          "names of the Pods it manages; a job stays under one controller), port (default vipu.port), cli_config "
          "(its credentials, default vipu.cli_config), allocation (the V-IPU allocation holding its Pods, for jobs "
          "over several; default its name) and ipuof_host/ipuof_port (what its jobs' tasks are given; default "
          "its host and port)"),
    Field("pod_groups", list, None, "with pods: groups of Pods used together (a POD256 as two pairs), each a "
          "switch above its Pods and a V-IPU allocation holding theirs: name, pods and model (its Pods' V-IPU "
          "model)"),
    Field("partition.prefix", str, "slurm_", "partition name = prefix + job id (Graphcore's own plugin used "
          "slurm_)", _prefix),
    Field("prolog.deadline", float, 60.0, "seconds the prolog may take in all, every V-IPU call included",
          _positive),
    Field("prolog.max_attempts", int, 3, "prolog failures before the job is held for an admin (those a failed "
          "IPU-Machine caused do not count)", _between(1, 100)),
    Field("epilog.deadline", float, 30.0, "seconds the epilog may take in all", _positive),
    Field("reap.interval", float, 300.0, "seconds between the slurm-ipu service's full reaps (orphans whose job is "
          "gone)", _between(5, 86400)),
    Field("health.interval", float, 60.0, "seconds between the slurm-ipu service's health passes: a host whose "
          "IPU-Machine failed is drained, and resumed when it is back (allocation model; 0: no passes)",
          _between(0, 86400)),
    Field("metrics.textfile", str, None, "where the slurm-ipu service writes `slurm-ipu metrics` every "
          "health.interval, for node_exporter's textfile collector (e.g. "
          "/var/lib/prometheus/node-exporter/slurm_ipu.prom); unset: "
          "nowhere", _plain_path),
    Field("prolog_epilog_timeout", int, 180, "Slurm's PrologEpilogTimeout: above both deadlines",
          _between(1, 86400)),
    Field("state_dir", str, "/var/lib/slurm-ipu", "the hooks' state: creation records, the removal journal, "
          "hooks.log, locks (root-only)", _abs),
    Field("accounting.slurmdbd_host", str, None, "slurmdbd's host, to track IPUs in accounting; null: none",
          _host, example="slurmdbd.ipupod128.example.org"),
    Field("slurm.version", str, "22.05", "the Slurm release the cluster runs", _version),
    Field("slurm.user", str, "slurm", "SlurmUser: the hooks and the slurm-ipu service run as this user and own "
          "state_dir", name_check),
    Field("slurm.site_prolog_slurmctld", str, None, "the site's own PrologSlurmctld scripts (one, or several "
          "separated by ','), run by slurm-ipu-hook in that order for every job before ours, the first failure "
          "failing the job start; null: none", _plain_paths),
    Field("slurm.site_epilog_slurmctld", str, None, "the site's own EpilogSlurmctld scripts (one, or several "
          "separated by ','), run by slurm-ipu-hook in that order for every job after ours; null: none",
          _plain_paths),
    Field("slurm.conf_dir", str, "/etc/slurm", "where slurm.conf lives (the hooks pass its slurm.conf as "
          "SLURM_CONF)", _abs),
    Field("slurm.bin_dir", str, "/usr/bin", "where scontrol and squeue live (hooks have no PATH)", _abs),
    Field("slurm.plugin_dir", str, "/usr/lib/x86_64-linux-gnu/slurm-wlm", "Slurm's plugin directory (the SPANK "
          "plugin goes there)", _abs),
    Field("install.site", str, DEFAULT_SITE, "where `make install` puts this file: every installed command reads "
          "it there", _abs),
    Field("install.unit_dir", str, "/etc/systemd/system", "where `make install` puts the slurm-ipu service's unit",
          _abs),
    Field("install.poprun", bool, False, "also install ipurun as `poprun` (make install: in BINDIR; the Debian "
          "packages: /usr/local/bin, by `slurm-ipu setup`), so scripts written for PopRun run unchanged; off by "
          "default: a Poplar SDK's own poprun on a user's PATH would then depend on PATH order (docs/admin.md)"),
    Field("install.prefix", str, "/opt/slurm-ipu", "where `make install` puts slurm-ipu (its venv, the hook "
          "controller hooks); `make install PREFIX=` must name the same; /usr: installed from the Debian packages "
          "(`make deb`; then `slurm-ipu setup` after each edit of this file)", _abs),
)
BY_KEY = {f.key: f for f in FIELDS}

# Keys of the hooks' own config.yaml that earlier releases rendered beside the site description.
EARLIER = {"vipu.emulator_flags", "partition.allocation", "pod.pods", "pod.groups", "slurm.conf",
           "install.config"}


# --- the site ---------------------------------------------------------------------------------
