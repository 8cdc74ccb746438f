/* spank_ipu: PopRun's five process-placement strategies on one host, the C twin of
 * slurm_ipu/launcher/numa.py (the reference: ipurun's --dry-run and --report-bindings print
 * what it computes, and tests/unit/test_spank_placement.py holds this file to it over
 * synthetic topologies, and the lab holds the bindings tasks really get to it).
 *
 * Why here and not in srun's --cpu-bind/--mem-bind: the strategies depend on each host's
 * topology (sockets, cores, NUMA nodes), which ipurun on the launch host does not know for the
 * other hosts; and where instances share a domain (more instances than NUMA nodes) they split
 * its cores in a way no --cpu-bind type expresses. The task path (slurm_spank_task_init, in the
 * task just before exec) reads its own node's sysfs and binds; the program inherits it.
 *
 * No Slurm calls here: errors go into a caller's buffer as one line. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement.h"

static int read_text(const char *path, char *buf, size_t size)
{
    FILE *fh = fopen(path, "re");
    size_t len;

    if (!fh)
        return -1;
    len = fread(buf, 1, size - 1, fh);
    fclose(fh);
    buf[len] = '\0';
    while (len && isspace((unsigned char)buf[len - 1]))
        buf[--len] = '\0';
    return 0;
}

static int read_int(const char *path, int fallback)
{
    char buf[32], *end = NULL;
    long v;

    if (read_text(path, buf, sizeof(buf)) < 0 || !buf[0])
        return fallback;
    v = strtol(buf, &end, 10);
    return (*end || v < 0 || v > 1 << 20) ? fallback : (int)v;
}

/* "0-3,8,10-11" into the set; returns -1 on a malformed list or a CPU past IPU_CPUS_MAX. */
int ipu_parse_cpulist(const char *text, cpu_set_t *set)
{
    const char *p = text;

    CPU_ZERO(set);
    while (*p) {
        char *end = NULL;
        long lo = strtol(p, &end, 10), hi = lo;

        if (end == p || lo < 0)
            return -1;
        p = end;
        if (*p == '-') {
            hi = strtol(p + 1, &end, 10);
            if (end == p + 1 || hi < lo)
                return -1;
            p = end;
        }
        if (hi >= IPU_CPUS_MAX)
            return -1;
        for (long c = lo; c <= hi; c++)
            CPU_SET((int)c, set);
        if (*p == ',')
            p++;
        else if (*p && !isspace((unsigned char)*p))
            return -1;
        else
            break;
    }
    return 0;
}

/* The set as a list, "0-3,8" ("" when empty): as numa.format_cpulist. */
void ipu_format_cpulist(const cpu_set_t *set, char *out, size_t size)
{
    size_t used = 0;

    out[0] = '\0';
    for (int c = 0; c < IPU_CPUS_MAX; c++) {
        int hi = c;

        if (!CPU_ISSET(c, set))
            continue;
        while (hi + 1 < IPU_CPUS_MAX && CPU_ISSET(hi + 1, set))
            hi++;
        used += (size_t)snprintf(out + used, used < size ? size - used : 0, hi == c ? "%s%d" : "%s%d-%d",
                                 used ? "," : "", c, hi);
        c = hi;
    }
    if (used >= size && size)
        out[size - 1] = '\0';
}

static int allowed_cpus(const char *root, cpu_set_t *allowed)
{
    char path[4096], buf[65536], *line;

    CPU_ZERO(allowed);
    if (!strcmp(root, "/"))
        return sched_getaffinity(0, sizeof(*allowed), allowed);
    snprintf(path, sizeof(path), "%s/proc/self/status", root);
    if (read_text(path, buf, sizeof(buf)) < 0)
        return 0; /* a test root without it: every CPU */
    for (line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            char *v = line + 18;
            while (isspace((unsigned char)*v))
                v++;
            return ipu_parse_cpulist(v, allowed);
        }
    return 0;
}

int ipu_read_topology(const char *root, struct ipu_topo *t, char *err, size_t errlen)
{
    char path[4096], buf[65536];
    cpu_set_t online, allowed, node;
    int numa_of[IPU_CPUS_MAX];
    DIR *dir;
    struct dirent *ent;

    memset(t, 0, sizeof(*t));
    snprintf(path, sizeof(path), "%s/sys/devices/system/cpu/online", root);
    if (read_text(path, buf, sizeof(buf)) < 0 || ipu_parse_cpulist(buf, &online) < 0) {
        snprintf(err, errlen, "cannot read the CPUs online from %s", path);
        return -1;
    }
    for (int c = 0; c < IPU_CPUS_MAX; c++)
        numa_of[c] = 0;
    snprintf(path, sizeof(path), "%s/sys/devices/system/node", root);
    if ((dir = opendir(path))) {
        while ((ent = readdir(dir))) {
            const char *id = ent->d_name + 4;
            char file[4600];

            if (strncmp(ent->d_name, "node", 4) || !*id || strspn(id, "0123456789") != strlen(id))
                continue;
            snprintf(file, sizeof(file), "%s/%s/cpulist", path, ent->d_name);
            if (read_text(file, buf, sizeof(buf)) < 0 || ipu_parse_cpulist(buf, &node) < 0)
                continue;
            for (int c = 0; c < IPU_CPUS_MAX; c++)
                if (CPU_ISSET(c, &node))
                    numa_of[c] = atoi(id);
        }
        closedir(dir);
    }
    if (allowed_cpus(root, &allowed) < 0) {
        snprintf(err, errlen, "cannot read this task's CPUs");
        return -1;
    }
    for (int c = 0; c < IPU_CPUS_MAX; c++) {
        struct ipu_cpu *cpu;

        if (!CPU_ISSET(c, &online) || (CPU_COUNT(&allowed) && !CPU_ISSET(c, &allowed)))
            continue;
        cpu = &t->cpu[t->n++];
        cpu->id = c;
        snprintf(path, sizeof(path), "%s/sys/devices/system/cpu/cpu%d/topology/physical_package_id", root, c);
        cpu->socket = read_int(path, 0);
        snprintf(path, sizeof(path), "%s/sys/devices/system/cpu/cpu%d/topology/core_id", root, c);
        cpu->core = read_int(path, c);
        cpu->numa = numa_of[c];
    }
    if (!t->n) {
        snprintf(err, errlen, "no usable CPUs under %s (cpuset empty?)", root);
        return -1;
    }
    return 0;
}

/* CPUs grouped by physical core (SMT siblings together), cores in order of their first CPU.
 * core_of[i]: the group of t's CPU i among `sel` (CPUs not selected: -1). Returns the count. */
static int cores(const struct ipu_topo *t, const int *sel, int *core_of)
{
    int count = 0;

    for (int i = 0; i < t->n; i++) {
        core_of[i] = -1;
        if (!sel[i])
            continue;
        for (int j = 0; j < i; j++)
            if (sel[j] && t->cpu[j].socket == t->cpu[i].socket && t->cpu[j].core == t->cpu[i].core) {
                core_of[i] = core_of[j];
                break;
            }
        if (core_of[i] < 0)
            core_of[i] = count++;
    }
    return count;
}

/* Slot `slot` of `count` takes a contiguous run of the selected CPUs' cores. */
static int by_cores(const struct ipu_topo *t, const int *sel, int slot, int count, const char *what,
                    cpu_set_t *out, char *err, size_t errlen)
{
    int core_of[IPU_CPUS_MAX], n = cores(t, sel, core_of);
    int lo = slot * n / count, hi = (slot + 1) * n / count;

    if (n < count) {
        snprintf(err, errlen, "%d instances share %d core(s) of %s; use fewer instances per host or "
                 "--process-placement disabled", count, n, what);
        return -1;
    }
    for (int i = 0; i < t->n; i++)
        if (sel[i] && core_of[i] >= lo && core_of[i] < hi)
            CPU_SET(t->cpu[i].id, out);
    return 0;
}

/* The sorted distinct values of a field (socket or NUMA node). */
static int domains(const struct ipu_topo *t, int numa, int *out)
{
    int n = 0;

    for (int i = 0; i < t->n; i++) {
        int v = numa ? t->cpu[i].numa : t->cpu[i].socket, j = n;

        for (int k = 0; k < n; k++)
            if (out[k] == v)
                j = -1;
        if (j < 0)
            continue;
        while (j > 0 && out[j - 1] > v) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = v;
        n++;
    }
    return n;
}

int ipu_bind(const struct ipu_topo *t, int k, int n, const char *strategy, struct ipu_binding *b,
             char *err, size_t errlen)
{
    int sel[IPU_CPUS_MAX], dom[IPU_CPUS_MAX], ndom, numa = 1, rc = 0;
    char what[48];

    memset(b, 0, sizeof(*b));
    CPU_ZERO(&b->cpus);
    CPU_ZERO(&b->numa);
    if (k < 0 || n < 1 || k >= n) {
        snprintf(err, errlen, "instance %d of %d", k, n);
        return -1;
    }
    for (int i = 0; i < t->n; i++)
        sel[i] = 1;
    if (!strcmp(strategy, "disabled"))
        return 0;
    if (!strcmp(strategy, "close")) {
        rc = by_cores(t, sel, k, n, "the host", &b->cpus, err, errlen);
    } else if (!strcmp(strategy, "scattersocket") || !strcmp(strategy, "scatternuma") ||
               !strcmp(strategy, "spreadnuma")) {
        int spread = !strcmp(strategy, "spreadnuma");

        numa = strcmp(strategy, "scattersocket") != 0;
        ndom = domains(t, numa, dom);
        if (spread && n <= ndom) { /* each instance gets whole NUMA nodes */
            int lo = k * ndom / n, hi = (k + 1) * ndom / n;
            for (int i = 0; i < t->n; i++)
                for (int d = lo; d < hi; d++)
                    if (t->cpu[i].numa == dom[d])
                        CPU_SET(t->cpu[i].id, &b->cpus);
        } else { /* domains round robin; instances sharing one split its cores */
            int mine = dom[k % ndom], slot = k / ndom, count = (n - k % ndom + ndom - 1) / ndom, core_of[IPU_CPUS_MAX];

            for (int i = 0; i < t->n; i++)
                sel[i] = (numa ? t->cpu[i].numa : t->cpu[i].socket) == mine;
            snprintf(what, sizeof(what), numa ? "NUMA node %d" : "socket %d", mine);
            if (spread && count > cores(t, sel, core_of)) { /* never one core each: share the node */
                for (int i = 0; i < t->n; i++)
                    if (sel[i])
                        CPU_SET(t->cpu[i].id, &b->cpus);
            } else {
                rc = by_cores(t, sel, slot, count, what, &b->cpus, err, errlen);
            }
        }
        b->membind = spread;
    } else {
        snprintf(err, errlen, "unknown --process-placement '%s'; use one of spreadnuma, scatternuma, "
                 "scattersocket, close, disabled", strategy);
        return -1;
    }
    if (rc < 0)
        return -1;
    for (int i = 0; i < t->n; i++)
        if (CPU_ISSET(t->cpu[i].id, &b->cpus) && t->cpu[i].numa < IPU_CPUS_MAX)
            CPU_SET(t->cpu[i].numa, &b->numa);
    return 0;
}

int ipu_numa_nodes(const struct ipu_topo *t)
{
    int dom[IPU_CPUS_MAX];

    return domains(t, 1, dom);
}
