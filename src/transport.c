/*
 * transport.c
 *		The calls every transport answers, passed to its methods.
 *
 * Which transport a sink URL opens: transport_registry.c.
 */
#include "postgres.h"

#include "transport.h"

void
replicant_transport_send(ReplicantTransport *transport, const char *id,
						 ReplicantBody *body, ReplicantSinkResult *result)
{
	transport->methods->send(transport, id, body, result);
}

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

void
replicant_transport_finish(ReplicantTransport *transport, ReplicantSinkResult *result)
{
	transport->methods->finish(transport, result);
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
