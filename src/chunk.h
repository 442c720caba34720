/*
 * chunk.h
 *		A backfill chunk between its watermarks: the rows read, matched
 *		against the stream's changes by key, and the watermark messages
 *		that open and complete it.  Knows nothing of how the rows were read
 *		(backfill.c) or where the changes come from (output_plugin.c).
 */
#ifndef REPLICANT_CHUNK_H
#define REPLICANT_CHUNK_H

#include "access/xlogdefs.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/hsearch.h"
#include "utils/snapshot.h"

#include "change.h"

/* Rows per keyset chunk, and about as many per bitmap range. */
#define REPLICANT_CHUNK_ROWS 2000

/* Prefix of the watermark messages written into WAL; never delivered. */
#define REPLICANT_WATERMARK_PREFIX "replicant.watermark"

struct ReplicantBackfill;
struct ReplicantFormat;

/* A row read into a chunk. */
typedef struct ReplicantChunkRow
{
	char *key;      /* the key object's JSON */
	char **changes; /* the "read" change, as each of the chunk's formats renders it */
	bool dropped;   /* the stream changed this key meanwhile */
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
	struct ReplicantBackfill *backfill;
	Oid relid;                   /* the table read */
	char token[64];              /* tells this chunk's watermarks from old ones */
	ReplicantRelation *relation; /* NULL if dropped */
	bool open;
	bool complete;
	bool last; /* no rows beyond this chunk */
	ReplicantChunkRow *rows;
	int nrows;
	const struct ReplicantFormat **formats; /* each row's renderings, in this order */
	int nformats;
	HTAB *by_key; /* key hash -> list of row indexes */
	List *next_cursor_key;
	int64 next_block;
	int64 position;           /* where the chunk starts, for webhook-ids */
	Oid relfilenode;          /* the file it reads by blocks (ctid), or 0 */
	XLogRecPtr low_watermark; /* the end of its low watermark's record */
	TransactionId snap_xmin;  /* the chunk's snapshot */
	TransactionId snap_xmax;
	TransactionId *snap_xip;
	int snap_xcnt;
	MemoryContext context;
} ReplicantChunk;

/*
 * An empty chunk of relid in a memory context of its own under parent,
 * sized for about expected_rows rows.  The caller sets token (and what
 * else it needs) before writing the low watermark.
 */
extern ReplicantChunk *replicant_chunk_create(MemoryContext parent, Oid relid,
											  long expected_rows);

/* Frees the chunk and everything it holds. */
extern void replicant_chunk_free(ReplicantChunk *chunk);

/* Keeps the transactions snapshot sees, to tell which changes it missed. */
extern void replicant_chunk_set_snapshot(ReplicantChunk *chunk, Snapshot snapshot);

/*
 * Adds a row read, with its key object's JSON and its "read" change as
 * each of the chunk's formats rendered it (changes[i] in formats[i]).
 */
extern void replicant_chunk_add_row(ReplicantChunk *chunk, const char *key, int keylen,
									const StringInfoData *changes);

/* The row's "read" change as format renders it: one of the chunk's formats. */
extern const char *replicant_chunk_row_change(const ReplicantChunk *chunk,
											  const ReplicantChunkRow *row,
											  const struct ReplicantFormat *format);

/*
 * Writes the chunk's low or high watermark (a non-transactional logical
 * decoding message) and returns its position; the caller flushes WAL.
 */
extern XLogRecPtr replicant_chunk_write_watermark(ReplicantChunk *chunk, bool high);

/*
 * Looks at a decoded non-transactional message: the chunk's low watermark
 * opens it, its high watermark completes it.  chunk may be NULL.
 */
extern void replicant_chunk_note_message(ReplicantChunk *chunk, const char *prefix,
										 const char *message, Size size);

/*
 * Whether a delivered change of transaction xid to table relid collides
 * with the chunk (which may be NULL): it comes inside the chunk's window,
 * or the chunk's snapshot did not see its transaction (commit record below
 * the low watermark, proc array not updated yet when the snapshot was
 * taken).
 */
extern bool replicant_chunk_collides(ReplicantChunk *chunk, Oid relid, TransactionId xid);

/*
 * Marks the chunk's rows with this key JSON as superseded by the stream.
 * Returns the rows it marked (ReplicantChunkRow *, living as long as the
 * chunk), for a caller that delivers them before the change.
 */
extern List *replicant_chunk_drop_key(ReplicantChunk *chunk, const char *key, int len);

/* Drops every row (a TRUNCATE of the table inside the window). */
extern void replicant_chunk_drop_all(ReplicantChunk *chunk);

/* Whether a row of the chunk is left to deliver (not dropped). */
extern bool replicant_chunk_has_rows(ReplicantChunk *chunk);

/*
 * Appends the chunk's remaining rows from *next on to out as
 * comma-separated changes in format (one of the chunk's), stopping before
 * max_bytes unless out holds no row yet; advances *next and returns how
 * many rows it appended.
 */
extern int replicant_chunk_rows(ReplicantChunk *chunk, const struct ReplicantFormat *format,
								int *next, StringInfo out, int max_bytes);

#endif /* REPLICANT_CHUNK_H */
