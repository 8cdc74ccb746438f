/* spank_ipu: a V-IPU partition per step (srun, local context).
 *
 * srun has created the step (slurmctld granted its GRES) and not yet launched a task: the one
 * place, once per step, where a partition can exist before any task attaches. srun asks
 * slurmctld for the step's record (one RPC: the IPUs Slurm granted it) and, when the step may
 * need a partition of its own, runs the step helper (the install's `slurm-ipu step`, as the
 * user, bounded), which decides with the site description and V-IPU: the job's own partition, the user's own partition in the job's
 * allocation, a new partition for the step, or a one-line refusal. The name reaches the tasks
 * through srun's environment (SLURM_IPU_STEP_PARTITION, read by slurm_spank_task_init). A
 * partition made for the step is removed when srun exits, whatever the step's end; a killed srun
 * leaves it to the job's epilog, which removes every partition in the job's allocation.
 *
 * When: only steps with IPUs, and only where the answer is not already known: on a site of the
 * partition model a step's partition is the job's, unless the step asks for fewer IPUs per node
 * than the job has (a split of the job's partition, which V-IPU cannot do: the helper refuses
 * it); one more RPC (the job's record) says how many the job has.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <slurm/slurm.h>
#include <slurm/slurm_version.h>

#include "spank_ipu.h"

/* Weak: the plugin is loaded (with -z now) by every Slurm program; one that exported no
 * RPC would otherwise refuse the whole plugin. Absent, steps keep the job's partition. */
#pragma weak slurm_get_job_steps
#pragma weak slurm_free_job_step_info_response_msg
#pragma weak slurm_load_job
#pragma weak slurm_free_job_info_msg

#define STEP_SECONDS 150   /* the helper's own deadline (prolog.deadline) is shorter: this bounds a wedged one */
#define REMOVE_SECONDS 30  /* srun's exit waits for the removal: past this the job's epilog removes it */
#define REMOVE_WORDS 32

static char removal[2048];  /* the helper's tab-separated vipu command line removing the step's partition */

/* IPUs in a TRES request ("gres:ipu:4" on 22.05, "gres/ipu:4" later, "gres/ipu" meaning 1),
 * among other entries separated by ',' or ';'; 0 when it names none. */
long ipu_gres_count(const char *tres)
{
    for (const char *p = tres; p && *p;) {
        size_t len = strcspn(p, ",;");

        if (len >= 8 && (!strncmp(p, "gres:ipu", 8) || !strncmp(p, "gres/ipu", 8)) && (len == 8 || p[8] == ':')) {
            const char *count = len == 8 ? NULL : memrchr(p, ':', len);
            return count ? strtol(count + 1, NULL, 10) : 1;
        }
        p += len + (p[len] ? 1 : 0);
    }
    return 0;
}

struct step_info {
    long ipus;          /* what Slurm granted the step, all its nodes together */
    long per_node;      /* the step's IPUs per node */
    long job_per_node;  /* the job's IPUs per node */
    char nodes[1024];
};

static int read_step(spank_t sp, uint32_t job, uint32_t step, struct step_info *out)
{
    job_step_info_response_msg_t *resp = NULL;
    uint32_t nnodes = 0, ntasks = 0;
    int rc;

    if (!slurm_get_job_steps || !slurm_free_job_step_info_response_msg)
        return -1;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
    slurm_step_id_t id = {.job_id = job, .step_het_comp = NO_VAL, .step_id = step};
    rc = slurm_get_job_steps(&id, &resp, SHOW_ALL);
#else
    rc = slurm_get_job_steps((time_t)0, job, step, &resp, SHOW_ALL);
#endif
    if (rc != 0 || !resp)
        return -1;
    spank_get_item(sp, S_JOB_NNODES, &nnodes);
    spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &ntasks);
    rc = -1;
    for (uint32_t i = 0; i < resp->job_step_count; i++) {
        job_step_info_t *s = &resp->job_steps[i];
        long per_task = ipu_gres_count(s->tres_per_task);

        if (s->step_id.job_id != job || s->step_id.step_id != step)
            continue;
        /* The request, not the step's TRES: those count gres/ipu only where AccountingStorageTRES
         * names it. A step that asks nothing carries its job's request (measured on 22.05). */
        out->per_node = ipu_gres_count(s->tres_per_node);
        out->ipus = out->per_node * (long)nnodes + per_task * (long)ntasks + ipu_gres_count(s->tres_per_step);
        if (!out->per_node && nnodes)
            out->per_node = out->ipus / (long)nnodes;
        snprintf(out->nodes, sizeof(out->nodes), "%s", s->nodes ? s->nodes : "");
        rc = 0;
        break;
    }
    slurm_free_job_step_info_response_msg(resp);
    return rc;
}

/* The job's IPUs per node (job_submit.lua turns every dialect into a per-node GRES), and, for a
 * component of a heterogeneous job, the job it belongs to (its first component's id; else 0). */
static long job_per_node(uint32_t job, uint32_t *het)
{
    job_info_msg_t *resp = NULL;
    long n = -1;
    int rc;

    *het = 0;
    if (!slurm_load_job || !slurm_free_job_info_msg)
        return -1;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0)
    slurm_step_id_t id = {.job_id = job, .step_het_comp = NO_VAL, .step_id = NO_VAL};
    rc = slurm_load_job(&resp, id, SHOW_DETAIL);
#else
    rc = slurm_load_job(&resp, job, SHOW_DETAIL);
#endif
    if (rc != 0 || !resp)
        return -1;
    /* A leader's record lists every component: take this job's own. */
    for (uint32_t i = 0; i < resp->record_count; i++) {
        if (resp->job_array[i].job_id != job)
            continue;
        n = ipu_gres_count(resp->job_array[i].tres_per_node);
        if (resp->job_array[i].het_job_id && resp->job_array[i].het_job_id != NO_VAL)
            *het = resp->job_array[i].het_job_id;
        break;
    }
    slurm_free_job_info_msg(resp);
    return n;
}

/* Run a command as the user (srun's uid), its output into `out`; its errors go straight to
 * srun's stderr. Returns its exit status, or -1 (could not run, or killed after `seconds`). */
static int run(char *const argv[], int seconds, char *out, size_t size)
{
    int fd[2], status = 0;
    size_t got = 0;
    time_t end = time(NULL) + seconds;
    pid_t pid;

    if (pipe2(fd, O_CLOEXEC) < 0)
        return -1;
    if ((pid = fork()) < 0) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        execvp(argv[0], argv);
        fprintf(stderr, "spank_ipu: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    while (got + 1 < size) {
        struct pollfd p = {.fd = fd[0], .events = POLLIN};
        int left = (int)(end - time(NULL)), ready = left > 0 ? poll(&p, 1, left * 1000) : 0;
        ssize_t n;

        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            kill(pid, SIGKILL);
            break;
        }
        if ((n = read(fd[0], out + got, size - 1 - got)) <= 0)
            break;
        got += (size_t)n;
    }
    close(fd[0]);
    out[got] = '\0';
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A refused step exists already, and srun failing here would leave it held in slurmctld for the
 * job's life (measured on 22.05: its CPUs stayed taken, and slurm_terminate_job_step could not
 * end a step with no task; the job's next srun waited "Requested nodes are busy"). So srun goes
 * on and the step's tasks fail at their start (slurm_spank_task_init), which ends it as any
 * failed step ends. The helper has said why, in one line. */
static int refuse(void)
{
    setenv(IPU_REFUSED_VAR, "1", 1);
    return 0;
}

/* ipurun's step in the allocation model drives IPUs or nothing: one with none (a job, or a
 * heterogeneous job's component, that asked for none) would start instances whose partition
 * does not exist. The partition model's ipurun finds that out from V-IPU before srun. */
static int no_ipus(uint32_t job, uint32_t step)
{
    uint32_t het = 0;

    job_per_node(job, &het);
    if (het && het <= job)
        slurm_error("spank_ipu: step %u.%u: ipurun's instances need IPUs, and component %u of heterogeneous job %u "
                    "has none; run ipurun with --het-group=N, N the component that asked for them", job, step,
                    job - het, het);
    else
        slurm_error("spank_ipu: step %u.%u: ipurun's instances need IPUs, and job %u has none; submit it with "
                    "--gres=ipu:N (IPUs per node), or run with --offline-mode=yes", job, step, job);
    return refuse();
}

int ipu_step_start(spank_t sp)
{
    uint32_t job = 0, step = 0;
    struct step_info info = {0};
    char ipus[24], per_node[24], job_node[24], jobs[16], steps[16], hets[16], reply[IPU_NAME_MAX + 16 + sizeof(removal)];
    char *verb, *name, *rest;

    /* ipurun's step drives the partition ipurun names (IPURUN_VIPU_PARTITION_ID, in srun's own
     * environment) and never splits its nodes' IPUs; in the allocation model, naming none (the
     * job's own name names no partition there), it gets a partition as any step does. */
    const char *driven = getenv("IPURUN_VIPU_PARTITION_ID");
    if (!ipu_conf.helper[0] || (ipu_opts.instance && (!ipu_conf.allocation_model || (driven && driven[0]))))
        return 0;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
        return 0;
    if (read_step(sp, job, step, &info) < 0) {
        slurm_debug("spank_ipu: step %u.%u: no step record; its tasks name the job's partition", job, step);
        return 0;
    }
    if (info.ipus <= 0)
        return ipu_opts.instance ? no_ipus(job, step) : 0;
    uint32_t het = 0;
    if ((info.job_per_node = job_per_node(job, &het)) < 0)
        info.job_per_node = info.per_node;  /* unknown: take the step for the job's whole */
    slurm_debug("spank_ipu: step %u.%u: %ld IPU(s), %ld per node on %s; the job has %ld per node", job, step,
                info.ipus, info.per_node, info.nodes, info.job_per_node);
    /* The partition model needs the helper only to refuse a step that splits its nodes' IPUs. */
    if (!ipu_conf.allocation_model && !(info.per_node < info.job_per_node))
        return 0;
    snprintf(ipus, sizeof(ipus), "%ld", info.ipus);
    snprintf(per_node, sizeof(per_node), "%ld", info.per_node);
    snprintf(job_node, sizeof(job_node), "%ld", info.job_per_node);
    snprintf(jobs, sizeof(jobs), "%u", job);
    snprintf(steps, sizeof(steps), "%u", step);
    snprintf(hets, sizeof(hets), "%u", het);
    char *argv[] = {ipu_conf.helper, "step", "start", jobs, steps, ipus, per_node, job_node, info.nodes,
                    ipu_opts.gcds[0] ? ipu_opts.gcds : "1", hets, NULL};
    if (run(argv, STEP_SECONDS, reply, sizeof(reply)) != 0)
        return refuse();  /* the helper said why, in one line */
    if (!reply[0])
        return 0;   /* the job's own partition */
    verb = strtok_r(reply, " ", &rest);
    name = strtok_r(NULL, "\n", &rest);
    if (!verb || !name || strlen(name) >= IPU_NAME_MAX || (!strcmp(verb, "create") && !strchr(rest, '\t'))) {
        slurm_error("spank_ipu: step %u.%u: the step helper said '%s'", job, step, reply);
        return refuse();
    }
    if (!strcmp(verb, "create"))  /* line 2: how to remove it, run at srun's exit (ipu_step_end) */
        snprintf(removal, sizeof(removal), "%.*s", (int)strcspn(rest, "\n"), rest);
    /* Local context: srun's own environment is what it sends to the tasks (merged after this). */
    return setenv(IPU_STEP_VAR, name, 1) == 0 ? 0 : refuse();
}

/* srun's exit, whatever ended the step: remove the partition made for it. A failure is left to
 * the job's epilog, which removes everything in the job's allocation. */
void ipu_step_end(void)
{
    char *argv[REMOVE_WORDS + 1], *rest = NULL, out[256];
    int n = 0;

    for (char *w = strtok_r(removal, "\t", &rest); w && n < REMOVE_WORDS; w = strtok_r(NULL, "\t", &rest))
        argv[n++] = w;
    argv[n] = NULL;
    if (n > 0)
        run(argv, REMOVE_SECONDS, out, sizeof(out));
    removal[0] = '\0';
}
