/*
 * status.c
 *		replicant._worker_status(): the live half of replicant.status, read
 *		from shared memory.  The view joins it with the catalog and the slot.
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

#include "catalog.h"
#include "compat.h"
#include "pipeline.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(replicant_worker_status);
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
median_latency(ReplicantPipelineSlot *slot)
{
	float4 sorted[REPLICANT_LATENCY_SAMPLES];
	int n = Min(slot->nlatency, REPLICANT_LATENCY_SAMPLES);
	double median;

	if (n == 0)
		return 0;
	memcpy(sorted, slot->latency_ms, sizeof(float4) * n);
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
		values[0] = Int32GetDatum(slot->pipeline_id);
		values[1] = CStringGetTextDatum(replicant_state_name(slot->state));
		values[2] = Int32GetDatum(slot->pid);
		nulls[2] = (slot->pid == 0);
		values[3] = Int64GetDatum((int64) slot->transactions_delivered);
		values[4] = Int64GetDatum((int64) slot->changes_delivered);
		values[5] = Int64GetDatum((int64) slot->batches_delivered);
		values[6] = Int64GetDatum((int64) slot->bytes_delivered);
		values[7] = Int64GetDatum((int64) slot->retries);
		values[8] = TimestampTzGetDatum(slot->last_delivery_at);
		nulls[8] = (slot->last_delivery_at == 0);
		values[9] = CStringGetTextDatum(slot->last_error);
		nulls[9] = (slot->last_error[0] == '\0');
		values[10] = Float8GetDatum(median_latency(slot));
		nulls[10] = (slot->nlatency == 0);
		values[11] = Int32GetDatum(slot->last_http_status);
		nulls[11] = (slot->last_http_status == 0);
		values[12] = TimestampTzGetDatum(slot->next_retry_at);
		nulls[12] = (slot->next_retry_at == 0 || slot->pid == 0);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(replicant_shmem->lock);
	PG_RETURN_VOID();
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
		retrying = (slot->state == REPLICANT_STATE_RETRYING || slot->next_retry_at != 0);
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
 * The pipeline's id and whether it is halted; errors if it does not exist or
 * the caller may not manage it (its progress is the owner's business).
 */
static int32
lookup_pipeline_id(const char *name, bool *halted)
{
	ReplicantCatalogAccess access;
	ReplicantPipelineRef ref;

	replicant_catalog_enter(&access);
	ref = replicant_pipeline_lookup(name, false);
	replicant_pipeline_check_owner(&ref, access.saved_userid);
	*halted = ref.halted;
	replicant_catalog_leave(&access);
	return ref.id;
}

REPLICANT_NORETURN static void
halted_error(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("pipeline \"%s\" is halted", name),
			 errhint("See last_error in replicant.status, fix the cause and call replicant.resume_pipeline().")));
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
	bool halted;
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
	pipeline_id = lookup_pipeline_id(name, &halted);
	if (halted)
		halted_error(name);

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
			reached = slot->delivered_upto >= lsn;
			halted = slot->state == REPLICANT_STATE_HALTED;
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
			halted_error(name);
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
