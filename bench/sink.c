/*
 * bench/sink.c -- a fast HTTP sink for replicant's benchmarks.
 *
 *   sink -p PORT [-l] [-c COLUMN] [-o LATENCY_FILE] [-i]
 *
 * One thread, epoll, HTTP/1.1 keep-alive.  Every POST body is read in full
 * (Content-Length) and answered "204 No Content"; requests and bytes are
 * counted.  The point is that the sink is never the bottleneck of a
 * benchmark, so the default mode does nothing with the body but count it.
 *
 * Latency mode (-l) additionally keeps each body, records the time its last
 * byte arrived (CLOCK_REALTIME, the clock clock_timestamp() reads on the
 * same machine) and, after answering, extracts every "COLUMN":"<timestamptz>"
 * value (default column "ts") and stores arrival - ts per row.  Parsing is a
 * memmem() per value plus fixed-position digit reads, and only happens in
 * this mode.
 *
 * With -i (latency mode only) the rows come from standard input instead of
 * POSTs: lines such as pg_recvlogical + wal2json writes to a pipe, each read
 * stamped with its arrival time and scanned the same way (with -c value:
 * wal2json format-version 2's {"name":"ts",...,"value":"<timestamptz>"}; a
 * non-timestamp value is skipped).  The control requests still answer, so
 * both consumers are measured by one program.
 *
 * Control requests (not counted):
 *   GET /stats    {"requests":N,"body_bytes":B,"rows":R,"last_arrival_us":T}
 *   GET /reset    zero all counters and samples
 *   GET /latency  percentiles of the per-row latencies (ms), and writes the
 *                 raw samples (microseconds, one per line) to -o if given
 *
 * Only what replicant and the bench clients send is supported: no chunked
 * request bodies, no pipelining guarantees beyond what falls out naturally
 * (requests in one read are handled in order).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX (64 * 1024)	/* request line + headers */
#define DISCARD_SIZE (1024 * 1024)	/* read size while skipping a body */
#define MAX_EVENTS 64

typedef struct Conn
{
	int			fd;
	char		head[HEAD_MAX];
	size_t		head_len;		/* bytes of head[] in use */
	int			in_body;		/* reading a body */
	uint64_t	body_left;		/* bytes of the body still to read */
	uint64_t	body_len;
	int			is_post;
	char		path[64];
	char	   *body;			/* latency mode: the body kept */
	size_t		body_cap;
	size_t		body_have;
} Conn;

static int	latency_mode = 0;
static int	stdin_mode = 0;
static char *stdin_buf;			/* -i: a line that has not fully arrived yet */
static size_t stdin_have;
#define STDIN_BUF (4 * 1024 * 1024)
static const char *ts_column = "ts";
static const char *latency_file = NULL;
static char ts_needle[128];
static size_t ts_needle_len;

static uint64_t stat_requests;
static uint64_t stat_body_bytes;
static uint64_t stat_rows;
static int64_t stat_last_arrival_us;

static int64_t *samples;		/* per-row latency, microseconds */
static size_t nsamples, samples_cap;

static char discard_buf[DISCARD_SIZE];
static Conn *stdin_conn;		/* -i: the epoll tag of standard input */

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's). */
static int64_t
days_from_civil(int64_t y, unsigned m, unsigned d)
{
	int64_t		era;
	unsigned	yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = (unsigned) (y - era * 400);
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t) doe - 719468;
}

static int
digits(const char *p, int n)
{
	int			v = 0;

	while (n-- > 0)
	{
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (*p++ - '0');
	}
	return v;
}

/*
 * Parses "YYYY-MM-DD HH:MM:SS[.ffffff]" (or with 'T') followed by "+00",
 * "Z" or "+00:00", i.e. UTC as replicant writes timestamptz values.
 * Returns microseconds since the epoch, or INT64_MIN.
 */
static int64_t
parse_ts(const char *p, const char *end)
{
	int			y, mo, d, h, mi, s, us = 0, scale = 100000;

	if (end - p < 19)
		return INT64_MIN;
	y = digits(p, 4);
	mo = digits(p + 5, 2);
	d = digits(p + 8, 2);
	h = digits(p + 11, 2);
	mi = digits(p + 14, 2);
	s = digits(p + 17, 2);
	if (y < 0 || mo < 0 || d < 0 || h < 0 || mi < 0 || s < 0)
		return INT64_MIN;
	p += 19;
	if (p < end && *p == '.')
	{
		for (p++; p < end && *p >= '0' && *p <= '9'; p++)
		{
			us += (*p - '0') * scale;
			scale /= 10;
		}
	}
	if (p >= end || (*p != '+' && *p != 'Z'))
		return INT64_MIN;		/* only UTC is expected */
	return ((days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s)
			* (int64_t) 1000000) + us;
}

static void
add_sample(int64_t v)
{
	if (nsamples == samples_cap)
	{
		samples_cap = samples_cap ? samples_cap * 2 : 65536;
		samples = realloc(samples, samples_cap * sizeof(int64_t));
		if (!samples)
		{
			perror("realloc");
			exit(1);
		}
	}
	samples[nsamples++] = v;
}

/* Latency mode: one sample per "COLUMN":"..." value in the body. */
static void
scan_latency(const char *body, size_t len, int64_t arrival)
{
	const char *p = body, *end = body + len;

	while ((p = memmem(p, end - p, ts_needle, ts_needle_len)) != NULL)
	{
		int64_t		ts;

		p += ts_needle_len;
		ts = parse_ts(p, end);
		if (ts != INT64_MIN)
		{
			add_sample(arrival - ts);
			stat_rows++;
		}
	}
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t		x = *(const int64_t *) a, y = *(const int64_t *) b;

	return x < y ? -1 : x > y;
}

static double
pct(double q)
{
	size_t		i;

	if (nsamples == 0)
		return 0;
	i = (size_t) (q * (nsamples - 1) + 0.5);
	return samples[i] / 1000.0;
}

static void
send_all(int fd, const char *buf, size_t len)
{
	while (len > 0)
	{
		ssize_t		n = write(fd, buf, len);

		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
			{
				/* tiny answers: a full socket buffer is not expected */
				usleep(100);
				continue;
			}
			return;
		}
		buf += n;
		len -= n;
	}
}

static void
answer_json(int fd, const char *json)
{
	char		buf[4096];
	int			n = snprintf(buf, sizeof(buf),
							 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
							 "Content-Length: %zu\r\n\r\n%s", strlen(json), json);

	send_all(fd, buf, n);
}

static void
control(Conn *c)
{
	char		json[2048];

	if (strcmp(c->path, "/stats") == 0)
	{
		snprintf(json, sizeof(json),
				 "{\"requests\":%llu,\"body_bytes\":%llu,\"rows\":%llu,\"last_arrival_us\":%lld}\n",
				 (unsigned long long) stat_requests,
				 (unsigned long long) stat_body_bytes,
				 (unsigned long long) stat_rows,
				 (long long) stat_last_arrival_us);
	}
	else if (strcmp(c->path, "/reset") == 0)
	{
		stat_requests = stat_body_bytes = stat_rows = 0;
		stat_last_arrival_us = 0;
		nsamples = 0;
		snprintf(json, sizeof(json), "{\"reset\":true}\n");
	}
	else if (strcmp(c->path, "/latency") == 0)
	{
		qsort(samples, nsamples, sizeof(int64_t), cmp_i64);
		if (latency_file)
		{
			FILE	   *f = fopen(latency_file, "w");

			if (f)
			{
				for (size_t i = 0; i < nsamples; i++)
					fprintf(f, "%lld\n", (long long) samples[i]);
				fclose(f);
			}
		}
		snprintf(json, sizeof(json),
				 "{\"n\":%zu,\"requests\":%llu,\"min_ms\":%.3f,\"p50_ms\":%.3f,"
				 "\"p90_ms\":%.3f,\"p95_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f}\n",
				 nsamples, (unsigned long long) stat_requests,
				 pct(0), pct(0.50), pct(0.90), pct(0.95), pct(0.99), pct(0.999), pct(1));
	}
	else
		snprintf(json, sizeof(json), "{\"error\":\"unknown path\"}\n");
	answer_json(c->fd, json);
}

/* The body is complete: answer first, then do the (optional) parsing. */
static void
request_done(Conn *c)
{
	static const char no_content[] =
		"HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n";

	if (!c->is_post)
	{
		control(c);
		return;
	}
	stat_last_arrival_us = now_us();
	send_all(c->fd, no_content, sizeof(no_content) - 1);
	stat_requests++;
	stat_body_bytes += c->body_len;
	if (latency_mode && c->body)
		scan_latency(c->body, c->body_have, stat_last_arrival_us);
	c->body_have = 0;
}

/* Consumes body bytes from buf; returns how many were used. */
static size_t
eat_body(Conn *c, const char *buf, size_t len)
{
	size_t		n = len < c->body_left ? len : (size_t) c->body_left;

	if (latency_mode && c->is_post)
	{
		if (c->body_have + n > c->body_cap)
		{
			c->body_cap = (c->body_have + n) * 2;
			c->body = realloc(c->body, c->body_cap);
		}
		memcpy(c->body + c->body_have, buf, n);
		c->body_have += n;
	}
	c->body_left -= n;
	if (c->body_left == 0)
	{
		c->in_body = 0;
		request_done(c);
	}
	return n;
}

/*
 * Parses as many complete request heads in c->head as there are.  Returns
 * -1 on a protocol error (the connection is closed).
 */
static int
parse_heads(Conn *c)
{
	for (;;)
	{
		char	   *end, *line, *p;
		size_t		head_size, rest;

		if (c->in_body)
		{
			/* body bytes that arrived together with the head */
			size_t		used = eat_body(c, c->head, c->head_len);

			memmove(c->head, c->head + used, c->head_len - used);
			c->head_len -= used;
			if (c->in_body)
				return 0;
		}
		if (c->head_len == 0)
			return 0;
		end = memmem(c->head, c->head_len, "\r\n\r\n", 4);
		if (end == NULL)
			return c->head_len >= sizeof(c->head) ? -1 : 0;
		head_size = end - c->head + 4;
		*end = '\0';

		c->is_post = strncmp(c->head, "POST ", 5) == 0;
		c->path[0] = '\0';
		p = strchr(c->head, ' ');
		if (p)
		{
			size_t		i = 0;

			for (p++; *p && *p != ' ' && i < sizeof(c->path) - 1; p++)
				c->path[i++] = *p;
			c->path[i] = '\0';
		}
		c->body_len = 0;
		for (line = strstr(c->head, "\r\n"); line; line = strstr(line, "\r\n"))
		{
			line += 2;
			if (strncasecmp(line, "Content-Length:", 15) == 0)
				c->body_len = strtoull(line + 15, NULL, 10);
		}
		rest = c->head_len - head_size;
		memmove(c->head, c->head + head_size, rest);
		c->head_len = rest;
		c->body_left = c->body_len;
		c->body_have = 0;
		if (c->body_len > 0)
			c->in_body = 1;
		else
			request_done(c);
	}
}

static void
close_conn(int ep, Conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->body);
	free(c);
}

/* Reads until EAGAIN (level-triggered epoll would also do; this saves wakeups). */
static void
on_readable(int ep, Conn *c)
{
	for (;;)
	{
		ssize_t		n;

		if (c->in_body && c->head_len == 0)
		{
			/* bulk of a body: read straight into a scratch or body buffer */
			size_t		want = c->body_left < DISCARD_SIZE ? c->body_left : DISCARD_SIZE;

			n = read(c->fd, discard_buf, want);
			if (n > 0)
			{
				eat_body(c, discard_buf, n);
				continue;
			}
		}
		else
		{
			n = read(c->fd, c->head + c->head_len, sizeof(c->head) - c->head_len);
			if (n > 0)
			{
				c->head_len += n;
				if (parse_heads(c) < 0)
				{
					close_conn(ep, c);
					return;
				}
				continue;
			}
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		close_conn(ep, c);		/* EOF or error */
		return;
	}
}

/*
 * -i: reads what standard input has, scans the complete lines and keeps a
 * partial last line for the next read.  Returns 0 at end of input.
 */
static int
on_stdin(void)
{
	for (;;)
	{
		ssize_t		n = read(0, stdin_buf + stdin_have, STDIN_BUF - stdin_have);
		char	   *last;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 1;
		if (n <= 0)
			return 0;
		stat_last_arrival_us = now_us();
		stat_requests++;
		stat_body_bytes += n;
		stdin_have += n;
		last = memrchr(stdin_buf, '\n', stdin_have);
		if (last == NULL)
		{
			if (stdin_have == STDIN_BUF)
				stdin_have = 0;	/* a line longer than the buffer: skipped */
			continue;
		}
		scan_latency(stdin_buf, last + 1 - stdin_buf, stat_last_arrival_us);
		stdin_have -= last + 1 - stdin_buf;
		memmove(stdin_buf, last + 1, stdin_have);
	}
}

int
main(int argc, char **argv)
{
	int			port = 0, opt, lfd, ep, one = 1;
	struct sockaddr_in addr;
	struct epoll_event ev, events[MAX_EVENTS];

	while ((opt = getopt(argc, argv, "p:lc:o:i")) != -1)
	{
		switch (opt)
		{
			case 'p':
				port = atoi(optarg);
				break;
			case 'l':
				latency_mode = 1;
				break;
			case 'c':
				ts_column = optarg;
				break;
			case 'o':
				latency_file = optarg;
				break;
			case 'i':
				stdin_mode = latency_mode = 1;
				break;
			default:
				fprintf(stderr, "usage: sink -p PORT [-l] [-c COLUMN] [-o FILE] [-i]\n");
				return 2;
		}
	}
	if (port <= 0)
	{
		fprintf(stderr, "sink: -p PORT is required\n");
		return 2;
	}
	snprintf(ts_needle, sizeof(ts_needle), "\"%s\":\"", ts_column);
	ts_needle_len = strlen(ts_needle);
	signal(SIGPIPE, SIG_IGN);

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons(port);
	if (bind(lfd, (struct sockaddr *) &addr, sizeof(addr)) < 0 || listen(lfd, 128) < 0)
	{
		perror("sink: bind/listen");
		return 1;
	}
	ep = epoll_create1(0);
	ev.events = EPOLLIN;
	ev.data.ptr = NULL;			/* NULL marks the listening socket */
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	if (stdin_mode)
	{
		static Conn stdin_marker;	/* only its address marks standard input */

		stdin_buf = malloc(STDIN_BUF);
		fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
		ev.events = EPOLLIN;
		ev.data.ptr = &stdin_marker;
		epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
		stdin_conn = &stdin_marker;
	}
	fprintf(stderr, "sink: listening on 127.0.0.1:%d%s\n", port,
			latency_mode ? " (latency mode)" : "");

	for (;;)
	{
		int			n = epoll_wait(ep, events, MAX_EVENTS, -1);

		if (n < 0 && errno == EINTR)
			continue;
		for (int i = 0; i < n; i++)
		{
			if (events[i].data.ptr == NULL)
			{
				int			fd;

				while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0)
				{
					Conn	   *c = calloc(1, sizeof(Conn));

					setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					c->fd = fd;
					ev.events = EPOLLIN | EPOLLRDHUP;
					ev.data.ptr = c;
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				}
			}
			else if (events[i].data.ptr == stdin_conn)
			{
				if (!on_stdin())
					epoll_ctl(ep, EPOLL_CTL_DEL, 0, NULL);	/* the writer is gone */
			}
			else
				on_readable(ep, (Conn *) events[i].data.ptr);
		}
	}
}
