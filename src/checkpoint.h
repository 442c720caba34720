/*
 * checkpoint.h
 *		The delivery checkpoint: the last commit the sink acknowledged.
 */
#ifndef REPLICANT_CHECKPOINT_H
#define REPLICANT_CHECKPOINT_H

#include "access/xlogdefs.h"

/*
 * Commits, in its own short transaction, that the sink acknowledged every
 * transaction up to commit_lsn (whose commit record ends at end_lsn).
 * Must be called outside a transaction.  The streaming worker commits
 * asynchronously: replicant_checkpoint_make_durable() runs before every
 * request, so a crash re-delivers at most the one batch acknowledged last.
 */
extern void replicant_checkpoint_commit(int32 pipeline_id, XLogRecPtr commit_lsn,
										XLogRecPtr end_lsn);

/* Flushes the WAL of everything this process committed, if not flushed yet. */
extern void replicant_checkpoint_make_durable(void);

#endif /* REPLICANT_CHECKPOINT_H */
