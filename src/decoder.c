/*
 * decoder.c
 *		Driving logical decoding of the pipeline's slot inside the worker.
 *
 * This is what pg_logical_slot_get_changes() does, without SQL and without
 * a walsender: acquire the slot, create a decoding context once, then read
 * WAL records and hand them to the reorder buffer, which calls our output
 * plugin for each committed transaction.  Reading stops at the end of
 * flushed WAL or when the batch is full; the next call continues from the
 * same reader position, so nothing is decoded twice.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogutils.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "replication/decode.h"
#include "replication/slot.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "decoder.h"
#include "fault.h"
#include "publication.h"

/* WAL is read from this server's files, as pg_logical_slot_get_changes() does. */
#define LOCAL_WAL_ROUTINE XL_ROUTINE(.page_read = read_local_xlog_page, \
									 .segment_open = wal_segment_open, \
									 .segment_close = wal_segment_close)

/* confirmed_flush reaches disk at most this often (ms); the checkpoint row is the authority. */
#define SLOT_SAVE_INTERVAL_MS 1000

ReplicantDecoder *
replicant_decoder_start(ReplicantPipeline *pipeline, ReplicantBatch *batch,
						char **halt_reason)
{
	char	   *slot_name = replicant_pipeline_slot_name(pipeline->name);
	MemoryContext caller_context = CurrentMemoryContext;
	MemoryContext decoder_context;
	ReplicantDecoder *decoder;
	ReplicationSlot *slot;
	List	   *options;
	const char *invalidation;

	*halt_reason = NULL;
	CheckLogicalDecodingRequirements();
	decoder_context = AllocSetContextCreate(TopMemoryContext, "replicant decoder",
											ALLOCSET_DEFAULT_SIZES);

	/*
	 * Creating the context inside a transaction keeps PROC_IN_LOGICAL_DECODING
	 * unset, so the checkpoint transactions this process commits keep their
	 * normal visibility and vacuum horizon.
	 */
	StartTransactionCommand();

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(slot_name, false);
	LWLockRelease(ReplicationSlotControlLock);
	if (slot == NULL)
	{
		CommitTransactionCommand();
		*halt_reason = psprintf("replication slot \"%s\" does not exist (a promoted standby has it only as a failover slot): recreate the pipeline with a snapshot", slot_name);
		return NULL;
	}

	REPLICANT_SLOT_ACQUIRE(slot_name, true);

	SpinLockAcquire(&MyReplicationSlot->mutex);
	invalidation = replicant_slot_invalidation(MyReplicationSlot);
	SpinLockRelease(&MyReplicationSlot->mutex);
	if (invalidation != NULL)
	{
		ReplicationSlotRelease();
		CommitTransactionCommand();
		if (strcmp(invalidation, "wal_removed") == 0)
			*halt_reason = psprintf("replication slot \"%s\" was invalidated because the WAL it needed was removed", slot_name);
		else
			*halt_reason = psprintf("replication slot \"%s\" was invalidated (invalidation_reason %s)", slot_name, invalidation);
		return NULL;
	}

	MemoryContextSwitchTo(decoder_context);
	decoder = palloc0(sizeof(ReplicantDecoder));
	decoder->context = decoder_context;
	options = list_make1(makeDefElem(REPLICANT_PLUGIN_OPTION, NULL, -1));
	decoder->ctx = CreateDecodingContext(pipeline->checkpoint_end_lsn, options, false,
										 LOCAL_WAL_ROUTINE, NULL, NULL, NULL);
	decoder->state = replicant_output_state(decoder->ctx);
	decoder->state->batch = batch;
	decoder->state->format = replicant_format_of(pipeline);
	decoder->state->pipeline_name = pipeline->name;
	decoder->state->skip_upto = pipeline->checkpoint_commit_lsn;
	decoder->state->messages = pipeline->messages;
	decoder->state->resumed_lsn = pipeline->resumed_lsn;
	decoder->state->message_prefixes = pipeline->message_prefixes;
	decoder->confirmed = MyReplicationSlot->data.confirmed_flush;
	decoder->caches_normal = true;	/* the pipeline was loaded with them */
	decoder->last_save = GetCurrentTimestamp();

	replicant_publication_init(pipeline->publications, pipeline->publication_lsns,
							   pipeline->owner);

	/* Transactions committing after confirmed_flush began at restart_lsn. */
	XLogBeginRead(decoder->ctx->reader, MyReplicationSlot->data.restart_lsn);

	CommitTransactionCommand();
	MemoryContextSwitchTo(caller_context);
	return decoder;
}

LogicalDecodingContext *
replicant_decoder_init_slot(bool need_full_snapshot)
{
	LogicalDecodingContext *ctx;

	ctx = CreateInitDecodingContext("replicant", NIL, need_full_snapshot,
									InvalidXLogRecPtr, LOCAL_WAL_ROUTINE,
									NULL, NULL, NULL);
	DecodingContextFindStartpoint(ctx);
	return ctx;
}

int
replicant_decoder_free_slots(void)
{
	int			free_slots = 0;
	int			i;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (i = 0; i < max_replication_slots; i++)
		free_slots += ReplicationSlotCtl->replication_slots[i].in_use ? 0 : 1;
	LWLockRelease(ReplicationSlotControlLock);
	return free_slots;
}

static bool
batch_full(ReplicantBatch *batch, int max_txns, uint64 max_bytes)
{
	return batch->ntxns >= max_txns || replicant_batch_size(batch) >= max_bytes;
}

bool
replicant_decoder_read(ReplicantDecoder *decoder, int max_txns, uint64 max_bytes)
{
	LogicalDecodingContext *ctx = decoder->ctx;
	ResourceOwner saved_owner = CurrentResourceOwner;
	MemoryContext saved_context = CurrentMemoryContext;
	XLogRecPtr	end_of_wal = GetFlushRecPtr(NULL);
	bool		at_end = true;

	replicant_wait_for_standby_confirmation(end_of_wal);

	/*
	 * The reader keeps decoded records (large ones palloc'd in the current
	 * context) until the next call, so it must read in a lasting context.
	 */
	MemoryContextSwitchTo(decoder->context);

	/* Historic and normal catalog cache entries must not mix. */
	if (decoder->caches_normal)
		InvalidateSystemCaches();
	decoder->caches_normal = false;
	decoder->caches_historic = true;
	PG_TRY();
	{
		while (ctx->reader->EndRecPtr < end_of_wal)
		{
			XLogRecord *record;
			char	   *errm = NULL;

			record = XLogReadRecord(ctx->reader, &errm);
			if (errm)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("could not read WAL at %X/%X for logical decoding",
								LSN_FORMAT_ARGS(ctx->reader->EndRecPtr)),
						 errdetail_internal("%s", errm)));
			if (record != NULL)
				LogicalDecodingProcessRecord(ctx, ctx->reader);
			if (decoder->state->batch->ntxns > 0)
				replicant_fault("decode");

			/* The reorder buffer runs transactions of its own. */
			CurrentResourceOwner = saved_owner;
			MemoryContextSwitchTo(decoder->context);

			if (decoder->state->halt_reason != NULL ||
				(decoder->state->chunk && decoder->state->chunk->complete) ||
				decoder->state->pending_messages != NIL ||
				batch_full(decoder->state->batch, max_txns, max_bytes))
			{
				at_end = false;
				break;
			}
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		InvalidateSystemCaches();
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(saved_context);

	return at_end;
}

void
replicant_decoder_before_normal_access(ReplicantDecoder *decoder)
{
	if (decoder->caches_historic)
		InvalidateSystemCaches();
	decoder->caches_historic = false;
	decoder->caches_normal = true;
}

XLogRecPtr
replicant_decoder_read_upto(ReplicantDecoder *decoder)
{
	return decoder->ctx->reader->EndRecPtr;
}

void
replicant_decoder_confirm(ReplicantDecoder *decoder, XLogRecPtr lsn)
{
	TimestampTz now;

	if (lsn <= decoder->confirmed)
		return;
	LogicalConfirmReceivedLocation(lsn);
	decoder->confirmed = lsn;

	/*
	 * Dirty, so the next checkpoint writes it; write it ourselves now and
	 * then.  A lagging on-disk position only costs re-reading WAL after a
	 * crash, since the checkpoint row decides what is skipped.
	 */
	ReplicationSlotMarkDirty();
	now = GetCurrentTimestamp();
	if (TimestampDifferenceExceeds(decoder->last_save, now, SLOT_SAVE_INTERVAL_MS))
	{
		ReplicationSlotSave();
		decoder->last_save = now;
	}
}
