/*
 * vipu-fast: the lab's `vipu` for the calls on every IPU job's path, in C, so the emulator's
 * command costs what a native `vipu` costs (about a millisecond, not a Python start-up):
 *
 *   vipu [--api-host H] [--api-port P] [--api-timeout S] create partition NAME --size N
 *        [--num-gcds N] [--num-ilds N] [--hosts A,B] [--owner-uid U] [--reconfigurable] [--showjson]
 *   vipu [--api-host H] [--api-port P] [--api-timeout S] remove|delete partition NAME
 *   vipu [--api-host H] [--api-port P] [--api-timeout S] list partitions --showjson
 *        (the read every ipurun launch makes)
 *   vipu [--api-host H] [--api-port P] [--api-timeout S] reset partition NAME [--showjson]
 *        (PopRun's reset between runs of a job)
 *   vipu-admin [...] create allocation NAME --agents A,B [--grant UID,UID] [--showjson]
 *   vipu-admin [...] update allocation NAME --grant UID,UID
 *   vipu-admin [...] remove|delete allocation NAME
 *        (the allocation model's prolog and epilog: docs/vipu.md)
 *
 * Same requests, replies and exit codes as the Python CLI (slurm_ipu/emulator/vipucli.py), except
 * that --showjson prints the server's JSON as sent (compact). Anything else (another verb, an
 * option it does not know, a name outside [A-Za-z0-9_.-], no address given) is handed, before
 * any request, to the Python CLI named by $VIPU_FAST_FALLBACK with the same arguments.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

struct req {
	const char *host, *port, *verb, *noun, *name, *size, *gcds, *ilds, *hosts, *owner, *allocation, *agents,
		*grant;
	int showjson, reconfigurable;
	double timeout;
};

static char **g_argv;

/* The lab builds its own copy with its address and fallback compiled in (-D), so its bin/vipu is
 * this program itself, not a shell script around it: one exec per call. The environment wins. */
#ifndef LAB_HOST
#define LAB_HOST NULL
#endif
#ifndef LAB_PORT
#define LAB_PORT NULL
#endif
#ifndef LAB_FALLBACK
#define LAB_FALLBACK NULL
#endif

static const char *env_or(const char *name, const char *lab)
{
	const char *v = getenv(name);

	return v && *v ? v : lab;
}

static void fallback(void)
{
	const char *py = env_or("VIPU_FAST_FALLBACK", LAB_FALLBACK);

	if (!py || !*py) {
		fprintf(stderr, "vipu: this call needs the Python CLI and VIPU_FAST_FALLBACK is not set\n");
		exit(2);
	}
	g_argv[0] = (char *)py;
	execv(py, g_argv);
	fprintf(stderr, "vipu: cannot run %s: %s\n", py, strerror(errno));
	exit(126);
}

static int word_ok(const char *s, const char *extra)
{
	if (!s || !*s || strlen(s) > 200)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr(extra, *s))
			return 0;
	return 1;
}

static int digits(const char *s)
{
	if (!s || !*s || strlen(s) > 9)
		return 0;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return 0;
	return 1;
}

/* The emulator serves loopback only: any other host goes to the Python CLI, which refuses it. */
static int loopback(const char *host)
{
	return !strcmp(host, "localhost") || !strcmp(host, "::1") || !strncmp(host, "127.", 4);
}

/* An option's value, as `--opt value` or `--opt=value`; NULL if this is not that option. */
static const char *value_of(const char *opt, int argc, char **argv, int *i)
{
	size_t n = strlen(opt);

	if (strncmp(argv[*i], opt, n))
		return NULL;
	if (argv[*i][n] == '=')
		return argv[*i] + n + 1;
	if (argv[*i][n] || *i + 1 >= argc)
		return NULL;
	return argv[++*i];
}

static void parse(int argc, char **argv, struct req *r)
{
	const char *words[3] = {0};
	int nwords = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v;

		if (a[0] != '-') {
			if (nwords == 3)
				fallback();
			words[nwords++] = a;
			continue;
		}
#define TAKE(opt, field) if ((v = value_of(opt, argc, argv, &i))) { r->field = v; continue; }
		TAKE("--api-host", host) TAKE("--api-port", port) TAKE("--size", size) TAKE("--num-gcds", gcds)
		TAKE("--gcds", gcds) TAKE("--num-ilds", ilds) TAKE("--hosts", hosts) TAKE("--owner-uid", owner)
		TAKE("--allocation", allocation) TAKE("--agents", agents) TAKE("--grant", grant)
#undef TAKE
		if ((v = value_of("--api-timeout", argc, argv, &i))) {
			char *end;

			r->timeout = strtod(v, &end);
			if (*end || !(r->timeout > 0) || r->timeout > 3600)
				fallback();
			continue;
		}
		if (!strcmp(a, "--showjson")) {
			r->showjson = 1;
			continue;
		}
		if (!strcmp(a, "--reconfigurable")) {
			r->reconfigurable = 1;
			continue;
		}
		fallback();
	}
	if (nwords == 2 && !strcmp(words[0], "list") && !strcmp(words[1], "partitions") && r->showjson) {
		r->verb = words[0];
		r->name = "";
	} else if (nwords != 3 || (strcmp(words[1], "partition") && strcmp(words[1], "allocation"))) {
		fallback();
	} else {
		r->verb = words[0];
		r->noun = words[1];
		r->name = words[2];
	}
	if (!r->host)
		r->host = env_or("VIPU_CLI_API_HOST", LAB_HOST);
	if (!r->port)
		r->port = env_or("VIPU_CLI_API_PORT", LAB_PORT);
	if (!word_ok(r->host, ".-:") || !loopback(r->host) || !digits(r->port) || atoi(r->port) > 65535)
		fallback(); /* the address from a config file, or a bad one: the Python CLI says which */
	if (!strcmp(r->verb, "list")) {
		if (r->size || r->gcds || r->ilds || r->hosts || r->owner || r->reconfigurable || r->allocation ||
		    r->agents || r->grant)
			fallback();
		return;
	}
	if (!isalnum((unsigned char)r->name[0]) || strlen(r->name) > 64 || !word_ok(r->name, "_.-"))
		fallback();
	if (r->noun[0] == 'a') { /* an allocation: create with its agents (uids only as grants), update its
				    * grants (the epilog's revoke), or remove */
		int create = !strcmp(r->verb, "create"), update = !strcmp(r->verb, "update");

		if ((!create && !update && strcmp(r->verb, "remove") && strcmp(r->verb, "delete")) ||
		    r->size || r->gcds || r->ilds || r->hosts || r->owner || r->reconfigurable || r->allocation ||
		    (create && (!r->agents || !word_ok(r->agents, "_.-,") || (r->grant && !word_ok(r->grant, ",")))) ||
		    (update && (r->agents || !r->grant || !word_ok(r->grant, ","))) ||
		    (!create && !update && (r->agents || r->grant)))
			fallback();
		return;
	}
	if (r->agents || r->grant)
		fallback();
	if (!strcmp(r->verb, "create")) {
		if (!digits(r->size) || (r->gcds && !digits(r->gcds)) || (r->ilds && !digits(r->ilds)) ||
		    (r->owner && !digits(r->owner)) || (r->hosts && !word_ok(r->hosts, "_.-,")) ||
		    (r->allocation && (!*r->allocation || strlen(r->allocation) > 64 || !word_ok(r->allocation, "_.-"))))
			fallback();
	} else if (strcmp(r->verb, "remove") && strcmp(r->verb, "delete") && strcmp(r->verb, "reset")) {
		fallback();
	} else if (r->size || r->gcds || r->ilds || r->hosts || r->owner || r->reconfigurable || r->allocation) {
		fallback();
	}
}

static void unreachable(const struct req *r)
{
	fprintf(stderr, "unable to connect to VIRM/V-IPU Controller at %s:%s: context deadline exceeded\n",
		r->host, r->port);
	exit(1);
}

/* The emulator's API socket for the port (emulator/api.py): STATE_DIR/api-PORT.sock when
 * VIPU_EMU_SOCKET_DIR (or the lab's LAB_SOCKET_DIR) names the emulator's state directory, a name
 * no other user can take; else the abstract one, SOCKET_PREFIX<port>, which any user may bind
 * while the emulator does not hold it. Either way the server knows its caller from the kernel
 * (SO_PEERCRED), and the caller asks the kernel who serves before it sends a byte: a server of
 * another uid than the emulator's owner (VIPU_EMU_OWNER or the lab's LAB_OWNER; by default root or
 * the caller) is refused in one line, as api.py check_server words it. The prefix is compiled in
 * from the Python constant (lab/files.py), never written here. Only a loopback host is served
 * (parse hands any other to the Python CLI, which says so). */
#ifndef SOCKET_PREFIX
#error "build with -DSOCKET_PREFIX (slurm_ipu/lab/files.py: build_vipu_fast)"
#endif
#ifndef LAB_SOCKET_DIR
#define LAB_SOCKET_DIR NULL
#endif
#ifndef LAB_OWNER
#define LAB_OWNER NULL
#endif
static void check_server(int fd, const char *shown)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	const char *owner = env_or("VIPU_EMU_OWNER", LAB_OWNER);
	struct passwd *pw;
	char expected[64], user[300] = "";

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) {
		fprintf(stderr, "error: V-IPU server at %s: cannot tell who serves it: %s [UNAVAILABLE]\n", shown,
			strerror(errno));
		exit(1);
	}
	if (owner && !digits(owner)) {
		fprintf(stderr, "error: VIPU_EMU_OWNER='%s' is not a uid; give the emulator owner's numeric uid (root: 0) "
			"[INVALID_ARGUMENT]\n", owner);
		exit(1);
	}
	if (owner ? cred.uid == (uid_t)strtoul(owner, NULL, 10) : (cred.uid == 0 || cred.uid == geteuid()))
		return;
	if (owner)
		snprintf(expected, sizeof(expected), "uid %lu", strtoul(owner, NULL, 10));
	else if (geteuid() == 0)
		snprintf(expected, sizeof(expected), "uid 0");
	else
		snprintf(expected, sizeof(expected), "uid 0 or uid %u", (unsigned)geteuid());
	if ((pw = getpwuid(cred.uid)))
		snprintf(user, sizeof(user), " (%s)", pw->pw_name);
	fprintf(stderr, "error: V-IPU server at %s is served by uid %u%s (pid %d), not by the emulator's owner (%s): "
		"another user's process holds its socket; stop it (kill %d) and start the emulator again (slurm-ipu lab "
		"up), or set VIPU_EMU_OWNER to the uid the emulator runs as [UNAVAILABLE]\n",
		shown, (unsigned)cred.uid, user, (int)cred.pid, expected, (int)cred.pid);
	exit(1);
}

static int dial(const struct req *r)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = (time_t)r->timeout, .tv_usec = (suseconds_t)((r->timeout - (time_t)r->timeout) * 1e6)};
	const char *dir = env_or("VIPU_EMU_SOCKET_DIR", LAB_SOCKET_DIR);
	char shown[sizeof(sa.sun_path) + 1];
	socklen_t size;
	int n, fd;

	if (dir && *dir) {
		n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/api-%s.sock", dir, r->port);
		if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
			unreachable(r);
		size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
		snprintf(shown, sizeof(shown), "%s", sa.sun_path);
	} else {
		n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "%s%s", SOCKET_PREFIX, r->port);
		size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
		snprintf(shown, sizeof(shown), "@%s", sa.sun_path + 1);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		unreachable(r);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, size))
		unreachable(r);
	check_server(fd, shown);
	return fd;
}

/* --grant's uids as a JSON list's items; a user name goes to the Python CLI, which looks it up. */
static void uid_list(const char *csv, char *out, size_t cap)
{
	char copy[1024], *save = NULL;
	size_t g = 0;

	out[0] = 0;
	snprintf(copy, sizeof(copy), "%s", csv ? csv : "");
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!digits(tok))
			fallback();
		/* numbers as numbers: "007" is 7, as Python's int() reads it, never invalid JSON */
		g += (size_t)snprintf(out + g, cap - g, "%s%d", g ? ", " : "", atoi(tok));
	}
}

/* `"key": "value"` inside s, JSON escapes undone (enough for the server's messages). */
static int json_string(const char *s, const char *key, char *out, size_t cap)
{
	char pat[64];
	const char *p;
	size_t n = 0;

	snprintf(pat, sizeof(pat), "\"%s\": \"", key);
	if (!(p = strstr(s, pat)))
		return 0;
	for (p += strlen(pat); *p && *p != '"' && n + 1 < cap; p++) {
		if (*p == '\\' && p[1]) {
			p++;
			if (*p == 'u' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2]) &&
			    isxdigit((unsigned char)p[3]) && isxdigit((unsigned char)p[4])) {
				unsigned code = (unsigned)strtoul((char[]){p[1], p[2], p[3], p[4], 0}, NULL, 16);

				out[n++] = code < 128 ? (char)code : '?';
				p += 4;
				continue;
			}
			out[n++] = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
			continue;
		}
		out[n++] = *p;
	}
	out[n] = 0;
	return 1;
}

int main(int argc, char **argv)
{
	struct req r = {.timeout = 30.0};
	static char body[4096], msg[8192], reply[1 << 20];
	char path[160], hosts[1024] = "";
	int len = 0, fd, status;
	size_t got = 0;
	ssize_t k;
	char *sep;

	g_argv = argv;
	parse(argc, argv, &r);
	snprintf(path, sizeof(path), "/v1/%s%s%s%s", r.noun && r.noun[0] == 'a' ? "allocations" : "partitions",
		 r.name[0] && r.verb[0] != 'c' ? "/" : "", r.verb[0] == 'c' ? "" : r.name,
		 !strcmp(r.verb, "reset") ? "/reset" : r.verb[0] == 'u' ? "/grants" : "");
	if (r.verb[0] == 'u') {
		char grants[512];

		uid_list(r.grant, grants, sizeof(grants));
		len = snprintf(body, sizeof(body), "{\"grants\": [%s]}", grants);
	} else if (r.verb[0] == 'c' && r.noun[0] == 'a') {
		char agents[1024] = "", copy[1024], *save = NULL, grants[512];
		size_t a = 0;

		snprintf(copy, sizeof(copy), "%s", r.agents);
		for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			a += (size_t)snprintf(agents + a, sizeof(agents) - a, "%s\"%s\"", a ? ", " : "", tok);
		uid_list(r.grant, grants, sizeof(grants));
		len = snprintf(body, sizeof(body), "{\"name\": \"%s\", \"agents\": [%s], \"grants\": [%s]}", r.name,
			       agents, grants);
	} else if (r.verb[0] == 'c') {
		if (r.hosts) {
			char copy[1024], *save = NULL;
			size_t h = 0;

			snprintf(copy, sizeof(copy), "%s", r.hosts);
			for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
				h += (size_t)snprintf(hosts + h, sizeof(hosts) - h, "%s\"%s\"", h ? ", " : "", tok);
		}
		char gcds[16] = "null", ilds[16] = "null", owner[16] = "null", alloc[72] = "null";

		/* numbers as numbers: "0002" is 2, as Python's int() reads it, never invalid JSON */
		if (r.gcds)
			snprintf(gcds, sizeof(gcds), "%d", atoi(r.gcds));
		if (r.ilds)
			snprintf(ilds, sizeof(ilds), "%d", atoi(r.ilds));
		if (r.owner)
			snprintf(owner, sizeof(owner), "%d", atoi(r.owner));
		if (r.allocation) /* letters, digits, '_', '.', '-' only (parse): nothing to escape */
			snprintf(alloc, sizeof(alloc), "\"%s\"", r.allocation);
		len = snprintf(body, sizeof(body),
			       "{\"name\": \"%s\", \"size\": %d, \"num_gcds\": %s, \"num_ilds\": %s, "
			       "\"allocation\": %s, \"reconfigurable\": %s, \"total_replicas\": null, "
			       "\"owner_uid\": %s, \"hosts\": [%s]}",
			       r.name, atoi(r.size), gcds, ilds, alloc, r.reconfigurable ? "true" : "false", owner, hosts);
	}
	len = snprintf(msg, sizeof(msg),
		       "%s %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
		       "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
		       r.verb[0] == 'c' || r.verb[0] == 'u' || !strcmp(r.verb, "reset") ? "POST" : r.verb[0] == 'l' ? "GET" : "DELETE", path,
		       r.host, r.port, len, body);
	fd = dial(&r);
	for (int off = 0; off < len; off += (int)k)
		if ((k = write(fd, msg + off, (size_t)(len - off))) <= 0)
			unreachable(&r);
	while (got < sizeof(reply) - 1 && (k = read(fd, reply + got, sizeof(reply) - 1 - got)) > 0)
		got += (size_t)k;
	close(fd);
	reply[got] = 0;
	if (!got || sscanf(reply, "HTTP/1.%*d %d", &status) != 1)
		unreachable(&r); /* the server closed without a reply, as one that is down does */
	if (!(sep = strstr(reply, "\r\n\r\n")) || (sep[4] != '{' && sep[4] != '[')) {
		fprintf(stderr, "error: V-IPU server at %s:%s sent a reply that is not JSON [UNAVAILABLE]\n", r.host,
			r.port);
		return 1;
	}
	if (status >= 400) {
		char code[64] = "INTERNAL", text[4096];

		json_string(sep + 4, "code", code, sizeof(code));
		if (!json_string(sep + 4, "message", text, sizeof(text)))
			snprintf(text, sizeof(text), "HTTP %d", status);
		fprintf(stderr, "error: %s [%s]\n", text, code);
		return 1;
	}
	if (r.verb[0] == 'l') { /* {"partitions": [...]}: the CLI prints the array */
		char *open = strchr(sep + 4, '['), *close = strrchr(sep + 4, ']');

		if (!open || !close || close < open) {
			fprintf(stderr, "error: V-IPU server at %s:%s sent a reply that is not JSON [UNAVAILABLE]\n",
				r.host, r.port);
			return 1;
		}
		printf("%.*s\n", (int)(close - open + 1), open);
	} else if ((r.verb[0] == 'c' || !strcmp(r.verb, "reset")) && r.showjson)
		printf("%s\n", sep + 4);
	else
		printf("%s %s (%s): success.\n", r.verb, r.noun, r.name);
	return 0;
}
