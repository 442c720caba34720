/*
 * backfill_progress.h
 *		The worker's side of replicant.backfills: the next backfill to read
 *		and the progress of each delivered chunk.
 */
#ifndef REPLICANT_BACKFILL_PROGRESS_H
#define REPLICANT_BACKFILL_PROGRESS_H

#include "backfill.h"

/* The oldest unfinished incremental backfill, or NULL (own transaction). */
extern ReplicantBackfill *replicant_backfill_next(int32 pipeline_id);

/* Records that the chunk was delivered (own transaction). */
extern void replicant_backfill_record_chunk(ReplicantChunk *chunk, int delivered);

/* Records that the first markers of backfills ids[0..n) were delivered on their own (own transaction). */
extern void replicant_backfill_record_first_sent(const int64 *ids, int n);

#endif /* REPLICANT_BACKFILL_PROGRESS_H */
