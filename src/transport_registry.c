/*
 * transport_registry.c
 *		Which transport a sink URL opens, by its scheme: a new transport is
 *		one more line here.
 */
#include "postgres.h"

#include "sink_http.h"
#include "sink_nats.h"
#include "transport_registry.h"

typedef struct TransportEntry
{
	const char *scheme; /* up to and with "://", matched case-insensitively */
	ReplicantTransport *(*open)(const ReplicantSinkConfig *config);
} TransportEntry;

static const TransportEntry transports[] = {
	{"http://", replicant_http_transport_open},
	{"https://", replicant_http_transport_open},
	{"nats://", replicant_nats_transport_open},
	{"tls://", replicant_nats_transport_open},
};

ReplicantTransport *
replicant_transport_open(const ReplicantSinkConfig *config)
{
	int i;

	for (i = 0; i < lengthof(transports); i++)
	{
		if (pg_strncasecmp(config->url, transports[i].scheme,
						   strlen(transports[i].scheme)) == 0)
			return transports[i].open(config);
	}

	/*
	 * create_pipeline and alter_pipeline accept only these schemes; a URL
	 * that bypassed them goes to HTTP, whose libcurl refuses its scheme.
	 */
	return replicant_http_transport_open(config);
}
