/*
 * snapshot_plan.h
 *		The plan of an initial snapshot in replicant's catalog: written by
 *		the pipeline worker, its shards claimed and their progress recorded
 *		by shard workers.  For snapshot.c and snapshot_shard.c.
 */
#ifndef REPLICANT_SNAPSHOT_PLAN_H
#define REPLICANT_SNAPSHOT_PLAN_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"

#include "pipeline.h"

/*
 * Blocks read per transaction, and windows per shard claimed by one worker:
 * one, so that parallel workers end close together, since the last shard
 * claimed is all that one worker may still read while the others idle
 * (2 workers on bench/'s 2M-row table ended 37-100 ms apart with shards of
 * two windows, 9-38 ms with one).  The last shard is open-ended and read
 * window by window to the table's end.
 */
#define REPLICANT_WINDOW_BLOCKS 1024
#define REPLICANT_SHARD_WINDOWS 1

/* One claimed shard. */
typedef struct ReplicantShard
{
	int64 backfill_id;
	int32 shard;
	Oid relid;
	char relname[NAMEDATALEN]; /* for messages, "" if dropped */
	Oid relfilenode;
	int64 next_block;
	int64 hi_block;        /* -1: to the end of the table */
	XLogRecPtr claimed_at; /* the WAL insert position after the claim's update */
} ReplicantShard;

/*
 * Column col (from 1) of row of the last SPI result, a bigint; -1 when
 * NULL.
 */
extern int64 replicant_snapshot_plan_int8(int row, int col);

/*
 * Runs a query on the pipeline's ($1) snapshot plan; $2 is the state of a
 * table that stopped being published, which is as finished as 'done'.
 * Needs SPI, as replicant's catalog access.
 */
extern void replicant_snapshot_plan_read(const char *sql, int32 pipeline_id, bool read_only);

/*
 * Planning (pipeline worker): the tables not planned yet, with replace all
 * of them anew; whether the publications deliver a table the plan lacks, as
 * the transaction's snapshot sees them; the planned tables.
 */
extern void replicant_snapshot_plan(ReplicantPipeline *pipeline, bool replace);
extern bool replicant_snapshot_unplanned_tables(ReplicantPipeline *pipeline,
												const List *planned);
extern List *replicant_snapshot_planned_relids(ReplicantPipeline *pipeline);

/*
 * Shard workers: claim an unfinished shard of the pipeline (false when none
 * is left); record that its blocks before next_block are delivered; start
 * its table's shards over after a rewrite; skip a table no longer
 * published.  Each in a catalog access of its own.
 */
extern bool replicant_snapshot_claim_shard(int32 pipeline_id, ReplicantShard *shard);
extern void replicant_snapshot_record_progress(ReplicantShard *shard, bool done, int64 rows);
extern void replicant_snapshot_restart_table(ReplicantShard *shard, Oid relfilenode);
extern void replicant_snapshot_skip_table(ReplicantShard *shard);

#endif /* REPLICANT_SNAPSHOT_PLAN_H */
