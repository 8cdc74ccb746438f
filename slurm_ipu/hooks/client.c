/* slurm-ipu-hook-client: PrologSlurmctld/EpilogSlurmctld handed to the running hook service
 * (slurm_ipu/hooks/transport.py) without a Python start per job.
 *
 *   slurm-ipu-hook-client SOCKET SECONDS
 *
 * Sends "prolog\n" or "epilog\n" (from SLURM_SCRIPT_CONTEXT) and this process's environment,
 * NUL-separated, on the service's Unix socket, and exits with the status the service answers
 * ("<status>\n"). Exits 75 (EX_TEMPFAIL) when no service takes the request: nothing listens on
 * the socket, or the connection ends without an answer (the service died or was restarted);
 * the wrapper then runs the same hook in Python at once, which is safe because the hooks are
 * idempotent. Exits 1 with a line on stderr when an answer takes longer than SECONDS (Slurm
 * then requeues the job). Plain C and libc, so it is built with the install, like the SPANK
 * plugin, and needs no Slurm headers. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NO_SERVICE 75

extern char **environ;

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

static int send_request(int fd, const char *verb)
{
	char **e;
	if (send_all(fd, verb, strlen(verb)) || send_all(fd, "\n", 1))
		return -1;
	for (e = environ; *e; e++)
		if (send_all(fd, *e, strlen(*e) + 1))
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

int main(int argc, char **argv)
{
	const char *context = getenv("SLURM_SCRIPT_CONTEXT");
	const char *verb;
	long long deadline;
	int fd, status;

	if (argc != 3)
		return NO_SERVICE;
	if (context && !strcmp(context, "prolog_slurmctld"))
		verb = "prolog";
	else if (context && !strcmp(context, "epilog_slurmctld"))
		verb = "epilog";
	else
		return NO_SERVICE; /* not a controller hook: the Python entry point says why */
	deadline = now_ms() + 1000LL * atoi(argv[2]);
	fd = connect_to(argv[1]);
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
		fprintf(stderr, "slurm-ipu: job %s: the hook service did not answer the %s within %s s\n",
			job ? job : "?", verb, argv[2]);
		return 1;
	}
	return status;
}
