/* slurm-ipu-hook: PrologSlurmctld and EpilogSlurmctld, one small program (docs/design.md, "The
 * controller hooks").
 *
 * slurmctld forks it for every job, IPU or not, so it costs what it must and no more: one exec, no
 * shell, no Python. It reads its configuration from the file beside it (this program's path plus
 * ".conf", rendered from the site description: templates/hooks/slurm-ipu-hook.conf.j2), then:
 *
 * - runs the site's own controller hook, if the site names one: its prolog first (a failure fails
 *   the job start, with its status, before any partition is made), its epilog after ours (its
 *   status is the hook's); jobs without IPUs get the site's hook and nothing else;
 * - for a job with an `ipu` licence, hands the hook to the running slurm-ipu service: the hook's name
 *   and this process's environment, NUL-separated, on the service's Unix socket; the service
 *   answers "<status>\n" (slurm_ipu/hooks/transport.py) and that is the exit status;
 * - when no service takes it (nothing listens, or the connection ends without an answer: it died
 *   or restarts), runs the same hook in Python at once (`python -m slurm_ipu.cli hook`), which
 *   is safe because both hooks are idempotent; an answer later than `prolog_wait` seconds exits 1
 *   with a line on stderr (Slurm requeues the job).
 *
 *   slurm-ipu-hook            as slurmctld runs it (SLURM_SCRIPT_CONTEXT says which hook; with
 *                             neither it nor a job: SlurmctldPrimaryOnProg, a controller that
 *                             became the primary, which asks for a reap)
 *   slurm-ipu-hook --check    read the configuration, check what it names; `slurm-ipu doctor`
 *
 * Plain C and libc, built with the install (like the SPANK plugin), static, with musl where
 * musl-gcc is (spank/Makefile: its start costs a third of glibc's): no Slurm headers,
 * nothing of root's to load. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SOURCE_ID
#define SOURCE_ID "unknown" /* transport.build_hook gives the source's sha256 */
#endif
#define NO_SERVICE 75 /* EX_TEMPFAIL: nobody took the request; run the hook in Python */
#define CONF_MAX 16384

extern char **environ;

#define SITE_MAX 8 /* the site's own controller scripts per hook (slurm.site_prolog_slurmctld) */

struct scripts {
    const char *path[SITE_MAX];
    int n;
};

struct conf {
    char path[4096];
    const char *socket, *python, *site, *reap_request;
    struct scripts site_prolog, site_epilog; /* in the order they run */
    int prolog_wait;
};

static char conf_text[CONF_MAX + 1];

/* One line on stderr (slurmctld's log), and `code`. */
static int __attribute__((format(printf, 2, 3))) fail(int code, const char *fmt, ...)
{
    va_list ap;
    fputs("slurm-ipu-hook: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

/* --- the configuration: key=value lines, '#' comments ------------------------------------- */

/* A site_prolog= or site_epilog= line: one script each, appended; an empty value names none. */
static int add_script(struct scripts *s, const char *value)
{
    if (!*value)
        return 0;
    if (s->n == SITE_MAX)
        return -1;
    s->path[s->n++] = value;
    return 0;
}

static int set_key(struct conf *c, const char *key, const char *value)
{
    if (!strcmp(key, "socket"))
        c->socket = value;
    else if (!strcmp(key, "python"))
        c->python = value;
    else if (!strcmp(key, "site"))
        c->site = value;
    else if (!strcmp(key, "reap_request"))
        c->reap_request = value;
    else if (!strcmp(key, "site_prolog"))
        return add_script(&c->site_prolog, value);
    else if (!strcmp(key, "site_epilog"))
        return add_script(&c->site_epilog, value);
    else if (!strcmp(key, "prolog_wait")) {
        char *end;
        long n = strtol(value, &end, 10);
        if (end == value || *end || n < 1 || n > 86400)
            return -1;
        c->prolog_wait = (int)n;
    } else
        return -1;
    return 0;
}

static int parse_conf(struct conf *c, char *text)
{
    char *line = text, *next;
    int number = 0;
    for (; line; line = next) {
        char *eq;
        number++;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (!*line || *line == '#')
            continue;
        eq = strchr(line, '=');
        if (!eq)
            goto bad;
        *eq = '\0';
        if (set_key(c, line, eq + 1) < 0) {
            *eq = '=';
            goto bad;
        }
    }
    if (!c->socket || !c->python || !c->site || !c->prolog_wait)
        return fail(-1, "%s: socket, prolog_wait, python or site missing; re-render it: make install "
                "SITE=<site description>", c->path);
    return 0;
bad:
    return fail(-1, "%s: line %d: '%.80s' is not a setting of slurm-ipu-hook; re-render it: make install "
            "SITE=<site description>", c->path, number, line);
}

static int load_conf(struct conf *c)
{
    ssize_t n = readlink("/proc/self/exe", c->path, sizeof(c->path) - 6);
    int fd;
    size_t got = 0;
    if (n <= 0)
        return fail(-1, "cannot find its own path (/proc/self/exe): %s", strerror(errno));
    strcpy(c->path + n, ".conf");
    fd = open(c->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(-1, "%s: %s; make install SITE=<site description> renders it", c->path, strerror(errno));
    while (got < CONF_MAX) {
        ssize_t r = read(fd, conf_text + got, CONF_MAX - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got >= CONF_MAX)
        return fail(-1, "%s: over %d bytes; re-render it", c->path, CONF_MAX);
    conf_text[got] = '\0';
    return parse_conf(c, conf_text);
}

/* --- is this an IPU job: an item of SLURM_JOB_LICENSES named ipu ---------------------------- */

/* Items are separated by ',' or ';' and a count follows ':' (or '*'), names without case, as
 * slurmctld hands them to the hooks (slurm_ipu/slurm/licences.py, HOOKS). A filter: the Python
 * hook reads the count itself. */
static int has_ipu_licence(const char *licences)
{
    const char *item = licences;
    if (!licences)
        return 0;
    while (*item) {
        size_t len = strcspn(item, ",;");
        if (len >= 3 && !strncasecmp(item, "ipu", 3) && (len == 3 || item[3] == ':' || item[3] == '*'))
            return 1;
        item += len;
        if (*item)
            item++;
    }
    return 0;
}

/* A heterogeneous job's component after the first: Slurm gives it no licence (only the first
 * component may hold one), so its IPUs, if any, are its GRES, which only the Python side reads
 * (one Slurm query). Such components are rare; every other job keeps the filter above. */
static int later_component(void)
{
    const char *offset = getenv("SLURM_HET_JOB_OFFSET");
    if (!offset)
        offset = getenv("SLURM_PACK_JOB_OFFSET");
    return offset && offset[0] && strcmp(offset, "0") != 0;
}

/* --- the slurm-ipu service ------------------------------------------------------------------------ */

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int connect_to(const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    int fd;
    if (strlen(path) >= sizeof(addr.sun_path))
        return -1;
    strcpy(addr.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One buffer, one send: the request is the verb line and the environment, NUL-separated. */
static int send_request(int fd, const char *verb)
{
    static char buf[1 << 16];
    size_t used = 0;
    char **e;
    used = (size_t)snprintf(buf, sizeof(buf), "%s\n", verb);
    for (e = environ; *e; e++) {
        size_t len = strlen(*e) + 1;
        if (used + len > sizeof(buf)) {
            if (send_all(fd, buf, used))
                return -1;
            used = 0;
            if (len > sizeof(buf)) {
                if (send_all(fd, *e, len))
                    return -1;
                continue;
            }
        }
        memcpy(buf + used, *e, len);
        used += len;
    }
    if (used && send_all(fd, buf, used))
        return -1;
    return shutdown(fd, SHUT_WR);
}

/* The service's answer: 0..255, NO_SERVICE when the connection ends without one, -1 on timeout. */
static int read_answer(int fd, long long deadline)
{
    char buf[16];
    size_t got = 0;
    while (got < sizeof(buf) - 1) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        long long left = deadline - now_ms();
        ssize_t n;
        if (left <= 0)
            return -1;
        if (poll(&p, 1, left > 60000 ? 60000 : (int)left) < 0 && errno != EINTR)
            return NO_SERVICE;
        if (!p.revents)
            continue;
        n = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (memchr(buf, '\n', got))
            break;
    }
    buf[got] = '\0';
    if (!got || !memchr(buf, '\n', got))
        return NO_SERVICE;
    {
        char *end;
        long status = strtol(buf, &end, 10);
        if (end == buf || *end != '\n' || status < 0 || status > 255)
            return NO_SERVICE;
        return (int)status;
    }
}

static int hand_over(const struct conf *c, const char *verb)
{
    long long deadline = now_ms() + 1000LL * c->prolog_wait;
    int fd = connect_to(c->socket), status;
    if (fd < 0)
        return NO_SERVICE;
    if (send_request(fd, verb) < 0) {
        close(fd);
        return NO_SERVICE;
    }
    status = read_answer(fd, deadline);
    close(fd);
    if (status < 0) {
        const char *job = getenv("SLURM_JOB_ID");
        fprintf(stderr, "slurm-ipu: job %s: the slurm-ipu service did not answer the %s within %d s\n",
            job ? job : "?", verb, c->prolog_wait);
        return 1;
    }
    return status;
}

/* --- running programs ------------------------------------------------------------------------ */

/* Never returns: the program, or a script without a #! line by /bin/sh (as a shell would). */
static void exec_program(const char *path, char *const argv[])
{
    execv(path, argv);
    if (errno == ENOEXEC) {
        char *sh[] = { "/bin/sh", (char *)path, NULL };
        execv("/bin/sh", sh);
    }
    fprintf(stderr, "slurm-ipu-hook: cannot run %s: %s\n", path, strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

static void exec_python(const struct conf *c)
{
    char *argv[] = { (char *)c->python, "-m", "slurm_ipu.cli", "hook", NULL };
    setenv("SLURM_IPU_SITE", c->site, 1);
    exec_program(c->python, argv);
}

static void exec_site(const char *path)
{
    char *argv[] = { (char *)path, NULL };
    exec_program(path, argv);
}

/* Run in a child and wait: its exit status, 128+N for a signal (as a shell reports it). */
static int run_child(void (*run)(const void *), const void *arg)
{
    int status;
    pid_t pid = fork();
    if (pid < 0)
        return fail(1, "fork failed: %s", strerror(errno));
    if (pid == 0) {
        run(arg);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void run_site(const void *path) { exec_site(path); }
static void run_python(const void *c) { exec_python(c); }

/* Ours: the service, else Python. exec_ok: nothing follows, so Python may replace this process. */
static int ours(const struct conf *c, const char *verb, int exec_ok)
{
    int status = hand_over(c, verb);
    if (status != NO_SERVICE)
        return status;
    if (exec_ok)
        exec_python(c);
    return run_child(run_python, c);
}

/* --- --check ---------------------------------------------------------------------------------- */

static int check_scripts(const struct conf *c, const struct scripts *s)
{
    int i;
    for (i = 0; i < s->n; i++)
        if (access(s->path[i], X_OK) != 0)
            return fail(2, "%s: %s is missing or not executable", c->path, s->path[i]);
    return 0;
}

static void print_scripts(const char *what, const struct scripts *s)
{
    int i;
    for (i = 0; i < s->n; i++)
        printf(", site %s %s", what, s->path[i]);
}

static int check(const struct conf *c)
{
    if (access(c->python, X_OK) != 0)
        return fail(2, "%s: %s is missing or not executable", c->path, c->python);
    if (check_scripts(c, &c->site_prolog) || check_scripts(c, &c->site_epilog))
        return 2;
    if (access(c->site, R_OK) != 0)
        return fail(2, "%s: the site description %s cannot be read", c->path, c->site);
    printf("slurm-ipu-hook: %s: socket %s, python %s, site %s", c->path, c->socket, c->python, c->site);
    print_scripts("prolog", &c->site_prolog);
    print_scripts("epilog", &c->site_epilog);
    printf(" (source %s)\n", SOURCE_ID);
    return 0;
}

/* The site's prologs in order: the first failure's status (the job start fails), else 0. */
static int site_prologs(const struct conf *c)
{
    int i, status;
    for (i = 0; i < c->site_prolog.n; i++)
        if ((status = run_child(run_site, c->site_prolog.path[i])) != 0)
            return status;
    return 0;
}

/* The site's epilogs in order, each run whatever the one before did (an epilog cleans up): the
   first failure's status, else the last one's (which, when all before it passed, replaces this
   process: one fork less at every job end). */
static int site_epilogs(const struct conf *c)
{
    int i, last = c->site_epilog.n - 1, first_bad = 0, st;
    for (i = 0; i < last; i++)
        if ((st = run_child(run_site, c->site_epilog.path[i])) != 0 && !first_bad)
            first_bad = st;
    if (!first_bad)
        exec_site(c->site_epilog.path[last]);
    run_child(run_site, c->site_epilog.path[last]);
    return first_bad;
}

/* SlurmctldPrimaryOnProg: this controller is the primary now (its start, a takeover, a failback).
   A job it never knew (lost in a failover) may hold a partition: ask whoever removes for a reap,
   by a file in the state directory (it may run on another controller's host), and return at once:
   slurmctld waits for this program before it serves anyone, the reap's squeue among them. */
static int takeover(const struct conf *c)
{
    int fd;
    if (!c->reap_request) /* a configuration rendered before this key: nothing to ask */
        return 0;
    fd = open(c->reap_request, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) /* EEXIST: a reap asked already, not yet done */
        return fail(1, "cannot ask for a reap at takeover: %s: %s", c->reap_request, strerror(errno));
    if (fd >= 0)
        close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    struct conf c = { 0 };
    const char *context = getenv("SLURM_SCRIPT_CONTEXT");
    int ipu, status;

    if (load_conf(&c) < 0)
        return argc > 1 ? 2 : 1;
    if (argc == 2 && !strcmp(argv[1], "--check"))
        return check(&c);
    if (argc > 1)
        return fail(2, "usage: %s [--check] (slurmctld runs it with no argument)", argv[0]);
    ipu = has_ipu_licence(getenv("SLURM_JOB_LICENSES")) || later_component();
    if (context && !strcmp(context, "prolog_slurmctld")) {
        if ((status = site_prologs(&c)) != 0)
            return status;
        return ipu ? ours(&c, "prolog", 1) : 0;
    }
    if (context && !strcmp(context, "epilog_slurmctld")) {
        status = ipu ? ours(&c, "epilog", !c.site_epilog.n) : 0;
        /* the site's after ours; theirs is the hook's status: ours only removes or queues */
        return c.site_epilog.n ? site_epilogs(&c) : status;
    }
    if (!context && !getenv("SLURM_JOB_ID"))
        return takeover(&c);
    /* Not a controller hook (a Prolog= by mistake?): the Python entry point says why. */
    if (ipu)
        exec_python(&c);
    return 0;
}
