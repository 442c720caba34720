/*
 * backfill_plan.h
 *		Planning incremental backfills: read method, measures, bitmap
 *		ranges.
 */
#ifndef REPLICANT_BACKFILL_PLAN_H
#define REPLICANT_BACKFILL_PLAN_H

#include "pipeline.h"

/*
 * Plans a backfill of relid for the pipeline (needs SPI, as replicant's
 * catalog access); returns its id.  An error when owner may not read the
 * table whole.  The table is read (the router's sample, bitmap ranges) as
 * its own owner, restricted (table_read.h).
 */
extern int64 replicant_backfill_plan(int32 pipeline_id, Oid owner, Oid relid,
									 const char *requested_mode);

#endif /* REPLICANT_BACKFILL_PLAN_H */
