/*
 * resync_destinations.c
 *		The resync of a pipeline that has several destinations: after a
 *		slot loss that one of them chose to resync from (on_slot_loss =>
 *		'resync'), or on request (resync_pipeline(name)).
 *
 * With one destination, the pipeline's resync (resync.c) reads every table
 * under the new slot's exported snapshot, the stream stopped.  With
 * several, each destination reads at its own pace and its sink may be
 * away: so the pipeline only replaces the slot, and each destination that
 * resyncs then reads every table beside the new slot's stream, as
 * resync_pipeline(name, destination) makes it (destination_resync.c):
 *
 *	1. what is left of the old slot goes, resync_slot_dropped recorded
 *	   (resync.c), unless a restart finds that done;
 *	2. the new slot is made, unless a restart finds it made and valid (a
 *	   slot of the pipeline's name is the resync's once the old one was
 *	   dropped; an invalidated one is dropped and made again);
 *	3. in one transaction, the pipeline's row locked and its resync found
 *	   still the one whose old slot was dropped (a resync_pipeline() since
 *	   starts it over), each destination that resyncs (every one on a
 *	   request; after a loss, those delivered to whose on_slot_loss is
 *	   'resync', unless 3 of their resyncs in a row did not finish) begins
 *	   its own resync, its checkpoint moved to the new slot's consistent
 *	   point; each other one gives its hold on the slot up, halted for good
 *	   (its position went with the old slot); the pipeline's resync ends
 *	   and the new slot's position is recorded (slot_position.h);
 *	4. the worker starts again, and streams.
 *
 * Nothing streams before step 3 commits: no destination is ever decoded
 * for from the new slot with a checkpoint of the old one's WAL.
 *
 * Rules kept with other files: docs/internals.md §10 (the resync), §11
 * (several destinations).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "replication/logical.h"
#include "replication/slot.h"
#include "storage/ipc.h"

#include "catalog.h"
#include "destination.h"
#include "destination_resync.h"
#include "event_log.h"
#include "fault.h"
#include "resync.h"
#include "resync_destinations.h"
#include "slot.h"
#include "slot_health.h"
#include "slot_position.h"

/*
 * NULL when destination resyncs (every one on a request), else the reason
 * it gives its hold up with: after a loss, it did not choose to resync, was
 * halted, or began REPLICANT_RESYNC_MAX_LOSSES resyncs in a row that did
 * not finish (its own count: the pipeline's restarts once the new slot's
 * stream delivers, long before the reads are done).
 */
static char *
release_reason(const ReplicantPipeline *pipeline, const ReplicantDestination *destination, bool requested)
{
	if (requested)
		return NULL;
	if (!replicant_destination_resyncs_on_loss(destination))
		return pipeline->resync_reason;
	if (destination->resync_losses >= REPLICANT_RESYNC_MAX_LOSSES)
		return psprintf("%s; it resynced %d times in a row without reading every table (on_slot_loss => 'resync')",
						pipeline->resync_reason, destination->resync_losses);
	return NULL;
}

/* NULL when the slot made before a restart is still usable, else why not. */
static char *
slot_lost_reason(const char *name)
{
	char *reason;

	StartTransactionCommand();
	reason = replicant_slot_health_acquire(name);
	if (reason == NULL)
		ReplicationSlotRelease();
	CommitTransactionCommand();
	return reason;
}

/*
 * Makes the new slot unless one made before a restart is still valid: the
 * server may have invalidated it meanwhile (a resync begun from it would
 * find it lost at the next start, a request taken for a loss).  NULL or
 * why not.
 */
static char *
make_slot(const ReplicantPipeline *pipeline)
{
	LogicalDecodingContext *ctx;
	char *lost;

	switch (replicant_slot_owner(pipeline->slot_name))
	{
		case REPLICANT_SLOT_OURS:
			if ((lost = slot_lost_reason(pipeline->slot_name)) == NULL)
				return NULL;
			if (replicant_slot_drop(pipeline->slot_name, false) == REPLICANT_SLOT_FOREIGN)
				return replicant_slot_foreign_reason(pipeline->slot_name);
			ereport(LOG,
					(errmsg("replicant pipeline \"%s\" makes its new replication slot again: %s",
							pipeline->name, lost)));
			break;
		case REPLICANT_SLOT_FOREIGN:
			return replicant_slot_foreign_reason(pipeline->slot_name);
		case REPLICANT_SLOT_MISSING:
			break;
	}
	if (replicant_slot_free_count() == 0)
		return psprintf("cannot create replication slot \"%s\": all replication slots are in use (max_replication_slots = %d)",
						pipeline->slot_name, max_replication_slots);
	CheckLogicalDecodingRequirements();
	StartTransactionCommand();
	ctx = replicant_slot_create(pipeline->slot_name, pipeline->failover, false);
	FreeDecodingContext(ctx);
	ReplicationSlotPersist();
	ReplicationSlotRelease();
	CommitTransactionCommand();
	return NULL;
}

/*
 * Whether the resync under way is still the one whose old slot this
 * process dropped (a resync_pipeline() since clears resync_slot_dropped),
 * the pipeline's row locked; *requested: by a call, not a loss (the call
 * resets resync_losses).
 */
static bool
lock_resync(int32 pipeline_id, bool *requested)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	bool isnull;
	bool dropped;

	if (SPI_execute_with_args("SELECT resync_slot_dropped AND resync_reason IS NOT NULL, resync_losses"
							  "  FROM replicant.pipelines WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read pipeline %d", pipeline_id);
	dropped = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*requested = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)) == 0;
	return dropped;
}

/*
 * Step 3: returns how many destinations resync (0: none, and nothing was
 * changed; -1: a resync_pipeline() came meanwhile, nothing was done);
 * *refusal is why one could not, else NULL.  Each streams from the new slot's consistent point, the decoding
 * starts there.  Begun resyncs and releases are logged once committed.
 */
static int
begin_each(ReplicantPipeline *pipeline, char **refusal)
{
	ReplicantCatalogAccess access;
	XLogRecPtr from = replicant_slot_confirmed_flush(pipeline->slot_name);
	bool requested;
	List *began = NIL;
	List *released = NIL;
	List *reasons = NIL;
	ListCell *lc;
	ListCell *lr;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline->id)};

	*refusal = NULL;
	replicant_catalog_begin(&access);
	if (!lock_resync(pipeline->id, &requested))
	{
		replicant_catalog_end(&access);
		return -1;
	}
	foreach(lc, pipeline->destinations)
	{
		ReplicantDestination *destination = lfirst(lc);
		char *reason = release_reason(pipeline, destination, requested);

		if (reason == NULL)
		{
			char *refused = replicant_destination_resync_begin_in(pipeline, destination, pipeline->resync_reason,
																  requested ? REPLICANT_RESYNC_REQUESTED :
																			  REPLICANT_RESYNC_ON_LOSS,
																  from);

			if (refused == NULL)
			{
				began = lappend(began, destination);
				continue;
			}
			reason = psprintf("%s; it cannot resync: %s", pipeline->resync_reason, refused);
		}
		if (reason != pipeline->resync_reason && *refusal == NULL)
			*refusal = reason;
		released = lappend(released, destination);
		reasons = lappend(reasons, reason);
	}
	/* With none resyncing nothing changes: the pipeline halts, its resync recorded. */
	if (began != NIL)
	{
		forboth(lc, released, lr, reasons)
			replicant_destination_record_release(((ReplicantDestination *) lfirst(lc))->id, lfirst(lr));
		if (SPI_execute_with_args("UPDATE replicant.pipelines SET resync_reason = NULL,"
								  "       resync_lost_from = NULL, resync_slot_dropped = false"
								  " WHERE id OPERATOR(pg_catalog.=) $1",
								  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE ||
			SPI_processed != 1)
			elog(ERROR, "could not record the end of the resync");
		replicant_slot_position_create(pipeline->id, from);
	}
	replicant_catalog_end(&access);

	if (began == NIL)
		return 0;
	forboth(lc, released, lr, reasons)
	{
		if (!((ReplicantDestination *) lfirst(lc))->slot_released)
			replicant_destination_log_release(pipeline->name, lfirst(lc), lfirst(lr));
	}
	foreach(lc, began)
		replicant_log_state(pipeline->name, "resync_began", "destination",
							((ReplicantDestination *) lfirst(lc))->name, "reason", pipeline->resync_reason,
							REPLICANT_LOG_END);
	return list_length(began);
}

char *
replicant_resync_destinations(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline)
{
	char *refused;
	int resyncing;

	if (!pipeline->resync_slot_dropped && (refused = replicant_resync_drop_old_slot(pipeline)) != NULL)
		return refused;
	if ((refused = make_slot(pipeline)) != NULL)
		return refused;
	replicant_fault("resync_slot_made");
	resyncing = begin_each(pipeline, &refused);
	if (resyncing == 0 && refused != NULL)
		return psprintf("no destination of the pipeline can resync (once one can, call replicant.resync_pipeline(name)): %s",
						refused);
	if (resyncing == 0)
		return psprintf("no destination delivered to chose to resync after the slot was lost (on_slot_loss => 'resync'): %s",
						pipeline->resync_reason);
	if (resyncing < 0)
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" starts its resync over: replicant.resync_pipeline() was called during it",
						pipeline->name)));
	else
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" replaced its replication slot: %d of its destinations resync",
						pipeline->name, resyncing),
				 errdetail("Each reads every published table again beside the new slot's stream.")));
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->superseded = true;
	LWLockRelease(replicant_shmem->lock);
	proc_exit(0);
}
