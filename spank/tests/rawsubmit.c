/* A batch job submitted through libslurm's own API, as a hostile user's program or a REST
 * client would: no sbatch, so none of its checks and no SPANK plugin; the fields are exactly
 * what the command line says. The real-Slurm tier compiles it against the release under test.
 *
 *   rawsubmit [--gres TRES] [--licenses L] [--nodes N] [--comment C] [--name NAME]
 *             [--spank KEY=VALUE] [--spank-bytes KEY=N] [--env-bytes N] [--hold] -- SCRIPT
 *
 * --spank-bytes KEY=N puts one spank_job_env entry KEY=<N times 'x'>; --env-bytes N one
 * environment entry of N bytes. Prints the job id, or the error Slurm returned (exit 1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/slurm_version.h>

#define MAX_ITEMS 16

static char *filled(const char *key, const char *count)
{
    size_t n = strtoul(count, NULL, 10), k = strlen(key);
    char *s = malloc(k + 1 + n + 1);
    if (!s)
        exit(2);
    memcpy(s, key, k);
    s[k] = '=';
    memset(s + k + 1, 'x', n);
    s[k + 1 + n] = '\0';
    return s;
}

static char *bytes_item(const char *arg)
{
    const char *eq = strchr(arg, '=');
    char key[256];
    if (!eq || (size_t)(eq - arg) >= sizeof(key)) {
        fprintf(stderr, "rawsubmit: %s: use KEY=N\n", arg);
        exit(2);
    }
    memcpy(key, arg, eq - arg);
    key[eq - arg] = '\0';
    return filled(key, eq + 1);
}

int main(int argc, char **argv)
{
    job_desc_msg_t desc;
    submit_response_msg_t *resp = NULL;
    char *spank[MAX_ITEMS], *env[MAX_ITEMS + 1];
    uint32_t nspank = 0, nenv = 0;
    char cwd[4096];
    int i;

    slurm_init(NULL);
    slurm_init_job_desc_msg(&desc);
    env[nenv++] = "PATH=/usr/bin:/bin";
    for (i = 1; i < argc - 1 && strcmp(argv[i], "--"); i += 2) {
        const char *opt = argv[i], *val = argv[i + 1];
        if (!strcmp(opt, "--gres"))
            desc.tres_per_node = (char *)val;
        else if (!strcmp(opt, "--licenses"))
            desc.licenses = (char *)val;
        else if (!strcmp(opt, "--nodes"))
            desc.min_nodes = desc.max_nodes = atoi(val);
        else if (!strcmp(opt, "--comment"))
            desc.comment = (char *)val;
        else if (!strcmp(opt, "--name"))
            desc.name = (char *)val;
        else if (!strcmp(opt, "--spank") && nspank < MAX_ITEMS)
            spank[nspank++] = (char *)val;
        else if (!strcmp(opt, "--spank-bytes") && nspank < MAX_ITEMS)
            spank[nspank++] = bytes_item(val);
        else if (!strcmp(opt, "--env-bytes") && nenv < MAX_ITEMS)
            env[nenv++] = filled("RAWSUBMIT_BIG", val);
        else if (!strcmp(opt, "--hold")) {
            desc.priority = 0;
            i--;
        } else {
            fprintf(stderr, "rawsubmit: unknown option %s\n", opt);
            return 2;
        }
    }
    if (i >= argc - 1) {
        fprintf(stderr, "rawsubmit: give the script after --\n");
        return 2;
    }
    desc.script = argv[i + 1];
    desc.user_id = getuid();
    desc.group_id = getgid();
    desc.work_dir = getcwd(cwd, sizeof(cwd));
    desc.std_out = "/dev/null";
    desc.environment = env;
    desc.env_size = nenv;
    if (nspank) {
        desc.spank_job_env = spank;
        desc.spank_job_env_size = nspank;
    }
    if (slurm_submit_batch_job(&desc, &resp) != SLURM_SUCCESS) {
        fprintf(stderr, "rawsubmit: %s\n", slurm_strerror(errno));
        return 1;
    }
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
    printf("%u\n", resp->step_id.job_id); /* 26.05's header; 24.11's still has job_id */
#else
    printf("%u\n", resp->job_id);
#endif
    slurm_free_submit_response_response_msg(resp);
    return 0;
}
