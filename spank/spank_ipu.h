/* spank_ipu: shared declarations. Every message starts with "spank_ipu: ". */
#ifndef SPANK_IPU_H
#define SPANK_IPU_H

#include <slurm/spank.h>

#define IPU_PREFIX_MAX 32
#define IPU_HOST_MAX 256
#define IPU_NAME_MAX 65         /* a V-IPU partition name and its NUL (rules.NAME_MAX) */
#define IPU_STEP_VAR "SLURM_IPU_STEP_PARTITION" /* srun -> the step's tasks: the partition they name */
#define IPU_REFUSED_VAR "SLURM_IPU_STEP_REFUSED" /* srun -> the step's tasks: do not start (step.c) */
/* ipurun's executable caches, one per job (cache.c makes and removes them, instance.c uses them);
 * launcher/task.py's JOB_CACHE_ROOT. A unit test's driver builds with a root of its own. */
#ifndef IPU_JOB_CACHE_ROOT
#define IPU_JOB_CACHE_ROOT "/var/cache/slurm-ipu"
#endif

/* A site of several V-IPU controllers: each one's hosts (a Slurm hostlist as slurm-ipu renders it:
 * items of one bracket each) and what its tasks are given. plugstack: controller=HOSTS@HOST:PORT. */
#define IPU_CONTROLLERS_MAX 32
#define IPU_HOSTLIST_MAX 2048
struct ipu_controller {
    char hosts[IPU_HOSTLIST_MAX];
    char host[IPU_HOST_MAX];
    char port[8];
};

struct ipu_conf {
    char vipu_host[IPU_HOST_MAX];   /* IPUOF_VIPU_API_HOST for tasks */
    char vipu_port[8];              /* IPUOF_VIPU_API_PORT for tasks */
    struct ipu_controller controllers[IPU_CONTROLLERS_MAX];  /* several: a task's is its node's */
    int n_controllers;
    char prefix[IPU_PREFIX_MAX];    /* partition name = prefix + job id */
    char helper[512];               /* the install's slurm-ipu, run as `slurm-ipu step` ("": none) */
    int allocation_model;           /* some of the site's Pods use the allocation model */
    int debug;
};

#define IPU_COUNT_MAX 8
/* Bounds of what a user may type (held to slurm_ipu/rules.py by tests/unit/test_constants.py):
 * --ipus, a job's IPUs, and --ipu-gcds, at most one GCD per IPU: a cluster's most IPUs; --ipu-ilds:
 * a cluster's most ILDs. */
#define IPU_TOTAL_MAX 65536
#define IPU_GCDS_MAX 65536
#define IPU_ILDS_MAX 1024

/* User options, as typed ("" when absent). */
struct ipu_opts {
    char ipus[IPU_COUNT_MAX];   /* --ipus=N: the job's total (Graphcore's Slurm dialect) */
    char gcds[IPU_COUNT_MAX];
    char ilds[IPU_COUNT_MAX];
    int reconfigurable;
    int instance;   /* --ipu-instance: ipurun's step; each task does its instance's setup */
    /* The component of a heterogeneous srun/sbatch each job option was typed for: srun and sbatch
     * parse each component's options and then run slurm_spank_init_post_opt once for it, but a
     * value stays in the plugin from one component to the next. */
    unsigned ipus_in, gcds_in, ilds_in, reconfigurable_in;
};

/* How many components' options slurm_spank_init_post_opt has passed on so far. */
extern unsigned ipu_components_done;

extern struct ipu_conf ipu_conf;
extern struct ipu_opts ipu_opts;

int ipu_parse_plugstack(int ac, char **av);
int ipu_hostlist_has(const char *list, const char *node);
const struct ipu_controller *ipu_controller_of(const char *node);
int ipu_register_options(spank_t sp, spank_context_t ctx);
int ipu_gpu_habit(int argc, char **argv, char *out, size_t size, char *gres, size_t gres_size);
const char *const *ipu_valued_options(const char **short_ones);
void ipu_hint_gpu_habits(void);
int ipu_valid_count(const char *text, long max);
long ipu_parse_count(const char *text, long max);
int ipu_opt_count(const char *name, const char *optarg, char *slot, long max);
int ipu_opt_total(const char *optarg, char *slot);
int ipu_job_prolog_cache(spank_t sp);
int ipu_job_epilog_cleanup(spank_t sp);
int ipu_instance_task(spank_t sp);
int ipu_step_start(spank_t sp);
void ipu_step_end(void);
long ipu_gres_count(const char *tres);

#endif
