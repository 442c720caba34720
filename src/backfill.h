/*
 * backfill.h
 *		Incremental backfills beside the stream: watermark-bracketed chunks
 *		(the DBLog method), the read-method router and durable progress.
 */
#ifndef REPLICANT_BACKFILL_H
#define REPLICANT_BACKFILL_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "utils/rel.h"

#include "change.h"
#include "chunk.h"
#include "pipeline.h"

/* One incremental backfill being read by the pipeline worker. */
typedef struct ReplicantBackfill
{
	int64 id;
	int32 destination_id; /* the one it is for; 0: every destination */
	Oid relid;
	char relname[NAMEDATALEN]; /* for messages */
	char *mode;                /* keyset | bitmap | ctid */
	Oid relfilenode;           /* stamped at plan time (ctid) */
	List *cursor_key;          /* keyset: last key delivered, as text */
	int64 next_block;          /* ctid: first block not yet delivered */
	List *bounds;              /* bitmap: range boundaries, as text */
	int32 next_range;          /* bitmap: first range not yet delivered */
	bool first_sent;
	int64 rows_done;      /* rows delivered so far */
	int64 chunks;         /* chunks read by this process */
	TimestampTz retry_at; /* read no chunk before */
	bool deferred;        /* the last chunk waited for a commit */
	int filter_changes;   /* tries in a row that met a publication change */
	bool skipped;         /* the table is no longer published: read no more */
} ReplicantBackfill;

/*
 * Writes the low watermark, reads the next chunk under a snapshot taken
 * after it, writes the high watermark and flushes WAL up to it.  Returns
 * NULL without reading when the snapshot misses a committed transaction
 * (backfill->retry_at says when to try again), or with *halt_reason set
 * when the owner may not read the whole table.
 */
extern ReplicantChunk *replicant_backfill_read_chunk(ReplicantPipeline *pipeline,
													 ReplicantBackfill *backfill,
													 char **halt_reason);

/*
 * Moves the backfill past the chunk, delivered (delivered rows of it): its
 * cursor, block or range, rows done and whether its first marker went out.
 * In memory; backfill_progress.c records it.
 */
extern void replicant_backfill_advance(ReplicantChunk *chunk, int delivered);

#endif /* REPLICANT_BACKFILL_H */
