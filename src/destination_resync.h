/*
 * destination_resync.h
 *		One destination resyncs alone, beside the stream of the others:
 *		on request (resync_pipeline(pipeline, destination)), or with its
 *		on_slot_loss => 'resync' once it is past its own max_retained_wal
 *		while others hold the slot.  Its checkpoint moves to the WAL insert
 *		position (it streams again from there, as an added destination
 *		does), every published table is backfilled for it alone, and the
 *		first and last markers of those backfills carry the resync, so that
 *		its sink sweeps what was not sent again (docs/sink-protocol.md,
 *		"Resync").
 */
#ifndef REPLICANT_DESTINATION_RESYNC_H
#define REPLICANT_DESTINATION_RESYNC_H

#include "destination.h"
#include "pipeline.h"
#include "utils/array.h"

/* What begins a resync of one destination: its count of resyncs in a row. */
typedef enum ReplicantResyncStart
{
	REPLICANT_RESYNC_REQUESTED, /* resync_pipeline(): the count starts over */
	REPLICANT_RESYNC_ON_LOSS,   /* past its budget: counted */
	REPLICANT_RESYNC_AGAIN,     /* begun again mid-way: the count stays */
} ReplicantResyncStart;

/*
 * Begins (or begins again) the resync of destination_id for reason
 * (value-free; a resync under way keeps its first reason): its own
 * backfills are cancelled and every table the publications (text[])
 * deliver is planned anew for it, read as owner; its checkpoint becomes
 * the WAL insert position and its halt, and a release of its hold on the
 * slot, are cleared; start says what becomes of resync_losses; it
 * streams again from from (invalid: the WAL insert position), unless
 * begun again: then its checkpoint stays.  Returns
 * NULL, or, changing nothing, the value-free reason why it cannot resync:
 * owner may not read a table whole, or its checkpoint is below where this
 * server's timeline began (a promoted standby).  Inside
 * replicant_catalog_begin/end or enter/leave, no worker delivering to it.
 */
extern char *replicant_destination_resync_begin(int32 pipeline_id, int32 destination_id, Oid owner,
												ArrayType *publications, const char *reason,
												ReplicantResyncStart start, XLogRecPtr from);

/* What replicant_destination_resync_begin would refuse, changing nothing. */
extern char *replicant_destination_resync_refusal(int32 destination_id, Oid owner, ArrayType *publications);

/*
 * replicant_destination_resync_begin from a worker, for destination of
 * pipeline, in the caller's transaction (SPI, replicant's privileges).
 */
extern char *replicant_destination_resync_begin_in(const ReplicantPipeline *pipeline,
												   const ReplicantDestination *destination,
												   const char *reason, ReplicantResyncStart start,
												   XLogRecPtr from);

/*
 * destination is past its own max_retained_wal (reason, value-free) while
 * others hold the slot, with on_slot_loss => 'resync': it resyncs alone
 * (recorded and logged), and NULL is returned; or, recording nothing, the
 * reason to give its hold up with instead: after
 * REPLICANT_RESYNC_MAX_LOSSES of its resyncs in a row that did not
 * finish, or when its tables cannot be read.  Outside a transaction.
 */
extern char *replicant_destination_resync_on_loss(const ReplicantPipeline *pipeline,
												  const ReplicantDestination *destination,
												  const char *reason);

/*
 * From the worker: destination's resync under way begins again (its
 * reads cancelled and planned anew from a new checkpoint, its reason and
 * lost_from kept), when a read was planned after others had begun (its
 * table published again): one first marker after rows written under the
 * same name would sweep them.  Returns NULL, or why its tables cannot be
 * read (nothing changed).  Outside a transaction; the caller committed
 * what was acknowledged, and exits for a restart.
 */
extern char *replicant_destination_resync_again(const ReplicantPipeline *pipeline,
												const ReplicantDestination *destination);

/* Whether a read of destination's resync had its first marker sent. */
extern bool replicant_destination_resync_marked(const ReplicantDestination *destination);

/* A backfill of a destination's resync: the reads of one table for it. */
typedef struct ReplicantResyncRead
{
	int64 backfill_id;
	Oid relid;
} ReplicantResyncRead;

/*
 * The reads of destination's resync (of ReplicantResyncRead *, in backfill
 * order): with first, those not yet read whose first marker was not sent;
 * else those read, once none is left to read (NIL until then).  Outside a
 * transaction.
 */
extern List *replicant_destination_resync_reads(const ReplicantDestination *destination, bool first);

/*
 * Once none of its backfills is left to read (and the caller sent the last
 * markers), destination's resync is over: recorded, cleared on
 * destination, logged.  False when a read is left.  Outside a transaction.
 */
extern bool replicant_destination_resync_end(const ReplicantPipeline *pipeline,
											 ReplicantDestination *destination);

#endif /* REPLICANT_DESTINATION_RESYNC_H */
