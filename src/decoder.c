/*
 * decoder.c
 *		Driving logical decoding of the pipeline's slot inside the worker.
 *
 * This is what pg_logical_slot_get_changes() does, without SQL and without
 * a walsender: acquire the slot, create a decoding context once, then read
 * WAL records and hand them to the reorder buffer, which calls our output
 * plugin for each committed transaction, which it renders into a render
 * target per format (output_plugin.h).  Reading stops at the end of
 * flushed WAL or when a target's batch is full; the next call continues from the
 * same reader position, so nothing is decoded twice.
 *
 * Where flushed WAL ends is looked up again whenever the reader gets
 * there: while commits keep flushing (the worker is behind), the batch
 * keeps growing, for at most replicant.batch_linger; the first time the
 * reader finds nothing more, the batch goes out at once.
 *
 * Rules kept with other files: docs/internals.md §1 (checkpoint before
 * confirm).
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "replication/decode.h"
#include "replication/slot.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "destination.h"
#include "decoder.h"
#include "fault.h"
#include "output_plugin.h"
#include "plugin_gate.h"
#include "publication.h"
#include "render_target.h"
#include "slot.h"
#include "slot_health.h"
#include "slot_position.h"

/* confirmed_flush reaches disk at most this often (ms); the checkpoint row is the authority. */
#define SLOT_SAVE_INTERVAL_MS 1000
/*
 * The reader's buffer for records spanning pages is kept up to this size,
 * and replaced by one of the size XLogReaderAllocate() gives it.
 */
#define READ_BUFFER_KEEP (1024 * 1024)
#define READ_BUFFER_START (5 * Max(BLCKSZ, XLOG_BLCKSZ))

struct ReplicantDecoder
{
	LogicalDecodingContext *ctx;
	ReplicantDecodingState *state;
	MemoryContext context; /* lives as long as the reader */
	XLogRecPtr confirmed;  /* last position confirmed to the slot */

	/*
	 * Catalog cache entries of user tables loaded under a normal snapshot
	 * must not be used by decoding, nor historic ones by normal queries.
	 */
	bool caches_normal;    /* normal transactions read user tables */
	bool caches_historic;  /* decoding ran since the last reset */
	TimestampTz last_save; /* when the slot was last written to disk */

	/* How far the slot may be confirmed (slot_position.h). */
	ReplicantSlotPosition position;
};

/*
 * One render target per format among the destinations not halted, in
 * their order, each knowing where its destinations are (so that a commit
 * decoded again for a destination behind is neither rendered nor judged
 * for a format whose destinations all have it); whether one of them names
 * its targets after the table alone.
 */
static List *
create_targets(ReplicantPipeline *pipeline, bool *schemaless_names)
{
	List *targets = NIL;
	ListCell *lc;

	*schemaless_names = false;
	foreach(lc, pipeline->destinations)
	{
		ReplicantDestination *destination = lfirst(lc);
		const ReplicantFormat *format = replicant_format_of(destination);
		ReplicantRenderTarget *target = NULL;
		ListCell *lt;

		if (destination->halt_reason != NULL)
			continue;
		foreach(lt, targets)
			if (((ReplicantRenderTarget *) lfirst(lt))->format == format)
				target = lfirst(lt);
		if (target == NULL)
		{
			target = replicant_render_target_create(format);
			targets = lappend(targets, target);
			*schemaless_names |= format->schemaless_target != NULL;
		}
		replicant_render_mark(target, destination->id, destination->checkpoint_commit_lsn);
	}
	return targets;
}

/*
 * Commits at or below the lowest checkpoint of the destinations not halted
 * were delivered to each of them (a halted one gets nothing); the fan-out
 * skips, for each, what its own checkpoint covers.
 */
static XLogRecPtr
lowest_delivered(ReplicantPipeline *pipeline)
{
	XLogRecPtr lowest = InvalidXLogRecPtr;
	bool any = false;
	ListCell *lc;

	foreach(lc, pipeline->destinations)
	{
		ReplicantDestination *destination = lfirst(lc);

		if (destination->halt_reason != NULL)
			continue;
		if (!any || destination->checkpoint_commit_lsn < lowest)
			lowest = destination->checkpoint_commit_lsn;
		any = true;
	}
	return lowest;
}

/*
 * The highest checkpoint of the destinations: below it decoding went back
 * for one.  Not one resyncing alone: its checkpoint was moved, not
 * delivered to, so the commits below it were never checked.
 */
static XLogRecPtr
highest_delivered(ReplicantPipeline *pipeline)
{
	XLogRecPtr highest = InvalidXLogRecPtr;
	ListCell *lc;

	foreach(lc, pipeline->destinations)
	{
		ReplicantDestination *d = lfirst(lc);

		if (d->resync_reason == NULL)
			highest = Max(highest, d->checkpoint_commit_lsn);
	}
	return highest;
}

ReplicantDecoder *
replicant_decoder_start(ReplicantPipeline *pipeline, char **halt_reason, char **halt_cause,
						bool *slot_lost)
{
	char *slot_name = pipeline->slot_name;
	MemoryContext caller_context = CurrentMemoryContext;
	MemoryContext decoder_context;
	ReplicantDecoder *decoder;
	bool schemaless_names;

	*halt_reason = NULL;
	*halt_cause = NULL;
	CheckLogicalDecodingRequirements();
	decoder_context = AllocSetContextCreate(TopMemoryContext, "replicant decoder",
											ALLOCSET_DEFAULT_SIZES);

	/*
	 * Creating the context inside a transaction keeps PROC_IN_LOGICAL_DECODING
	 * unset, so the checkpoint transactions this process commits keep their
	 * normal visibility and vacuum horizon.
	 */
	StartTransactionCommand();

	*halt_reason = replicant_slot_health_acquire(slot_name);
	*slot_lost = *halt_reason != NULL;
	if (*halt_reason != NULL)
	{
		*halt_reason = MemoryContextStrdup(caller_context, *halt_reason);
		CommitTransactionCommand();
		MemoryContextSwitchTo(caller_context);
		return NULL;
	}

	MemoryContextSwitchTo(decoder_context);
	decoder = palloc0(sizeof(ReplicantDecoder));
	decoder->context = decoder_context;
	replicant_plugin_gate_open(true);
	decoder->ctx = CreateDecodingContext(pipeline->checkpoint_end_lsn, NIL, false,
										 REPLICANT_LOCAL_WAL_ROUTINE, NULL, NULL, NULL);
	replicant_plugin_gate_open(false);
	decoder->state = replicant_output_state(decoder->ctx);
	decoder->state->targets = create_targets(pipeline, &schemaless_names);
	decoder->state->pipeline_name = pipeline->name;
	decoder->state->skip_upto = lowest_delivered(pipeline);
	decoder->state->epochs = pipeline->epochs;
	decoder->state->waivers = pipeline->waivers;
	decoder->confirmed = MyReplicationSlot->data.confirmed_flush;
	decoder->caches_normal = true; /* the pipeline was loaded with them */
	decoder->last_save = GetCurrentTimestamp();

	replicant_publication_init(pipeline->owner, schemaless_names, highest_delivered(pipeline));

	/* Transactions committing after confirmed_flush began at restart_lsn. */
	XLogBeginRead(decoder->ctx->reader, MyReplicationSlot->data.restart_lsn);

	CommitTransactionCommand();
	MemoryContextSwitchTo(caller_context);

	/* Held by this process now: only a move made before can be found. */
	*halt_reason = replicant_slot_position_start(&decoder->position, pipeline->id, slot_name,
												 decoder->confirmed, pipeline->checkpoint_end_lsn,
												 pipeline->slot_created_at, pipeline->waivers,
												 halt_cause);
	/* The worker halts and exits, and lets go of the slot. */
	return *halt_reason ? NULL : decoder;
}

/* Whether a target's filling batch reached a limit, or (max_txns 1) holds a transaction. */
static bool
batch_full(ReplicantDecodingState *state, int max_txns, uint64 max_bytes)
{
	ListCell *lc;

	foreach(lc, state->targets)
	{
		ReplicantBatchQueue *queue = ((ReplicantRenderTarget *) lfirst(lc))->queue;

		if (replicant_batch_queue_filling_txns(queue) >= max_txns ||
			replicant_batch_queue_filling_size(queue) >= max_bytes)
			return true;
	}
	return false;
}

/*
 * At *end_of_wal: moves it on if more WAL was flushed meanwhile (the worker
 * is behind) and the linger, counted from the start of the read, has not
 * run out.  Returns false when reading is done.
 */
static bool
more_flushed(XLogRecPtr *end_of_wal, TimestampTz linger_until)
{
	XLogRecPtr flushed = GetFlushRecPtr(NULL);

	/* Failover standbys without it: the next read waits for them (prepare_read). */
	if (flushed <= *end_of_wal || GetCurrentTimestamp() >= linger_until ||
		!replicant_standbys_have(flushed))
		return false;
	*end_of_wal = flushed;
	return true;
}

/*
 * Before a read: a horizon decoding finds at or below the slot's position is
 * applied, and the slot saved, at once, so the slot goes back to a recorded
 * position (slot_position.h); a failover slot waits for its standbys, the
 * answers to the requests out taken first (none is left unread that long).
 */
static void
prepare_read(ReplicantDecoder *decoder, XLogRecPtr end_of_wal)
{
	replicant_slot_position_settle();
	if (!replicant_standbys_have(end_of_wal) && decoder->state->before_wait != NULL)
		decoder->state->before_wait(decoder->state->requests_arg);
	replicant_wait_for_standby_confirmation(end_of_wal);
}

/* Back in the read's transaction after a record; the requests out move on. */
static void
after_record(ReplicantDecoder *decoder, ResourceOwner read_owner)
{
	/*
	 * The reorder buffer runs subtransactions of its own.  A catalog
	 * snapshot one of them took (to reload a nailed relation after an
	 * invalidation) would outlive it and hold back vacuum.
	 */
	InvalidateCatalogSnapshot();
	CurrentResourceOwner = read_owner;
	MemoryContextSwitchTo(decoder->context);
	if (replicant_fault_armed() && batch_full(decoder->state, 1, PG_UINT64_MAX))
		replicant_fault("decode");
	replicant_decoding_pump(decoder->state);
}

bool
replicant_decoder_read(ReplicantDecoder *decoder, int max_txns, uint64 max_bytes,
					   int linger_ms)
{
	LogicalDecodingContext *ctx = decoder->ctx;
	ResourceOwner saved_owner = CurrentResourceOwner;
	ResourceOwner read_owner;
	MemoryContext saved_context = CurrentMemoryContext;
	XLogRecPtr end_of_wal = GetFlushRecPtr(NULL);
	TimestampTz linger_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), linger_ms);
	bool at_end = true;

	prepare_read(decoder, end_of_wal);

	/* Historic and normal catalog cache entries must not mix. */
	if (decoder->caches_normal)
		InvalidateSystemCaches();
	decoder->caches_normal = false;
	decoder->caches_historic = true;

	/*
	 * Inside a transaction the reorder buffer replays each decoded one in a
	 * subtransaction, as under pg_logical_slot_get_changes(), not in a
	 * transaction of its own, whose abort walks every lock partition: 9%
	 * fewer instructions per single-row transaction.  This one takes no
	 * snapshot and no xid, so it holds nothing back.
	 */
	StartTransactionCommand();
	read_owner = CurrentResourceOwner;

	/*
	 * The reader keeps decoded records (large ones palloc'd in the current
	 * context) until the next call, so it must read in a lasting context.
	 */
	MemoryContextSwitchTo(decoder->context);
	PG_TRY();
	{
		while (ctx->reader->EndRecPtr < end_of_wal || more_flushed(&end_of_wal, linger_until))
		{
			XLogRecord *record;
			char *errm = NULL;

			record = XLogReadRecord(ctx->reader, &errm);
			if (errm)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("could not read WAL at %X/%X for logical decoding",
								LSN_FORMAT_ARGS(ctx->reader->EndRecPtr)),
						 errdetail_internal("%s", errm)));
			if (record != NULL)
				LogicalDecodingProcessRecord(ctx, ctx->reader);
			after_record(decoder, read_owner);

			/* A SIGTERM ends the read: the caller exits once it checkpointed. */
			if (ProcDiePending || decoder->state->halt_reason != NULL ||
				(decoder->state->chunk && decoder->state->chunk->complete) ||
				decoder->state->pending_messages != NIL ||
				batch_full(decoder->state, max_txns, max_bytes))
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
	CommitTransactionCommand();
	CurrentResourceOwner = saved_owner;
	MemoryContextSwitchTo(saved_context);

	/*
	 * A record spanning pages is put together in the reader's buffer, which
	 * grows to the largest one read (a large message) and stays so.  The
	 * records read are decoded copies: a buffer grown past READ_BUFFER_KEEP
	 * is replaced by one of the size the reader starts with (it copies the
	 * first two pages of a record there before it looks at the size), and
	 * grown again when a record needs it.
	 */
	if (ctx->reader->readRecordBufSize > READ_BUFFER_KEEP)
	{
		pfree(ctx->reader->readRecordBuf);
		ctx->reader->readRecordBuf = MemoryContextAlloc(decoder->context, READ_BUFFER_START);
		ctx->reader->readRecordBufSize = READ_BUFFER_START;
	}
	return at_end;
}

void
replicant_decoder_set_requests(ReplicantDecoder *decoder, void (*pump)(void *arg),
							   void (*before_wait)(void *arg), void *arg)
{
	decoder->state->pump = pump;
	decoder->state->before_wait = before_wait;
	decoder->state->requests_arg = arg;
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

XLogRecPtr
replicant_decoder_confirmed(ReplicantDecoder *decoder)
{
	return decoder->confirmed;
}

/* Confirms lsn, which a flushed record allows, to the slot (and its file, now and then). */
static void
confirm_recorded(ReplicantDecoder *decoder, XLogRecPtr lsn)
{
	TimestampTz now;

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

void
replicant_decoder_confirm(ReplicantDecoder *decoder, XLogRecPtr lsn)
{
	/* Never past a durable record of how far it may go (slot_position.c). */
	XLogRecPtr allowed = replicant_slot_position_allow(&decoder->position, lsn);

	if (allowed > decoder->confirmed)
		confirm_recorded(decoder, allowed);
	/* Past it in memory only, over the pipeline's own records alone. */
	replicant_slot_position_confirm_own(&decoder->position, decoder->confirmed, lsn);
}

void
replicant_decoder_seal(ReplicantDecoder *decoder)
{
	ListCell *lc;

	foreach(lc, decoder->state->targets)
		replicant_batch_queue_seal(((ReplicantRenderTarget *) lfirst(lc))->queue);
}

ReplicantRenderTarget *
replicant_decoder_target(ReplicantDecoder *decoder, const ReplicantDestination *destination)
{
	const ReplicantFormat *format = replicant_format_of(destination);
	ListCell *lc;

	foreach(lc, decoder->state->targets)
		if (((ReplicantRenderTarget *) lfirst(lc))->format == format)
			return lfirst(lc);
	elog(ERROR, "no render target for format \"%s\"", format->name);
}

const char *
replicant_decoder_halt_reason(ReplicantDecoder *decoder)
{
	return decoder->state->halt_reason;
}

XLogRecPtr
replicant_decoder_halt_lsn(ReplicantDecoder *decoder)
{
	return decoder->state->halt_lsn;
}

const char *
replicant_decoder_halt_cause(ReplicantDecoder *decoder)
{
	return decoder->state->halt_cause;
}

const char *
replicant_decoder_current_table(ReplicantDecoder *decoder)
{
	return decoder->state->current_table;
}

bool
replicant_decoder_in_row_filter(ReplicantDecoder *decoder)
{
	return decoder->state->in_row_filter;
}

ReplicantChunk *
replicant_decoder_chunk(ReplicantDecoder *decoder)
{
	return decoder->state->chunk;
}

void
replicant_decoder_set_chunk(ReplicantDecoder *decoder, ReplicantChunk *chunk)
{
	decoder->state->chunk = chunk;
}

List *
replicant_decoder_take_messages(ReplicantDecoder *decoder)
{
	List *messages = decoder->state->pending_messages;

	decoder->state->pending_messages = NIL;
	return messages;
}
