/* spank_ipu: plugstack arguments (strict) and the user options (--ipu-*). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spank_ipu.h"

struct ipu_conf ipu_conf;
struct ipu_opts ipu_opts;
unsigned ipu_components_done;

/* A count the user typed: digits only, 1..max. Returns the number, or 0. Whether a partition of
 * the job's size can have that many GCDs or ILDs (3 ILDs of a 192-IPU partition, 12 GCDs) is
 * job_submit.lua's to say, from the rule table: the plugin does not know the size yet. */
long ipu_parse_count(const char *text, long max)
{
    char *end = NULL;
    long n;

    if (!text || !*text || !isdigit((unsigned char)text[0]))
        return 0;
    errno = 0;
    n = strtol(text, &end, 10);
    if (errno || *end != '\0' || n < 1 || n > max)
        return 0;
    return n;
}

int ipu_valid_count(const char *text, long max)
{
    return ipu_parse_count(text, max) != 0;
}

/* Characters each plugstack value may hold: the message lists exactly these. */
#define HOST_CHARS ".-_:"   /* names, IPv4, IPv6 */
#define PREFIX_CHARS "-_"   /* the start of a V-IPU partition name */
#define PATH_CHARS "/._-+"  /* a command's absolute path */

static int copy_value(char *dst, size_t size, const char *key, const char *value, const char *extra)
{
    size_t len = strlen(value);

    if (len == 0 || len >= size) {
        slurm_error("spank_ipu: plugstack argument %s='%s' is empty or longer than %zu characters",
                    key, value, size - 1);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if (!isalnum(c) && !strchr(extra, c)) {
            slurm_error("spank_ipu: plugstack argument %s='%s' has character '%c'; use letters, digits and '%s'",
                        key, value, c, extra);
            return -1;
        }
    }
    memcpy(dst, value, len + 1);
    return 0;
}

static int parse_bool(const char *key, const char *value, int *out)
{
    static const char *yes[] = {"1", "yes", "true", "on", NULL}, *no[] = {"0", "no", "false", "off", NULL};

    for (int i = 0; yes[i]; i++)
        if (!strcmp(value, yes[i]))
            return *out = 1, 0;
    for (int i = 0; no[i]; i++)
        if (!strcmp(value, no[i]))
            return *out = 0, 0;
    slurm_error("spank_ipu: plugstack argument %s='%s' is not yes/no (1/0, true/false, on/off)", key, value);
    return -1;
}

/* Whether `node` is one of a hostlist's names: items separated by ',' outside brackets, each a name
 * or PREFIX[RANGES]SUFFIX, RANGES of N or N-M separated by ','; a range's numbers are as wide as
 * its first (node[01-10]: node01). Matched, never expanded. Held to slurm_ipu/slurm/hostlist.py
 * by tests/unit/test_spank_args.py. */
static int item_has(const char *item, size_t len, const char *node)
{
    const char *open = memchr(item, '[', len), *close = open ? memchr(open, ']', len - (size_t)(open - item)) : NULL;
    size_t pre, post, nlen = strlen(node), digits;
    const char *r, *end;

    if (!open || !close)
        return len == nlen && !memcmp(item, node, len);
    pre = (size_t)(open - item);
    post = len - (size_t)(close - item) - 1;
    if (nlen <= pre + post || memcmp(node, item, pre) || memcmp(node + nlen - post, close + 1, post))
        return 0;
    digits = nlen - pre - post;
    for (size_t i = 0; i < digits; i++)
        if (!isdigit((unsigned char)node[pre + i]))
            return 0;
    if (digits > 18)
        return 0;
    long long n = strtoll(node + pre, NULL, 10);
    for (r = open + 1; r < close; r = end + 1) {
        const char *dash;
        size_t width;
        long long lo, hi;

        end = memchr(r, ',', (size_t)(close - r));
        if (!end)
            end = close;
        dash = memchr(r, '-', (size_t)(end - r));
        width = (size_t)((dash ? dash : end) - r);
        lo = strtoll(r, NULL, 10);
        hi = dash ? strtoll(dash + 1, NULL, 10) : lo;
        /* each number as wide as the range's first, zero-padded: node01 is in [01-10], node1 is not */
        char want[24];
        snprintf(want, sizeof(want), "%0*lld", (int)width, n);
        if (n >= lo && n <= hi && strlen(want) == digits && !memcmp(want, node + pre, digits))
            return 1;
    }
    return 0;
}

int ipu_hostlist_has(const char *list, const char *node)
{
    const char *start = list;
    int depth = 0;

    for (const char *c = list;; c++) {
        if (*c == '[')
            depth++;
        else if (*c == ']')
            depth--;
        else if ((*c == ',' && depth == 0) || *c == '\0') {
            if (c > start && item_has(start, (size_t)(c - start), node))
                return 1;
            if (!*c)
                return 0;
            start = c + 1;
        }
    }
}

const struct ipu_controller *ipu_controller_of(const char *node)
{
    for (int i = 0; i < ipu_conf.n_controllers; i++)
        if (ipu_hostlist_has(ipu_conf.controllers[i].hosts, node))
            return &ipu_conf.controllers[i];
    return NULL;
}

static int parse_port(const char *key, const char *value, char *out, size_t size)
{
    char *end = NULL;
    long port;

    errno = 0;
    port = strtol(value, &end, 10);
    if (!*value || *end || errno || port < 1 || port > 65535 || !isdigit((unsigned char)value[0])) {
        slurm_error("spank_ipu: plugstack argument %s='%s' is not a port (1-65535)", key, value);
        return -1;
    }
    snprintf(out, size, "%ld", port);
    return 0;
}

/* controller=HOSTS@HOST:PORT (the port after the last ':', so an IPv6 address keeps its own) */
static int parse_controller(const char *value)
{
    struct ipu_controller *c;
    const char *at = strrchr(value, '@'), *colon = at ? strrchr(at, ':') : NULL;
    char host[IPU_HOST_MAX];

    if (ipu_conf.n_controllers >= IPU_CONTROLLERS_MAX || !at || !colon || at == value ||
        (size_t)(at - value) >= IPU_HOSTLIST_MAX || (size_t)(colon - at - 1) >= sizeof(host)) {
        slurm_error("spank_ipu: plugstack argument controller='%s' is not HOSTS@HOST:PORT (at most %d of them, "
                    "HOSTS under %d characters)", value, IPU_CONTROLLERS_MAX, IPU_HOSTLIST_MAX);
        return -1;
    }
    c = &ipu_conf.controllers[ipu_conf.n_controllers];
    memcpy(c->hosts, value, (size_t)(at - value));
    c->hosts[at - value] = '\0';
    for (const char *h = c->hosts; *h; h++)
        if (!isalnum((unsigned char)*h) && !strchr("-_.,[]", *h)) {
            slurm_error("spank_ipu: plugstack argument controller='%s': its hosts have character '%c'", value, *h);
            return -1;
        }
    memcpy(host, at + 1, (size_t)(colon - at - 1));
    host[colon - at - 1] = '\0';
    if (copy_value(c->host, sizeof(c->host), "controller", host, HOST_CHARS) ||
        parse_port("controller", colon + 1, c->port, sizeof(c->port)))
        return -1;
    ipu_conf.n_controllers++;
    return 0;
}

static int parse_one(const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
    const char *value = eq ? eq + 1 : "";

    if (klen == 9 && !strncmp(arg, "vipu_host", 9))
        return copy_value(ipu_conf.vipu_host, sizeof(ipu_conf.vipu_host), "vipu_host", value, HOST_CHARS);
    if (klen == 9 && !strncmp(arg, "vipu_port", 9))
        return parse_port("vipu_port", value, ipu_conf.vipu_port, sizeof(ipu_conf.vipu_port));
    if (klen == 10 && !strncmp(arg, "controller", 10))
        return parse_controller(value);
    if (klen == 6 && !strncmp(arg, "prefix", 6))
        return copy_value(ipu_conf.prefix, sizeof(ipu_conf.prefix), "prefix", value, PREFIX_CHARS);
    if (klen == 5 && !strncmp(arg, "debug", 5))
        return parse_bool("debug", value, &ipu_conf.debug);
    if (klen == 6 && !strncmp(arg, "helper", 6)) {
        if (value[0] != '/') {
            slurm_error("spank_ipu: plugstack argument helper='%s' is not an absolute path", value);
            return -1;
        }
        return copy_value(ipu_conf.helper, sizeof(ipu_conf.helper), "helper", value, PATH_CHARS);
    }
    if (klen == 16 && !strncmp(arg, "allocation_model", 16))
        return parse_bool("allocation_model", value, &ipu_conf.allocation_model);
    slurm_error("spank_ipu: unknown plugstack argument '%s'; valid: vipu_host=, vipu_port=, controller=, prefix=, "
                "helper=, allocation_model=, debug=", arg);
    return -1;
}

int ipu_parse_plugstack(int ac, char **av)
{
    memset(&ipu_conf, 0, sizeof(ipu_conf));
    strcpy(ipu_conf.vipu_port, "8090");
    strcpy(ipu_conf.prefix, "slurm_");
    for (int i = 0; i < ac; i++)
        if (parse_one(av[i]) < 0)
            return -1;
    if (!ipu_conf.vipu_host[0]) {
        slurm_error("spank_ipu: plugstack needs vipu_host=<V-IPU controller host>");
        return -1;
    }
    return 0;
}

/* Option callbacks run first where the user typed them (remote == 0): refuse bad input there.
 * The parsed number is stored, not the text: "00000000002" is 2, and never truncated. */
int ipu_opt_count(const char *name, const char *optarg, char *slot, long max)
{
    long n = ipu_parse_count(optarg, max);

    if (!n) {
        slurm_error("spank_ipu: --%s=%s: not a count from 1 to %ld; use e.g. --%s=2",
                    name, optarg ? optarg : "", max, name);
        return -1;
    }
    /* A copy: in slurmstepd the caller frees optarg after the callback (measured: tasks saw ""). */
    snprintf(slot, IPU_COUNT_MAX, "%ld", n);
    return 0;
}

/* --ipus=N, a job's total IPUs (Graphcore's Slurm integration spells a request so). Any positive
 * count up to IPU_TOTAL_MAX is passed on: job_submit.lua, which knows the Pod, says whether it is
 * a partition size and spreads it over the job's nodes. */

int ipu_opt_total(const char *optarg, char *slot)
{
    char *end = NULL;
    long n = 0;

    if (optarg && isdigit((unsigned char)optarg[0])) {
        errno = 0;
        n = strtol(optarg, &end, 10);
        if (errno || *end != '\0' || n > IPU_TOTAL_MAX)
            n = 0;
    }
    if (n < 1) {
        slurm_error("spank_ipu: --ipus=%s: not a number of IPUs from 1 to %d; use e.g. --ipus=4 (the job's total)",
                    optarg ? optarg : "", IPU_TOTAL_MAX);
        return -1;
    }
    snprintf(slot, IPU_COUNT_MAX, "%ld", n);
    return 0;
}

/* Whether a value reached the callback from sbatch re-reading its own environment for a later
 * component of a heterogeneous job, not from what the user typed for that component. After each
 * component sbatch puts its SPANK options into its environment (SLURM_SPANK_<option's variable>,
 * for the job's steps), and for the next component it reads them back (src/common/spank.c,
 * spank_process_env_options), handing the callback getenv()'s own pointer: an option typed on the
 * command line or in an #SBATCH line is never that string. srun re-reads nothing. */
static int inherited(const char *option, const char *optarg)
{
    char var[96];

    snprintf(var, sizeof(var), "SLURM_SPANK__SLURM_SPANK_OPTION_spank_ipu_%s", option);
    return ipu_components_done > 0 && optarg && getenv(var) == optarg;
}

/* The component an option was typed for: this one, unless sbatch handed on an earlier one's. */
static void typed_for(unsigned *slot, const char *option, const char *optarg)
{
    if (!inherited(option, optarg))
        *slot = ipu_components_done;
}

static int opt_ipus(int val, const char *optarg, int remote)
{
    (void)val; (void)remote;
    if (!inherited("ipu", optarg))  /* --ipu, its other name, has a variable of its own */
        typed_for(&ipu_opts.ipus_in, "ipus", optarg);
    return ipu_opt_total(optarg, ipu_opts.ipus);
}

static int opt_gcds(int val, const char *optarg, int remote)
{
    (void)val; (void)remote;
    typed_for(&ipu_opts.gcds_in, "ipu_gcds", optarg);
    return ipu_opt_count("ipu-gcds", optarg, ipu_opts.gcds, IPU_GCDS_MAX);
}

static int opt_ilds(int val, const char *optarg, int remote)
{
    (void)val; (void)remote;
    typed_for(&ipu_opts.ilds_in, "ipu_ilds", optarg);
    return ipu_opt_count("ipu-ilds", optarg, ipu_opts.ilds, IPU_ILDS_MAX);
}

static int opt_reconf(int val, const char *optarg, int remote)
{
    (void)val; (void)remote;
    typed_for(&ipu_opts.reconfigurable_in, "ipu_reconfigurable", optarg);
    ipu_opts.reconfigurable = 1;
    return 0;
}

static int opt_instance(int val, const char *optarg, int remote)
{
    (void)val; (void)optarg; (void)remote;
    ipu_opts.instance = 1;
    return 0;
}

/* An option's `val` (its callbacks ignore it) says where it is offered: SRUN_ONLY options are
 * registered in srun and slurmstepd only, so sbatch/salloc --help do not list them and an
 * abbreviation typed there (--ipu-i) does not reach them. Slurm has no hidden SPANK options. */
#define SRUN_ONLY 1

static struct spank_option options[] = {
    {"ipus", "N", "IPUs for the job in all (spread evenly over its nodes; the same as --gres=ipu:N/nodes)", 1, 0,
     opt_ipus},
    /* without it, --ipu=4 is an ambiguous abbreviation of the others here */
    {"ipu", "N", "The same as --ipus", 1, 0, opt_ipus},
    {"ipu-gcds", "N", "Split the job's V-IPU partition into N graph compilation domains", 1, 0, opt_gcds},
    {"ipu-ilds", "N", "Spread the job's V-IPU partition over N IPU-Link domains", 1, 0, opt_ilds},
    {"ipu-reconfigurable", NULL, "Make the job's V-IPU partition reconfigurable", 0, 0, opt_reconf},
    {"ipu-instance", NULL, "(set by ipurun) each task sets up its PopDist instance: environment, cache, binding",
     0, SRUN_ONLY, opt_instance},
    SPANK_OPTIONS_TABLE_END
};

/* Registered from slurm_spank_init: a static spank_options table is invisible to sbatch/salloc. */
int ipu_register_options(spank_t sp, spank_context_t ctx)
{
    for (struct spank_option *o = options; o->name; o++) {
        if (o->val == SRUN_ONLY && ctx == S_CTX_ALLOCATOR)
            continue;
        if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
            slurm_error("spank_ipu: cannot register --%s", o->name);
            return -1;
        }
    }
    return 0;
}
