/*
 * chunk.c
 *		Backfill chunks: rows by key, their watermarks, and the matching of
 *		the stream's changes against them (see backfill.c for the method).
 *
 * Rules kept with other files: docs/internals.md §2 (the watermark protocol).
 */
#include "postgres.h"

#include "access/transam.h"
#include "common/hashfn.h"
#include "utils/memutils.h"

#include "chunk.h"
#include "compat.h"
#include "fault.h"

typedef struct KeyEntry
{
	uint32 hash; /* hash key */
	List *rows;  /* of int: indexes into chunk->rows */
} KeyEntry;

ReplicantChunk *
replicant_chunk_create(MemoryContext parent, Oid relid, long expected_rows)
{
	ReplicantChunk *chunk = MemoryContextAllocZero(parent, sizeof(ReplicantChunk));
	HASHCTL ctl;

	chunk->context = AllocSetContextCreate(parent, "replicant backfill chunk",
										   ALLOCSET_DEFAULT_SIZES);
	chunk->relid = relid;
	ctl.keysize = sizeof(uint32);
	ctl.entrysize = sizeof(KeyEntry);
	ctl.hcxt = chunk->context;
	chunk->by_key = hash_create("replicant chunk keys", expected_rows, &ctl,
								HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	return chunk;
}

void
replicant_chunk_free(ReplicantChunk *chunk)
{
	MemoryContextDelete(chunk->context);
	pfree(chunk);
}

void
replicant_chunk_set_snapshot(ReplicantChunk *chunk, Snapshot snapshot)
{
	chunk->snap_xmin = snapshot->xmin;
	chunk->snap_xmax = snapshot->xmax;
	chunk->snap_xcnt = snapshot->xcnt;
	chunk->snap_xip = MemoryContextAlloc(chunk->context,
										 sizeof(TransactionId) * Max(1, snapshot->xcnt));
	memcpy(chunk->snap_xip, snapshot->xip, sizeof(TransactionId) * snapshot->xcnt);
}

static uint32
key_hash(const char *key, int len)
{
	return hash_bytes((const unsigned char *) key, len);
}

void
replicant_chunk_add_row(ReplicantChunk *chunk, const char *key, int keylen,
						const StringInfoData *changes)
{
	KeyEntry *entry;
	bool found;
	uint32 h = key_hash(key, keylen);
	MemoryContext old = MemoryContextSwitchTo(chunk->context);
	ReplicantChunkRow *row;

	if (chunk->nrows % 256 == 0)
		chunk->rows = chunk->rows ?
						  repalloc(chunk->rows, sizeof(ReplicantChunkRow) * (chunk->nrows + 256)) :
						  palloc(sizeof(ReplicantChunkRow) * 256);
	row = &chunk->rows[chunk->nrows];
	row->key = pnstrdup(key, keylen);
	row->changes = palloc(sizeof(char *) * chunk->nformats);
	for (int i = 0; i < chunk->nformats; i++)
		row->changes[i] = pnstrdup(changes[i].data, changes[i].len);
	row->dropped = false;
	entry = hash_search(chunk->by_key, &h, HASH_ENTER, &found);
	if (!found)
		entry->rows = NIL;
	entry->rows = lappend_int(entry->rows, chunk->nrows);
	chunk->nrows++;
	MemoryContextSwitchTo(old);
}

/* The index of format among the chunk's; a format it lacks is a bug. */
static int
format_index(const ReplicantChunk *chunk, const struct ReplicantFormat *format)
{
	for (int i = 0; i < chunk->nformats; i++)
		if (chunk->formats[i] == format)
			return i;
	elog(ERROR, "a backfill chunk holds no rows in the format asked for");
}

const char *
replicant_chunk_row_change(const ReplicantChunk *chunk, const ReplicantChunkRow *row,
						   const struct ReplicantFormat *format)
{
	return row->changes[format_index(chunk, format)];
}

XLogRecPtr
replicant_chunk_write_watermark(ReplicantChunk *chunk, bool high)
{
	char *message = psprintf("%s:%s", high ? "high" : "low", chunk->token);

	return REPLICANT_LOG_LOGICAL_MESSAGE(REPLICANT_WATERMARK_PREFIX, message, strlen(message), false);
}

void
replicant_chunk_note_message(ReplicantChunk *chunk, const char *prefix,
							 const char *message, Size size)
{
	size_t token_len;

	if (strcmp(prefix, REPLICANT_WATERMARK_PREFIX) != 0 || chunk == NULL)
		return;
	token_len = strlen(chunk->token);
	if (size == 4 + token_len && memcmp(message, "low:", 4) == 0 &&
		memcmp(message + 4, chunk->token, token_len) == 0)
		chunk->open = true;
	else if (size == 5 + token_len && memcmp(message, "high:", 5) == 0 &&
			 memcmp(message + 5, chunk->token, token_len) == 0)
		chunk->complete = true;
}

/* Whether the chunk's snapshot saw the committed transaction xid. */
static bool
chunk_sees(ReplicantChunk *chunk, TransactionId xid)
{
	int i;

	if (TransactionIdPrecedes(xid, chunk->snap_xmin))
		return true;
	if (!TransactionIdPrecedes(xid, chunk->snap_xmax))
		return false;
	for (i = 0; i < chunk->snap_xcnt; i++)
		if (TransactionIdEquals(xid, chunk->snap_xip[i]))
			return false;
	return true;
}

bool
replicant_chunk_collides(ReplicantChunk *chunk, Oid relid, TransactionId xid)
{
	if (chunk == NULL || chunk->complete || chunk->relid != relid)
		return false;
	if (replicant_mutant("no_collision"))
		return false;
	return chunk->open || !chunk_sees(chunk, xid);
}

List *
replicant_chunk_drop_key(ReplicantChunk *chunk, const char *key, int len)
{
	uint32 h = key_hash(key, len);
	KeyEntry *entry = hash_search(chunk->by_key, &h, HASH_FIND, NULL);
	List *dropped = NIL;
	ListCell *lc;

	if (entry == NULL)
		return NIL;
	foreach(lc, entry->rows)
	{
		ReplicantChunkRow *row = &chunk->rows[lfirst_int(lc)];

		if (row->dropped || strlen(row->key) != len || memcmp(row->key, key, len) != 0)
			continue;
		dropped = lappend(dropped, row);
		row->dropped = true;
	}
	return dropped;
}

void
replicant_chunk_drop_all(ReplicantChunk *chunk)
{
	int i;

	for (i = 0; i < chunk->nrows; i++)
		chunk->rows[i].dropped = true;
}

bool
replicant_chunk_has_rows(ReplicantChunk *chunk)
{
	int i;

	for (i = 0; i < chunk->nrows; i++)
		if (!chunk->rows[i].dropped)
			return true;
	return false;
}

int
replicant_chunk_rows(ReplicantChunk *chunk, const struct ReplicantFormat *format, int *next,
					 StringInfo out, int max_bytes)
{
	int f = format_index(chunk, format);
	int n = 0;

	for (; *next < chunk->nrows; (*next)++)
	{
		ReplicantChunkRow *row = &chunk->rows[*next];
		size_t len;

		if (row->dropped)
			continue;
		len = strlen(row->changes[f]);
		if (n > 0 && out->len + len + 3 > max_bytes)
			break;
		if (n++ > 0)
			appendStringInfoChar(out, ',');
		appendBinaryStringInfo(out, row->changes[f], len);
	}
	return n;
}
