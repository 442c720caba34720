/*
 * checkpoint_floor.c
 *		The floor of a pipeline's checkpoints, in one place: for the worker
 *		(checkpoint.c, from what it committed) and for the catalog (the
 *		loaded pipeline, the pruning of epochs and waivers).
 *
 * Every destination holds the slot (disabled and halted ones too, as a
 * disabled or halted pipeline's slot keeps its WAL) until it gives its hold
 * up past its max_retained_wal (replicant.destinations.slot_released,
 * budget.c); a destination without a checkpoint yet holds it from the
 * slot's start, so the floor is then none.  The view replicant.status
 * repeats the catalog's rule for its checkpoint_lsn: a view cannot call a
 * private function as its reader.
 */
#include "postgres.h"

#include "catalog.h"
#include "checkpoint_floor.h"

XLogRecPtr
replicant_checkpoint_floor_of(const XLogRecPtr *committed_ends, int n)
{
	XLogRecPtr floor = InvalidXLogRecPtr;
	int i;

	for (i = 0; i < n; i++)
	{
		if (XLogRecPtrIsInvalid(committed_ends[i]))
			return InvalidXLogRecPtr;
		if (i == 0 || committed_ends[i] < floor)
			floor = committed_ends[i];
	}
	return floor;
}

const char *
replicant_checkpoint_floor_sql(void)
{
	if (!replicant_destinations_exist())
		return "(SELECT c.commit_lsn, c.end_lsn, c.updated_at FROM replicant.checkpoints c"
			   "  WHERE c.pipeline_id OPERATOR(pg_catalog.=) $1)";
	/* commit_lsn and end_lsn order the rows alike: commits do not overlap. */
	return "(SELECT c.commit_lsn, c.end_lsn, c.updated_at FROM replicant.destinations d"
		   "   LEFT JOIN replicant.checkpoints c ON c.destination_id OPERATOR(pg_catalog.=) d.id"
		   "  WHERE d.pipeline_id OPERATOR(pg_catalog.=) $1 AND NOT d.slot_released"
		   "  ORDER BY c.end_lsn NULLS FIRST LIMIT 1)";
}
