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
 *	2. the new slot is made, unless a restart finds it made (a slot of the
 *	   pipeline's name is the resync's once the old one was dropped);
 *	3. in one transaction, each destination that resyncs (every one on a
 *	   request; after a loss, those delivered to whose on_slot_loss is
 *	   'resync') begins its own resync, its checkpoint moved to the WAL
 *	   insert position, past the new slot's consistent point; each other
 *	   one gives its hold on the slot up, halted for good (its position
 *	   went with the old slot); the pipeline's resync ends and the new
 *	   slot's position is recorded (slot_position.h);
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
#include "resync.h"
#include "resync_destinations.h"
#include "slot.h"
#include "slot_position.h"

/* Every destination on a request; after a loss, those that chose it and were delivered to. */
static bool
resyncs(const ReplicantPipeline *pipeline, const ReplicantDestination *destination)
{
	return pipeline->resync_losses == 0 ||
		   (destination->on_slot_loss_resync && destination->halt_reason == NULL && !destination->slot_released);
}

/* Makes the new slot unless it was made before a restart; NULL or why not. */
static char *
make_slot(const ReplicantPipeline *pipeline)
{
	LogicalDecodingContext *ctx;

	switch (replicant_slot_owner(pipeline->slot_name))
	{
		case REPLICANT_SLOT_OURS:
			return NULL;
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
 * Step 3: returns how many destinations resync; *refusal is why one could
 * not (its tables cannot be read), else NULL.  Begun resyncs and releases
 * are logged once the transaction committed.
 */
static int
begin_each(ReplicantPipeline *pipeline, char **refusal)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline->id)};
	ReplicantResyncStart start = pipeline->resync_losses == 0 ? REPLICANT_RESYNC_REQUESTED : REPLICANT_RESYNC_ON_LOSS;
	List *began = NIL;
	List *released = NIL;
	List *reasons = NIL;
	ListCell *lc;
	ListCell *lr;
	bool ended = false;

	*refusal = NULL;
	replicant_catalog_begin(&access);
	foreach(lc, pipeline->destinations)
	{
		ReplicantDestination *destination = lfirst(lc);
		char *reason = pipeline->resync_reason;

		if (resyncs(pipeline, destination))
		{
			char *refused = replicant_destination_resync_begin_in(pipeline, destination, reason, start);

			if (refused == NULL)
			{
				began = lappend(began, destination);
				continue;
			}
			reason = psprintf("%s; it cannot resync: %s", reason, refused);
			if (*refusal == NULL)
				*refusal = refused;
		}
		replicant_destination_record_release(destination->id, reason);
		if (!destination->slot_released)
		{
			released = lappend(released, destination);
			reasons = lappend(reasons, reason);
		}
	}
	/* Unless a resync_pipeline() came meanwhile: it clears resync_slot_dropped. */
	if (began != NIL)
	{
		if (SPI_execute_with_args("UPDATE replicant.pipelines SET resync_reason = NULL,"
								  "       resync_lost_from = NULL, resync_slot_dropped = false"
								  " WHERE id OPERATOR(pg_catalog.=) $1 AND resync_slot_dropped",
								  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not record the end of the resync");
		ended = SPI_processed > 0;
		if (ended)
			replicant_slot_position_create(pipeline->id, replicant_slot_confirmed_flush(pipeline->slot_name));
	}
	replicant_catalog_end(&access);

	forboth(lc, released, lr, reasons)
		replicant_destination_log_release(pipeline->name, lfirst(lc), lfirst(lr));
	foreach(lc, began)
		replicant_log_state(pipeline->name, "resync_began", "destination",
							((ReplicantDestination *) lfirst(lc))->name, "reason", pipeline->resync_reason,
							REPLICANT_LOG_END);
	if (began != NIL && !ended)
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" starts its resync over: replicant.resync_pipeline() was called during it",
						pipeline->name)));
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
	resyncing = begin_each(pipeline, &refused);
	if (resyncing == 0 && refused != NULL)
		return psprintf("no destination of the pipeline can resync (once they can, call replicant.resync_pipeline(name)): %s",
						refused);
	if (resyncing == 0)
		return psprintf("no destination delivered to chose to resync after the slot was lost (on_slot_loss => 'resync'): %s",
						pipeline->resync_reason);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" replaced its replication slot: %d of its destinations resync",
					pipeline->name, resyncing),
			 errdetail("Each reads every published table again beside the new slot's stream.")));
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->superseded = true;
	LWLockRelease(replicant_shmem->lock);
	proc_exit(0);
}
