/*
 * backfill.h
 *		Incremental backfills beside the stream: watermark-bracketed chunks
 *		(the DBLog method), the read-method router and durable progress.
 */
#ifndef REPLICANT_BACKFILL_H
#define REPLICANT_BACKFILL_H

#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/hsearch.h"
#include "utils/rel.h"

#include "batch.h"
#include "change.h"
#include "pipeline.h"

/* Prefix of the watermark messages written into WAL; never delivered. */
#define REPLICANT_WATERMARK_PREFIX "replicant.watermark"

/* One incremental backfill being read by the pipeline worker. */
typedef struct ReplicantBackfill
{
	int64		id;
	Oid			relid;
	char		relname[NAMEDATALEN];	/* for messages */
	char	   *mode;			/* keyset | bitmap | ctid */
	Oid			relfilenode;	/* stamped at plan time (ctid) */
	List	   *cursor_key;		/* keyset: last key delivered, as text */
	int64		next_block;		/* ctid: first block not yet delivered */
	List	   *bounds;			/* bitmap: range boundaries, as text */
	int32		next_range;		/* bitmap: first range not yet delivered */
	bool		first_sent;
	int64		rows_done;		/* rows delivered so far */
	int64		chunks;			/* chunks read by this process */
	TimestampTz retry_at;		/* read no chunk before */
	bool		deferred;		/* the last chunk waited for a commit */
} ReplicantBackfill;

/* A row read into a chunk. */
typedef struct ReplicantChunkRow
{
	char	   *key;			/* the key object's JSON */
	char	   *change;			/* the "read" change, as the format renders it */
	bool		dropped;		/* the stream changed this key meanwhile */
} ReplicantChunkRow;

/*
 * A chunk between its watermarks.  The output plugin opens it at the low
 * watermark and completes it at the high watermark, where the worker
 * delivers what is left.  A delivered change collides with the chunk when
 * it comes inside the window or when the chunk's snapshot did not see its
 * transaction; it drops the chunk's rows with its key (or, for an update
 * that left TOASTed columns unchanged, puts the read row before itself).
 */
typedef struct ReplicantChunk
{
	ReplicantBackfill *backfill;
	char		token[64];		/* tells this chunk's watermarks from old ones */
	ReplicantRelation *relation;	/* NULL if dropped */
	bool		open;
	bool		complete;
	bool		last;			/* no rows beyond this chunk */
	ReplicantChunkRow *rows;
	int			nrows;
	HTAB	   *by_key;			/* key hash -> list of row indexes */
	List	   *next_cursor_key;
	int64		next_block;
	int64		position;		/* where the chunk starts, for webhook-ids */
	TransactionId snap_xmin;	/* the chunk's snapshot */
	TransactionId snap_xmax;
	TransactionId *snap_xip;
	int			snap_xcnt;
	MemoryContext context;
} ReplicantChunk;

/* Router: resolves 'auto' from the table's keys and pg_stats (needs SPI). */
extern char *replicant_backfill_choose_mode(Oid relid, const char *requested);

/*
 * Rows of rel as the planner estimates them: reltuples, or for a table
 * never vacuumed or analysed, its size over the estimated row width.
 */
extern int64 replicant_backfill_estimate_rows(Relation rel);

/* Plans a backfill of relid for the pipeline (needs SPI); returns its id. */
extern int64 replicant_backfill_plan(int32 pipeline_id, Oid owner, Oid relid,
									 const char *requested_mode);

/* The oldest unfinished incremental backfill, or NULL (own transaction). */
extern ReplicantBackfill *replicant_backfill_next(int32 pipeline_id);

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

/* Whether the chunk's snapshot saw the committed transaction xid. */
extern bool replicant_chunk_sees(ReplicantChunk *chunk, TransactionId xid);

/*
 * Marks the chunk's rows with this key JSON as superseded by the stream;
 * with keep_in, first adds each of them to that batch as it was read.
 */
extern void replicant_chunk_drop_key(ReplicantChunk *chunk, const char *key, int len,
									 ReplicantBatch *keep_in);

/* Drops every row (a TRUNCATE of the table inside the window). */
extern void replicant_chunk_drop_all(ReplicantChunk *chunk);

/*
 * Appends the chunk's remaining rows from *next on to out as
 * comma-separated changes, stopping before max_bytes unless out holds no
 * row yet; advances *next and returns how many rows it appended.
 */
extern int	replicant_chunk_rows(ReplicantChunk *chunk, int *next, StringInfo out,
								 int max_bytes);

/* Records that the chunk was delivered (own transaction). */
extern void replicant_backfill_record_chunk(ReplicantChunk *chunk, int delivered);

#endif							/* REPLICANT_BACKFILL_H */
