/*
 * backfill.h
 *		Incremental backfills beside the stream: watermark-bracketed chunks
 *		(the DBLog method), the read-method router and durable progress.
 */
#ifndef REPLICANT_BACKFILL_H
#define REPLICANT_BACKFILL_H

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/hsearch.h"

#include "pipeline.h"

/* Prefix of the watermark messages written into WAL; never delivered. */
#define REPLICANT_WATERMARK_PREFIX "replicant.watermark"

/* One incremental backfill being read by the pipeline worker. */
typedef struct ReplicantBackfill
{
	int64		id;
	Oid			relid;
	char	   *mode;			/* keyset | bitmap | ctid */
	Oid			relfilenode;	/* stamped at plan time (ctid) */
	List	   *cursor_key;		/* keyset: last key delivered, as text */
	int64		next_block;		/* ctid: first block not yet delivered */
	List	   *bounds;			/* bitmap: range boundaries, as text */
	int32		next_range;		/* bitmap: first range not yet delivered */
	bool		first_sent;
	int64		chunks;			/* chunks read by this process */
} ReplicantBackfill;

/* A row read into a chunk. */
typedef struct ReplicantChunkRow
{
	char	   *key;			/* the key object's JSON */
	char	   *change;			/* the whole "read" change */
	bool		dropped;		/* the stream changed this key meanwhile */
} ReplicantChunkRow;

/*
 * A chunk between its watermarks.  The output plugin opens it at the low
 * watermark, drops every row whose key a delivered change touches while it
 * is open, and completes it at the high watermark, where the worker
 * delivers what is left.
 */
typedef struct ReplicantChunk
{
	ReplicantBackfill *backfill;
	char		token[64];		/* tells this chunk's watermarks from old ones */
	char	   *names;			/* "schema":...,"table":..., NULL if dropped */
	bool		open;
	bool		complete;
	bool		last;			/* no rows beyond this chunk */
	ReplicantChunkRow *rows;
	int			nrows;
	HTAB	   *by_key;			/* key hash -> list of row indexes */
	List	   *next_cursor_key;
	int64		next_block;
	MemoryContext context;
} ReplicantChunk;

/* Router: resolves 'auto' from the table's keys and pg_stats (needs SPI). */
extern char *replicant_backfill_choose_mode(Oid relid, const char *requested);

/* Plans a backfill of relid for the pipeline (needs SPI); returns its id. */
extern int64 replicant_backfill_plan(int32 pipeline_id, Oid owner, Oid relid,
									 const char *requested_mode);

/* The oldest unfinished incremental backfill, or NULL (own transaction). */
extern ReplicantBackfill *replicant_backfill_next(int32 pipeline_id);

/*
 * Writes the low watermark, reads the next chunk under a fresh snapshot,
 * writes the high watermark and flushes WAL up to it.  Returns NULL when
 * the backfill has nothing left (it is then marked done).
 */
extern ReplicantChunk *replicant_backfill_read_chunk(ReplicantPipeline *pipeline,
													 ReplicantBackfill *backfill);

/* Marks the chunk's rows with this key JSON as superseded by the stream. */
extern void replicant_chunk_drop_key(ReplicantChunk *chunk, const char *key, int len);

/* Drops every row (a TRUNCATE of the table inside the window). */
extern void replicant_chunk_drop_all(ReplicantChunk *chunk);

/*
 * Appends the chunk's remaining rows to out as comma-separated changes;
 * returns how many.
 */
extern int	replicant_chunk_rows(ReplicantChunk *chunk, StringInfo out);

/* Records that the chunk was delivered (own transaction). */
extern void replicant_backfill_record_chunk(ReplicantChunk *chunk, int delivered);

#endif							/* REPLICANT_BACKFILL_H */
