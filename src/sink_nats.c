/*
 * sink_nats.c
 *		The NATS JetStream transport (nats:// and tls:// sink URLs): each
 *		change of a rendered batch becomes one message on
 *		<prefix>.<schema>.<table>, published with a JetStream
 *		acknowledgement, never with core NATS publish.  README
 *		"Destinations" and docs/sink-protocol.md ("NATS JetStream") are the
 *		contract: subjects, headers, Nats-Msg-Id.
 *
 * Effect-once in the stream:
 * - A batch is published asynchronously, at most NATS_MAX_INFLIGHT messages
 *   (and NATS_MAX_INFLIGHT_BYTES) unacknowledged at a time, and answered OK
 *   only once every message of it was acknowledged.
 * - The changes and messages of the stream are published as a chain: each
 *   expects the stream's last sequence to be its predecessor's
 *   (Nats-Expected-Last-Sequence), so a message that failed makes every
 *   later one fail instead of landing before it.  The batch is then
 *   retried from what the stream holds.  Another writer's message can take
 *   a refused one's place in that count (the next one then finds the
 *   sequence it expects): the acknowledgements show it, and the pipeline
 *   halts rather than go on without the refused change.
 * - Before the first chained publish, and after any failure, the stream is
 *   asked for its last sequence and for the last message under the
 *   pipeline's subject prefix; every change at or below that message's
 *   (commit_lsn, position), or below the last change JetStream acknowledged
 *   to this transport if that is further, is skipped.  So a restart after
 *   an outage longer than the stream's duplicate window writes nothing
 *   twice, and a retry does not send again what was acknowledged.  The
 *   changes after the mark then go one at a time until one is stored, not
 *   answered as a duplicate (which moves the stream's sequence no further),
 *   and a duplicate counts as acknowledged only with a stream sequence.
 * - Snapshot and backfill rows (reads, published by several processes at
 *   once during a snapshot) carry ids stable across retries of their
 *   request and are de-duplicated by JetStream within its window; their
 *   first marker is acknowledged before the rows are published and their
 *   last marker is published after the rows were acknowledged.
 *
 * Files: sink_nats_url.c (the URL), sink_nats_batch.c (a rendered batch
 * into messages), sink_nats_body.c (reading the batch back),
 * sink_nats_stream.c (the stream: checked, its mark learnt),
 * sink_nats_connect.c (connecting without going deaf to signals),
 * sink_nats_acks.c (acknowledgements: counted, waited for).
 *
 * Inside Postgres: the library's threads are started (nats_Open: timers,
 * callbacks, garbage collection; connection creation: reading, flushing;
 * the first request and the first asynchronous publish of a connection:
 * their subscriptions' delivery threads; a reconnect thread is started by
 * the reading thread only) with every signal blocked, so they never take
 * the process's signals; later publishes run with the worker's signals,
 * and every write has a deadline (NATS_WRITE_DEADLINE_MS): libnats writes
 * inline when its buffer is full, and a server that stops reading would
 * otherwise block the worker for good.  They call nothing of the server's:
 * the acknowledgement handler counts under a mutex, only for the current
 * connection, and writes a byte to a pipe, which the worker waits on beside
 * its latch in short slices, answering interrupts and reloads outside the
 * library.  No library error text reaches an error or a log
 * line (it may quote a server's URL): fixed texts only.
 */
#include "postgres.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <nats/nats.h>

#include "common/base64.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/latch.h"

#include "compat.h"
#include "sink_nats.h"
#include "sink_nats_body.h"
#include "sink_nats_internal.h"

#define NATS_MAX_INFLIGHT 256
#define NATS_MAX_INFLIGHT_BYTES (8 * 1024 * 1024)
#define NATS_RECONNECT_BUF (8 * 1024 * 1024)
#define NATS_API_WAIT_MS 1000
#define NATS_CONNECT_TIMEOUT_MS 2000
#define NATS_WRITE_DEADLINE_MS 2000
#define NATS_DEFAULT_ACK_TIMEOUT_MS 30000

static const char *const kind_names[] = {"change", "message", "read", "marker"};

/* ---- the library, its threads and signals ---- */

void
nats_sink_block_signals(sigset_t *old)
{
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, old);
}

void
nats_sink_restore_signals(const sigset_t *old)
{
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

void
nats_sink_fail(ReplicantSinkResult *result, ReplicantSinkOutcome outcome, const char *error)
{
	if (result->outcome != REPLICANT_SINK_OK)
		return;
	result->outcome = outcome;
	strlcpy(result->error, error, sizeof(result->error));
}

/* A retried failure named by the library's fixed text for its status. */
void
nats_sink_fail_status(ReplicantSinkResult *result, const char *what, natsStatus s, jsErrCode code)
{
	char error[sizeof(result->error)];

	if (code == JSStreamNotFoundErr)
	{
		nats_sink_fail(result, REPLICANT_SINK_REJECTED, "NATS stream not found");
		return;
	}
	if (s == NATS_CONNECTION_AUTH_FAILED)
	{
		nats_sink_fail(result, REPLICANT_SINK_REJECTED, "NATS refused the pipeline's credentials");
		return;
	}
	if (s == NATS_NOT_PERMITTED)
	{
		nats_sink_fail(result, REPLICANT_SINK_REJECTED, "NATS denied the pipeline a permission it needs");
		return;
	}
	if (code == JSStreamNotMatchErr)
	{
		nats_sink_fail(result, REPLICANT_SINK_REJECTED,
					   "a NATS stream other than the pipeline's takes its subjects");
		return;
	}
	if (code == JSStreamMessageExceedsMaximumErr)
	{
		nats_sink_fail(result, REPLICANT_SINK_REJECTED,
					   "a message is larger than the NATS stream's max_msg_size");
		return;
	}
	if (code != 0)
		snprintf(error, sizeof(error), "%s: %s (JetStream error %d)", what,
				 natsStatus_GetText(s), (int) code);
	else
		snprintf(error, sizeof(error), "%s: %s", what, natsStatus_GetText(s));
	nats_sink_fail(result, REPLICANT_SINK_RETRY, error);
}

static void
disconnect(NatsSink *sink)
{
	/* a handler still to run for this connection counts for nothing */
	nats_acks_count_for(sink->acks, NULL);
	if (sink->js)
		jsCtx_Destroy(sink->js);
	if (sink->conn)
		natsConnection_Destroy(sink->conn);
	sink->js = NULL;
	sink->conn = NULL;
	sink->async_started = false;
	sink->known = false;
	sink->dirty = false;
}

static natsStatus
set_options(NatsSink *sink, natsOptions *opts)
{
	natsStatus s;

	s = natsOptions_SetServers(opts, (const char **) sink->url.servers, sink->url.nservers);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(opts, NATS_CONNECT_TIMEOUT_MS);
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(opts, -1);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(opts, 250);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectBufSize(opts, NATS_RECONNECT_BUF);
	/* a server that stops reading fails a write instead of blocking it */
	if (s == NATS_OK)
		s = natsOptions_SetWriteDeadline(opts, NATS_WRITE_DEADLINE_MS);
	if (s == NATS_OK && sink->url.tls)
		s = natsOptions_SetSecure(opts, true);
	if (s == NATS_OK && sink->url.tls && sink->ca_file)
		s = natsOptions_LoadCATrustedCertificates(opts, sink->ca_file);
	if (s == NATS_OK && sink->user)
		s = natsOptions_SetUserInfo(opts, sink->user, sink->password);
	if (s == NATS_OK && sink->token)
		s = natsOptions_SetToken(opts, sink->token);
	return s;
}

/*
 * Connects (in a thread of its own, interruptibly) and makes the JetStream
 * context; every library thread starts with every signal blocked.
 */
static bool
connect_sink(NatsSink *sink, ReplicantSinkResult *result)
{
	NatsConnecting *c;
	natsStatus s;
	sigset_t old;
	jsOptions jo;

	c = calloc(1, sizeof(NatsConnecting));
	if (c == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	pthread_mutex_init(&c->lock, NULL);
	c->wake_fd = sink->pipe_fds[1];
	nats_sink_block_signals(&old);
	s = nats_Open(-1);
	if (s == NATS_OK)
		s = natsOptions_Create(&c->opts);
	if (s == NATS_OK)
		s = set_options(sink, c->opts);
	nats_sink_restore_signals(&old);
	if (s == NATS_OK)
		s = nats_sink_connect(sink, c);
	else
		nats_sink_connecting_free(c);
	nats_sink_block_signals(&old);
	if (s == NATS_OK)
	{
		jsOptions_Init(&jo);
		jo.Wait = NATS_API_WAIT_MS;
		jo.PublishAsync.MaxPending = 2 * NATS_MAX_INFLIGHT;
		jo.PublishAsync.AckHandler = nats_ack_handler;
		jo.PublishAsync.AckHandlerClosure = sink->acks;
		jo.PublishAsync.StallWait = 10;
		s = natsConnection_JetStream(&sink->js, sink->conn, &jo);
	}
	nats_sink_restore_signals(&old);
	if (s != NATS_OK)
	{
		disconnect(sink);
		if (sink->abandoned)
		{
			nats_sink_fail(result, REPLICANT_SINK_RETRY, "interrupted while connecting to NATS");
			return false;
		}
		result->refused = true;
		nats_sink_fail_status(result, "could not connect to NATS", s, 0);
		return false;
	}
	nats_acks_count_for(sink->acks, sink->js);
	sink->max_payload = natsConnection_GetMaxPayload(sink->conn);
	return true;
}

/*
 * Forgets what an earlier request left unacknowledged: the connection is
 * closed (its acknowledgements then count for nothing, sink_nats_acks.c),
 * and the next send connects again.
 */
static void
drop_pending(NatsSink *sink)
{
	char drain[256];
	NatsAckCounts c;

	nats_acks_read(sink->acks, &c);
	if (sink->published > c.done)
		disconnect(sink);
	nats_acks_reset(sink->acks);
	while (read(sink->pipe_fds[0], drain, sizeof(drain)) > 0)
		;
	sink->published = sink->published_bytes = 0;
	sink->dirty = false;
}

/* ---- publishing ---- */

static void
set_header(natsMsg *msg, const char *name, const char *value)
{
	(void) natsMsgHeader_Set(msg, name, value);
}

/*
 * After the stream was learnt, what follows its mark may be in it already
 * (the mark's message removed since, or acknowledged as a duplicate): one
 * chained message at a time then, a duplicate moving the stream's sequence
 * no further, until the first one is stored; the rest of the batch goes in
 * flight.  A duplicate in flight would fail every message after it (their
 * expected sequences count it), and a clustered server keeps a failed
 * message's id as if stored (count() in sink_nats_acks.c).
 */
static bool
probe(NatsSink *sink, int64 duplicates, ReplicantSinkResult *result)
{
	NatsAckCounts c;

	if (!nats_sink_wait_acks(sink, 0, 0, result))
		return false;
	nats_acks_read(sink->acks, &c);
	if (c.duplicates > duplicates)
		sink->last_seq--;
	else
		sink->probing = false;
	return true;
}

/*
 * Publishes sink->data on sink->subject with id; chained ones expect the
 * stream's last sequence.  false (result set) on a failure.
 */
bool
nats_sink_publish(NatsSink *sink, NatsKind kind, const char *id, uint64 lsn, uint64 xid,
				  uint64 position, bool chained, ReplicantSinkResult *result)
{
	natsMsg *msg = NULL;
	jsPubOptions po;
	natsStatus s;
	sigset_t old;
	char number[32];
	NatsAckCounts before;

	/* headers and the subject count against max_payload too: 1 kB of room */
	if (sink->data.len + sink->subject.len + 1024 > sink->max_payload)
	{
		nats_sink_fail(result, REPLICANT_SINK_REJECTED,
					   "a change is larger than the NATS server's max_payload");
		return false;
	}
	if (!nats_sink_wait_acks(sink, NATS_MAX_INFLIGHT - 1, Max(NATS_MAX_INFLIGHT_BYTES - sink->data.len, 0), result))
		return false;
	nats_acks_read(sink->acks, &before);
	if (natsMsg_Create(&msg, sink->subject.data, NULL, sink->data.data, sink->data.len) != NATS_OK)
	{
		nats_sink_fail(result, REPLICANT_SINK_RETRY, "could not create a NATS message");
		return false;
	}
	set_header(msg, "Nats-Msg-Id", id);
	/*
	 * What the body is; CloudEvents' NATS binding takes a message with
	 * application/cloudevents+json for an event in structured mode.
	 */
	if (sink->content_type)
		set_header(msg, "Content-Type", sink->content_type);
	set_header(msg, "Replicant-Pipeline", sink->pipeline);
	if (sink->destination != NULL)
		set_header(msg, "Replicant-Destination", sink->destination);
	set_header(msg, "Replicant-Source", sink->source);
	set_header(msg, "Replicant-Kind", kind_names[kind]);
	if (kind == NATS_CHANGE || kind == NATS_MESSAGE)
	{
		snprintf(number, sizeof(number), UINT64_FORMAT, lsn);
		set_header(msg, "Replicant-Commit-Lsn", number);
		snprintf(number, sizeof(number), UINT64_FORMAT, xid);
		set_header(msg, "Replicant-Xid", number);
	}
	snprintf(number, sizeof(number), UINT64_FORMAT, position);
	set_header(msg, "Replicant-Position", number);

	jsPubOptions_Init(&po);
	/* a stream other than the one checked refuses it (streams' subjects may change) */
	po.ExpectStream = sink->url.stream;
	/*
	 * Set here, 0 included (libnats sends none for 0): a just restarted node
	 * may have answered the stream read from an empty past (nats-server 2.9),
	 * and an unchained first change would land behind what the stream holds.
	 */
	if (chained)
	{
		snprintf(number, sizeof(number), UINT64_FORMAT, sink->last_seq);
		set_header(msg, "Nats-Expected-Last-Sequence", number);
	}

	if (sink->async_started)
		s = js_PublishMsgAsync(sink->js, &msg, &po);
	else
	{
		/* the first one starts the acknowledgements' delivery thread */
		nats_sink_block_signals(&old);
		s = js_PublishMsgAsync(sink->js, &msg, &po);
		nats_sink_restore_signals(&old);
	}
	natsMsg_Destroy(msg);
	if (s != NATS_OK)
	{
		/*
		 * A write cut short (its deadline, a signal) may have sent part of a
		 * message and dropped the rest: the connection is not to be used
		 * again.
		 */
		disconnect(sink);
		nats_sink_fail_status(result, "could not publish to NATS", s, 0);
		return false;
	}
	sink->async_started = true;
	sink->dirty = true;
	sink->published++;
	sink->published_bytes += sink->data.len;
	if (chained)
		sink->last_seq++;
	return !(chained && sink->probing) || probe(sink, before.duplicates, result);
}

/* ---- the transport ---- */

/*
 * A change refused for its expected sequence while one after it was
 * stored: another writer's message took the refused one's place in the
 * count (the chain expects sequences, not messages), and the stream holds
 * the pipeline's changes out of commit order.  Halts, rather than retry
 * the refused change behind the later one or skip it for good.
 */
static void
check_order(const NatsAckCounts *c, ReplicantSinkResult *result)
{
	if (!c->refused || !c->stored ||
		!(c->stored_lsn > c->refused_lsn ||
		  (c->stored_lsn == c->refused_lsn && c->stored_pos > c->refused_pos)))
		return;
	result->outcome = REPLICANT_SINK_REJECTED;
	strlcpy(result->error,
			"another writer's message took the place of a change the NATS stream refused",
			sizeof(result->error));
}

static void
nats_send(ReplicantTransport *transport, const char *id, ReplicantBody *body,
		  ReplicantSinkResult *result)
{
	NatsSink *sink = (NatsSink *) transport;
	instr_time now;

	memset(result, 0, sizeof(*result));
	result->outcome = REPLICANT_SINK_OK;
	result->retry_after_ms = -1;
	INSTR_TIME_SET_CURRENT(sink->started);
	sink->latch_was_set = false;
	sink->abandoned = false;
	sink->told_bound = false;
	if (sink->url_problem != NULL)
		nats_sink_fail(result, REPLICANT_SINK_REJECTED, sink->url_problem);
	else
	{
		/* an error left publishes pending: what the stream holds is unknown */
		if (sink->dirty)
		{
			sink->known = false;
			drop_pending(sink);
		}
		/* the library gives a connection up for good on some server errors */
		if (sink->conn != NULL && natsConnection_IsClosed(sink->conn))
			disconnect(sink);
		nats_acks_check_hold(sink->acks);
		if (sink->conn != NULL || connect_sink(sink, result))
		{
			NatsAckCounts c;

			nats_sink_publish_body(sink, id, body, result);
			if (result->outcome == REPLICANT_SINK_OK)
				(void) nats_sink_wait_acks(sink, 0, 0, result);
			nats_acks_read(sink->acks, &c);
			if (c.refused && nats_sink_drain_acks(sink))
				nats_acks_read(sink->acks, &c);
			check_order(&c, result);
			/* a duplicate left the stream's sequence behind the chain's */
			if (result->outcome != REPLICANT_SINK_OK || c.duplicates > 0)
				sink->known = false;
			drop_pending(sink);
		}
	}
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, sink->started);
	result->elapsed_ms = INSTR_TIME_GET_MILLISEC(now);
	if (sink->latch_was_set)
		SetLatch(MyLatch);
}

/* Nothing overlaps: start remembers, finish sends. */
static void
nats_start(ReplicantTransport *transport, const char *id, ReplicantBody *body)
{
	NatsSink *sink = (NatsSink *) transport;

	sink->pending_id = id;
	sink->pending_body = body;
}

static void
nats_pump(ReplicantTransport *transport)
{
}

static void
nats_finish(ReplicantTransport *transport, ReplicantSinkResult *result)
{
	NatsSink *sink = (NatsSink *) transport;

	nats_send(transport, sink->pending_id, sink->pending_body, result);
	sink->pending_id = NULL;
	sink->pending_body = NULL;
}

/*
 * In a round (delivery_set.c) a NATS request is published and acknowledged
 * as it is polled, by nats_finish(), which waits for it as nats_send() does,
 * answering interrupts in its own wait: the round polls it at once.  Its
 * wait source is the pipe that the acknowledgement handler and the connect
 * thread write.
 */
static int
nats_wait_sources(ReplicantTransport *transport, ReplicantWaitSource *sources, long *timeout_ms)
{
	NatsSink *sink = (NatsSink *) transport;

	sources[0].fd = sink->pipe_fds[0];
	sources[0].events = WL_SOCKET_READABLE;
	*timeout_ms = 0;
	return 1;
}

static bool
nats_poll(ReplicantTransport *transport, ReplicantSinkResult *result)
{
	nats_finish(transport, result);
	return true;
}

static void
nats_cancel(ReplicantTransport *transport)
{
	NatsSink *sink = (NatsSink *) transport;

	sink->pending_id = NULL;
	sink->pending_body = NULL;
}

static void
nats_classify_codes(ReplicantTransport *transport, bool (*code_is_final)(int code))
{
}

static void
nats_close(ReplicantTransport *transport)
{
	NatsSink *sink = (NatsSink *) transport;

	disconnect(sink);
	/* before the pipe: a handler still to run writes to it no more */
	nats_acks_close(sink->acks);
	close(sink->pipe_fds[0]);
	close(sink->pipe_fds[1]);
	pfree(sink);
}

static const ReplicantTransportMethods nats_methods = {
	.start = nats_start,
	.pump = nats_pump,
	.wait_sources = nats_wait_sources,
	.poll = nats_poll,
	.cancel = nats_cancel,
	.classify_codes = nats_classify_codes,
	.close = nats_close,
};

/* Authorization: Bearer <token> or Basic <base64 of user:password>. */
static const char *
set_credentials(NatsSink *sink, const ReplicantSinkConfig *config)
{
	ListCell *lc1,
		*lc2;

	forboth(lc1, config->header_names, lc2, config->header_values)
	{
		const char *name = lfirst(lc1);
		const char *value = lfirst(lc2);

		if (pg_strcasecmp(name, "Authorization") != 0)
			return "NATS sinks take no header but Authorization";
		if (pg_strncasecmp(value, "Bearer ", 7) == 0)
			sink->token = pstrdup(value + 7);
		else if (pg_strncasecmp(value, "Basic ", 6) == 0)
		{
			int len = strlen(value + 6);
			char *plain = palloc0(pg_b64_dec_len(len) + 1);
			int n = pg_b64_decode(value + 6, len, (ReplicantB64Byte *) plain, pg_b64_dec_len(len));
			char *colon = n > 0 ? strchr(plain, ':') : NULL;

			if (colon == NULL)
				return "NATS Authorization header's Basic credentials are not base64 of user:password";
			*colon = '\0';
			sink->user = plain;
			sink->password = colon + 1;
		}
		else
			return "NATS Authorization header must be Bearer <token> or Basic <credentials>";
	}
	return NULL;
}

ReplicantTransport *
replicant_nats_transport_open(const ReplicantSinkConfig *config)
{
	NatsSink *sink;
	const char *problem;

	if (IsPostmasterEnvironment && !IsUnderPostmaster)
		elog(ERROR, "NATS sinks cannot be created in the postmaster");
	sink = palloc0(sizeof(NatsSink));
	sink->transport.methods = &nats_methods;
	sink->context = CurrentMemoryContext;
	sink->url_problem = replicant_nats_parse_url(config->url, &sink->url);
	problem = set_credentials(sink, config);
	if (sink->url_problem == NULL)
		sink->url_problem = problem;
	sink->ca_file = config->ca_file ? pstrdup(config->ca_file) : NULL;
	sink->content_type = config->content_type ? pstrdup(config->content_type) : NULL;
	sink->destination = config->destination ? pstrdup(config->destination) : NULL;
	sink->source = psprintf(UINT64_FORMAT "/%u", GetSystemIdentifier(), MyDatabaseId);
	sink->ack_timeout_ms = config->http_timeout_ms > 0 ? config->http_timeout_ms : NATS_DEFAULT_ACK_TIMEOUT_MS;
	if (pipe(sink->pipe_fds) != 0 ||
		fcntl(sink->pipe_fds[0], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(sink->pipe_fds[1], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(sink->pipe_fds[0], F_SETFD, FD_CLOEXEC) != 0 ||
		fcntl(sink->pipe_fds[1], F_SETFD, FD_CLOEXEC) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create a pipe: %m")));
	sink->acks = nats_acks_create(sink->pipe_fds[1]);
	sink->buf = palloc(NATS_BODY_BUFFER);
	sink->inner_buf = palloc(NATS_BODY_BUFFER);
	initStringInfo(&sink->subject);
	initStringInfo(&sink->data);
	initStringInfo(&sink->scratch);
	return &sink->transport;
}
