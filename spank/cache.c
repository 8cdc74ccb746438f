/* spank_ipu: job_epilog (root, on every node of the job): remove what ipurun keeps per job on
 * a node, /tmp/ipurun-cache-<jobid> (the executable cache its instances share) and
 * /tmp/ipurun-job-<jobid>.json (its run record), however the job ended.
 *
 * Why here: only something that runs after every task is gone can remove a directory the
 * instances share, and slurmd's job epilog is that, with no extra slurm.conf line. Why as the
 * job's user: the paths live in a world-writable directory, so root never follows a name the
 * user controls; the removal runs in a child that has dropped to the job's uid and gid.
 * Never fails: a failing job_epilog drains the node, and a leftover cache is not worth that. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spank_ipu.h"

#define CACHE_FMT "/tmp/ipurun-cache-%u"
#define STATE_FMT "/tmp/ipurun-job-%u.json"
#define REMOVE_SECONDS 30

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT)
        slurm_debug("spank_ipu: cannot remove %s: %m", path);
    return 0; /* keep going: remove as much as we can */
}

/* In the child, as the job's user: bounded by an alarm, never follows symlinks or mounts. */
static void remove_as_user(uid_t uid, gid_t gid, const char *cache, const char *state)
{
    struct stat st;

    if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0 || getuid() != uid)
        _exit(1);
    alarm(REMOVE_SECONDS);
    if (lstat(cache, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid)
        nftw(cache, remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    if (lstat(state, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid)
        unlink(state);
    _exit(0);
}

/* The item from Slurm, else its environment twin, which must be a whole decimal number. */
static int job_number(spank_t sp, spank_item_t item, const char *env, uint32_t *out)
{
    const char *text = getenv(env);
    char *end = NULL;
    unsigned long n;

    if (spank_get_item(sp, item, out) == ESPANK_SUCCESS)
        return 0;
    if (!text || !isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    n = strtoul(text, &end, 10);
    if (errno || *end || n > UINT32_MAX)
        return -1;
    *out = (uint32_t)n;
    return 0;
}

int ipu_job_epilog_cleanup(spank_t sp)
{
    uint32_t job_id = 0, uid = 0, gid = 0;
    char cache[64], state[64];
    struct stat st;
    pid_t pid;
    int status = 0;

    /* Without the job's own uid and gid, skip: guessing either could remove as the wrong user. */
    if (job_number(sp, S_JOB_ID, "SLURM_JOB_ID", &job_id) < 0 ||
        job_number(sp, S_JOB_UID, "SLURM_JOB_UID", &uid) < 0 ||
        job_number(sp, S_JOB_GID, "SLURM_JOB_GID", &gid) < 0 || job_id == 0)
        return 0;
    snprintf(cache, sizeof(cache), CACHE_FMT, job_id);
    snprintf(state, sizeof(state), STATE_FMT, job_id);
    if (lstat(cache, &st) < 0 && lstat(state, &st) < 0)
        return 0; /* the usual case, every non-ipurun job: one or two failed lstat calls */
    pid = fork();
    if (pid < 0) {
        slurm_error("spank_ipu: job %u: cannot fork to remove %s: %m", job_id, cache);
        return 0;
    }
    if (pid == 0)
        remove_as_user((uid_t)uid, (gid_t)gid, cache, state);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (ipu_conf.debug)
        slurm_info("spank_ipu: job %u: removed ipurun's %s (status %d)", job_id, cache, status);
    return 0;
}
