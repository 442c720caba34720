/*
 * sink_http_answer.c
 *		Classifying what an HTTP exchange came to: status to outcome,
 *		Retry-After, the fixed texts of transport errors, a sink's own error
 *		codes.
 *
 * Pure functions: no libcurl handle, no ereport, no palloc, no shared
 * state, so test/unit/sink_http_answer_test.c runs them without a server.
 * Nothing that came from the sink (its body, headers other than Retry-After
 * and the error code) and nothing from libcurl's error buffer (it can quote
 * the URL, which can hold credentials) reaches result->error: that text is
 * fixed per failure class.
 *
 * Rules kept with other files: docs/internals.md §8 (errors: halt or retry).
 */
#include "postgres.h"

#include "sink_http_answer.h"

ReplicantSinkOutcome
replicant_sink_answer_outcome(long status)
{
	if (status >= 200 && status <= 299)
		return REPLICANT_SINK_OK;
	if (status == 408 || status == 425 || status == 429 ||
		(status >= 500 && status <= 599))
		return REPLICANT_SINK_RETRY;
	if (status == 413)
		return REPLICANT_SINK_TOO_LARGE;
	if (status == 410)
		return REPLICANT_SINK_GONE;
	return REPLICANT_SINK_REJECTED;
}

int
replicant_sink_answer_retry_after_ms(const char *value, time_t now)
{
	int64 seconds = 0;
	const char *p;

	if (value[0] >= '0' && value[0] <= '9')
	{
		/* delta-seconds */
		for (p = value; *p >= '0' && *p <= '9'; p++)
		{
			seconds = seconds * 10 + (*p - '0');
			if (seconds > REPLICANT_SINK_MAX_RETRY_AFTER_MS / 1000)
				return REPLICANT_SINK_MAX_RETRY_AFTER_MS;
		}
		if (*p != '\0')
			return -1;
	}
	else
	{
		/* HTTP-date */
		time_t when = curl_getdate(value, NULL);

		if (when == (time_t) -1)
			return -1;
		seconds = (int64) when - (int64) now;
		if (seconds < 0)
			seconds = 0;
	}
	return (int) Min(seconds * 1000, (int64) REPLICANT_SINK_MAX_RETRY_AFTER_MS);
}

const char *
replicant_sink_answer_transport_message(CURLcode code)
{
	switch (code)
	{
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_COULDNT_RESOLVE_PROXY:
			return "could not resolve sink host name";
		case CURLE_COULDNT_CONNECT:
			return "could not connect to sink";
		case CURLE_SEND_ERROR:
		case CURLE_RECV_ERROR:
			return "connection to sink was reset";
		case CURLE_GOT_NOTHING:
			return "sink closed the connection without answering";
		case CURLE_PARTIAL_FILE:
			return "sink closed the connection during its answer";
		case CURLE_WEIRD_SERVER_REPLY:
		case CURLE_HTTP2:
		case CURLE_HTTP2_STREAM:
			return "sink sent an invalid HTTP answer";
		case CURLE_PEER_FAILED_VERIFICATION:
			return "could not verify the sink's TLS certificate";
		case CURLE_SSL_CACERT_BADFILE:
			return "could not load the CA file for the sink";
		case CURLE_SSL_CONNECT_ERROR:
		case CURLE_SSL_CERTPROBLEM:
		case CURLE_SSL_CIPHER:
		case CURLE_SSL_ENGINE_NOTFOUND:
		case CURLE_SSL_ENGINE_SETFAILED:
		case CURLE_SSL_ISSUER_ERROR:
		case CURLE_SSL_CRL_BADFILE:
			return "could not establish a TLS connection to sink";
		case CURLE_SEND_FAIL_REWIND:
			return "could not rewind batch body";
		case CURLE_READ_ERROR:
			return "could not read batch body";
		case CURLE_URL_MALFORMAT:
			return "sink URL is not valid";
		case CURLE_UNSUPPORTED_PROTOCOL:
			return "sink URL scheme is not allowed";
		case CURLE_OUT_OF_MEMORY:
			return "out of memory while sending batch";
		default:
			return NULL;
	}
}

/*
 * A timed-out request: where libcurl can tell that no connection was made,
 * the connection timed out, else the answer did.
 */
static void
timeout_error(const ReplicantSinkAnswer *answer,
			  const ReplicantSinkAnswerRules *rules, ReplicantSinkResult *result)
{
#if LIBCURL_VERSION_NUM >= 0x075000
	if (!answer->connected && !answer->hard_timeout)
	{
		int limit = rules->connect_timeout_ms;

		if (limit == 0 ||
			(rules->http_timeout_ms > 0 && rules->http_timeout_ms < limit))
			limit = rules->http_timeout_ms;
		if (limit > 0)
		{
			snprintf(result->error, sizeof(result->error),
					 "could not connect to sink within %d ms", limit);
			return;
		}
	}
#endif
	snprintf(result->error, sizeof(result->error),
			 "sink did not answer within %d ms",
			 rules->http_timeout_ms);
}

/*
 * A sink that names its errors by code (ClickHouse: the header, or "Code: N"
 * opening the body of older servers' 500s) is classified by the code: a
 * final one halts, any other is retried, whatever the status.
 */
static void
classify_code(const ReplicantSinkAnswer *answer,
			  const ReplicantSinkAnswerRules *rules, ReplicantSinkResult *result)
{
	int code = answer->error_code;

	if (rules->code_is_final == NULL)
		return;
	if (code == 0 && strncmp(answer->body_start, "Code: ", 6) == 0)
		code = atoi(answer->body_start + 6);
	if (code <= 0)
		return;
	result->error_code = code;
	if (rules->code_is_final(code))
		result->outcome = REPLICANT_SINK_REJECTED;
	else if (result->outcome != REPLICANT_SINK_TOO_LARGE)
		result->outcome = REPLICANT_SINK_RETRY;
	snprintf(result->error, sizeof(result->error), "HTTP %ld, error code %d",
			 result->http_status, code);
}

/* No usable HTTP answer: always retried, with a fixed, value-free text. */
static void
transport_error(const ReplicantSinkAnswer *answer, CURLcode code,
				const ReplicantSinkAnswerRules *rules, ReplicantSinkResult *result)
{
	const char *msg;

	result->outcome = REPLICANT_SINK_RETRY;
	result->http_status = 0;
	result->refused = (code == CURLE_COULDNT_CONNECT);

	if (answer->body_failed)
		msg = "could not read batch body";
	else if (code == CURLE_OPERATION_TIMEDOUT)
	{
		timeout_error(answer, rules, result);
		return;
	}
	else if ((msg = replicant_sink_answer_transport_message(code)) == NULL)
	{
		/* the code is value-free; libcurl's error text may not be */
		snprintf(result->error, sizeof(result->error),
				 "could not send batch to sink (libcurl error %d)",
				 (int) code);
		return;
	}
	strlcpy(result->error, msg, sizeof(result->error));
}

static void
result_init(ReplicantSinkResult *result)
{
	memset(result, 0, sizeof(*result));
	result->retry_after_ms = -1;
}

void
replicant_sink_answer_signing_failed(ReplicantSinkResult *result)
{
	result_init(result);
	result->outcome = REPLICANT_SINK_RETRY;
	strlcpy(result->error, "could not read batch body", sizeof(result->error));
}

void
replicant_sink_answer_classify(const ReplicantSinkAnswer *answer,
							   const ReplicantSinkAnswerRules *rules, time_t now,
							   ReplicantSinkResult *result)
{
	result_init(result);
	result->elapsed_ms = answer->elapsed_ms;

	/*
	 * A status counts if the transfer completed, or if the sink said no
	 * before it broke (e.g. a 413 sent before reading the whole body).  A
	 * half-received 1xx or 2xx is not an acknowledgement: retry.
	 */
	if (answer->code == CURLE_OK ? answer->status >= 100 : answer->status >= 300)
	{
		result->http_status = answer->status;
		result->outcome = replicant_sink_answer_outcome(answer->status);
		if (result->outcome != REPLICANT_SINK_OK)
			snprintf(result->error, sizeof(result->error), "HTTP %ld",
					 answer->status);
		if (answer->retry_after != NULL)
			result->retry_after_ms =
				replicant_sink_answer_retry_after_ms(answer->retry_after, now);
		if (result->outcome != REPLICANT_SINK_OK)
			classify_code(answer, rules, result);
	}
	else
	{
		/* a completed transfer without a status line: not HTTP as we know it */
		transport_error(answer,
						answer->code == CURLE_OK ? CURLE_WEIRD_SERVER_REPLY : answer->code,
						rules, result);
	}
}
