"""The checks of Slurm's side: the release, the controller hooks, job_submit.lua, licences, nodes
and their features, the plugstack, the merged configuration, what the site kept, accounting, Pods."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from ...config import SUPPORTED_SLURM, Site
from ...slurm import slurmconf
from ...slurm.conf import plugstack_entries
from ...slurm.refusals import site_rule
from ..install import built_for
from ..render import PROBE_COMMENT
from .findings import Facts, Finding, policy_skip


def check_slurm(site: Site, facts: Facts) -> Finding:
    v = facts.slurm_version
    if v is None:
        return Finding("slurm", False, f"cannot ask Slurm its version ({facts.errors.get('slurm')})",
                       f"check slurm.bin_dir={site.slurm.bin_dir} and that slurmctld answers")
    release = ".".join(v.split(".")[:2])
    if release not in SUPPORTED_SLURM:
        return Finding("slurm", False, f"Slurm {v} is not supported ({', '.join(SUPPORTED_SLURM)})",
                       "run a supported release")
    if release != site.slurm.version:
        return Finding("slurm", False, f"Slurm {v} runs, the site says slurm.version={site.slurm.version}",
                       f"set slurm.version: \"{release}\" and re-run {_apply(site)}")
    return Finding("slurm", True, f"Slurm {v}")


def _apply(site: Site) -> str:
    """How this install takes an edited site description."""
    return "`slurm-ipu setup`" if site.packaged else "make install SITE=<site description>"


def _build(site: Site, what: str) -> str:
    """How this install gets a SPANK plugin for the running Slurm."""
    if site.packaged:
        return f"`make deb` on a machine with this Slurm, then apt install its slurm-ipu-spank ({what})"
    return f"make install ({what})"


def check_hooks(site: Site, facts: Facts) -> Finding:
    want = site.path("hook")
    got = {k: facts.config.get(k) for k in ("PrologSlurmctld", "EpilogSlurmctld")}
    wrong = [f"{k}={v or '(none)'}" for k, v in got.items() if want not in (v or "").split(",")]
    if wrong:
        theirs = {k: v for k, v in got.items() if v and want not in v.split(",")}
        if theirs:  # the site's own script took the key: Slurm keeps one value
            names = ", ".join(f"slurm.site_{k.lower().replace('slurmctld', '_slurmctld')}: {v}"
                              for k, v in theirs.items())
            return Finding("hooks", False, f"{', '.join(wrong)}, expected {want} (Slurm runs one of each)",
                           f"name the site's own script in the site description ({names}), {_apply(site)}, "
                           f"and set the key to {want}: slurm-ipu-hook runs the site's script for every job")
        return Finding("hooks", False, f"{', '.join(wrong)}, expected {want}",
                       "Include slurm-ipu.conf in slurm.conf (render's diff), then restart slurmctld")
    for key in ("slurm.site_prolog_slurmctld", "slurm.site_epilog_slurmctld"):
        for script in site.scripts(key.split("_")[1]):
            if not os.access(script, os.X_OK):
                return Finding("hooks", False, f"{key}: {script} is missing or not executable: every job start or "
                               "end fails", f"install the site's script there, or remove it from {key} in the site "
                               "description")
    broken = _hook_broken(site, want)
    if broken:
        return Finding("hooks", False, broken, f"{_apply(site)} (renders slurm-ipu-hook's settings"
                       + (")" if site.packaged else " and builds it)"))
    own = site.scripts("prolog") + site.scripts("epilog")
    return Finding("hooks", True, f"PrologSlurmctld and EpilogSlurmctld run {want}"
                   + (f", which runs the site's own {' and '.join(own)}" if own else ""))


def _hook_broken(site: Site, hook: str) -> str | None:
    """What keeps slurm-ipu-hook from doing what this site says, tried as slurmctld would start it:
    its settings are not what the site renders, or it is not this package's build (a Python
    upgrade without `make install`), or `slurm-ipu-hook --check` refuses what they name."""
    import subprocess

    from ...hooks.transport import source_id
    from ..fragments import texts

    conf = site.path("hook_conf")
    try:
        text = Path(conf).read_text()
    except OSError as exc:
        return f"{conf}: {exc.strerror}"
    if text != texts(site)["slurm-ipu-hook.conf"]:
        return f"{conf} differs from what the site description renders"
    try:
        proc = subprocess.run([hook, "--check"], capture_output=True, text=True, timeout=10)
    except OSError as exc:
        return f"{hook}: {exc.strerror}"
    except subprocess.TimeoutExpired:
        return f"`{hook} --check` did not answer within 10 s"
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or [f"`{hook} --check` exited {proc.returncode}"])[-1]
    if f"(source {source_id()})" not in proc.stdout:
        return f"{hook} was built from another slurm-ipu than this one"
    return None


def check_timeout(site: Site, facts: Facts) -> Finding:
    raw = facts.config.get("PrologEpilogTimeout", "")
    m = re.match(r"(\d+)", raw)
    if not m:
        return Finding("timeout", False, f"PrologEpilogTimeout={raw or '(unset)'}",
                       f"set PrologEpilogTimeout={site.prolog_epilog_timeout} (the slurm.conf fragment has it)")
    timeout = int(m.group(1))
    longest = max(site.prolog.deadline, site.epilog.deadline)
    if timeout <= longest:
        return Finding("timeout", False, f"PrologEpilogTimeout={timeout} is not above the hooks' deadlines "
                       f"({longest:g} s)", f"set PrologEpilogTimeout={site.prolog_epilog_timeout}")
    return Finding("timeout", True, f"PrologEpilogTimeout={timeout} above the hooks' deadlines ({longest:g} s)")


def check_job_submit(site: Site, facts: Facts) -> Finding:
    from ..fragments import texts

    if "lua" not in facts.config.get("JobSubmitPlugins", ""):
        return Finding("job_submit", False, f"JobSubmitPlugins={facts.config.get('JobSubmitPlugins') or '(none)'}",
                       "JobSubmitPlugins=lua (the slurm.conf fragment has it)")
    conf_dir = Path(facts.config.get("SLURM_CONF", f"{site.slurm.conf_dir}/slurm.conf")).parent
    path = conf_dir / "job_submit.lua"
    ours = texts(site)["job_submit.lua"]
    on_disk = _job_submit_files(site, path, ours)
    if on_disk.ok and (facts.probe is not None or "probe" in facts.errors):
        return _job_submit_runs(facts, path, ours)  # the files read right: and what slurmctld runs?
    return on_disk


def _job_submit_files(site: Site, path: Path, ours: str) -> Finding:
    """The job_submit.lua beside slurm.conf is ours for this site, or dofile()s it and calls it."""
    try:
        text = path.read_text()
    except OSError as exc:
        return Finding("job_submit", False, f"{path}: {exc.strerror}", f"copy the rendered job_submit.lua to {path}")
    if text == ours:
        return Finding("job_submit", True, f"{path} is ours, for a Pod of {site.pod.ipus} IPUs")
    loaded = re.findall(r"dofile\(\s*[\"']([^\"']+)[\"']\s*\)", text)
    if "slurm_ipu.job_submit" in text and loaded:
        for module in loaded:
            try:
                if Path(module).read_text() == ours:
                    return Finding("job_submit", True, f"{path} calls ours ({module}), for a Pod of "
                                   f"{site.pod.ipus} IPUs")
            except OSError:
                continue
        return Finding("job_submit", False, f"{path} loads {', '.join(loaded)}, which is not what the site renders "
                       "(another Pod size or release)", "copy the rendered job_submit.lua over it")
    return Finding("job_submit", False, f"{path} is not slurm-ipu's and does not call it",
                   "use the rendered job_submit.lua, or add the three-line snippet (docs/admin.md)")


def _job_submit_runs(facts: Facts, path: Path, ours: str) -> Finding:
    """check_job_submit from the held probe job: what slurmctld runs decides, not the files."""
    from ..fragments import loaded_id

    probe, want = facts.probe, loaded_id(ours)
    snippet = "docs/admin.md, job_submit.lua"
    if probe is None:
        if rule := site_rule(facts.refusals.get("probe")):
            return policy_skip("job_submit", rule, facts.charge)
        return Finding("job_submit", False, f"the held probe job could not be tried: {facts.errors['probe']}",
                       "check that root may submit a held --gres=ipu:1 job (sbatch --hold)")
    if "ipu" not in probe["licenses"]:
        return Finding("job_submit", False, f"a held --gres=ipu:1 job got Licenses={probe['licenses']}: slurmctld's "
                       f"job_submit.lua does not run slurm_ipu.job_submit", f"the dofile and the slurm_ipu.job_submit "
                       f"line in {path} ({snippet}), then restart slurmctld")
    if probe["modify"] == "accepted":
        after = probe["after"]
        return Finding("job_submit", False, f"a GRES update of a held IPU job went through (now {after['tres']}, "
                       f"Licenses={after['licenses']}): slurm_job_modify does not run slurm_ipu.job_modify",
                       f"its first line calls slurm_ipu.job_modify ({snippet}); restart slurmctld")
    running = probe["comment"].removeprefix(PROBE_COMMENT) if probe["comment"].startswith(PROBE_COMMENT) else None
    if running != want:
        loaded = running or "from before this release"
        return Finding("job_submit", False, f"slurmctld runs job_submit.lua code {loaded}, the site renders {want}",
                       f"put the rendered job_submit.lua in place, then `touch {path}` "
                       "(slurmctld reloads job_submit.lua, not what it dofile()s, at a submit after its time) or "
                       "restart slurmctld")
    return Finding("job_submit", True, f"slurmctld runs ours (code {want}): a held --gres=ipu:1 job got "
                   f"Licenses={probe['licenses']}, a GRES update of it was refused")


def check_licenses(site: Site, facts: Facts) -> Finding:
    lic = dict(_pairs(facts.config.get("Licenses", "")))
    gres_types = facts.config.get("GresTypes", "")
    problems = []
    if lic.get("ipu") != str(site.pod.ipus):
        problems.append(f"Licenses has ipu:{lic.get('ipu', '(none)')}, the Pod has {site.pod.ipus}")
    if "ipu" not in [t.strip() for t in gres_types.split(",")]:
        problems.append(f"GresTypes={gres_types or '(none)'} lacks ipu")
    if problems:
        return Finding("licenses", False, "; ".join(problems), "Include the rendered slurm.conf fragment, "
                       "then restart slurmctld (Licenses needs a restart)")
    return Finding("licenses", True, f"Licenses=ipu:{site.pod.ipus}, GresTypes has ipu")


def _pairs(text: str):
    for item in text.split(","):
        name, _, count = item.strip().partition(":")
        if name:
            yield name, count or "1"


def check_nodes(site: Site, facts: Facts) -> Finding:
    if not facts.nodes:
        return Finding("nodes", False, f"cannot list nodes ({facts.errors.get('nodes', 'none defined')})",
                       "check that slurmctld answers")
    sizes = site.host_ipus()
    runs = site.host_features()  # without them job_submit.lua's constraint names features no node has
    bad = []
    for host in site.hosts:
        want = f"ipu:{sizes[host]}"
        node = facts.nodes.get(host)
        gres = (node or {}).get("Gres", "(null)")
        lacking = [f for f in runs.get(host, []) if f not in (node or {}).get("AvailableFeatures", "").split(",")]
        if node is None:
            bad.append(f"{host} is not a Slurm node")
        elif want not in gres.split(","):
            bad.append(f"{host} has Gres={gres}, not {want}")
        elif lacking:
            bad.append(f"{host} lacks the feature(s) {','.join(lacking)} (its size or its runs of the allocation "
                       "model, which job_submit.lua keeps jobs to)")
    strays = [n for n, f in facts.nodes.items() if n not in site.hosts and "ipu" in f.get("Gres", "")]
    bad += [f"{n} has IPUs but is not cabled to the Pod (pod.hosts)" for n in strays]
    features = " and the Features slurm-ipu.conf lists for each" if runs else ""
    one = sorted(set(sizes.values()))
    want = f"ipu:{one[0]}" if len(one) == 1 else "ipu:<its Pod's ipus_per_host>"
    if bad:
        return Finding("nodes", False, "; ".join(bad[:4]) + (" ..." if len(bad) > 4 else ""),
                       f"Gres={want}{features} on the NodeName lines of {site.pod.hosts} only, and the gres.conf "
                       "lines (slurm.conf.diff adds them)")
    return Finding("nodes", True, f"{len(site.hosts)} nodes with Gres={want}" + (" and their Features of slurm-ipu"
                                                                                 if runs else ""))


def check_plugstack(site: Site, facts: Facts) -> Finding:
    conf = facts.config.get("PlugStackConfig", "(null)")
    if conf in ("", "(null)"):  # unset: plugstack.conf beside slurm.conf (what configless sites send)
        conf = str(Path(facts.config.get("SLURM_CONF") or f"{site.slurm.conf_dir}/slurm.conf").parent /
                   "plugstack.conf")
    found = [(where, ln) for where, ln in plugstack_entries(conf) if "spank_ipu" in ln]
    lines = [ln for _, ln in found]
    fix = f"include the rendered plugstack-ipu.conf from {conf}, the same on login and compute nodes"
    if not lines:
        return Finding("plugstack", False, f"{conf} does not load spank_ipu.so", fix)
    if len(found) > 1:  # every srun then prints `spank: option "ipus" provided by both ...`
        where = ", ".join(dict.fromkeys(w for w, _ in found))
        return Finding("plugstack", False, f"{conf} loads spank_ipu.so {len(found)} times ({where}): Slurm refuses "
                       "an option two plugins offer", "keep one of those lines (docs/admin.md, Merge the fragments)")
    if "enable_configless" in facts.config.get("SlurmctldParameters", ""):
        from ...slurm.conf import sent_plugstack_lines

        if not any("spank_ipu" in ln for ln in sent_plugstack_lines(conf, facts.slurm_version or "0.0")):
            return Finding("plugstack", False, f"{conf} loads spank_ipu.so through an include slurmctld does not "
                           "send to configless nodes: their jobs get no partition", f"put the line of "
                           f"plugstack-ipu.conf into {conf} itself (docs/admin.md, Configless sites)")
    words = shlex.split(lines[0])
    plugin = words[1] if len(words) > 1 else ""
    args = dict(w.split("=", 1) for w in words[2:] if "=" in w)
    want = {"vipu_host": site.ipuof_host, "vipu_port": str(site.ipuof_port),
            "prefix": site.partition.prefix, "helper": site.path("helper"),
            "allocation_model": "yes" if "allocation" in site.models else "no"}
    wrong = [f"{k}={args.get(k, '(unset)')} (site: {v})" for k, v in want.items() if args.get(k) != v]
    if wrong:
        return Finding("plugstack", False, "spank_ipu.so has " + ", ".join(wrong), fix)
    if not Path(plugin).is_file():
        return Finding("plugstack", False, f"{plugin} does not exist", _build(site, "installs it"))
    from ...slurm.releases import release

    built = built_for(Path(plugin))
    running = facts.slurm_version
    # Slurm loads a SPANK plugin of its own major and minor release (src/common/plugin.c masks the micro)
    if running and (built is None or release(built) != release(running)):
        return Finding("plugstack", False, f"{plugin} was built for Slurm {built or 'an unknown release'}, "
                       f"Slurm {running} runs", _build(site, "builds it against this Slurm"))
    return Finding("plugstack", True, f"{plugin} (built for Slurm {built}) with the site's controller and prefix")


def check_merged(site: Site, facts: Facts) -> Finding:
    """What the site's own files declare is what slurmctld runs: no key of the fragment set twice
    (Slurm keeps the last, silently dropping a site's GRES or licence), and every item the site
    declared for a list-valued key in effect."""
    from ..merge import ITEM_NAMES, items, ours

    if facts.declared is None:
        return Finding("merged", False, f"cannot read slurm.conf ({facts.errors.get('declared')})",
                       "run doctor on the slurmctld host, where slurm.conf is")
    keys = {k.lower() for k in ours(site)}
    twice = {k: v for k, v in slurmconf.defined_twice(facts.declared).items() if k in keys}
    fix = ("slurm-ipu render --out DIR (merges them into slurm-ipu.conf), then apply DIR/slurm.conf.diff "
           "(docs/admin.md, step 3)")
    if twice:
        key, where = next(iter(twice.items()))
        places = " and ".join(f"{s.key}={s.value} at {s.where}" for s in where)
        return Finding("merged", False, f"{places}: Slurm keeps the last", fix)
    canonical = {k.lower(): k for k in ITEM_NAMES}
    for setting in facts.declared:
        key = canonical.get(setting.key.lower())
        if key is None:
            continue
        name, effective = ITEM_NAMES[key], facts.config.get(key, "")
        live = {name(i) for i in items(effective)}
        lost = [i for i in items(setting.value) if name(i) not in live]
        if lost:
            return Finding("merged", False, f"{setting.key} item {lost[0]} of {setting.where} is not in effect "
                           f"({key}={effective or '(none)'})", fix)
    return Finding("merged", True, "every key slurm-ipu.conf sets is set once, with the site's own values in effect")


def check_kept(site: Site, facts: Facts) -> Finding:
    """The site's own Slurm, as it runs, against its snapshot: a node's GRES, features, CPUs,
    memory, partitions and switch, the licences and partitions, and the job shapes it accepted."""
    from ..snapshot import lost, policy_refused

    path = site.path("snapshot")
    if facts.snapshot is None and "kept" not in facts.errors:
        return Finding("kept", True, f"not compared: no snapshot at {path} (`slurm-ipu snapshot` records the site's "
                       "own before merging, docs/admin.md step 3)", skipped=True)
    if facts.kept is None:
        return Finding("kept", False, f"cannot compare with the snapshot ({facts.errors.get('kept')})",
                       "check that slurmctld answers, or record the snapshot again")
    gone = lost(facts.snapshot, facts.kept)
    if gone:
        more = f" (and {len(gone) - 3} more)" if len(gone) > 3 else ""
        return Finding("kept", False, "; ".join(gone[:3]) + more,
                       "give it back in the site's own files (a NodeName line's Gres= replaces its DEFAULT line's; "
                       "slurm-ipu render keeps both), restart slurmctld, and run doctor again")
    snap = facts.snapshot
    ruled = [rule for shape in snap["shapes"] if (rule := policy_refused(facts.kept, shape))]
    if ruled:
        return policy_skip("kept", ruled[0], facts.charge)
    shapes = sum(v == "ok" for v in snap["shapes"].values())
    return Finding("kept", True, f"the site's own as in {path}: {len(snap['nodes'])} nodes, "
                   f"{len(snap['licences'])} licences, {shapes} job shapes")


def check_accounting(site: Site, facts: Facts) -> Finding:
    host = site.accounting.slurmdbd_host
    if not host:
        return Finding("accounting", True, "no slurmdbd in the site description: sacct shows no IPUs")
    kind = facts.config.get("AccountingStorageType", "")
    tracked = [t.strip() for t in facts.config.get("AccountingStorageTRES", "").split(",")]
    missing = [t for t in ("gres/ipu", "license/ipu") if t not in tracked]
    if kind != "accounting_storage/slurmdbd":
        return Finding("accounting", False, f"the site has slurmdbd on {host}, slurmctld runs "
                       f"AccountingStorageType={kind or '(none)'}",
                       "set AccountingStorageType=accounting_storage/slurmdbd and restart slurmctld")
    if missing:
        return Finding("accounting", False, f"AccountingStorageTRES lacks {', '.join(missing)}: sacct and sreport "
                       "show no IPUs", "Include the rendered slurm.conf fragment "
                       "(AccountingStorageTRES=gres/ipu,license/ipu), then restart slurmctld")
    if facts.clusters is None:
        return Finding("accounting", False, f"slurmdbd does not answer ({facts.errors.get('slurmdbd')})",
                       f"start slurmdbd on {host} (systemctl start slurmdbd)")
    if site.cluster not in facts.clusters:
        return Finding("accounting", False, f"slurmdbd knows no cluster {site.cluster} "
                       f"({', '.join(facts.clusters) or 'none'})",
                       f"check ClusterName in slurm.conf, or sacctmgr add cluster {site.cluster}")
    return Finding("accounting", True, f"slurmdbd has cluster {site.cluster}, tracking gres/ipu and license/ipu")


def check_pods(site: Site, facts: Facts) -> Finding:
    """Multi-Pod: Slurm keeps jobs inside Pods only with the tree topology, one leaf switch per
    Pod holding exactly its hosts, and a max_switch_wait as long as job_submit.lua asks."""
    from ..render import SWITCH_WAIT

    if not site.pods:
        return Finding("pods", True, "one Pod: no topology needed")
    fix = (f"render again and apply slurm.conf.diff (it merges the Pods into the site's own topology.conf) or copy "
           f"the rendered topology.conf, with TopologyPlugin=topology/tree and max_switch_wait={SWITCH_WAIT}; restart "
           "slurmctld")
    plugin = facts.config.get("TopologyPlugin", "")
    if "tree" not in plugin:
        return Finding("pods", False, f"TopologyPlugin={plugin or '(unset)'}: Slurm does not see the Pods", fix)
    m = re.search(r"max_switch_wait=(\d+)", facts.config.get("SchedulerParameters", ""))
    if not m or int(m.group(1)) < SWITCH_WAIT:
        return Finding("pods", False, f"max_switch_wait={m.group(1) if m else '300 (the default)'}: jobs stop "
                       "waiting for their Pods and may straddle them", fix)
    if facts.topology is None:
        return Finding("pods", False, f"cannot read Slurm's topology ({facts.errors.get('topology')})", fix)
    leaves = facts.topology
    wrong = [f"{h} is under {' and '.join(leaves.get(h, ['no switch']))}, not {p.name}" for p in site.pods
             for h in p.hosts if leaves.get(h) != [p.name]]
    # Slurm logs these and goes on: a node in several leaves, or in none (no job starts there)
    wrong += [f"{h} is under leaf switches {' and '.join(ls)}" for h, ls in sorted(leaves.items()) if len(ls) > 1
              and h not in site.hosts and not any(h in p.hosts for p in site.pods)]
    wrong += [f"{n} is under no switch: Slurm finds no path to it" for n in sorted(facts.nodes) if n not in leaves]
    if wrong:
        return Finding("pods", False, "; ".join(wrong[:3]) + (" ..." if len(wrong) > 3 else ""), fix)
    return Finding("pods", True, f"{len(site.pods)} Pods, each one switch of Slurm's topology "
                   f"({', '.join(p.name for p in site.pods)})")
