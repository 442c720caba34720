/*
 * snapshot.h
 *		Initial snapshots: every published table read under the slot's
 *		exported snapshot by parallel shard workers, before streaming starts.
 */
#ifndef REPLICANT_SNAPSHOT_H
#define REPLICANT_SNAPSHOT_H

#include "utils/rel.h"

#include "pipeline.h"
#include "shmem.h"

/*
 * Runs the pipeline's initial snapshot, or what is left of it, in the
 * pipeline worker; returns once every table has been delivered, with the
 * pipeline's slot created at the snapshot's consistent point.  Returns at
 * once when the pipeline has no initial snapshot to take.
 */
extern void replicant_snapshot_initial(ReplicantPipelineSlot *slot, int slot_index,
									   ReplicantPipeline *pipeline);

#endif /* REPLICANT_SNAPSHOT_H */
