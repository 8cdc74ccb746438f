/* spank_ipu: --ipus and --ipu-* options, and the IPUoF variables in the tasks of IPU jobs.
 *
 * Contexts (spank(8)):
 *   allocator (sbatch/salloc), local (srun): options are parsed and validated; given ones are
 *     passed to job_submit.lua and PrologSlurmctld as job-control environment (IPU_IPUS,
 *     IPU_GCDS, ...; job_submit.lua turns --ipus into the job's per-node GRES).
 *   local (srun), once the step exists: a step with IPUs may get a partition of its own, made
 *     before its tasks start and removed when srun exits (step.c).
 *   remote (slurmstepd): every task gets IPUOF_VIPU_API_HOST/PORT/PARTITION_ID naming its
 *     step's partition when srun chose one (step.c), else its own job's (prefix + job id),
 *     replacing whatever the user exported, and loses IPUOF_CONFIG_PATH. Why every task: Slurm 22.05 tells the task side nothing about a
 *     plugin-less GRES (measured: no variable, no SPANK item), and asking slurmctld or V-IPU
 *     would cost a call per node per step. A job without IPUs names a partition that does
 *     not exist, so an attach fails with "not found"; no task ever names another job's.
 *     The partition's shape is not passed on: ipurun reads it from V-IPU, since salloc's shell
 *     is no task and a partition can be recreated during the job (ipurun --update-partition).
 *     In steps ipurun launches (--ipu-instance), each task then sets up its PopDist instance:
 *     environment, executable cache, CPU and memory binding (instance.c, placement.c).
 *   job_script (job_prolog, job_epilog): makes ipurun's per-job executable cache on the node
 *     before the job's tasks there, and removes it and ipurun's run record after (cache.c).
 *   slurmd: logs the plugin and Slurm versions at load.
 */
#include <stdint.h>
#include <stdio.h>
#include <slurm/slurm_version.h>
#include <stdlib.h>
#include <string.h>

#include "spank_ipu.h"

SPANK_PLUGIN(spank_ipu, 1);

/* Read from the file by `slurm-ipu doctor` and the installer: a SPANK plugin cannot be loaded
 * outside Slurm to ask which release it was built for, and one built for another release is
 * refused (or worse) by slurmd. */
#define IPU_STR_(x) #x
#define IPU_STR(x) IPU_STR_(x)
__attribute__((used)) static const char ipu_built_for[] =
    "slurm-ipu-spank built-for-slurm " IPU_STR(SLURM_VERSION_NUMBER); /* 0xMMmmuu */

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();

    if (ipu_parse_plugstack(ac, av) < 0)
        return -1;
    if (ctx == S_CTX_SLURMD) {
        char *slurm = NULL;
        spank_get_item(sp, S_SLURM_VERSION, &slurm);
        slurm_info("spank_ipu: version %s loaded (built for Slurm %d.%02d.%d, running %s); vipu_host=%s vipu_port=%s prefix=%s",
                   SLURM_IPU_VERSION, SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER),
                   SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER), SLURM_VERSION_MICRO(SLURM_VERSION_NUMBER),
                   slurm ? slurm : "?", ipu_conf.vipu_host,
                   ipu_conf.vipu_port, ipu_conf.prefix);
    }
    if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR || ctx == S_CTX_REMOTE)
        return ipu_register_options(sp, ctx);
    return 0;
}

/* srun inside a job: --ipus is a job's total, which Slurm never turns into a step's GRES
 * (job_submit.lua sees jobs only), so a step cannot get IPUs by it. srun re-reads the job's own
 * --ipus from the environment the job gave it (SLURM_SPANK__..._ipus, as sbatch or salloc passed
 * it), which asks for nothing new: only another value is refused, in one line, before the step
 * starts; a step's own IPUs are asked as Slurm's steps ask for GRES. */
static int step_asks_ipus(void)
{
    const char *job = getenv("SLURM_JOB_ID");
    const char *own = getenv("SLURM_SPANK__SLURM_SPANK_OPTION_spank_ipu_ipus");

    if (!own)  /* the job was given --ipu=N, --ipus's other name */
        own = getenv("SLURM_SPANK__SLURM_SPANK_OPTION_spank_ipu_ipu");

    if (!job || !job[0] || !ipu_opts.ipus[0] || (own && !strcmp(own, ipu_opts.ipus)))
        return 0;
    if (ipu_conf.allocation_model)
        slurm_error("spank_ipu: --ipus=%s inside job %s: --ipus sizes a job, not a step; ask for the step's IPUs "
                    "per node as with GPUs (srun --gres=ipu:N), or leave --ipus out", ipu_opts.ipus, job);
    else
        slurm_error("spank_ipu: --ipus=%s inside job %s: --ipus sizes a job, not a step, and a step runs on its "
                    "job's partition; leave --ipus out, or run the work as a job of its own (sbatch --ipus=%s)",
                    ipu_opts.ipus, job, ipu_opts.ipus);
    return 1;
}

/* Hand the options to PrologSlurmctld. They shape the partition; they never size, name or
 * authorise it (SPANK_* comes from the user's side). Each component of a heterogeneous job gets
 * the options typed for it alone (`srun --ipus=16 ./train : ./loader`: the loader asks for none). */
static void pass_on(spank_t sp, const char *name, const char *value, unsigned typed_in, const char *option)
{
    if (value[0] && typed_in == ipu_components_done) {
        if (spank_job_control_setenv(sp, name, value, 1) != ESPANK_SUCCESS)
            slurm_error("spank_ipu: could not pass %s to the job", option);
    } else if (ipu_components_done > 0) {
        /* sbatch keeps one job-control environment for all of a heterogeneous job's components
         * (its opt.spank_job_env is never reset between them): an earlier component's value
         * would size this one too. srun starts each component's afresh: nothing to remove. */
        spank_job_control_unsetenv(sp, name);
    }
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    (void)ac; (void)av;

    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR)
        return 0;
    ipu_hint_gpu_habits();  /* before sbatch's own check of the request, which refuses it bare */
    if (ctx == S_CTX_LOCAL && step_asks_ipus())
        return -1;
    pass_on(sp, "IPU_IPUS", ipu_opts.ipus, ipu_opts.ipus_in, "--ipus");
    pass_on(sp, "IPU_GCDS", ipu_opts.gcds, ipu_opts.gcds_in, "--ipu-gcds");
    pass_on(sp, "IPU_ILDS", ipu_opts.ilds, ipu_opts.ilds_in, "--ipu-ilds");
    pass_on(sp, "IPU_RECONFIGURABLE", ipu_opts.reconfigurable ? "1" : "", ipu_opts.reconfigurable_in,
            "--ipu-reconfigurable");
    ipu_components_done++;
    return 0;
}

/* srun, after slurmctld created the step and before any task: its own partition, if it gets one. */
int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    (void)ac; (void)av;
    return ipu_step_start(sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)sp; (void)ac; (void)av;
    if (spank_context() == S_CTX_LOCAL)
        ipu_step_end();
    return 0;
}

/* The partition srun chose for the step (step.c), if it is a name V-IPU could hold. Not a trust
 * boundary: a task can set any IPUoF variable itself; V-IPU decides who attaches. */
static int step_partition(spank_t sp, char *out, size_t size)
{
    if (spank_getenv(sp, IPU_STEP_VAR, out, (int)size) != ESPANK_SUCCESS)
        return 0;
    spank_unsetenv(sp, IPU_STEP_VAR);  /* a nested srun decides afresh */
    if (!out[0] || strspn(out, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != strlen(out))
        return 0;
    return 1;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    uint32_t job_id = 0;
    char partition[IPU_NAME_MAX];
    (void)ac; (void)av;

    if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
        slurm_error("spank_ipu: cannot read the job id; IPUOF variables not set");
        return -1;
    }
    if (spank_getenv(sp, IPU_REFUSED_VAR, partition, sizeof(partition)) == ESPANK_SUCCESS) {
        slurm_error("spank_ipu: step of job %u refused by srun (its message says why); no task starts", job_id);
        return -1;
    }
    if (!step_partition(sp, partition, sizeof(partition)))
        snprintf(partition, sizeof(partition), "%s%u", ipu_conf.prefix, job_id);
    const char *host = ipu_conf.vipu_host, *port = ipu_conf.vipu_port;
    if (ipu_conf.n_controllers) {  /* several controllers: the one of this task's node */
        char node[256];
        const struct ipu_controller *c = NULL;

        if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof(node)) == ESPANK_SUCCESS)
            c = ipu_controller_of(node);
        if (!c) {  /* a node of no controller has no IPUs: its tasks are told of none */
            if (ipu_conf.debug)
                slurm_info("spank_ipu: job %u task: its node is under no V-IPU controller", job_id);
            return ipu_opts.instance ? ipu_instance_task(sp) : 0;
        }
        host = c->host;
        port = c->port;
    }
    if (spank_setenv(sp, "IPUOF_VIPU_API_HOST", host, 1) != ESPANK_SUCCESS ||
        spank_setenv(sp, "IPUOF_VIPU_API_PORT", port, 1) != ESPANK_SUCCESS ||
        spank_setenv(sp, "IPUOF_VIPU_API_PARTITION_ID", partition, 1) != ESPANK_SUCCESS) {
        slurm_error("spank_ipu: cannot set the IPUOF variables for job %u", job_id);
        return -1;
    }
    spank_unsetenv(sp, "IPUOF_CONFIG_PATH");
    if (ipu_conf.debug)
        slurm_info("spank_ipu: job %u task: IPUOF_VIPU_API_PARTITION_ID=%s at %s:%s", job_id, partition,
                   host, port);
    return ipu_opts.instance ? ipu_instance_task(sp) : 0; /* after the above: ipurun's choices win */
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
    (void)ac; (void)av;
    return ipu_job_prolog_cache(sp);
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    (void)ac; (void)av;
    return ipu_job_epilog_cleanup(sp);
}
