/*
 * format.h
 *		Wire formats: how change records (change.h) become request bodies.
 *
 * A format renders each change, transaction and message into bytes, and
 * frames those bytes into requests.  The pipeline worker, the snapshot
 * reader and the backfill reader only go through this interface, so that
 * adding a format means adding one file that fills in a ReplicantFormat
 * (and a line in format.c's list).  Rendering callbacks append to out,
 * which may hold other bytes before them (a stream batch's store), and may
 * raise errors; they run while a batch is built, never inside libcurl.
 */
#ifndef REPLICANT_FORMAT_H
#define REPLICANT_FORMAT_H

#include "lib/stringinfo.h"

#include "batch.h"
#include "change.h"
#include "destination.h"

/*
 * What the markers of a resync's reads tell the sink (docs/sink-protocol.md):
 * why the pipeline resyncs (value-free), what it had delivered (lost_from,
 * the acknowledged commit of its checkpoint; invalid when it had none) and
 * the new slot's consistent point, from which it streams again (lost_to;
 * invalid on a "first" marker: the slot is made once the sink answered it),
 * and whether the sink sweeps the table at its "last" (not when the rows it
 * would remove are ones the publications chose never to delete there).
 * On a "last" marker, key names the table's key columns as the stream's key
 * carries them (NIL: it has none), for a format that sweeps by key.
 */
typedef struct ReplicantResync
{
	const char *reason;
	XLogRecPtr lost_from;
	XLogRecPtr lost_to;
	List *key;
	bool sweep;         /* the table's publications publish delete and truncate */
	bool beside_stream; /* one destination's: its stream goes on, the slot stays */
} ReplicantResync;

/* One HTTP request made by a format. */
typedef struct ReplicantRequest
{
	char *webhook_id;        /* stable across retries of this request */
	const char *target;      /* what it writes to, for a refusal; or NULL */
	const char *destination; /* set by the caller: its name, NULL for "default" */
	ReplicantBody body;
	/* Storage the format may build the body (or its framing) in. */
	StringInfoData buffer;
	ReplicantMemoryBody memory;
	ReplicantBatchBody range;
	/*
	 * The format's own, across the requests of one range: NULL at request
	 * 0, and kept by the caller from there to the last (allocated in the
	 * memory context current at request 0, which outlives them).
	 */
	void *plan;
} ReplicantRequest;

typedef struct ReplicantFormat
{
	const char *name;         /* as pipelines select it */
	const char *content_type; /* of every request */

	/*
	 * Whether the format needs every column of a new row: an update that
	 * left TOASTed columns unchanged then halts unless its old row (REPLICA
	 * IDENTITY FULL) has them.
	 */
	bool whole_rows;

	/*
	 * Whether its sink can let its watermark go back to a resync's lost_to
	 * (docs/sink-protocol.md, "Resync"): the format carries the resync's
	 * markers and its sink keys nothing on the commit LSN beyond the
	 * watermark.  Without it, a resync whose new slot starts below what the
	 * sink acknowledged (a promoted standby that lagged) halts.
	 */
	bool resets_watermark;

	/*
	 * For a sink that reports an error code (X-ClickHouse-Exception-Code or
	 * "Code: N" in the body): whether retrying cannot fix that error.  NULL:
	 * answers are classified by their HTTP status alone.
	 */
	bool (*code_is_final)(int code);

	/*
	 * What the format calls its targets (e.g. "ClickHouse table") when it
	 * names them after the table alone, without the schema: two delivered
	 * tables of one name would share a target, so the stream halts on
	 * them.  NULL: targets keep the schema.
	 */
	const char *schemaless_target;

	/*
	 * Whether change() names a read by its read_id (change.h), which the
	 * snapshot and backfill readers then set.
	 */
	bool read_ids;

	/*
	 * Whether the format sweeps a resync's table by its key itself: the
	 * "last" markers of a resync then get ReplicantResync.key.
	 */
	bool sweeps_by_key;

	/* Written between two changes, two transactions or two messages. */
	const char *separator;

	/* One change, without separator: stream, snapshot and backfill alike. */
	void (*change)(StringInfo out, const char *pipeline,
				   const ReplicantChange *change);

	/*
	 * A stream batch stores each transaction as begin_txn, its changes and
	 * end_txn; nchanges is how many changes were stored, messages holds
	 * the transaction's rendered messages (separated), or is NULL when it
	 * has none.
	 */
	void (*begin_txn)(StringInfo out, const char *pipeline,
					  const ReplicantTxn *txn);
	void (*message)(StringInfo out, const char *pipeline,
					const ReplicantMessage *message);
	void (*end_txn)(StringInfo out, const char *pipeline,
					const ReplicantTxn *txn, int64 nchanges,
					const char *messages);

	/*
	 * Sets request to the i-th request (from 0) that delivers transactions
	 * [first, last] of batch; false when there are no more.  The worker
	 * sends them in order and checkpoints after the last.
	 */
	bool (*stream_request)(const char *pipeline, ReplicantBatch *batch,
						   int first, int last, int i,
						   ReplicantRequest *request);

	/*
	 * A snapshot body for one relation: snapshot_begin, then separated
	 * changes, then snapshot_end.  snapshot_end_len is how many bytes
	 * snapshot_end appends, for callers that keep a body within a limit.
	 * resync: NULL, or on the first and last markers of a resync's reads
	 * what the sink is told of it.  destination: as in ReplicantRequest.
	 */
	void (*snapshot_begin)(StringInfo out, const char *pipeline, const char *destination,
						   const ReplicantRelation *relation,
						   int64 backfill_id, bool first, bool last,
						   const ReplicantResync *resync);
	void (*snapshot_end)(StringInfo out);
	int snapshot_end_len;

	/* A non-transactional message, alone in its request; NULL: not delivered. */
	void (*message_request)(const char *pipeline,
							const ReplicantMessage *message,
							ReplicantRequest *request);
} ReplicantFormat;

/* The format called name, or NULL. */
extern const ReplicantFormat *replicant_format_lookup(const char *name);

/* Raises an error, with a hint listing the formats, unless name is one. */
extern void replicant_format_check_name(const char *name);

/* The format the destination is sent in. */
extern const ReplicantFormat *replicant_format_of(const ReplicantDestination *destination);

/*
 * The distinct formats of destinations (a List of ReplicantDestination), in
 * their order, as an array allocated in context; *n gets their number.
 */
extern const ReplicantFormat **replicant_formats_of(List *destinations, MemoryContext context,
													int *n);

/*
 * The webhook-id of a request of snapshot or backfill rows,
 * <pipeline>-b<backfill_id>-<position>-<read>-<part>.  A read by blocks
 * (relfilenode valid) puts the table's file in the position,
 * <relfilenode>_<block>: a rewritten table is read again from block 0,
 * other rows at the same blocks, under ids of its own.  read is a WAL
 * position written for this read alone and durable before its first
 * request (a chunk's low watermark, a shard's claim): the same window or
 * chunk read again, whose rows may have moved between its parts, has ids of
 * its own, and only a retry of the same request repeats one.
 */
extern char *replicant_format_read_webhook_id(const char *pipeline, int64 backfill_id,
											  Oid relfilenode, int64 position,
											  XLogRecPtr read, int part);

/*
 * {"reason":...,"lost_from":...,"lost_to":...}: a resync as replicant's
 * format writes it on its markers (LSNs as "16/B374D848", or null).
 */
extern void replicant_format_append_resync(StringInfo out, const ReplicantResync *resync);

/*
 * {"schema":...,"table":...,"backfill_id":...,"first":...,"last":...} and
 * "resync" when given: a snapshot request as replicant's format describes
 * it (its "snapshot" object).
 */
extern void replicant_format_append_snapshot(StringInfo out, const ReplicantRelation *relation,
											 int64 backfill_id, bool first, bool last,
											 const ReplicantResync *resync);

/* Implementations. */
extern const ReplicantFormat replicant_format_replicant;
extern const ReplicantFormat replicant_format_cloudevents;
/* CloudEvents for a transport that publishes each change alone (NATS). */
extern const ReplicantFormat replicant_format_cloudevents_nats;
extern const ReplicantFormat replicant_format_clickhouse;

#endif /* REPLICANT_FORMAT_H */
