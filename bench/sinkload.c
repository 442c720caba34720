/*
 * bench/sinkload.c -- measures the bench sink alone.
 *
 *   sinkload PORT BODY_BYTES SECONDS [CONNECTIONS]
 *
 * Sends POSTs with a BODY_BYTES JSON-ish body over keep-alive connections,
 * one request in flight per connection (replicant's shape: one request in
 * flight per pipeline), for SECONDS, and prints
 *
 *   requests=N seconds=S req_per_s=R mb_per_s=M
 *
 * With one connection this is the most a single pipeline could get through
 * the sink for that batch size, client cost included (the client is as
 * cheap as it gets: one write of a prepared request, one read of the 204).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int
connect_to(int port)
{
	struct sockaddr_in addr;
	int			fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons(port);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *) &addr, sizeof(addr)) < 0)
	{
		perror("sinkload: connect");
		exit(1);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int
write_all(int fd, const char *p, size_t len)
{
	while (len > 0)
	{
		ssize_t		n = write(fd, p, len);

		if (n <= 0)
			return -1;
		p += n;
		len -= n;
	}
	return 0;
}

/* Reads one response head (the sink's 204 has no body). */
static int
read_response(int fd)
{
	char		buf[512];
	size_t		have = 0;

	for (;;)
	{
		ssize_t		n = read(fd, buf + have, sizeof(buf) - 1 - have);

		if (n <= 0)
			return -1;
		have += n;
		buf[have] = '\0';
		if (strstr(buf, "\r\n\r\n"))
			return strncmp(buf, "HTTP/1.1 2", 10) == 0 ? 0 : -1;
		if (have >= sizeof(buf) - 1)
			return -1;
	}
}

int
main(int argc, char **argv)
{
	int			port, nconn = 1;
	size_t		body_len, req_len, hdr_len;
	double		seconds, t0, t;
	char	   *req;
	unsigned long long count = 0;
	int		   *fds;

	if (argc < 4)
	{
		fprintf(stderr, "usage: sinkload PORT BODY_BYTES SECONDS [CONNECTIONS]\n");
		return 2;
	}
	port = atoi(argv[1]);
	body_len = strtoull(argv[2], NULL, 10);
	seconds = atof(argv[3]);
	if (argc > 4)
		nconn = atoi(argv[4]);

	/* headers as replicant sends them, roughly; body of 'x' in a JSON string */
	req = malloc(body_len + 1024);
	hdr_len = sprintf(req,
					  "POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: sinkload\r\n"
					  "Accept: */*\r\nContent-Type: application/json\r\n"
					  "webhook-id: bench-123456789\r\nwebhook-timestamp: 1700000000\r\n"
					  "Content-Length: %zu\r\n\r\n", port, body_len);
	memset(req + hdr_len, 'x', body_len);
	if (body_len >= 8)
	{
		memcpy(req + hdr_len, "{\"d\":\"", 6);
		memcpy(req + hdr_len + body_len - 2, "\"}", 2);
	}
	req_len = hdr_len + body_len;

	fds = calloc(nconn, sizeof(int));
	for (int i = 0; i < nconn; i++)
		fds[i] = connect_to(port);

	t0 = now_s();
	do
	{
		/* one request in flight per connection */
		for (int i = 0; i < nconn; i++)
			if (write_all(fds[i], req, req_len) < 0)
			{
				perror("sinkload: write");
				return 1;
			}
		for (int i = 0; i < nconn; i++)
			if (read_response(fds[i]) < 0)
			{
				fprintf(stderr, "sinkload: bad response\n");
				return 1;
			}
		count += nconn;
		t = now_s() - t0;
	} while (t < seconds);

	printf("requests=%llu seconds=%.3f req_per_s=%.0f mb_per_s=%.1f\n",
		   count, t, count / t, count * (double) body_len / t / 1e6);
	return 0;
}
