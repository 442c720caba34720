/*
 * backfill.c
 *		Incremental backfills beside the live stream (the DBLog method).
 *
 * The pipeline worker reads a table chunk by chunk while it keeps
 * streaming.  Each chunk is bracketed by two non-transactional logical
 * decoding messages: the low watermark is written before the chunk's
 * snapshot is taken, the high one after the chunk was read.  When decoding
 * reaches the low watermark the chunk opens; every delivered change to the
 * table between the two watermarks drops the chunk row with the same key
 * (the stream's version is newer or as new); at the high watermark the rest
 * of the chunk is delivered, in stream order, so a stale read never
 * overwrites a newer change at the sink.  Progress is recorded after every
 * delivered chunk, so a crash resumes from the last one.
 *
 * Read methods, chosen when the backfill is planned and never changed:
 * keyset (ORDER BY key, the last key as cursor), bitmap (key sub-ranges
 * without ORDER BY, boundaries computed at plan time) and ctid (bounded block
 * windows, a TID Range Scan; the only method for tables without a key).  A
 * ctid cursor is stamped with the table's relfilenode and starts over when
 * VACUUM FULL, CLUSTER or TRUNCATE rewrote the table.
 */
#include "postgres.h"

#include <math.h>

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type_d.h"
#include "common/hashfn.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "replication/message.h"
#include "storage/bufmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "backfill.h"
#include "compat.h"
#include "encoder.h"
#include "publication.h"
#include "snapshot.h"

/* Rows per keyset chunk; blocks per ctid chunk; rows per bitmap range. */
#define CHUNK_ROWS 2000
#define CHUNK_BLOCKS 32

/* |correlation| of the leading key column from which keyset reads in order. */
#define KEYSET_CORRELATION 0.8

typedef struct KeyEntry
{
	uint32		hash;			/* hash key */
	List	   *rows;			/* of int: indexes into chunk->rows */
} KeyEntry;

/* The key columns' names, in attnum order, for queries. */
static List *
key_column_names(Relation rel, Bitmapset *key_columns)
{
	List	   *names = NIL;
	int			attnum = -1;

	while ((attnum = bms_next_member(key_columns, attnum)) >= 0)
		names = lappend(names, pstrdup(NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname)));
	return names;
}

char *
replicant_backfill_choose_mode(Oid relid, const char *requested)
{
	Relation	rel = table_open(relid, AccessShareLock);
	Bitmapset  *key_columns;
	bool		whole_row;
	bool		identity_full;
	char	   *mode;

	replicant_publication_key(rel, &key_columns, &whole_row, &identity_full);
	if (strcmp(requested, "ctid") == 0)
		mode = "ctid";
	else if (key_columns == NULL)
	{
		if (strcmp(requested, "auto") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("table \"%s\" has no key, so it can only be read with mode \"ctid\"",
							RelationGetRelationName(rel))));
		mode = "ctid";
	}
	else if (strcmp(requested, "bitmap") == 0 && bms_num_members(key_columns) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("mode \"bitmap\" needs a single-column key"),
				 errhint("Use mode \"keyset\" or \"ctid\" for table \"%s\".",
						 RelationGetRelationName(rel))));
	else if (strcmp(requested, "auto") != 0)
		mode = pstrdup(requested);
	else
	{
		/*
		 * Keyset walks the index in order, which reads the heap sequentially
		 * only when it is in key order.  Otherwise block windows read it
		 * sequentially whatever the key (bench/backfill_modes.sh on a
		 * random-UUID table: ctid 125,000, keyset 108,000, bitmap 92,000
		 * rows/s).
		 */
		Oid			argtypes[3] = {TEXTOID, TEXTOID, TEXTOID};
		Datum		args[3];
		bool		isnull = true;
		double		correlation = 0;
		List	   *keys = key_column_names(rel, key_columns);

		args[0] = CStringGetTextDatum(get_namespace_name(RelationGetNamespace(rel)));
		args[1] = CStringGetTextDatum(RelationGetRelationName(rel));
		args[2] = CStringGetTextDatum(linitial(keys));
		if (SPI_execute_with_args("SELECT correlation FROM pg_catalog.pg_stats"
								  " WHERE schemaname = $1 AND tablename = $2 AND attname = $3",
								  3, argtypes, args, NULL, true, 1) == SPI_OK_SELECT &&
			SPI_processed > 0)
		{
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

			if (!isnull)
				correlation = DatumGetFloat4(d);
		}
		if (!isnull && fabs(correlation) >= KEYSET_CORRELATION)
			mode = "keyset";
		else
			mode = "ctid";
	}
	table_close(rel, AccessShareLock);
	return mode;
}

int64
replicant_backfill_plan(int32 pipeline_id, Oid owner, Oid relid, const char *requested_mode)
{
	char	   *mode;
	Relation	rel;
	Datum		args[5];
	Datum		bounds = (Datum) 0;
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	int64		id;
	bool		isnull;
	Oid			saved_userid;
	int			saved_sec_context;

	/*
	 * Planning reads the table and runs its key type's comparison: as the
	 * pipeline's owner, as every read of the table is; only the plan's row
	 * is written with the caller's raised rights.
	 */
	GetUserIdAndSecContext(&saved_userid, &saved_sec_context);
	SetUserIdAndSecContext(owner, saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	mode = replicant_backfill_choose_mode(relid, requested_mode);
	rel = table_open(relid, AccessShareLock);

	args[0] = Int32GetDatum(pipeline_id);
	args[1] = ObjectIdGetDatum(relid);
	args[2] = CStringGetTextDatum(mode);
	args[3] = Int64GetDatum((int64) Max(rel->rd_rel->reltuples, 0));
	args[4] = ObjectIdGetDatum(rel->rd_rel->relfilenode);

	if (strcmp(mode, "bitmap") == 0)
	{
		/* Boundaries of sub-ranges of about CHUNK_ROWS rows each. */
		Bitmapset  *key_columns;
		bool		whole_row;
		bool		identity_full;
		const char *key;
		int64		ranges;
		StringInfoData sql;

		replicant_publication_key(rel, &key_columns, &whole_row, &identity_full);
		key = quote_identifier(linitial(key_column_names(rel, key_columns)));
		ranges = Max(1, DatumGetInt64(args[3]) / CHUNK_ROWS);
		initStringInfo(&sql);
		/* Sorted as the key's type: as text, 10 would come before 9. */
		appendStringInfo(&sql,
						 "SELECT array_agg(b::text ORDER BY b) FROM (SELECT DISTINCT b FROM unnest(("
						 "  SELECT percentile_disc(ARRAY(SELECT g::float8 / " INT64_FORMAT
						 "                              FROM generate_series(1, " INT64_FORMAT ") g))"
						 "         WITHIN GROUP (ORDER BY %s) FROM ONLY %s)) b) d",
						 ranges, ranges - 1, key,
						 quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
													RelationGetRelationName(rel)));
		if (SPI_execute(sql.data, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not plan bitmap ranges");
		bounds = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (isnull)
			bounds = PointerGetDatum(construct_empty_array(TEXTOID));
		bounds = PointerGetDatum(DatumGetArrayTypePCopy(bounds));
	}
	table_close(rel, AccessShareLock);
	SetUserIdAndSecContext(saved_userid, saved_sec_context);

	{
		Oid			types[6] = {INT4OID, OIDOID, TEXTOID, INT8OID, OIDOID, TEXTARRAYOID};
		Datum		values[6] = {args[0], args[1], args[2], args[3], args[4], bounds};

		nulls[5] = bounds ? ' ' : 'n';
		if (SPI_execute_with_args("INSERT INTO replicant.backfills"
								  " (pipeline_id, relid, kind, mode, rows_estimate, relfilenode, bounds)"
								  " VALUES ($1, $2, 'incremental', $3, $4, $5, $6) RETURNING id",
								  6, types, values, nulls, false, 1) != SPI_OK_INSERT_RETURNING)
			elog(ERROR, "could not plan the backfill");
	}
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	return id;
}

static List *
text_array_to_list(Datum d, bool isnull)
{
	Datum	   *elems;
	int			n;
	int			i;
	List	   *list = NIL;

	if (isnull)
		return NIL;
	deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	for (i = 0; i < n; i++)
		list = lappend(list, TextDatumGetCString(elems[i]));
	return list;
}

ReplicantBackfill *
replicant_backfill_next(int32 pipeline_id)
{
	ReplicantCatalogAccess access;
	Oid			argtypes[1] = {INT4OID};
	Datum		args[1] = {Int32GetDatum(pipeline_id)};
	ReplicantBackfill *b = NULL;
	MemoryContext caller = CurrentMemoryContext;

	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("SELECT id, relid, mode, relfilenode, cursor_key, next_block,"
							  "       bounds, next_range, first_sent"
							  "  FROM replicant.backfills"
							  " WHERE pipeline_id = $1 AND kind = 'incremental'"
							  "   AND state IN ('planned', 'running')"
							  " ORDER BY id LIMIT 1",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed > 0)
	{
		HeapTuple	t = SPI_tuptable->vals[0];
		TupleDesc	d = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		v;
		MemoryContext old = MemoryContextSwitchTo(caller);

		b = palloc0(sizeof(ReplicantBackfill));
		b->id = DatumGetInt64(SPI_getbinval(t, d, 1, &isnull));
		b->relid = DatumGetObjectId(SPI_getbinval(t, d, 2, &isnull));
		b->mode = TextDatumGetCString(SPI_getbinval(t, d, 3, &isnull));
		b->relfilenode = DatumGetObjectId(SPI_getbinval(t, d, 4, &isnull));
		v = SPI_getbinval(t, d, 5, &isnull);
		b->cursor_key = text_array_to_list(v, isnull);
		b->next_block = DatumGetInt64(SPI_getbinval(t, d, 6, &isnull));
		v = SPI_getbinval(t, d, 7, &isnull);
		b->bounds = text_array_to_list(v, isnull);
		b->next_range = DatumGetInt32(SPI_getbinval(t, d, 8, &isnull));
		b->first_sent = DatumGetBool(SPI_getbinval(t, d, 9, &isnull));
		MemoryContextSwitchTo(old);
	}
	replicant_catalog_end(&access);
	return b;
}

/* Builds the chunk's SELECT; parameters are the cursor's key values. */
static char *
chunk_query(ReplicantBackfill *b, Relation rel, List *keys, List *key_types,
			int64 nblocks, bool *last)
{
	StringInfoData sql;
	ListCell   *lc;
	ListCell   *lt;
	int			i;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT * FROM ONLY %s",
					 quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												RelationGetRelationName(rel)));
	*last = false;
	if (strcmp(b->mode, "ctid") == 0)
	{
		appendStringInfo(&sql, " WHERE ctid >= '(" INT64_FORMAT ",0)'::tid AND ctid < '(" INT64_FORMAT ",0)'::tid",
						 b->next_block, b->next_block + CHUNK_BLOCKS);
		*last = (b->next_block + CHUNK_BLOCKS >= nblocks);
	}
	else if (strcmp(b->mode, "keyset") == 0)
	{
		if (b->cursor_key != NIL)
		{
			appendStringInfoString(&sql, " WHERE (");
			foreach(lc, keys)
				appendStringInfo(&sql, "%s%s", foreach_current_index(lc) ? ", " : "",
								 quote_identifier(lfirst(lc)));
			appendStringInfoString(&sql, ") > (");
			i = 1;
			forboth(lc, keys, lt, key_types)
				appendStringInfo(&sql, "%s$%d::%s", i > 1 ? ", " : "", i,
								 (char *) lfirst(lt)), i++;
			appendStringInfoChar(&sql, ')');
		}
		appendStringInfoString(&sql, " ORDER BY ");
		foreach(lc, keys)
			appendStringInfo(&sql, "%s%s", foreach_current_index(lc) ? ", " : "",
							 quote_identifier(lfirst(lc)));
		appendStringInfo(&sql, " LIMIT %d", CHUNK_ROWS);
	}
	else
	{
		/* bitmap: range next_range is [bounds[r-1], bounds[r]) */
		int			nbounds = list_length(b->bounds);
		const char *key = quote_identifier(linitial(keys));
		char	   *type = linitial(key_types);

		appendStringInfoString(&sql, " WHERE true");
		if (b->next_range > 0)
			appendStringInfo(&sql, " AND %s >= $1::%s", key, type);
		if (b->next_range < nbounds)
			appendStringInfo(&sql, " AND %s < $2::%s", key, type);
		*last = (b->next_range >= nbounds);
	}
	return sql.data;
}

static uint32
key_hash(const char *key, int len)
{
	return hash_bytes((const unsigned char *) key, len);
}

static void
add_row(ReplicantChunk *chunk, const char *key, int keylen, const char *change, int len)
{
	KeyEntry   *entry;
	bool		found;
	uint32		h = key_hash(key, keylen);
	MemoryContext old = MemoryContextSwitchTo(chunk->context);
	ReplicantChunkRow *row;

	if (chunk->nrows % 256 == 0)
		chunk->rows = chunk->rows ?
			repalloc(chunk->rows, sizeof(ReplicantChunkRow) * (chunk->nrows + 256)) :
			palloc(sizeof(ReplicantChunkRow) * 256);
	row = &chunk->rows[chunk->nrows];
	row->key = pnstrdup(key, keylen);
	row->change = pnstrdup(change, len);
	row->dropped = false;
	entry = hash_search(chunk->by_key, &h, HASH_ENTER, &found);
	if (!found)
		entry->rows = NIL;
	entry->rows = lappend_int(entry->rows, chunk->nrows);
	chunk->nrows++;
	MemoryContextSwitchTo(old);
}

void
replicant_chunk_drop_key(ReplicantChunk *chunk, const char *key, int len)
{
	uint32		h = key_hash(key, len);
	KeyEntry   *entry = hash_search(chunk->by_key, &h, HASH_FIND, NULL);
	ListCell   *lc;

	if (entry == NULL)
		return;
	foreach(lc, entry->rows)
	{
		ReplicantChunkRow *row = &chunk->rows[lfirst_int(lc)];

		if (strlen(row->key) == len && memcmp(row->key, key, len) == 0)
			row->dropped = true;
	}
}

void
replicant_chunk_drop_all(ReplicantChunk *chunk)
{
	int			i;

	for (i = 0; i < chunk->nrows; i++)
		chunk->rows[i].dropped = true;
}

int
replicant_chunk_rows(ReplicantChunk *chunk, StringInfo out)
{
	int			n = 0;
	int			i;

	for (i = 0; i < chunk->nrows; i++)
	{
		if (chunk->rows[i].dropped)
			continue;
		if (n++ > 0)
			appendStringInfoChar(out, ',');
		appendStringInfoString(out, chunk->rows[i].change);
	}
	return n;
}

static XLogRecPtr
write_watermark(const char *kind, const char *token)
{
	char	   *message = psprintf("%s:%s", kind, token);

	return REPLICANT_LOG_LOGICAL_MESSAGE(REPLICANT_WATERMARK_PREFIX, message, strlen(message), false);
}

ReplicantChunk *
replicant_backfill_read_chunk(ReplicantPipeline *pipeline, ReplicantBackfill *b)
{
	ReplicantCatalogAccess access;
	MemoryContext caller = CurrentMemoryContext;
	ReplicantChunk *chunk;
	Relation	rel;
	TupleDesc	desc;
	Bitmapset  *key_columns;
	bool		whole_row;
	bool		identity_full;
	List	   *keys = NIL;
	List	   *key_types = NIL;
	char	   *query;
	Datum		args[2];
	Oid			argtypes[2] = {TEXTOID, TEXTOID};
	int			nargs = 0;
	StringInfoData change;
	StringInfoData key;
	Datum	   *values;
	bool	   *nulls;
	uint64		i;
	XLogRecPtr	high;
	bool		last;
	int64		nblocks;

	chunk = MemoryContextAllocZero(caller, sizeof(ReplicantChunk));
	chunk->context = AllocSetContextCreate(caller, "replicant backfill chunk",
										   ALLOCSET_DEFAULT_SIZES);
	chunk->backfill = b;
	snprintf(chunk->token, sizeof(chunk->token), INT64_FORMAT ":" INT64_FORMAT ":%u",
			 b->id, b->chunks++, (uint32) pg_prng_uint32(&pg_global_prng_state));
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(uint32);
		ctl.entrysize = sizeof(KeyEntry);
		ctl.hcxt = chunk->context;
		chunk->by_key = hash_create("replicant chunk keys", CHUNK_ROWS * 2, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}

	replicant_catalog_begin(&access);

	/* Before the chunk's snapshot exists: changes after it open the window. */
	(void) write_watermark("low", chunk->token);

	/*
	 * Read as the pipeline's owner, as the stream would.  Not read-only: SPI
	 * then takes a fresh snapshot for the query, after the low watermark.
	 */
	SetUserIdAndSecContext(access.saved_userid, access.saved_sec_context);
	rel = try_table_open(b->relid, AccessShareLock);
	if (rel == NULL)
	{
		/* Dropped: nothing more to read. */
		chunk->last = true;
		chunk->names = NULL;
		high = write_watermark("high", chunk->token);
		replicant_catalog_end(&access);
		XLogFlush(high);
		return chunk;
	}
	if (strcmp(b->mode, "ctid") == 0 && rel->rd_rel->relfilenode != b->relfilenode)
	{
		/* Rewritten (VACUUM FULL, CLUSTER, TRUNCATE): block positions are stale. */
		ereport(LOG,
				(errmsg("table \"%s\" was rewritten during its backfill; reading it again",
						RelationGetRelationName(rel))));
		b->relfilenode = rel->rd_rel->relfilenode;
		b->next_block = 0;
	}
	nblocks = RelationGetNumberOfBlocks(rel);
	desc = RelationGetDescr(rel);
	replicant_publication_key(rel, &key_columns, &whole_row, &identity_full);
	if (key_columns)
	{
		int			a = -1;

		keys = key_column_names(rel, key_columns);
		while ((a = bms_next_member(key_columns, a)) >= 0)
			key_types = lappend(key_types, format_type_be_qualified(TupleDescAttr(desc, a - 1)->atttypid));
	}
	query = chunk_query(b, rel, keys, key_types, nblocks, &last);

	if (strcmp(b->mode, "keyset") == 0)
	{
		ListCell   *lc;

		nargs = list_length(b->cursor_key);
		if (nargs > 0)
		{
			Datum	   *kv = palloc(sizeof(Datum) * nargs);
			Oid		   *kt = palloc(sizeof(Oid) * nargs);

			foreach(lc, b->cursor_key)
			{
				kv[foreach_current_index(lc)] = CStringGetTextDatum(lfirst(lc));
				kt[foreach_current_index(lc)] = TEXTOID;
			}
			if (SPI_execute_with_args(query, nargs, kt, kv, NULL, false, 0) != SPI_OK_SELECT)
				elog(ERROR, "could not read a backfill chunk");
		}
		else if (SPI_execute(query, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read a backfill chunk");
		last = SPI_processed < CHUNK_ROWS;
	}
	else
	{
		char		argnulls[2] = {'n', 'n'};

		if (strcmp(b->mode, "bitmap") == 0)
		{
			if (b->next_range > 0)
			{
				args[0] = CStringGetTextDatum(list_nth(b->bounds, b->next_range - 1));
				argnulls[0] = ' ';
			}
			if (b->next_range < list_length(b->bounds))
			{
				args[1] = CStringGetTextDatum(list_nth(b->bounds, b->next_range));
				argnulls[1] = ' ';
			}
			nargs = 2;
		}
		if (SPI_execute_with_args(query, nargs, argtypes, args, nargs ? argnulls : NULL,
								  false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read a backfill chunk");
	}

	/* Encode every row as a "read", keyed like the stream keys it. */
	values = palloc(sizeof(Datum) * desc->natts);
	nulls = palloc(sizeof(bool) * desc->natts);
	initStringInfo(&change);
	initStringInfo(&key);
	{
		StringInfoData names;

		initStringInfo(&names);
		appendStringInfoString(&names, "\"schema\":");
		replicant_encode_string(&names, get_namespace_name(RelationGetNamespace(rel)));
		appendStringInfoString(&names, ",\"table\":");
		replicant_encode_string(&names, RelationGetRelationName(rel));
		chunk->names = MemoryContextStrdup(chunk->context, names.data);

		for (i = 0; i < SPI_processed; i++)
		{
			replicant_snapshot_encode_read(&change, &key, names.data, desc,
										   SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
										   values, nulls, key_columns, whole_row);
			add_row(chunk, key.data, key.len, change.data, change.len);
		}
	}

	/*
	 * The cursor after this chunk, applied once it is delivered.  SPI's
	 * memory goes away at the end of the transaction: keep it in the chunk.
	 */
	{
		MemoryContext old = MemoryContextSwitchTo(chunk->context);

		if (strcmp(b->mode, "keyset") == 0 && SPI_processed > 0)
		{
			HeapTuple	lastrow = SPI_tuptable->vals[SPI_processed - 1];
			ListCell   *lc;

			foreach(lc, keys)
				chunk->next_cursor_key =
					lappend(chunk->next_cursor_key,
							SPI_getvalue(lastrow, SPI_tuptable->tupdesc,
										 SPI_fnumber(SPI_tuptable->tupdesc, lfirst(lc))));
		}
		else
			chunk->next_cursor_key = list_copy(b->cursor_key);
		MemoryContextSwitchTo(old);
	}
	chunk->next_block = b->next_block + CHUNK_BLOCKS;
	chunk->last = last;

	table_close(rel, AccessShareLock);
	high = write_watermark("high", chunk->token);
	replicant_catalog_end(&access);
	MemoryContextSwitchTo(caller);

	/* Decoding reads only flushed WAL. */
	XLogFlush(high);
	return chunk;
}

void
replicant_backfill_record_chunk(ReplicantChunk *chunk, int delivered)
{
	ReplicantBackfill *b = chunk->backfill;
	ReplicantCatalogAccess access;
	Oid			argtypes[7] = {INT8OID, TEXTARRAYOID, INT8OID, INT4OID, INT8OID, BOOLOID, OIDOID};
	Datum		args[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	ListCell   *lc;
	Datum	   *keys;
	MemoryContext caller = CurrentMemoryContext;

	b->first_sent = true;
	if (strcmp(b->mode, "ctid") == 0)
		b->next_block = chunk->next_block;
	else if (strcmp(b->mode, "bitmap") == 0)
		b->next_range++;
	else
	{
		/* The backfill outlives the chunk: copy the cursor where it lives. */
		MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(b));
		List	   *cursor = NIL;

		foreach(lc, chunk->next_cursor_key)
			cursor = lappend(cursor, pstrdup(lfirst(lc)));
		list_free_deep(b->cursor_key);
		b->cursor_key = cursor;
		MemoryContextSwitchTo(old);
	}

	keys = palloc(sizeof(Datum) * (list_length(b->cursor_key) + 1));
	foreach(lc, b->cursor_key)
		keys[foreach_current_index(lc)] = CStringGetTextDatum(lfirst(lc));
	args[0] = Int64GetDatum(b->id);
	args[1] = PointerGetDatum(construct_array(keys, list_length(b->cursor_key), TEXTOID, -1, false, TYPALIGN_INT));
	nulls[1] = b->cursor_key ? ' ' : 'n';
	args[2] = Int64GetDatum(b->next_block);
	args[3] = Int32GetDatum(b->next_range);
	args[4] = Int64GetDatum(delivered);
	args[5] = BoolGetDatum(chunk->last);
	args[6] = ObjectIdGetDatum(b->relfilenode);

	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("UPDATE replicant.backfills SET cursor_key = $2, next_block = $3,"
							  " next_range = $4, rows_done = rows_done + $5, first_sent = true,"
							  " relfilenode = $7, started_at = coalesce(started_at, now()),"
							  " state = CASE WHEN $6 THEN 'done' ELSE 'running' END,"
							  " finished_at = CASE WHEN $6 THEN now() END"
							  " WHERE id = $1 AND state IN ('planned', 'running')",
							  7, argtypes, args, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record backfill progress");
	replicant_catalog_end(&access);
	MemoryContextSwitchTo(caller);
}
