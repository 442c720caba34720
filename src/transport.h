/*
 * transport.h
 *		What every way out takes and answers: the destination's configuration,
 *		and the answer to one rendered batch, classified.
 */
#ifndef REPLICANT_TRANSPORT_H
#define REPLICANT_TRANSPORT_H

#include "nodes/pg_list.h"

#include "datatype/timestamp.h"

/*
 * The transport copies everything it keeps, so the config need not outlive
 * the call that opens it.
 */
typedef struct ReplicantSinkConfig
{
	const char *url;             /* http:// or https://; may hold credentials */
	int http_timeout_ms;         /* whole request; 0 means no limit */
	int connect_timeout_ms;      /* 0 means libcurl's default (300 s) */
	List *header_names;          /* of char *, already validated */
	List *header_values;         /* of char *, same length */
	const char *secret;          /* NULL: no webhook-signature */
	const char *secret_previous; /* also signs, until secret_previous_until */
	TimestampTz secret_previous_until;
	const char *ca_file;             /* PEM CA bundle; NULL: the system CAs */
	const char *content_type;        /* of every body, as the format says */
	bool (*code_is_final)(int code); /* as the format says, or NULL */
} ReplicantSinkConfig;

typedef enum ReplicantSinkOutcome
{
	REPLICANT_SINK_OK,        /* 2xx: the sink durably took the batch */
	REPLICANT_SINK_RETRY,     /* 408, 425, 429, 5xx, refused, reset, timeout */
	REPLICANT_SINK_TOO_LARGE, /* 413 */
	REPLICANT_SINK_GONE,      /* 410 */
	REPLICANT_SINK_REJECTED   /* any other answer: halt fail-closed */
} ReplicantSinkOutcome;

typedef struct ReplicantSinkResult
{
	ReplicantSinkOutcome outcome;
	long http_status;   /* 0 when there was no HTTP answer */
	int retry_after_ms; /* from Retry-After, or -1 */
	double elapsed_ms;  /* wall time of the HTTP exchange */
	int error_code;     /* the sink's own error code, or 0 */
	bool refused;       /* nothing accepted the connection (no sink listens) */
	char error[128];    /* value-free: "HTTP 503", "could not connect
								 * to sink"; empty on REPLICANT_SINK_OK */
} ReplicantSinkResult;

#endif /* REPLICANT_TRANSPORT_H */
