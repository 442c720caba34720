/*
 * snapshot_shard.h
 *		A snapshot's shard workers, as the pipeline worker starts them
 *		(snapshot.c); and the snapshot batches both send.
 */
#ifndef REPLICANT_SNAPSHOT_SHARD_H
#define REPLICANT_SNAPSHOT_SHARD_H

#include "lib/stringinfo.h"

#include "change.h"
#include "format.h"
#include "pipeline.h"
#include "shmem.h"
#include "transport.h"

/* A shard worker's bgw_extra. */
typedef struct ReplicantShardArgs
{
	Oid dboid;
	Oid owner;
	int32 pipeline_id;
	int32 slot_index;
	uint32 generation;
	int32 worker; /* its number, < REPLICANT_MAX_SNAPSHOT_WORKERS */
	char snapshot_name[64];
} ReplicantShardArgs;

/*
 * Starts a snapshot body of relation in out, a marker when first or last;
 * resync: what a resync's markers tell (format.h), or NULL.
 */
extern void replicant_snapshot_start_body(StringInfo out, ReplicantPipeline *pipeline,
										  const ReplicantRelation *relation,
										  int64 backfill_id, bool first, bool last,
										  const ReplicantResync *resync);

/*
 * Halts, naming relation, on anything but a 2xx; counts a delivered body
 * (in a shard worker, in its window's progress too).
 */
extern void replicant_snapshot_note_answer(ReplicantPipelineSlot *slot,
										   ReplicantPipeline *pipeline,
										   const ReplicantSinkResult *result, int64 nrows,
										   int bytes, const ReplicantRelation *relation);

PGDLLEXPORT void replicant_shard_main(Datum main_arg);

#endif /* REPLICANT_SNAPSHOT_SHARD_H */
