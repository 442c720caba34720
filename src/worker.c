/*
 * worker.c
 *		The pipeline worker's main loop.
 *
 * One worker per enabled pipeline, connected to the pipeline's database as
 * its owner.  Each cycle:
 *
 *	1. decode WAL into a batch (decoder.c, output_plugin.c) until the end of
 *	   flushed WAL or a batch limit;
 *	2. POST the batch (sink_http.c), retrying with backoff until a 2xx;
 *	3. commit the checkpoint row (checkpoint.c);
 *	4. only then confirm the batch's end to the slot (decoder.c);
 *	5. sleep on the latch until a commit in this database wakes it; under
 *	   load, first linger so that the commits of a few milliseconds share
 *	   one request.
 *
 * A crash between 2 and 3 re-delivers that batch once; nothing is ever
 * confirmed before the sink acknowledged it.  Conditions that would make
 * delivery wrong halt the pipeline: the reason is recorded in the catalog
 * and the worker exits 0, so nothing restarts it until resume_pipeline.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/logical.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "backfill.h"
#include "batch.h"
#include "checkpoint.h"
#include "decoder.h"
#include "delivery.h"
#include "encoder.h"
#include "fault.h"
#include "pipeline.h"
#include "publication.h"
#include "replicant.h"
#include "shmem.h"
#include "sink_http.h"
#include "snapshot.h"
#include "worker.h"

/* Longest sleep when idle; commits wake the worker long before. */
#define IDLE_TIMEOUT_MS 1000
/* Sleep while WAL is inserted but not flushed yet (synchronous_commit=off). */
#define FLUSH_WAIT_MS 10

static ReplicantPipelineSlot *MySlot = NULL;
static uint32 MyGeneration = 0;

static ReplicantPipeline *pipeline;
static ReplicantBatch *batch;
static ReplicantDecoder *decoder;
static ReplicantSink *sink;
static ReplicantBackfill *backfill;	/* incremental backfill being read */
static const char *worker_phase = "starting";	/* for a halt's reason */

static void
worker_detach(int code, Datum arg)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (MySlot->generation == MyGeneration && MySlot->pid == MyProcPid)
	{
		MySlot->pid = 0;
		MySlot->latch = NULL;
	}
	LWLockRelease(replicant_shmem->lock);
}

/* Claims the shared slot; exits quietly if it was given to someone else. */
static void
worker_attach(int slot_index, ReplicantWorkerArgs *args)
{
	ReplicantPipelineSlot *slot = &replicant_shmem->slots[slot_index];

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (!slot->in_use || slot->generation != args->generation ||
		!slot->runnable || (slot->pid != 0 && slot->pid != MyProcPid))
	{
		LWLockRelease(replicant_shmem->lock);
		proc_exit(0);
	}
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	slot->state = REPLICANT_STATE_STARTING;
	slot->last_error[0] = '\0';
	slot->stop_requested = false;
	LWLockRelease(replicant_shmem->lock);

	MySlot = slot;
	MyGeneration = args->generation;
	before_shmem_exit(worker_detach, (Datum) 0);
}

REPLICANT_NORETURN static void
worker_halt(const char *reason)
{
	replicant_delivery_halt(MySlot, pipeline, reason);
}

/*
 * Confirms lsn to the slot (only ever after the checkpoint is committed) and
 * tells await_delivered() callers how far delivery has come.
 */
static void
confirm(XLogRecPtr lsn)
{
	replicant_decoder_confirm(decoder, lsn);
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (lsn > MySlot->delivered_upto)
		MySlot->delivered_upto = lsn;
	LWLockRelease(replicant_shmem->lock);
	ConditionVariableBroadcast(&MySlot->delivered_cv);
}

/*
 * Decodes, turning a data error while encoding a change (a value its type
 * cannot output, or that cannot be converted to UTF-8) into a fail-closed
 * halt instead of a crash loop.  The reason names the table and the error
 * class, never the message, which could quote the value.
 */
static bool
read_or_halt(void)
{
	MemoryContext context = CurrentMemoryContext;
	bool		at_end = true;

	PG_TRY();
	{
		at_end = replicant_decoder_read(decoder, pipeline->batch_max_transactions,
										(uint64) pipeline->batch_max_bytes);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_DATA_EXCEPTION)
			PG_RE_THROW();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		replicant_delivery_halt(MySlot, pipeline,
								psprintf(decoder->state->in_row_filter ?
										 "the row filter of table \"%s\" failed on a change (error class %s)" :
										 "could not encode a change of table \"%s\" (error class %s)",
										 decoder->state->current_table,
										 unpack_sql_state(edata->sqlerrcode)));
	}
	PG_END_TRY();
	return at_end;
}

/* Servers from 15.19 on load only output plugins listed in this setting. */
static void
check_output_plugin_allowed(void)
{
	const char *setting = GetConfigOption("output_plugin_libraries", true, false);
	char	   *copy;
	List	   *names;
	ListCell   *lc;

	if (setting == NULL)
		return;
	copy = pstrdup(setting);
	if (SplitIdentifierString(copy, ',', &names))
	{
		foreach(lc, names)
			if (strcmp(lfirst(lc), "replicant") == 0)
				return;
	}
	worker_halt("\"output_plugin_libraries\" does not list \"replicant\"");
}

/* Counts an acknowledged request in replicant.status. */
static void
note_delivered(int64 transactions, int64 changes, size_t bytes)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	MySlot->transactions_delivered += transactions;
	MySlot->changes_delivered += changes;
	MySlot->batches_delivered++;
	MySlot->bytes_delivered += bytes;
	MySlot->last_delivery_at = GetCurrentTimestamp();
	MySlot->state = REPLICANT_STATE_STREAMING;
	MySlot->last_error[0] = '\0';
	LWLockRelease(replicant_shmem->lock);
}

/*
 * Delivers transactions [first, last] of the batch, retrying until the sink
 * takes them.  Returns the index of the last transaction delivered, which is
 * below last when a 413 made it split the range.
 */
static int
deliver_range(int first, int last)
{
	for (;;)
	{
		ReplicantBody body;
		ReplicantSinkResult result;
		char		webhook_id[NAMEDATALEN + 32];

		snprintf(webhook_id, sizeof(webhook_id), "%s-" UINT64_FORMAT,
				 pipeline->name, (uint64) batch->txns[last].commit_lsn);
		replicant_batch_body(batch, first, last, &body);
		replicant_delivery_post(MySlot, sink, webhook_id, &body, &result);

		switch (result.outcome)
		{
			case REPLICANT_SINK_OK:
				replicant_fault("after_ack");
				replicant_checkpoint_commit(pipeline->id,
											batch->txns[last].commit_lsn,
											batch->txns[last].end_lsn);
				replicant_fault("after_checkpoint");
				confirm(batch->txns[last].end_lsn);
				{
					int64		changes = 0;
					int			i;

					for (i = first; i <= last; i++)
						changes += batch->txns[i].nchanges;
					note_delivered(last - first + 1, changes, body.length);
				}
				return last;

			case REPLICANT_SINK_RETRY:
				pg_unreachable();

			case REPLICANT_SINK_TOO_LARGE:
				if (first == last)
					worker_halt(psprintf("sink rejected batch: HTTP 413 for a single transaction (commit LSN %X/%X)",
										 LSN_FORMAT_ARGS(batch->txns[last].commit_lsn)));
				last = first + (last - first) / 2;
				break;

			case REPLICANT_SINK_GONE:
			case REPLICANT_SINK_REJECTED:
				replicant_delivery_refused(MySlot, pipeline, &result, "batch",
										   psprintf(" (commit LSN %X/%X)",
													LSN_FORMAT_ARGS(batch->txns[last].commit_lsn)));
		}
	}
}

/*
 * Delivers what is left of a completed backfill chunk, at its high
 * watermark's place in the stream, in requests of at most batch_max_bytes
 * (a single larger row goes alone), and records the backfill's progress.
 * Each request's webhook-id is <pipeline>-b<backfill>-<position>-<part>.
 */
static void
deliver_chunk(ReplicantChunk *chunk)
{
	int			rows = 0;
	int			next = 0;
	int			part = 0;
	bool		more = chunk->names != NULL;
	StringInfoData changes;
	StringInfoData out;

	initStringInfo(&changes);
	initStringInfo(&out);
	while (more)
	{
		ReplicantMemoryBody state;
		ReplicantBody body;
		ReplicantSinkResult result;
		int			n;

		/* The prefix's length, so that the whole body stays within bounds. */
		replicant_batch_snapshot_prefix(&out, pipeline->name, chunk->names,
										chunk->backfill->id, false, false);
		resetStringInfo(&changes);
		n = replicant_chunk_rows(chunk, &next, &changes,
								 pipeline->batch_max_bytes - out.len - 2);
		more = next < chunk->nrows;
		replicant_batch_snapshot_prefix(&out, pipeline->name, chunk->names,
										chunk->backfill->id,
										!chunk->backfill->first_sent && part == 0,
										chunk->last && !more);
		appendBinaryStringInfo(&out, changes.data, changes.len);
		appendStringInfoString(&out, "]}");
		replicant_body_from_buffer(&body, &state, &out);
		replicant_delivery_post(MySlot, sink,
								psprintf("%s-b" INT64_FORMAT "-" INT64_FORMAT "-%d", pipeline->name,
										 chunk->backfill->id, chunk->position, part++),
								&body, &result);
		if (result.outcome != REPLICANT_SINK_OK)
			replicant_delivery_refused(MySlot, pipeline, &result, "backfill batch", "");
		note_delivered(0, n, out.len);
		rows += n;
	}
	replicant_backfill_record_chunk(chunk, rows);
}

/*
 * Reads the next chunk of the backfill, turning what retrying cannot fix
 * into a fail-closed halt: a table the owner may not read whole, or an
 * error while reading (a revoked privilege, a value its type cannot
 * output).  The reason names the table and the error class, never the
 * message, which could quote a key.
 */
static ReplicantChunk *
read_chunk_or_halt(void)
{
	MemoryContext context = CurrentMemoryContext;
	ReplicantChunk *volatile chunk = NULL;
	char	   *volatile reason = NULL;

	PG_TRY();
	{
		char	   *denied = NULL;

		chunk = replicant_backfill_read_chunk(pipeline, backfill, &denied);
		reason = denied;
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		int			class;

		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		class = ERRCODE_TO_CATEGORY(edata->sqlerrcode);
		/* A cancel, a shortage or a conflict can pass: restart and retry. */
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED ||
			class == ERRCODE_INSUFFICIENT_RESOURCES ||
			class == ERRCODE_OPERATOR_INTERVENTION ||
			class == ERRCODE_SYSTEM_ERROR ||
			class == ERRCODE_TRANSACTION_ROLLBACK)
			PG_RE_THROW();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		reason = psprintf("could not read a backfill chunk of table \"%s\" (error class %s)",
						  backfill->relname, unpack_sql_state(edata->sqlerrcode));
	}
	PG_END_TRY();
	if (reason)
		worker_halt(reason);
	return chunk;
}

/*
 * Delivers non-transactional messages, each in its own batch at its place
 * in the stream.  They have no commit_lsn, so no checkpoint moves: after a
 * crash they can arrive again (at-least-once).
 */
static void
deliver_messages(List *messages)
{
	ListCell   *lc;

	foreach(lc, messages)
	{
		StringInfoData out;
		ReplicantMemoryBody state;
		ReplicantBody body;
		ReplicantSinkResult result;
		char	   *message = lfirst(lc);
		const char *lsn = strstr(message, "\"lsn\":");

		initStringInfo(&out);
		appendStringInfoString(&out, "{\"pipeline\":");
		replicant_encode_string(&out, pipeline->name);
		appendStringInfo(&out, ",\"kind\":\"message\",\"message\":%s}", message);
		replicant_body_from_buffer(&body, &state, &out);
		replicant_delivery_post(MySlot, sink,
								psprintf("%s-m%.*s", pipeline->name,
										 (int) strspn(lsn + 6, "0123456789"), lsn + 6),
								&body, &result);
		if (result.outcome != REPLICANT_SINK_OK)
			replicant_delivery_refused(MySlot, pipeline, &result, "message batch", "");
		note_delivered(0, 0, out.len);
	}
}

static void
deliver_batch(void)
{
	int			first = 0;

	while (first < batch->ntxns)
		first = deliver_range(first, batch->ntxns - 1) + 1;
	replicant_batch_reset(batch);
}

/*
 * Under load, lets commits gather until replicant.batch_linger after the
 * cycle that delivered began, instead of paying a request, a checkpoint
 * commit and a WAL flush per commit: that CPU would come out of the
 * workload's share.  A commit after a quiet spell still goes out at once.
 * The latch is not waited on (commits set it); a shutdown waits at most
 * the linger.
 */
static void
linger_after(TimestampTz cycle_start)
{
	long		elapsed_ms = (long) ((GetCurrentTimestamp() - cycle_start) / 1000);

	if (elapsed_ms < replicant_batch_linger_ms)
		(void) WaitLatch(NULL, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 replicant_batch_linger_ms - elapsed_ms, PG_WAIT_EXTENSION);
}

static void
load_pipeline(int32 pipeline_id)
{
	ReplicantCatalogAccess access;
	bool		may_receive_messages = false;

	replicant_catalog_begin(&access);
	pipeline = replicant_pipeline_load(pipeline_id, TopMemoryContext);
	if (pipeline != NULL)
	{
		replicant_publication_load_shapes(pipeline_id);
		replicant_publication_load_denied(pipeline->owner);
		may_receive_messages = has_rolreplication(pipeline->owner);
	}
	replicant_catalog_end(&access);

	if (pipeline == NULL || !pipeline->enabled || pipeline->halt_reason != NULL)
	{
		/* Dropped, disabled or halted since the launcher looked. */
		LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
		MySlot->runnable = false;
		if (pipeline && pipeline->halt_reason)
			MySlot->state = REPLICANT_STATE_HALTED;
		LWLockRelease(replicant_shmem->lock);
		proc_exit(0);
	}
	/* The owner may have lost the attribute since create or alter. */
	if (pipeline->messages && !may_receive_messages)
		worker_halt(REPLICANT_MESSAGES_NEED_REPLICATION);
}

/*
 * Errors that a restart would only meet again: a wrong setting, a missing
 * privilege or object, a read-only transaction, a full slot table.  The
 * rest (out of memory, a conflict, a lost connection) may pass, so the
 * worker exits and the launcher restarts it with backoff.
 */
static bool
retry_cannot_fix(int sqlerrcode)
{
	switch (ERRCODE_TO_CATEGORY(sqlerrcode))
	{
		case ERRCODE_DATA_EXCEPTION:
		case ERRCODE_INVALID_TRANSACTION_STATE:
		case ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION:
		case ERRCODE_SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION:
		case ERRCODE_FEATURE_NOT_SUPPORTED:
			return true;
		default:
			return sqlerrcode == ERRCODE_CONFIGURATION_LIMIT_EXCEEDED;
	}
}

static void run_pipeline(int slot_index);

void
replicant_worker_main(Datum main_arg)
{
	ReplicantWorkerArgs args;
	MemoryContext context;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	worker_attach(DatumGetInt32(main_arg), &args);
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.owner, 0);
	replicant_encoder_pin_settings();
	replicant_pin_worker_settings();

	load_pipeline(args.pipeline_id);
	context = CurrentMemoryContext;
	PG_TRY();
	{
		run_pipeline(DatumGetInt32(main_arg));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		if (!retry_cannot_fix(edata->sqlerrcode))
			PG_RE_THROW();
		/* The message could quote a value: the class and the phase only. */
		FlushErrorState();
		AbortOutOfAnyTransaction();
		worker_halt(psprintf("pipeline worker failed while %s with error class %s",
							 worker_phase, unpack_sql_state(edata->sqlerrcode)));
	}
	PG_END_TRY();
}

static void
run_pipeline(int slot_index)
{
	char	   *halt_reason;
	char	   *appname;
	MemoryContext cycle_context;

	appname = psprintf("replicant pipeline %s", pipeline->name);
	SetConfigOption("application_name", appname, PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname(appname);

	check_output_plugin_allowed();
	worker_phase = "taking the initial snapshot";
	replicant_snapshot_initial(MySlot, slot_index, pipeline);
	worker_phase = "starting to stream";

	/*
	 * Commit asynchronously from here on: whatever the worker committed is
	 * flushed before its next request leaves (replicant_delivery_post), so
	 * no commit waits for a WAL flush of its own.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	MemoryContextSwitchTo(TopMemoryContext);
	batch = replicant_batch_create(pipeline->name);
	decoder = replicant_decoder_start(pipeline, batch, &halt_reason);
	if (decoder == NULL)
		worker_halt(halt_reason);
	sink = replicant_delivery_sink(pipeline);

	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" streaming from %X/%X",
					pipeline->name, LSN_FORMAT_ARGS(decoder->confirmed))));
	replicant_shmem_set_state(MySlot, REPLICANT_STATE_STREAMING);
	confirm(Max(decoder->confirmed, pipeline->checkpoint_end_lsn));
	backfill = replicant_backfill_next(pipeline->id);
	worker_phase = "streaming";

	cycle_context = AllocSetContextCreate(TopMemoryContext, "replicant cycle",
										  ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		bool		at_end;
		bool		delivered = false;
		long		timeout;
		TimestampTz cycle_start;

		MemoryContextSwitchTo(cycle_context);
		MemoryContextReset(cycle_context);

		/* Read the next backfill chunk; the decoder completes it at its high watermark. */
		if (backfill != NULL && decoder->state->chunk == NULL &&
			GetCurrentTimestamp() >= backfill->retry_at)
		{
			MemoryContextSwitchTo(TopMemoryContext);
			replicant_decoder_before_normal_access(decoder);
			decoder->state->chunk = read_chunk_or_halt();
			MemoryContextSwitchTo(cycle_context);
		}

		/* A commit after this point sets the latch again. */
		pg_atomic_write_u32(&MySlot->nudged, 0);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		replicant_delivery_stop_if_requested(MySlot);
		replicant_delivery_reload_config();

		cycle_start = GetCurrentTimestamp();
		at_end = read_or_halt();
		if (decoder->state->halt_reason)
			replicant_delivery_halt_at(MySlot, pipeline, decoder->state->halt_reason,
									   decoder->state->halt_lsn);

		if (batch->ntxns > 0)
		{
			deliver_batch();
			delivered = true;
		}
		if (decoder->state->pending_messages != NIL)
		{
			deliver_messages(decoder->state->pending_messages);
			list_free_deep(decoder->state->pending_messages);
			decoder->state->pending_messages = NIL;
			continue;
		}
		if (decoder->state->chunk && decoder->state->chunk->complete)
		{
			ReplicantChunk *chunk = decoder->state->chunk;

			deliver_chunk(chunk);
			decoder->state->chunk = NULL;
			MemoryContextDelete(chunk->context);
			if (chunk->last)
			{
				pfree(backfill);
				MemoryContextSwitchTo(TopMemoryContext);
				replicant_decoder_before_normal_access(decoder);
				backfill = replicant_backfill_next(pipeline->id);
			}
			pfree(chunk);
			continue;
		}
		if (batch->ntxns == 0 && at_end)
		{
			/*
			 * Nothing published up to here: let the slot move on so quiet
			 * pipelines never pin WAL.  Transactions still in progress are
			 * safe, since decoding restarts at restart_lsn.
			 */
			confirm(replicant_decoder_read_upto(decoder));
		}

		if (!at_end)
			continue;
		if (delivered)
			linger_after(cycle_start);

		timeout = IDLE_TIMEOUT_MS;
		if (GetXLogInsertRecPtr() > replicant_decoder_read_upto(decoder))
			timeout = FLUSH_WAIT_MS;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
	}
}
