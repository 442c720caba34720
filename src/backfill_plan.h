/*
 * backfill_plan.h
 *		Planning incremental backfills: read method, measures, bitmap
 *		ranges; and backfilling again the tables a skipped backfill or
 *		snapshot left unread, once they are published again.
 */
#ifndef REPLICANT_BACKFILL_PLAN_H
#define REPLICANT_BACKFILL_PLAN_H

#include "pipeline.h"

/*
 * Plans a backfill of relid for the pipeline's destination destination_id
 * alone, or (0) for each of them (needs SPI, as replicant's catalog
 * access); returns its id.  An error when owner may not read the table
 * whole.  The table is read (the router's sample, bitmap ranges) as its
 * own owner, restricted (table_read.h).
 */
extern int64 replicant_backfill_plan(int32 pipeline_id, int32 destination_id, Oid owner, Oid relid,
									 const char *requested_mode);

/*
 * Plans a backfill, from its start, of every table whose last backfill or
 * initial snapshot in the pipeline was skipped because no publication
 * published it, and which one of the pipeline's publications publishes
 * again: the rows it never read, and the changes the stream skipped
 * meanwhile, reach the sink; sets *planned if it planned one.  Returns
 * whether such a table is still not published (to look again later); sets
 * *halt_reason when the pipeline's owner may not read one that is (the
 * stream would halt on it too).  In a transaction of its own (pipeline
 * worker).
 */
extern bool replicant_backfill_replan_skipped(ReplicantPipeline *pipeline, bool *planned,
											  char **halt_reason);

#endif /* REPLICANT_BACKFILL_PLAN_H */
