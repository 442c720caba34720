/*
 * sink_nats_url.h
 *		NATS sink URLs (sink_nats_url.c).
 */
#ifndef REPLICANT_SINK_NATS_URL_H
#define REPLICANT_SINK_NATS_URL_H

#define NATS_MAX_SERVERS 16
#define NATS_DEFAULT_PORT 4222
#define NATS_MAX_NAME 64
#define NATS_MAX_PREFIX 128

typedef struct NatsUrl
{
	char *servers[NATS_MAX_SERVERS]; /* nats://host:port, palloc'd */
	int nservers;
	char stream[NATS_MAX_NAME + 1];
	char prefix[NATS_MAX_PREFIX + 1]; /* "" when not given */
	bool tls;
} NatsUrl;

/* Parses url into *out: NULL, or a value-free problem. */
extern const char *replicant_nats_parse_url(const char *url, NatsUrl *out);

/*
 * nats://host[:port][,host[:port]...]/<stream>[?subject_prefix=<p>][&tls=true]
 * (tls:// is nats:// with tls=true).  Raises a value-free error unless url
 * is one; the URL is never quoted.
 */
extern void replicant_nats_check_url(const char *url);

/* Whether url names a NATS destination (by its scheme). */
extern bool replicant_nats_url(const char *url);

#endif /* REPLICANT_SINK_NATS_URL_H */
