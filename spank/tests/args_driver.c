/* Drives spank/args.c and step.c's parser without Slurm: the option and plugstack parsers, with
 * slurm_error, slurm_debug, spank_get_item and spank_option_register stubbed. Used by
 * tests/unit/test_spank_args.py.
 *   args_driver plugstack ARG...        -> "rc=R host=H port=P prefix=X debug=D helper=C alloc=A" and the error
 *   args_driver gres TRES               -> "ipus=N" (the IPUs a step's or job's TRES request names)
 *   args_driver count NAME VALUE MAX    -> "rc=R slot=S" and the error
 *   args_driver total VALUE             -> "rc=R slot=S" and the error (--ipus)
 *   args_driver typed NAME VALUE...     -> per value, the registered --NAME option's callback run on it as
 *                                          sbatch runs it: "rc=R ipus=I gcds=G ilds=L"
 *   args_driver options CONTEXT         -> the options registered there (allocator, local, remote), one a line
 *   args_driver habit PROGRAM ARG...    -> the hint a GPU option on that command line gets, or nothing
 *   args_driver valued                  -> the options the habit scan takes a value after, one a line
 *   args_driver has LIST NODE...        -> per node, "NODE 1" or "NODE 0": whether the hostlist names it
 *   args_driver controller ARG... -- NODE...  -> plugstack ARGs parsed; per node "NODE HOST:PORT" or "NODE -" */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../spank_ipu.h"

void slurm_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fputs("error: ", stdout);
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
}

void slurm_debug(const char *fmt, ...)
{
    (void)fmt;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
    (void)sp; (void)item;
    return ESPANK_NOT_AVAIL;
}

static int show_registered;
static struct spank_option registered[16];
static int n_registered;

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
    (void)sp;
    if (n_registered < 16)
        registered[n_registered++] = *opt;
    if (show_registered)
        printf("--%s%s%s\n", opt->name, opt->arginfo ? "=" : "", opt->arginfo ? opt->arginfo : "");
    return ESPANK_SUCCESS;
}

int main(int argc, char **argv)
{
    long max;
    char slot[IPU_COUNT_MAX] = "";
    int rc;

    if (argc >= 2 && !strcmp(argv[1], "plugstack")) {
        rc = ipu_parse_plugstack(argc - 2, argv + 2);
        printf("rc=%d host=%s port=%s prefix=%s debug=%d helper=%s alloc=%d\n", rc, ipu_conf.vipu_host,
               ipu_conf.vipu_port, ipu_conf.prefix, ipu_conf.debug, ipu_conf.helper, ipu_conf.allocation_model);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "count")) {
        max = strtol(argv[4], NULL, 10);
        rc = ipu_opt_count(argv[2], argv[3], slot, max);
        printf("rc=%d slot=%s\n", rc, slot);
        return 0;
    }
    if (argc >= 4 && !strcmp(argv[1], "typed")) {
        if (ipu_register_options(NULL, S_CTX_ALLOCATOR))
            return 1;
        for (int i = 0; i < n_registered; i++) {
            if (strcmp(registered[i].name, argv[2]))
                continue;
            for (int k = 3; k < argc; k++) {
                memset(&ipu_opts, 0, sizeof(ipu_opts));
                rc = registered[i].cb(registered[i].val, argv[k], 0);
                printf("rc=%d ipus=%s gcds=%s ilds=%s\n", rc, ipu_opts.ipus, ipu_opts.gcds, ipu_opts.ilds);
            }
            return 0;
        }
        return 2;
    }
    if (argc == 3 && !strcmp(argv[1], "total")) {
        rc = ipu_opt_total(argv[2], slot);
        printf("rc=%d slot=%s\n", rc, slot);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "options")) {
        static const char *names[] = {"allocator", "local", "remote"};
        static const spank_context_t ctxs[] = {S_CTX_ALLOCATOR, S_CTX_LOCAL, S_CTX_REMOTE};
        show_registered = 1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(argv[2], names[i]))
                return ipu_register_options(NULL, ctxs[i]) ? 1 : 0;
        return 2;
    }
    if (argc >= 3 && !strcmp(argv[1], "habit")) {
        char text[512], gres[64];
        if (ipu_gpu_habit(argc - 2, argv + 2, text, sizeof(text), gres, sizeof(gres)))
            printf("%s [unless GresTypes has %s]\n", text, gres);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "valued")) {
        const char *letters = NULL;
        for (const char *const *o = ipu_valued_options(&letters); *o; o++)
            puts(*o);
        for (; *letters; letters++)
            printf("-%c\n", *letters);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "has")) {
        for (int k = 3; k < argc; k++)
            printf("%s %d\n", argv[k], ipu_hostlist_has(argv[2], argv[k]));
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "controller")) {
        int k = 2;
        while (k < argc && strcmp(argv[k], "--"))
            k++;
        rc = ipu_parse_plugstack(k - 2, argv + 2);
        printf("rc=%d controllers=%d\n", rc, ipu_conf.n_controllers);
        for (k++; k < argc; k++) {
            const struct ipu_controller *c = ipu_controller_of(argv[k]);
            if (c)
                printf("%s %s:%s\n", argv[k], c->host, c->port);
            else
                printf("%s -\n", argv[k]);
        }
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "gres")) {
        printf("ipus=%ld\n", ipu_gres_count(argv[2]));
        return 0;
    }
    fputs("usage: args_driver plugstack ARG... | count NAME VALUE MAX | total VALUE | gres TRES | options CONTEXT | "
          "habit PROGRAM ARG... | valued\n", stderr);
    return 2;
}
