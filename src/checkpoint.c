/*
 * checkpoint.c
 *		Committing the delivery checkpoint after the sink's 2xx.
 *
 * The row in replicant.checkpoints is the authority on what was delivered:
 * the slot's confirmed_flush only moves after it, and may lag it after a
 * crash, so the decoder skips every transaction whose commit_lsn is at or
 * below the checkpoint.  The same transaction saves the table shapes seen
 * up to it (publication.c).  The plans are prepared once per worker.
 *
 * A checkpoint is a transaction, the largest part of a small request's
 * cost, so the row is committed at most every replicant.checkpoint_interval:
 * the acknowledgements in between stay pending here, and a crash
 * re-delivers them (at-least-once; the sink skips them by commit_lsn).  The
 * slot and await_delivered() only ever hear of committed checkpoints.
 *
 * The streaming worker commits asynchronously (worker.c): the checkpoint's
 * WAL is flushed before the next request leaves, usually for free as other
 * commits flush WAL too, so a crash loses at most the checkpoint committed
 * last, never an older one.
 *
 * Rules kept with other files: docs/internals.md §1 (checkpoint before
 * confirm).
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "checkpoint.h"
#include "fault.h"
#include "catalog.h"
#include "pipeline.h"
#include "pruning.h"
#include "publication.h"
#include "replicant.h"

static SPIPlanPtr update_plan = NULL;
static SPIPlanPtr insert_plan = NULL;

/* What the sink acknowledged and is not committed yet. */
static bool pending = false;
static int32 pending_pipeline_id;
static XLogRecPtr pending_commit_lsn;
static XLogRecPtr pending_end_lsn;

static TimestampTz last_commit_at = 0;
static XLogRecPtr committed_end = InvalidXLogRecPtr;

/* The last commit the sink acknowledged, in this process. */
static XLogRecPtr last_acknowledged PG_USED_FOR_ASSERTS_ONLY = InvalidXLogRecPtr;

static SPIPlanPtr
prepare(const char *sql)
{
	Oid argtypes[3] = {INT4OID, PG_LSNOID, PG_LSNOID};
	SPIPlanPtr plan = SPI_prepare(sql, 3, argtypes);

	if (plan == NULL || SPI_keepplan(plan) != 0)
		elog(ERROR, "could not prepare checkpoint statement");
	return plan;
}

/*
 * A plain UPDATE: the row exists after the pipeline's first delivery, and
 * an upsert's speculative insertion would cost every batch.
 */
static void
checkpoint_commit(int32 pipeline_id, XLogRecPtr commit_lsn, XLogRecPtr end_lsn)
{
	ReplicantCatalogAccess access;
	Datum args[3];
	ReplicantPhase left = replicant_shmem_enter_phase(REPLICANT_PHASE_CHECKPOINT);

	/* The checkpoint never passes what the sink acknowledged. */
	Assert(commit_lsn <= last_acknowledged && end_lsn > commit_lsn);
	args[0] = Int32GetDatum(pipeline_id);
	args[1] = LSNGetDatum(commit_lsn);
	args[2] = LSNGetDatum(end_lsn);

	replicant_catalog_begin(&access);
	replicant_fault("checkpoint");
	if (update_plan == NULL)
		update_plan = prepare("UPDATE replicant.checkpoints"
							  "   SET commit_lsn = $2, end_lsn = $3, updated_at = pg_catalog.now()"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1");
	if (SPI_execute_plan(update_plan, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not write checkpoint of pipeline %d", pipeline_id);
	if (SPI_processed == 0)
	{
		/* The row is its destination's (its only one); 0.2.0's have none. */
		if (insert_plan == NULL)
			insert_plan = prepare(replicant_destinations_exist() ?
									  "INSERT INTO replicant.checkpoints"
									  "       (pipeline_id, destination_id, commit_lsn, end_lsn, updated_at)"
									  " SELECT $1, d.id, $2, $3, pg_catalog.now() FROM replicant.destinations d"
									  "  WHERE d.pipeline_id OPERATOR(pg_catalog.=) $1" :
									  "INSERT INTO replicant.checkpoints"
									  "       (pipeline_id, commit_lsn, end_lsn, updated_at)"
									  " VALUES ($1, $2, $3, pg_catalog.now())");
		if (SPI_execute_plan(insert_plan, args, NULL, false, 0) != SPI_OK_INSERT ||
			SPI_processed != 1)
			elog(ERROR, "could not write checkpoint of pipeline %d", pipeline_id);
	}
	replicant_publication_save_shapes(pipeline_id);
	replicant_pruning_checkpoint(pipeline_id, end_lsn);
	replicant_catalog_end(&access);

	pending = false;
	committed_end = end_lsn;
	replicant_shmem_enter_phase(left);
	replicant_fault("after_checkpoint");
}

bool
replicant_checkpoint_acknowledged(ReplicantPipelineSlot *slot, int32 pipeline_id,
								  XLogRecPtr commit_lsn, XLogRecPtr end_lsn,
								  TimestampTz now)
{
	/* Acknowledgements come in commit order, each commit once. */
	Assert(commit_lsn > last_acknowledged);
#ifdef USE_ASSERT_CHECKING
	last_acknowledged = commit_lsn;
#endif
	pending = true;
	pending_pipeline_id = pipeline_id;
	pending_commit_lsn = commit_lsn;
	pending_end_lsn = end_lsn;

	/* A new shape is saved with its checkpoint, before more is decoded. */
	if (replicant_checkpoint_due_in(slot, now) != 0 &&
		!replicant_publication_shapes_unsaved())
		return false;
	last_commit_at = now;
	checkpoint_commit(pipeline_id, commit_lsn, end_lsn);
	return true;
}

bool
replicant_checkpoint_commit_pending(void)
{
	if (!pending)
		return false;
	last_commit_at = GetCurrentTimestamp();
	checkpoint_commit(pending_pipeline_id, pending_commit_lsn, pending_end_lsn);
	return true;
}

bool
replicant_checkpoint_is_pending(void)
{
	return pending;
}

long
replicant_checkpoint_due_in(ReplicantPipelineSlot *slot, TimestampTz now)
{
	long left;

	if (!pending)
		return -1;
	if (pg_atomic_read_u32(&slot->checkpoint_wanted) != 0)
		return 0;
	left = TimestampDifferenceMilliseconds(now,
										   TimestampTzPlusMilliseconds(last_commit_at,
																	   replicant_checkpoint_interval_ms));
	return Max(left, 0);
}

XLogRecPtr
replicant_checkpoint_committed_end(void)
{
	return committed_end;
}

void
replicant_checkpoint_make_durable(void)
{
	/* Returns at once when the WAL is flushed that far already. */
	if (!XLogRecPtrIsInvalid(XactLastCommitEnd))
		XLogFlush(XactLastCommitEnd);
}
