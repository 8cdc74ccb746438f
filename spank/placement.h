/* spank_ipu: one host's topology and PopRun's placement strategies (placement.c). */
#ifndef SPANK_IPU_PLACEMENT_H
#define SPANK_IPU_PLACEMENT_H

#include <sched.h> /* cpu_set_t: define _GNU_SOURCE before any include */
#include <stddef.h>

#define IPU_CPUS_MAX CPU_SETSIZE /* 1024: CPUs and NUMA node ids alike */

struct ipu_cpu {
    int id, socket, core, numa; /* core: the core id within its socket */
};

struct ipu_topo {
    int n;
    struct ipu_cpu cpu[IPU_CPUS_MAX]; /* the CPUs this task may use, in CPU order */
};

struct ipu_binding {
    cpu_set_t cpus;  /* empty: leave the binding alone (disabled) */
    cpu_set_t numa;  /* the NUMA nodes of those CPUs */
    int membind;     /* bind memory to them too (spreadnuma) */
};

int ipu_parse_cpulist(const char *text, cpu_set_t *set);
void ipu_format_cpulist(const cpu_set_t *set, char *out, size_t size);
int ipu_read_topology(const char *root, struct ipu_topo *t, char *err, size_t errlen);
int ipu_bind(const struct ipu_topo *t, int k, int n, const char *strategy, struct ipu_binding *b,
             char *err, size_t errlen);
int ipu_numa_nodes(const struct ipu_topo *t);

#endif
