/*
 * api_xact.h
 *		What a management function leaves to its transaction's end.
 */
#ifndef REPLICANT_API_XACT_H
#define REPLICANT_API_XACT_H

#include "access/xlogdefs.h"

/*
 * Creates a new pipeline's logical slot, ephemeral until the caller's
 * transaction commits (dropped on error); returns its consistent point.
 */
extern XLogRecPtr replicant_api_xact_create_slot(const char *slot_name, bool failover);

/*
 * Asks the pipeline's worker to stop where it leaves nothing to re-deliver
 * and waits until it has exited; an abort makes the launcher start it again.
 */
extern void replicant_api_xact_stop_worker_and_wait(int32 pipeline_id);

/*
 * Stops the pipeline's worker so that its slot can be dropped; the
 * pipeline stays marked dropping until the transaction ends, and may run
 * again if it aborts.
 */
extern void replicant_api_xact_stop_worker_for_drop(int32 pipeline_id);

/*
 * The halt of the pipeline's destination destination_id (0: of each of its
 * destinations) is cleared in shared memory once the caller commits.
 */
extern void replicant_api_xact_resume_at_commit(int32 pipeline_id, int32 destination_id);

#endif /* REPLICANT_API_XACT_H */
