/* Drives spank/placement.c without Slurm. Used by tests/unit/test_spank_placement.py.
 *   placement_driver ROOT STRATEGY N  -> one line per local instance k < N:
 *     "k cpus=<list> numa=<list> membind=<0|1>", or "k error=<message>" */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "../placement.h"

static struct ipu_topo topo;

int main(int argc, char **argv)
{
    char err[512], cpus[8192], numa[8192];
    struct ipu_binding b;
    int n;

    if (argc != 4) {
        fputs("usage: placement_driver ROOT STRATEGY N\n", stderr);
        return 2;
    }
    if (ipu_read_topology(argv[1], &topo, err, sizeof(err)) < 0) {
        printf("topology error=%s\n", err);
        return 0;
    }
    n = atoi(argv[3]);
    for (int k = 0; k < n; k++) {
        if (ipu_bind(&topo, k, n, argv[2], &b, err, sizeof(err)) < 0) {
            printf("%d error=%s\n", k, err);
            continue;
        }
        ipu_format_cpulist(&b.cpus, cpus, sizeof(cpus));
        ipu_format_cpulist(&b.numa, numa, sizeof(numa));
        printf("%d cpus=%s numa=%s membind=%d\n", k, cpus, numa, b.membind);
    }
    return 0;
}
