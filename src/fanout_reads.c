/*
 * fanout_reads.c
 *		Sends what backfills read to the destinations they are for: a
 *		completed chunk's rows, in requests within each one's
 *		batch_max_bytes, and the first and last markers of a destination's
 *		resync (destination_resync.h), each a request of its own.
 *
 * A chunk goes out after every batch before it was sent to its
 * destinations (the worker drains, fanout.c); a resync's first markers go
 * after every batch before them and before the first chunk of its reads
 * opens (section 2's window), so every change the stream sends the
 * destination after a window opened reaches its sink after the marks; its
 * last markers once all its reads are done.
 *
 * Rules kept with other files: docs/internals.md §2 (the watermark
 * protocol), §10 (the resync), §11 (several destinations).
 */
#include "postgres.h"

#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backfill.h"
#include "backfill_progress.h"
#include "catalog.h"
#include "delivery.h"
#include "delivery_set.h"
#include "destination.h"
#include "destination_resync.h"
#include "fanout.h"
#include "fanout_outlet.h"
#include "format.h"
#include "resync_table.h"
#include "runs.h"

/*
 * What the first or last marker of a read of destination's resync (the
 * table relid) tells its sink, the names the table is delivered under in
 * *relation: NULL when the table was dropped since (its rows went with it,
 * its read is skipped) or is not published under that name now.  lost_to
 * on the last only, with the target's key columns for a format that sweeps
 * by key, when the sink may sweep it.  Outside a transaction.
 */
static ReplicantResync *
resync_markers(const ReplicantPipeline *pipeline, const ReplicantDestination *destination, Oid relid,
			   ReplicantRelation *relation, bool last)
{
	ReplicantCatalogAccess access;
	ReplicantResync *resync;
	List *key = NIL;
	bool sweep = false;
	bool published = false;
	MemoryContext caller = CurrentMemoryContext;

	replicant_catalog_begin(&access);
	replicant_resync_delivered_names(relation, last ? &key : NULL, relid, pipeline->publications, caller);
	if (relation->table != NULL)
		sweep = replicant_resync_sweeps(relation, pipeline->publications, &published);
	replicant_catalog_end(&access);
	/* Not delivered under that name now: its sink has no such target. */
	if (relation->table == NULL || !published)
		return NULL;
	resync = palloc0(sizeof(ReplicantResync));
	resync->reason = destination->resync_reason;
	resync->lost_from = destination->resync_lost_from;
	if (last)
		resync->lost_to = destination->resync_lost_to;
	/* No sweep, not even by key, where the publications keep deleted rows. */
	resync->key = sweep ? key : NIL;
	resync->sweep = sweep;
	resync->beside_stream = true;
	return resync;
}

/* The outlet of destination_id, or NULL. */
static Outlet *
outlet_of(ReplicantFanout *f, int32 destination_id)
{
	for (int i = 0; i < f->noutlets; i++)
		if (f->outlets[i].destination->id == destination_id)
			return &f->outlets[i];
	return NULL;
}

/*
 * Posts the first or last marker of a read of o's resync: a snapshot body
 * without rows that carries resync, under the fixed id
 * <pipeline>-b<backfill>-first or -last (a marker sent again is the same
 * one).  The last is retried as a chunk's rows are; a first is tried once
 * per call, its retries (backoff, counts, logs) carried in o's
 * marker_retry, and a retried failure sets *retry_at: no read waits on a
 * sink that is away (its stream batches leave it behind as any failure
 * does).  False when it did not go: o refused it and halted alone, or (a
 * first) it is retried later.
 */
static bool
post_resync_marker(ReplicantFanout *f, Outlet *o, int64 backfill_id, const ReplicantRelation *relation,
				   const ReplicantResync *resync, bool last, TimestampTz *retry_at)
{
	StringInfoData out;
	ReplicantMemoryBody state;
	ReplicantBody body;
	ReplicantDelivery delivery;
	ReplicantDelivery *set[1] = {&delivery};
	char *id = replicant_outlet_wire_id(f, o, psprintf("%s-b" INT64_FORMAT "-%s", f->pipeline->name, backfill_id, last ? "last" : "first"));

	initStringInfo(&out);
	o->format->snapshot_begin(&out, f->pipeline->name, replicant_destination_label(o->destination), relation,
							  backfill_id, !last, last, resync);
	o->format->snapshot_end(&out);
	replicant_body_from_buffer(&body, &state, &out);
	if (last)
		replicant_delivery_post(f->slot, o->place, o->sink, id, &body, &delivery.result);
	else
	{
		replicant_delivery_begin(&delivery, f->slot, o->sink, id, &body);
		delivery.place = o->place;
		delivery.retry = o->marker_retry;
		delivery.retry.next_attempt_at = 0;
		replicant_delivery_set_round(set, 1);
		o->marker_retry = delivery.retry;
		if (!delivery.answered)
		{
			*retry_at = delivery.retry.next_attempt_at;
			return false;
		}
		memset(&o->marker_retry, 0, sizeof(o->marker_retry));
	}
	if (delivery.result.outcome != REPLICANT_SINK_OK)
	{
		replicant_outlet_refused(f, o, &delivery.result, "resync marker",
								 psprintf(" (table \"%s\")", relation->table));
		return false;
	}
	replicant_outlet_note_delivered(f, o, 0, 0, 0, out.len, GetCurrentTimestamp());
	return true;
}

/*
 * A read of o's resync planned after others had their first markers (its
 * table published again meanwhile): the resync begins again and the
 * worker exits for a restart; or, when its tables cannot be read, o halts.
 */
static void
resync_again(ReplicantFanout *f, Outlet *o)
{
	char *refused;

	replicant_outlet_commit_pending(f);
	refused = replicant_destination_resync_again(f->pipeline, o->destination);
	if (refused != NULL)
	{
		replicant_outlet_halt(f, o, refused, InvalidXLogRecPtr);
		return;
	}
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	f->slot->superseded = true;
	LWLockRelease(replicant_shmem->lock);
	proc_exit(0);
}

bool
replicant_fanout_send_resync_first(ReplicantFanout *f, ReplicantBackfill *b)
{
	Outlet *o = b->destination_id != 0 && !b->first_sent ? outlet_of(f, b->destination_id) : NULL;
	MemoryContext markers;
	MemoryContext old;
	List *reads;
	ListCell *lc;
	int64 *sent_ids;
	int nsent = 0;
	bool sent = true;

	if (o == NULL || !o->live || o->destination->resync_reason == NULL)
		return true;
	replicant_shmem_enter_phase(REPLICANT_PHASE_DELIVER);
	replicant_fanout_drain_for_read(f, b->destination_id);
	/* It may have halted, or been left behind, meanwhile. */
	if (!replicant_outlet_streams(o) || !o->attached)
		return false;
	markers = AllocSetContextCreate(CurrentMemoryContext, "replicant resync markers", ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(markers);
	/*
	 * Every table's first before any of its reads: partitions share a
	 * name.  A read planned since others were marked begins it again.
	 */
	reads = replicant_destination_resync_reads(o->destination, true);
	if (reads != NIL && replicant_destination_resync_marked(o->destination))
	{
		resync_again(f, o);
		reads = NIL;
		sent = false;
	}
	sent_ids = palloc(sizeof(int64) * (list_length(reads) + 1));
	foreach(lc, reads)
	{
		ReplicantResyncRead *read = lfirst(lc);
		ReplicantRelation relation;
		ReplicantResync *resync = resync_markers(f->pipeline, o->destination, read->relid, &relation, false);

		/* Not published under its name now: left unmarked (its read is skipped, or begins the resync again). */
		if (resync == NULL && relation.table != NULL)
			continue;
		if (resync != NULL && !post_resync_marker(f, o, read->backfill_id, &relation, resync, false, &b->retry_at))
		{
			sent = false;
			break;
		}
		sent_ids[nsent++] = read->backfill_id;
	}
	/*
	 * All at once: a read marked alone would be read before the others'
	 * marks, and a read unmarked beside marked ones means a new one.
	 */
	if (sent && nsent > 0)
		replicant_backfill_record_first_sent(sent_ids, nsent);
	for (int i = 0; sent && i < nsent; i++)
		b->first_sent |= sent_ids[i] == b->id;
	MemoryContextSwitchTo(old);
	MemoryContextDelete(markers);
	return sent;
}

void
replicant_fanout_end_resyncs(ReplicantFanout *f)
{
	/*
	 * A sink takes one request at a time: one out (decoding went on, or a
	 * destination other than the read's) is answered before markers go.
	 */
	replicant_fanout_settle(f);
	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];
		MemoryContext markers;
		MemoryContext old;
		ListCell *lc;
		bool sent = true;

		if (!o->live || o->destination->resync_reason == NULL)
			continue;
		markers = AllocSetContextCreate(CurrentMemoryContext, "replicant resync markers", ALLOCSET_DEFAULT_SIZES);
		old = MemoryContextSwitchTo(markers);
		/* After every table was read: a sweep removes no row a later read brings. */
		foreach(lc, replicant_destination_resync_reads(o->destination, false))
		{
			ReplicantResyncRead *read = lfirst(lc);
			ReplicantRelation relation;
			ReplicantResync *resync = resync_markers(f->pipeline, o->destination, read->relid, &relation, true);

			if (resync != NULL && !post_resync_marker(f, o, read->backfill_id, &relation, resync, true, NULL))
			{
				sent = false;
				break;
			}
		}
		MemoryContextSwitchTo(old);
		MemoryContextDelete(markers);
		if (sent)
			(void) replicant_destination_resync_end(f->pipeline, o->destination);
	}
}

/*
 * Delivers what is left of a completed chunk to o, in requests of at most
 * its batch_max_bytes (a single larger row goes alone).  Each request's
 * id is <pipeline>-b<backfill>-<position>-<low watermark>-<part>
 * (replicant_format_read_webhook_id): a chunk read again after a restart,
 * its parts cut elsewhere, reuses none of them.  Sets *rows to the rows
 * sent; false when o refused them and halted alone.
 */
static bool
deliver_chunk_to(ReplicantFanout *f, Outlet *o, ReplicantChunk *chunk, bool first_sent,
				 int *rows)
{
	int next = 0;
	int part = 0;
	/* A read of a resync: its markers go alone (replicant_fanout_send_resync_first, _end_resyncs). */
	bool resync_read = o->destination->resync_reason != NULL && chunk->backfill->destination_id == o->destination->id;
	bool more = (chunk->last && !resync_read) || replicant_chunk_has_rows(chunk);
	StringInfoData changes;
	StringInfoData out;

	initStringInfo(&changes);
	initStringInfo(&out);
	while (more)
	{
		ReplicantMemoryBody state;
		ReplicantBody body;
		ReplicantSinkResult result;
		int n;

		/* The prefix's length, so that the whole body stays within bounds. */
		resetStringInfo(&out);
		o->format->snapshot_begin(&out, f->pipeline->name, replicant_destination_label(o->destination),
								  chunk->relation, chunk->backfill->id, false, false, NULL);
		resetStringInfo(&changes);
		n = replicant_chunk_rows(chunk, o->format, &next, &changes,
								 o->destination->batch_max_bytes - out.len - o->format->snapshot_end_len);
		more = next < chunk->nrows;
		resetStringInfo(&out);
		o->format->snapshot_begin(&out, f->pipeline->name, replicant_destination_label(o->destination),
								  chunk->relation, chunk->backfill->id, !first_sent && !resync_read && part == 0,
								  chunk->last && !more && !resync_read, NULL);
		appendBinaryStringInfo(&out, changes.data, changes.len);
		o->format->snapshot_end(&out);
		replicant_body_from_buffer(&body, &state, &out);
		replicant_delivery_post(f->slot, o->place, o->sink,
								replicant_outlet_wire_id(f, o,
														 replicant_format_read_webhook_id(f->pipeline->name,
																						  chunk->backfill->id,
																						  chunk->relfilenode,
																						  chunk->position,
																						  chunk->low_watermark,
																						  part++)),
								&body, &result);
		/*
		 * Rows read are in no WAL a destination could catch up from later:
		 * the chunk is read again after the resume.  A refusal of a
		 * backfill for every destination halts the pipeline; of one for o
		 * alone (added with a snapshot), o alone, and the backfill's
		 * progress does not move.
		 */
		if (result.outcome != REPLICANT_SINK_OK)
		{
			char *context = psprintf(" (table \"%s\")", chunk->relation->table);

			if (chunk->backfill->destination_id != 0)
			{
				replicant_outlet_refused(f, o, &result, "backfill batch", context);
				return false;
			}
			replicant_outlet_commit_pending(f);
			replicant_delivery_refused(f->slot, f->pipeline, &result, "backfill batch", context);
		}
		replicant_outlet_note_delivered(f, o, 0, n, 0, out.len, GetCurrentTimestamp());
		*rows += n;
	}
	return true;
}

void
replicant_fanout_deliver_chunk(ReplicantFanout *f, ReplicantChunk *chunk)
{
	bool first_sent = chunk->backfill->first_sent;
	bool reached = true;
	int rows = 0;

	replicant_shmem_enter_phase(REPLICANT_PHASE_DELIVER);
	if (chunk->relation != NULL)
	{
		int32 only = chunk->backfill->destination_id;

		f->chunk_table = chunk->relation->table;
		/* A backfill for one destination (added with a snapshot) goes to it alone. */
		for (int i = 0; i < f->noutlets; i++)
			if (f->outlets[i].live && f->outlets[i].attached &&
				(only == 0 || f->outlets[i].destination->id == only))
			{
				rows = 0;
				reached &= deliver_chunk_to(f, &f->outlets[i], chunk, first_sent, &rows);
			}
	}
	if (reached)
		replicant_backfill_record_chunk(chunk, rows);
	replicant_shmem_note_progress(f->slot);
	replicant_runs_progressed(f->pipeline->id);
	f->chunk_table = NULL;
}

const char *
replicant_fanout_chunk_table(ReplicantFanout *f)
{
	return f ? f->chunk_table : NULL;
}
