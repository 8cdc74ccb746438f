"""A site that already runs Slurm adopts slurm-ipu by docs/admin.md and loses nothing of its own
.

The site is written here by hand, as its admins had it before slurm-ipu: its own slurm.conf (not
the lab's template), a GPU GRES, a matlab licence, a job_submit.lua rule (every job gives a
--time), its own PrologSlurmctld and EpilogSlurmctld (a trace line per job), its own SPANK plugin
(--site-tag) and SchedulerParameters. `slurm-ipu lab up --own-conf` starts Slurm from those files
and the V-IPU emulator beside it; everything after that is what docs/admin.md tells an admin to
type (each command below is checked to be in docs/admin.md, then run with the site's paths in
place of /etc/slurm and /tmp/site): describe, install, merge, restart, doctor; break what the
issue found broken and doctor names it; uninstall in the documented order with a plain job run
after every step, and the site's files are back byte for byte. Runs on every supported release
(the host's 22.05, and 24.11 and 26.05 in their chroots).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_ipu import lab as labmod
from slurm_ipu.emulator.api import Api
from slurm_ipu.fsutil import poll
from slurm_ipu.slurm import releases

from ..waiting import wait_for
from .conftest import ensure_users, started_lab

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "docs" / "admin.md").read_text()
NODES = 3  # node1 and node2 are the Pod's hosts, node3 has the site's GPU
# The site has two PrologSlurmctld lines: Slurm runs the last one up to 23.11,
# both from 24.05; the site description names what runs, and slurm-ipu-hook runs that after the merge.
PROLOGS = ("prolog", "prolog2") if releases.runs_every_controller_script_line(
    releases.installed(labmod.SBIN) or "0.0") else ("prolog2",)
IPUS_PER_HOST = 16

SPANK_SOURCE = r"""
/* The site's own SPANK plugin: --site-tag=TAG puts SITE_TAG=TAG in every task. Registered from
   slurm_spank_init (a static spank_options table is invisible to sbatch and salloc). */
#include <stdlib.h>
#include <string.h>
#include <slurm/spank.h>
SPANK_PLUGIN(site_tag, 1);
static char *tag;
static int take(int val, const char *optarg, int remote) { (void)val; (void)remote; tag = strdup(optarg); return 0; }
static struct spank_option option = {"site-tag", "TAG", "the site's own tag, as SITE_TAG in every task", 1, 0, take};
int slurm_spank_init(spank_t sp, int ac, char **av) {
    (void)ac; (void)av;
    return spank_option_register(sp, &option) == ESPANK_SUCCESS ? 0 : -1;
}
int slurm_spank_task_init(spank_t sp, int ac, char **av) {
    (void)ac; (void)av;
    return tag ? spank_setenv(sp, "SITE_TAG", tag, 1) : 0;
}
"""

SITE_LUA = """-- The site's own submit policy: every job gives a time limit.
function slurm_job_submit(job_desc, part_list, submit_uid)
    if job_desc.time_limit == slurm.NO_VAL then
        slurm.log_user("site policy: give every job a --time")
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
"""

# One journey: each step builds on the one before, and a failed step skips the rest (conftest).
pytestmark = pytest.mark.steps


def site_files(spec: labmod.LabSpec, ports: list[int], trace: Path) -> dict[str, str]:
    """The site's own configuration, as its admins wrote it (paths inside the lab's directory)."""
    d = spec.dir
    host = os.uname().nodename
    cpus = os.cpu_count() or 1
    # Every node has a GPU, from its DEFAULT line (the Pod's hosts' lines have no
    # Gres of their own, and a merge writing Gres=ipu:16 there took their GPU away).
    # (Slurm refuses NodeHostname and NodeAddr on a DEFAULT line.)
    nodes = f"NodeName=DEFAULT CPUs={cpus} RealMemory=1024 Gres=gpu:1 State=UNKNOWN\n" + "\n".join(
        f"NodeName=node{k} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[k - 1]}" for k in range(1, NODES + 1))
    hook = "#!/bin/sh\n# The site's own controller {0}: one trace line per job.\necho \"{0} $SLURM_JOB_ID\" >> {1}\n"
    files = {
        "etc/slurm.conf": f"""# Cluster "adopt", as its admins run it (written long before slurm-ipu).
ClusterName=adopt
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={spec.ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/run/munge.socket,cred_expire=30
StateSaveLocation={d}/spool/ctld
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=bf_continue,sched_interval=2
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
MinJobAge=120
AccountingStorageType=accounting_storage/none
# Our own: GPUs, the matlab licence, a submit policy, controller hooks and a SPANK plugin.
GresTypes=gpu
Licenses=matlab:10
JobSubmitPlugins=lua
PrologSlurmctld={d}/site/prolog-ctld.sh
PrologSlurmctld={d}/site/prolog2-ctld.sh
EpilogSlurmctld={d}/site/epilog-ctld.sh
PlugStackConfig={d}/etc/plugstack.conf
{nodes}
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""",
        "etc/gres.conf": f"NodeName=node[1-{NODES}] Name=gpu File=/dev/null\n",  # a stand-in device: one GPU each
        "etc/plugstack.conf": f"required {d}/lib/site_tag.so\n",
        "etc/job_submit.lua": SITE_LUA,
        "site/prolog-ctld.sh": hook.format("prolog", trace),
        "site/prolog2-ctld.sh": hook.format("prolog2", trace),
        "site/epilog-ctld.sh": hook.format("epilog", trace),
    }
    cgroup = releases.cgroup_conf(releases.installed(labmod.SBIN) or "0.0")
    if cgroup:
        files["etc/cgroup.conf"] = cgroup
    return files


def site_description(spec: labmod.LabSpec, root: Path, own_hooks: bool) -> str:
    """The admin's site description (docs/admin.md step 1), by hand."""
    d = spec.dir
    prologs = ",".join(f"{d}/site/{name}-ctld.sh" for name in PROLOGS)
    hooks = (f"  site_prolog_slurmctld: {prologs}\n  site_epilog_slurmctld: {d}/site/epilog-ctld.sh\n"
             if own_hooks else "")
    return f"""version: 1
cluster: adopt
vipu:
  host: 127.0.0.1
  port: {spec.vipu_port}
  command: {d}/bin/vipu
  emulator: true
pod:
  ipus: {IPUS_PER_HOST * 2}
  hosts: node[1-2]
  ipus_per_host: {IPUS_PER_HOST}
state_dir: {root}/state
accounting:
  slurmdbd_host: null
slurm:
  version: "{releases.release(releases.installed(labmod.SBIN) or '0.0')}"
  user: root
  conf_dir: {d}/etc
  bin_dir: {labmod.SBIN.parent / "bin"}
  plugin_dir: {d}/lib
{hooks}install:
  prefix: {root}/opt/slurm-ipu
  site: {root}/etc-slurm-ipu/site.yaml
  unit_dir: {root}/systemd
"""


class Site:
    """The adopting site: its lab (own-conf), its paths, and the commands its admin and users type."""

    def __init__(self, lab, root: Path, user: str):
        self.spec = lab.spec
        self.root = root
        self.user = user
        self.etc = self.spec.path("etc")
        self.out = root / "render"          # docs' /tmp/site
        self.yaml = root / "site.yaml"      # docs' /path/to/site.yaml
        self.bindir = root / "bin"
        self.trace = self.spec.path("site", "trace")
        self.prefix = root / "opt" / "slurm-ipu"
        # What the steps hand on: the site's files before anything of ours, the gres.conf lines the
        # admin appended, slurm.conf as merged.
        self.originals: dict[str, bytes] = {}
        self.gres_lines = ""
        self.merged = b""
        self.service: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        # The installed commands first; no SLURM_IPU_SITE: the install says where its description is.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_IPU", "SLURM_JOB", "SLURM_STEP"))}
        slurm = labmod.SBIN.parent  # Debian's Slurm, or a site-built one (make slurm-25.11)
        env.update(SLURM_CONF=str(self.etc / "slurm.conf"),
                   PATH=f"{self.bindir}:{slurm / 'sbin'}:{slurm / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin")
        return env

    def sh(self, command: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(["bash", "-c", command], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=self.root)
        if check and proc.returncode != 0:
            raise AssertionError(f"{command} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def doc(self, command: str, extra: str = "", timeout: float = 120, check: bool = True):
        """A command as docs/admin.md prints it, run with this site's paths in place of the docs'
        (and `extra` appended: make's PREFIX and BINDIR)."""
        assert command in DOCS, f"docs/admin.md no longer says `{command}`"
        for theirs, ours in (("/path/to/site.yaml", str(self.yaml)), ("site.yaml --out", f"{self.yaml} --out"),
                             ("/tmp/site", str(self.out)), ("/tmp/unmerge", str(self.root / "unmerge")),
                             ("/etc/slurm", str(self.etc))):
            command = command.replace(theirs, ours)
        if command.startswith("make "):
            command = f"make -s -C {self.source()} {command[5:]}"
        return self.sh(f"{command} {extra}", timeout, check)

    def source(self) -> Path:
        """A copy of the checkout to run make in (pip and make write build files where they run)."""
        src = self.root / "src"
        if not src.exists():
            shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "*.so",
                                                                      "*.o", "__pycache__", ".pytest_cache"))
        return src

    def as_user(self, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        env = dict(self.env, HOME=str(self.spec.path("users")), USER=self.user, LOGNAME=self.user)
        return subprocess.run(["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--init-groups", "--",
                               "bash", "-c", command], env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=self.spec.path("users"))

    def job_state(self, job: str) -> str:
        proc = self.sh(f"scontrol show job -o {job}", check=False)
        for word in proc.stdout.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "GONE"

    def wait_done(self, job: str, timeout: float = 90) -> str:
        states = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "GONE")
        wait_for(f"job {job} to end", lambda: self.job_state(job) in states, timeout)
        return self.job_state(job)

    def admin(self) -> Api:
        """The emulator's admin socket (what an admin drill reaches; the site's V-IPU has no such thing)."""
        return Api(admin_socket=str(self.spec.path("vipu-emu", "admin.sock")), timeout=10)

    def partitions(self) -> list[str]:
        api = self.admin()
        try:
            return [p["partition"]["id"] for p in api.list_partitions()]
        finally:
            api.close()

    # -- what Slurm runs, as systemd and an admin would restart it -----------------------------------
    def restart(self, *daemons: str, idle: bool = True) -> None:
        """`systemctl restart slurmctld` (and `slurmd` on the nodes): stop the recorded daemons,
        start them again (slurmctld keeps its jobs); idle=False: a configuration that leaves a
        node invalid, so wait only for slurmctld to answer."""
        pids = labmod.load_pids(self.spec)
        for key in sorted((k for k in pids if k.startswith(daemons)), reverse=True):  # slurmd first
            labmod._stop_pid(labmod._pid(pids[key]), key)
        if idle:
            labmod.up(self.spec)
            return
        pids = labmod.load_pids(self.spec)
        try:
            labmod.start_slurm(self.spec, pids)
        finally:
            labmod.save_pids(self.spec, pids)
        wait_for("slurmctld answers", lambda: self.sh("scontrol ping", check=False).returncode == 0, 60)

    def nodes_up(self) -> bool:
        states = labmod.node_states(self.spec)
        return len(states) == NODES and all(s.startswith(("idle", "mixed", "alloc")) for s in states.values())

    def start_hook_service(self) -> None:
        """`systemctl enable --now slurm-ipu`: the unit's Environment= and ExecStart=, as root."""
        unit = (self.root / "systemd" / "slurm-ipu.service").read_text().splitlines()
        env = dict(self.env)
        for line in unit:
            if line.startswith("Environment="):
                key, _, value = line.split("=", 1)[1].partition("=")
                env[key] = value
        argv = shlex.split(next(line for line in unit if line.startswith("ExecStart=")).split("=", 1)[1])
        log = open(self.root / "hook-service.log", "ab")
        self.service = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                        start_new_session=True)
        log.close()
        state = self.root / "state"
        assert poll(lambda: (state / "hooks.sock").exists() or self.service.poll() is not None, 15), \
            "the slurm-ipu service did not start"
        assert self.service.poll() is None, (self.root / "hook-service.log").read_text()[-2000:]

    def stop_hook_service(self) -> None:
        if self.service is not None and self.service.poll() is None:
            self.service.send_signal(signal.SIGTERM)
            try:
                self.service.wait(60)
            except subprocess.TimeoutExpired:
                self.service.kill()
                self.service.wait(10)

    # -- what users see ------------------------------------------------------------------------------
    def plain_job_runs(self, when: str) -> None:
        """The site's own things, as its users rely on them: a GPU job with a matlab licence and the
        site's --site-tag runs on node1 (a Pod host, whose GPU its DEFAULT line gives), its controller
        prolog and epilog run for it, and a job without --time is refused by the site's own rule."""
        out = self.spec.path("users", "plain-%j.out")
        proc = self.as_user(f"sbatch --parsable --time=2 -L matlab:2 --gres=gpu:1 -w node1 --site-tag=blue -o {out} "
                            "--wrap 'echo tag=$SITE_TAG node=$SLURMD_NODENAME'")
        assert proc.returncode == 0, f"{when}: a plain job was refused: {proc.stderr}"
        job = proc.stdout.strip().split(";")[0]
        assert self.wait_done(job) in ("COMPLETED", "GONE"), f"{when}: plain job {job} did not complete"
        text = Path(str(out).replace("%j", job)).read_text()
        assert "tag=blue node=node1" in text, f"{when}: plain job {job} printed {text!r}"
        wait_for(f"{when}: the site's controller epilog for job {job}",
                 lambda: f"epilog {job}" in self.trace.read_text(), 30)
        ran = self.trace.read_text()
        assert all(f"{name} {job}" in ran for name in PROLOGS), f"{when}: the site's PrologSlurmctld(s) did not run"
        proc = self.as_user("sbatch --wrap true")
        assert proc.returncode != 0 and "site policy: give every job a --time" in proc.stderr, \
            f"{when}: the site's submit rule did not hold: {proc.returncode} {proc.stderr}"


def _touch_later(path: Path) -> None:
    """`touch`, as slurmctld must see it: job_submit/lua reloads when the file's time is later than
    its last load (whole seconds), and that load may have been this very second (CI found it so).
    So the time set is the next second, and the clock passes it before anything submits: the one
    reload then stamps a later time, and no submit after it reloads again."""
    target = int(time.time()) + 1
    os.utime(path, (target, target))
    wait_for(f"the clock past {path}'s new time", lambda: time.time() >= target + 1, 5)


def _nodes(site: Site) -> dict[str, dict[str, str]]:
    from slurm_ipu.deploy.doctor import parse_show_nodes

    return parse_show_nodes(site.sh("scontrol -o show nodes").stdout)


ORIGINALS = ("etc/slurm.conf", "etc/gres.conf", "etc/plugstack.conf", "etc/job_submit.lua",
             "site/prolog-ctld.sh", "site/prolog2-ctld.sh", "site/epilog-ctld.sh")
# docs/admin.md's lines for a site's own job_submit.lua (the first line of the file, and the first
# line of each entry point, with the site's argument names).
LUA_DOFILE = 'dofile("/etc/slurm/job_submit_ipu.lua")'
LUA_CALLS = {
    "function slurm_job_submit(job_desc, part_list, submit_uid)\n":
        "local rc = slurm_ipu.job_submit(job_desc, part_list, submit_uid) if rc ~= slurm.SUCCESS then return rc end",
    "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)\n":
        "local rc = slurm_ipu.job_modify(job_desc, job_rec, part_list, modify_uid) if rc ~= slurm.SUCCESS then "
        "return rc end",
}


@pytest.fixture(scope="module")
def site():
    user = ensure_users()[0]
    made = {}

    def prepare(spec: labmod.LabSpec) -> None:
        spec.dir.mkdir(mode=0o755)
        root = made["root"] = spec.dir.parent
        trace = spec.path("site", "trace")
        for rel, text in site_files(spec, [spec.node_port + k for k in range(NODES)], trace).items():
            path = spec.path(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o755 if rel.endswith(".sh") else 0o644)
        trace.write_text("")
        spec.path("lib").mkdir()
        (root / "site_tag.c").write_text(SPANK_SOURCE)
        so = spec.path("lib", "site_tag.so")
        headers = [] if labmod.SBIN.parent == Path("/usr") else [f"-I{labmod.SBIN.parent / 'include'}"]
        proc = subprocess.run(["gcc", "-shared", "-fPIC", "-Wall", "-Werror", *headers, "-o", str(so),
                               str(root / "site_tag.c")], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        (root / "site.yaml").write_text(site_description(spec, root, own_hooks=False))
        # The site's V-IPU controller: the emulator, with the Pod's ILDs and hosts.
        from slurm_ipu import config
        from slurm_ipu.deploy import fragments

        desc = config.load(str(root / "site.yaml"), environ={}, twins=False)
        spec.path("etc", "vipu-emu.yaml").write_text(fragments.emulator_cluster(desc))

    with started_lab(prepare=prepare, nodes=NODES, own_conf=True) as lab:
        handle = Site(lab, made["root"], user)
        try:
            yield handle
        finally:
            handle.stop_hook_service()
            if (handle.prefix / "venv").exists():  # a failure before the uninstall: leave nothing installed
                subprocess.run(["make", "-s", "-C", str(handle.source()), "uninstall", f"PREFIX={handle.prefix}",
                                "FORCE=1"], capture_output=True, timeout=300)


def ipu_job_runs(site: Site, when: str) -> None:
    """An IPU job as a user: every task of a two-host step has the job's partition, the site's own
    --site-tag and controller hooks still work for it, and the partition is gone after it."""
    proc = site.as_user("srun --time=2 -N2 --gres=ipu:8 --site-tag=red "
                        "bash -c 'echo $SLURM_JOB_ID $IPUOF_VIPU_API_PARTITION_ID $SITE_TAG'")
    assert proc.returncode == 0, f"{when}: {proc.stderr}"
    rows = {tuple(line.split()) for line in proc.stdout.splitlines()}
    (job, partition, tag), = rows
    assert partition == f"slurm_{job}" and tag == "red", f"{when}: tasks saw {rows}"
    wait_for(f"{when}: partition {partition} removed", lambda: partition not in site.partitions(), 60)
    wait_for(f"{when}: the site's controller epilog for IPU job {job}",
             lambda: f"epilog {job}" in site.trace.read_text(), 30)
    assert all(f"{name} {job}" in site.trace.read_text() for name in PROLOGS)
    bad = site.as_user("sbatch --time=2 --gres=ipu:3 --wrap true")
    assert bad.returncode != 0 and "ipu" in bad.stderr, f"{when}: --gres=ipu:3 was not refused: {bad.stderr}"


def test_1_describing_the_site_names_its_own_controller_hooks(site):
    """Its own controller hooks, not named in the description, are refused in one line naming the
    key; a plain job runs before anything of slurm-ipu's is there."""
    site.originals = {rel: site.spec.path(rel).read_bytes() for rel in ORIGINALS}
    site.plain_job_runs("before slurm-ipu")
    proc = subprocess.run([sys.executable, "-m", "slurm_ipu.cli", "render", str(site.yaml), "--out", str(site.out)],
                          env=site.env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "PrologSlurmctld" in proc.stderr and len(proc.stderr.splitlines()) == 1, \
        proc.stderr
    site.yaml.write_text(site_description(site.spec, site.root, own_hooks=True))


def test_2_make_install_changes_nothing_of_slurm_s(site):
    """From a copy of the checkout (pip's build directory goes there, not into the checkout)."""
    site.doc("make install SITE=/path/to/site.yaml", f"PREFIX={site.prefix} BINDIR={site.bindir}", timeout=900)
    site.plain_job_runs("after make install")


def test_3_the_documented_merge_keeps_the_site_s_own(site):
    """Step by step as docs/admin.md says it: a snapshot of the site's own Slurm first, then the
    fragments; the Pod's NodeName lines keep their GPU beside the IPUs."""
    site.doc("slurm-ipu snapshot")
    site.doc("slurm-ipu render site.yaml --out /tmp/site")
    site.doc("cp /tmp/site/slurm-ipu.conf /etc/slurm/ && patch -d / -p1 < /tmp/site/slurm.conf.diff")
    conf = site.etc / "slurm.conf"
    gres = {line.split()[0]: [w for w in line.split() if w.startswith("Gres=")]
            for line in conf.read_text().splitlines() if line.startswith("NodeName=")}
    assert gres == {"NodeName=DEFAULT": ["Gres=gpu:1"], "NodeName=node1": [f"Gres=gpu:1,ipu:{IPUS_PER_HOST}"],
                    "NodeName=node2": [f"Gres=gpu:1,ipu:{IPUS_PER_HOST}"], "NodeName=node3": []}, gres
    site.doc("cat /tmp/site/gres-ipu.conf >> /etc/slurm/gres.conf")
    site.gres_lines = (site.out / "gres-ipu.conf").read_text()  # what the admin appended (taken out by hand later)
    site.doc("mkdir -p /etc/slurm/plugstack.conf.d && "
             "cp /tmp/site/plugstack-ipu.conf /etc/slurm/plugstack.conf.d/slurm-ipu.conf")
    site.doc("echo 'include /etc/slurm/plugstack.conf.d/*.conf' >> /etc/slurm/plugstack.conf")
    site.doc("cp /tmp/site/job_submit.lua /etc/slurm/job_submit_ipu.lua")
    lua = (site.etc / "job_submit.lua").read_text()
    assert LUA_DOFILE in DOCS and all(call in DOCS for call in LUA_CALLS.values())
    for entry, call in LUA_CALLS.items():
        assert entry in lua
        lua = lua.replace(entry, f"{entry}    {call}\n")
    (site.etc / "job_submit.lua").write_text(LUA_DOFILE.replace("/etc/slurm", str(site.etc)) + "\n" + lua)
    # "Then `systemctl restart slurmctld` ..., `systemctl restart slurmd` on the nodes ..., and start
    # the slurm-ipu service"
    assert "`systemctl restart slurmctld`" in DOCS and "`systemctl restart slurmd` on the nodes" in DOCS
    site.restart("slurmctld", "slurmd-")
    site.start_hook_service()
    site.merged = conf.read_bytes()


def test_4_ipu_jobs_run_and_doctor_says_the_site_kept_its_own(site):
    """As slurmctld counts them, each node keeps its GPU; doctor says ok, also run by a user."""
    shown = {n: f.get("Gres", "") for n, f in _nodes(site).items()}
    assert shown == {"node1": f"gpu:1,ipu:{IPUS_PER_HOST}", "node2": f"gpu:1,ipu:{IPUS_PER_HOST}",
                     "node3": "gpu:1"}, shown
    site.plain_job_runs("after the merge")
    ipu_job_runs(site, "after the merge")
    doctor = site.sh("slurm-ipu doctor", check=False)
    assert doctor.returncode == 0 and "ok       kept" in doctor.stdout, doctor.stdout + doctor.stderr
    as_user = site.as_user("slurm-ipu doctor")
    assert as_user.returncode == 0 and "Traceback" not in as_user.stderr, as_user.stdout + as_user.stderr


def test_5_doctor_names_a_line_that_undoes_the_merge(site):
    """The site's prolog line after the Include taking the wrapper's place; a line after it
    dropping the site's GPUs or its licence (the fragment's values alone, as a literal merge left
    them)."""
    conf = site.etc / "slurm.conf"
    for line, item in ((f"PrologSlurmctld={site.spec.dir}/site/prolog-ctld.sh", "PrologSlurmctld"),
                       ("GresTypes=ipu", "GresTypes"), (f"Licenses=ipu:{2 * IPUS_PER_HOST}", "Licenses")):
        conf.write_bytes(site.merged + f"{line}\n".encode())
        site.restart("slurmctld", idle=False)
        broken = site.sh("slurm-ipu doctor", check=False)
        conf.write_bytes(site.merged)
        site.restart("slurmctld")
        assert broken.returncode == 1 and item in broken.stdout, f"{line}: {broken.stdout}{broken.stderr}"


def test_6_doctor_judges_the_job_submit_lua_slurmctld_runs(site):
    """What slurmctld runs, not what the files say: the site's job_submit.lua still dofile()s ours
    and calls its job_submit, but not its job_modify; then code of ours that slurmctld loaded
    before the file it dofile()s was put back (it watches job_submit.lua only)."""
    site_lua, ipu_lua = site.etc / "job_submit.lua", site.etc / "job_submit_ipu.lua"
    lua_text, ipu_text = site_lua.read_text(), ipu_lua.read_text()
    site_lua.write_text(lua_text.replace(f"    {LUA_CALLS[next(k for k in LUA_CALLS if 'modify' in k)]}\n", ""))
    broken = site.sh("slurm-ipu doctor", check=False)
    assert broken.returncode == 1 and "slurm_job_modify does not run slurm_ipu.job_modify" in broken.stdout, \
        broken.stdout + broken.stderr
    site_lua.write_text(lua_text)
    ipu_lua.write_text(ipu_text.replace('local CODE_ID = "', 'local CODE_ID = "e', 1))  # another build's code
    _touch_later(site_lua)
    site.sh("sbatch --test-only --time=1 -N1 --wrap true")  # a submit: slurmctld loads it (as it checks the time)
    ipu_lua.write_text(ipu_text)  # the rendered file back, job_submit.lua not touched again
    broken = site.sh("slurm-ipu doctor", check=False)
    assert broken.returncode == 1 and "PROBLEM  job_submit   slurmctld runs job_submit.lua code e" in broken.stdout, \
        broken.stdout + broken.stderr
    _touch_later(site_lua)
    doctor = site.sh("slurm-ipu doctor", check=False)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr



def test_7_doctor_names_what_an_old_merge_lost_and_a_v_ipu_that_refuses(site):
    """The merge as it once was: the Pod's lines given ipu alone, their GPU gone. The text is
    consistent (no key twice), Slurm runs it, and only the snapshot knows what was lost. Then
    V-IPU answering but refusing every create."""
    conf = site.etc / "slurm.conf"
    pod_gres = f"Gres=gpu:1,ipu:{IPUS_PER_HOST}".encode()
    conf.write_bytes(site.merged.replace(pod_gres, f"Gres=ipu:{IPUS_PER_HOST}".encode()))
    site.restart("slurmctld", "slurmd-")
    broken = site.sh("slurm-ipu doctor", check=False)
    assert broken.returncode == 1 and "PROBLEM  kept         node node1 lost Gres gpu:1" in broken.stdout, \
        broken.stdout + broken.stderr
    conf.write_bytes(site.merged)
    site.restart("slurmctld", "slurmd-")
    admin = site.admin()
    try:
        admin.faults(fail={"count": 1000, "code": "PERMISSION_DENIED", "op": "create"})
        broken = site.sh("slurm-ipu doctor", check=False)
        assert broken.returncode == 1 and "PROBLEM  canary" in broken.stdout, broken.stdout + broken.stderr
    finally:
        admin.clear_faults()
        admin.close()
    doctor = site.sh("slurm-ipu doctor", check=False)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert site.partitions() == [], "doctor's canary left a partition"



def test_8_the_documented_un_merge_gives_every_file_back(site):
    """make uninstall refuses while Slurm still runs the hooks; a later re-render (the Pod's hosts
    given 8 IPUs each) is applied as docs/admin.md says, and the un-merge still gives back the files
    as they were before the first merge."""
    conf = site.etc / "slurm.conf"
    refused = site.doc("make uninstall", f"PREFIX={site.prefix}", check=False)
    assert refused.returncode != 0 and "PrologSlurmctld" in refused.stderr, refused.stdout + refused.stderr
    site.yaml.write_text(site.yaml.read_text().replace(f"ipus_per_host: {IPUS_PER_HOST}", "ipus_per_host: 8"))
    site.doc("slurm-ipu render site.yaml --out /tmp/site")
    site.doc("cp /tmp/site/slurm-ipu.conf /etc/slurm/ && patch -d / -p1 < /tmp/site/slurm.conf.diff")
    assert "Gres=gpu:1,ipu:8" in conf.read_text()
    site.doc("slurm-ipu unmerge --out /tmp/unmerge && patch -d / -p1 < /tmp/unmerge/slurm.conf.unmerge.diff")
    site.doc("rm /etc/slurm/slurm-ipu.conf /etc/slurm/plugstack.conf.d/slurm-ipu.conf /etc/slurm/job_submit_ipu.lua")
    site.doc("rmdir /etc/slurm/plugstack.conf.d")
    plugstack = (site.etc / "plugstack.conf").read_text()
    (site.etc / "plugstack.conf").write_text(plugstack.replace(f"include {site.etc}/plugstack.conf.d/*.conf\n", ""))
    gres = (site.etc / "gres.conf").read_text()
    (site.etc / "gres.conf").write_text(gres.replace(site.gres_lines, ""))
    lua = (site.etc / "job_submit.lua").read_text().replace(LUA_DOFILE.replace("/etc/slurm", str(site.etc)) + "\n", "")
    for call in LUA_CALLS.values():
        lua = lua.replace(f"    {call}\n", "")
    (site.etc / "job_submit.lua").write_text(lua)
    changed = [rel for rel, data in site.originals.items() if site.spec.path(rel).read_bytes() != data]
    assert not changed, f"un-merged, yet not as they were: {changed}"
    site.restart("slurmctld", "slurmd-")
    site.plain_job_runs("after the un-merge")



def test_9_make_uninstall_leaves_nothing(site):
    site.doc("make uninstall", f"PREFIX={site.prefix}")
    assert site.service.poll() is not None, "make uninstall left the slurm-ipu service running"
    assert not site.prefix.exists() and not (site.bindir / "slurm-ipu").exists()
    assert not (site.root / "state").exists(), "the state directory came back after the uninstall"
    assert not (site.root / "etc-slurm-ipu" / "snapshot.json").exists(), "make uninstall left the snapshot"
    site.plain_job_runs("after make uninstall")
    changed = [rel for rel, data in site.originals.items() if site.spec.path(rel).read_bytes() != data]
    assert not changed, f"after make uninstall, not as they were: {changed}"
