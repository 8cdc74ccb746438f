/* spank_ipu: GPU habits, and near misses of the IPU GRES's name, get a hint.
 *
 * `sbatch --gpus=4` on a cluster whose GresTypes has no gpu is refused by sbatch itself: it
 * validates the GRES of a request before sending it (slurm_opt_create_job_desc, 22.05 to 26.05)
 * and says only "Invalid generic resource (gres) specification", so job_submit.lua, which hints
 * for `-M`, REST and libslurm submissions, never sees it. init_post_opt runs before that check,
 * but Slurm shows a plugin none of the options it parsed: the command line (/proc/self/cmdline)
 * is read instead, up to the command or script, so a `#SBATCH --gpus` line is not seen. Only a
 * line with a GPU option costs anything more: one RPC for GresTypes; with gpu there, nothing is
 * said, and the site's GPU jobs go on as before.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <slurm/slurm.h>
#include <slurm/slurm_version.h>

#include "spank_ipu.h"

/* 26.05 renamed slurm_free_ctl_conf */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0)
#define free_conf slurm_free_conf
#pragma weak slurm_free_conf
#else
#define free_conf slurm_free_ctl_conf
#pragma weak slurm_free_ctl_conf
#endif
#pragma weak slurm_load_ctl_conf

#define CMDLINE_MAX 65536

/* Options that take the next word as their value (`--nodes 2`, `-N 2`): the scan steps over it to
 * tell options from the command. srun's (slurm_ipu/launcher/srunopts.py, VALUED and SHORT) and
 * sbatch's own (SUBMIT_VALUED); tests/unit/test_spank_args.py holds the lists equal. An option
 * missing here only ends the scan early: Slurm's own message then stands alone. */
static const char *const VALUED[] = {
    "accel-bind", "account", "acctg-freq", "array", "batch", "bb", "bbf", "bcast", "bcast-exclude", "begin", "chdir",
    "cluster-constraint", "clusters", "comment", "compress", "constraint", "container", "container-id", "core-spec",
    "cores-per-socket", "cpu-bind", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot",
    "dependency", "distribution", "epilog", "error", "exclude", "export", "export-file", "extra-node-info", "gid",
    "gpu-bind", "gpu-freq", "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags",
    "het-group", "hint", "input", "ipu-gcds", "ipu-ilds", "jobid", "job-name", "licenses", "mail-type", "mail-user",
    "mcs-label", "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "mpi", "msg-timeout", "network", "nice",
    "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node",
    "ntasks-per-socket", "open-mode", "output", "partition", "power", "prefer", "priority", "profile", "prolog",
    "propagate", "qos", "relative", "reservation", "resv-ports", "segment", "signal", "slurmd-debug",
    "sockets-per-node", "switches", "task-epilog", "task-prolog", "thread-spec", "threads", "threads-per-core", "time",
    "time-min", "tmp", "tres-bind", "tres-per-task", "uid", "wait", "wckey", "with-pmix", "wrap", NULL};
static const char SHORT_VALUED[] = "ABCDGJLMNSTWabcdeimnopqtwx";

static int valued(const char *name, size_t len)
{
    for (int i = 0; VALUED[i]; i++)
        if (strlen(VALUED[i]) == len && !strncmp(VALUED[i], name, len))
            return 1;
    return 0;
}

const char *const *ipu_valued_options(const char **short_ones)
{
    *short_ones = SHORT_VALUED;
    return VALUED;
}

/* The count a GPU request names (`4`, `ipu:4`, `a100:2`), 1 when it names none. */
static long gpu_count(const char *what)
{
    const char *colon = strrchr(what, ':');
    const char *digits = colon ? colon + 1 : what;

    return (*digits && strspn(digits, "0123456789") == strlen(digits)) ? strtol(digits, NULL, 10) : 1;
}

/* The GPU item of a `--gres` value (gpu, gpu:N, gpu:TYPE:N) past its "gpu", or NULL. */
static const char *gres_gpu(const char *value, char *item, size_t size)
{
    for (const char *p = value; *p;) {
        size_t len = strcspn(p, ",");

        if (len >= 3 && !strncmp(p, "gpu", 3) && (len == 3 || p[3] == ':')) {
            snprintf(item, size, "%.*s", (int)(len > 3 ? len - 4 : 0), p + 4);
            return item;
        }
        p += len + (p[len] ? 1 : 0);
    }
    return NULL;
}

/* A near miss of the IPU GRES's name in a `--gres` value (ipus:4, IPU:4; a site's own GRES whose
 * name only starts with ipu, such as ipu2, is none), written into `item` whole, or NULL.
 * templates/job_submit/job_submit.lua.j2 (MISSPELT) knows the same spellings; tests/unit/test_spank_args.py
 * holds the two to the same cases. */
static const char *gres_misspelt(const char *value, char *item, size_t size)
{
    for (const char *p = value; *p;) {
        size_t len = strcspn(p, ","), name = strcspn(p, ":,");

        if ((name == 3 && strncmp(p, "ipu", 3) && !strncasecmp(p, "ipu", 3)) ||
            (name == 4 && !strncasecmp(p, "ipus", 4))) {
            snprintf(item, size, "%.*s", (int)len, p);
            return item;
        }
        p += len + (p[len] ? 1 : 0);
    }
    return NULL;
}

enum way { EITHER, JOB_TOTAL, PER_NODE };  /* how IPUs are asked for in the same sense */

/* `what` is the request past its GRES name ("4", "ipu:4", ""). */
static void hint(char *out, size_t size, const char *option, const char *value, const char *what, enum way way)
{
    char ipus[96];
    int typed_ipu = !strncmp(what, "ipu:", 4) || !strcmp(what, "ipu");

    if (way == JOB_TOTAL)
        snprintf(ipus, sizeof(ipus), "--ipus=%ld (the job's total)", gpu_count(what));
    else if (way == PER_NODE)
        snprintf(ipus, sizeof(ipus), "--gres=ipu:%ld (IPUs per node)", gpu_count(what));
    else
        snprintf(ipus, sizeof(ipus), "--gres=ipu:N (IPUs per node) or --ipus=N (the job's total)");
    snprintf(out, size, "%s=%s %s: ask for IPUs with %s", option, value,
             typed_ipu ? "asks for GPUs of type ipu" : "asks for GPUs, and this cluster has none", ipus);
}

static const struct {
    const char *name;
    enum way way;
} GPU_OPTIONS[] = {{"--gpus", JOB_TOTAL}, {"--gpus-per-node", PER_NODE}, {"--gpus-per-task", EITHER},
                   {"--gpus-per-socket", EITHER}, {NULL, EITHER}};

/* What a GPU option, or a misspelt IPU GRES, on this command line should be told ("" when it has
 * none): argv as sbatch, salloc or srun got it, read up to the first word that is neither an
 * option nor an option's value (the script or command: its own arguments are not Slurm's).
 * `gres` gets the GRES whose absence from the cluster's GresTypes makes the hint true. */
int ipu_gpu_habit(int argc, char **argv, char *out, size_t size, char *gres, size_t gres_size)
{
    out[0] = '\0';
    snprintf(gres, gres_size, "gpu");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *value = NULL;
        char option[64], item[64];
        size_t len;

        if (a[0] != '-' || !strcmp(a, "--") || !a[1])
            return 0;  /* the command or script */
        if (a[1] != '-') {  /* -G4, -G 4, -N2, -l */
            if (!strchr(SHORT_VALUED, a[1]))
                continue;
            value = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : "");
            if (a[1] == 'G') {
                hint(out, size, "--gpus", value, value, JOB_TOTAL);
                return 1;
            }
            continue;
        }
        len = strcspn(a + 2, "=");
        if (a[2 + len] == '=')
            value = a + 3 + len;
        else if (valued(a + 2, len))
            value = i + 1 < argc ? argv[++i] : "";
        if (!value || len >= sizeof(option) - 2)
            continue;
        snprintf(option, sizeof(option), "--%.*s", (int)len, a + 2);
        if (!strcmp(option, "--gres") && gres_gpu(value, item, sizeof(item))) {
            hint(out, size, option, value, item, PER_NODE);
            return 1;
        }
        if (!strcmp(option, "--gres") && gres_misspelt(value, item, sizeof(item))) {
            snprintf(gres, gres_size, "%.*s", (int)strcspn(item, ":"), item);
            snprintf(out, size, "--gres=%s names no GRES here: IPUs are --gres=ipu:%ld (IPUs per node)", item,
                     gpu_count(item));
            return 1;
        }
        for (int k = 0; GPU_OPTIONS[k].name; k++)
            if (!strcmp(option, GPU_OPTIONS[k].name)) {
                hint(out, size, option, value, value, GPU_OPTIONS[k].way);
                return 1;
            }
    }
    return 0;
}

/* GresTypes as slurmctld runs it names `gres` (one RPC); unknown counts as yes: no hint. */
static int cluster_has(const char *gres)
{
    slurm_conf_t *conf = NULL;
    int found = 0;
    size_t len = strlen(gres);

    if (!slurm_load_ctl_conf || !free_conf || slurm_load_ctl_conf((time_t)0, &conf) != SLURM_SUCCESS)
        return 1;
    for (const char *p = conf->gres_plugins ? conf->gres_plugins : ""; *p && !found;) {
        size_t item = strcspn(p, ",");

        found = item == len && !strncmp(p, gres, len);
        p += item + (p[item] ? 1 : 0);
    }
    free_conf(conf);
    return found;
}

/* In sbatch, salloc and srun, before Slurm's own check of the request. */
void ipu_hint_gpu_habits(void)
{
    static char buf[CMDLINE_MAX];
    char *argv[512], text[512], gres[64];
    int argc = 0, fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

    if (fd >= 0)
        close(fd);
    if (got <= 0)
        return;
    buf[got] = '\0';
    for (char *p = buf; p < buf + got && argc < (int)(sizeof(argv) / sizeof(argv[0])); p += strlen(p) + 1)
        argv[argc++] = p;
    if (ipu_gpu_habit(argc, argv, text, sizeof(text), gres, sizeof(gres)) && !cluster_has(gres))
        slurm_error("spank_ipu: %s", text);
}
