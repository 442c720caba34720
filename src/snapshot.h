/*
 * snapshot.h
 *		Initial snapshots: every published table read under the slot's
 *		exported snapshot by parallel shard workers, before streaming starts.
 */
#ifndef REPLICANT_SNAPSHOT_H
#define REPLICANT_SNAPSHOT_H

#include "access/htup.h"
#include "access/tupdesc.h"
#include "lib/stringinfo.h"
#include "nodes/bitmapset.h"
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
 * Encodes one row of a SELECT * over a relation (desc) as a "read" change
 * into change, and its key object into key.  SELECT * skips dropped
 * columns: the row's values are lined up with the relation's attributes in
 * values/nulls (natts long), so keys and values encode exactly as the
 * stream's do.  names is "schema":...,"table":... already encoded; columns
 * are the published ones (replicant_publication_read_filter; NULL: all).
 */
extern void replicant_snapshot_encode_read(StringInfo change, StringInfo key,
										   const char *names, TupleDesc desc,
										   HeapTuple row, TupleDesc row_desc,
										   Datum *values, bool *nulls,
										   const Bitmapset *key_columns, bool whole_row,
										   const Bitmapset *columns);

/*
 * Why the current user may not read rel as a whole (no SELECT privilege,
 * or row-level security it does not bypass), value-free; NULL if it may.
 * The stream halts on the same conditions.
 */
extern char *replicant_snapshot_read_denied(Relation rel);

PGDLLEXPORT void replicant_shard_main(Datum main_arg);

#endif							/* REPLICANT_SNAPSHOT_H */
