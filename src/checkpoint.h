/*
 * checkpoint.h
 *		The delivery checkpoint: the last commit the sink acknowledged that
 *		is committed to replicant.checkpoints.
 */
#ifndef REPLICANT_CHECKPOINT_H
#define REPLICANT_CHECKPOINT_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

#include "destination.h"
#include "pipeline.h"
#include "shmem.h"

/*
 * Takes the committed checkpoints of pipeline's destinations as loaded;
 * once per process, before anything is acknowledged.
 */
extern void replicant_checkpoint_track(const ReplicantPipeline *pipeline);

/*
 * Records that destination's sink acknowledged every transaction up to commit_lsn
 * (whose commit record ends at end_lsn), at now.  Commits the checkpoint
 * row at once when replicant.checkpoint_interval is 0 or has passed since
 * the last commit, when the acknowledged transactions brought a table shape
 * not saved yet, or when await_delivered() is waiting; otherwise it stays
 * pending until replicant_checkpoint_commit_pending().  A commit writes
 * every destination's pending row.  Returns true when it committed.  Must
 * be called outside a transaction.
 */
extern bool replicant_checkpoint_acknowledged(ReplicantPipelineSlot *slot,
											  const ReplicantDestination *destination,
											  XLogRecPtr commit_lsn, XLogRecPtr end_lsn,
											  TimestampTz now);

/*
 * Commits the pending checkpoint, if there is one.  Returns true when it
 * committed.  Must be called outside a transaction.
 */
extern bool replicant_checkpoint_commit_pending(void);

/* Whether an acknowledged request of any destination waits for its checkpoint. */
extern bool replicant_checkpoint_is_pending(void);

/*
 * Milliseconds until the pending checkpoint is due (0: due now, or
 * await_delivered() is waiting for it), or -1 when none is pending.
 */
extern long replicant_checkpoint_due_in(ReplicantPipelineSlot *slot, TimestampTz now);

/*
 * The floor (checkpoint_floor.h) of what this process tracks: what the
 * slot may be confirmed to, after the commit that wrote it.
 */
extern XLogRecPtr replicant_checkpoint_floor(void);

/* Where destination's committed checkpoint ends, in this process; invalid: none. */
extern XLogRecPtr replicant_checkpoint_committed_end(const ReplicantDestination *destination);

/*
 * Flushes the WAL of everything this process committed, if not flushed yet.
 * The streaming worker commits asynchronously and calls it before every
 * request, so a crash loses no checkpoint older than the last one.
 */
extern void replicant_checkpoint_make_durable(void);

#endif /* REPLICANT_CHECKPOINT_H */
