/*
 * checkpoint_floor.h
 *		The floor: the lowest committed checkpoint of the destinations that
 *		hold a pipeline's slot (docs/destinations-design.md §2.3).  The slot
 *		is never confirmed past it, and what is kept "until the checkpoint
 *		passes it" is kept until the floor does.
 */
#ifndef REPLICANT_CHECKPOINT_FLOOR_H
#define REPLICANT_CHECKPOINT_FLOOR_H

#include "access/xlogdefs.h"

/*
 * The floor of the committed checkpoint ends of n holding destinations:
 * the lowest, or invalid while one has none.
 */
extern XLogRecPtr replicant_checkpoint_floor_of(const XLogRecPtr *committed_ends, int n);

/*
 * The floor in the catalog, for statements with the pipeline's id as $1: a
 * subquery of one row (commit_lsn, end_lsn, updated_at), NULLs while a
 * destination has no checkpoint; under 0.2.0's objects, the pipeline's
 * own row.  Inside a transaction.
 */
extern const char *replicant_checkpoint_floor_sql(void);

#endif /* REPLICANT_CHECKPOINT_FLOOR_H */
