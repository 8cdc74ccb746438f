/* spank_ipu: shared declarations. Every message starts with "spank_ipu: ". */
#ifndef SPANK_IPU_H
#define SPANK_IPU_H

#include <slurm/spank.h>

#define IPU_PREFIX_MAX 32
#define IPU_HOST_MAX 256

struct ipu_conf {
    char vipu_host[IPU_HOST_MAX];   /* IPUOF_VIPU_API_HOST for tasks */
    char vipu_port[8];              /* IPUOF_VIPU_API_PORT for tasks */
    char prefix[IPU_PREFIX_MAX];    /* partition name = prefix + job id */
    int debug;
};

#define IPU_COUNT_MAX 8

/* User options, as typed ("" when absent). */
struct ipu_opts {
    char ipus[IPU_COUNT_MAX];   /* --ipus=N: the job's total (Graphcore's Slurm dialect) */
    char gcds[IPU_COUNT_MAX];
    char ilds[IPU_COUNT_MAX];
    int reconfigurable;
    int instance;   /* --ipu-instance: ipurun's step; each task does its instance's setup */
};

extern struct ipu_conf ipu_conf;
extern struct ipu_opts ipu_opts;

int ipu_parse_plugstack(int ac, char **av);
int ipu_register_options(spank_t sp);
int ipu_valid_count(const char *text, long max);
long ipu_parse_count(const char *text, long max);
int ipu_opt_count(const char *name, const char *optarg, char *slot, long max);
int ipu_opt_total(const char *optarg, char *slot);
int ipu_job_epilog_cleanup(spank_t sp);
int ipu_instance_task(spank_t sp);

#endif
