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

/*
 * Why the current user may not read rel as a whole (no SELECT privilege,
 * or row-level security it does not bypass), value-free; NULL if it may.
 * The stream halts on the same conditions.
 */
extern char *replicant_snapshot_read_denied(Relation rel);

/*
 * Rows of rel as the planner estimates them: reltuples, or for a table
 * never vacuumed or analysed, its size over the estimated row width.
 */
extern int64 replicant_snapshot_estimate_rows(Relation rel);

PGDLLEXPORT void replicant_shard_main(Datum main_arg);

#endif /* REPLICANT_SNAPSHOT_H */
