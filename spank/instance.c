/* spank_ipu: ipurun's per-instance work, in the task itself (slurm_spank_task_init: the job's
 * user, the task's own stdio, just before exec), for steps ipurun launches with --ipu-instance.
 *
 * Why here: a Python wrapper per instance cost ~16 ms each and needed the launch host's Python
 * path on every node. ipurun plans once and passes the plan's constants in the step's
 * environment (IPURUN_*); each task adds its place (Slurm's global and local task ids) and:
 *   - sets PopDist's per-instance variables (POPDIST_*, the MPI rank variables PopDist reads,
 *     IPUOF_VIPU_API_GCD_ID/TIMEOUT, the cache and autoreport paths, -x for this instance);
 *   - checks the per-job executable cache the job prolog made (cache.c), or makes the one given;
 *   - binds CPUs (and memory, for spreadnuma) as placement.c decides from this node's topology;
 *   - prints its binding (--report-bindings) and silences itself (--only-output-from-instance).
 * The same rules in Python (launcher/task.py, launcher/numa.py) serve ipurun's --dry-run and
 * its local backend (no Slurm); the unit tier holds the two equal.
 * A refusal prints "ipurun: ..." on the task's stderr and fails the task. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "placement.h"
#include "spank_ipu.h"

#define MPOL_BIND 2
#define VALUE_MAX 16384

static struct ipu_topo topo; /* large: static, one task per process */

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;

    fputs("ipurun: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    return -1;
}

static char too_long[64]; /* a variable that did not fit its buffer: the task fails, never drops it */

/* The task's variable, or "" when unset. */
static const char *get(spank_t sp, const char *name, char *buf, size_t size)
{
    spank_err_t rc = spank_getenv(sp, name, buf, (int)size);

    if (rc == ESPANK_NOSPACE && !too_long[0])
        snprintf(too_long, sizeof(too_long), "%s", name); /* a copy: callers' names live on their stacks */
    if (rc != ESPANK_SUCCESS)
        buf[0] = '\0';
    return buf;
}

/* A whole non-negative number from the task's environment; -1 when missing or bad. */
static long number(spank_t sp, const char *name, long fallback)
{
    char buf[32], *end = NULL;
    long v;

    if (!get(sp, name, buf, sizeof(buf))[0])
        return fallback;
    errno = 0;
    v = strtol(buf, &end, 10);
    return (errno || *end || v < 0 || buf[0] < '0' || buf[0] > '9') ? -1 : v;
}

static int set(spank_t sp, const char *name, const char *value)
{
    if (spank_setenv(sp, name, value, 1) != ESPANK_SUCCESS)
        return fail("cannot set %s in the task", name);
    return 0;
}

static int setn(spank_t sp, const char *name, long value)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%ld", value);
    return set(sp, name, buf);
}

struct plan {
    long n, replicas, per_host, gcds, k, local;
};

/* IPURUN_GCD_MAP ("0,0,1,1": a multi-Pod run, each instance's GCD in its own host's Pod),
 * else the block rule, as task.py's gcd_of. */
static long gcd_of(spank_t sp, const struct plan *p)
{
    char map[VALUE_MAX];
    const char *at = get(sp, "IPURUN_GCD_MAP", map, sizeof(map));
    long i = 0, g = -1;

    for (; *at && i < p->k; at++)
        i += *at == ',';
    if (*at && i == p->k) {
        char *end;
        g = strtol(at, &end, 10);
        if (end == at || (*end && *end != ',') || g < 0 || g >= p->gcds)
            g = -1;
    }
    return g >= 0 ? g : p->k / (p->n / p->gcds);
}

static int popdist_env(spank_t sp, const struct plan *p)
{
    char buf[VALUE_MAX];
    long rpi = p->replicas / p->n;

    if (setn(sp, "POPDIST_NUM_TOTAL_REPLICAS", p->replicas) || set(sp, "POPDIST_NUM_IPUS_PER_REPLICA",
        get(sp, "IPURUN_IPUS_PER_REPLICA", buf, sizeof(buf))) || setn(sp, "POPDIST_NUM_LOCAL_REPLICAS", rpi) ||
        setn(sp, "POPDIST_REPLICA_INDEX_OFFSET", p->k * rpi) || set(sp, "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE", "1") ||
        setn(sp, "POPDIST_LOCAL_INSTANCE_INDEX", p->local) || setn(sp, "POPDIST_NUM_LOCAL_INSTANCES", p->per_host) ||
        setn(sp, "POPDIST_INSTANCE_INDEX", p->k) || setn(sp, "POPDIST_NUM_INSTANCES", p->n) ||
        /* PopDist derives instance index and count from the MPI environment: give it one. */
        setn(sp, "OMPI_COMM_WORLD_RANK", p->k) || setn(sp, "OMPI_COMM_WORLD_SIZE", p->n) ||
        setn(sp, "OMPI_COMM_WORLD_LOCAL_RANK", p->local) || setn(sp, "OMPI_COMM_WORLD_LOCAL_SIZE", p->per_host) ||
        setn(sp, "IPUOF_VIPU_API_GCD_ID", gcd_of(sp, p)))
        return -1;
    get(sp, "IPURUN_VIPU_TIMEOUT", buf, sizeof(buf));
    return set(sp, "IPUOF_VIPU_API_TIMEOUT", buf[0] ? buf : "120");
}

/* --vipu-server-host/-port/--vipu-partition, -x for this instance alone ("K=V" entries
 * separated by \x1f), the autoreport directory. */
static int given_env(spank_t sp, long k)
{
    static const char *const keys[] = {"HOST", "PORT", "PARTITION_ID", NULL};
    char name[64], buf[VALUE_MAX], *entry, *save = NULL;

    for (int i = 0; keys[i]; i++) {
        snprintf(name, sizeof(name), "IPURUN_VIPU_%s", keys[i]);
        if (get(sp, name, buf, sizeof(buf))[0]) {
            snprintf(name, sizeof(name), "IPUOF_VIPU_API_%s", keys[i]);
            if (set(sp, name, buf))
                return -1;
        }
    }
    if (get(sp, "IPURUN_AUTOREPORT_DIR", buf, sizeof(buf))[0] && set(sp, "POPDIST_AUTOREPORT_DIRECTORY", buf))
        return -1; /* PopDist adds one sub-directory per instance */
    snprintf(name, sizeof(name), "IPURUN_INSTANCE_ENV_%ld", k);
    get(sp, name, buf, sizeof(buf));
    for (entry = strtok_r(buf, "\x1f", &save); entry; entry = strtok_r(NULL, "\x1f", &save)) {
        char *eq = strchr(entry, '=');
        if (!eq || eq == entry)
            continue;
        *eq = '\0';
        if (set(sp, entry, eq + 1))
            return -1;
    }
    return 0;
}

static int mkdir_p(const char *path, mode_t mode)
{
    char tmp[VALUE_MAX];

    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
        return errno = ENAMETOOLONG, -1;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, mode) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return (mkdir(tmp, mode) < 0 && errno != EEXIST) ? -1 : 0;
}

/* The per-job cache: the node's job prolog made it, as root, in root's own directory, for the
 * job's user alone (cache.c). Poplar loads executables from it: it is used only if it is still a
 * real directory of ours that nobody else can write. A path the user gave is theirs, made if
 * missing. */
static int cache(spank_t sp, long k)
{
    char path[VALUE_MAX], own[8];
    uint32_t job_id = 0;
    struct stat st;
    int mine = !strcmp(get(sp, "IPURUN_OWN_CACHE", own, sizeof(own)), "1"), given = 1;

    if (!get(sp, "IPURUN_CACHE_DIR", path, sizeof(path))[0]) {
        if (!mine)
            return 0;
        spank_get_item(sp, S_JOB_ID, &job_id);
        snprintf(path, sizeof(path), IPU_JOB_CACHE_ROOT "/%u", job_id);
        given = 0;
    }
    if (set(sp, "POPDIST_EXECUTABLE_CACHE_PATH", path))
        return -1;
    if (!given && lstat(path, &st) < 0)
        return fail("instance %ld: executable cache %s: %s; this node's slurmd makes it in its job prolog (restart "
                    "slurmd once after installing slurm-ipu), or give --executable-cache-path", k, path,
                    strerror(errno));
    if (given && (mkdir_p(path, 0700) < 0 || lstat(path, &st) < 0))
        return fail("instance %ld: executable cache %s: %s; give --executable-cache-path", k, path, strerror(errno));
    if (mine && (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 022)))
        return fail("instance %ld: executable cache %s is not a private directory of uid %u; remove it or give "
                    "--executable-cache-path", k, path, (unsigned)getuid());
    return 0;
}

static int bind_task(spank_t sp, long k, long local, long per_host, const char *host)
{
    char strategy[32], err[512], cpus[8192], numa[8192], report[8];
    struct ipu_binding b;
    int membound = 0;

    get(sp, "IPURUN_PLACEMENT", strategy, sizeof(strategy));
    if (ipu_read_topology("/", &topo, err, sizeof(err)) < 0 ||
        ipu_bind(&topo, (int)local, (int)per_host, strategy[0] ? strategy : "spreadnuma", &b, err, sizeof(err)) < 0)
        return fail("instance %ld on %s: %s", k, host, err);
    if (CPU_COUNT(&b.cpus) && sched_setaffinity(0, sizeof(b.cpus), &b.cpus) < 0)
        return fail("instance %ld on %s: cannot bind to CPUs: %s", k, host, strerror(errno));
    /* Binding memory to the host's only NUMA node would change nothing: skip the syscall. */
    if (b.membind && ipu_numa_nodes(&topo) > 1)
        membound = syscall(SYS_set_mempolicy, MPOL_BIND, (unsigned long *)&b.numa, (unsigned long)IPU_CPUS_MAX) == 0;
    if (!strcmp(get(sp, "IPURUN_REPORT_BINDINGS", report, sizeof(report)), "1")) {
        ipu_format_cpulist(&b.cpus, cpus, sizeof(cpus));
        ipu_format_cpulist(&b.numa, numa, sizeof(numa));
        fprintf(stderr, "ipurun: instance %ld host %s local %ld numa %s cpus %s%s\n", k, host, local,
                numa[0] ? numa : "-", cpus[0] ? cpus : "unbound", membound ? " membind" : "");
        fflush(stderr);
    }
    return 0;
}

static int only_output(spank_t sp, long k)
{
    long only = number(sp, "IPURUN_ONLY_OUTPUT_FROM", -2);
    int devnull;

    if (only == -2 || only == k)
        return 0;
    devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
        return fail("instance %ld: cannot silence its output: %s", k, strerror(errno));
    close(devnull);
    return 0;
}

int ipu_instance_task(spank_t sp)
{
    struct plan p;
    uint32_t gid = 0, lid = 0;
    char host[256], offline[8];
    struct utsname un;

    if (spank_get_item(sp, S_TASK_GLOBAL_ID, &gid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_TASK_ID, &lid) != ESPANK_SUCCESS)
        return fail("task setup: cannot read this task's ids from Slurm");
    p.k = gid, p.local = lid;
    p.n = number(sp, "IPURUN_NUM_INSTANCES", -1);
    p.replicas = number(sp, "IPURUN_NUM_REPLICAS", -1);
    p.per_host = number(sp, "IPURUN_INSTANCES_PER_HOST", -1);
    p.gcds = number(sp, "IPURUN_NUM_GCDS", 1);
    if (p.n < 1 || p.replicas < 1 || p.per_host < 1 || p.gcds < 1 || p.gcds > p.n || number(sp, "IPURUN_IPUS_PER_REPLICA", -1) < 1)
        return fail("task setup: missing or bad IPURUN_* plan in the environment (run it through ipurun)");
    if (!get(sp, "SLURMD_NODENAME", host, sizeof(host))[0])
        snprintf(host, sizeof(host), "%s", uname(&un) == 0 ? un.nodename : "?");
    if (popdist_env(sp, &p) || given_env(sp, p.k))
        return -1;
    if (!strcmp(get(sp, "IPURUN_OFFLINE", offline, sizeof(offline)), "1"))
        for (const char *const *key = (const char *const[]){"IPUOF_VIPU_API_HOST", "IPUOF_VIPU_API_PORT",
             "IPUOF_VIPU_API_PARTITION_ID", "IPUOF_VIPU_API_GCD_ID", NULL}; *key; key++)
            spank_unsetenv(sp, *key);
    if (too_long[0])
        return fail("instance %ld: %s is longer than this task can read (%d characters); shorten it", p.k,
                    too_long, VALUE_MAX - 1);
    if (cache(sp, p.k) || bind_task(sp, p.k, p.local, p.per_host, host) || only_output(sp, p.k))
        return -1;
    return 0;
}
