/*
 * sink_nats_internal.h
 *		What the NATS transport's files share: the transport's state, the
 *		calls sink_nats_batch.c (a rendered batch into messages) makes of
 *		sink_nats.c (the connection, publishing), sink_nats_stream.c (the
 *		stream's state) and sink_nats_acks.c (acknowledgements).
 */
#ifndef REPLICANT_SINK_NATS_INTERNAL_H
#define REPLICANT_SINK_NATS_INTERNAL_H

#include <pthread.h>
#include <signal.h>

#include <nats/nats.h>

#include "portability/instr_time.h"

#include "sink_nats_url.h"
#include "transport.h"
#include "sink_nats_body.h"

/* What the acknowledgements of the current request say (sink_nats_acks.c). */
typedef struct NatsAckCounts
{
	int64 done; /* acknowledged or failed */
	int64 done_bytes;
	int64 failed;
	natsStatus status; /* of the first failure */
	jsErrCode code;
	bool unstored;    /* it was a duplicate of a message not stored */
	int64 duplicates; /* messages that were in the stream already */
	/* the first change refused for its expected sequence, the last stored */
	bool refused;
	uint64 refused_lsn;
	uint64 refused_pos;
	bool stored;
	uint64 stored_lsn;
	uint64 stored_pos;
} NatsAckCounts;

/* Shared with the library's threads (sink_nats_acks.c). */
typedef struct NatsAcks NatsAcks;

/*
 * A connection being made in a thread of its own: natsConnection_Connect
 * tries every server in turn (NATS_CONNECT_TIMEOUT_MS each), which the
 * worker waits for in slices, answering interrupts.  malloc'd, shared
 * under lock; whoever of the thread and an abandoning worker comes last
 * frees it (and an abandoned connection).
 */
typedef struct NatsConnecting
{
	pthread_mutex_t lock;
	natsOptions *opts;
	natsConnection *conn;
	natsStatus status;
	bool done;
	bool abandoned;
	int wake_fd;
} NatsConnecting;

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
	char *content_type; /* of each message's body, as the format says */
	int ack_timeout_ms;

	natsConnection *conn;
	jsCtx *js;
	bool async_started; /* js has published asynchronously: its threads run */
	NatsAcks *acks;     /* never freed: the library's threads may outlive the transport */
	int pipe_fds[2];
	int64 max_payload;

	/* This request. */
	int64 published;
	int64 published_bytes;
	bool dirty; /* publishes may be pending from an earlier request */
	bool latch_was_set;
	bool abandoned;
	bool told_bound; /* its wait at the in-flight bound was logged */
	instr_time started;

	/* What the stream holds: valid while known. */
	bool known;
	bool probing;         /* publish one at a time while the stream has them */
	int64 stream_created; /* which stream of that name it is */
	uint64 last_seq;
	bool have_mark;
	uint64 mark_lsn;
	uint64 mark_pos;

	char *pipeline;
	char *destination; /* Replicant-Destination; NULL for "default" */
	char *id_name;     /* what its stream ids begin with: <pipeline>[.<destination>] */
	char *source;      /* <system identifier>/<database oid>: Replicant-Source */
	char *buf;         /* NATS_BODY_BUFFER: the batch */
	char *inner_buf;   /* NATS_BODY_BUFFER: one change, read again */
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

#define NATS_WAIT_SLICE_MS 100

/* Blocks every signal of the calling thread, before starting a library thread. */
extern void nats_sink_block_signals(sigset_t *old);
extern void nats_sink_restore_signals(const sigset_t *old);

/*
 * Acknowledgements (sink_nats_acks.c).  nats_ack_handler is the library's
 * acknowledgement handler, its closure the NatsAcks; only those of the
 * context given to nats_acks_count_for count.  The mark is the highest
 * change or message (commit_lsn, position) JetStream acknowledged.
 */
extern NatsAcks *nats_acks_create(int wake_fd);
extern void nats_acks_close(NatsAcks *acks);
extern void nats_acks_count_for(NatsAcks *acks, jsCtx *js);
extern void nats_acks_reset(NatsAcks *acks);
extern void nats_acks_read(NatsAcks *acks, NatsAckCounts *counts);
extern bool nats_acks_mark(NatsAcks *acks, uint64 *lsn, uint64 *pos);
extern void nats_acks_forget_mark(NatsAcks *acks);
extern void nats_acks_check_hold(NatsAcks *acks);
extern void nats_ack_handler(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae,
							 void *closure);

/*
 * Waits up to ms for the wake pipe or the latch, answering interrupts and
 * reloads; false when the process is to die (sink->abandoned).
 */
extern bool nats_sink_wait_slice(NatsSink *sink, long ms);

/*
 * Connects with c->opts in a thread of its own (sink_nats_connect.c) and
 * sets sink->conn; c is consumed.  NATS_ERR when interrupted.
 */
extern natsStatus nats_sink_connect(NatsSink *sink, NatsConnecting *c);
extern void nats_sink_connecting_free(NatsConnecting *c);

/* Sets result's outcome and error, unless a failure is set already. */
extern void nats_sink_fail(ReplicantSinkResult *result, ReplicantSinkOutcome outcome,
						   const char *error);

/* The same for a library status: halts on what retrying cannot fix. */
extern void nats_sink_fail_status(ReplicantSinkResult *result, const char *what,
								  natsStatus s, jsErrCode code);

/*
 * Waits until at most max_pending messages (and max_bytes) are
 * unacknowledged; false (result set) on a failure, the acknowledgement
 * timeout or an abandoned wait.
 */
extern bool nats_sink_wait_acks(NatsSink *sink, int64 max_pending, int64 max_bytes,
								ReplicantSinkResult *result);

/*
 * Waits, within the acknowledgement timeout, for every message in flight to
 * be answered, whatever the answers; false when the wait was cut short.
 */
extern bool nats_sink_drain_acks(NatsSink *sink);

/*
 * Checks that the stream takes the pipeline's subjects and nothing else
 * writes it, its last sequence into *last_seq (unless NULL); false (result
 * set) if not (sink_nats_stream.c).
 */
extern bool nats_sink_check_stream(NatsSink *sink, uint64 *last_seq, ReplicantSinkResult *result);

/* Checks the stream, asks it for its last sequence and this pipeline's last message. */
extern bool nats_sink_learn_stream(NatsSink *sink, ReplicantSinkResult *result);

/*
 * Publishes sink->data on sink->subject with id; chained ones expect the
 * stream's last sequence.  false (result set) on a failure.
 */
extern bool nats_sink_publish(NatsSink *sink, NatsKind kind, const char *id, uint64 lsn,
							  uint64 xid, uint64 position, bool chained,
							  ReplicantSinkResult *result);

/* Publishes every change, message, read and marker of body (sink_nats_batch.c). */
extern void nats_sink_publish_body(NatsSink *sink, const char *id, ReplicantBody *body,
								   ReplicantSinkResult *result);

#endif /* REPLICANT_SINK_NATS_INTERNAL_H */
