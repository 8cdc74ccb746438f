"""srun's long options, so ipurun can check a pass-through option before anything starts.

Taken from srun(1) of Slurm 22.05, plus the options added up to 26.05. srun itself is not asked
(`srun --help` costs a process per launch and needs a working slurm.conf). An option a site's
own SPANK plugin adds is not here: pass it with --srun-arg=ARG.
"""

from __future__ import annotations

# Options that take no value: ipurun passes them alone or as --name=value (srun checks the value).
FLAGS = frozenset("""
contiguous disable-status exact exclusive hold immediate kill-on-bad-exit label multi-prog no-allocate
no-kill overcommit overlap oversubscribe preserve-env pty quiet quit-on-interrupt reboot send-libs
spread-job test-only unbuffered use-min-nodes verbose x11 ipu-reconfigurable external-launcher
""".split())

VALUED = frozenset("""
accel-bind account acctg-freq bb bbf bcast bcast-exclude begin chdir cluster-constraint clusters comment
compress constraint container container-id core-spec cores-per-socket cpu-bind cpu-freq cpus-per-gpu
cpus-per-task deadline delay-boot dependency distribution epilog error exclude export extra-node-info gid
gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags het-group hint input
jobid job-name licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus mpi
msg-timeout network nice nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node
ntasks-per-socket open-mode output partition power prefer priority profile prolog propagate qos relative
reservation resv-ports signal slurmd-debug sockets-per-node switches task-epilog task-prolog thread-spec
threads threads-per-core time time-min tmp uid wait wckey with-pmix tres-per-task tres-bind segment
ipu-gcds ipu-ilds
""".split())

# sbatch's and salloc's own long options that take a value, beyond srun's: with VALUED, what the
# SPANK plugin's scan for GPU options steps over (spank/habits.c; a test holds the two equal).
SUBMIT_VALUED = frozenset({"array", "batch", "export-file", "wrap"})

# What ipurun sets itself on the srun line: a second value would silently win over the plan.
OWNED = {
    "nodes": "ipurun sets it from the hosts; use --host", "ntasks": "use --num-instances",
    "ntasks-per-node": "ipurun divides the instances over the hosts", "distribution": "ipurun uses block",
    "label": "ipurun labels output to tell instances apart; use --tag-output",
    "kill-on-bad-exit": "ipurun stops every instance when one fails, as PopRun does",
    "nodelist": "use --host", "overlap": "ipurun adds it inside a step",
}


# srun's one-letter forms (srun(1)): ipurun takes srun's options in their long form only (a short
# one's value, `-n 2`, cannot be told from the command), so each is named with its long form.
SHORT = {"-A": "account", "-B": "extra-node-info", "-C": "constraint", "-D": "chdir", "-G": "gpus", "-I": "immediate",
         "-J": "job-name", "-K": "kill-on-bad-exit", "-L": "licenses", "-M": "clusters", "-N": "nodes",
         "-O": "overcommit", "-Q": "quiet", "-S": "core-spec", "-T": "threads", "-W": "wait", "-X": "disable-status",
         "-Z": "no-allocate", "-b": "begin", "-c": "cpus-per-task", "-d": "dependency", "-e": "error", "-i": "input",
         "-k": "no-kill", "-l": "label", "-m": "distribution", "-n": "ntasks", "-o": "output", "-p": "partition",
         "-q": "qos", "-s": "oversubscribe", "-t": "time", "-u": "unbuffered", "-w": "nodelist", "-x": "exclude"}


def short_form(name: str) -> str | None:
    """What to say of srun's short option `name` (None: not one of srun's)."""
    long = SHORT.get(name[:2]) if name.startswith("-") and not name.startswith("--") else None
    if long is None:
        return None
    if long in OWNED:
        return f"{name[:2]} is srun's --{long}, which ipurun sets itself: {OWNED[long]}"
    form = f"--{long}=VALUE" if long in VALUED else f"--{long}"
    return f"{name[:2]} is srun's --{long}: give it to ipurun as {form} (srun's options go through in their long form)"


def known(name: str) -> bool:
    return name in FLAGS or name in VALUED
