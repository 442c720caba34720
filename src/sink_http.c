/*
 * sink_http.c
 *		POSTing batches to an HTTP sink with libcurl: the handle, the
 *		request's setup (headers, signature, body) and its transfer
 *		callbacks.
 *
 * sink_http_loop.c drives the transfer from our own wait loop, outside
 * libcurl frames; sink_http_answer.c classifies what it came to.  The
 * libcurl callbacks below only copy data and set flags: they never palloc,
 * ereport or CHECK_FOR_INTERRUPTS, since a longjmp across libcurl would
 * leave it in an undefined state.
 *
 * Nothing that came from the sink (body, headers other than Retry-After) and
 * nothing from libcurl's error buffer (it can quote the URL, which can hold
 * credentials) reaches result->error: that text is fixed per failure class.
 *
 * Rules kept with other files: docs/internals.md §8 (errors: halt or retry).
 */
#include "postgres.h"

#include <curl/curl.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "portability/instr_time.h"
#include "storage/latch.h"

#include "sink_http.h"
#include "sink_http_answer.h"
#include "sink_http_headers.h"
#include "sink_http_loop.h"

/* Room for a Retry-After value, either delta-seconds or an HTTP-date. */
#define SINK_RETRY_AFTER_LEN 64
#define SINK_BODY_START_LEN 24

/*
 * A body up to this size is handed to libcurl whole, so that it leaves in
 * the same send as the headers: one segment and one wakeup of the sink
 * instead of two.  Larger ones stream through sink_read_cb.
 */
#define SINK_INLINE_BODY_MAX (16 * 1024)

/*
 * What libcurl reads of a larger body per send (its largest; 64 kB by
 * default): an 8 MB batch leaves in a few sends instead of 128, each of
 * which woke the sink.
 */
#define SINK_UPLOAD_BUFFER (2 * 1024 * 1024)

/*
 * libcurl mallocs that buffer when a body starts and frees it when the
 * transfer ends.  Under glibc's defaults the free hands the pages back to
 * the kernel (the heap is trimmed past 2x the largest block it gave back),
 * so the next request page-faults on every 4 kB it copies in: with 8
 * destinations, a third of the worker's time (bench/RESULTS.md, scenario
 * 9).  Blocks below SINK_HEAP_BLOCK_MAX come from the heap, and up to
 * SINK_HEAP_KEPT of free heap is kept, enough for the upload buffers of a
 * pipeline's 16 destinations: the next requests reuse the same pages.
 */
#define SINK_HEAP_BLOCK_MAX (2 * SINK_UPLOAD_BUFFER)
#define SINK_HEAP_KEPT (20 * SINK_UPLOAD_BUFFER)

/* A request started by http_start() and not finished yet: one at a time. */
typedef struct SinkStarted
{
	bool active;
	bool signing_failed; /* never sent: the body could not be read */
	bool transfer_over;  /* libcurl finished it while pumped */
	SinkAttempt attempt;
	CURLMcode pump_error; /* what stopped pumping it */
	instr_time started_at;
} SinkStarted;

typedef struct HttpSink
{
	ReplicantTransport transport; /* first: an HttpSink is a ReplicantTransport */

	ReplicantSinkLoop loop; /* the multi and easy handles, what they watch */
	bool attached;          /* the easy handle is in the multi handle */

	/* our copy of the configuration */
	char *url;
	int http_timeout_ms;
	int connect_timeout_ms;
	List *header_names;
	List *header_values;
	char *secret;
	char *secret_previous;
	TimestampTz secret_previous_until;
	char *ca_file;
	char *content_type;
	bool (*code_is_final)(int code);

	/* per-request state, set by the transfer callbacks */
	ReplicantBody *body;
	size_t body_sent;
	bool body_failed;
	bool connected; /* a connection was made or reused */
	bool retry_after_seen;
	char retry_after[SINK_RETRY_AFTER_LEN];
	int error_code;                       /* the sink's own, from a header; 0 if none */
	char body_start[SINK_BODY_START_LEN]; /* only to read "Code: N" */
	size_t body_start_len;

	MemoryContext context; /* the sink's, for inline_body */
	char *inline_body;     /* SINK_INLINE_BODY_MAX bytes, made when first needed */

	/* freed on error exits */
	struct curl_slist *headers;

	SinkStarted started; /* from http_start() until it is answered */
} HttpSink;


static bool curl_initialized = false;

static size_t sink_read_cb(char *buffer, size_t size, size_t nitems,
						   void *userdata);
static int sink_seek_cb(void *userdata, curl_off_t offset, int origin);
static size_t sink_write_cb(char *ptr, size_t size, size_t nmemb,
							void *userdata);
static size_t sink_header_cb(char *buffer, size_t size, size_t nitems,
							 void *userdata);
#if LIBCURL_VERSION_NUM >= 0x075000
static int sink_prereq_cb(void *clientp, char *conn_primary_ip,
						  char *conn_local_ip, int conn_primary_port,
						  int conn_local_port);
#endif
static void http_start(ReplicantTransport *transport, const char *webhook_id,
					   ReplicantBody *body);
static void http_pump(ReplicantTransport *transport);
static void http_cancel(ReplicantTransport *transport);
static int http_wait_sources(ReplicantTransport *transport, ReplicantWaitSource *sources,
							 long *timeout_ms);
static bool http_poll(ReplicantTransport *transport, ReplicantSinkResult *result);
static void http_classify_codes(ReplicantTransport *transport,
								bool (*code_is_final)(int code));
static void http_close(ReplicantTransport *transport);

static const ReplicantTransportMethods http_methods = {
	.start = http_start,
	.pump = http_pump,
	.wait_sources = http_wait_sources,
	.poll = http_poll,
	.cancel = http_cancel,
	.classify_codes = http_classify_codes,
	.close = http_close,
};

static void sink_setopt_failed(const char *option, CURLcode code);
static void sink_cancel(HttpSink *sink);
static void sink_answer_started(HttpSink *sink, ReplicantSinkResult *result);
static void sink_configure(HttpSink *sink);

/* ---- libcurl callbacks: no palloc, no ereport, no CHECK_FOR_INTERRUPTS ---- */

/*
 * Streams the body into the request, never past body->length: libcurl sent
 * that length as Content-Length.  A body that ends early or fails to read
 * aborts the transfer rather than leave the sink waiting for the rest.
 */
static size_t
sink_read_cb(char *buffer, size_t size, size_t nitems, void *userdata)
{
	HttpSink *sink = (HttpSink *) userdata;
	ReplicantBody *body = sink->body;
	size_t max = size * nitems;
	size_t got;

	if (sink->body_sent >= body->length)
		return 0;
	if (max > body->length - sink->body_sent)
		max = body->length - sink->body_sent;

	got = body->read(body->arg, buffer, max);
	if (got == (size_t) -1 || got == 0 || got > max)
	{
		sink->body_failed = true;
		return CURL_READFUNC_ABORT;
	}
	sink->body_sent += got;
	return got;
}

/*
 * libcurl rewinds the body when it resends the request on a fresh connection
 * (a kept-alive one the sink had closed); without this it would fail.
 */
static int
sink_seek_cb(void *userdata, curl_off_t offset, int origin)
{
	HttpSink *sink = (HttpSink *) userdata;

	if (origin != SEEK_SET || offset != 0)
		return CURL_SEEKFUNC_CANTSEEK;
	sink->body->rewind(sink->body->arg);
	sink->body_sent = 0;
	return CURL_SEEKFUNC_OK;
}

/*
 * The response body is never kept: it may quote the data we sent.  Only
 * its first bytes are looked at, for an error code ("Code: 27, ...").
 */
static size_t
sink_write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	HttpSink *sink = (HttpSink *) userdata;
	size_t n = Min(size * nmemb, SINK_BODY_START_LEN - 1 - sink->body_start_len);

	if (sink->code_is_final != NULL)
	{
		memcpy(sink->body_start + sink->body_start_len, ptr, n);
		sink->body_start_len += n;
		sink->body_start[sink->body_start_len] = '\0';
	}
	return size * nmemb;
}

/*
 * Keeps the Retry-After value of the last response.  Lines arrive one by
 * one, not NUL-terminated; a status line starts a new response (a 1xx may
 * come first).
 */
static size_t
sink_header_cb(char *buffer, size_t size, size_t nitems, void *userdata)
{
	HttpSink *sink = (HttpSink *) userdata;
	size_t len = size * nitems;
	static const char name[] = "retry-after:";
	size_t namelen = sizeof(name) - 1;
	static const char code_name[] = "x-clickhouse-exception-code:";
	size_t codelen = sizeof(code_name) - 1;

	if (len >= 5 && strncmp(buffer, "HTTP/", 5) == 0)
	{
		sink->retry_after_seen = false;
		sink->error_code = 0;
		sink->body_start_len = 0;
	}
	else if (len > codelen && pg_strncasecmp(buffer, code_name, codelen) == 0)
	{
		char digits[16];
		size_t n = Min(len - codelen, sizeof(digits) - 1);

		memcpy(digits, buffer + codelen, n);
		digits[n] = '\0';
		sink->error_code = atoi(digits);
	}
	else if (len > namelen && pg_strncasecmp(buffer, name, namelen) == 0)
	{
		const char *p = buffer + namelen;
		const char *end = buffer + len;

		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		while (end > p && (end[-1] == '\r' || end[-1] == '\n' ||
						   end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if (end - p < SINK_RETRY_AFTER_LEN)
		{
			memcpy(sink->retry_after, p, end - p);
			sink->retry_after[end - p] = '\0';
			sink->retry_after_seen = true;
		}
	}
	return len;
}

#if LIBCURL_VERSION_NUM >= 0x075000
/* Called once a connection is made or reused, before the request is sent. */
static int
sink_prereq_cb(void *clientp, char *conn_primary_ip, char *conn_local_ip,
			   int conn_primary_port, int conn_local_port)
{
	HttpSink *sink = (HttpSink *) clientp;

	sink->connected = true;
	return CURL_PREREQFUNC_OK;
}
#endif

/* ---- setup ---- */

static void
sink_setopt_failed(const char *option, CURLcode code)
{
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("could not configure HTTP sink"),
			 errdetail_internal("%s: %s", option, curl_easy_strerror(code))));
}

#define SINK_SETOPT(easy, option, value) \
	do \
	{ \
		CURLcode rc_ = curl_easy_setopt((easy), option, (value)); \
		if (rc_ != CURLE_OK) \
			sink_setopt_failed(#option, rc_); \
	} while (0)

#define SINK_MULTI_SETOPT(multi, option, value) \
	do \
	{ \
		if (curl_multi_setopt((multi), option, (value)) != CURLM_OK) \
			sink_setopt_failed(#option, CURLE_FAILED_INIT); \
	} while (0)

/* Options that stay the same for every request of this sink. */
static void
sink_configure(HttpSink *sink)
{
	CURL *easy = sink->loop.easy;

	SINK_MULTI_SETOPT(sink->loop.multi, CURLMOPT_SOCKETFUNCTION, replicant_sink_loop_socket_cb);
	SINK_MULTI_SETOPT(sink->loop.multi, CURLMOPT_SOCKETDATA, &sink->loop);
	SINK_MULTI_SETOPT(sink->loop.multi, CURLMOPT_TIMERFUNCTION, replicant_sink_loop_timer_cb);
	SINK_MULTI_SETOPT(sink->loop.multi, CURLMOPT_TIMERDATA, &sink->loop);

	SINK_SETOPT(easy, CURLOPT_URL, sink->url);
	/* bgworkers own SIGALRM; libcurl must not touch signals */
	SINK_SETOPT(easy, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
	SINK_SETOPT(easy, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	SINK_SETOPT(easy, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	/* a redirect is an answer like any other non-2xx: it halts */
	SINK_SETOPT(easy, CURLOPT_FOLLOWLOCATION, 0L);
	SINK_SETOPT(easy, CURLOPT_SSL_VERIFYPEER, 1L);
	SINK_SETOPT(easy, CURLOPT_SSL_VERIFYHOST, 2L);
	if (sink->ca_file != NULL)
		SINK_SETOPT(easy, CURLOPT_CAINFO, sink->ca_file);
	SINK_SETOPT(easy, CURLOPT_CONNECTTIMEOUT_MS, (long) sink->connect_timeout_ms);
	SINK_SETOPT(easy, CURLOPT_TIMEOUT_MS, (long) sink->http_timeout_ms);
	SINK_SETOPT(easy, CURLOPT_TCP_NODELAY, 1L);
	SINK_SETOPT(easy, CURLOPT_TCP_KEEPALIVE, 1L);

	SINK_SETOPT(easy, CURLOPT_POST, 1L);
	SINK_SETOPT(easy, CURLOPT_READFUNCTION, sink_read_cb);
	SINK_SETOPT(easy, CURLOPT_READDATA, sink);
#if LIBCURL_VERSION_NUM >= 0x073e00
	SINK_SETOPT(easy, CURLOPT_UPLOAD_BUFFERSIZE, (long) SINK_UPLOAD_BUFFER);
#endif
	SINK_SETOPT(easy, CURLOPT_SEEKFUNCTION, sink_seek_cb);
	SINK_SETOPT(easy, CURLOPT_SEEKDATA, sink);
	SINK_SETOPT(easy, CURLOPT_WRITEFUNCTION, sink_write_cb);
	SINK_SETOPT(easy, CURLOPT_WRITEDATA, sink);
	SINK_SETOPT(easy, CURLOPT_HEADERFUNCTION, sink_header_cb);
	SINK_SETOPT(easy, CURLOPT_HEADERDATA, sink);
#if LIBCURL_VERSION_NUM >= 0x075000
	SINK_SETOPT(easy, CURLOPT_PREREQFUNCTION, sink_prereq_cb);
	SINK_SETOPT(easy, CURLOPT_PREREQDATA, sink);
#endif
}

ReplicantTransport *
replicant_http_transport_open(const ReplicantSinkConfig *config)
{
	HttpSink *sink;
	ListCell *lc1,
		*lc2;

	/* libcurl's global state belongs to this process, never the postmaster */
	if (IsPostmasterEnvironment && !IsUnderPostmaster)
		elog(ERROR, "HTTP sinks cannot be created in the postmaster");
	if (!curl_initialized)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			ereport(ERROR,
					(errcode(ERRCODE_SYSTEM_ERROR),
					 errmsg("could not initialize libcurl")));
		curl_initialized = true;
#ifdef __GLIBC__
		mallopt(M_MMAP_THRESHOLD, SINK_HEAP_BLOCK_MAX);
		mallopt(M_TRIM_THRESHOLD, SINK_HEAP_KEPT);
#endif
	}

	if (list_length(config->header_names) != list_length(config->header_values))
		elog(ERROR, "sink header names and values differ in number");

	sink = palloc0(sizeof(HttpSink));
	sink->transport.methods = &http_methods;
	sink->context = CurrentMemoryContext;
	sink->loop.context = CurrentMemoryContext;
	sink->url = pstrdup(config->url);
	sink->http_timeout_ms = Max(config->http_timeout_ms, 0);
	sink->connect_timeout_ms = Max(config->connect_timeout_ms, 0);
	forboth(lc1, config->header_names, lc2, config->header_values)
	{
		sink->header_names = lappend(sink->header_names, pstrdup(lfirst(lc1)));
		sink->header_values = lappend(sink->header_values, pstrdup(lfirst(lc2)));
	}
	sink->secret = config->secret ? pstrdup(config->secret) : NULL;
	sink->secret_previous = config->secret_previous ? pstrdup(config->secret_previous) : NULL;
	sink->secret_previous_until = config->secret_previous_until;
	sink->ca_file = config->ca_file ? pstrdup(config->ca_file) : NULL;
	sink->content_type = pstrdup(config->content_type);
	sink->code_is_final = config->code_is_final;

	PG_TRY();
	{
		sink->loop.multi = curl_multi_init();
		sink->loop.easy = curl_easy_init();
		if (sink->loop.multi == NULL || sink->loop.easy == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory"),
					 errdetail("Could not create a libcurl handle.")));
		sink_configure(sink);
	}
	PG_CATCH();
	{
		http_close(&sink->transport);
		PG_RE_THROW();
	}
	PG_END_TRY();

	return &sink->transport;
}

static void
http_classify_codes(ReplicantTransport *transport, bool (*code_is_final)(int code))
{
	HttpSink *sink = (HttpSink *) transport;

	sink->code_is_final = code_is_final;
}

static void
http_close(ReplicantTransport *transport)
{
	HttpSink *sink = (HttpSink *) transport;

	replicant_sink_loop_free_wait_set(&sink->loop);
	if (sink->attached)
		curl_multi_remove_handle(sink->loop.multi, sink->loop.easy);
	if (sink->loop.easy != NULL)
		curl_easy_cleanup(sink->loop.easy);
	/* closes cached connections; may still call the socket callback */
	if (sink->loop.multi != NULL)
		curl_multi_cleanup(sink->loop.multi);
	curl_slist_free_all(sink->headers);

	if (sink->secret_previous != NULL)
	{
		explicit_bzero(sink->secret_previous, strlen(sink->secret_previous));
		pfree(sink->secret_previous);
	}
	if (sink->secret != NULL)
	{
		explicit_bzero(sink->secret, strlen(sink->secret));
		pfree(sink->secret);
	}
	list_free_deep(sink->header_names);
	list_free_deep(sink->header_values);
	pfree(sink->url);
	if (sink->ca_file != NULL)
		pfree(sink->ca_file);
	pfree(sink->content_type);
	pfree(sink);
}

/* ---- the request ---- */

/*
 * Tells libcurl where the body comes from: memory for a small one (read
 * here, outside libcurl), else sink_read_cb.  False if it could not be read.
 */
static bool
sink_set_body(HttpSink *sink, ReplicantBody *body)
{
	char *inline_data = NULL;

	if (body->length <= SINK_INLINE_BODY_MAX)
	{
		size_t done = 0;

		if (sink->inline_body == NULL)
			sink->inline_body = MemoryContextAlloc(sink->context,
												   SINK_INLINE_BODY_MAX);
		while (done < body->length)
		{
			size_t got = body->read(body->arg, sink->inline_body + done,
									body->length - done);

			if (got == (size_t) -1 || got == 0 || got > body->length - done)
			{
				sink->body_failed = true;
				return false;
			}
			done += got;
		}
		inline_data = sink->inline_body;
	}
	return curl_easy_setopt(sink->loop.easy, CURLOPT_POSTFIELDS, inline_data) == CURLE_OK;
}

/*
 * Resets the per-request state and attaches the easy handle with this
 * request's headers.  False, with attempt->code saying why, when libcurl
 * could not take the request.
 */
static bool
sink_attach(HttpSink *sink, const char *webhook_id, int64 timestamp,
			const char *signature, ReplicantBody *body, SinkAttempt *attempt)
{
	sink->body = body;
	sink->body_sent = 0;
	sink->body_failed = false;
	sink->connected = false;
	sink->retry_after_seen = false;
	sink->error_code = 0;
	sink->body_start_len = 0;
	sink->body_start[0] = '\0';
	sink->loop.socket_overflow = false;
	body->rewind(body->arg);

	if (!replicant_sink_http_headers(&sink->headers, sink->content_type, sink->header_names,
									 sink->header_values, webhook_id, timestamp, signature))
	{
		attempt->code = CURLE_OUT_OF_MEMORY;
		return false;
	}
	if (!sink_set_body(sink, body))
	{
		attempt->code = sink->body_failed ? CURLE_READ_ERROR : CURLE_FAILED_INIT;
		return false;
	}
	if (curl_easy_setopt(sink->loop.easy, CURLOPT_HTTPHEADER, sink->headers) != CURLE_OK ||
		curl_easy_setopt(sink->loop.easy, CURLOPT_POSTFIELDSIZE_LARGE,
						 (curl_off_t) body->length) != CURLE_OK ||
		curl_multi_add_handle(sink->loop.multi, sink->loop.easy) != CURLM_OK)
	{
		attempt->code = CURLE_FAILED_INIT;
		return false;
	}
	sink->attached = true;
	return true;
}

/*
 * Cleans up libcurl's per-request state, however the request ended.  The
 * wait set outlives only a clean exchange: nothing half-watched.
 */
static void
sink_detach(HttpSink *sink, bool clean)
{
	if (!clean)
		replicant_sink_loop_free_wait_set(&sink->loop);
	if (sink->attached)
	{
		/* a transfer cut short closes its connection: no half state */
		curl_multi_remove_handle(sink->loop.multi, sink->loop.easy);
		sink->attached = false;
	}
	curl_easy_setopt(sink->loop.easy, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(sink->headers);
	sink->headers = NULL;
	sink->body = NULL;
}

/* Classifies what the attempt came to into *result. */
static void
sink_classify_attempt(HttpSink *sink, SinkAttempt *attempt,
					  ReplicantSinkResult *result)
{
	ReplicantSinkAnswer answer;
	ReplicantSinkAnswerRules rules;

	answer.code = attempt->code;
	answer.status = attempt->status;
	answer.hard_timeout = attempt->hard_timeout;
	answer.body_failed = sink->body_failed;
	answer.connected = sink->connected;
	answer.retry_after = sink->retry_after_seen ? sink->retry_after : NULL;
	answer.error_code = sink->error_code;
	answer.body_start = sink->body_start;
	answer.elapsed_ms = attempt->elapsed_ms;
	rules.http_timeout_ms = sink->http_timeout_ms;
	rules.connect_timeout_ms = sink->connect_timeout_ms;
	rules.code_is_final = sink->code_is_final;
	replicant_sink_answer_classify(&answer, &rules, time(NULL), result);
}

/* ---- a request overlapped with the caller's work ---- */

static void
http_start(ReplicantTransport *transport, const char *webhook_id, ReplicantBody *body)
{
	HttpSink *sink = (HttpSink *) transport;
	SinkStarted *started = &sink->started;
	int64 timestamp = (int64) time(NULL);
	char *signature;
	int running;

	Assert(!started->active);
	memset(started, 0, sizeof(*started));
	started->attempt.code = CURLE_OK;
	started->pump_error = CURLM_OK;
	INSTR_TIME_SET_CURRENT(started->started_at);
	/* its answer reports a failure to sign */
	started->signing_failed = !replicant_sink_http_sign(sink->secret, sink->secret_previous, sink->secret_previous_until,
														webhook_id, timestamp, body, &signature);
	started->active = true;
	if (started->signing_failed)
		return;

	PG_TRY();
	{
		/* the first round: resolve, connect, send what the socket takes */
		if (sink_attach(sink, webhook_id, timestamp, signature, body, &started->attempt))
		{
			started->pump_error = curl_multi_socket_action(sink->loop.multi, CURL_SOCKET_TIMEOUT,
														   0, &running);
			started->transfer_over = (running == 0);
		}
	}
	PG_CATCH();
	{
		sink_cancel(sink);
		PG_RE_THROW();
	}
	PG_END_TRY();
	/* the headers hold a copy: freed here, as a send frees it */
	if (signature != NULL)
		pfree(signature);
}

static void
http_pump(ReplicantTransport *transport)
{
	HttpSink *sink = (HttpSink *) transport;
	SinkStarted *started = &sink->started;
	int running = 1;

	if (!started->active || !sink->attached || started->transfer_over ||
		started->pump_error != CURLM_OK || sink->loop.socket_overflow)
		return;
	PG_TRY();
	{
		started->pump_error = replicant_sink_loop_pump(&sink->loop, &started->attempt, &running);
	}
	PG_CATCH();
	{
		/* its wait set could not be made: nothing half-attached is left */
		sink_cancel(sink);
		PG_RE_THROW();
	}
	PG_END_TRY();
	started->transfer_over = (running == 0);
}

/* Ends the started request, whose attempt is over, and classifies it. */
static void
sink_answer_started(HttpSink *sink, ReplicantSinkResult *result)
{
	SinkStarted *started = &sink->started;
	SinkAttempt *attempt = &started->attempt;
	instr_time now;

	/* as after a send, the wait set outlives a clean exchange */
	sink_detach(sink, attempt->code == CURLE_OK);
	started->active = false;
	if (started->signing_failed)
	{
		replicant_sink_answer_signing_failed(result);
		return;
	}
	if (attempt->latch_was_set)
		SetLatch(MyLatch);
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, started->started_at);
	attempt->elapsed_ms = INSTR_TIME_GET_MILLISEC(now);
	sink_classify_attempt(sink, attempt, result);
}

/* Whether libcurl still works on the started request: not when it never left or is over. */
static bool
sink_started_running(HttpSink *sink)
{
	SinkStarted *started = &sink->started;

	return sink->attached && !started->transfer_over && started->pump_error == CURLM_OK &&
		   !sink->loop.socket_overflow;
}

static int
http_wait_sources(ReplicantTransport *transport, ReplicantWaitSource *sources, long *timeout_ms)
{
	HttpSink *sink = (HttpSink *) transport;

	Assert(sink->started.active);
	if (!sink_started_running(sink))
	{
		*timeout_ms = 0;
		return 0;
	}
	return replicant_sink_loop_wait_sources(&sink->loop, sources, timeout_ms);
}

static bool
http_poll(ReplicantTransport *transport, ReplicantSinkResult *result)
{
	HttpSink *sink = (HttpSink *) transport;
	SinkStarted *started = &sink->started;
	SinkAttempt *attempt = &started->attempt;
	volatile bool over = true;

	Assert(started->active);
	PG_TRY();
	{
		if (!sink->attached)
			; /* never started: attempt->code says why */
		else if (sink_started_running(sink))
			over = replicant_sink_loop_poll(&sink->loop, sink->http_timeout_ms,
											sink->body->length, started->started_at, attempt);
		else
		{
			attempt->code = replicant_sink_loop_result_code(&sink->loop, started->pump_error,
															false);
			curl_easy_getinfo(sink->loop.easy, CURLINFO_RESPONSE_CODE, &attempt->status);
		}
	}
	PG_CATCH();
	{
		sink_cancel(sink);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!over)
	{
		/*
		 * A request may stay out across the worker's cycles: a wakeup
		 * the poll took is the caller's, not kept until the answer.
		 */
		if (attempt->latch_was_set)
		{
			attempt->latch_was_set = false;
			SetLatch(MyLatch);
		}
		return false;
	}
	sink_answer_started(sink, result);
	return true;
}

static void
sink_cancel(HttpSink *sink)
{
	if (!sink->started.active)
		return;
	sink_detach(sink, false);
	sink->started.active = false;
}

static void
http_cancel(ReplicantTransport *transport)
{
	sink_cancel((HttpSink *) transport);
}
