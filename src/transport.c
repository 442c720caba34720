/*
 * transport.c
 *		The calls every transport answers, passed to its methods.
 *
 * Which transport a sink URL opens: transport_registry.c.
 */
#include "postgres.h"

#include "transport.h"

void
replicant_transport_start(ReplicantTransport *transport, const char *id, ReplicantBody *body)
{
	transport->methods->start(transport, id, body);
}

void
replicant_transport_pump(ReplicantTransport *transport)
{
	transport->methods->pump(transport);
}

int
replicant_transport_wait_sources(ReplicantTransport *transport, ReplicantWaitSource *sources,
								 long *timeout_ms)
{
	return transport->methods->wait_sources(transport, sources, timeout_ms);
}

bool
replicant_transport_poll(ReplicantTransport *transport, ReplicantSinkResult *result)
{
	return transport->methods->poll(transport, result);
}

void
replicant_transport_cancel(ReplicantTransport *transport)
{
	transport->methods->cancel(transport);
}

void
replicant_transport_classify_codes(ReplicantTransport *transport,
								   bool (*code_is_final)(int code))
{
	transport->methods->classify_codes(transport, code_is_final);
}

void
replicant_transport_close(ReplicantTransport *transport)
{
	if (transport != NULL)
		transport->methods->close(transport);
}
