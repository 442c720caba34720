/*
 * status.c
 *		replicant._worker_status(): the live half of replicant.status, read
 *		from shared memory and rolled up over the pipeline's destinations;
 *		replicant._destination_status(): that of replicant.destination_status,
 *		per destination.  The views join them with the catalog and the slot.
 *		replicant._snapshot_progress(): the live half of
 *		replicant.backfill_status.
 */
#include "postgres.h"

#include <math.h>

#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "catalog/pg_authid_d.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "api_destination.h"
#include "catalog.h"
#include "compat.h"
#include "pipeline.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(replicant_worker_status);
PG_FUNCTION_INFO_V1(replicant_destination_status);
PG_FUNCTION_INFO_V1(replicant_check_status_reader);
PG_FUNCTION_INFO_V1(replicant_snapshot_progress);
PG_FUNCTION_INFO_V1(replicant_await_delivered);
PG_FUNCTION_INFO_V1(replicant_retry_pipeline);
PG_FUNCTION_INFO_V1(replicant_check_progress_reader);

static int
float4_cmp(const void *a, const void *b)
{
	float4 x = *(const float4 *) a;
	float4 y = *(const float4 *) b;

	return (x > y) - (x < y);
}

/*
 * Median duration of the last REPLICANT_LATENCY_SAMPLES requests, rounded
 * to the microsecond, which is all the clock tells; it then prints with at
 * most three decimals.
 */
static double
median_latency(const ReplicantDestinationSlot *destination)
{
	float4 sorted[REPLICANT_LATENCY_SAMPLES];
	int n = Min(destination->nlatency, REPLICANT_LATENCY_SAMPLES);
	double median;

	if (n == 0)
		return 0;
	memcpy(sorted, destination->latency_ms, sizeof(float4) * n);
	qsort(sorted, n, sizeof(float4), float4_cmp);
	median = (n % 2) ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
	return rint(median * 1000.0) / 1000.0;
}

/*
 * Columns of _worker_status_v2() (0.3.0); _worker_status() of 0.1.0 and
 * 0.2.0, the same C function, declares all but the last (next_retry_at):
 * a result holds as many as the calling SQL function declares.
 */
#define WORKER_STATUS_COLS 13

/* Refuses callers that may not SELECT the view (in the same schema as us). */
static void
check_can_read_view(FunctionCallInfo fcinfo, const char *view)
{
	Oid nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	Oid viewid = get_relname_relid(view, nspid);
	AclResult aclresult;

	if (!OidIsValid(viewid))
		elog(ERROR, "replicant.%s does not exist", view);
	aclresult = pg_class_aclcheck(viewid, GetUserId(), ACL_SELECT);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_VIEW, view);
}

/*
 * The gate of replicant.destination_status (granted to PUBLIC) and of the
 * function behind it: who may read replicant.status may read it.
 */
static void
check_status_reader(FunctionCallInfo fcinfo)
{
	Oid nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	Oid viewid = get_relname_relid("status", nspid);

	if (!OidIsValid(viewid) || pg_class_aclcheck(viewid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for view destination_status"),
				 errhint("Who may SELECT from replicant.status may read it.")));
}

/*
 * The live sink columns of one destination, or of several rolled up
 * (replicant.status: the worst state and that destination's last error,
 * named; sums and the latest delivery; the earliest retry; the sink's own
 * answers only of a single one), from values[first] on.
 */
static void
put_sink_columns(const ReplicantPipelineSlot *slot, int from, int count, Datum *values,
				 bool *nulls)
{
	const ReplicantDestinationSlot *only = &slot->destinations[from];
	uint64 transactions = 0, changes = 0, batches = 0, bytes = 0, retries = 0;
	TimestampTz last_delivery_at = 0, next_retry_at = 0;
	int worst;
	ReplicantWorkerState state;
	const ReplicantDestinationSlot *named;

	if (count == 1)
	{
		worst = from;
		state = only->state;
	}
	else
		state = replicant_shmem_state(slot, &worst);
	named = &slot->destinations[worst];
	for (int i = from; i < from + count; i++)
	{
		const ReplicantDestinationSlot *d = &slot->destinations[i];

		transactions += d->transactions_delivered;
		changes += d->changes_delivered;
		batches += d->batches_delivered;
		bytes += d->bytes_delivered;
		retries += d->retries;
		last_delivery_at = Max(last_delivery_at, d->last_delivery_at);
		if (d->next_retry_at != 0 && (next_retry_at == 0 || d->next_retry_at < next_retry_at))
			next_retry_at = d->next_retry_at;
	}
	values[0] = CStringGetTextDatum(replicant_state_name(state));
	values[1] = Int64GetDatum((int64) transactions);
	values[2] = Int64GetDatum((int64) changes);
	values[3] = Int64GetDatum((int64) batches);
	values[4] = Int64GetDatum((int64) bytes);
	values[5] = Int64GetDatum((int64) retries);
	values[6] = TimestampTzGetDatum(last_delivery_at);
	nulls[6] = (last_delivery_at == 0);
	if (count == 1 || named->last_error[0] == '\0')
		values[7] = CStringGetTextDatum(named->last_error);
	else
		values[7] = CStringGetTextDatum(psprintf("destination \"%s\": %s", named->name,
												 named->last_error));
	nulls[7] = (named->last_error[0] == '\0');
	values[8] = Float8GetDatum(median_latency(only));
	nulls[8] = (count > 1 || only->nlatency == 0);
	values[9] = Int32GetDatum(only->last_http_status);
	nulls[9] = (count > 1 || only->last_http_status == 0);
	values[10] = TimestampTzGetDatum(next_retry_at);
	nulls[10] = (next_retry_at == 0 || slot->pid == 0);
}

Datum
replicant_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int i;

	/*
	 * Executable by PUBLIC, since the view runs it with the privileges of
	 * whoever reads the view: the view's own privilege is the gate.
	 */
	check_can_read_view(fcinfo, "status");

	InitMaterializedSRF(fcinfo, 0);
	if (!replicant_shmem_ready())
		PG_RETURN_VOID();

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];
		Datum values[WORKER_STATUS_COLS];
		bool nulls[WORKER_STATUS_COLS] = {0};

		if (!slot->in_use || slot->dboid != MyDatabaseId)
			continue;
		/* pipeline_id, state, worker_pid, then the sink's columns but state */
		put_sink_columns(slot, 0, replicant_shmem_ndestinations(slot), values + 2, nulls + 2);
		values[0] = Int32GetDatum(slot->pipeline_id);
		values[1] = values[2];
		values[2] = Int32GetDatum(slot->pid);
		nulls[2] = (slot->pid == 0);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(replicant_shmem->lock);
	PG_RETURN_VOID();
}

#define DESTINATION_STATUS_COLS 13

/*
 * replicant._destination_status(): per destination of this database's
 * pipelines, the live half of replicant.destination_status: pipeline_id,
 * destination_id, then the sink's columns as _worker_status() has them.
 * A destination not mirrored yet (a sync after the update names it) shows
 * none.  Executable by PUBLIC: its readers are replicant.status's.
 */
Datum
replicant_destination_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	check_status_reader(fcinfo);
	InitMaterializedSRF(fcinfo, 0);
	if (!replicant_shmem_ready())
		PG_RETURN_VOID();

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (int i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];

		if (!slot->in_use || slot->dboid != MyDatabaseId)
			continue;
		for (int d = 0; d < replicant_shmem_ndestinations(slot); d++)
		{
			Datum values[DESTINATION_STATUS_COLS];
			bool nulls[DESTINATION_STATUS_COLS] = {0};

			if (slot->destinations[d].id == 0)
				continue;
			values[0] = Int32GetDatum(slot->pipeline_id);
			values[1] = Int32GetDatum(slot->destinations[d].id);
			put_sink_columns(slot, d, 1, values + 2, nulls + 2);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	LWLockRelease(replicant_shmem->lock);
	PG_RETURN_VOID();
}

Datum
replicant_check_status_reader(PG_FUNCTION_ARGS)
{
	check_status_reader(fcinfo);
	PG_RETURN_BOOL(true);
}

/*
 * _check_progress_reader(), the gate of replicant.backfill_status: who may
 * read replicant.status, and pg_monitor's members, may watch progress.
 */
static void
check_progress_reader(FunctionCallInfo fcinfo)
{
	Oid nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	Oid viewid = get_relname_relid("status", nspid);

	if (!has_privs_of_role(GetUserId(), ROLE_PG_MONITOR) &&
		(!OidIsValid(viewid) || pg_class_aclcheck(viewid, GetUserId(), ACL_SELECT) != ACLCHECK_OK))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for view backfill_status"),
				 errhint("Who may SELECT from replicant.status, and members of pg_monitor, may read it.")));
}

Datum
replicant_check_progress_reader(PG_FUNCTION_ARGS)
{
	check_progress_reader(fcinfo);
	PG_RETURN_BOOL(true);
}

/*
 * retry_pipeline(name): a pipeline waiting to retry its sink tries at once
 * (its workers look at once, snapshot workers within a quarter second);
 * for one that is not retrying, a notice says so.
 */
Datum
replicant_retry_pipeline(PG_FUNCTION_ARGS)
{
	char *name;
	ReplicantCatalogAccess access;
	ReplicantPipelineRef ref;
	ReplicantPipelineSlot *slot;
	bool retrying = false;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline name must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	replicant_pipeline_check_name(name);
	if (!replicant_shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replicant is not loaded through \"shared_preload_libraries\"")));
	replicant_catalog_enter(&access);
	ref = replicant_pipeline_lookup(name, false);
	replicant_pipeline_check_owner(&ref, access.saved_userid);
	replicant_catalog_leave(&access);

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	slot = replicant_shmem_find(MyDatabaseId, ref.id);
	if (slot != NULL && slot->pid != 0)
	{
		for (int d = 0; d < replicant_shmem_ndestinations(slot); d++)
			retrying |= (slot->destinations[d].state == REPLICANT_STATE_RETRYING ||
						 slot->destinations[d].next_retry_at != 0);
		pg_atomic_fetch_add_u32(&slot->retry_requests, 1);
		if (slot->latch)
			SetLatch(slot->latch);
	}
	LWLockRelease(replicant_shmem->lock);
	if (!retrying)
		ereport(NOTICE,
				(errmsg("pipeline \"%s\" is not waiting to retry its sink", name)));
	PG_RETURN_VOID();
}

#define SNAPSHOT_PROGRESS_COLS 4

/*
 * replicant._snapshot_progress(): per snapshot worker of this database's
 * pipelines, the rows the sink acknowledged of the window it reads (backfill
 * id, shard, the window's first block), which replicant.backfill_status adds
 * to the progress recorded so far.  Executable by PUBLIC, with the view's
 * gate: who may read replicant.status, and pg_monitor's members.
 */
Datum
replicant_snapshot_progress(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	check_progress_reader(fcinfo);
	InitMaterializedSRF(fcinfo, 0);
	if (!replicant_shmem_ready())
		PG_RETURN_VOID();

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (int i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];

		if (!slot->in_use || slot->dboid != MyDatabaseId)
			continue;
		for (int w = 0; w < REPLICANT_MAX_SNAPSHOT_WORKERS; w++)
		{
			ReplicantWindowProgress *progress = &slot->window_progress[w];
			Datum values[SNAPSHOT_PROGRESS_COLS];
			bool nulls[SNAPSHOT_PROGRESS_COLS] = {0};

			if (progress->backfill_id == 0)
				continue;
			values[0] = Int64GetDatum(progress->backfill_id);
			values[1] = Int32GetDatum(progress->shard);
			values[2] = Int64GetDatum(progress->window_block);
			values[3] = Int64GetDatum(progress->rows);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	LWLockRelease(replicant_shmem->lock);
	PG_RETURN_VOID();
}

/*
 * Names destination index of the slot in name when it halted alone (others
 * are not halted), else leaves name empty: the pipeline's halt halts each.
 * The caller holds the lock.
 */
static void
halted_alone(const ReplicantPipelineSlot *slot, int index, char *name)
{
	for (int i = 0; i < replicant_shmem_ndestinations(slot); i++)
	{
		if (slot->destinations[i].state != REPLICANT_STATE_HALTED)
		{
			strlcpy(name, slot->destinations[index].name, NAMEDATALEN);
			return;
		}
	}
}

/*
 * A halted pipeline, or a halted destination of it (destination not NULL),
 * delivers nothing past its halt: nothing to wait for.
 */
REPLICANT_NORETURN static void
halted_error(const char *name, const char *destination)
{
	if (destination != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("destination \"%s\" of pipeline \"%s\" is halted", destination, name),
				 errhint("See last_error in replicant.destination_status, fix the cause and call replicant.resume_pipeline(pipeline, destination).")));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("pipeline \"%s\" is halted", name),
			 errhint("See last_error in replicant.status, fix the cause and call replicant.resume_pipeline().")));
}

/*
 * The pipeline's id; errors if it does not exist, the caller may not manage
 * it (its progress is the owner's business), or it or a destination of it
 * is halted.
 */
static int32
lookup_pipeline_id(const char *name)
{
	ReplicantCatalogAccess access;
	ReplicantPipelineRef ref;
	char *halted_destination;

	replicant_catalog_enter(&access);
	ref = replicant_pipeline_lookup(name, false);
	replicant_pipeline_check_owner(&ref, access.saved_userid);
	halted_destination = replicant_api_destination_halted(ref.id);
	if (ref.halted)
		halted_error(name, NULL);
	if (halted_destination != NULL)
		halted_error(name, halted_destination);
	replicant_catalog_leave(&access);
	return ref.id;
}

/*
 * What await_delivered waits for without an LSN: this session's last commit,
 * which is not even written to WAL yet when it was asynchronous, and
 * whatever was written before the call.
 */
static XLogRecPtr
own_writes_lsn(void)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("recovery is in progress"),
				 errhint("Pipelines deliver from the primary: call replicant.await_delivered() there.")));
	return Max(GetXLogWriteRecPtr(), XactLastCommitEnd);
}

/*
 * await_delivered(pipeline, lsn, timeout_ms): sleeps on the pipeline's
 * condition variable until the sink has acknowledged everything the
 * pipeline delivers up to lsn (by default, own_writes_lsn: read-your-writes
 * through a sink), or returns false at the timeout.
 */
Datum
replicant_await_delivered(PG_FUNCTION_ARGS)
{
	char *name;
	XLogRecPtr lsn;
	int timeout_ms;
	int32 pipeline_id;
	bool halted = false;
	char halted_destination[NAMEDATALEN] = "";
	TimestampTz deadline;
	bool reached = false;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline and timeout_ms must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	lsn = PG_ARGISNULL(1) ? own_writes_lsn() : PG_GETARG_LSN(1);
	timeout_ms = PG_GETARG_INT32(2);
	if (timeout_ms < 0 || timeout_ms > 3600000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout_ms must be between 0 and 3600000")));
	replicant_pipeline_check_name(name);
	if (!replicant_shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replicant is not loaded through \"shared_preload_libraries\"")));
	pipeline_id = lookup_pipeline_id(name);

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	for (;;)
	{
		ReplicantPipelineSlot *slot;
		ConditionVariable *cv = NULL;
		long left;

		LWLockAcquire(replicant_shmem->lock, LW_SHARED);
		slot = replicant_shmem_find(MyDatabaseId, pipeline_id);
		if (slot)
		{
			int worst;

			reached = slot->delivered_upto >= lsn;
			halted = replicant_shmem_state(slot, &worst) == REPLICANT_STATE_HALTED;
			if (halted)
				halted_alone(slot, worst, halted_destination);
			cv = &slot->delivered_cv;
			/*
			 * Someone waits: the worker commits a pending checkpoint now.
			 * Set under the lock the worker clears it under, with
			 * delivered_upto, so that a wait that is over leaves it clear.
			 */
			if (!reached && slot->latch != NULL)
			{
				pg_atomic_write_u32(&slot->checkpoint_wanted, 1);
				SetLatch(slot->latch);
			}
		}
		LWLockRelease(replicant_shmem->lock);
		if (reached)
			break;
		if (halted)
		{
			ConditionVariableCancelSleep();
			halted_error(name, halted_destination[0] != '\0' ? halted_destination : NULL);
		}
		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (left <= 0)
			break;
		if (cv)
			(void) ConditionVariableTimedSleep(cv, Min(left, 1000), PG_WAIT_EXTENSION);
		else
		{
			/* The launcher has not seen the pipeline yet. */
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(left, 100), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
		CHECK_FOR_INTERRUPTS();
	}
	ConditionVariableCancelSleep();
	PG_RETURN_BOOL(reached);
}
