/*
 * snapshot_shard.c
 *		A snapshot's shard workers: reading the shards of an initial
 *		snapshot under the snapshot the pipeline worker exported.
 *
 * Shard workers import the exported snapshot, as pg_dump -j does, and claim
 * shards (snapshot_plan.c); each reads its shard in bounded windows of
 * blocks with a TID range scan of the heap (what ctid >= '(lo,0)' AND
 * ctid < '(hi,0)' plans to, without the executor), deforms each tuple in
 * the columns it is delivered in, applies the publications' row filter with
 * the stream's evaluator, encodes the row with the stream's encoder and
 * POSTs the batches, recording progress after every window.  Each window
 * checks the table's relfilenode against the one stamped at plan time:
 * after VACUUM FULL, CLUSTER or TRUNCATE the table's shards start over
 * instead of trusting stale block positions.
 *
 * Rules kept with other files: docs/internals.md §3 (the exported snapshot
 * and its shards).
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/tupconvert.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "batch.h"
#include "catalog.h"
#include "checkpoint.h"
#include "compat.h"
#include "delivery_set.h"
#include "destination.h"
#include "encoder.h"
#include "fault.h"
#include "format.h"
#include "partition_root.h"
#include "pubfilter.h"
#include "publication_rules.h"
#include "row_key.h"
#include "runs.h"
#include "slot.h"
#include "snapshot_plan.h"
#include "snapshot_shard.h"
#include "stop_signal.h"
#include "table_read.h"
#include "transport.h"

/* Rows encoded between two looks at the POST in flight (a power of 2). */
#define ROWS_PER_PUMP 128

/*
 * In a shard worker: its pipeline's slot and its number among the
 * pipeline's shard workers (-1 in the pipeline worker).
 */
static ReplicantPipelineSlot *ShardSlot = NULL;
static int ShardNumber = -1;

/*
 * Snapshot batches (shard workers, and the pipeline worker's markers)
 */

void
replicant_snapshot_start_body(StringInfo out, ReplicantPipeline *pipeline,
							  const ReplicantRelation *relation,
							  int64 backfill_id, bool first, bool last,
							  const ReplicantResync *resync)
{
	const ReplicantDestination *destination = replicant_pipeline_only_destination(pipeline);
	const ReplicantFormat *format = replicant_format_of(destination);

	resetStringInfo(out);
	format->snapshot_begin(out, pipeline->name,
						   replicant_destination_label(destination),
						   relation, backfill_id, first, last, resync);
}

/* Halts, naming relation, on anything but a 2xx; counts a delivered body. */
void
replicant_snapshot_note_answer(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
							   const ReplicantSinkResult *result, int64 nrows, int bytes,
							   const ReplicantRelation *relation)
{
	ReplicantDestinationSlot *destination = replicant_shmem_only_destination(slot);

	if (result->outcome != REPLICANT_SINK_OK)
		replicant_delivery_refused(slot, pipeline, result, "snapshot batch",
								   psprintf(" (table \"%s\")", relation->table));

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	destination->batches_delivered++;
	destination->changes_delivered += nrows;
	destination->bytes_delivered += bytes;
	/* backfill_status counts them before the window's progress is recorded */
	if (ShardNumber >= 0)
		slot->window_progress[ShardNumber].rows += nrows;
	destination->last_delivery_at = GetCurrentTimestamp();
	if (destination->state == REPLICANT_STATE_RETRYING)
		destination->state = REPLICANT_STATE_SNAPSHOTTING;
	/* Not over why another shard worker halted or disabled the pipeline. */
	if (slot->runnable)
		destination->last_error[0] = '\0';
	LWLockRelease(replicant_shmem->lock);
}

/*
 * Windows
 */

/*
 * Names the window the shard worker reads in its slot's window progress
 * (shard NULL: none), from which on replicant_snapshot_note_answer counts
 * the rows the sink acknowledged.
 */
static void
note_window(const ReplicantShard *shard)
{
	ReplicantWindowProgress *progress = &ShardSlot->window_progress[ShardNumber];

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	progress->backfill_id = shard ? shard->backfill_id : 0;
	progress->shard = shard ? shard->shard : 0;
	progress->window_block = shard ? shard->next_block : 0;
	progress->rows = 0;
	LWLockRelease(replicant_shmem->lock);
}

/* What a window read found. */
typedef enum WindowResult
{
	WINDOW_READ,       /* rows of the window delivered */
	WINDOW_PAST_END,   /* the window starts beyond the table */
	WINDOW_REWRITTEN,  /* relfilenode changed: start the table over */
	WINDOW_STALE,      /* rewritten after the snapshot, which sees none of it */
	WINDOW_GONE,       /* the table was dropped */
	WINDOW_UNPUBLISHED /* no publication of the pipeline publishes it now */
} WindowResult;

/* Whether the active snapshot sees a row of rel's heap. */
static bool
snapshot_sees_a_row(Relation rel)
{
	TableScanDesc scan = table_beginscan(rel, GetActiveSnapshot(), 0, NULL);
	TupleTableSlot *tuple = table_slot_create(rel, NULL);
	bool found = table_scan_getnextslot(scan, ForwardScanDirection, tuple);

	ExecDropSingleTupleTableSlot(tuple);
	table_endscan(scan);
	return found;
}

/*
 * Whether the active snapshot is blind to rel's current heap: the rewrite
 * that gave rel its relfilenode committed after the snapshot (which still
 * sees the old pg_class row), and wrote the rows anew under its own xid
 * (ALTER TABLE ... TYPE), so that the snapshot sees none of them.  VACUUM
 * FULL and CLUSTER keep the rows' xmin, and the snapshot sees its rows in
 * the new heap as it did in the old one.
 */
static bool
snapshot_blind_to(Relation rel)
{
	Oid argtypes[1] = {OIDOID};
	Datum args[1] = {ObjectIdGetDatum(RelationGetRelid(rel))};
	bool blind;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("SELECT relfilenode FROM pg_catalog.pg_class"
							  " WHERE oid OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read pg_class");
	blind = SPI_processed == 0 ||
			strtoul(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), NULL, 10) !=
				rel->rd_rel->relfilenode;
	SPI_finish();
	/* Rewritten later: blind if the new heap has rows and it sees none. */
	return blind && RelationGetNumberOfBlocks(rel) > 0 && !snapshot_sees_a_row(rel);
}

/* Ends the window's transaction, back in the window's memory context. */
static void
end_window(Relation rel, MemoryContext window_context)
{
	if (rel != NULL)
		table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(window_context);
}

/*
 * Set while importing the exported snapshot: an error then means that its
 * exporter, the pipeline worker, is gone or going (replicant_shard_main).
 */
static bool importing = false;

/*
 * Starts the window's transaction under the imported snapshot and opens the
 * shard's table into *relp.  Returns WINDOW_READ when it has blocks left to
 * read; otherwise the transaction is over and the result says why not.
 */
static WindowResult
begin_window(const char *snapshot_name, ReplicantShard *shard, Relation *relp,
			 Oid *new_relfilenode)
{
	MemoryContext window_context = CurrentMemoryContext;
	Relation rel;

	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;
	importing = true;
	replicant_fault("snapshot_import");
	ImportSnapshot(snapshot_name);
	importing = false;
	PushActiveSnapshot(GetTransactionSnapshot());
	MemoryContextSwitchTo(window_context);

	replicant_partition_lock_ancestors(shard->relid, AccessShareLock);
	rel = try_table_open(shard->relid, AccessShareLock);
	if (rel == NULL)
	{
		end_window(NULL, window_context);
		return WINDOW_GONE;
	}
	if (rel->rd_rel->relfilenode != shard->relfilenode)
	{
		bool stale = snapshot_blind_to(rel);

		*new_relfilenode = rel->rd_rel->relfilenode;
		end_window(rel, window_context);
		return stale ? WINDOW_STALE : WINDOW_REWRITTEN;
	}
	if (shard->next_block >= RelationGetNumberOfBlocks(rel))
	{
		end_window(rel, window_context);
		return WINDOW_PAST_END;
	}
	*relp = rel;
	return WINDOW_READ;
}

/* A window's snapshot body in flight: POSTed while the next one fills. */
typedef struct SnapshotPost
{
	StringInfoData out;
	ReplicantMemoryBody state;
	ReplicantBody body;
	char *webhook_id;
	int64 nrows;
	bool in_flight;
} SnapshotPost;

/*
 * The snapshot batch a window is filling, and the one before it while its
 * POST is in flight: at most two batches' buffers.  A batch is sent only
 * after the one before it was acknowledged, and the window's progress is
 * recorded only after its last one was.
 */
typedef struct WindowBatch
{
	ReplicantPipelineSlot *slot;
	ReplicantPipeline *pipeline;
	ReplicantDestination *destination; /* what sink sends to */
	const ReplicantFormat *format;     /* destination's, looked up once */
	ReplicantTransport *sink;
	ReplicantShard *shard;
	const ReplicantRelation *relation; /* the table read */
	StringInfoData out;                /* the body filling */
	int64 in_body;                     /* rows in it */
	int batch_no;                      /* batches of the window sent before it */
	SnapshotPost sending;
	MemoryContext context; /* the window's */
} WindowBatch;

/*
 * The shard worker's two batch bodies, kept from window to window: grown
 * once to a batch's size, not again for every window (copies and page
 * faults in each).
 */
static StringInfoData window_bodies[2];

/* Lends the window the two bodies, the first time sized for a full batch. */
static void
take_window_bodies(WindowBatch *batch)
{
	if (window_bodies[0].data == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		int i;

		for (i = 0; i < lengthof(window_bodies); i++)
		{
			initStringInfo(&window_bodies[i]);
			enlargeStringInfo(&window_bodies[i], batch->destination->batch_max_bytes);
		}
		MemoryContextSwitchTo(old);
	}
	batch->out = window_bodies[0];
	batch->sending.out = window_bodies[1];
}

/*
 * Takes them back, wherever the window left them (and however grown).  A
 * window that failed never returns them: the worker halts or exits.
 */
static void
return_window_bodies(WindowBatch *batch)
{
	window_bodies[0] = batch->out;
	window_bodies[1] = batch->sending.out;
}

/* Waits for the batch in flight, if any, to be acknowledged (or halts). */
static void
finish_window_batch(WindowBatch *batch)
{
	SnapshotPost *post = &batch->sending;
	ReplicantSinkResult result;

	if (!post->in_flight)
		return;
	replicant_delivery_post_finish(batch->slot, batch->sink, post->webhook_id,
								   &post->body, &result);
	post->in_flight = false;
	replicant_snapshot_note_answer(batch->slot, batch->pipeline, &result, post->nrows,
								   post->out.len, batch->relation);
}

/*
 * Starts POSTing the filled batch, once the one before it is acknowledged;
 * its webhook-id names the window (the table's file and first block), the
 * claim of the shard that reads it and the batch's number.  The buffers
 * trade places: the next batch fills the one the last POST used.
 */
static void
send_window_batch(WindowBatch *batch)
{
	SnapshotPost *post = &batch->sending;
	StringInfoData filled = batch->out;

	finish_window_batch(batch);
	batch->out = post->out;
	post->out = filled;
	post->webhook_id = replicant_format_read_webhook_id(batch->pipeline->name,
														batch->shard->backfill_id,
														batch->shard->relfilenode,
														batch->shard->next_block,
														batch->shard->claimed_at,
														batch->batch_no++);
	post->nrows = batch->in_body;
	batch->format->snapshot_end(&post->out);
	replicant_body_from_buffer(&post->body, &post->state, &post->out);
	replicant_delivery_post_start(batch->sink, post->webhook_id, &post->body);
	post->in_flight = true;
	batch->in_body = 0;
}

/*
 * Encodes the row straight into the batch.  When that took the batch over
 * batch_max_bytes, the batch is sent without it and the next one starts
 * with it: the only copy of an encoded row.  Runs in the row's memory
 * context, and sends in the window's.
 */
static void
add_window_row(WindowBatch *batch, const ReplicantChange *record, StringInfo spill)
{
	const ReplicantFormat *format = batch->format;
	int before = batch->out.len;
	int start;

	if (batch->in_body > 0)
		appendStringInfoString(&batch->out, format->separator);
	start = batch->out.len;
	format->change(&batch->out, batch->pipeline->name, record);
	if (before + (batch->out.len - start) + format->snapshot_end_len >
			batch->destination->batch_max_bytes &&
		batch->in_body > 0)
	{
		MemoryContext row_context = MemoryContextSwitchTo(batch->context);

		resetStringInfo(spill);
		appendBinaryStringInfo(spill, batch->out.data + start, batch->out.len - start);
		batch->out.len = before;
		batch->out.data[before] = '\0';
		send_window_batch(batch);
		replicant_snapshot_start_body(&batch->out, batch->pipeline, batch->relation,
									  batch->shard->backfill_id, false, false, NULL);
		appendBinaryStringInfo(&batch->out, spill->data, spill->len);
		MemoryContextSwitchTo(row_context);
	}
	batch->in_body++;
}

/*
 * What a window reads its rows with: a TID range scan of the heap under the
 * imported snapshot, its tuples deformed in the columns of the relation
 * they are delivered as, filtered as table synchronization filters them.
 */
typedef struct WindowReader
{
	Relation rel;               /* the heap read */
	Relation target;            /* what its rows are delivered as: rel, or
								 * the partition root */
	TupleConversionMap *map;    /* rel's columns to target's; NULL: same */
	ReplicantPubFilter *filter; /* row filter and published columns */
	Bitmapset *key_columns;
	bool whole_row;
	Bitmapset *identity; /* rel's, in target's columns; NULL: none */
	TableScanDesc scan;
	TupleTableSlot *heap_slot; /* rel's tuples, as the scan returns them */
	TupleTableSlot *row_slot;  /* converted to target's columns (map) */
} WindowReader;

/*
 * Opens the reader of blocks [shard's next block, hi) of rel; halts where
 * the stream would: the owner may not read rel whole (SELECT, or row-level
 * security it does not bypass: the heap read would bypass the policies), or
 * the publications disagree on the published columns.  Returns false,
 * having opened nothing, when no publication of the pipeline publishes rel
 * now (whatever the owner may read): it has no row filter nor columns to
 * read it with.
 */
static bool
open_window_reader(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
				   Relation rel, ReplicantShard *shard, int64 hi, WindowReader *reader)
{
	char *refused;
	ItemPointerData mintid;
	ItemPointerData maxtid;
	bool whole_row;

	reader->rel = rel;
	reader->target = replicant_partition_root_open_for_read(rel, pipeline->publications,
															AccessShareLock);
	refused = replicant_publication_read_filter(rel, reader->target, pipeline->publications,
												&reader->filter);
	if (refused == NULL && !replicant_pubfilter_publishes(reader->filter))
	{
		replicant_pubfilter_free(reader->filter);
		if (reader->target != rel)
			table_close(reader->target, AccessShareLock);
		return false;
	}
	if (refused == NULL)
		refused = replicant_table_read_denied(rel, pipeline->owner);
	if (refused)
		replicant_delivery_halt(slot, pipeline, refused);
	if (rel->rd_tableam->scan_set_tidrange == NULL)
		replicant_delivery_halt(slot, pipeline,
								psprintf("table \"%s\" cannot be read in block ranges: its access method has no TID range scans",
										 RelationGetRelationName(rel)));
	replicant_row_key_delivered(rel, reader->target, reader->filter->columns,
								&reader->key_columns, &reader->whole_row);
	reader->identity = replicant_row_key_identity_as(rel, reader->target, &whole_row);
	reader->map = replicant_partition_root_read_map(rel, reader->target);
	reader->heap_slot = table_slot_create(rel, NULL);
	reader->row_slot = reader->map ?
						   MakeSingleTupleTableSlot(RelationGetDescr(reader->target),
													&TTSOpsVirtual) :
						   reader->heap_slot;

	/* ctid >= '(lo,0)' AND ctid < '(hi,0)' */
	ItemPointerSet(&mintid, (BlockNumber) shard->next_block, FirstOffsetNumber);
	ItemPointerSet(&maxtid, (BlockNumber) (hi - 1), MaxOffsetNumber);
	reader->scan = table_beginscan_tidrange(rel, GetActiveSnapshot(), &mintid, &maxtid);
	return true;
}

/*
 * The next row the window delivers, deformed in target's columns, or NULL
 * at the end of the window.  The values point into the heap's buffer: they
 * are good until the next call.
 */
static TupleTableSlot *
next_window_row(WindowReader *reader)
{
	while (table_scan_getnextslot_tidrange(reader->scan, ForwardScanDirection,
										   reader->heap_slot))
	{
		TupleTableSlot *row = reader->heap_slot;

		CHECK_FOR_INTERRUPTS();
		if (reader->map)
			row = execute_attr_map_slot(reader->map->attrMap, row, reader->row_slot);
		if (!replicant_pubfilter_read_row(reader->filter, row))
			continue;
		slot_getallattrs(row);
		return row;
	}
	return NULL;
}

static void
close_window_reader(WindowReader *reader)
{
	table_endscan(reader->scan);
	if (reader->row_slot != reader->heap_slot)
		ExecDropSingleTupleTableSlot(reader->row_slot);
	ExecDropSingleTupleTableSlot(reader->heap_slot);
	if (reader->map)
		free_conversion_map(reader->map);
	replicant_pubfilter_free(reader->filter);
	if (reader->target != reader->rel)
		table_close(reader->target, AccessShareLock);
}

/*
 * Reads blocks [lo, hi) of the shard's table under the imported snapshot and
 * delivers them in batches of at most batch_max_bytes.
 */
static WindowResult
read_window(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
			ReplicantTransport *sink, const char *snapshot_name, ReplicantShard *shard,
			int64 hi, int64 *rows, Oid *new_relfilenode)
{
	Relation rel;
	WindowReader reader;
	TupleTableSlot *row;
	TupleDesc desc;
	ReplicantRelation relation;
	StringInfoData spill;
	StringInfoData key;
	StringInfoData new_row;
	MemoryContext window_context = CurrentMemoryContext;
	WindowBatch batch = {.slot = slot, .pipeline = pipeline, .destination = replicant_pipeline_only_destination(pipeline), .sink = sink, .shard = shard, .context = window_context};
	MemoryContext row_context;
	WindowResult opened;
	/* the stream delivers nothing before the snapshot is done */
	XLogRecPtr consistent_point =
		replicant_slot_confirmed_flush(pipeline->slot_name);

	*rows = 0;
	batch.format = replicant_format_of(batch.destination);
	opened = begin_window(snapshot_name, shard, &rel, new_relfilenode);
	if (opened != WINDOW_READ)
		return opened;
	replicant_fault("snapshot_read");
	note_window(shard);

	if (!open_window_reader(slot, pipeline, rel, shard, hi, &reader))
	{
		end_window(rel, window_context);
		return WINDOW_UNPUBLISHED;
	}
	desc = RelationGetDescr(reader.target);
	relation.schema = get_namespace_name(RelationGetNamespace(reader.target));
	relation.table = pstrdup(RelationGetRelationName(reader.target));
	batch.relation = &relation;

	initStringInfo(&spill);
	initStringInfo(&key);
	initStringInfo(&new_row);
	take_window_bodies(&batch);
	replicant_snapshot_start_body(&batch.out, pipeline, &relation, shard->backfill_id, false, false, NULL);
	row_context = AllocSetContextCreate(window_context, "replicant snapshot row",
										ALLOCSET_DEFAULT_SIZES);
	while ((row = next_window_row(&reader)) != NULL)
	{
		/* Detoasted values die with the row. */
		MemoryContext old = MemoryContextSwitchTo(row_context);
		ReplicantChange record;

		replicant_change_from_values(&record, &relation, &key, &new_row, desc,
									 row->tts_values, row->tts_isnull,
									 reader.key_columns, reader.whole_row,
									 reader.filter->columns);
		record.backfill_id = shard->backfill_id;
		record.read_lsn = consistent_point;
		if (batch.format->read_ids)
			replicant_change_set_read_id(&record, pipeline->event_id_key, desc,
										 row->tts_values, row->tts_isnull, reader.identity,
										 RelationGetRelid(rel), rel->rd_rel->relfilenode,
										 &reader.heap_slot->tts_tid);
		add_window_row(&batch, &record, &spill);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_context);
		/* moves the batch in flight on, outside libcurl, between rows */
		if ((++(*rows) & (ROWS_PER_PUMP - 1)) == 0)
			replicant_transport_pump(sink);
	}
	close_window_reader(&reader);
	end_window(rel, window_context);

	if (batch.in_body > 0)
		send_window_batch(&batch);
	finish_window_batch(&batch);
	return_window_bodies(&batch);
	return WINDOW_READ;
}

/*
 * Tells the pipeline worker that a shard may have been left claimed; the
 * window it read is read again, and counted, by whoever claims it next.
 */
static void
shard_exit(int code, Datum arg)
{
	/* (Not when an error came while holding the lock: that would hang.) */
	if (!LWLockHeldByMe(replicant_shmem->lock))
		note_window(NULL);
	if (code != 0)
		pg_atomic_fetch_add_u32(&ShardSlot->shard_failures, 1);
}

/*
 * Reads a claimed shard window by window, recording progress after each,
 * until it is done, its table starts over, or the snapshot turned stale.
 */
static void
read_shard(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
		   ReplicantTransport *sink, const char *snapshot_name, ReplicantShard *shard,
		   MemoryContext window_context)
{
	for (;;)
	{
		int64 hi;
		int64 rows = 0;
		Oid relfilenode = InvalidOid;
		WindowResult r;
		bool done;

		CHECK_FOR_INTERRUPTS();
		if (pg_atomic_read_u32(&slot->snapshot_stale) != 0)
			break;
		replicant_delivery_reload_config();
		MemoryContextSwitchTo(window_context);
		hi = shard->next_block + REPLICANT_WINDOW_BLOCKS;
		if (shard->hi_block >= 0)
			hi = Min(hi, shard->hi_block);

		r = read_window(slot, pipeline, sink, snapshot_name, shard,
						hi, &rows, &relfilenode);
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(window_context);
		replicant_fault("snapshot_window");

		if (r == WINDOW_STALE || r == WINDOW_REWRITTEN)
			note_window(NULL); /* its rows count again from 0 */
		if (r == WINDOW_STALE)
		{
			ereport(LOG,
					(errmsg("table \"%s\" was rewritten after the snapshot was taken; reading it again under a fresh snapshot",
							shard->relname)));
			/* Before the restart, so that no one claims it under this snapshot. */
			pg_atomic_write_u32(&slot->snapshot_stale, 1);
			replicant_snapshot_restart_table(shard, relfilenode);
			break;
		}
		if (r == WINDOW_UNPUBLISHED)
		{
			ereport(LOG,
					(errmsg("replicant pipeline \"%s\" skips the rest of its snapshot of table \"%s\"",
							pipeline->name, shard->relname),
					 errdetail("None of the pipeline's publications publishes the table any more.")));
			replicant_snapshot_skip_table(shard);
			break;
		}
		if (r == WINDOW_REWRITTEN)
		{
			ereport(LOG,
					(errmsg("table \"%s\" was rewritten during the snapshot; reading it again",
							shard->relname)));
			replicant_snapshot_restart_table(shard, relfilenode);
			break;
		}
		done = (r != WINDOW_READ) || (shard->hi_block >= 0 && hi >= shard->hi_block);
		if (r == WINDOW_READ)
			shard->next_block = hi;
		replicant_snapshot_record_progress(shard, done, rows);
		replicant_shmem_note_progress(slot);
		replicant_runs_progressed(pipeline->id);
		replicant_fault("snapshot_progress");
		if (done)
			break;
	}
}

/*
 * Acts on the error that ended a shard worker's run, never the message,
 * which could quote a value: halts the pipeline, naming the table and the
 * error class, or exits for the pipeline worker to restart the snapshot
 * when the error is transient (replicant_delivery_fail).  A worker that
 * could not import the snapshot, or whose pipeline was stopped meanwhile,
 * exits without a word: its exporter, the pipeline worker, is gone or
 * going, and a halt or disable that stopped it stands.
 */
REPLICANT_NORETURN static void
shard_failed(ReplicantPipelineSlot *slot, uint32 generation,
			 ReplicantPipeline *pipeline, ReplicantShard *shard)
{
	ErrorData *edata = CopyErrorData();
	bool stopped;

	FlushErrorState();
	AbortOutOfAnyTransaction();
	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	stopped = slot->generation != generation || !slot->runnable ||
			  replicant_shmem_state(slot, NULL) == REPLICANT_STATE_HALTED;
	LWLockRelease(replicant_shmem->lock);
	if (importing || stopped)
	{
		ereport(LOG,
				(errmsg("replicant snapshot worker of pipeline \"%s\" exits: %s",
						pipeline->name,
						importing ? "it could not import the exported snapshot" :
									"the pipeline was stopped")));
		/* Not 0: the shard it claimed is not done. */
		proc_exit(1);
	}
	replicant_delivery_fail(slot, pipeline, edata,
							replicant_delivery_failure(REPLICANT_PHASE_SNAPSHOT_READ,
													   shard->relname, edata->sqlerrcode));
}

void
replicant_shard_main(Datum main_arg)
{
	ReplicantShardArgs args;
	ReplicantPipelineSlot *slot;
	ReplicantPipeline *pipeline;
	ReplicantCatalogAccess access;
	ReplicantTransport *sink;
	ReplicantShard *shard;
	MemoryContext window_context;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	slot = &replicant_shmem->slots[args.slot_index];
	replicant_stop_signal_init(slot, args.generation, "replicant snapshot worker of pipeline", DEBUG1, true);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	if (slot->generation != args.generation)
		proc_exit(0);
	ShardSlot = slot;
	ShardNumber = args.worker;
	before_shmem_exit(shard_exit, (Datum) 0);
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.owner, 0);
	replicant_encoder_pin_settings();
	replicant_pin_worker_settings();

	/*
	 * Commit progress asynchronously: the WAL writer flushes it while the
	 * next window is read, and whatever the worker committed is flushed
	 * before its next request leaves (replicant_delivery_post_start) and
	 * before it exits, so nothing is sent, nor the snapshot finished, ahead
	 * of the progress that came before.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	replicant_catalog_begin(&access);
	pipeline = replicant_pipeline_load(args.pipeline_id, TopMemoryContext);
	replicant_catalog_end(&access);
	if (pipeline == NULL)
		proc_exit(0);
	pgstat_report_appname(psprintf("replicant snapshot %s", pipeline->name));

	MemoryContextSwitchTo(TopMemoryContext);
	sink = replicant_delivery_sink(replicant_pipeline_only_destination(pipeline));

	window_context = AllocSetContextCreate(TopMemoryContext, "replicant snapshot window",
										   ALLOCSET_DEFAULT_SIZES);
	shard = palloc0(sizeof(ReplicantShard));
	replicant_stop_signal_arm();
	PG_TRY();
	{
		/*
		 * Once a table turned out rewritten after the snapshot, nothing
		 * more is read under it: the pipeline worker takes a fresh one
		 * (claims are reset then).
		 */
		while (replicant_snapshot_claim_shard(pipeline->id, shard) &&
			   pg_atomic_read_u32(&slot->snapshot_stale) == 0)
			read_shard(slot, pipeline, sink, args.snapshot_name, shard, window_context);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(TopMemoryContext);
		replicant_transport_cancel(sink);
		replicant_stop_signal_exit_if_asked();
		shard_failed(slot, args.generation, pipeline, shard);
	}
	PG_END_TRY();
	replicant_transport_close(sink);
	replicant_checkpoint_make_durable();
	proc_exit(0);
}
