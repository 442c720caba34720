/*
 * sink_http.h
 *		The HTTP transport: POSTing batches to an HTTP sink with libcurl.
 */
#ifndef REPLICANT_SINK_HTTP_H
#define REPLICANT_SINK_HTTP_H

#include "transport.h"

/*
 * Opens an HTTP sink (one easy handle, kept alive between requests) in
 * CurrentMemoryContext.  Initializes libcurl on the first call in a process;
 * never call it in the postmaster.  Its sends POST with the contract's
 * headers (webhook-id, webhook-timestamp, webhook-signature when a secret is
 * set, the configured headers, User-Agent); an answer with a status line but
 * a broken transfer counts only when the status is not 1xx or 2xx.
 */
extern ReplicantTransport *replicant_http_transport_open(const ReplicantSinkConfig *config);

#endif /* REPLICANT_SINK_HTTP_H */
