"""`slurm-ipu`: the admin and hook entry point. Each subcommand lives in its own module and is
imported only when chosen, so the Slurm hooks pay for nothing they do not use."""

from __future__ import annotations

import sys

from . import __version__
from .cli_common import run_main


def _days(text: str) -> float:
    import argparse

    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not 0 < days <= 3660:
        raise argparse.ArgumentTypeError(f"--days {text!r}: use a number of days above 0, at most 3660")
    return days


def build_parser():
    import argparse  # not at the top: `slurm-ipu step`, in every srun of an IPU job, never parses

    from .rules import VIPU_PORT

    top = argparse.ArgumentParser(prog="slurm-ipu", description="Graphcore IPU Pods on stock Slurm")
    top.add_argument("--version", action="version", version=f"slurm-ipu {__version__}")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = top.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("rules", help="print the partition rules and the valid sizes for a Pod")
    r.add_argument("--ipus", type=int, default=64, help="IPUs in the Pod (default 64)")
    r.add_argument("--ilds", type=int, default=None, help="ILDs in the Pod (default: IPUs / 64, rounded up)")

    sub.add_parser("demo", help="the main job: lab up, an IPU job end to end, the partition gone after")

    site_help = "the site description (default $SLURM_IPU_SITE, else /etc/slurm-ipu/site.yaml from make install)"
    for name, text in (("prolog", "PrologSlurmctld: create the job's V-IPU partition"),
                       ("epilog", "EpilogSlurmctld: remove the job's V-IPU partition"),
                       ("hook", "PrologSlurmctld or EpilogSlurmctld, chosen by $SLURM_SCRIPT_CONTEXT")):
        h = sub.add_parser(name, help=text)
        h.add_argument("--site", help=site_help)

    s = sub.add_parser("service", help="the slurm-ipu service (systemd's slurm-ipu.service runs it, as SlurmUser): "
                       "the controller hooks of IPU jobs run warm, ended jobs' partitions removed as the epilog queues "
                       "them, a reap every reap.interval and a health pass every health.interval (until SIGTERM)")
    s.add_argument("--site", help=site_help)

    p = sub.add_parser("reap", help="remove orphaned and journaled partitions (while the slurm-ipu service runs, it "
                       "reaps on this command's behalf)")
    p.add_argument("--site", help=site_help)
    how = p.add_mutually_exclusive_group()
    how.add_argument("--dry-run", action="store_true", help="say what would be removed; change nothing")
    # The service's name before it had one of its own: units and scripts of earlier installs run it.
    how.add_argument("--watch", action="store_true", help="the same as `slurm-ipu service` (its earlier name)")

    h = sub.add_parser("health", help="one health pass: drain the hosts of failed IPU-Machines, resume them when "
                       "they are back (the slurm-ipu service runs one every health.interval)")
    h.add_argument("--site", help=site_help)
    h.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")

    m = sub.add_parser("metrics", help="the cluster's IPUs as Prometheus metrics (text exposition format); the hook "
                       "service also writes them to metrics.textfile every health.interval")
    m.add_argument("--site", help=site_help)

    r = sub.add_parser("render", help="render a site description into the fragments a site merges")
    r.add_argument("site", help="the site description (YAML; see etc/site-pod128.yaml)")
    r.add_argument("--out", required=True, help="directory for the fragments (created)")
    r.add_argument("--slurm-conf", help="the site's slurm.conf to merge with (its list-valued keys carry its own "
                   "values too, and slurm.conf.diff comments out its own lines for them); default: "
                   "slurm.conf_dir/slurm.conf when it exists; 'none': do not merge")

    um = sub.add_parser("unmerge", help="the diff that gives the site's own slurm.conf (and what it includes) back "
                        "as it was before slurm-ipu, however often it was merged and re-rendered")
    um.add_argument("--site", help=site_help)
    um.add_argument("--out", required=True, help="directory for slurm.conf.unmerge.diff (created)")
    um.add_argument("--slurm-conf", help="the site's slurm.conf (default: slurm.conf_dir/slurm.conf)")

    d = sub.add_parser("doctor", help="check the live cluster against the site description (exit 1 on a problem)")
    d.add_argument("--site", help=site_help)
    d.add_argument("--account", help="the Slurm account doctor's test jobs are charged to, on a site whose policy "
                   "requires one (default: $SBATCH_ACCOUNT, else $SLURM_ACCOUNT, else with accounting your "
                   "association's default account)")
    d.add_argument("--qos", help="the QOS of doctor's test jobs (default: $SBATCH_QOS, else $SLURM_QOS, else none)")
    d.add_argument("--partition", help="the Slurm partition of doctor's test jobs (default: $SBATCH_PARTITION, else "
                   "$SLURM_PARTITION, else the cluster's default)")
    d.add_argument("--jobs", action="store_true", help="also run a 1-IPU step on a host of each Pod, as root, through "
                   "Slurm: its task must see its partition (the SPANK plugin loaded where jobs run)")
    sn = sub.add_parser("snapshot", help="record the site's own Slurm as it runs (nodes' GRES, features and "
                        "partitions, licences, topology, job shapes it accepts), before merging: doctor then "
                        "names anything of it the site lost")
    sn.add_argument("--site", help=site_help)
    sn.add_argument("--shape", action="append", default=[], metavar="'SBATCH OPTIONS'",
                    help="a job shape of the site's own to keep accepting, e.g. '-p gpu --gres=gpu:2 -N2' (repeat; "
                         "kept with the snapshot)")
    su = sub.add_parser("setup", help="on a node installed from the Debian packages: write what the site description "
                        "decides (slurm-ipu-hook's settings, the state directory, the slurm-ipu service's drop-in); "
                        "run after each edit of it")
    su.add_argument("--site", help=site_help)
    st = sub.add_parser("status", help="the IPU view of the cluster: capacity, partitions and their jobs")
    st.add_argument("--site", help=site_help)
    st.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    st.add_argument("--days", type=_days, default=7.0,
                    help="with accounting: IPU-hours per user over this many days (default 7)")

    lab = sub.add_parser("lab", help="a real Slurm cluster on this machine, with the V-IPU emulator")
    lab.add_argument("action", choices=("up", "down", "status", "site"),
                     help="site: print the lab's site description (for make install SITE=...)")
    lab.add_argument("--dir", help="lab directory (default $SLURM_IPU_LAB_DIR, else /var/lib/slurm-ipu/lab for root, "
                                   "~/.local/state/slurm-ipu/lab for others); it and its parents must belong to "
                                   "you or root and be writable by nobody else")
    lab.add_argument("--nodes", type=int, default=4)
    lab.add_argument("--ipus-per-node", type=int, default=16)
    lab.add_argument("--pods", type=int, default=1,
                     help="split the nodes into this many Pods (e.g. --nodes 8 --pods 2: two POD64s)")
    lab.add_argument("--pod-hosts", type=_counts, default=(),
                     help="hosts of different IPU counts: POD64s cabled to this many hosts each (4,2,1: hosts of "
                          "16, 32 and 64 IPUs); sets --nodes and --pods")
    lab.add_argument("--ctld-port", type=int, default=16817)
    lab.add_argument("--node-port", type=int, default=17001, help="first slurmd port (one per node)")
    lab.add_argument("--vipu-port", type=int, default=VIPU_PORT)
    lab.add_argument("--accounting", action="store_true",
                     help="add MariaDB and slurmdbd (Debian's packages): sacct and sreport show IPUs")
    lab.add_argument("--dbd-port", type=int, default=16819, help="slurmdbd's port (with --accounting)")
    lab.add_argument("--db-port", type=int, default=16820, help="MariaDB's port (with --accounting)")
    lab.add_argument("--prefix", help="run on slurm-ipu as `make install PREFIX=... SITE=<lab site>` installed it, "
                                      "instead of installing its own copy")
    lab.add_argument("--model", choices=("partition", "allocation", "mixed"), default="partition",
                     help="vipu.model of the lab's site: a partition per job (default), an allocation per job of "
                          "its hosts' IPU-Machines (Graphcore's host-IPU mapping), or mixed (with --pods: Pod a "
                          "allocation, the others partition; Slurm partitions ipu-alloc and ipu-part)")
    lab.add_argument("--backup", action="store_true",
                     help="a backup controller: slurmctld ctl1 (127.0.0.1) and ctl2 (127.0.0.2), each in namespaces of "
                          "its own, sharing the state directory (kill ctl1 and ctl2 takes over)")
    lab.add_argument("--controllers", type=int, default=1,
                     help="several V-IPU controllers: the nodes split into this many vPODs (or Pods), each with an "
                          "emulator of its own (on --vipu-port and the ports after it) and a Slurm partition "
                          "ctla, ctlb, ... of its hosts (e.g. --nodes 4 --ipus-per-node 8 --controllers 2)")
    lab.add_argument("--configless", action="store_true",
                     help="a configless cluster: slurmd fetches its configuration from slurmctld (--conf-server) "
                          "and sees no slurm.conf of its own")
    lab.add_argument("--poprun", action="store_true",
                     help="install.poprun in the lab's site: `poprun` on the lab's PATH is ipurun")
    lab.add_argument("--own-conf", action="store_true",
                     help="start Slurm from the slurm.conf and vipu-emu.yaml already in DIR/etc (a site's own "
                          "files): the lab writes no configuration, installs nothing, starts no slurm-ipu service")
    return top


def cmd_rules(args) -> int:
    from . import rules
    from .errors import ConfigError

    try:
        rules.check_pod(args.ipus)
    except rules.InvalidPartition as exc:
        raise ConfigError(f"--ipus {args.ipus}: {exc}") from None
    most = -(-args.ipus // rules.IPUS_PER_ILD)
    ilds = most if args.ilds is None else args.ilds
    if not 1 <= ilds <= most:
        raise ConfigError(f"--ilds {ilds}: a Pod of {args.ipus} IPUs has 1 to {most} ILD(s) of 64 IPUs")
    for key, text in rules.RULES.items():
        print(f"{key:<11} {text}")
    print(f"{'sizes':<11} {', '.join(map(str, rules.valid_sizes(args.ipus)))}")
    for size in rules.valid_sizes(args.ipus):
        for n in rules.valid_ilds(size, ilds):
            gcds = ",".join(map(str, rules.valid_gcds(size, n)))
            print(f"  size {size:>4}: ilds {n}: gcds {gcds}")
    return 0


def cmd_hook(args) -> int:
    import os

    from . import config
    from .errors import SlurmIpuError
    from .hooks import jobenv

    which = args.cmd
    if which == "hook":
        context = os.environ.get("SLURM_SCRIPT_CONTEXT", "")
        which = {"prolog_slurmctld": "prolog", "epilog_slurmctld": "epilog"}.get(context)
        if which is None:
            from .errors import ConfigError

            raise ConfigError(f"SLURM_SCRIPT_CONTEXT={os.environ.get('SLURM_SCRIPT_CONTEXT', '')!r}: "
                              "use `slurm-ipu hook` as PrologSlurmctld/EpilogSlurmctld, or call prolog/epilog")
    cfg = config.load(args.site, twins=False)
    try:
        ctx = jobenv.from_env(dict(os.environ))
    except SlurmIpuError as exc:
        # slurmctld keeps only the exit status: the reason goes where the admin looks for ours
        # (and, for a prolog, into the held job's AdminComment)
        from .hooks import prolog
        from .hooks.hooklog import report

        if which == "prolog":
            prolog.refuse_env(dict(os.environ), cfg, _slurm(cfg), exc)
        else:
            report(cfg.state_dir, f"job {os.environ.get('SLURM_JOB_ID') or '?'}: {which} refused its "
                                     f"environment: {exc}", echo=False)
        raise
    if which == "prolog":
        from .hooks import prolog

        return prolog.run(ctx, cfg, _clients(cfg), _slurm(cfg))
    from .hooks import epilog

    return epilog.run(ctx, cfg, _clients(cfg))


def _clients(cfg):
    """A V-IPU client per controller of the site: the hooks take a job's by its hosts."""
    from .hooks.controllers import Clients

    return Clients(cfg)


def _slurm(cfg):
    from .slurm.commands import SlurmCli

    return SlurmCli(cfg.slurm_conf, cfg.slurm.bin_dir)


def cmd_reap(args) -> int:
    from . import config
    from .hooks import reap

    if args.watch:
        return cmd_service(args)
    cfg = config.load(args.site, twins=False)
    return reap.run(cfg, _clients(cfg), _slurm(cfg), dry_run=args.dry_run)


def cmd_service(args) -> int:
    from . import config
    from .hooks.service import Service

    cfg = config.load(args.site, twins=False)
    slurm = _slurm(cfg)
    clients = _clients(cfg)
    return Service(cfg, clients, slurm, after_health=_metrics_textfile(cfg, clients, slurm)).run()


def _metrics_textfile(cfg, client, slurm):
    """What the slurm-ipu service runs after each health pass: the metrics for node_exporter."""
    path = cfg.metrics.textfile
    if not path:
        return None

    def write() -> None:
        from .deploy import metrics

        metrics.write_textfile(path, metrics.collect(cfg, client, slurm))
    return write


def cmd_metrics(args) -> int:
    from .deploy import metrics

    return metrics.main(_site_path(args))


def cmd_health(args) -> int:
    import time

    from . import config
    from .hooks import health

    cfg = config.load(args.site, twins=False)
    changed = health.run(cfg, _clients(cfg), _slurm(cfg), deadline=time.monotonic() + cfg.epilog.deadline,
                         dry_run=args.dry_run)
    if not changed:
        print("health: nothing to change" + ("" if health.mapped_hosts(cfg) else
                                             " (no Pod of the allocation model: no host maps to a machine)"))
    return 0


def _site_path(args) -> str:
    from .config import locate

    return locate(path=args.site)[0]


def cmd_doctor(args) -> int:
    from .deploy import doctor

    return doctor.main(_site_path(args), jobs=args.jobs, account=args.account, qos=args.qos,
                       partition=args.partition)


def cmd_snapshot(args) -> int:
    from .config import load
    from .deploy import snapshot

    return snapshot.main(load(_site_path(args)), args.shape)


def cmd_setup(args) -> int:
    from .config import load, refuse_repeated_keys
    from .deploy import setup

    site = load(_site_path(args), twins=False)  # what the hooks read, as they read it
    refuse_repeated_keys(site)
    return setup.main(site)


def cmd_status(args) -> int:
    from .deploy import status

    return status.main(_site_path(args), as_json=args.json, days=args.days)


def cmd_render(args) -> int:
    from pathlib import Path

    from .config import load, refuse_repeated_keys
    from .deploy import fragments

    desc = load(args.site)
    refuse_repeated_keys(desc)
    conf = args.slurm_conf or (desc.slurm_conf if Path(desc.slurm_conf).is_file() else "none")
    for path in fragments.write(desc, Path(args.out), None if conf == "none" else conf):
        print(path)
    if conf == "none":
        why = "--slurm-conf none" if args.slurm_conf else f"{desc.slurm_conf} does not exist"
        print(f"render: not merged with a slurm.conf ({why}): merge each key of slurm-ipu.conf your slurm.conf "
              "also sets by hand (docs/admin.md)", file=sys.stderr)
    return 0


def cmd_unmerge(args) -> int:
    from pathlib import Path

    from .config import load
    from .deploy import merge
    from .fsutil import atomic_write

    desc = load(_site_path(args))
    conf = args.slurm_conf or desc.slurm_conf
    changes = merge.unmerge(desc, conf)
    if not changes:
        print(f"unmerge: nothing of slurm-ipu's in {conf} or what it includes", file=sys.stderr)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / UNMERGE_DIFF, merge.as_diff(changes), 0o644)
    print(out / UNMERGE_DIFF)
    return 0


UNMERGE_DIFF = "slurm.conf.unmerge.diff"  # `patch -d / -p1 < DIR/slurm.conf.unmerge.diff` applies it


def _lab():
    """The lab (and the emulator it runs), which the Debian packages ship apart: slurm-ipu-lab."""
    try:
        from . import lab
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(("slurm_ipu.lab", "slurm_ipu.emulator")):
            raise
        from .errors import ConfigError

        raise ConfigError("slurm-ipu lab: the lab and the V-IPU emulator are not installed here; on Debian "
                          "`apt install slurm-ipu-lab` (production nodes need neither)") from None
    return lab


def _counts(text: str) -> tuple[int, ...]:
    """--pod-hosts 4,2,1 -> (4, 2, 1)."""
    import argparse

    try:
        return tuple(int(k) for k in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of host counts; use e.g. 4,2,1") from None


def cmd_lab(args) -> int:
    from pathlib import Path

    lab = _lab()
    shape = {"nodes": sum(args.pod_hosts), "pods": len(args.pod_hosts), "pod_hosts": args.pod_hosts} \
        if args.pod_hosts else {"nodes": args.nodes, "pods": args.pods}
    spec = lab.LabSpec(dir=Path(args.dir) if args.dir else lab.trust.default_dir(), **shape,
                       ipus_per_node=args.ipus_per_node, ctld_port=args.ctld_port, node_port=args.node_port,
                       vipu_port=args.vipu_port, prefix=args.prefix, accounting=args.accounting,
                       dbd_port=args.dbd_port, db_port=args.db_port, own_conf=args.own_conf,
                       configless=args.configless, poprun=args.poprun, backup=args.backup,
                       model=args.model, controllers=args.controllers)
    if args.action == "site":
        lab.check_spec(spec)
        print(lab.site_description(spec), end="")
        return 0
    if args.action == "up":
        lab.up(spec)
        return 0
    if args.action == "down":
        lab.down(spec)
        return 0
    return lab.status(spec)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["step"]:  # the SPANK plugin's, once per step in srun: no parser, no other import
        from .launcher.steps import main as step_main

        return step_main(argv[1:])
    args = build_parser().parse_args(argv)

    def dispatch() -> int:
        if args.cmd == "demo":
            _lab()
            from .lab.demo import main as demo_main

            return demo_main()
        table = {"rules": cmd_rules, "prolog": cmd_hook, "epilog": cmd_hook, "hook": cmd_hook,
                 "reap": cmd_reap, "service": cmd_service, "health": cmd_health, "metrics": cmd_metrics,
                 "render": cmd_render, "doctor": cmd_doctor, "snapshot": cmd_snapshot,
                 "unmerge": cmd_unmerge, "setup": cmd_setup,
                 "status": cmd_status, "lab": cmd_lab}
        return table[args.cmd](args)

    return run_main(dispatch, debug=args.debug, program="slurm-ipu")


if __name__ == "__main__":
    sys.exit(main())
