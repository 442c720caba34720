/*
 * delivery.c
 *		Getting one request body to the sink, and halting when that must stop.
 *
 * Retried failures (408, 425, 429, 5xx, refused, reset, timeout) back off
 * exponentially from RETRY_BASE_MS to RETRY_MAX_MS with jitter, or wait as
 * long as Retry-After asked.  Nothing is ever skipped: the caller gets the
 * body through or a final answer it must act on.
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/pg_prng.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "delivery.h"

#define RETRY_BASE_MS 200
#define RETRY_MAX_MS 30000

void
replicant_delivery_reload_config(void)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}

void
replicant_delivery_sleep(long ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);

	for (;;)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

		if (left <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		replicant_delivery_reload_config();
	}
}

/* Capped exponential backoff with jitter, or what Retry-After asked for. */
static long
backoff_ms(int attempt, const ReplicantSinkResult *result)
{
	long		cap = RETRY_BASE_MS;

	if (result->retry_after_ms >= 0)
		return result->retry_after_ms;
	while (attempt-- > 0 && cap < RETRY_MAX_MS)
		cap *= 2;
	cap = Min(cap, RETRY_MAX_MS);
	return cap / 2 + (long) pg_prng_uint64_range(&pg_global_prng_state, 0, cap / 2);
}

static void
note_retry(ReplicantPipelineSlot *slot, const char *error)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->retries++;
	slot->state = REPLICANT_STATE_RETRYING;
	snprintf(slot->last_error, sizeof(slot->last_error), "sink unavailable: %s", error);
	LWLockRelease(replicant_shmem->lock);
}

void
replicant_delivery_post(ReplicantPipelineSlot *slot, ReplicantSink *sink,
						const char *webhook_id, ReplicantBody *body,
						ReplicantSinkResult *result)
{
	int			attempt = 0;

	for (;;)
	{
		replicant_sink_post(sink, webhook_id, body, result);
		if (result->outcome != REPLICANT_SINK_RETRY)
			return;
		note_retry(slot, result->error);
		replicant_delivery_sleep(backoff_ms(attempt++, result));
	}
}

void
replicant_delivery_halt(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
						const char *reason)
{
	ReplicantCatalogAccess access;

	if (IsTransactionState())
		AbortCurrentTransaction();

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->state = REPLICANT_STATE_HALTED;
	slot->runnable = false;
	strlcpy(slot->last_error, reason, sizeof(slot->last_error));
	LWLockRelease(replicant_shmem->lock);

	replicant_catalog_begin(&access);
	replicant_pipeline_record_halt(pipeline->id, reason);
	replicant_catalog_end(&access);

	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" halted: %s", pipeline->name, reason),
			 errhint("Fix the cause, then call replicant.resume_pipeline('%s').",
					 pipeline->name)));
	proc_exit(0);
}
