/*
 * fanout_outlet.h
 *		The fan-out's state, shared by the files that make it up (not a
 *		public interface: fanout.h is, which names it ReplicantFanout):
 *		fanout.c sends batches and messages, fanout_reads.c backfill chunks
 *		and a resync's markers, fanout_outlet.c keeps each
 *		destination's acknowledgements and halts, fanout_laggard.c leaves
 *		a failing destination behind.
 */
#ifndef REPLICANT_FANOUT_OUTLET_H
#define REPLICANT_FANOUT_OUTLET_H

#include "batch.h"
#include "delivery_set.h"
#include "destination.h"
#include "decoder.h"
#include "pipeline.h"
#include "shmem.h"
#include "format.h"
#include "render_target.h"
#include "transport.h"

/* One destination being delivered to. */
typedef struct Outlet
{
	ReplicantDestination *destination;
	ReplicantDestinationSlot *place; /* what the slot shows of it */
	ReplicantTransport *sink;
	ReplicantRenderTarget *target;
	const ReplicantFormat *format;
	bool live;                   /* not halted */
	bool attached;               /* sent each batch as decoded: not left behind */
	bool behind;                 /* left behind, and its sink took the probe */
	ReplicantBatchCursor cursor; /* in its target's batches, while attached */
	XLogRecPtr delivered_upto;   /* commits at or below it were delivered to it */
	bool at_hole;                /* it was sent all it can have below a hole
								  * of its target, and halts there */

	/* Transactions [first, last] of batch, being sent as request part. */
	ReplicantBatch *batch;
	int first;
	int last;
	int part;
	size_t bytes;
	ReplicantRequest request;
	ReplicantDelivery delivery;
	bool sending;                   /* delivery holds a request: in a round or waiting to retry */
	MemoryContext context;          /* the range's requests, from one round to the next */
	ReplicantMemoryBody probe_body; /* left behind: the request kept, copied */
	ReplicantBatchTxn probe_txn;    /* the last transaction of its range */
	int64 probe_txns;               /* transactions and changes of that range */
	int64 probe_changes;
	bool probe_ends_range;            /* its last request: taken, the range is */
	ReplicantRetryState marker_retry; /* a resync's first markers' retries */
} Outlet;

struct ReplicantFanout
{
	ReplicantPipelineSlot *slot;
	ReplicantPipeline *pipeline;
	ReplicantDecoder *decoder;
	XLogRecPtr start_lsn; /* confirmed as streaming began */
	const char *chunk_table;
	/* What follows the batches being sent: who must be sent them all first. */
	XLogRecPtr drain_messages_upto; /* the last message's, or invalid */
	bool drain_chunk;               /* a completed chunk */
	int32 drain_chunk_only;         /* its only destination, 0: all */
	int noutlets;
	Outlet outlets[REPLICANT_MAX_DESTINATIONS];
};

/* Whether o streams on: not halted, nor about to halt at a hole. */
extern bool replicant_outlet_streams(const Outlet *o);
extern int replicant_fanout_live_outlets(struct ReplicantFanout *f);
/* Whether a destination other than o streams on: else o's halt is the pipeline's. */
extern bool replicant_outlet_others_stream(struct ReplicantFanout *f, const Outlet *o);
/* The id o sends a request of the format's id under: destinations never share one. */
extern char *replicant_outlet_wire_id(struct ReplicantFanout *f, Outlet *o, const char *id);
/* After a checkpoint commit: the run progressed, and the floor is confirmed. */
extern void replicant_fanout_checkpoint_committed(struct ReplicantFanout *f);
/* Whether o was sent every batch sealed so far. */
extern bool replicant_outlet_sent_all(const Outlet *o);
/*
 * Whether o must be sent every batch before the worker goes on: a message
 * or a chunk that goes to it follows them.
 */
extern bool replicant_outlet_must_drain(struct ReplicantFanout *f, const Outlet *o);
/* Whether o waits for its request's next attempt to come due. */
extern bool replicant_outlet_waiting(struct ReplicantFanout *f, const Outlet *o);
/* Halts o alone (the last one: the pipeline), for a value-free reason. */
extern void replicant_outlet_halt(struct ReplicantFanout *f, Outlet *o, const char *reason, XLogRecPtr lsn);
/* A sink's refusal of o's request: o halts (the last one: the pipeline's). */
extern void replicant_outlet_refused(struct ReplicantFanout *f, Outlet *o, const ReplicantSinkResult *result,
									 const char *what, const char *context);
/* Counts an acknowledged request in replicant.status and replicant.metrics. */
extern void replicant_outlet_note_delivered(struct ReplicantFanout *f, Outlet *o, int64 transactions,
											int64 changes, int messages, size_t bytes, TimestampTz now);

/*
 * Sends destination_id (0: every destination) every batch sealed so far,
 * before a read that goes to it (fanout_reads.c); it may halt or be left
 * behind instead.
 */
extern void replicant_fanout_drain_for_read(struct ReplicantFanout *f, int32 destination_id);
/* Confirms lsn to the slot, as replicant_fanout_confirm(). */
extern void replicant_outlet_confirm(struct ReplicantFanout *f, XLogRecPtr lsn);
/* Commits the pending checkpoints, if any, and confirms the floor. */
extern void replicant_outlet_commit_pending(struct ReplicantFanout *f);

#endif /* REPLICANT_FANOUT_OUTLET_H */
