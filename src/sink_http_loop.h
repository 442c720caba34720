/*
 * sink_http_loop.h
 *		Driving libcurl's multi interface from our own wait loop: a
 *		WaitEventSet over the process latch, postmaster death and the sockets
 *		libcurl asks for.
 */
#ifndef REPLICANT_SINK_HTTP_LOOP_H
#define REPLICANT_SINK_HTTP_LOOP_H

#include <curl/curl.h>
#include <sys/types.h>

#include "portability/instr_time.h"
#include "storage/latch.h"

#include "transport.h"

/*
 * One easy handle uses one or two sockets (two while happy eyeballs races
 * IPv4 and IPv6), plus the resolver's wakeup pipe; this is ample.
 */
#define SINK_MAX_SOCKETS 16

typedef struct SinkSocket
{
	curl_socket_t fd;
	int what; /* CURL_POLL_IN, _OUT or _INOUT */
} SinkSocket;

/* A socket in the kept WaitEventSet. */
typedef struct SinkWatched
{
	curl_socket_t fd;
	dev_t dev; /* which file the number was: numbers are reused */
	ino_t ino;
	uint32 events;
	int pos; /* in the WaitEventSet */
} SinkWatched;

/* What one attempt came to, before classification. */
typedef struct SinkAttempt
{
	CURLcode code;      /* libcurl's result for the transfer */
	long status;        /* HTTP status, 0 if none */
	bool hard_timeout;  /* our safety deadline ended it */
	bool latch_was_set; /* we reset the latch while waiting */
	double elapsed_ms;
} SinkAttempt;

/* The multi handle, its one easy handle, and what the loop watches. */
typedef struct ReplicantSinkLoop
{
	CURLM *multi; /* owns the connection cache: keep-alive */
	CURL *easy;

	/* set by the socket and timer callbacks */
	SinkSocket sockets[SINK_MAX_SOCKETS];
	int nsockets;
	bool socket_overflow;
	bool timer_armed;
	long timer_ms;
	instr_time timer_set_at;

	/*
	 * The set we wait on, kept across waits and requests while it watches
	 * the same sockets (one epoll set less per wait); freed on error exits.
	 */
	MemoryContext context; /* where the set is made */
	WaitEventSet *wes;
	SinkWatched watched[SINK_MAX_SOCKETS];
	int nwatched;
} ReplicantSinkLoop;

/*
 * libcurl's CURLMOPT_SOCKETFUNCTION and CURLMOPT_TIMERFUNCTION, with the
 * loop as their data.  Like every libcurl callback they only record: no
 * palloc, no ereport, no CHECK_FOR_INTERRUPTS.
 */
extern int replicant_sink_loop_socket_cb(CURL *easy, curl_socket_t fd, int what,
										 void *userp, void *socketp);
extern int replicant_sink_loop_timer_cb(CURLM *multi, long timeout_ms, void *userp);

/*
 * One round without waiting: hands libcurl what its sockets and its timer
 * have for it.  Sets *running to 0 once the transfer is over; notes in
 * attempt a latch it reset.  Answers no interrupts.
 */
extern CURLMcode replicant_sink_loop_pump(ReplicantSinkLoop *loop, SinkAttempt *attempt,
										  int *running);

/*
 * What the attached transfer waits on (see replicant_transport_wait_sources):
 * the sockets libcurl asks for, and its timer (bounded, so that the safety
 * deadline is checked).
 */
extern int replicant_sink_loop_wait_sources(ReplicantSinkLoop *loop, ReplicantWaitSource *sources,
											long *timeout_ms);

/*
 * One round of the attached transfer without waiting, for a caller that
 * waits on its sources itself: returns false while it runs, or sets
 * attempt's code and status and returns true once it is over or the safety
 * deadline (http_timeout_ms after started_at, and some) passed.  Answers no
 * interrupts.
 */
extern bool replicant_sink_loop_poll(ReplicantSinkLoop *loop, int http_timeout_ms,
									 size_t body_length, instr_time started_at,
									 SinkAttempt *attempt);

/* What the transfer came to, once the rounds are over. */
extern CURLcode replicant_sink_loop_result_code(ReplicantSinkLoop *loop, CURLMcode mc,
												bool hard_timeout);

/* Forgets the kept wait set (nothing half-watched after an error). */
extern void replicant_sink_loop_free_wait_set(ReplicantSinkLoop *loop);

#endif /* REPLICANT_SINK_HTTP_LOOP_H */
