/* Drives spank/instance.c without Slurm: the task's environment is this process's, the task
 * ids come from the command line. Used by tests/unit/test_spank_instance.py.
 *   instance_driver JOB_ID GLOBAL_ID LOCAL_ID -> "rc=R", then the environment, one per line */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../spank_ipu.h"

extern char **environ;
static uint32_t ids[3]; /* job, global task, local task */

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
    case S_TASK_GLOBAL_ID: *out = ids[1]; return ESPANK_SUCCESS;
    case S_TASK_ID: *out = ids[2]; return ESPANK_SUCCESS;
    default: return ESPANK_BAD_ARG;
    }
}

spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
    const char *v = getenv(var);

    (void)sp;
    if (!v)
        return ESPANK_ENV_NOEXIST;
    if ((int)strlen(v) >= len)
        return ESPANK_NOSPACE;
    strcpy(buf, v);
    return ESPANK_SUCCESS;
}

spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
    (void)sp;
    return setenv(var, val, overwrite) == 0 ? ESPANK_SUCCESS : ESPANK_ERROR;
}

spank_err_t spank_unsetenv(spank_t sp, const char *var)
{
    (void)sp;
    unsetenv(var);
    return ESPANK_SUCCESS;
}

int main(int argc, char **argv)
{
    int rc;

    if (argc != 4) {
        fputs("usage: instance_driver JOB_ID GLOBAL_ID LOCAL_ID\n", stderr);
        return 2;
    }
    for (int i = 0; i < 3; i++)
        ids[i] = (uint32_t)strtoul(argv[i + 1], NULL, 10);
    rc = ipu_instance_task(NULL);
    fflush(stderr);
    printf("rc=%d\n", rc);
    for (char **e = environ; *e; e++)
        printf("%s\n", *e);
    return 0;
}
