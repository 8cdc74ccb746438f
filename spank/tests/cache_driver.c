/* Drives spank/cache.c without Slurm: the job prolog and epilog of one job, with the job's ids
 * from the command line and Slurm's log functions printing to stdout. Built with a root of the
 * test's own (-DIPU_JOB_CACHE_ROOT=...). Used by tests/unit/test_spank_cache.py.
 *   cache_driver prolog|epilog JOB_ID UID GID -> the messages, one a line, then "rc=R" */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../spank_ipu.h"

struct ipu_conf ipu_conf;
static uint32_t ids[3]; /* job, uid, gid */

static void say(const char *level, const char *fmt, va_list ap)
{
    printf("%s: ", level);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout); /* before a fork: the child's exit must not print it twice */
}

void slurm_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    say("error", fmt, ap);
    va_end(ap);
}

void slurm_info(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    say("info", fmt, ap);
    va_end(ap);
}

void slurm_debug(const char *fmt, ...)
{
    (void)fmt;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
    va_list ap;
    uint32_t *out;

    (void)sp;
    va_start(ap, item);
    out = va_arg(ap, uint32_t *);
    va_end(ap);
    switch (item) {
    case S_JOB_ID: *out = ids[0]; return ESPANK_SUCCESS;
    case S_JOB_UID: *out = ids[1]; return ESPANK_SUCCESS;
    case S_JOB_GID: *out = ids[2]; return ESPANK_SUCCESS;
    default: return ESPANK_BAD_ARG;
    }
}

int main(int argc, char **argv)
{
    int rc;

    if (argc != 5 || (strcmp(argv[1], "prolog") && strcmp(argv[1], "epilog"))) {
        fputs("usage: cache_driver prolog|epilog JOB_ID UID GID\n", stderr);
        return 2;
    }
    for (int i = 0; i < 3; i++)
        ids[i] = (uint32_t)strtoul(argv[i + 2], NULL, 10);
    rc = !strcmp(argv[1], "prolog") ? ipu_job_prolog_cache(NULL) : ipu_job_epilog_cleanup(NULL);
    printf("rc=%d\n", rc);
    return 0;
}
