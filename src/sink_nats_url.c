/*
 * sink_nats_url.c
 *		NATS sink URLs: nats://host[:port][,host[:port]...]/<stream>
 *		[?subject_prefix=<prefix>][&tls=true], tls:// for TLS.  Every part
 *		is checked before use; problems are fixed, value-free texts.
 */
#include "postgres.h"

#include "sink_nats_url.h"

static bool
name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		   c == '_' || c == '-';
}

/* A host[:port] list up to end into url->servers; a problem or NULL. */
static const char *
parse_servers(const char *p, const char *end, NatsUrl *url)
{
	while (p < end)
	{
		const char *comma = memchr(p, ',', end - p);
		const char *stop = comma ? comma : end;
		const char *colon = memchr(p, ':', stop - p);
		const char *host_end = colon ? colon : stop;
		long port = NATS_DEFAULT_PORT;
		const char *q;

		if (host_end == p)
			return "NATS sink URL has an empty host";
		for (q = p; q < host_end; q++)
			if (!name_char(*q) && *q != '.')
				return "NATS sink URL has a host that is not a name or an IPv4 address";
		if (colon)
		{
			port = 0;
			if (colon + 1 == stop || stop - colon > 6)
				return "NATS sink URL has an invalid port";
			for (q = colon + 1; q < stop; q++)
			{
				if (*q < '0' || *q > '9')
					return "NATS sink URL has an invalid port";
				port = port * 10 + (*q - '0');
			}
			if (port < 1 || port > 65535)
				return "NATS sink URL has an invalid port";
		}
		if (url->nservers == NATS_MAX_SERVERS)
			return "NATS sink URL names more than 16 servers";
		url->servers[url->nservers++] = psprintf("nats://%.*s:%ld", (int) (host_end - p), p, port);
		p = comma ? comma + 1 : end;
		if (comma && p == end)
			return "NATS sink URL has an empty host";
	}
	return NULL;
}

/* subject_prefix: tokens of name characters, separated by dots. */
static const char *
check_prefix(const char *p, int len)
{
	int i;

	if (len == 0 || len > NATS_MAX_PREFIX)
		return "NATS subject_prefix must have 1 to 128 characters";
	for (i = 0; i < len; i++)
		if (!name_char(p[i]) &&
			!(p[i] == '.' && i > 0 && i < len - 1 && p[i - 1] != '.'))
			return "NATS subject_prefix must be tokens of letters, digits, \"_\" and \"-\" separated by single dots";
	return NULL;
}

static const char *
parse_query(const char *p, NatsUrl *url)
{
	while (*p)
	{
		const char *amp = strchr(p, '&');
		const char *stop = amp ? amp : p + strlen(p);
		const char *eq = memchr(p, '=', stop - p);
		const char *problem;

		if (eq == NULL)
			return "NATS sink URL has a query parameter without a value";
		if (eq - p == 14 && strncmp(p, "subject_prefix", 14) == 0)
		{
			if ((problem = check_prefix(eq + 1, stop - eq - 1)) != NULL)
				return problem;
			snprintf(url->prefix, sizeof(url->prefix), "%.*s", (int) (stop - eq - 1), eq + 1);
		}
		else if (eq - p == 3 && strncmp(p, "tls", 3) == 0)
		{
			if (stop - eq - 1 == 4 && strncmp(eq + 1, "true", 4) == 0)
				url->tls = true;
			else if (!(stop - eq - 1 == 5 && strncmp(eq + 1, "false", 5) == 0))
				return "NATS sink URL parameter tls must be true or false";
		}
		else
			return "NATS sink URL has an unknown query parameter";
		p = amp ? amp + 1 : stop;
	}
	return NULL;
}

/* Parses url into *out; a value-free problem, or NULL. */
const char *
replicant_nats_parse_url(const char *url, NatsUrl *out)
{
	const char *p;
	const char *slash;
	const char *stream_end;
	const char *problem;

	memset(out, 0, sizeof(*out));
	if (pg_strncasecmp(url, "nats://", 7) == 0)
		p = url + 7;
	else if (pg_strncasecmp(url, "tls://", 6) == 0)
	{
		p = url + 6;
		out->tls = true;
	}
	else
		return "sink URL must start with \"nats://\" or \"tls://\"";
	slash = strchr(p, '/');
	if (slash == NULL)
		return "NATS sink URL names no stream";
	if (memchr(p, '@', slash - p) != NULL)
		return "NATS sink URL must not hold credentials";
	if ((problem = parse_servers(p, slash, out)) != NULL)
		return problem;
	if (out->nservers == 0)
		return "NATS sink URL names no server";
	stream_end = slash + 1 + strcspn(slash + 1, "?");
	if (stream_end == slash + 1 || stream_end - slash - 1 > NATS_MAX_NAME)
		return "NATS stream name must have 1 to 64 characters";
	for (p = slash + 1; p < stream_end; p++)
		if (!name_char(*p))
			return "NATS stream name must be letters, digits, \"_\" and \"-\"";
	memcpy(out->stream, slash + 1, stream_end - slash - 1);
	if (*stream_end == '?')
		return parse_query(stream_end + 1, out);
	return NULL;
}

bool
replicant_nats_url(const char *url)
{
	return pg_strncasecmp(url, "nats://", 7) == 0 || pg_strncasecmp(url, "tls://", 6) == 0;
}

void
replicant_nats_check_url(const char *url)
{
	NatsUrl parsed;
	const char *problem = replicant_nats_parse_url(url, &parsed);

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s", problem),
				 errhint("NATS sink URLs have the form nats://host:port[,host:port...]/<stream>[?subject_prefix=<prefix>][&tls=true].")));
}
