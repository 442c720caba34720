/*
 * sink_http_headers.h
 *		An HTTP sink request's headers and its Standard Webhooks signature.
 */
#ifndef REPLICANT_SINK_HTTP_HEADERS_H
#define REPLICANT_SINK_HTTP_HEADERS_H

#include <curl/curl.h>

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "batch.h"

/*
 * Appends the request's headers to *list: Content-Type, User-Agent,
 * webhook-id, webhook-timestamp, "Expect:" (no 100-continue),
 * webhook-signature when signature is not NULL, then the configured names
 * and values (skipping any that would forge or override a line).  False
 * only when libcurl is out of memory; *list holds what was appended.
 */
extern bool replicant_sink_http_headers(struct curl_slist **list, const char *content_type,
										List *names, List *values, const char *webhook_id,
										int64 timestamp, const char *signature);

/*
 * The request's webhook-signature into *signature, in CurrentMemoryContext
 * (NULL when secret is NULL: the sink signs nothing); while
 * secret_previous is valid (until secret_previous_until) it signs too.
 * False when the body could not be read to sign it.
 */
extern bool replicant_sink_http_sign(const char *secret, const char *secret_previous,
									 TimestampTz secret_previous_until, const char *webhook_id,
									 int64 timestamp, ReplicantBody *body, char **signature);

#endif /* REPLICANT_SINK_HTTP_HEADERS_H */
