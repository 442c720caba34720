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
 *   retried from what the stream holds.
 * - Before the first chained publish, and after any failure, the stream is
 *   asked for its last sequence and for the last message under the
 *   pipeline's subject prefix; every change at or below that message's
 *   (commit_lsn, position) is skipped.  So a restart after an outage longer
 *   than the stream's duplicate window writes nothing twice.
 * - Snapshot and backfill rows (reads, published by several processes at
 *   once during a snapshot) carry ids stable across retries of their
 *   request and are de-duplicated by JetStream within its window; their
 *   first marker is acknowledged before the rows are published and their
 *   last marker is published after the rows were acknowledged.
 *
 * Inside Postgres: the library's threads are started (nats_Open,
 * connection creation, the JetStream context, the first asynchronous
 * publish) with every signal blocked, so they never take the process's
 * signals; they call nothing of the server's: the acknowledgement handler
 * counts under a mutex and writes a byte to a pipe, which the worker waits
 * on beside its latch in short slices, answering interrupts and reloads
 * outside the library.  No library error text reaches an error or a log
 * line (it may quote a server's URL): fixed texts only.
 */
#include "postgres.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <nats/nats.h>

#include "common/base64.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "sink_nats.h"
#include "sink_nats_body.h"

#define NATS_MAX_INFLIGHT 256
#define NATS_MAX_INFLIGHT_BYTES (8 * 1024 * 1024)
#define NATS_RECONNECT_BUF (8 * 1024 * 1024)
#define NATS_API_WAIT_MS 1000
#define NATS_CONNECT_TIMEOUT_MS 2000
#define NATS_WAIT_SLICE_MS 100
#define NATS_DEFAULT_ACK_TIMEOUT_MS 30000

/* Shared with the library's threads: under lock. */
typedef struct NatsAcks
{
	pthread_mutex_t lock;
	int64 acked;
	int64 failed;
	int64 done_bytes;
	natsStatus status; /* of the first failure */
	jsErrCode code;
	bool duplicate;
	int wake_fd;
} NatsAcks;

typedef struct NatsSink
{
	ReplicantTransport transport;
	MemoryContext context;
	NatsUrl url;
	const char *url_problem; /* the URL is not one: every send halts */
	char *user;
	char *password;
	char *token;
	char *ca_file;
	int ack_timeout_ms;

	natsConnection *conn;
	jsCtx *js;
	NatsAcks *acks; /* malloc'd: the library's threads may outlive a context */
	int pipe_fds[2];
	int64 max_payload;

	/* This request. */
	int64 published;
	int64 published_bytes;
	bool dirty;        /* publishes may be pending from an earlier request */
	bool js_published; /* the context has published: it has a pending list */
	bool latch_was_set;
	bool abandoned;
	instr_time started;

	/* What the stream holds: valid while known. */
	bool known;
	uint64 last_seq;
	bool have_mark;
	uint64 mark_lsn;
	uint64 mark_pos;

	char *pipeline;
	char *buf; /* NATS_BODY_BUFFER */
	StringInfoData subject;
	StringInfoData data;
	StringInfoData scratch;

	/* start/finish */
	const char *pending_id;
	ReplicantBody *pending_body;
} NatsSink;

typedef enum NatsKind
{
	NATS_CHANGE,
	NATS_MESSAGE,
	NATS_READ,
	NATS_MARKER
} NatsKind;

static const char *const kind_names[] = {"change", "message", "read", "marker"};

/* ---- the library, its threads and signals ---- */

static void
block_signals(sigset_t *old)
{
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, old);
}

static void
restore_signals(const sigset_t *old)
{
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* The library's thread: counts, wakes the worker; nothing of the server's. */
static void
on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	NatsAcks *acks = closure;
	char byte = 1;
	int64 bytes = natsMsg_GetDataLength(msg);

	pthread_mutex_lock(&acks->lock);
	acks->done_bytes += bytes;
	if (pa != NULL)
	{
		acks->acked++;
		if (pa->Duplicate)
			acks->duplicate = true;
	}
	else
	{
		acks->failed++;
		if (acks->status == NATS_OK)
		{
			acks->status = pae ? pae->Err : NATS_ERR;
			acks->code = pae ? pae->ErrCode : 0;
			if (acks->status == NATS_OK)
				acks->status = NATS_ERR;
		}
	}
	pthread_mutex_unlock(&acks->lock);
	natsMsg_Destroy(msg);
	if (write(acks->wake_fd, &byte, 1) < 0)
	{
		/* the pipe is full: the worker is woken already */
	}
}

static void
set_failure(ReplicantSinkResult *result, ReplicantSinkOutcome outcome, const char *error)
{
	if (result->outcome != REPLICANT_SINK_OK)
		return;
	result->outcome = outcome;
	strlcpy(result->error, error, sizeof(result->error));
}

/* A retried failure named by the library's fixed text for its status. */
static void
set_status_failure(ReplicantSinkResult *result, const char *what, natsStatus s, jsErrCode code)
{
	char error[sizeof(result->error)];

	if (code == JSStreamNotFoundErr)
	{
		set_failure(result, REPLICANT_SINK_REJECTED, "NATS stream not found");
		return;
	}
	if (code == JSStreamMessageExceedsMaximumErr)
	{
		set_failure(result, REPLICANT_SINK_REJECTED,
					"a message is larger than the NATS stream's max_msg_size");
		return;
	}
	if (code != 0)
		snprintf(error, sizeof(error), "%s: %s (JetStream error %d)", what,
				 natsStatus_GetText(s), (int) code);
	else
		snprintf(error, sizeof(error), "%s: %s", what, natsStatus_GetText(s));
	set_failure(result, REPLICANT_SINK_RETRY, error);
}

static void
disconnect(NatsSink *sink)
{
	if (sink->js)
		jsCtx_Destroy(sink->js);
	if (sink->conn)
		natsConnection_Destroy(sink->conn);
	sink->js = NULL;
	sink->conn = NULL;
	sink->js_published = false;
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

/* Connects and makes the JetStream context, every signal blocked. */
static bool
connect_sink(NatsSink *sink, ReplicantSinkResult *result)
{
	natsOptions *opts = NULL;
	natsStatus s;
	sigset_t old;
	jsOptions jo;

	block_signals(&old);
	s = nats_Open(-1);
	if (s == NATS_OK)
		s = natsOptions_Create(&opts);
	if (s == NATS_OK)
		s = set_options(sink, opts);
	if (s == NATS_OK)
		s = natsConnection_Connect(&sink->conn, opts);
	if (s == NATS_OK)
	{
		jsOptions_Init(&jo);
		jo.Wait = NATS_API_WAIT_MS;
		jo.PublishAsync.MaxPending = 2 * NATS_MAX_INFLIGHT;
		jo.PublishAsync.AckHandler = on_ack;
		jo.PublishAsync.AckHandlerClosure = sink->acks;
		jo.PublishAsync.StallWait = 10;
		s = natsConnection_JetStream(&sink->js, sink->conn, &jo);
	}
	natsOptions_Destroy(opts);
	restore_signals(&old);
	if (s != NATS_OK)
	{
		disconnect(sink);
		result->refused = true;
		set_status_failure(result, "could not connect to NATS", s, 0);
		return false;
	}
	sink->max_payload = natsConnection_GetMaxPayload(sink->conn);
	return true;
}

/* ---- waiting ---- */

/*
 * Waits up to ms for an acknowledgement or the latch, answering
 * interrupts and reloads; false when the process is to die (the request is
 * abandoned, so that what was acknowledged is committed first).
 */
static bool
wait_slice(NatsSink *sink, long ms)
{
	int rc = WaitLatchOrSocket(MyLatch,
							   WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   sink->pipe_fds[0], ms, PG_WAIT_EXTENSION);

	if (rc & WL_SOCKET_READABLE)
	{
		char drain[256];

		while (read(sink->pipe_fds[0], drain, sizeof(drain)) > 0)
			;
	}
	if (rc & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		sink->latch_was_set = true;
	}
	if (ProcDiePending)
	{
		sink->abandoned = true;
		return false;
	}
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	CHECK_FOR_INTERRUPTS();
	return true;
}

static void
read_acks(NatsSink *sink, int64 *done, int64 *done_bytes, int64 *failed)
{
	pthread_mutex_lock(&sink->acks->lock);
	*done = sink->acks->acked + sink->acks->failed;
	*done_bytes = sink->acks->done_bytes;
	*failed = sink->acks->failed;
	pthread_mutex_unlock(&sink->acks->lock);
}

/*
 * Waits until at most max_pending messages (and max_bytes) are
 * unacknowledged; false (result set) on a failure, the ack timeout or an
 * abandoned wait.
 */
static bool
wait_acks(NatsSink *sink, int64 max_pending, int64 max_bytes, ReplicantSinkResult *result)
{
	instr_time deadline_base;
	int64 last_done = -1;

	INSTR_TIME_SET_CURRENT(deadline_base);
	for (;;)
	{
		int64 done,
			done_bytes,
			failed;
		instr_time now;

		read_acks(sink, &done, &done_bytes, &failed);
		if (failed > 0)
		{
			natsStatus s;
			jsErrCode code;

			pthread_mutex_lock(&sink->acks->lock);
			s = sink->acks->status;
			code = sink->acks->code;
			pthread_mutex_unlock(&sink->acks->lock);
			set_status_failure(result, "NATS publish failed", s, code);
			return false;
		}
		if (sink->published - done <= max_pending &&
			sink->published_bytes - done_bytes <= max_bytes)
			return true;
		INSTR_TIME_SET_CURRENT(now);
		if (done != last_done)
		{
			last_done = done;
			deadline_base = now;
		}
		INSTR_TIME_SUBTRACT(now, deadline_base);
		if (INSTR_TIME_GET_MILLISEC(now) > sink->ack_timeout_ms)
		{
			set_failure(result, REPLICANT_SINK_RETRY, "timed out waiting for NATS acknowledgements");
			return false;
		}
		if (!wait_slice(sink, NATS_WAIT_SLICE_MS))
		{
			set_failure(result, REPLICANT_SINK_RETRY, "interrupted while waiting for NATS acknowledgements");
			return false;
		}
	}
}

/* Forgets what an earlier request left pending; its acks are not counted. */
static void
drop_pending(NatsSink *sink)
{
	natsMsgList pending;
	sigset_t old;
	char drain[256];

	/* libnats 3.4 crashes on a context that never published asynchronously */
	if (sink->js && sink->js_published)
	{
		block_signals(&old);
		if (js_PublishAsyncGetPendingList(&pending, sink->js) == NATS_OK)
			natsMsgList_Destroy(&pending);
		restore_signals(&old);
	}
	pthread_mutex_lock(&sink->acks->lock);
	sink->acks->acked = sink->acks->failed = sink->acks->done_bytes = 0;
	sink->acks->status = NATS_OK;
	sink->acks->code = 0;
	sink->acks->duplicate = false;
	pthread_mutex_unlock(&sink->acks->lock);
	while (read(sink->pipe_fds[0], drain, sizeof(drain)) > 0)
		;
	sink->published = sink->published_bytes = 0;
	sink->dirty = false;
}

/* ---- the stream ---- */

/* The stream's last sequence and the last message of this pipeline. */
static bool
learn_stream(NatsSink *sink, ReplicantSinkResult *result)
{
	jsStreamInfo *si = NULL;
	natsMsg *msg = NULL;
	jsErrCode code = 0;
	natsStatus s;
	sigset_t old;
	char *subject = psprintf("%s.>", sink->url.prefix);

	block_signals(&old);
	s = js_GetStreamInfo(&si, sink->js, sink->url.stream, NULL, &code);
	restore_signals(&old);
	if (s != NATS_OK)
	{
		if (s == NATS_NOT_FOUND && code == 0)
			code = JSStreamNotFoundErr;
		set_status_failure(result, "could not read the NATS stream's state", s, code);
		return false;
	}
	sink->last_seq = si->State.LastSeq;
	jsStreamInfo_Destroy(si);

	code = 0;
	block_signals(&old);
	s = js_GetLastMsg(&msg, sink->js, sink->url.stream, subject, NULL, &code);
	restore_signals(&old);
	sink->have_mark = false;
	if (s == NATS_OK)
	{
		const char *id = NULL;
		size_t plen = strlen(sink->pipeline);
		unsigned long long lsn,
			pos;

		/* <pipeline>:<lsn>:<position>; reads and markers have other ids */
		if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id != NULL &&
			strncmp(id, sink->pipeline, plen) == 0 && id[plen] == ':' &&
			sscanf(id + plen + 1, "%llu:%llu", &lsn, &pos) == 2)
		{
			sink->have_mark = true;
			sink->mark_lsn = lsn;
			sink->mark_pos = pos;
		}
		natsMsg_Destroy(msg);
	}
	else if (s != NATS_NOT_FOUND)
	{
		set_status_failure(result, "could not read the NATS stream's last message", s, code);
		return false;
	}
	sink->known = true;
	return true;
}

/* ---- publishing ---- */

static void
set_header(natsMsg *msg, const char *name, const char *value)
{
	(void) natsMsgHeader_Set(msg, name, value);
}

/*
 * Publishes sink->data on sink->subject with id; chained ones expect the
 * stream's last sequence.  false (result set) on a failure.
 */
static bool
publish(NatsSink *sink, NatsKind kind, const char *id, uint64 lsn, uint64 xid,
		uint64 position, bool chained, ReplicantSinkResult *result)
{
	natsMsg *msg = NULL;
	jsPubOptions po;
	natsStatus s;
	sigset_t old;
	char number[32];

	/* headers and the subject count against max_payload too: 1 kB of room */
	if (sink->data.len + sink->subject.len + 1024 > sink->max_payload)
	{
		set_failure(result, REPLICANT_SINK_REJECTED,
					"a change is larger than the NATS server's max_payload");
		return false;
	}
	if (!wait_acks(sink, NATS_MAX_INFLIGHT - 1, NATS_MAX_INFLIGHT_BYTES - sink->data.len, result))
		return false;
	if (natsMsg_Create(&msg, sink->subject.data, NULL, sink->data.data, sink->data.len) != NATS_OK)
	{
		set_failure(result, REPLICANT_SINK_RETRY, "could not create a NATS message");
		return false;
	}
	set_header(msg, "Nats-Msg-Id", id);
	set_header(msg, "Replicant-Pipeline", sink->pipeline);
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
	if (chained && sink->last_seq > 0)
		po.ExpectLastSeq = sink->last_seq;
	block_signals(&old);
	s = js_PublishMsgAsync(sink->js, &msg, &po);
	restore_signals(&old);
	natsMsg_Destroy(msg);
	if (s != NATS_OK)
	{
		set_status_failure(result, "could not publish to NATS", s, 0);
		return false;
	}
	sink->dirty = true;
	sink->js_published = true;
	sink->published++;
	sink->published_bytes += sink->data.len;
	if (chained)
		sink->last_seq++;
	return true;
}

/* The schema and table of a rendered change, into schema and table. */
static bool
change_relation(NatsSink *sink, StringInfo schema, StringInfo table)
{
	ReplicantBody body;
	ReplicantMemoryBody memory;
	NatsBodyReader reader;
	char *buf = palloc(NATS_BODY_BUFFER);
	int found = 0;

	replicant_body_from_buffer(&body, &memory, &sink->data);
	nats_body_begin(&reader, &body, buf);
	if (nats_body_object_begin(&reader))
		while (found < 2 && nats_body_next_key(&reader, &sink->scratch))
		{
			if (strcmp(sink->scratch.data, "schema") == 0)
				found += nats_body_string(&reader, schema);
			else if (strcmp(sink->scratch.data, "table") == 0)
				found += nats_body_string(&reader, table);
			else
				nats_body_value(&reader, NULL);
		}
	pfree(buf);
	return found == 2 && !reader.error;
}

static void
table_subject(NatsSink *sink, StringInfo schema, StringInfo table)
{
	resetStringInfo(&sink->subject);
	appendStringInfoString(&sink->subject, sink->url.prefix);
	appendStringInfoChar(&sink->subject, '.');
	nats_subject_token(&sink->subject, schema->data, schema->len);
	appendStringInfoChar(&sink->subject, '.');
	nats_subject_token(&sink->subject, table->data, table->len);
}

/* A logical message's subject, from its rendered "prefix". */
static bool
message_subject(NatsSink *sink, uint64 *lsn)
{
	ReplicantBody body;
	ReplicantMemoryBody memory;
	NatsBodyReader reader;
	char *buf = palloc(NATS_BODY_BUFFER);
	StringInfoData prefix;
	bool have_prefix = false;

	initStringInfo(&prefix);
	replicant_body_from_buffer(&body, &memory, &sink->data);
	nats_body_begin(&reader, &body, buf);
	if (nats_body_object_begin(&reader))
		while (nats_body_next_key(&reader, &sink->scratch))
		{
			if (strcmp(sink->scratch.data, "prefix") == 0)
				have_prefix = nats_body_string(&reader, &prefix);
			else if (strcmp(sink->scratch.data, "lsn") == 0)
				nats_body_uint64(&reader, lsn);
			else
				nats_body_value(&reader, NULL);
		}
	resetStringInfo(&sink->subject);
	appendStringInfo(&sink->subject, "%s._messages.", sink->url.prefix);
	nats_subject_token(&sink->subject, prefix.data, prefix.len);
	pfree(prefix.data);
	pfree(buf);
	return have_prefix && !reader.error;
}

static bool
parse_failed(NatsBodyReader *reader, ReplicantSinkResult *result)
{
	set_failure(result, REPLICANT_SINK_REJECTED, "could not read the rendered batch");
	return false;
}

/*
 * One change or message of the stream, in sink->data: skipped when the
 * stream holds it already, else published in the chain.
 */
static bool
publish_stream_item(NatsSink *sink, NatsKind kind, uint64 lsn, uint64 xid,
					uint64 position, ReplicantSinkResult *result)
{
	StringInfoData schema,
		table;
	char *id;
	uint64 message_lsn = 0;
	bool ok;

	if (sink->have_mark &&
		(lsn < sink->mark_lsn || (lsn == sink->mark_lsn && position <= sink->mark_pos)))
		return true;
	if (kind == NATS_CHANGE)
	{
		initStringInfo(&schema);
		initStringInfo(&table);
		ok = change_relation(sink, &schema, &table);
		if (ok)
			table_subject(sink, &schema, &table);
		pfree(schema.data);
		pfree(table.data);
	}
	else
		ok = message_subject(sink, &message_lsn);
	if (!ok)
	{
		set_failure(result, REPLICANT_SINK_REJECTED, "could not read the rendered batch");
		return false;
	}
	id = psprintf("%s:" UINT64_FORMAT ":" UINT64_FORMAT, sink->pipeline, lsn, position);
	ok = publish(sink, kind, id, lsn, xid, position, true, result);
	pfree(id);
	if (ok)
	{
		sink->have_mark = true;
		sink->mark_lsn = lsn;
		sink->mark_pos = position;
	}
	return ok;
}

/* {"xid":N,"commit_lsn":N,...,"changes":[...],"messages":[...]} */
static bool
publish_transaction(NatsSink *sink, NatsBodyReader *reader, ReplicantSinkResult *result)
{
	StringInfoData key;
	uint64 xid = 0;
	uint64 lsn = 0;
	uint64 position = 0;
	bool ok = nats_body_object_begin(reader);

	initStringInfo(&key);
	while (ok && nats_body_next_key(reader, &key))
	{
		bool changes = strcmp(key.data, "changes") == 0;

		if (strcmp(key.data, "xid") == 0)
			ok = nats_body_uint64(reader, &xid);
		else if (strcmp(key.data, "commit_lsn") == 0)
			ok = nats_body_uint64(reader, &lsn);
		else if (changes || strcmp(key.data, "messages") == 0)
		{
			ok = nats_body_array_begin(reader);
			while (ok && nats_body_array_next(reader))
			{
				resetStringInfo(&sink->data);
				ok = nats_body_value(reader, &sink->data);
				if (!ok)
					break;
				ok = publish_stream_item(sink, changes ? NATS_CHANGE : NATS_MESSAGE,
										 lsn, xid, ++position, result);
				if (!ok)
				{
					pfree(key.data);
					return false;
				}
			}
		}
		else
			ok = nats_body_value(reader, NULL);
	}
	pfree(key.data);
	if (!ok || reader->error)
		return parse_failed(reader, result);
	return true;
}

/* What a snapshot or backfill request says of itself. */
typedef struct NatsSnapshot
{
	bool seen;
	StringInfoData raw; /* the "snapshot" object as rendered */
	StringInfoData schema;
	StringInfoData table;
	bool first;
	bool last;
	bool first_sent;
	uint64 reads;
} NatsSnapshot;

static bool
read_snapshot(NatsSink *sink, NatsBodyReader *reader, NatsSnapshot *snap)
{
	ReplicantBody body;
	ReplicantMemoryBody memory;
	NatsBodyReader inner;
	char *buf;

	snap->seen = true;
	initStringInfo(&snap->raw);
	initStringInfo(&snap->schema);
	initStringInfo(&snap->table);
	if (!nats_body_value(reader, &snap->raw))
		return false;
	buf = palloc(NATS_BODY_BUFFER);
	replicant_body_from_buffer(&body, &memory, &snap->raw);
	nats_body_begin(&inner, &body, buf);
	if (nats_body_object_begin(&inner))
		while (nats_body_next_key(&inner, &sink->scratch))
		{
			if (strcmp(sink->scratch.data, "schema") == 0)
				nats_body_string(&inner, &snap->schema);
			else if (strcmp(sink->scratch.data, "table") == 0)
				nats_body_string(&inner, &snap->table);
			else if (strcmp(sink->scratch.data, "first") == 0)
				nats_body_bool(&inner, &snap->first);
			else if (strcmp(sink->scratch.data, "last") == 0)
				nats_body_bool(&inner, &snap->last);
			else
				nats_body_value(&inner, NULL);
		}
	pfree(buf);
	return !inner.error;
}

/* A marker, acknowledged before anything is published after it. */
static bool
publish_marker(NatsSink *sink, NatsSnapshot *snap, const char *id, const char *which,
			   ReplicantSinkResult *result)
{
	char *marker_id = psprintf("%s:%s", id, which);
	bool ok;

	if (!wait_acks(sink, 0, 0, result))
		return false;
	table_subject(sink, &snap->schema, &snap->table);
	resetStringInfo(&sink->data);
	appendStringInfo(&sink->data, "{\"pipeline\":\"%s\",\"kind\":\"snapshot\",\"snapshot\":%s}",
					 sink->pipeline, snap->raw.data);
	ok = publish(sink, NATS_MARKER, marker_id, 0, 0, 0, false, result) &&
		 wait_acks(sink, 0, 0, result);
	pfree(marker_id);
	return ok;
}

/* The rows of a snapshot or backfill request: <id>:<n>, n from 1. */
static bool
publish_reads(NatsSink *sink, NatsBodyReader *reader, NatsSnapshot *snap, const char *id,
			  ReplicantSinkResult *result)
{
	if (!snap->seen)
		return parse_failed(reader, result);
	if (!nats_body_array_begin(reader))
		return parse_failed(reader, result);
	while (nats_body_array_next(reader))
	{
		char *read_id;
		bool ok;

		if (snap->first && !snap->first_sent)
		{
			if (!publish_marker(sink, snap, id, "first", result))
				return false;
			snap->first_sent = true;
		}
		resetStringInfo(&sink->data);
		if (!nats_body_value(reader, &sink->data))
			break;
		table_subject(sink, &snap->schema, &snap->table);
		read_id = psprintf("%s:" UINT64_FORMAT, id, ++snap->reads);
		ok = publish(sink, NATS_READ, read_id, 0, 0, snap->reads, false, result);
		pfree(read_id);
		if (!ok)
			return false;
	}
	if (reader->error)
		return parse_failed(reader, result);
	return true;
}

static bool
ensure_known(NatsSink *sink, ReplicantSinkResult *result)
{
	return sink->known || learn_stream(sink, result);
}

static void
set_pipeline(NatsSink *sink, const char *name)
{
	MemoryContext old;

	if (sink->pipeline != NULL)
		return;
	old = MemoryContextSwitchTo(sink->context);
	sink->pipeline = pstrdup(name);
	if (sink->url.prefix[0] == '\0')
		snprintf(sink->url.prefix, sizeof(sink->url.prefix), "replicant.%s", name);
	MemoryContextSwitchTo(old);
}

/* Publishes every change, message, read and marker of body. */
static void
publish_body(NatsSink *sink, const char *id, ReplicantBody *body, ReplicantSinkResult *result)
{
	NatsBodyReader reader;
	NatsSnapshot snap = {0};
	StringInfoData key;
	bool ok;

	initStringInfo(&key);
	nats_body_begin(&reader, body, sink->buf);
	ok = nats_body_object_begin(&reader);
	while (ok && nats_body_next_key(&reader, &key))
	{
		if (strcmp(key.data, "pipeline") == 0)
		{
			ok = nats_body_string(&reader, &sink->scratch);
			if (ok)
				set_pipeline(sink, sink->scratch.data);
		}
		else if (sink->pipeline == NULL)
			ok = parse_failed(&reader, result);
		else if (strcmp(key.data, "transactions") == 0)
		{
			ok = ensure_known(sink, result) && nats_body_array_begin(&reader);
			while (ok && nats_body_array_next(&reader))
				ok = publish_transaction(sink, &reader, result);
		}
		else if (strcmp(key.data, "message") == 0)
		{
			resetStringInfo(&sink->data);
			ok = ensure_known(sink, result) && nats_body_value(&reader, &sink->data);
			if (ok)
			{
				uint64 lsn = 0;

				ok = message_subject(sink, &lsn) || parse_failed(&reader, result);
				ok = ok && publish_stream_item(sink, NATS_MESSAGE, lsn, 0, 0, result);
			}
		}
		else if (strcmp(key.data, "snapshot") == 0)
			ok = read_snapshot(sink, &reader, &snap) || parse_failed(&reader, result);
		else if (strcmp(key.data, "changes") == 0)
			ok = publish_reads(sink, &reader, &snap, id, result);
		else
			ok = nats_body_value(&reader, NULL);
	}
	pfree(key.data);
	if (reader.error)
		(void) parse_failed(&reader, result);
	if (result->outcome != REPLICANT_SINK_OK || !snap.seen)
		return;
	/* reads moved the stream's sequence outside the chain */
	sink->known = false;
	if (snap.first && !snap.first_sent &&
		!publish_marker(sink, &snap, id, "first", result))
		return;
	if (snap.last)
		(void) publish_marker(sink, &snap, id, "last", result);
}

/* ---- the transport ---- */

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
	if (sink->url_problem != NULL)
		set_failure(result, REPLICANT_SINK_REJECTED, sink->url_problem);
	else
	{
		/* an error left publishes pending: what the stream holds is unknown */
		if (sink->dirty)
		{
			sink->known = false;
			drop_pending(sink);
		}
		if (sink->conn != NULL || connect_sink(sink, result))
		{
			publish_body(sink, id, body, result);
			if (result->outcome == REPLICANT_SINK_OK)
				(void) wait_acks(sink, 0, 0, result);
			if (result->outcome != REPLICANT_SINK_OK || sink->acks->duplicate)
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
	close(sink->pipe_fds[0]);
	close(sink->pipe_fds[1]);
	pthread_mutex_destroy(&sink->acks->lock);
	free(sink->acks);
	pfree(sink);
}

static const ReplicantTransportMethods nats_methods = {
	.send = nats_send,
	.start = nats_start,
	.pump = nats_pump,
	.finish = nats_finish,
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
	sink->ack_timeout_ms = config->http_timeout_ms > 0 ? config->http_timeout_ms : NATS_DEFAULT_ACK_TIMEOUT_MS;
	sink->acks = calloc(1, sizeof(NatsAcks));
	if (sink->acks == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	pthread_mutex_init(&sink->acks->lock, NULL);
	if (pipe(sink->pipe_fds) != 0 ||
		fcntl(sink->pipe_fds[0], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(sink->pipe_fds[1], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(sink->pipe_fds[0], F_SETFD, FD_CLOEXEC) != 0 ||
		fcntl(sink->pipe_fds[1], F_SETFD, FD_CLOEXEC) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create a pipe: %m")));
	sink->acks->wake_fd = sink->pipe_fds[1];
	sink->buf = palloc(NATS_BODY_BUFFER);
	initStringInfo(&sink->subject);
	initStringInfo(&sink->data);
	initStringInfo(&sink->scratch);
	return &sink->transport;
}
