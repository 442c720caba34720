/*
 * transport.h
 *		The way out to a destination, whatever carries it: open one from the
 *		pipeline's configuration, send rendered batches, have each answer
 *		classified (acknowledged, retry, too large, halt), close it.
 *
 * A transport is one file that fills in ReplicantTransportMethods (the HTTP
 * one: sink_http.c) and one line in transport_registry.c.  What every
 * transport keeps: nothing it was sent or answered reaches result->error
 * (fixed, value-free texts); nothing the destination or the network does
 * raises an error (it is an outcome); interrupts are answered only outside
 * the library's frames, and its callbacks never palloc, ereport or
 * CHECK_FOR_INTERRUPTS (docs/internals.md §8).
 */
#ifndef REPLICANT_TRANSPORT_H
#define REPLICANT_TRANSPORT_H

#include "nodes/pg_list.h"

#include "datatype/timestamp.h"

#include "batch.h"

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
	const char *destination;         /* its name; NULL for "default", whose ids are the pipeline's */
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

/* A file descriptor a started request waits on, and for what (WL_SOCKET_*). */
typedef struct ReplicantWaitSource
{
	pgsocket fd;
	uint32 events;
} ReplicantWaitSource;

/* More than any transport waits on for one request. */
#define REPLICANT_MAX_WAIT_SOURCES 16

typedef struct ReplicantTransport ReplicantTransport;

/* What a transport implements; see the functions below for each. */
typedef struct ReplicantTransportMethods
{
	void (*start)(ReplicantTransport *transport, const char *id, ReplicantBody *body);
	void (*pump)(ReplicantTransport *transport);
	int (*wait_sources)(ReplicantTransport *transport, ReplicantWaitSource *sources,
						long *timeout_ms);
	bool (*poll)(ReplicantTransport *transport, ReplicantSinkResult *result);
	void (*cancel)(ReplicantTransport *transport);
	void (*classify_codes)(ReplicantTransport *transport, bool (*code_is_final)(int code));
	void (*close)(ReplicantTransport *transport);
} ReplicantTransportMethods;

/* The head of every transport's own state. */
struct ReplicantTransport
{
	const ReplicantTransportMethods *methods;
};

/*
 * Sends one rendered batch, id being its idempotency key (webhook-id), one
 * request at a time per transport, overlapped with the caller's work:
 * _start() sends what the connection takes without waiting, _pump() (called
 * between the caller's own steps) moves it on without waiting, and _poll()
 * below tells when it is answered.  The body must stay unchanged until then.
 * Whatever the destination or the network did is an outcome in *result,
 * never an error; a half-received acknowledgement is retried, never taken
 * as one.  A caller that leaves by an error between start and the answer
 * calls _cancel() (a no-op when nothing is started), which drops the
 * request and its connection.
 */
extern void replicant_transport_start(ReplicantTransport *transport, const char *id,
									  ReplicantBody *body);
extern void replicant_transport_pump(ReplicantTransport *transport);
extern void replicant_transport_cancel(ReplicantTransport *transport);

/*
 * For a caller that waits on several started requests at once
 * (delivery_set.c): _wait_sources() fills sources (room for
 * REPLICANT_MAX_WAIT_SOURCES) with what the started request waits on and
 * returns how many, setting *timeout_ms to when it must be polled even if
 * none fired (0: at once, -1: no limit).  _poll() does not wait: it moves
 * the request on and returns false while it is not answered, or classifies
 * the answer into *result and returns true (the request is over).  Neither
 * answers interrupts (the caller does, between polls, outside the library),
 * unless a transport's _poll() says otherwise (NATS: it waits for its
 * acknowledgements and answers interrupts outside the library's frames; a
 * latch set meanwhile is set again before it returns).
 */
extern int replicant_transport_wait_sources(ReplicantTransport *transport,
											ReplicantWaitSource *sources, long *timeout_ms);
extern bool replicant_transport_poll(ReplicantTransport *transport, ReplicantSinkResult *result);

/*
 * Classifies the destination's error codes with code_is_final from now on,
 * instead of the config's: a request of another kind may need other rules.
 */
extern void replicant_transport_classify_codes(ReplicantTransport *transport,
											   bool (*code_is_final)(int code));

/* Closes the connections and frees the transport; NULL is a no-op. */
extern void replicant_transport_close(ReplicantTransport *transport);

#endif /* REPLICANT_TRANSPORT_H */
