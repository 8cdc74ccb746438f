"""The lab's files and builds: its site description (rendered and merged as any site's, docs/admin.md),
its slurm.conf, the SPANK plugin, slurm-ipu-hook and the C `vipu` (spank/lab/vipu_fast.c),
and the product's commands on its PATH."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from .. import config, rules
from ..cbuild import c_tree, make
from ..deploy import render
from ..emulator.api import OWNER_ENV, SOCKET_DIR_ENV, SOCKET_PREFIX
from ..errors import LabError, SlurmIpuError
from ..fsutil import atomic_write
from ..hooks.transport import build_hook, hook_source
from ..slurm import releases
from .procs import say
from .spec import (
    CLUSTER,
    CONTROLLERS,
    FROM_PACKAGES,
    MODEL_PARTITIONS,
    PACKAGES_PLUGIN_DIR,
    PREFIX,
    REPO,
    SBIN,
    SLURM_PREFIX,
    TWIN_GRES,
    LabSpec,
)


def context(spec: LabSpec) -> dict:
    """What the lab's own slurm.conf needs beyond the site's fragments (machine, ports, paths)."""
    host = socket.gethostname()
    mem = max(1024, (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // (1 << 20) // spec.nodes // 2)
    # the node features a site's NodeName lines carry (Site.host_features) and their IPUs
    site = config.parse(site_description(spec), "site.yaml")
    features, ipus = site.host_features(), site.host_ipus()
    ctx = {
        "cluster_name": CLUSTER,
        "controller": {"hostname": CONTROLLERS[0][0] if spec.backup else host, "addr": "127.0.0.1",
                       "port": spec.ctld_port},
        "backup": {"hostname": CONTROLLERS[1][0], "addr": CONTROLLERS[1][1]} if spec.backup else None,
        "slurm_user": "root",
        "paths": {k: str(spec.path(v)) for k, v in
                  {"state": "spool/ctld", "spool": "spool", "run": "run", "log": "log", "etc": "etc"}.items()},
        "nodes": [{"name": n, "hostname": host, "addr": "127.0.0.1", "port": spec.node_port + i,
                   "cpus": os.cpu_count() or 1, "memory_mb": mem, "ipus": ipus[n],
                   "features": features.get(n, [])}
                  for i, n in enumerate(spec.node_names)],
        "partition_name": "ipu",
        "model_partitions": _model_partitions(spec), "tenants": spec.controllers > 1,
        # A munged of the lab's own: no lab, test run or benchmark can stop another's.
        "munge_socket": str(spec.path("run", "munge.socket")),
        # A requeued job waits cred_expire (120 s by default) before it may start again: the lab's
        # requeue drills should not.
        "cred_expire": 30,
        "configless": spec.configless,
        "twin": TWIN_GRES if spec.twin_gres else None,
    }
    ctx["accounting"] = None
    if spec.accounting:
        from . import accounting

        ctx["accounting"] = accounting.context(spec)
    ctx.update(render.pod_values(spec.pod_ipus))
    return ctx


def _twin_gres(spec: LabSpec) -> str:
    """The site's own gres.conf line for the twin GRES (LabSpec.twin_gres), after slurm-ipu's."""
    if not spec.twin_gres:
        return ""
    return f"# the site's own GRES (no hooks)\nName={TWIN_GRES} Count={spec.ipus_per_node}\n"


def _model_partitions(spec: LabSpec) -> list[dict]:
    """--model mixed: a Slurm partition of each model's hosts (Pod a: allocation; the rest).
    --controllers: a Slurm partition of each controller's hosts, named like it (a tenant's)."""
    if spec.controllers > 1:
        return [{"name": name, "nodes": pod["hosts"]} for name, pod in zip(spec.controller_names, _pods(spec),
                                                                             strict=True)]
    if spec.model != "mixed":
        return []
    pods = _pods(spec)
    return [{"name": MODEL_PARTITIONS["allocation"], "nodes": pods[0]["hosts"]},
            {"name": MODEL_PARTITIONS["partition"], "nodes": ",".join(p["hosts"] for p in pods[1:])}]


def site_description(spec: LabSpec) -> str:
    """The lab's site description: rendered and merged exactly as a site's would be (docs/admin.md),
    with every path inside the lab's directory."""
    doc = {
        "version": 1,
        "cluster": CLUSTER,
        "vipu": {"host": "127.0.0.1", "port": spec.vipu_port, "command": str(spec.path("bin", "vipu")),
                 "timeout": 5.0, "emulator": True,
                 "model": "partition" if spec.model == "mixed" else spec.model,
                 "admin_command": str(spec.path("bin", "vipu-admin"))},
        "pod": _pod_section(spec),
        "partition": {"prefix": PREFIX},
        "prolog": {"deadline": spec.prolog_deadline},
        "epilog": {"deadline": spec.epilog_deadline},
        "reap": {"interval": spec.reap_interval},
        "accounting": {"slurmdbd_host": "127.0.0.1" if spec.accounting else None},
        "prolog_epilog_timeout": int(spec.prolog_deadline * 2),
        "state_dir": str(spec.path("state")),
        "slurm": {"version": _slurm_release(), "user": "root", "conf_dir": str(spec.path("etc")),
                  "bin_dir": str(SLURM_PREFIX / "bin"), "plugin_dir": _plugin_dir(spec)},
        "install": {"prefix": spec.prefix or str(spec.path("install")), "poprun": spec.poprun,
                    "site": str(spec.path("etc", "site.yaml")), "unit_dir": str(spec.path("systemd"))},
    }
    if spec.pods > 1:
        doc["pods"] = _pods(spec)
        doc["vipu"]["allocation"] = "all"
    if spec.controllers > 1:  # each Pod its controller (an emulator of its own)
        del doc["vipu"]["host"], doc["vipu"]["allocation"]
        doc["controllers"] = [{"name": name, "host": "127.0.0.1", "port": port, "pods": [pod["name"]]}
                              for name, port, pod in zip(spec.controller_names, spec.controller_ports, doc["pods"],
                                                         strict=True)]
    if spec.model == "mixed":
        doc["pods"][0]["model"] = "allocation"
    if spec.pods > 2 and spec.pods % 2 == 0:  # a POD256 as two pairs: podab and podcd
        names = [p["name"] for p in doc["pods"]]
        doc["pod_groups"] = [{"name": "pod" + names[k][-1] + names[k + 1][-1], "pods": names[k:k + 2]}
                             for k in range(0, len(names), 2)]
    import yaml

    return "# The lab's site description (written by `slurm-ipu lab up`).\n" + yaml.safe_dump(doc, sort_keys=False)


def _plugin_dir(spec: LabSpec) -> str:
    """Where the lab's jobs load the SPANK plugin from: the lab's copy, or where the Debian package
    put it (Slurm's plugin directory: the packages' place is not the lab's to choose)."""
    return PACKAGES_PLUGIN_DIR if spec.prefix == config.PACKAGED else str(spec.path("lib"))


def _pod_section(spec: LabSpec) -> dict:
    if spec.pods == 1:
        return {"ipus": spec.pod_ipus, "hosts": f"node[1-{spec.nodes}]" if spec.nodes > 1 else "node1",
                "ipus_per_host": spec.ipus_per_node}
    if spec.pod_hosts:  # each Pod says its own; this is the default a Pod without one would take
        return {"ipus_per_host": rules.IPUS_PER_ILD // spec.pod_hosts[0]}
    return {"ipus_per_host": spec.ipus_per_node}


def _hostlist(first: int, count: int) -> str:
    return f"node[{first}-{first + count - 1}]" if count > 1 else f"node{first}"


def _pods(spec: LabSpec) -> list[dict]:
    """Pods a, b, ... of consecutive node ranges: equal ones (nodes 1-4 are Pod a of a 2-Pod 8-node
    lab), or --pod-hosts' (4,2,1: node[1-4] of 16 IPUs each, node[5-6] of 32, node7 of 64)."""
    if spec.pod_hosts:
        starts = [1 + sum(spec.pod_hosts[:k]) for k in range(len(spec.pod_hosts))]
        return [{"name": f"pod{chr(ord('a') + k)}", "hosts": _hostlist(first, count), "ilds": 1,
                 "ipus_per_host": rules.IPUS_PER_ILD // count}
                for k, (first, count) in enumerate(zip(starts, spec.pod_hosts, strict=True))]
    per = spec.nodes // spec.pods
    ipus = spec.pod_ipus // spec.pods
    size = {"ilds": ipus // rules.IPUS_PER_ILD} if ipus >= rules.IPUS_PER_ILD else {"ipus": ipus}  # a vPOD
    return [{"name": f"pod{chr(ord('a') + k)}", "hosts": _hostlist(k * per + 1, per), **size}
            for k in range(spec.pods)]


def _slurm_release() -> str:
    """The installed Slurm's release, as the lab's site description names it."""
    version = releases.installed(SBIN)
    if version is None or releases.release(version) not in releases.SUPPORTED:
        raise LabError(f"{SBIN / 'slurmctld'} -V says {version or 'nothing'}: the lab runs on Slurm "
                       f"{', '.join(releases.SUPPORTED)}; install one (apt-get install slurm-wlm)")
    return releases.release(version)


LAB_COMMANDS = {"ipurun": "slurm_ipu.launcher.cli", "slurm-ipu": "slurm_ipu.cli", "vipu-emu": "slurm_ipu.emulator.main"}


def _script(path: Path, body: str) -> None:
    atomic_write(path, body, 0o755)


def _link(path: Path, to: str) -> None:
    if path.is_symlink() and os.readlink(path) == to:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(to)
    os.replace(tmp, path)


def install_site(spec: LabSpec):
    """Render the lab's site description and put each fragment where its header says, as an admin
    merges them; the lab's 'install' is PREFIX/venv (_install_venv)."""
    from ..deploy import fragments

    etc = spec.path("etc")
    atomic_write(etc / "site.yaml", site_description(spec))
    desc = config.load(str(etc / "site.yaml"), twins=False)
    conf = str(etc / "slurm.conf")  # merged as a site's is (deploy/merge.py): its own keys, the diff applied
    # The site's own plugstack.conf, including its own directory by absolute path as sites do. On a
    # configless site slurmctld never sends what that names: the merge puts the plugin's line in
    # plugstack.conf itself (deploy/merge.py), elsewhere it is linked into the directory.
    (etc / "plugstack.conf.d").mkdir(exist_ok=True)
    if not (etc / "plugstack.conf").exists() or spec.configless:
        atomic_write(etc / "plugstack.conf", f"include {etc}/plugstack.conf.d/*.conf\n")
    (etc / "plugstack.conf.d" / "slurm-ipu.conf").unlink(missing_ok=True)
    # the last lab's topology.conf is not a site's own: merged into as one, it would be dropped below
    # and slurmctld would wait for it (a lab brought up again with other Pods in the same directory)
    (etc / "topology.conf").unlink(missing_ok=True)
    texts = fragments.write(desc, etc / "site", conf)
    for path, (_, merged) in fragments.edits(desc, conf).items():
        atomic_write(path, merged)
    texts = {p.name: p.read_text() for p in texts}
    atomic_write(etc / "slurm-ipu.conf", texts["slurm-ipu.conf"])
    atomic_write(etc / "gres.conf", texts["gres-ipu.conf"] + _twin_gres(spec))
    if not spec.configless:
        atomic_write(etc / "plugstack.conf.d" / "slurm-ipu.conf", texts["plugstack-ipu.conf"])
    atomic_write(etc / "job_submit.lua", texts["job_submit.lua"])
    if "topology.conf" in texts:
        atomic_write(etc / "topology.conf", texts["topology.conf"])
    else:
        (etc / "topology.conf").unlink(missing_ok=True)
    if spec.prefix:
        _check_installed(spec, desc, texts)
        return desc
    libexec = spec.path("install", "libexec")
    libexec.mkdir(parents=True, exist_ok=True)
    _install_venv(spec)
    atomic_write(desc.path("hook_conf"), texts["slurm-ipu-hook.conf"])
    hook = Path(desc.path("hook"))
    if FROM_PACKAGES:
        _copy_exe(_packaged(config.PACKAGED_PATHS["hook"]), hook)
    elif not hook.exists() or hook.stat().st_mtime < hook_source().stat().st_mtime:  # like bin/vipu-fast: once
        build_hook(hook)
    return desc


def _install_venv(spec: LabSpec) -> None:
    """PREFIX/venv as the rendered files name it: its python is this interpreter's environment (the
    hooks, as root); its slurm-ipu is the users' copy, since the SPANK plugin runs `slurm-ipu step`
    as the job's user in srun (spank/step.c) and root's environment can be closed to them."""
    venv = spec.path("install", "venv")
    if venv.is_symlink():  # a lab of an earlier version linked the whole environment
        venv.unlink()
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    _script(venv / "bin" / "python", f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    path, python = users_python(spec)
    _script(venv / "bin" / "slurm-ipu", f"#!/bin/sh\n{_module_command(path, python, 'slurm_ipu.cli')}")


def _packaged(path: str) -> Path:
    if not Path(path).is_file():
        raise LabError(f"{path} is missing: the lab runs from the Debian packages, which put it there; "
                       "apt install slurm-ipu slurm-ipu-spank")
    return Path(path)


def _check_installed(spec: LabSpec, desc, texts: dict) -> None:
    """Installed mode: what make install put in place must be what this lab's site renders."""
    fix = (f"run `make install PREFIX={spec.prefix} SITE=<(slurm-ipu lab site --dir {spec.dir} "
           f"--prefix {spec.prefix})` first" if spec.prefix != config.PACKAGED else
           f"put `slurm-ipu lab site --dir {spec.dir} --prefix {spec.prefix}` at /etc/slurm-ipu/site.yaml and run "
           "`slurm-ipu setup` first")
    path = desc.path("hook_conf")
    try:
        same = Path(path).read_text() == texts["slurm-ipu-hook.conf"] and os.access(desc.path("hook"), os.X_OK)
    except OSError:
        same = False
    if not same:
        raise LabError(f"{path} is missing or not rendered from this lab's site; {fix}")
    if not Path(desc.path("plugin")).is_file():
        raise LabError(f"{desc.path('plugin')} is missing; {fix}")
    if spec.prefix == config.PACKAGED:
        if not FROM_PACKAGES:
            raise LabError(f"this slurm-ipu runs from {Path(__file__).parents[2]}, not the Debian packages' "
                           "install; run /usr/bin/slurm-ipu")
    elif Path(sys.prefix).resolve() != Path(spec.prefix, "venv").resolve():
        raise LabError(f"this slurm-ipu runs from {sys.prefix}, not the install in {spec.prefix}; "
                       f"run {spec.prefix}/venv/bin/slurm-ipu")


def write_files(spec: LabSpec) -> None:
    for sub in ("etc", "bin", "spool/ctld", "run", "log", "state", "vipu-emu"):
        spec.path(sub).mkdir(parents=True, exist_ok=True)
    # The hooks' state directory, as private as a site's (deploy/install.py: 0700, SlurmUser's):
    # the lab's SlurmUser is root (context), who alone runs the hooks and the slurm-ipu service; the
    # lab's users read neither the hooks' log nor the records of other users' jobs.
    spec.path("state").chmod(0o700)
    for name in spec.node_names:
        spec.path("spool", name).mkdir(exist_ok=True)
    if not spec.own_conf:
        _write_slurm(spec)
    _write_bin(spec)


def _write_slurm(spec: LabSpec) -> None:
    """Slurm's configuration and the site's fragments, merged (the lab as a site built from its
    description); the emulator's cluster from the same description."""
    ctx = context(spec)
    atomic_write(spec.path("etc", "slurm.conf"), render.render("lab/slurm.conf", ctx))
    if spec.accounting:
        atomic_write(spec.path("etc", "slurmdbd.conf"), render.render("lab/slurmdbd.conf", ctx), 0o600)
    cgroup = releases.cgroup_conf(releases.installed(SBIN) or "0.0")
    if cgroup:
        atomic_write(spec.path("etc", "cgroup.conf"), cgroup)
    desc = install_site(spec)
    from ..deploy import fragments

    if spec.controllers > 1:  # an emulator per controller, each with its own Pods' machines
        for k, name in enumerate(spec.controller_names):
            atomic_write(spec.path("etc", f"{spec.emulator_key(k)}.yaml"), fragments.emulator_cluster(desc, name))
    else:
        atomic_write(spec.path("etc", "vipu-emu.yaml"), fragments.emulator_cluster(desc))


def _write_bin(spec: LabSpec) -> None:
    """The V-IPU controller's `vipu` command (as a Pod's hosts have it) and the product's commands,
    on the lab's own PATH."""
    py = sys.executable
    # The emulator's own socket (in its state directory, which no other user can write) and the
    # uid it runs as: the lab's commands never dial a name another user could hold (emulator/api.py).
    address = (f"VIPU_CLI_API_HOST=${{VIPU_CLI_API_HOST:-127.0.0.1}} "
               f"VIPU_CLI_API_PORT=${{VIPU_CLI_API_PORT:-{spec.vipu_port}}} "
               f"{SOCKET_DIR_ENV}=${{{SOCKET_DIR_ENV}:-{spec.path('vipu-emu')}}} "
               f"{OWNER_ENV}=${{{OWNER_ENV}:-{os.geteuid()}}}")
    path, python = users_python(spec)
    cli = f"{address} {_module_command(path, python, 'slurm_ipu.emulator.vipucli')}"
    _script(spec.path("bin", "vipu-py"), f"#!/bin/sh\n# The emulator's vipu-compatible command line.\n{cli}")
    # The lab's `vipu`: create, remove, list and reset in C, as cheap as a native vipu; the rest in
    # Python. Its `vipu-admin` (allocations: the allocation model's prolog and epilog) and `vipu-cli`
    # (poptorch's and popart's name) are the same. The C one carries the lab's address and fallback
    # compiled in, so each is that program itself: one exec per call, no shell around it.
    fast = build_vipu_fast(spec, lab_defaults=True)
    for name in VIPU_NAMES:
        if fast:
            _copy_exe(fast, spec.path("bin", name))
        else:
            _script(spec.path("bin", name), f"#!/bin/sh\n# The lab's {name}: the emulator's CLI (docs/vipu.md).\n"
                                            f"exec {spec.path('bin', 'vipu-py')} \"$@\"\n")
    # The product's own commands on the lab's PATH: the install's interpreter (--prefix), else the
    # users' copy, which every user of the lab can run.
    for name, module in LAB_COMMANDS.items():
        command = f"exec {py} -m {module} \"$@\"\n" if spec.prefix else _module_command(path, python, module)
        _script(spec.path("bin", name), f"#!/bin/sh\n{command}")
    if spec.poprun:  # install.poprun: PopRun's name for ipurun, as an install puts it
        _link(spec.path("bin", "poprun"), "ipurun")
    else:
        spec.path("bin", "poprun").unlink(missing_ok=True)


VIPU_NAMES = ("vipu", "vipu-admin", "vipu-cli")


def _copy_exe(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    shutil.copy2(source, tmp)
    os.replace(tmp, target)


# What the package imports when a user runs it (doctor, status, the emulator's CLI): copied beside
# it for users, since the checkout and root's Python may be closed to them.
USER_MODULES = ("slurm_ipu", "yaml", "_yaml", "jinja2", "markupsafe")


def users_python(spec: LabSpec) -> tuple[str, str]:
    """(PYTHONPATH, interpreter) for what the lab's users run of the package (its `vipu`, doctor and
    status as a user): a copy of the package and what it imports, in the lab's directory (a
    checkout in root's home is closed to other users), run by an interpreter they can
    reach (root's python3 can be a pyenv build under /root; then the system's, of the same
    feature release, as Debian's python3 is)."""
    where = spec.path("py")
    where.mkdir(exist_ok=True)
    where.chmod(0o755)
    for name in USER_MODULES:
        _copy_module(name, where)
    # the templates (doctor renders what it compares) and the C tree (doctor hashes hook.c), where
    # an installed package has them
    shutil.copytree(render.templates_dir(), where / "slurm_ipu" / "templates", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(c_tree(), where / "slurm_ipu" / "csrc", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.o", "*.so"))
    python = Path(sys.executable).resolve()
    system = Path("/usr/bin/python3")
    if python.is_relative_to("/root") and system.exists():
        python = system
    # Compiled now, by the interpreter they run: users cannot write __pycache__ here, and each of
    # their commands would compile what it imports again (`slurm-ipu step` runs in every srun).
    subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", str(where)], capture_output=True, timeout=300,
                   check=False)
    return str(where), str(python)


def _module_command(path: str, python: str, module: str) -> str:
    """A shell line running `python -m module "$@"` with the users' copy first on its path and no
    PYTHONPATH set: what it starts (ipurun's tasks, a user's own Python) inherits nothing of ours."""
    boot = (f"import sys; sys.path.insert(0, {path!r}); import runpy; "
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return f"exec {python} -P -c \"{boot}\" \"$@\"\n"


def _copy_module(name: str, where: Path) -> None:
    import importlib.util

    found = importlib.util.find_spec(name)
    if found is None or found.origin is None:
        return  # an optional one this interpreter lacks (_yaml: PyYAML without its C part)
    source = Path(found.origin)
    if found.submodule_search_locations:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.o", "*.so" if name == "slurm_ipu" else "-")
        shutil.copytree(source.parent, where / name, ignore=ignore, dirs_exist_ok=True)
    else:
        shutil.copy2(source, where / source.name)


def _compiler() -> str:
    """What build_vipu_fast's stamp records of the machine: musl-tools installed later rebuilds
    (spank/Makefile takes musl-gcc first where it is)."""
    return " musl" if shutil.which("musl-gcc") else ""


def build_vipu_fast(spec: LabSpec, lab_defaults: bool = False) -> Path | None:
    """bin/vipu-fast from spank/lab/vipu_fast.c (`make vipu-fast`, a fraction of a second, once per
    source and flags); None without make and gcc: the Python CLI does every call then, only slower.
    lab_defaults: the lab's address, Python fallback, the emulator's own socket directory and its
    owner (who starts the lab) compiled in (the environment still wins)."""
    source = c_tree() / "lab" / "vipu_fast.c"
    target = spec.path("bin", "vipu-fast")
    flags = [f'-DSOCKET_PREFIX="{SOCKET_PREFIX}"']  # the emulator's API socket (emulator/api.py)
    if lab_defaults:
        flags += ['-DLAB_HOST="127.0.0.1"', f'-DLAB_PORT="{spec.vipu_port}"',
                  f'-DLAB_FALLBACK="{spec.path("bin", "vipu-py")}"',
                  f'-DLAB_SOCKET_DIR="{spec.path("vipu-emu")}"', f'-DLAB_OWNER="{os.geteuid()}"']
    stamp, key = target.with_name(".vipu-fast.flags"), " ".join(flags) + _compiler()
    fresh = target.exists() and source.exists() and target.stat().st_mtime >= source.stat().st_mtime
    if fresh and stamp.exists() and stamp.read_text() == key:
        return target
    if not source.exists() or not (shutil.which("make") and shutil.which("gcc")):
        return None
    try:
        make("vipu-fast", target, "the lab's vipu", flags)
    except SlurmIpuError as exc:
        raise LabError(str(exc)) from None
    stamp.write_text(key)
    return target


def ensure_spank(spec: LabSpec) -> None:
    """spank/spank_ipu.so for the lab's Slurm: Debian's headers, or a site-built Slurm's own (built
    again each time: a plugin is loaded only by the release it was compiled for)."""
    so = REPO / "spank" / "spank_ipu.so"
    sources = list((REPO / "spank").glob("*.[ch]"))
    own = SLURM_PREFIX != Path("/usr")
    if not own and so.exists() and all(so.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return
    say("building the SPANK plugin")
    flags = []
    if own:
        from ..slurm.installation import find

        flags = ["-B", f"SLURM_CFLAGS={' '.join(find(str(SLURM_PREFIX)).cflags)}"]
    proc = subprocess.run(["make", "-s", "-C", str(REPO / "spank"), *flags], capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        raise LabError(f"building spank/ failed: {proc.stderr.strip()[-400:]}")


def install_spank(spec: LabSpec) -> None:
    """A copy in the lab, as an install puts it in Slurm's plugin directory: every user's sbatch
    and srun load it, and the checkout may sit where they cannot read. Running from the Debian
    packages, the copy is slurm-ipu-spank's."""
    if FROM_PACKAGES:
        source = _packaged(f"{PACKAGES_PLUGIN_DIR}/spank_ipu.so")
    else:
        ensure_spank(spec)
        source = REPO / "spank" / "spank_ipu.so"
    lib = spec.path("lib")
    lib.mkdir(parents=True, exist_ok=True)
    atomic_write(lib / "spank_ipu.so", source.read_bytes(), 0o755)
