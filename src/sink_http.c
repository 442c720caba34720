/*
 * sink_http.c
 *		POSTing batches to an HTTP sink with libcurl's multi interface, and
 *		classifying the answer.
 *
 * The request is driven from our own wait loop (a WaitEventSet over the
 * process latch, postmaster death and the sockets libcurl asks for), so that
 * interrupts are answered promptly and always outside libcurl frames.  The
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
#include <sys/stat.h>
#include <time.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "fault.h"
#include "headers.h"
#include "replicant.h"
#include "signing.h"
#include "sink_http.h"
#include "sink_http_answer.h"

/*
 * One easy handle uses one or two sockets (two while happy eyeballs races
 * IPv4 and IPv6), plus the resolver's wakeup pipe; this is ample.
 */
#define SINK_MAX_SOCKETS 16

/* Wait when libcurl watches nothing yet, e.g. while the resolver runs. */
#define SINK_IDLE_WAIT_MS 100

/* Upper bound on one wait, so the safety deadline below is checked. */
#define SINK_MAX_WAIT_MS 1000

/*
 * Beyond http_timeout_ms, libcurl's own timer should have ended the request;
 * this much later we stop waiting for it ourselves.
 */
#define SINK_DEADLINE_SLACK_MS 5000

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

/*
 * A request started by replicant_sink_start() and not finished yet: one at
 * a time per sink.
 */
typedef struct SinkStarted
{
	bool active;
	bool signing_failed; /* never sent: the body could not be read */
	bool transfer_over;  /* libcurl finished it while pumped */
	SinkAttempt attempt;
	char *signature;      /* NULL when the sink signs nothing */
	CURLMcode pump_error; /* what stopped pumping it */
	instr_time started_at;
} SinkStarted;

struct ReplicantSink
{
	CURLM *multi; /* owns the connection cache: keep-alive */
	CURL *easy;
	bool attached; /* easy is in multi */

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

	/* set by the socket and timer callbacks */
	SinkSocket sockets[SINK_MAX_SOCKETS];
	int nsockets;
	bool socket_overflow;
	bool timer_armed;
	long timer_ms;
	instr_time timer_set_at;

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

	/*
	 * The set we wait on, kept across waits and requests while it watches
	 * the same sockets (one epoll set less per wait); freed on error exits.
	 */
	MemoryContext context; /* the sink's, for the set and inline_body */
	WaitEventSet *wes;
	SinkWatched watched[SINK_MAX_SOCKETS];
	int nwatched;

	char *inline_body; /* SINK_INLINE_BODY_MAX bytes, made when first needed */

	/* freed on error exits */
	struct curl_slist *headers;

	SinkStarted started; /* replicant_sink_start() to _finish() */
};


static bool curl_initialized = false;

static int sink_socket_cb(CURL *easy, curl_socket_t fd, int what,
						  void *userp, void *socketp);
static int sink_timer_cb(CURLM *multi, long timeout_ms, void *userp);
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
static void sink_setopt_failed(const char *option, CURLcode code);
static void sink_configure(ReplicantSink *sink);
static bool sink_append_header(struct curl_slist **list, StringInfo buf,
							   const char *name, const char *value);
static bool sink_build_headers(ReplicantSink *sink, const char *webhook_id,
							   int64 timestamp, const char *signature);
static void sink_free_wait_set(ReplicantSink *sink);
static void sink_run(ReplicantSink *sink, SinkAttempt *attempt);
static void sink_attempt(ReplicantSink *sink, const char *webhook_id,
						 int64 timestamp, const char *signature,
						 ReplicantBody *body, SinkAttempt *attempt);
static long sink_timer_remaining(ReplicantSink *sink);

/* ---- libcurl callbacks: no palloc, no ereport, no CHECK_FOR_INTERRUPTS ---- */

/* Records which sockets libcurl wants watched, and for what. */
static int
sink_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp,
			   void *socketp)
{
	ReplicantSink *sink = (ReplicantSink *) userp;
	int i;

	for (i = 0; i < sink->nsockets; i++)
	{
		if (sink->sockets[i].fd == fd)
			break;
	}

	if (what == CURL_POLL_REMOVE)
	{
		if (i < sink->nsockets)
			sink->sockets[i] = sink->sockets[--sink->nsockets];
		return 0;
	}

	if (i == sink->nsockets)
	{
		if (sink->nsockets == SINK_MAX_SOCKETS)
		{
			sink->socket_overflow = true;
			return -1; /* libcurl fails the transfer */
		}
		sink->sockets[i].fd = fd;
		sink->nsockets++;
	}
	sink->sockets[i].what = what;
	return 0;
}

/* Records libcurl's single, non-repeating timer; -1 disarms it. */
static int
sink_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	ReplicantSink *sink = (ReplicantSink *) userp;

	if (timeout_ms < 0)
		sink->timer_armed = false;
	else
	{
		sink->timer_armed = true;
		sink->timer_ms = timeout_ms;
		INSTR_TIME_SET_CURRENT(sink->timer_set_at);
	}
	return 0;
}

/*
 * Streams the body into the request, never past body->length: libcurl sent
 * that length as Content-Length.  A body that ends early or fails to read
 * aborts the transfer rather than leave the sink waiting for the rest.
 */
static size_t
sink_read_cb(char *buffer, size_t size, size_t nitems, void *userdata)
{
	ReplicantSink *sink = (ReplicantSink *) userdata;
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
	ReplicantSink *sink = (ReplicantSink *) userdata;

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
	ReplicantSink *sink = (ReplicantSink *) userdata;
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
	ReplicantSink *sink = (ReplicantSink *) userdata;
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
	ReplicantSink *sink = (ReplicantSink *) clientp;

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
sink_configure(ReplicantSink *sink)
{
	CURL *easy = sink->easy;

	SINK_MULTI_SETOPT(sink->multi, CURLMOPT_SOCKETFUNCTION, sink_socket_cb);
	SINK_MULTI_SETOPT(sink->multi, CURLMOPT_SOCKETDATA, sink);
	SINK_MULTI_SETOPT(sink->multi, CURLMOPT_TIMERFUNCTION, sink_timer_cb);
	SINK_MULTI_SETOPT(sink->multi, CURLMOPT_TIMERDATA, sink);

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

ReplicantSink *
replicant_sink_create(const ReplicantSinkConfig *config)
{
	ReplicantSink *sink;
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
	}

	if (list_length(config->header_names) != list_length(config->header_values))
		elog(ERROR, "sink header names and values differ in number");

	sink = palloc0(sizeof(ReplicantSink));
	sink->context = CurrentMemoryContext;
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
		sink->multi = curl_multi_init();
		sink->easy = curl_easy_init();
		if (sink->multi == NULL || sink->easy == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory"),
					 errdetail("Could not create a libcurl handle.")));
		sink_configure(sink);
	}
	PG_CATCH();
	{
		replicant_sink_destroy(sink);
		PG_RE_THROW();
	}
	PG_END_TRY();

	return sink;
}

void
replicant_sink_classify_codes(ReplicantSink *sink, bool (*code_is_final)(int code))
{
	sink->code_is_final = code_is_final;
}

void
replicant_sink_destroy(ReplicantSink *sink)
{
	if (sink == NULL)
		return;

	sink_free_wait_set(sink);
	if (sink->attached)
		curl_multi_remove_handle(sink->multi, sink->easy);
	if (sink->easy != NULL)
		curl_easy_cleanup(sink->easy);
	/* closes cached connections; may still call sink_socket_cb */
	if (sink->multi != NULL)
		curl_multi_cleanup(sink->multi);
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

/* ---- headers ---- */

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

/* Builds this request's header list into sink->headers. */
static bool
sink_build_headers(ReplicantSink *sink, const char *webhook_id,
				   int64 timestamp, const char *signature)
{
	StringInfoData buf;
	char ts[32];
	bool ok;
	ListCell *lc1,
		*lc2;

	initStringInfo(&buf);
	snprintf(ts, sizeof(ts), INT64_FORMAT, timestamp);

	ok = sink_append_header(&sink->headers, &buf, "Content-Type",
							sink->content_type) &&
		 sink_append_header(&sink->headers, &buf, "User-Agent",
							"replicant/" REPLICANT_VERSION) &&
		 sink_append_header(&sink->headers, &buf, "webhook-id", webhook_id) &&
		 sink_append_header(&sink->headers, &buf, "webhook-timestamp", ts);

	/* "Expect:" removes libcurl's 100-continue: one round trip less */
	if (ok)
	{
		struct curl_slist *l = curl_slist_append(sink->headers, "Expect:");

		ok = (l != NULL);
		if (ok)
			sink->headers = l;
	}
	if (ok && signature != NULL)
		ok = sink_append_header(&sink->headers, &buf, "webhook-signature",
								signature);

	forboth(lc1, sink->header_names, lc2, sink->header_values)
	{
		const char *name = lfirst(lc1);
		const char *value = lfirst(lc2);

		if (!ok)
			break;
		/* validated when configured; still never forge or override a line */
		if (!replicant_header_name_ok(name) || !replicant_header_value_ok(value) ||
			replicant_header_reserved(name) != NULL)
			continue;
		ok = sink_append_header(&sink->headers, &buf, name, value);
	}

	pfree(buf.data);
	return ok;
}

/* ---- the request ---- */

/* Milliseconds until libcurl's timer fires (rounded up), or -1 if unarmed. */
static long
sink_timer_remaining(ReplicantSink *sink)
{
	instr_time now;
	int64 elapsed_us;
	int64 remaining_us;

	if (!sink->timer_armed)
		return -1;
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, sink->timer_set_at);
	elapsed_us = (int64) INSTR_TIME_GET_MICROSEC(now);
	remaining_us = (int64) sink->timer_ms * 1000 - elapsed_us;
	if (remaining_us <= 0)
		return 0;
	return (long) ((remaining_us + 999) / 1000);
}

/* Crash tests stop here: the whole request is out, no answer has come. */
static void
fault_after_send(ReplicantSink *sink)
{
	curl_off_t uploaded = 0;
	long status = 0;

	if (replicant_fault_point == NULL || replicant_fault_point[0] == '\0')
		return;
	curl_easy_getinfo(sink->easy, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(sink->easy, CURLINFO_SIZE_UPLOAD_T, &uploaded);
	if (status == 0 && uploaded >= (curl_off_t) sink->body->length)
		replicant_fault("after_send");
}

/* How long one round may wait: until libcurl's timer, within bounds. */
static long
sink_wait_ms(ReplicantSink *sink)
{
	long timer = sink_timer_remaining(sink);

	if (timer >= 0)
		return Min(timer, SINK_MAX_WAIT_MS);
	if (sink->nsockets == 0)
		return SINK_IDLE_WAIT_MS;
	return SINK_MAX_WAIT_MS;
}

static uint32
sink_socket_events(int what)
{
	uint32 events = 0;

	if (what & CURL_POLL_IN)
		events |= WL_SOCKET_READABLE;
	if (what & CURL_POLL_OUT)
		events |= WL_SOCKET_WRITEABLE;
	return events;
}

static SinkWatched *
sink_watched(ReplicantSink *sink, curl_socket_t fd)
{
	int i;

	for (i = 0; i < sink->nwatched; i++)
	{
		if (sink->watched[i].fd == fd)
			return &sink->watched[i];
	}
	return NULL;
}

/*
 * Whether the kept set watches exactly the sockets libcurl waits for, each
 * still the file it was: between our waits libcurl closes and opens sockets
 * (a new connection, the resolver's pipe), a new one can get an old number,
 * and epoll forgets a closed file.
 */
static bool
sink_wait_set_current(ReplicantSink *sink)
{
	int nwanted = 0;
	int i;

	if (sink->wes == NULL)
		return false;
	for (i = 0; i < sink->nsockets; i++)
	{
		SinkWatched *w;
		struct stat st;

		if (sink_socket_events(sink->sockets[i].what) == 0)
			continue;
		nwanted++;
		w = sink_watched(sink, sink->sockets[i].fd);
		if (w == NULL || fstat(w->fd, &st) != 0 ||
			st.st_dev != w->dev || st.st_ino != w->ino)
			return false;
	}
	return nwanted == sink->nwatched;
}

static void
sink_free_wait_set(ReplicantSink *sink)
{
	if (sink->wes != NULL)
		FreeWaitEventSet(sink->wes);
	sink->wes = NULL;
	sink->nwatched = 0;
}

/* A new set over the latch, postmaster death and libcurl's sockets. */
static void
sink_build_wait_set(ReplicantSink *sink)
{
	int i;

	sink_free_wait_set(sink);
	sink->wes = REPLICANT_CREATE_WAIT_EVENT_SET(sink->context, sink->nsockets + 2);
	AddWaitEventToSet(sink->wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(sink->wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
					  NULL, NULL);
	for (i = 0; i < sink->nsockets; i++)
	{
		uint32 events = sink_socket_events(sink->sockets[i].what);
		SinkWatched *w;
		struct stat st;

		if (events == 0)
			continue;
		/* a descriptor fstat cannot see fails in AddWaitEventToSet */
		if (fstat(sink->sockets[i].fd, &st) != 0)
			memset(&st, 0, sizeof(st));
		w = &sink->watched[sink->nwatched++];
		w->fd = sink->sockets[i].fd;
		w->dev = st.st_dev;
		w->ino = st.st_ino;
		w->events = events;
		w->pos = AddWaitEventToSet(sink->wes, events, w->fd, NULL, NULL);
	}
}

/* Points the kept set's sockets at what libcurl waits for now. */
static void
sink_update_wait_set(ReplicantSink *sink)
{
	int i;

	for (i = 0; i < sink->nsockets; i++)
	{
		uint32 events = sink_socket_events(sink->sockets[i].what);
		SinkWatched *w = sink_watched(sink, sink->sockets[i].fd);

		if (events != 0 && w->events != events)
		{
			ModifyWaitEvent(sink->wes, w->pos, events, NULL);
			w->events = events;
		}
	}
}

/*
 * Waits on the latch, postmaster death and the sockets libcurl watches, for
 * at most wait_ms.  Returns how many events fired into occurred.
 */
static int
sink_wait(ReplicantSink *sink, long wait_ms, WaitEvent *occurred,
		  int noccurred)
{
	if (sink_wait_set_current(sink))
		sink_update_wait_set(sink);
	else
		sink_build_wait_set(sink);
	return WaitEventSetWait(sink->wes, wait_ms, occurred, noccurred,
							PG_WAIT_EXTENSION);
}

/*
 * Hands the sockets that fired to libcurl, and says whether the latch did.
 * Returns libcurl's verdict, stopping at the first failure.
 */
static CURLMcode
sink_dispatch(ReplicantSink *sink, WaitEvent *occurred, int nfired,
			  int *running, bool *latch_fired)
{
	CURLMcode mc = CURLM_OK;
	int i;

	for (i = 0; i < nfired && mc == CURLM_OK; i++)
	{
		int mask = 0;

		if (occurred[i].events & WL_LATCH_SET)
		{
			*latch_fired = true;
			continue;
		}
		if (occurred[i].events & WL_SOCKET_READABLE)
			mask |= CURL_CSELECT_IN;
		if (occurred[i].events & WL_SOCKET_WRITEABLE)
			mask |= CURL_CSELECT_OUT;
		if (mask != 0)
			mc = curl_multi_socket_action(sink->multi, occurred[i].fd,
										  mask, running);
	}
	return mc;
}

/* What the transfer came to, once the wait loop is over. */
static CURLcode
sink_result_code(ReplicantSink *sink, CURLMcode mc, bool hard_timeout)
{
	CURLcode code;
	CURLMsg *msg;
	int pending;

	if (hard_timeout)
		return CURLE_OPERATION_TIMEDOUT;
	if (mc == CURLM_OUT_OF_MEMORY)
		return CURLE_OUT_OF_MEMORY;
	if (mc != CURLM_OK || sink->socket_overflow)
		return CURLE_FAILED_INIT;

	code = CURLE_FAILED_INIT; /* if libcurl reports no result */
	while ((msg = curl_multi_info_read(sink->multi, &pending)) != NULL)
	{
		if (msg->msg == CURLMSG_DONE && msg->easy_handle == sink->easy)
			code = msg->data.result;
	}
	return code;
}

/*
 * Drives the attached transfer to its end.  Each round waits on the latch,
 * postmaster death and libcurl's sockets, hands what fired to libcurl, and
 * only then, outside libcurl, answers interrupts.  A SIGTERM abandons the
 * transfer instead, so that the caller can commit what the sink
 * acknowledged before it exits (replicant_delivery_check_for_interrupts).
 */
static void
sink_run(ReplicantSink *sink, SinkAttempt *attempt)
{
	int running = 1;
	bool abandoned = false;
	instr_time start;
	instr_time now;
	CURLMcode mc;

	INSTR_TIME_SET_CURRENT(start);

	mc = curl_multi_socket_action(sink->multi, CURL_SOCKET_TIMEOUT, 0, &running);

	while (mc == CURLM_OK && running > 0 && !sink->socket_overflow)
	{
		WaitEvent occurred[SINK_MAX_SOCKETS + 2];
		int nfired;
		bool latch_fired = false;

		/* libcurl's timer ends the request; this only guards against a bug */
		INSTR_TIME_SET_CURRENT(now);
		INSTR_TIME_SUBTRACT(now, start);
		if (sink->http_timeout_ms > 0 &&
			INSTR_TIME_GET_MILLISEC(now) >
				(double) sink->http_timeout_ms + SINK_DEADLINE_SLACK_MS)
		{
			attempt->hard_timeout = true;
			break;
		}

		nfired = sink_wait(sink, sink_wait_ms(sink), occurred, lengthof(occurred));
		mc = sink_dispatch(sink, occurred, nfired, &running, &latch_fired);

		/*
		 * The timer is non-repeating: forget it before telling libcurl, which
		 * re-arms it from inside the call if it still needs one.
		 */
		if (mc == CURLM_OK &&
			(sink_timer_remaining(sink) == 0 ||
			 (!sink->timer_armed && sink->nsockets == 0 && nfired == 0)))
		{
			sink->timer_armed = false;
			mc = curl_multi_socket_action(sink->multi, CURL_SOCKET_TIMEOUT, 0,
										  &running);
		}

		if (latch_fired)
		{
			ResetLatch(MyLatch);
			attempt->latch_was_set = true;
		}
		fault_after_send(sink);
		if (ProcDiePending && running > 0)
		{
			abandoned = true;
			break;
		}
		CHECK_FOR_INTERRUPTS();
	}

	if (abandoned)
		attempt->code = CURLE_ABORTED_BY_CALLBACK;
	else
		attempt->code = sink_result_code(sink, mc, attempt->hard_timeout);

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	attempt->elapsed_ms = INSTR_TIME_GET_MILLISEC(now);
	curl_easy_getinfo(sink->easy, CURLINFO_RESPONSE_CODE, &attempt->status);
}

/*
 * Tells libcurl where the body comes from: memory for a small one (read
 * here, outside libcurl), else sink_read_cb.  False if it could not be read.
 */
static bool
sink_set_body(ReplicantSink *sink, ReplicantBody *body)
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
	return curl_easy_setopt(sink->easy, CURLOPT_POSTFIELDS, inline_data) == CURLE_OK;
}

/*
 * Resets the per-request state and attaches the easy handle with this
 * request's headers.  False, with attempt->code saying why, when libcurl
 * could not take the request.
 */
static bool
sink_attach(ReplicantSink *sink, const char *webhook_id, int64 timestamp,
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
	sink->socket_overflow = false;
	body->rewind(body->arg);

	if (!sink_build_headers(sink, webhook_id, timestamp, signature))
	{
		attempt->code = CURLE_OUT_OF_MEMORY;
		return false;
	}
	if (!sink_set_body(sink, body))
	{
		attempt->code = sink->body_failed ? CURLE_READ_ERROR : CURLE_FAILED_INIT;
		return false;
	}
	if (curl_easy_setopt(sink->easy, CURLOPT_HTTPHEADER, sink->headers) != CURLE_OK ||
		curl_easy_setopt(sink->easy, CURLOPT_POSTFIELDSIZE_LARGE,
						 (curl_off_t) body->length) != CURLE_OK ||
		curl_multi_add_handle(sink->multi, sink->easy) != CURLM_OK)
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
sink_detach(ReplicantSink *sink, bool clean)
{
	if (!clean)
		sink_free_wait_set(sink);
	if (sink->attached)
	{
		/* a transfer cut short closes its connection: no half state */
		curl_multi_remove_handle(sink->multi, sink->easy);
		sink->attached = false;
	}
	curl_easy_setopt(sink->easy, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(sink->headers);
	sink->headers = NULL;
	sink->body = NULL;
}

/*
 * One HTTP exchange, with libcurl's per-request state cleaned up even when
 * an interrupt throws out of the wait loop.
 */
static void
sink_attempt(ReplicantSink *sink, const char *webhook_id, int64 timestamp,
			 const char *signature, ReplicantBody *body, SinkAttempt *attempt)
{
	PG_TRY();
	{
		if (sink_attach(sink, webhook_id, timestamp, signature, body, attempt))
			sink_run(sink, attempt);
	}
	PG_CATCH();
	{
		sink_detach(sink, false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	sink_detach(sink, attempt->code == CURLE_OK);
}

/*
 * The request's webhook-signature into *signature (NULL when the sink signs
 * nothing).  False when the body could not be read to sign it.
 */
static bool
sink_sign(ReplicantSink *sink, const char *webhook_id, int64 timestamp,
		  ReplicantBody *body, char **signature)
{
	/* the id is ours, not the sink's: a CR or LF in it is a bug */
	if (!replicant_header_value_ok(webhook_id))
		elog(ERROR, "invalid webhook id");

	*signature = NULL;
	if (sink->secret == NULL)
		return true;
	*signature = replicant_signing_signature(sink->secret, webhook_id, timestamp, body);

	/*
	 * While a rotated-out secret is still valid, sign with both, space
	 * separated, as Standard Webhooks allows.
	 */
	if (*signature != NULL && sink->secret_previous != NULL &&
		GetCurrentTimestamp() < sink->secret_previous_until)
	{
		char *previous = replicant_signing_signature(sink->secret_previous,
													 webhook_id, timestamp, body);

		*signature = previous ? psprintf("%s %s", *signature, previous) : NULL;
	}
	return *signature != NULL;
}

/* Classifies what the attempt came to into *result. */
static void
sink_classify_attempt(ReplicantSink *sink, SinkAttempt *attempt,
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

void
replicant_sink_post(ReplicantSink *sink, const char *webhook_id,
					ReplicantBody *body, ReplicantSinkResult *result)
{
	int64 timestamp = (int64) time(NULL);
	char *signature;
	SinkAttempt attempt = {CURLE_OK, 0, false, false, 0.0};

	if (!sink_sign(sink, webhook_id, timestamp, body, &signature))
	{
		replicant_sink_answer_signing_failed(result);
		return;
	}

	sink_attempt(sink, webhook_id, timestamp, signature, body, &attempt);
	if (signature != NULL)
		pfree(signature);

	/* do not swallow a wakeup meant for the caller's own wait */
	if (attempt.latch_was_set)
		SetLatch(MyLatch);
	sink_classify_attempt(sink, &attempt, result);
}

/* ---- a request overlapped with the caller's work ---- */

void
replicant_sink_start(ReplicantSink *sink, const char *webhook_id, ReplicantBody *body)
{
	SinkStarted *started = &sink->started;
	int64 timestamp = (int64) time(NULL);
	int running;

	Assert(!started->active);
	memset(started, 0, sizeof(*started));
	started->attempt.code = CURLE_OK;
	started->pump_error = CURLM_OK;
	INSTR_TIME_SET_CURRENT(started->started_at);
	/* replicant_sink_finish() reports a failure to sign */
	started->signing_failed = !sink_sign(sink, webhook_id, timestamp, body,
										 &started->signature);
	started->active = true;
	if (started->signing_failed)
		return;

	PG_TRY();
	{
		/* the first round: resolve, connect, send what the socket takes */
		if (sink_attach(sink, webhook_id, timestamp, started->signature, body,
						&started->attempt))
			started->pump_error = curl_multi_socket_action(sink->multi, CURL_SOCKET_TIMEOUT,
														   0, &running);
	}
	PG_CATCH();
	{
		replicant_sink_cancel(sink);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

void
replicant_sink_pump(ReplicantSink *sink)
{
	SinkStarted *started = &sink->started;
	WaitEvent occurred[SINK_MAX_SOCKETS + 2];
	int nfired;
	int running = 1;
	bool latch_fired = false;
	CURLMcode mc;

	if (!started->active || !sink->attached || started->transfer_over ||
		started->pump_error != CURLM_OK || sink->socket_overflow)
		return;
	nfired = sink_wait(sink, 0, occurred, lengthof(occurred));
	mc = sink_dispatch(sink, occurred, nfired, &running, &latch_fired);
	if (mc == CURLM_OK && sink_timer_remaining(sink) == 0)
	{
		/* non-repeating, as in sink_run() */
		sink->timer_armed = false;
		mc = curl_multi_socket_action(sink->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	}
	if (latch_fired)
	{
		ResetLatch(MyLatch);
		started->attempt.latch_was_set = true;
	}
	started->pump_error = mc;
	started->transfer_over = (running == 0);
}

void
replicant_sink_finish(ReplicantSink *sink, ReplicantSinkResult *result)
{
	SinkStarted *started = &sink->started;
	SinkAttempt *attempt = &started->attempt;
	instr_time now;

	Assert(started->active);
	PG_TRY();
	{
		if (!sink->attached)
			; /* never started: attempt->code says why */
		else if (started->pump_error != CURLM_OK)
		{
			attempt->code = sink_result_code(sink, started->pump_error, false);
			curl_easy_getinfo(sink->easy, CURLINFO_RESPONSE_CODE, &attempt->status);
		}
		else
			sink_run(sink, attempt);
	}
	PG_CATCH();
	{
		replicant_sink_cancel(sink);
		PG_RE_THROW();
	}
	PG_END_TRY();
	replicant_sink_cancel(sink);

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

void
replicant_sink_cancel(ReplicantSink *sink)
{
	if (!sink->started.active)
		return;
	sink_detach(sink, false);
	/* the signature lives in the caller's memory context, maybe gone by now */
	sink->started.signature = NULL;
	sink->started.active = false;
}
