/*
 * worker.c
 *		The pipeline worker's main loop.
 *
 * One worker per enabled pipeline, connected to the pipeline's database as
 * its owner.  Each cycle:
 *
 *	1. decode WAL into a batch per format (decoder.c, output_plugin.c,
 *	   render_target.c) until the end of flushed WAL or a batch limit;
 *	2. send it to every destination side by side (fanout.c), each retrying
 *	   with backoff until its sink takes it or refuses it; a request not
 *	   answered yet stays out while the next batch is decoded;
 *	3. record each acknowledgement, and commit the checkpoint rows
 *	   (checkpoint.c) if replicant.checkpoint_interval has passed since the
 *	   last commit, else when it has;
 *	4. only then confirm the floor of the checkpoints to the slot;
 *	5. sleep on the latch until a commit in this database wakes it, unless
 *	   one already has.
 *
 * Batching adapts to the load: a commit on an idle pipeline goes out at
 * once, while the commits made during a request, or flushed faster than
 * they are decoded, share the next one (for at most replicant.batch_linger
 * of reading, within the batch limits).  A caught-up worker whose
 * deliveries use more than its CPU budget rests after them, at most
 * batch_linger, so that under a steady stream of commits it batches
 * instead of spending a core on one request per commit (cpu_budget.c).
 *
 * A crash re-delivers the batches acknowledged since the last checkpoint
 * commit (at most one interval's worth; with an interval of 0, the last
 * batch or the one out); nothing is ever confirmed before its checkpoint.
 * A pending checkpoint is committed before messages, backfill chunks, a
 * stop, a halt found by decoding or a sink's refusal, and at once for
 * await_delivered().  Conditions that would make delivery wrong halt the
 * pipeline: the reason is recorded in the catalog and the worker exits 0,
 * so nothing restarts it until resume_pipeline.
 * An error halts too, unless it is known to be transient: then the worker
 * exits and the launcher restarts it, a bounded number of times
 * (replicant_delivery_fail).  The phase the worker is in (shmem.h) names
 * what failed.
 *
 * Rules kept with other files: docs/internals.md §1 (checkpoint before
 * confirm), §4, §8 (halt or retry).
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backfill.h"
#include "backfill_progress.h"
#include "backfill_plan.h"
#include "chunk.h"
#include "checkpoint.h"
#include "cpu_budget.h"
#include "decoder.h"
#include "delivery.h"
#include "destination.h"
#include "encoder.h"
#include "event_log.h"
#include "fanout.h"
#include "fault.h"
#include "metrics.h"
#include "pipeline.h"
#include "plugin_gate.h"
#include "publication.h"
#include "replicant.h"
#include "resync.h"
#include "runs.h"
#include "shmem.h"
#include "sink_ddl.h"
#include "slot_health.h"
#include "snapshot.h"
#include "stop_signal.h"
#include "table_shape.h"
#include "worker.h"

/* Longest sleep when idle; commits wake the worker long before. */
#define IDLE_TIMEOUT_MS 1000
/* Sleep while WAL is inserted but not flushed yet (synchronous_commit=off). */
#define FLUSH_WAIT_MS 10
/* How often at most a table skipped while unpublished is looked at again. */
#define SKIP_CHECK_MS 1000

/*
 * Everything the worker holds, passed along from replicant_worker_main.  It
 * lives in TopMemoryContext: the exit callback reads it after an error has
 * unwound the stack.
 */
typedef struct Worker
{
	ReplicantPipelineSlot *slot; /* our shared-memory slot */
	uint32 generation;           /* the slot's generation we were started for */
	int slot_index;
	ReplicantPipeline *pipeline;
	ReplicantDecoder *decoder;
	ReplicantFanout *fanout;     /* its destinations, sent to (fanout.h) */
	ReplicantBackfill *backfill; /* incremental backfill being read */
	bool skips_pending;          /* a table skipped while unpublished may be
								  * published again */
	TimestampTz skip_check_at;   /* when to look at it again */
	bool skip_check_due;         /* look whatever changed: a new skip */
	uint64 skip_changes;         /* publication changes seen before the last look */
	ReplicantCpuBudget budget;   /* its deliveries' CPU once caught up */
	int batch_max_transactions;  /* the lowest of its destinations' */
	int batch_max_bytes;
} Worker;

static void
worker_detach(int code, Datum arg)
{
	Worker *w = (Worker *) DatumGetPointer(arg);

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (w->slot->generation == w->generation && w->slot->pid == MyProcPid)
	{
		w->slot->pid = 0;
		w->slot->latch = NULL;
	}
	LWLockRelease(replicant_shmem->lock);
}

/*
 * Claims the shared slot; exits quietly if it was given to someone else,
 * or to another configuration (the launcher stops this worker then, and
 * the stop it asked for would otherwise be cleared here).  An exit for a
 * changed configuration of its own pipeline says so in the slot
 * (superseded): it is no failure of the pipeline's.
 */
static void
worker_attach(Worker *w, ReplicantWorkerArgs *args)
{
	ReplicantPipelineSlot *slot = &replicant_shmem->slots[w->slot_index];

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (!slot->in_use || slot->generation != args->generation ||
		!slot->runnable || slot->dropping || slot->held ||
		slot->config_version != args->config_version ||
		(slot->pid != 0 && slot->pid != MyProcPid))
	{
		if (slot->in_use && slot->generation == args->generation && slot->pid == 0 &&
			slot->config_version != args->config_version)
			slot->superseded = true;
		LWLockRelease(replicant_shmem->lock);
		proc_exit(0);
	}
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	for (int i = 0; i < replicant_shmem_ndestinations(slot); i++)
	{
		slot->destinations[i].state = REPLICANT_STATE_STARTING;
		slot->destinations[i].last_error[0] = '\0';
		slot->destinations[i].next_retry_at = 0;
	}
	slot->stop_requested = false;
	slot->phase = REPLICANT_PHASE_STARTING;
	slot->connected = false;
	slot->interrupted = false;
	slot->shard_interrupted = false;
	slot->superseded = false;
	slot->worker_starts++;
	LWLockRelease(replicant_shmem->lock);
	replicant_log_state(slot->name, "started", REPLICANT_LOG_END);

	replicant_shmem_set_own_slot(slot);
	w->slot = slot;
	w->generation = args->generation;
	before_shmem_exit(worker_detach, PointerGetDatum(w));
}

REPLICANT_NORETURN static void
worker_halt(Worker *w, const char *reason)
{
	/* The request out (decoding went on meanwhile) is answered, and checkpointed, first. */
	if (w->fanout != NULL)
	{
		replicant_fanout_settle(w->fanout);
		replicant_fanout_commit_pending(w->fanout);
	}
	replicant_delivery_halt(w->slot, w->pipeline, reason);
}

/*
 * Commits the pending checkpoint, unless that fails too: after an error,
 * before the worker halts or exits, so that what the sink acknowledged is
 * not sent again.
 */
static void
commit_pending_if_possible(Worker *w)
{
	MemoryContext context = CurrentMemoryContext;

	if (w->fanout == NULL || !replicant_checkpoint_is_pending())
		return;
	PG_TRY();
	{
		replicant_fanout_commit_pending(w->fanout);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(context);
		FlushErrorState();
		AbortOutOfAnyTransaction();
	}
	PG_END_TRY();
}

/* Servers from 15.19 on load only output plugins listed in output_plugin_libraries. */
static void
check_output_plugin_allowed(Worker *w)
{
	if (!replicant_plugin_gate_server_allows())
		worker_halt(w, "\"output_plugin_libraries\" does not list \"replicant\"");
}

/*
 * Reads the next chunk of the backfill; halts when the owner may not read
 * the table whole.  An error while reading (a revoked privilege, a value
 * its type cannot output, a conflict) is the worker's (worker_failed).
 */
static ReplicantChunk *
read_chunk(Worker *w)
{
	ReplicantChunk *chunk;
	char *denied = NULL;

	replicant_shmem_enter_phase(REPLICANT_PHASE_BACKFILL_READ);
	replicant_fault("backfill_read");
	chunk = replicant_backfill_read_chunk(w->pipeline, w->backfill, &denied);
	if (denied)
		worker_halt(w, denied);
	return chunk;
}

/*
 * Decoding fills batches within the lowest limits of the destinations
 * delivered to.  Halts when none is left (each halted alone, which the
 * last one's halt prevents), unless a resync_pipeline() call is to resync
 * them.  More than shared memory has places for is an error.
 */
static void
check_destinations(Worker *w)
{
	ListCell *lc;
	bool any = false;

	if (list_length(w->pipeline->destinations) > REPLICANT_MAX_DESTINATIONS)
		elog(ERROR, "pipeline \"%s\" has more than %d destinations",
			 w->pipeline->name, REPLICANT_MAX_DESTINATIONS);
	foreach(lc, w->pipeline->destinations)
	{
		ReplicantDestination *destination = lfirst(lc);

		if (destination->halt_reason != NULL)
			continue;
		w->batch_max_transactions = any ? Min(w->batch_max_transactions,
											  destination->batch_max_transactions) :
										  destination->batch_max_transactions;
		w->batch_max_bytes = any ? Min(w->batch_max_bytes, destination->batch_max_bytes) :
								   destination->batch_max_bytes;
		any = true;
	}
	/* A resync_pipeline() of several resyncs halted ones too (resync_destinations.c). */
	if (!any && !(list_length(w->pipeline->destinations) > 1 && w->pipeline->resync_reason != NULL &&
				  w->pipeline->resync_losses == 0))
		worker_halt(w, "every destination of the pipeline is halted");
}

static void
load_pipeline(Worker *w, int32 pipeline_id)
{
	ReplicantCatalogAccess access;
	bool may_receive_messages = false;

	replicant_catalog_begin(&access);
	w->pipeline = replicant_pipeline_load(pipeline_id, TopMemoryContext);
	if (w->pipeline != NULL)
	{
		replicant_table_shape_load(pipeline_id);
		replicant_publication_load_denied(w->pipeline->owner);
		may_receive_messages = has_rolreplication(w->pipeline->owner);
	}
	replicant_catalog_end(&access);

	if (w->pipeline == NULL || !w->pipeline->enabled || w->pipeline->halt_reason != NULL)
	{
		/* Dropped, disabled or halted since the launcher looked. */
		LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
		w->slot->runnable = false;
		if (w->pipeline && w->pipeline->halt_reason)
			replicant_shmem_set_state_locked(w->slot, REPLICANT_STATE_HALTED);
		LWLockRelease(replicant_shmem->lock);
		proc_exit(0);
	}
	/* The owner may have lost the attribute since create or alter. */
	if (replicant_epoch_any_messages(w->pipeline->epochs) && !may_receive_messages)
		worker_halt(w, REPLICANT_MESSAGES_NEED_REPLICATION);
	check_destinations(w);
	replicant_checkpoint_track(w->pipeline);
}

/* Counts this run before anything that could crash (runs.c). */
static void
count_run(Worker *w, bool start_over)
{
	char *halt_reason = replicant_runs_begin(w->pipeline->id, start_over);

	if (halt_reason)
		worker_halt(w, halt_reason);
}

/* The table a failure in phase involves, or NULL. */
static const char *
failed_table(Worker *w, ReplicantPhase phase)
{
	switch (phase)
	{
		case REPLICANT_PHASE_ENCODE:
			return w->decoder ? replicant_decoder_current_table(w->decoder) : NULL;
		case REPLICANT_PHASE_BACKFILL_READ:
			return w->backfill ? w->backfill->relname : NULL;
		case REPLICANT_PHASE_DELIVER:
			return replicant_fanout_chunk_table(w->fanout);
		default:
			return NULL;
	}
}

/*
 * Acts on the error that ended a run (the current one): halts, or exits
 * for the launcher to restart the worker when it is transient
 * (replicant_delivery_fail).  The reason names the phase, the table and
 * the error class, never the message, which could quote a value.
 */
REPLICANT_NORETURN static void
worker_failed(Worker *w, int32 pipeline_id)
{
	ErrorData *edata = CopyErrorData();
	ReplicantPhase phase = w->slot->phase;
	char *reason;

	FlushErrorState();
	AbortOutOfAnyTransaction();
	if (phase == REPLICANT_PHASE_DECODE && w->decoder &&
		replicant_decoder_in_row_filter(w->decoder))
		reason = psprintf("the row filter of table \"%s\" failed on a change (error class %s)",
						  replicant_decoder_current_table(w->decoder),
						  unpack_sql_state(edata->sqlerrcode));
	else
		reason = replicant_delivery_failure(phase, failed_table(w, phase), edata->sqlerrcode);
	if (w->pipeline == NULL)
	{
		/* Failed loading it: enough to record the halt by. */
		w->pipeline = palloc0(sizeof(ReplicantPipeline));
		w->pipeline->id = pipeline_id;
		w->pipeline->name = w->slot->name;
	}
	commit_pending_if_possible(w);
	replicant_delivery_fail(w->slot, w->pipeline, edata, reason);
}

/*
 * Before a stop replicant asked for ends the worker quietly: what the sink
 * acknowledged is committed (unless the pipeline is being dropped), or the
 * next worker would send it again.
 */
static void
commit_before_quiet_stop(Worker *w)
{
	if (!replicant_stop_signal_pending())
		return;
	FlushErrorState();
	AbortOutOfAnyTransaction();
	if (replicant_delivery_may_commit_at_stop(w->slot))
		commit_pending_if_possible(w);
}

static void run_pipeline(Worker *w);

void
replicant_worker_main(Datum main_arg)
{
	ReplicantWorkerArgs args;
	MemoryContext context;
	Worker *w;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));

	replicant_stop_signal_init(&replicant_shmem->slots[DatumGetInt32(main_arg)], args.generation,
							   "replicant pipeline", LOG, false);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	w = MemoryContextAllocZero(TopMemoryContext, sizeof(Worker));
	w->slot_index = DatumGetInt32(main_arg);
	worker_attach(w, &args);
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.owner, 0);
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	w->slot->connected = true;
	LWLockRelease(replicant_shmem->lock);
	replicant_encoder_pin_settings();
	replicant_pin_worker_settings();

	context = CurrentMemoryContext;
	replicant_stop_signal_arm();
	PG_TRY();
	{
		load_pipeline(w, args.pipeline_id);
		count_run(w, args.start_over);
		run_pipeline(w);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(context);
		commit_before_quiet_stop(w);
		replicant_stop_signal_exit_if_asked();
		worker_failed(w, args.pipeline_id);
	}
	PG_END_TRY();
}

/*
 * Takes what is left of the initial snapshot, then acquires the slot, the
 * batch and the sink, and picks the first incremental backfill to read.
 */
static int
live_destinations(Worker *w)
{
	ListCell *lc;
	int n = 0;

	foreach(lc, w->pipeline->destinations)
		n += ((ReplicantDestination *) lfirst(lc))->halt_reason == NULL;
	return n;
}

/*
 * Halts a destination alone before streaming starts (its tables could not
 * be made), as the fan-out halts one: decoding and the fan-out then leave
 * it out, and it holds the slot at its checkpoint until
 * resume_pipeline(pipeline, destination).
 */
static void
halt_destination_at_start(Worker *w, ReplicantDestination *destination, char *reason)
{
	ReplicantDestinationSlot *place;

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	place = replicant_shmem_destination(w->slot, destination->id);
	LWLockRelease(replicant_shmem->lock);
	replicant_destination_halted(w->pipeline->name, destination, place, reason, InvalidXLogRecPtr);
	destination->halt_reason = MemoryContextStrdup(TopMemoryContext, reason);
}

static void
start_streaming(Worker *w)
{
	char *halt_reason;
	char *halt_cause;
	bool slot_lost;
	char *appname;
	ListCell *lc;

	appname = psprintf("replicant pipeline %s", w->pipeline->name);
	SetConfigOption("application_name", appname, PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname(appname);

	check_output_plugin_allowed(w);
	replicant_destination_mirror(w->slot, w->pipeline->destinations);
	foreach(lc, w->pipeline->destinations)
	{
		ReplicantDestination *destination = lfirst(lc);

		char *refusal;

		if (destination->halt_reason != NULL || !destination->create_tables ||
			strcmp(destination->format, "clickhouse") != 0)
			continue;
		replicant_shmem_enter_phase(REPLICANT_PHASE_DELIVER);
		refusal = replicant_sink_ddl_create(w->slot, w->pipeline, destination,
											live_destinations(w) == 1);
		if (refusal != NULL)
			halt_destination_at_start(w, destination, refusal);
	}
	replicant_shmem_enter_phase(REPLICANT_PHASE_SNAPSHOT);
	replicant_snapshot_initial(w->slot, w->slot_index, w->pipeline);
	replicant_shmem_enter_phase(REPLICANT_PHASE_STARTING);

	/*
	 * Commit asynchronously from here on: whatever the worker committed is
	 * flushed before its next request leaves (replicant_delivery_post), so
	 * no commit waits for a WAL flush of its own.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	MemoryContextSwitchTo(TopMemoryContext);
	w->decoder = replicant_decoder_start(w->pipeline, &halt_reason, &halt_cause, &slot_lost);
	if (w->decoder == NULL && slot_lost)
		halt_reason = replicant_resync_on_loss(w->slot, w->pipeline, halt_reason);
	if (w->decoder == NULL)
		replicant_delivery_halt_at(w->slot, w->pipeline, halt_reason, InvalidXLogRecPtr, halt_cause);
	replicant_slot_health_watch(w->pipeline);

	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" streaming from %X/%X",
					w->pipeline->name, LSN_FORMAT_ARGS(replicant_decoder_confirmed(w->decoder)))));
	replicant_shmem_set_state(w->slot, REPLICANT_STATE_STREAMING);
	w->fanout = replicant_fanout_create(w->slot, w->pipeline, w->decoder);
	replicant_decoder_set_requests(w->decoder, replicant_fanout_pump, replicant_fanout_before_wait, w->fanout);
	replicant_metrics_progressed(w->slot);
	replicant_log_state(w->pipeline->name, "streaming", "lsn",
						psprintf("%X/%X", LSN_FORMAT_ARGS(replicant_decoder_confirmed(w->decoder))), REPLICANT_LOG_END);
	/* One whose reads were done before a restart, or that had none to do. */
	replicant_fanout_end_resyncs(w->fanout);
	w->backfill = replicant_backfill_next(w->pipeline->id);
	w->skips_pending = true;
	w->skip_check_due = true;
}

/*
 * Backfills again, from their start, the tables that a backfill or the
 * initial snapshot skipped while no publication published them, once one
 * publishes them again (replicant_backfill_replan_skipped): looked at after
 * the snapshot, after each skip, and then, while such a table is still not
 * published, once a catalog change that could publish it was seen (decoded
 * or received: replicant_publication_changes), at most every SKIP_CHECK_MS.
 * Halts when the owner may not read one.
 */
static void
replan_skipped_if_due(Worker *w)
{
	TimestampTz now;
	bool planned;
	char *refused;

	if (!w->skips_pending)
		return;
	now = GetCurrentTimestamp();
	if (now < w->skip_check_at ||
		(!w->skip_check_due && replicant_publication_changes(true) == w->skip_changes))
		return;
	/* Changes seen while looking are looked at again next time. */
	w->skip_changes = replicant_publication_changes(true);
	w->skip_check_due = false;
	/* Reads of the catalogs may wait: no answer is left unread meanwhile. */
	replicant_fanout_settle(w->fanout);
	replicant_shmem_enter_phase(REPLICANT_PHASE_BACKFILL_READ);
	replicant_decoder_before_normal_access(w->decoder);
	w->skips_pending = replicant_backfill_replan_skipped(w->pipeline, &planned, &refused);
	w->skip_check_at = TimestampTzPlusMilliseconds(now, SKIP_CHECK_MS);
	if (refused)
	{
		replicant_fanout_commit_pending(w->fanout);
		worker_halt(w, refused);
	}
	if (planned && w->backfill == NULL)
	{
		MemoryContext cycle_context = MemoryContextSwitchTo(TopMemoryContext);

		w->backfill = replicant_backfill_next(w->pipeline->id);
		MemoryContextSwitchTo(cycle_context);
	}
}

/*
 * Reads the backfill's next chunk when none is open, its retry time has
 * come and no destination is halted (it would miss the chunk's rows); the
 * decoder completes it at its high watermark.
 */
static void
start_chunk_if_due(Worker *w)
{
	MemoryContext cycle_context = CurrentMemoryContext;

	if (w->backfill == NULL || replicant_decoder_chunk(w->decoder) != NULL ||
		GetCurrentTimestamp() < w->backfill->retry_at || !replicant_fanout_all_attached(w->fanout))
		return;
	/* A chunk may wait for its table's lock: no answer is left unread meanwhile. */
	replicant_fanout_settle(w->fanout);
	if (!replicant_fanout_all_attached(w->fanout))
		return;
	replicant_decoder_before_normal_access(w->decoder);
	/* A destination's resync marks its tables before the first window opens. */
	if (!replicant_fanout_send_resync_first(w->fanout, w->backfill))
		return;
	MemoryContextSwitchTo(TopMemoryContext);
	replicant_decoder_set_chunk(w->decoder, read_chunk(w));
	MemoryContextSwitchTo(cycle_context);
}

/* Delivers a completed chunk; after a backfill's last, picks the next backfill. */
static void
finish_chunk(Worker *w, ReplicantChunk *chunk)
{
	bool last = chunk->last;

	replicant_fanout_deliver_chunk(w->fanout, chunk);
	replicant_decoder_set_chunk(w->decoder, NULL);
	replicant_chunk_free(chunk);
	if (last)
	{
		/* A destination's resync whose reads are done ends (its markers read the catalogs). */
		if (w->backfill->destination_id != 0)
		{
			replicant_decoder_before_normal_access(w->decoder);
			replicant_fanout_end_resyncs(w->fanout);
		}
		w->skips_pending |= w->backfill->skipped;
		w->skip_check_due |= w->backfill->skipped;
		pfree(w->backfill);
		MemoryContextSwitchTo(TopMemoryContext);
		replicant_decoder_before_normal_access(w->decoder);
		w->backfill = replicant_backfill_next(w->pipeline->id);
	}
}

/*
 * A destination left behind answers again and the others were sent all
 * they have: the worker commits their checkpoints and exits for an
 * immediate restart, which decodes from the lowest checkpoint (the left
 * one's) with every destination attached, each skipping what its own
 * checkpoint covers.
 */
REPLICANT_NORETURN static void
restart_to_rejoin(Worker *w)
{
	replicant_fanout_commit_pending(w->fanout);
	replicant_fanout_note_rewind(w->fanout);
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	w->slot->superseded = true;
	LWLockRelease(replicant_shmem->lock);
	proc_exit(0);
}


/*
 * One cycle: reads a backfill chunk if one is due, decodes, and delivers
 * what decoding produced.  Returns true when decoding reached the end of
 * flushed WAL and the worker should wait; false to go on at once.  Sets
 * *delivered when it sent a batch of transactions.
 */
static bool
stream_cycle(Worker *w, bool *delivered)
{
	bool at_end;
	List *messages;
	ReplicantChunk *chunk;

	*delivered = false;

	replicant_delivery_check_for_interrupts(w->slot);
	replan_skipped_if_due(w);
	start_chunk_if_due(w);

	/* A commit after this point sets the latch again. */
	pg_atomic_write_u32(&w->slot->nudged, 0);
	ResetLatch(MyLatch);
	replicant_delivery_check_for_interrupts(w->slot);
	if (replicant_delivery_stop_is_requested(w->slot))
		replicant_fanout_settle(w->fanout);
	replicant_delivery_stop_if_requested(w->slot);
	replicant_delivery_reload_config();
	replicant_delivery_check_slot(w->slot);
	if (replicant_checkpoint_is_pending() &&
		replicant_checkpoint_due_in(w->slot, GetCurrentTimestamp()) == 0)
		replicant_fanout_commit_pending(w->fanout);

	replicant_shmem_enter_phase(REPLICANT_PHASE_DECODE);
	at_end = replicant_decoder_read(w->decoder, w->batch_max_transactions,
									(uint64) w->batch_max_bytes,
									replicant_batch_linger_ms);
	if (replicant_decoder_halt_reason(w->decoder))
	{
		/* The request out (decoding went on meanwhile) is answered first. */
		replicant_fanout_settle(w->fanout);
		replicant_fanout_commit_pending(w->fanout);
		replicant_delivery_halt_at(w->slot, w->pipeline,
								   replicant_decoder_halt_reason(w->decoder),
								   replicant_decoder_halt_lsn(w->decoder),
								   replicant_decoder_halt_cause(w->decoder));
	}

	/*
	 * What decoding rendered goes out now, as one batch; all of it before
	 * messages and chunks, which go at their place, after a checkpoint that
	 * covers what came before.
	 */
	replicant_decoder_seal(w->decoder);
	messages = replicant_decoder_take_messages(w->decoder);
	chunk = replicant_decoder_chunk(w->decoder);
	if (replicant_fanout_deliver_batches(w->fanout, messages,
										 chunk && chunk->complete ? chunk : NULL))
		*delivered = true;
	else if (at_end)
		replicant_metrics_progressed(w->slot);

	if (messages != NIL)
	{
		replicant_fanout_commit_pending(w->fanout);
		replicant_fanout_deliver_messages(w->fanout, messages);
		list_free_deep(messages);
		return false;
	}
	if (chunk && chunk->complete && !replicant_fanout_all_attached(w->fanout))
	{
		/*
		 * A destination halted or was left behind while the chunk was
		 * open: it would miss its rows, which no WAL holds.  Read again
		 * once every destination is attached (the backfill's progress did
		 * not move).
		 */
		replicant_decoder_set_chunk(w->decoder, NULL);
		replicant_chunk_free(chunk);
		return false;
	}
	if (chunk && chunk->complete)
	{
		replicant_fanout_commit_pending(w->fanout);
		finish_chunk(w, chunk);
		return false;
	}
	if (at_end && replicant_fanout_rejoin_due(w->fanout))
		restart_to_rejoin(w);
	if (at_end && !replicant_checkpoint_is_pending() && replicant_fanout_all_sent(w->fanout))
	{
		/*
		 * Nothing published up to here is unsent to any destination
		 * (every one is delivered to and was sent it all) nor waits for
		 * its checkpoint: let the slot move on so quiet pipelines never
		 * pin WAL.  Transactions still in progress are safe, since
		 * decoding restarts at restart_lsn.
		 */
		replicant_fanout_confirm(w->fanout, replicant_decoder_read_upto(w->decoder));
	}

	return at_end;
}

/*
 * Sleeps until a commit sets the latch, WAL inserted may have been flushed,
 * or the pending checkpoint is due.  Returns at once after a commit since
 * the cycle began, whose wake-up a rest may have reset.
 */
static void
wait_for_wal(Worker *w)
{
	long timeout = IDLE_TIMEOUT_MS;
	long retry;

	if (pg_atomic_read_u32(&w->slot->nudged) != 0)
		return;
	if (GetXLogInsertRecPtr() > replicant_decoder_read_upto(w->decoder))
		timeout = FLUSH_WAIT_MS;
	if (replicant_checkpoint_is_pending())
		timeout = Min(timeout, replicant_checkpoint_due_in(w->slot, GetCurrentTimestamp()));
	retry = replicant_fanout_retry_wait_ms(w->fanout);
	if (retry >= 0)
		timeout = Min(timeout, retry);
	replicant_fanout_wait(w->fanout, timeout);
}

static void
run_pipeline(Worker *w)
{
	MemoryContext cycle_context;

	start_streaming(w);
	cycle_context = AllocSetContextCreate(TopMemoryContext, "replicant cycle",
										  ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		int64 cpu_before = replicant_cpu_time_us();
		bool delivered;

		MemoryContextSwitchTo(cycle_context);
		MemoryContextReset(cycle_context);
		if (!stream_cycle(w, &delivered))
			continue;
		if (delivered)
		{
			TimestampTz now = GetCurrentTimestamp();
			int64 rest_us = replicant_cpu_budget_charge(&w->budget,
														replicant_cpu_time_us() - cpu_before, now,
														(int64) replicant_batch_linger_ms * 1000);

			if (rest_us > 0)
				replicant_delivery_sleep_until(w->slot, now + rest_us);
		}
		wait_for_wal(w);
	}
}
