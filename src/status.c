/*
 * status.c
 *		replicant._worker_status(): the live half of replicant.status, read
 *		from shared memory.  The view joins it with the catalog and the slot.
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "shmem.h"

PG_FUNCTION_INFO_V1(replicant_worker_status);

#define WORKER_STATUS_COLS 10

Datum
replicant_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (!replicant_shmem_ready())
		PG_RETURN_VOID();

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];
		Datum		values[WORKER_STATUS_COLS];
		bool		nulls[WORKER_STATUS_COLS] = {0};

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
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(replicant_shmem->lock);
	PG_RETURN_VOID();
}
