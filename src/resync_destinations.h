/*
 * resync_destinations.h
 *		The resync of a pipeline that has several destinations: the slot
 *		is replaced, and each destination then resyncs alone beside the new
 *		slot's stream (destination_resync.h).
 */
#ifndef REPLICANT_RESYNC_DESTINATIONS_H
#define REPLICANT_RESYNC_DESTINATIONS_H

#include "pipeline.h"
#include "shmem.h"

/*
 * From the worker, when pipeline (several destinations) has a resync under
 * way: replaces the slot, begins the resync of each destination that
 * resyncs and releases the others, ends the pipeline's resync, and exits
 * for an immediate restart.  Returns only with a value-free halt reason
 * for the pipeline (the slot's name is foreign, no slot is free, or no
 * destination can resync), having changed nothing of the destinations.
 * Outside a transaction.
 */
extern char *replicant_resync_destinations(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline);

#endif /* REPLICANT_RESYNC_DESTINATIONS_H */
