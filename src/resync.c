/*
 * resync.c
 *		The non-destructive resync: after a slot loss with on_slot_loss =>
 *		'resync' (slot_health.c finds it), or on request (resync_pipeline).
 *
 * A resync is an initial snapshot (snapshot.c) of a pipeline that had
 * one stream already, kept in the catalog so that a crash or a restart
 * at any point resumes it (replicant.pipelines.resync_reason, NULL when
 * none is under way):
 *
 *	1. the loss is recorded (here, or by resync_pipeline), and the worker
 *	   starts again;
 *	2. the worker cancels the backfills under way, plans every published
 *	   table anew and sends their "first" markers: the first of them is the
 *	   probe of a sink that was away, retried with backoff as for any
 *	   outage, so that no new slot retains WAL while the sink is away;
 *	3. it drops what is left of the old slot and records that
 *	   (resync_slot_dropped): from then on a slot of the pipeline's name is
 *	   the resync's, and a restart before this step does it again;
 *	4. it creates the new slot, reads every table under its exported
 *	   snapshot (or, after a restart, what is left under a fresh one, as an
 *	   interrupted initial snapshot does), and sends the "last" markers;
 *	5. it ends the resync (here) and streams from the new slot's consistent
 *	   point.
 *
 * The markers tell the sink (replicant format: "resync" on the snapshot
 * object) why, and the WAL whose changes were not delivered one by one:
 * rows of the table it holds that were not sent since the table's "first"
 * are gone at its "last" (mark and sweep, docs/sink-protocol.md).
 *
 * Rules kept with other files: docs/internals.md §3 (the exported
 * snapshot), §10 (the resync).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "common/string.h"
#include "executor/spi.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"

#include "catalog.h"
#include "compat.h"
#include "destination.h"
#include "event_log.h"
#include "fault.h"
#include "resync.h"
#include "slot.h"
#include "slot_health.h"
#include "slot_position.h"

/* Runs one statement on replicant's tables, in a transaction of its own. */
static void
run_catalog_update(const char *sql, int nargs, Oid *argtypes, Datum *args)
{
	ReplicantCatalogAccess access;

	replicant_catalog_begin(&access);
	if (SPI_execute_with_args(sql, nargs, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the resync's progress");
	replicant_catalog_end(&access);
}

/*
 * Counts the loss and records the resync, unless REPLICANT_RESYNC_MAX_LOSSES
 * losses came in a row already before the stream caught up in between
 * (resync_losses, reset by replicant_resync_streamed once a delivered batch
 * finds the slot confirmed past the WAL there was when the stream began,
 * slot_health.c): a resync that cannot stream before its slot is lost
 * again would loop.  Returns whether it was
 * recorded; *looped says when the count stopped it.
 */
static bool
record_loss(ReplicantPipeline *pipeline, const char *reason, bool *looped)
{
	ReplicantCatalogAccess access;
	Oid argtypes[3] = {INT4OID, TEXTOID, INT4OID};
	Datum args[3];
	bool recorded;

	args[0] = Int32GetDatum(pipeline->id);
	args[1] = CStringGetTextDatum(reason);
	args[2] = Int32GetDatum(REPLICANT_RESYNC_MAX_LOSSES);
	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("UPDATE replicant.pipelines"
							  "   SET resync_slot_dropped = resync_reason IS NOT NULL AND resync_slot_dropped,"
							  "       resync_reason = coalesce(resync_reason, $2),"
							  "       resync_losses = resync_losses OPERATOR(pg_catalog.+) 1"
							  " WHERE id OPERATOR(pg_catalog.=) $1 AND enabled AND halt_reason IS NULL"
							  "   AND resync_losses OPERATOR(pg_catalog.<) $3",
							  3, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the resync of pipeline %d", pipeline->id);
	recorded = SPI_processed > 0;
	*looped = false;
	if (!recorded)
	{
		if (SPI_execute_with_args("SELECT 1 FROM replicant.pipelines"
								  " WHERE id OPERATOR(pg_catalog.=) $1 AND enabled AND halt_reason IS NULL",
								  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read pipeline %d", pipeline->id);
		*looped = SPI_processed > 0;
	}
	replicant_catalog_end(&access);
	return recorded;
}

/*
 * Whether a destination delivered to chose to resync after a slot loss
 * (with several, each other one then gives its hold up: resync_destinations.c).
 */
static bool
resync_chosen(const ReplicantPipeline *pipeline)
{
	ListCell *lc;

	if (list_length(pipeline->destinations) == 1)
		return replicant_pipeline_only_destination(pipeline)->on_slot_loss_resync;
	foreach(lc, pipeline->destinations)
	{
		if (replicant_destination_resyncs_on_loss(lfirst(lc)))
			return true;
	}
	return false;
}

char *
replicant_resync_on_loss(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
						 const char *reason)
{
	bool recorded;
	bool looped;

	if (!resync_chosen(pipeline))
		return (char *) reason;
	if (IsTransactionState())
		AbortCurrentTransaction();
	/* The resync is the remedy now: the halt's advice would mislead. */
	if (pg_str_endswith(reason, REPLICANT_SLOT_MISSING_REMEDY))
		reason = pnstrdup(reason, strlen(reason) - strlen(REPLICANT_SLOT_MISSING_REMEDY));
	recorded = record_loss(pipeline, reason, &looped);
	if (looped)
		return psprintf("the replication slot was lost %d times in a row before the stream delivered a batch, "
						"resyncing again would loop (raise max_retained_wal or max_slot_wal_keep_size, "
						"then call replicant.resync_pipeline()): %s",
						REPLICANT_RESYNC_MAX_LOSSES, reason);

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (recorded)
	{
		for (int i = 0; i < replicant_shmem_ndestinations(slot); i++)
			strlcpy(slot->destinations[i].last_error, reason, REPLICANT_ERROR_LEN);
		/* Started again at once, and no failure of the pipeline's. */
		slot->superseded = true;
	}
	else
		slot->runnable = false; /* halted or disabled meanwhile */
	LWLockRelease(replicant_shmem->lock);
	if (recorded)
	{
		replicant_log_state(pipeline->name, "resync_pending", "reason", reason, REPLICANT_LOG_END);
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" lost its replication slot and resyncs: %s",
						pipeline->name, reason),
				 errdetail(list_length(pipeline->destinations) > 1 ?
							   "A new slot is made, and every published table is read again for each destination that chose to resync; the others halt." :
							   "Once its sink answers, every published table is read again under a new slot's snapshot.")));
	}
	proc_exit(0);
}

void
replicant_resync_streamed(ReplicantPipeline *pipeline)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline->id)};

	if (pipeline->resync_losses == 0 || !replicant_slot_health_caught_up())
		return;
	run_catalog_update("UPDATE replicant.pipelines SET resync_losses = 0 WHERE id OPERATOR(pg_catalog.=) $1",
					   1, argtypes, args);
	pipeline->resync_losses = 0;
}

void
replicant_resync_cancel_backfills(ReplicantPipeline *pipeline)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline->id)};

	run_catalog_update("UPDATE replicant.backfills SET state = 'cancelled', finished_at = pg_catalog.now()"
					   " WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND kind OPERATOR(pg_catalog.=) 'incremental'"
					   "   AND state OPERATOR(pg_catalog.=) ANY ('{planned,running}')",
					   1, argtypes, args);
}

char *
replicant_resync_drop_old_slot(ReplicantPipeline *pipeline)
{
	Oid argtypes[2] = {INT4OID, PG_LSNOID};
	Datum args[2];

	if (replicant_slot_drop(pipeline->slot_name, false) == REPLICANT_SLOT_FOREIGN)
		return replicant_slot_foreign_reason(pipeline->slot_name);

	/* What the sink acknowledged: no worker delivered since this one loaded it. */
	pipeline->resync_lost_from = pipeline->checkpoint_commit_lsn;
	args[0] = Int32GetDatum(pipeline->id);
	args[1] = LSNGetDatum(pipeline->resync_lost_from);
	run_catalog_update("UPDATE replicant.pipelines SET resync_slot_dropped = true,"
					   "       resync_lost_from = nullif($2, '0/0'::pg_catalog.pg_lsn)"
					   " WHERE id OPERATOR(pg_catalog.=) $1",
					   2, argtypes, args);
	pipeline->resync_slot_dropped = true;
	replicant_fault("resync_slot_dropped");
	replicant_log_state(pipeline->name, "resync_began", "reason", pipeline->resync_reason, "lost_from",
						psprintf("%X/%X", LSN_FORMAT_ARGS(pipeline->resync_lost_from)), REPLICANT_LOG_END);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" resyncs: what was left of its replication slot is dropped",
					pipeline->name)));
	return NULL;
}

ReplicantResync *
replicant_resync_markers(ReplicantPipeline *pipeline, bool last)
{
	ReplicantResync *resync;

	if (pipeline->resync_reason == NULL)
		return NULL;
	resync = palloc0(sizeof(ReplicantResync));
	resync->reason = pipeline->resync_reason;
	resync->lost_from = pipeline->resync_slot_dropped ? pipeline->resync_lost_from :
														pipeline->checkpoint_commit_lsn;
	/* Nothing confirms the new slot before the stream starts: its consistent point. */
	if (last)
		resync->lost_to = replicant_slot_confirmed_flush(pipeline->slot_name);
	return resync;
}

char *
replicant_resync_refusal(ReplicantPipeline *pipeline, const ReplicantResync *resync)
{
	const ReplicantFormat *format = replicant_format_of(replicant_pipeline_only_destination(pipeline));

	if (resync == NULL || format->resets_watermark || resync->lost_to >= resync->lost_from)
		return NULL;
	return psprintf("the resync's new replication slot starts at %X/%X, below %X/%X that the sink acknowledged "
					"(this server's WAL went back: a promoted standby that lagged), and a %s sink cannot "
					"take the new commits at those positions (recreate the pipeline, its destination emptied)",
					LSN_FORMAT_ARGS(resync->lost_to), LSN_FORMAT_ARGS(resync->lost_from), format->name);
}

/*
 * A resync_pipeline() came after the reads began (it cleared
 * resync_slot_dropped): the resync starts over, what is left of the slot
 * going as an old one, and the worker exits for an immediate restart.
 */
REPLICANT_NORETURN static void
start_over(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->superseded = true;
	LWLockRelease(replicant_shmem->lock);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" starts its resync over: replicant.resync_pipeline() was called during it",
					pipeline->name)));
	proc_exit(0);
}

void
replicant_resync_finish(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline->id)};
	XLogRecPtr lost_to = replicant_slot_confirmed_flush(pipeline->slot_name);
	bool ended;

	if (pipeline->resync_reason == NULL)
		return;
	replicant_fault("resync_finish");
	replicant_catalog_begin(&access);
	/* Unless a resync_pipeline() came meanwhile: it clears resync_slot_dropped. */
	if (SPI_execute_with_args("UPDATE replicant.pipelines SET resync_reason = NULL,"
							  "       resync_lost_from = NULL, resync_slot_dropped = false"
							  " WHERE id OPERATOR(pg_catalog.=) $1 AND resync_slot_dropped",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the end of the resync");
	ended = SPI_processed > 0;
	/* The stream starts there: the slot is where the pipeline left it. */
	if (ended)
		replicant_slot_position_create(pipeline->id, lost_to);
	replicant_catalog_end(&access);
	if (!ended)
		start_over(slot, pipeline);
	pipeline->resync_reason = NULL;
	pipeline->resync_ended = true;
	replicant_log_state(pipeline->name, "resync_ended", "lsn", psprintf("%X/%X", LSN_FORMAT_ARGS(lost_to)),
						REPLICANT_LOG_END);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" finished its resync: it streams from %X/%X",
					pipeline->name, LSN_FORMAT_ARGS(lost_to))));
}
