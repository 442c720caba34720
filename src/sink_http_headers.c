/*
 * sink_http_headers.c
 *		An HTTP sink request's headers: the contract's (webhook-id,
 *		webhook-timestamp, webhook-signature), the configured ones.
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "headers.h"
#include "replicant.h"
#include "signing.h"
#include "sink_http_headers.h"

/*
 * Appends "name: value".  An empty value is written "name;", libcurl's way
 * to send an empty header ("name:" would remove it).  Returns false only
 * when libcurl is out of memory.
 */
static bool
sink_append_header(struct curl_slist **list, StringInfo buf,
				   const char *name, const char *value)
{
	struct curl_slist *l;

	resetStringInfo(buf);
	if (value[0] == '\0')
		appendStringInfo(buf, "%s;", name);
	else
		appendStringInfo(buf, "%s: %s", name, value);
	l = curl_slist_append(*list, buf->data);
	if (l == NULL)
		return false;
	*list = l;
	return true;
}

bool
replicant_sink_http_headers(struct curl_slist **list, const char *content_type,
							List *names, List *values, const char *webhook_id,
							int64 timestamp, const char *signature)
{
	StringInfoData buf;
	char ts[32];
	bool ok;
	ListCell *lc1,
		*lc2;

	initStringInfo(&buf);
	snprintf(ts, sizeof(ts), INT64_FORMAT, timestamp);

	ok = sink_append_header(list, &buf, "Content-Type",
							content_type) &&
		 sink_append_header(list, &buf, "User-Agent",
							"replicant/" REPLICANT_VERSION) &&
		 sink_append_header(list, &buf, "webhook-id", webhook_id) &&
		 sink_append_header(list, &buf, "webhook-timestamp", ts);

	/* "Expect:" removes libcurl's 100-continue: one round trip less */
	if (ok)
	{
		struct curl_slist *l = curl_slist_append(*list, "Expect:");

		ok = (l != NULL);
		if (ok)
			*list = l;
	}
	if (ok && signature != NULL)
		ok = sink_append_header(list, &buf, "webhook-signature",
								signature);

	forboth(lc1, names, lc2, values)
	{
		const char *name = lfirst(lc1);
		const char *value = lfirst(lc2);

		if (!ok)
			break;
		/* validated when configured; still never forge or override a line */
		if (!replicant_header_name_ok(name) || !replicant_header_value_ok(value) ||
			replicant_header_reserved(name) != NULL)
			continue;
		ok = sink_append_header(list, &buf, name, value);
	}

	pfree(buf.data);
	return ok;
}

bool
replicant_sink_http_sign(const char *secret, const char *secret_previous,
						 TimestampTz secret_previous_until, const char *webhook_id,
						 int64 timestamp, ReplicantBody *body, char **signature)
{
	/* the id is ours, not the sink's: a CR or LF in it is a bug */
	if (!replicant_header_value_ok(webhook_id))
		elog(ERROR, "invalid webhook id");

	*signature = NULL;
	if (secret == NULL)
		return true;
	*signature = replicant_signing_signature(secret, webhook_id, timestamp, body);

	/*
	 * While a rotated-out secret is still valid, sign with both, space
	 * separated, as Standard Webhooks allows.
	 */
	if (*signature != NULL && secret_previous != NULL &&
		GetCurrentTimestamp() < secret_previous_until)
	{
		char *previous = replicant_signing_signature(secret_previous,
													 webhook_id, timestamp, body);

		*signature = previous ? psprintf("%s %s", *signature, previous) : NULL;
	}
	return *signature != NULL;
}
