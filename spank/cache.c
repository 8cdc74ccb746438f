/* spank_ipu: ipurun's per-job files on a node.
 *   job_prolog (root, on each node of the job, before any of the job's tasks there): makes
 *     ipurun's executable cache, IPU_JOB_CACHE_ROOT/<jobid>, owned by the job's user, mode 0700.
 *   job_epilog (root, on every node of the job, after its last task there): removes that cache
 *     and /tmp/ipurun-job-<jobid>.json (ipurun's run record), however the job ended.
 *
 * Why root makes the cache, in a directory of its own: under a name anyone can guess in a
 * directory anyone can write (/tmp/ipurun-cache-<jobid>), one user's mkdir failed every ipurun
 * run of another user's job (its instances rightly refuse a directory they do not own alone).
 * IPU_JOB_CACHE_ROOT is root's, 0711: a user reaches their own job's directory by name, and
 * can neither create, rename nor list anything in it. Not tmpfs: Poplar executables run to GBs.
 * Why slurmd's job prolog: it runs as root on each node before the job's first task there, for
 * every job, with no Prolog= script configured (slurmd runs it whenever a plugin in plugstack.conf
 * has slurm_spank_job_prolog: prep_script_slurmd.c, slurmd_script(), 22.05 to 25.11; slurmd
 * decides that when it starts, so it must be restarted once after an upgrade that adds it).
 * Never links: every step goes through directory fds opened with O_NOFOLLOW, from "/"; the inside
 * of a user's cache and the run record in /tmp are touched only by a child that has dropped to
 * their owner. Never fails: a failing job prolog or epilog drains the node; a missing cache fails
 * only the ipurun run that needs it, saying why (instance.c). */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spank_ipu.h"

#define STATE_FMT "/tmp/ipurun-job-%u.json"
#define REMOVE_SECONDS 30
#define DEPTH_MAX 64   /* deeper than any cache Poplar writes; what lies below is left */
#define PASSES 3       /* readdir may miss entries while the directory shrinks: look again */
#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* A directory nobody but root (or this process's user: the unit tier's roots) can change:
 * owned by one of them, writable by nobody else unless sticky, as /tmp (where nobody else can
 * rename or remove what is ours). */
static int steady(int fd)
{
    struct stat st;

    return fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_uid == 0 || st.st_uid == geteuid()) &&
           (!(st.st_mode & 022) || (st.st_mode & S_ISVTX));
}

/* The parent of IPU_JOB_CACHE_ROOT, one component at a time from "/", each one steady; leaf
 * gets the root's own name. -1 (logged) if a component is missing, a link or not steady. */
static int open_parent(uint32_t job, char *leaf, size_t size)
{
    char path[] = IPU_JOB_CACHE_ROOT, *slash = strrchr(path, '/'), *name, *save = NULL;
    const char *at = "/";
    int fd = open("/", DIR_FLAGS);

    snprintf(leaf, size, "%s", slash + 1);
    *slash = '\0';
    for (name = strtok_r(path, "/", &save); fd >= 0 && steady(fd) && name; name = strtok_r(NULL, "/", &save)) {
        int next = openat(fd, name, DIR_FLAGS);
        close(fd);
        fd = next;
        at = name;
    }
    if (fd >= 0 && steady(fd))
        return fd;
    slurm_error("spank_ipu: job %u: %s is not reached through directories only root can change (at %s: %s); "
                "ipurun's executable cache not made or removed", job, IPU_JOB_CACHE_ROOT, at,
                fd < 0 ? strerror(errno) : "not root's, or writable by others");
    if (fd >= 0)
        close(fd);
    return -1;
}

/* IPU_JOB_CACHE_ROOT, made 0711 when create is set. It is root's own directory under root's
 * own: whatever else holds its name there was put by root, and is replaced. */
static int open_root(uint32_t job, int create)
{
    char leaf[64];
    int parent = open_parent(job, leaf, sizeof(leaf)), fd = -1;
    struct stat st;

    if (parent < 0)
        return -1;
    if (create && mkdirat(parent, leaf, 0711) < 0 && errno == EEXIST &&
        fstatat(parent, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
        slurm_info("spank_ipu: replacing the non-directory at %s", IPU_JOB_CACHE_ROOT);
        if (unlinkat(parent, leaf, 0) == 0)
            mkdirat(parent, leaf, 0711);
    }
    fd = openat(parent, leaf, DIR_FLAGS);
    close(parent);
    if (fd < 0 || fstat(fd, &st) < 0 || (st.st_uid != 0 && st.st_uid != geteuid())) {
        if (create || (fd < 0 && errno != ENOENT))
            slurm_error("spank_ipu: job %u: %s: %s; ipurun's executable cache not made or removed", job,
                        IPU_JOB_CACHE_ROOT, fd < 0 ? strerror(errno) : "not owned by root");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (create && (st.st_mode & 07777) != 0711)
        fchmod(fd, 0711); /* users list nothing in it, and write nothing */
    return fd;
}

static int remove_tree(int fd, const char *name, dev_t dev, int depth);

/* Empties the directory open at fd, through directory fds only: a name is never resolved twice,
 * so a link swapped in meanwhile is removed, never followed; other filesystems are left. */
static void empty(int fd, dev_t dev, int depth)
{
    for (int pass = 0; pass < PASSES; pass++) {
        int left = 0, copy = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *dir = copy >= 0 ? fdopendir(copy) : NULL;
        struct dirent *e;

        if (!dir) {
            if (copy >= 0)
                close(copy);
            return;
        }
        while ((e = readdir(dir)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && unlinkat(fd, e->d_name, 0) < 0 &&
                errno != ENOENT)
                left += errno != EISDIR || remove_tree(fd, e->d_name, dev, depth + 1) < 0;
        closedir(dir);
        if (!left)
            return;
    }
}

/* Removes the directory name in fd and all it holds. A directory its owner made unreadable or
 * unwritable is opened up first: this runs as that owner (only root bypasses the bits, and
 * then needs no chmod, so the one call here that follows a link never runs as root). */
static int remove_tree(int fd, const char *name, dev_t dev, int depth)
{
    struct stat st;
    int sub;

    if (depth > DEPTH_MAX)
        return -1;
    sub = openat(fd, name, DIR_FLAGS);
    if (sub < 0 && errno == EACCES && geteuid() != 0 && fchmodat(fd, name, 0700, 0) == 0)
        sub = openat(fd, name, DIR_FLAGS);
    if (sub < 0)
        return -1;
    if (fstat(sub, &st) < 0 || st.st_dev != dev) {
        close(sub);
        return -1;
    }
    if (st.st_uid == geteuid())
        fchmod(sub, 0700);
    empty(sub, dev, depth);
    close(sub);
    return (unlinkat(fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) ? 0 : -1;
}

/* Runs what(arg) in a child that has dropped to uid and gid, bounded by an alarm; waits for it. */
static void as_user(uid_t uid, gid_t gid, void (*what)(void *), void *arg)
{
    int status = 0;
    pid_t pid = fork();

    if (pid < 0) {
        slurm_error("spank_ipu: cannot fork to remove ipurun's files as uid %u: %m", (unsigned)uid);
        return;
    }
    if (pid == 0) {
        if (geteuid() != uid && (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0 || getuid() != uid))
            _exit(1);
        signal(SIGALRM, SIG_DFL);
        alarm(REMOVE_SECONDS);
        what(arg);
        _exit(0);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
}

struct entry {
    int root;
    const char *name;
};

static void empty_entry(void *arg)
{
    const struct entry *e = arg;
    struct stat st;
    int fd = openat(e->root, e->name, DIR_FLAGS);

    if (fd < 0 || fstat(fd, &st) < 0)
        return;
    if (st.st_uid == getuid())
        fchmod(fd, 0700); /* its owner may have taken away its own write bit */
    empty(fd, st.st_dev, 0);
    close(fd);
}

/* Removes root/name, whatever it is: a directory is emptied as its owner (its inside is theirs),
 * then root removes it (only root may write in root/). */
static void discard(int root, const char *name, const struct stat *st)
{
    struct entry e = {root, name};

    if (!S_ISDIR(st->st_mode)) {
        unlinkat(root, name, 0);
        return;
    }
    if (unlinkat(root, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
        return; /* empty: the usual case, a job that never ran ipurun here */
    as_user(st->st_uid, st->st_gid, empty_entry, &e);
    if (unlinkat(root, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        slurm_error("spank_ipu: cannot remove %s/%s: %m", IPU_JOB_CACHE_ROOT, name);
}

/* A new directory for the job, owned by the user before it has the job's name: nobody ever
 * sees the name on a directory that is not theirs yet. Another node's prolog on a shared root
 * (the lab's nodes share one machine) may have made it first: then that one stands. */
static void make_new(int root, const char *name, uint32_t job, uid_t uid, gid_t gid)
{
    char fresh[64];
    struct stat st;
    int fd;

    snprintf(fresh, sizeof(fresh), ".new-%s-%ld", name, (long)getpid());
    if (fstatat(root, fresh, &st, AT_SYMLINK_NOFOLLOW) == 0)
        discard(root, fresh, &st); /* a prolog of the same pid that died halfway */
    if (mkdirat(root, fresh, 0700) < 0 || (fd = openat(root, fresh, DIR_FLAGS)) < 0) {
        slurm_error("spank_ipu: job %u: cannot make %s/%s: %m; ipurun's executable cache not made", job,
                    IPU_JOB_CACHE_ROOT, fresh);
        return;
    }
    if (fchown(fd, uid, gid) < 0 || fchmod(fd, 0700) < 0 ||
        (renameat2(root, fresh, root, name, RENAME_NOREPLACE) < 0 &&
         (errno != EINVAL || renameat(root, fresh, root, name) < 0) && errno != EEXIST && errno != ENOTEMPTY))
        slurm_error("spank_ipu: job %u: cannot make %s/%s for uid %u: %m; ipurun's executable cache not made",
                    job, IPU_JOB_CACHE_ROOT, name, (unsigned)uid);
    close(fd);
    unlinkat(root, fresh, AT_REMOVEDIR); /* still there only if the rename did not happen */
}

/* Made here by root only: kept if it is the user's directory (another node's prolog made it, or
 * slurmd ran the prolog again), else (a job id used before) replaced. */
static void make_cache(uint32_t job, uid_t uid, gid_t gid)
{
    char name[16];
    struct stat st;
    int root = open_root(job, 1);

    if (root < 0)
        return;
    snprintf(name, sizeof(name), "%u", job);
    if (fstatat(root, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISDIR(st.st_mode) && st.st_uid == uid) {
            int fd = openat(root, name, DIR_FLAGS);
            if (fd >= 0 && fchmod(fd, 0700) == 0 && ipu_conf.debug)
                slurm_info("spank_ipu: job %u: %s/%s is there already", job, IPU_JOB_CACHE_ROOT, name);
            if (fd >= 0)
                close(fd);
            close(root);
            return;
        }
        slurm_info("spank_ipu: job %u: replacing a stale %s/%s of uid %u", job, IPU_JOB_CACHE_ROOT, name,
                   (unsigned)st.st_uid);
        discard(root, name, &st);
    }
    make_new(root, name, job, uid, gid);
    close(root);
}

static void remove_cache(uint32_t job)
{
    char name[16];
    struct stat st;
    int root = open_root(job, 0);

    if (root < 0)
        return;
    snprintf(name, sizeof(name), "%u", job);
    if (fstatat(root, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        discard(root, name, &st);
    close(root);
}

/* The run record sits in /tmp under a name the user controls: lstat'ed, removed as the user. */
static void remove_state(void *arg)
{
    const char *state = arg;
    struct stat st;

    if (lstat(state, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid())
        unlink(state);
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

/* Without the job's own uid and gid, nothing: guessing either could make or remove as the wrong user. */
static int job_of(spank_t sp, uint32_t *job, uint32_t *uid, uint32_t *gid)
{
    if (job_number(sp, S_JOB_ID, "SLURM_JOB_ID", job) < 0 || job_number(sp, S_JOB_UID, "SLURM_JOB_UID", uid) < 0 ||
        job_number(sp, S_JOB_GID, "SLURM_JOB_GID", gid) < 0 || *job == 0)
        return -1;
    return 0;
}

int ipu_job_prolog_cache(spank_t sp)
{
    uint32_t job = 0, uid = 0, gid = 0;

    if (job_of(sp, &job, &uid, &gid) == 0)
        make_cache(job, (uid_t)uid, (gid_t)gid);
    return 0;
}

int ipu_job_epilog_cleanup(spank_t sp)
{
    uint32_t job = 0, uid = 0, gid = 0;
    char state[64];
    struct stat st;

    if (job_of(sp, &job, &uid, &gid) < 0)
        return 0;
    remove_cache(job);
    snprintf(state, sizeof(state), STATE_FMT, job);
    if (lstat(state, &st) == 0)
        as_user((uid_t)uid, (gid_t)gid, remove_state, state);
    if (ipu_conf.debug)
        slurm_info("spank_ipu: job %u: removed ipurun's per-job files", job);
    return 0;
}
