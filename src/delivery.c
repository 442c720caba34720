/*
 * delivery.c
 *		Getting one request body to the sink, and halting when that must stop.
 *
 * Retried failures (408, 425, 429, 5xx, refused, reset, timeout) back off
 * exponentially from RETRY_BASE_MS to RETRY_MAX_MS with jitter (to
 * RETRY_REFUSED_MAX_MS while nothing accepts the connection), or wait as
 * long as Retry-After asked.  replicant.status shows when the next attempt
 * is due, and retry_pipeline() has it made at once.  Nothing is ever
 * skipped: the caller gets the body through or a final answer it must act
 * on.
 *
 * An error a pipeline's process meets is retried only while it is known to
 * be transient (error_is_transient): the process exits and the launcher
 * restarts it, at most REPLICANT_MAX_RETRIES times while the pipeline makes
 * no progress (launcher.c).  Every other error halts at once, with a
 * value-free reason naming the phase, the error class and the table.
 *
 * Rules kept with other files: docs/internals.md §1 (checkpoint before
 * confirm), §8 (errors: halt or retry).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "replication/slot.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "checkpoint.h"
#include "compat.h"
#include "delivery.h"
#include "destination_resync.h"
#include "event_log.h"
#include "fault.h"
#include "format.h"
#include "metrics.h"
#include "runs.h"
#include "resync.h"
#include "slot_position.h"
#include "slot_health.h"
#include "stop_signal.h"
#include "transport_registry.h"

#define RETRY_BASE_MS 200
#define RETRY_MAX_MS 30000
/*
 * A refused connection costs the sink nothing, and one that comes back
 * (restarted, redeployed) should be used at once, not after half a minute.
 */
#define RETRY_REFUSED_MAX_MS 2000
/* How often a waiting shard worker, whose latch retry_pipeline() cannot set, looks. */
#define RETRY_REQUEST_POLL_MS 250
/* While a sink keeps failing, the log hears of it this often. */
#define RETRY_LOG_INTERVAL_MS (5 * 60 * 1000)

void
replicant_delivery_reload_config(void)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}

bool
replicant_delivery_stop_is_requested(ReplicantPipelineSlot *slot)
{
	bool requested;

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	requested = slot->stop_requested && slot->pid == MyProcPid;
	LWLockRelease(replicant_shmem->lock);
	return requested;
}

void
replicant_delivery_stop_if_requested(ReplicantPipelineSlot *slot)
{
	if (!replicant_delivery_stop_is_requested(slot))
		return;
	if (IsTransactionState())
		AbortCurrentTransaction();
	(void) replicant_checkpoint_commit_pending();
	replicant_checkpoint_make_durable();
	if (MyReplicationSlot != NULL)
	{
		replicant_slot_position_settle();
		ReplicationSlotMarkDirty();
		ReplicationSlotSave();
	}
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" stopped on request", slot->name)));
	proc_exit(0);
}

/*
 * drop_pipeline deletes the checkpoint row, marks the slot dropping and
 * then waits for the worker to let go of its replication slot: an update of
 * that row would wait for the drop, and the drop for the worker.  DROP
 * EXTENSION took the table (the slot is no longer in use).  Any other stop
 * commits first.
 */
bool
replicant_delivery_may_commit_at_stop(ReplicantPipelineSlot *slot)
{
	bool may;

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	may = slot->in_use && slot->pid == MyProcPid && !slot->dropping;
	LWLockRelease(replicant_shmem->lock);
	return may;
}

void
replicant_delivery_check_for_interrupts(ReplicantPipelineSlot *slot)
{
	if ((ProcDiePending || replicant_stop_signal_pending()) &&
		replicant_delivery_may_commit_at_stop(slot))
	{
		HOLD_INTERRUPTS();
		if (IsTransactionState())
			AbortCurrentTransaction();
		(void) replicant_checkpoint_commit_pending();
		replicant_checkpoint_make_durable();
		/* A shutdown or a termination is no run without progress (runs.c). */
		if (ProcDiePending)
			replicant_runs_ended(slot->pipeline_id);
		RESUME_INTERRUPTS();
	}
	CHECK_FOR_INTERRUPTS();
}

void
replicant_delivery_sleep_until(ReplicantPipelineSlot *slot, TimestampTz deadline)
{
	for (;;)
	{
		int64 left_us = deadline - GetCurrentTimestamp();

		if (left_us <= 0 || replicant_delivery_stop_is_requested(slot))
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 (long) ((left_us + 999) / 1000), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		replicant_delivery_check_for_interrupts(slot);
		replicant_delivery_reload_config();
	}
}

/*
 * Capped exponential backoff with jitter, or what Retry-After asked for.
 * "Retry-After: 0" or a date in the past asks for nothing: back off anyway,
 * or a sink answering so would be hammered without pause.
 */
static long
backoff_ms(int attempt, const ReplicantSinkResult *result)
{
	long max = result->refused ? RETRY_REFUSED_MAX_MS : RETRY_MAX_MS;
	long cap = RETRY_BASE_MS;

	if (result->retry_after_ms > 0)
		return result->retry_after_ms;
	while (attempt-- > 0 && cap < max)
		cap *= 2;
	cap = Min(cap, max);
	return cap / 2 + (long) pg_prng_uint64_range(&pg_global_prng_state, 0, cap / 2);
}

static void
set_next_retry_at(ReplicantDestinationSlot *place, TimestampTz at)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	place->next_retry_at = at;
	LWLockRelease(replicant_shmem->lock);
}

/* Whether the check found a destination past its own budget alone. */
static bool
any_released(const bool *release)
{
	for (int i = 0; i < REPLICANT_MAX_DESTINATIONS; i++)
		if (release[i])
			return true;
	return false;
}

/*
 * The destinations flagged in release give their hold on the slot up, and
 * the process exits for an immediate restart (superseded: no failure of
 * the pipeline's), whose worker leaves them out.
 */
REPLICANT_NORETURN static void
release_destinations(ReplicantPipelineSlot *slot, const bool *release)
{
	ReplicantPipeline *pipeline = replicant_slot_health_watched();
	ListCell *lc;
	int i = 0;

	foreach(lc, pipeline->destinations)
	{
		ReplicantDestination *destination = lfirst(lc);
		ReplicantDestinationSlot *place;

		char *reason;

		if (!release[i++])
			continue;
		reason = replicant_slot_health_release_reason(destination);
		if (destination->on_slot_loss_resync &&
			(reason = replicant_destination_resync_on_loss(pipeline, destination, reason)) == NULL)
			continue;
		LWLockAcquire(replicant_shmem->lock, LW_SHARED);
		place = replicant_shmem_destination(slot, destination->id);
		LWLockRelease(replicant_shmem->lock);
		replicant_destination_release(pipeline->name, destination, place, reason);
	}
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->superseded = true;
	LWLockRelease(replicant_shmem->lock);
	proc_exit(0);
}

void
replicant_delivery_check_slot(ReplicantPipelineSlot *slot)
{
	bool release[REPLICANT_MAX_DESTINATIONS];
	char *reason = replicant_slot_health_check(release);

	if (reason == NULL && !any_released(release))
		return;
	if (IsTransactionState())
		AbortCurrentTransaction();
	if (reason == NULL)
	{
		/* Measured again from what is acknowledged: one that caught up meanwhile stays. */
		(void) replicant_checkpoint_commit_pending();
		reason = replicant_slot_health_check(release);
		if (reason == NULL && !any_released(release))
			return;
		if (reason == NULL)
			release_destinations(slot, release);
	}

	/*
	 * The slot first: a crash before the halt is on record leaves a pipeline
	 * whose slot does not exist, which halts at its next start.
	 */
	replicant_slot_health_give_up();
	reason = replicant_resync_on_loss(slot, replicant_slot_health_watched(), reason);
	replicant_delivery_halt(slot, replicant_slot_health_watched(), reason);
}

/* Keeps the last HTTP status and a ring of request durations for status. */
static void
note_answer(ReplicantDestinationSlot *destination, const ReplicantSinkResult *result)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	destination->last_http_status = (int) result->http_status;
	destination->latency_ms[destination->nlatency % REPLICANT_LATENCY_SAMPLES] = (float4) result->elapsed_ms;
	destination->nlatency++;
	LWLockRelease(replicant_shmem->lock);
}

static void
note_retry(ReplicantDestinationSlot *destination, const ReplicantSinkResult *result)
{
	const char *error = result->error;

	replicant_slot_health_sink_failed();
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	destination->retries++;
	replicant_metrics_retry(destination, result->http_status);
	destination->state = REPLICANT_STATE_RETRYING;
	snprintf(destination->last_error, sizeof(destination->last_error), "sink unavailable: %s", error);
	LWLockRelease(replicant_shmem->lock);
}

bool
replicant_delivery_answered(ReplicantPipelineSlot *slot, ReplicantDestinationSlot *place,
							ReplicantRetryState *retry, const ReplicantSinkResult *result)
{
	TimestampTz now;
	TimestampTz deadline;

	/* A request that a SIGTERM cut short is no answer of the sink's. */
	if (result->outcome != REPLICANT_SINK_OK)
		replicant_delivery_check_for_interrupts(slot);
	note_answer(place, result);
	now = GetCurrentTimestamp();
	if (result->outcome != REPLICANT_SINK_RETRY)
	{
		if (retry->attempt > 0)
		{
			ereport(LOG,
					(errmsg("replicant pipeline \"%s\" reached its sink again after %d failed attempts in %ld s",
							slot->name, retry->attempt,
							TimestampDifferenceMilliseconds(retry->first_failure, now) / 1000)));
			replicant_log_state(slot->name, "recovered", "attempts", psprintf("%d", retry->attempt),
								"seconds", psprintf("%ld", TimestampDifferenceMilliseconds(retry->first_failure, now) / 1000),
								REPLICANT_LOG_END);
		}
		memset(retry, 0, sizeof(*retry));
		return true;
	}
	note_retry(place, result);

	/* What an operator tails the log for: the start, then a reminder. */
	if (retry->attempt == 0)
	{
		/* While the sink is away, what it acknowledged is checkpointed. */
		(void) replicant_checkpoint_commit_pending();
		retry->first_failure = retry->last_logged = now;
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" could not deliver to its sink, retrying: %s",
						slot->name, result->error)));
		replicant_log_state(slot->name, "retrying", "cause", "sink",
							"status_class", replicant_metrics_status_class(result->http_status),
							REPLICANT_LOG_END);
	}
	else if (TimestampDifferenceExceeds(retry->last_logged, now, RETRY_LOG_INTERVAL_MS))
	{
		retry->last_logged = now;
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" still retrying after %d failed attempts in %ld s: %s",
						slot->name, retry->attempt + 1,
						TimestampDifferenceMilliseconds(retry->first_failure, now) / 1000,
						result->error)));
	}

	/* Not acknowledged: stopping here leaves nothing to re-deliver. */
	replicant_delivery_stop_if_requested(slot);
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   backoff_ms(retry->attempt++, result));
	retry->next_attempt_at = deadline;
	retry->retry_requests = pg_atomic_read_u32(&slot->retry_requests);
	set_next_retry_at(place, deadline);
	return false;
}

bool
replicant_delivery_retry_waiting(ReplicantPipelineSlot *slot, const ReplicantRetryState *retry)
{
	return retry->next_attempt_at != 0 && GetCurrentTimestamp() < retry->next_attempt_at &&
		   !replicant_delivery_stop_is_requested(slot) &&
		   pg_atomic_read_u32(&slot->retry_requests) == retry->retry_requests;
}

bool
replicant_delivery_retry_due(ReplicantPipelineSlot *slot, ReplicantDestinationSlot *place,
							 ReplicantRetryState *retry)
{
	if (retry->next_attempt_at == 0)
		return true;
	if (replicant_delivery_retry_waiting(slot, retry))
		return false;
	retry->next_attempt_at = 0;
	set_next_retry_at(place, 0);
	replicant_delivery_stop_if_requested(slot);
	return true;
}

long
replicant_delivery_retry_wait_ms(const ReplicantRetryState *retry)
{
	int64 left_us = retry->next_attempt_at - GetCurrentTimestamp();

	if (left_us <= 0)
		return 0;
	return (long) Min((left_us + 999) / 1000, RETRY_REQUEST_POLL_MS);
}

/*
 * Whether an error may pass by itself, so that running the same step again
 * can succeed: a lost connection, a conflict (serialization, deadlock), a
 * lock or statement timeout, a shortage (memory, disk, connections), a
 * shutdown or another administrator's command, a slot another process
 * still holds, an I/O error.  Everything else (a data error, a missing
 * object or privilege, a program or configuration limit, an internal
 * error) would only be met again.
 */
bool
replicant_delivery_error_is_transient(int sqlerrcode)
{
	switch (sqlerrcode)
	{
		case ERRCODE_CONFIGURATION_LIMIT_EXCEEDED:
		case ERRCODE_DATABASE_DROPPED:
			return false;
		case ERRCODE_LOCK_NOT_AVAILABLE:
		case ERRCODE_OBJECT_IN_USE:
		case ERRCODE_SYSTEM_ERROR:
		case ERRCODE_IO_ERROR:
			return true;
	}
	switch (ERRCODE_TO_CATEGORY(sqlerrcode))
	{
		case ERRCODE_CONNECTION_EXCEPTION:
		case ERRCODE_TRANSACTION_ROLLBACK:
		case ERRCODE_INSUFFICIENT_RESOURCES:
		case ERRCODE_OPERATOR_INTERVENTION:
			return true;
	}
	return false;
}

char *
replicant_delivery_failure(ReplicantPhase phase, const char *table, int sqlerrcode)
{
	if (table != NULL && table[0] != '\0')
		return psprintf("phase \"%s\" failed on table \"%s\" with error class %s",
						replicant_phase_name(phase), table, unpack_sql_state(sqlerrcode));
	return psprintf("phase \"%s\" failed with error class %s",
					replicant_phase_name(phase), unpack_sql_state(sqlerrcode));
}

void
replicant_delivery_fail(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
						ErrorData *edata, const char *reason)
{
	/* The caller ended the failed transaction; a transaction still open would hide it. */
	Assert(!IsTransactionState());
	if (!replicant_delivery_error_is_transient(edata->sqlerrcode))
		replicant_delivery_halt(slot, pipeline, reason);

	/* The launcher restarts the worker, and halts with this after the last retry. */
	replicant_log_state(pipeline->name, "retrying", "cause", "error", "reason", reason, REPLICANT_LOG_END);
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	strlcpy(slot->failure, reason, sizeof(slot->failure));
	if (slot->runnable)
	{
		/* The worker's failure shows on each destination it stops. */
		for (int i = 0; i < replicant_shmem_ndestinations(slot); i++)
		{
			slot->destinations[i].state = REPLICANT_STATE_RETRYING;
			strlcpy(slot->destinations[i].last_error, reason, sizeof(slot->destinations[i].last_error));
		}
	}
	LWLockRelease(replicant_shmem->lock);
	ReThrowError(edata);
}

ReplicantTransport *
replicant_delivery_sink(const ReplicantDestination *destination)
{
	ReplicantSinkConfig config = {0};
	const ReplicantFormat *format = replicant_format_of(destination);

	config.url = destination->sink_url;
	config.http_timeout_ms = destination->http_timeout_ms;
	config.connect_timeout_ms = destination->connect_timeout_ms;
	config.header_names = destination->header_names;
	config.header_values = destination->header_values;
	config.secret = destination->secret;
	config.secret_previous = destination->secret_previous;
	config.secret_previous_until = destination->secret_previous_until;
	config.ca_file = destination->ca_file;
	config.content_type = format->content_type;
	config.code_is_final = format->code_is_final;
	config.destination = replicant_destination_label(destination);
	return replicant_transport_open(&config);
}

/*
 * From here the process only exits: as for a stop asked for
 * (stop_signal.c), a cancel that came meanwhile (a DROP EXTENSION stops the
 * worker so) must not raise an error at the next LOG line, which would exit
 * with code 1 and leave shared memory without the halt.
 */
static void
exit_interrupts_held(void)
{
	HOLD_INTERRUPTS();
	QueryCancelPending = false;
}

/*
 * Exits after a halt or a disable that found the pipeline halted or
 * disabled already (by another of its processes, or by its owner), or its
 * table gone with DROP EXTENSION: what stopped it first stands, in the
 * catalog and in replicant.status.  The
 * slot says it is stopped before this exits: a snapshot's pipeline worker
 * takes a shard worker's clean exit for a finished shard unless it does.
 */
REPLICANT_NORETURN static void
already_stopped(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline)
{
	exit_interrupts_held();
	AbortOutOfAnyTransaction();
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->runnable = false;
	LWLockRelease(replicant_shmem->lock);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" was halted, disabled or dropped meanwhile: exiting",
					pipeline->name)));
	proc_exit(0);
}

/* Disables the pipeline (the sink said 410 Gone) and exits. */
REPLICANT_NORETURN static void
disable(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline, const char *reason)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline->id)};
	bool stopped_already;

	if (IsTransactionState())
		AbortCurrentTransaction();

	/* The catalog first, as for a halt (replicant_delivery_halt_at). */
	replicant_catalog_begin(&access);
	stopped_already = !replicant_pipeline_lock_for_update();
	if (!stopped_already &&
		SPI_execute_with_args("UPDATE replicant.pipelines SET enabled = false"
							  " WHERE id OPERATOR(pg_catalog.=) $1 AND enabled AND halt_reason IS NULL",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not disable pipeline %d", pipeline->id);
	stopped_already = stopped_already || SPI_processed == 0;
	replicant_catalog_end(&access);
	if (stopped_already)
		already_stopped(slot, pipeline);
	exit_interrupts_held();
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" disabled: %s", pipeline->name, reason),
			 errhint("Call replicant.enable_pipeline('%s') once the sink accepts batches again.",
					 pipeline->name)));
	replicant_log_state(pipeline->name, "disabled", "reason", reason, REPLICANT_LOG_END);

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->runnable = false;
	replicant_shmem_only_destination(slot)->metrics.disabled_by_sink = true;
	strlcpy(replicant_shmem_only_destination(slot)->last_error, reason, REPLICANT_ERROR_LEN);
	LWLockRelease(replicant_shmem->lock);
	proc_exit(0);
}

char *
replicant_delivery_refusal(const ReplicantSinkResult *result, const char *what,
						   const char *context)
{
	if (result->outcome == REPLICANT_SINK_GONE)
		return psprintf("sink answered HTTP 410 Gone to %s%s", what, context);
	return psprintf("sink rejected %s: %s%s", what, result->error, context);
}

void
replicant_delivery_refused(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
						   const ReplicantSinkResult *result, const char *what,
						   const char *context)
{
	if (result->outcome == REPLICANT_SINK_GONE)
		disable(slot, pipeline, replicant_delivery_refusal(result, what, context));
	replicant_delivery_halt(slot, pipeline, replicant_delivery_refusal(result, what, context));
}

void
replicant_delivery_halt(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
						const char *reason)
{
	replicant_delivery_halt_at(slot, pipeline, reason, InvalidXLogRecPtr, NULL);
}

void
replicant_delivery_halt_at(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
						   const char *reason, XLogRecPtr lsn, const char *cause)
{
	ReplicantCatalogAccess access;
	bool recorded;

	if (IsTransactionState())
		AbortCurrentTransaction();

	/*
	 * The catalog first: a snapshot's pipeline worker stops its shard
	 * workers once shared memory shows a halt, which must be on record by
	 * then, or the launcher would start the pipeline over.
	 */
	replicant_catalog_begin(&access);
	recorded = replicant_pipeline_record_halt(pipeline->id, reason, lsn, cause);
	replicant_catalog_end(&access);
	if (!recorded)
		already_stopped(slot, pipeline);
	replicant_fault("halt");
	exit_interrupts_held();
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" halted: %s", pipeline->name, reason),
			 errhint("Fix the cause, then call replicant.resume_pipeline('%s').",
					 pipeline->name)));

	replicant_log_state(pipeline->name, "halted", "reason", reason, REPLICANT_LOG_END);

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	replicant_shmem_halt_destinations(slot, reason);
	slot->runnable = false;
	LWLockRelease(replicant_shmem->lock);
	proc_exit(0);
}
