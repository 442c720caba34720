/*
 * signing.h
 *		Standard Webhooks signatures (HMAC-SHA256).
 */
#ifndef REPLICANT_SIGNING_H
#define REPLICANT_SIGNING_H

#include "batch.h"

/*
 * Checks that a signing secret is usable: non-empty, and when it carries the
 * "whsec_" prefix, valid base64 after it.  Raises an error otherwise.
 */
extern void replicant_signing_check_secret(const char *secret);

/*
 * Returns "v1,<base64 HMAC-SHA256 over '<msg_id>.<timestamp>.<body>'>", palloc'd.
 * A secret "whsec_<base64>" signs with the decoded bytes (as Standard Webhooks
 * libraries do); any other secret signs with its own bytes.  Reads the body
 * from its start.  Returns NULL if the body could not be read.
 */
extern char *replicant_signing_signature(const char *secret, const char *msg_id,
										 int64 timestamp, ReplicantBody *body);

#endif /* REPLICANT_SIGNING_H */
