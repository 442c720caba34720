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
 * Each destination has its own row and its own pending acknowledgement;
 * one transaction commits every pending row.  The slot is confirmed to the
 * floor, the lowest committed end of the destinations holding it
 * (docs/destinations-design.md §2.3), never to one destination's end.
 *
 * Rules kept with other files: docs/internals.md §1 (checkpoint before
 * confirm).
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "checkpoint.h"
#include "checkpoint_floor.h"
#include "fault.h"
#include "catalog.h"
#include "destination.h"
#include "pipeline.h"
#include "pruning.h"
#include "publication.h"
#include "replicant.h"

/* The checkpoint of one destination, in this process. */
typedef struct Tracked
{
	int32 destination_id; /* 0: the pipeline's only one, under 0.2.0's objects */
	bool pending;         /* the sink acknowledged more than is committed */
	XLogRecPtr pending_commit_lsn;
	XLogRecPtr pending_end_lsn;
	XLogRecPtr committed_end; /* the row's end_lsn as committed, or invalid */
	bool holds_slot;          /* counts in the floor: its hold not given up */
	/* The last commit its sink acknowledged, in this process. */
	XLogRecPtr last_acknowledged;
} Tracked;

static int32 tracked_pipeline_id;
static Tracked tracked[REPLICANT_MAX_DESTINATIONS];
static int ntracked = 0;

static SPIPlanPtr update_plan = NULL;
static SPIPlanPtr insert_plan = NULL;
static SPIPlanPtr pipeline_update_plan = NULL;
static SPIPlanPtr pipeline_insert_plan = NULL;

static TimestampTz last_commit_at = 0;

void
replicant_checkpoint_track(const ReplicantPipeline *pipeline)
{
	ListCell *lc;

	Assert(ntracked == 0 && list_length(pipeline->destinations) <= REPLICANT_MAX_DESTINATIONS);
	tracked_pipeline_id = pipeline->id;
	foreach(lc, pipeline->destinations)
	{
		const ReplicantDestination *d = lfirst(lc);
		Tracked *t = &tracked[ntracked++];

		memset(t, 0, sizeof(Tracked));
		t->destination_id = d->id;
		t->committed_end = d->checkpoint_end_lsn;
		t->holds_slot = !d->slot_released;
	}
}

/* The floor of ends (one per tracked destination) over those holding the slot. */
static XLogRecPtr
holding_floor(const XLogRecPtr *ends)
{
	XLogRecPtr holding[REPLICANT_MAX_DESTINATIONS];
	int n = 0;
	int i;

	for (i = 0; i < ntracked; i++)
		if (tracked[i].holds_slot)
			holding[n++] = ends[i];
	return replicant_checkpoint_floor_of(holding, n);
}

static Tracked *
find_tracked(const ReplicantDestination *destination)
{
	int i;

	for (i = 0; i < ntracked; i++)
		if (tracked[i].destination_id == destination->id)
			return &tracked[i];
	elog(ERROR, "destination %d of pipeline %d has no checkpoint state",
		 destination->id, tracked_pipeline_id);
	pg_unreachable();
}

/*
 * A generic plan: the arrays' sizes change nothing worth planning for, and
 * the plan cache would otherwise plan each commit anew (a custom plan knows
 * the arrays' lengths, so it always looks cheaper).
 */
static SPIPlanPtr
prepare(const char *sql, Oid id_type, Oid lsn_type)
{
	Oid argtypes[3] = {id_type, lsn_type, lsn_type};
	SPIPlanPtr plan = SPI_prepare_cursor(sql, 3, argtypes, CURSOR_OPT_GENERIC_PLAN);

	if (plan == NULL || SPI_keepplan(plan) != 0)
		elog(ERROR, "could not prepare checkpoint statement");
	return plan;
}

/*
 * Writes the pending rows keyed by destination, all in one statement: a
 * plain UPDATE, since the rows exist after each destination's first
 * delivery and an upsert's speculative insertion would cost every batch.
 */
static void
write_destination_rows(void)
{
	Datum ids[REPLICANT_MAX_DESTINATIONS];
	Datum commits[REPLICANT_MAX_DESTINATIONS];
	Datum ends[REPLICANT_MAX_DESTINATIONS];
	Datum args[3];
	uint64 written;
	int n = 0;
	int i;

	for (i = 0; i < ntracked; i++)
		if (tracked[i].pending && tracked[i].destination_id != 0)
		{
			ids[n] = Int32GetDatum(tracked[i].destination_id);
			commits[n] = LSNGetDatum(tracked[i].pending_commit_lsn);
			ends[n] = LSNGetDatum(tracked[i].pending_end_lsn);
			n++;
		}
	if (n == 0)
		return;
	args[0] = PointerGetDatum(construct_array(ids, n, INT4OID, sizeof(int32), true, TYPALIGN_INT));
	args[1] = PointerGetDatum(construct_array(commits, n, PG_LSNOID, sizeof(XLogRecPtr),
											  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	args[2] = PointerGetDatum(construct_array(ends, n, PG_LSNOID, sizeof(XLogRecPtr),
											  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	if (update_plan == NULL)
		update_plan = prepare("UPDATE replicant.checkpoints c"
							  "   SET commit_lsn = u.commit_lsn, end_lsn = u.end_lsn,"
							  "       updated_at = pg_catalog.now()"
							  "  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3))"
							  "       AS u(destination_id, commit_lsn, end_lsn)"
							  " WHERE c.destination_id OPERATOR(pg_catalog.=) u.destination_id",
							  INT4ARRAYOID, PG_LSNARRAYOID);
	if (SPI_execute_plan(update_plan, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not write the checkpoints of pipeline %d", tracked_pipeline_id);
	written = SPI_processed;
	if (written < (uint64) n)
	{
		/* A destination's first checkpoint. */
		if (insert_plan == NULL)
			insert_plan = prepare("INSERT INTO replicant.checkpoints"
								  "       (pipeline_id, destination_id, commit_lsn, end_lsn, updated_at)"
								  " SELECT d.pipeline_id, d.id, u.commit_lsn, u.end_lsn, pg_catalog.now()"
								  "   FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3))"
								  "       AS u(destination_id, commit_lsn, end_lsn)"
								  "   JOIN replicant.destinations d ON d.id OPERATOR(pg_catalog.=) u.destination_id"
								  "  WHERE NOT EXISTS (SELECT FROM replicant.checkpoints c"
								  "                     WHERE c.destination_id OPERATOR(pg_catalog.=) d.id)",
								  INT4ARRAYOID, PG_LSNARRAYOID);
		if (SPI_execute_plan(insert_plan, args, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not write the checkpoints of pipeline %d", tracked_pipeline_id);
		written += SPI_processed;
	}
	/* A destination dropped meanwhile would lose its row: none may be. */
	if (written != (uint64) n)
		elog(ERROR, "could not write the checkpoints of pipeline %d", tracked_pipeline_id);
}

/*
 * The row of a worker started under 0.2.0's objects, keyed by pipeline: its
 * only destination's, before ALTER EXTENSION UPDATE and after it (which
 * gives each pipeline one destination and keeps its row).  The first
 * INSERT takes the destination from replicant.destinations once it exists.
 */
static void
write_pipeline_row(Tracked *t)
{
	Datum args[3];

	args[0] = Int32GetDatum(tracked_pipeline_id);
	args[1] = LSNGetDatum(t->pending_commit_lsn);
	args[2] = LSNGetDatum(t->pending_end_lsn);
	if (pipeline_update_plan == NULL)
		pipeline_update_plan = prepare("UPDATE replicant.checkpoints"
									   "   SET commit_lsn = $2, end_lsn = $3, updated_at = pg_catalog.now()"
									   " WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
									   INT4OID, PG_LSNOID);
	if (SPI_execute_plan(pipeline_update_plan, args, NULL, false, 0) != SPI_OK_UPDATE ||
		SPI_processed > 1)
		elog(ERROR, "could not write checkpoint of pipeline %d", tracked_pipeline_id);
	if (SPI_processed == 1)
		return;
	if (pipeline_insert_plan == NULL)
		pipeline_insert_plan = prepare(replicant_destinations_exist() ?
										   "INSERT INTO replicant.checkpoints"
										   "       (pipeline_id, destination_id, commit_lsn, end_lsn, updated_at)"
										   " SELECT $1, d.id, $2, $3, pg_catalog.now() FROM replicant.destinations d"
										   "  WHERE d.pipeline_id OPERATOR(pg_catalog.=) $1" :
										   "INSERT INTO replicant.checkpoints"
										   "       (pipeline_id, commit_lsn, end_lsn, updated_at)"
										   " VALUES ($1, $2, $3, pg_catalog.now())",
									   INT4OID, PG_LSNOID);
	if (SPI_execute_plan(pipeline_insert_plan, args, NULL, false, 0) != SPI_OK_INSERT ||
		SPI_processed != 1)
		elog(ERROR, "could not write checkpoint of pipeline %d", tracked_pipeline_id);
}

/* Commits every pending row in one transaction. */
static void
checkpoint_commit(void)
{
	ReplicantCatalogAccess access;
	ReplicantPhase left = replicant_shmem_enter_phase(REPLICANT_PHASE_CHECKPOINT);
	XLogRecPtr ends[REPLICANT_MAX_DESTINATIONS];
	int i;

	for (i = 0; i < ntracked; i++)
	{
		Tracked *t = &tracked[i];

		/* The checkpoint never passes what the sink acknowledged. */
		Assert(!t->pending || (t->pending_commit_lsn <= t->last_acknowledged &&
							   t->pending_end_lsn > t->pending_commit_lsn));
		ends[i] = t->pending ? t->pending_end_lsn : t->committed_end;
	}

	replicant_catalog_begin(&access);
	replicant_fault("checkpoint");
	write_destination_rows();
	for (i = 0; i < ntracked; i++)
		if (tracked[i].pending && tracked[i].destination_id == 0)
			write_pipeline_row(&tracked[i]);
	replicant_publication_save_shapes(tracked_pipeline_id);
	replicant_pruning_checkpoint(tracked_pipeline_id, holding_floor(ends));
	replicant_catalog_end(&access);

	for (i = 0; i < ntracked; i++)
	{
		tracked[i].committed_end = ends[i];
		tracked[i].pending = false;
	}
	replicant_shmem_enter_phase(left);
	replicant_fault("after_checkpoint");
}

bool
replicant_checkpoint_acknowledged(ReplicantPipelineSlot *slot,
								  const ReplicantDestination *destination,
								  XLogRecPtr commit_lsn, XLogRecPtr end_lsn, TimestampTz now)
{
	Tracked *t = find_tracked(destination);

	/* Acknowledgements come in commit order, each commit once per destination. */
	Assert(commit_lsn > t->last_acknowledged);
	t->last_acknowledged = commit_lsn;
	t->pending = true;
	t->pending_commit_lsn = commit_lsn;
	t->pending_end_lsn = end_lsn;

	/* A new shape is saved with its checkpoint, before more is decoded. */
	if (replicant_checkpoint_due_in(slot, now) != 0 &&
		!replicant_publication_shapes_unsaved())
		return false;
	last_commit_at = now;
	checkpoint_commit();
	return true;
}

bool
replicant_checkpoint_commit_pending(void)
{
	if (!replicant_checkpoint_is_pending())
		return false;
	last_commit_at = GetCurrentTimestamp();
	checkpoint_commit();
	return true;
}

bool
replicant_checkpoint_is_pending(void)
{
	int i;

	for (i = 0; i < ntracked; i++)
		if (tracked[i].pending)
			return true;
	return false;
}

long
replicant_checkpoint_due_in(ReplicantPipelineSlot *slot, TimestampTz now)
{
	long left;

	if (!replicant_checkpoint_is_pending())
		return -1;
	if (pg_atomic_read_u32(&slot->checkpoint_wanted) != 0)
		return 0;
	left = TimestampDifferenceMilliseconds(now,
										   TimestampTzPlusMilliseconds(last_commit_at,
																	   replicant_checkpoint_interval_ms));
	return Max(left, 0);
}

XLogRecPtr
replicant_checkpoint_floor(void)
{
	XLogRecPtr ends[REPLICANT_MAX_DESTINATIONS];
	int i;

	for (i = 0; i < ntracked; i++)
		ends[i] = tracked[i].committed_end;
	return holding_floor(ends);
}

XLogRecPtr
replicant_checkpoint_committed_end(const ReplicantDestination *destination)
{
	return find_tracked(destination)->committed_end;
}

void
replicant_checkpoint_make_durable(void)
{
	/* Returns at once when the WAL is flushed that far already. */
	if (!XLogRecPtrIsInvalid(XactLastCommitEnd))
		XLogFlush(XactLastCommitEnd);
}
