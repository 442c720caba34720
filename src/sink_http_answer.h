/*
 * sink_http_answer.h
 *		Classifying what an HTTP exchange came to: pure functions, with no
 *		libcurl handle, no ereport and no shared state (test/unit tests them).
 */
#ifndef REPLICANT_SINK_HTTP_ANSWER_H
#define REPLICANT_SINK_HTTP_ANSWER_H

#include <curl/curl.h>
#include <time.h>

#include "transport.h"

/* Longest Retry-After we honour (a sink cannot park us for hours). */
#define REPLICANT_SINK_MAX_RETRY_AFTER_MS (10 * 60 * 1000)

/* What one exchange came to, as libcurl and the transfer callbacks saw it. */
typedef struct ReplicantSinkAnswer
{
	CURLcode code;           /* libcurl's result for the transfer */
	long status;             /* HTTP status, 0 if none */
	bool hard_timeout;       /* our safety deadline ended it */
	bool body_failed;        /* the batch body could not be read */
	bool connected;          /* a connection was made or reused */
	const char *retry_after; /* the last response's Retry-After, or NULL */
	int error_code;          /* the sink's code from a header, or 0 */
	const char *body_start;  /* the answer's first bytes, or "" */
	double elapsed_ms;
} ReplicantSinkAnswer;

/* What the classification goes by besides the answer. */
typedef struct ReplicantSinkAnswerRules
{
	int http_timeout_ms;             /* as configured; 0 means no limit */
	int connect_timeout_ms;          /* as configured; 0 means libcurl's */
	bool (*code_is_final)(int code); /* NULL: the sink names no codes */
} ReplicantSinkAnswerRules;

/*
 * Classifies *answer into *result (all of it), at time now (for an
 * HTTP-date Retry-After).  result->error is value-free: fixed per failure
 * class, never the URL or anything the sink sent.
 */
extern void replicant_sink_answer_classify(const ReplicantSinkAnswer *answer,
										   const ReplicantSinkAnswerRules *rules,
										   time_t now, ReplicantSinkResult *result);

/* The result of a request whose body could not be read to sign it. */
extern void replicant_sink_answer_signing_failed(ReplicantSinkResult *result);

/* The outcome an HTTP status stands for. */
extern ReplicantSinkOutcome replicant_sink_answer_outcome(long status);

/* Retry-After as milliseconds, capped; -1 if unparsable. */
extern int replicant_sink_answer_retry_after_ms(const char *value, time_t now);

/* The fixed text for a libcurl failure; NULL for a timeout and the rest. */
extern const char *replicant_sink_answer_transport_message(CURLcode code);

#endif /* REPLICANT_SINK_HTTP_ANSWER_H */
