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
 * WAL order is not visibility order: a backend writes its commit record
 * before it leaves the proc array, so a snapshot taken after the low
 * watermark can miss a transaction committed below it.  A chunk whose
 * snapshot misses a transaction the clog already shows committed is not
 * read (it is tried again shortly); a delivered transaction the snapshot
 * did not see collides with the chunk wherever it is in the stream.
 *
 * Without a key no chunk row can be told apart, so nothing but a TRUNCATE
 * drops one: such a table may arrive with duplicates, never with holes.  An
 * UPDATE that left TOASTed columns unchanged does not drop its row: the
 * row as read goes before the update, so a sink that never saw the row
 * still ends with every column.
 *
 * Read methods, chosen when the backfill is planned and never changed:
 * keyset (ORDER BY key, the last key as cursor), bitmap (key sub-ranges
 * without ORDER BY, boundaries computed at plan time) and ctid (bounded block
 * windows, a TID Range Scan; the only method for tables without a key).  A
 * ctid cursor is stamped with the table's relfilenode and starts over when
 * VACUUM FULL, CLUSTER or TRUNCATE rewrote the table.  Keyset and bitmap
 * compare and order the key with the operators of its index's operator
 * families, in the index's column order, whatever the search_path.
 *
 * Rules kept with other files: docs/internals.md §2 (the watermark protocol),
 * §9 (privileges).
 */
#include "postgres.h"

#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type_d.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "replication/message.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "backfill.h"
#include "catalog.h"
#include "compat.h"
#include "destination.h"
#include "encoder.h"
#include "fault.h"
#include "format.h"
#include "key_order.h"
#include "partition_root.h"
#include "publication.h"
#include "publication_rules.h"
#include "pubfilter.h"
#include "row_key.h"
#include "table_read.h"

/* Blocks per ctid chunk. */
#define CHUNK_BLOCKS 32
/* Tries of a chunk whose publications change while it takes its snapshot. */
#define FILTER_TRIES 100
/* Rows fetched from a chunk's cursor at a time. */
#define FETCH_ROWS 200
/* Wait before a chunk whose snapshot missed a commit is tried again. */
#define GAP_RETRY_MS 100

/*
 * Builds the chunk's SELECT of select_list from rel; parameters are the
 * cursor's key values.  Only rows that pass the publications' row filter
 * (row_filter, if not NULL).
 */
static char *
chunk_query(ReplicantBackfill *b, Relation rel, const char *select_list,
			ReplicantKeyOrder *order, int64 nblocks, const char *row_filter, bool *last)
{
	StringInfoData sql;
	const char *where = row_filter ? " AND " : " WHERE ";

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s FROM ONLY %s", select_list,
					 quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												RelationGetRelationName(rel)));
	if (row_filter)
		appendStringInfo(&sql, " WHERE (%s)", row_filter);
	*last = false;
	if (strcmp(b->mode, "ctid") == 0)
	{
		appendStringInfo(&sql, "%sctid OPERATOR(pg_catalog.>=) '(" INT64_FORMAT ",0)'::pg_catalog.tid"
							   " AND ctid OPERATOR(pg_catalog.<) '(" INT64_FORMAT ",0)'::pg_catalog.tid",
						 where, b->next_block, b->next_block + CHUNK_BLOCKS);
		*last = (b->next_block + CHUNK_BLOCKS >= nblocks);
	}
	else if (strcmp(b->mode, "keyset") == 0)
	{
		if (b->cursor_key != NIL)
		{
			appendStringInfoString(&sql, where);
			replicant_key_after_cursor(&sql, order);
		}
		replicant_key_order_by(&sql, order);
		appendStringInfo(&sql, " LIMIT %d", REPLICANT_CHUNK_ROWS);
	}
	else
	{
		/* bitmap: range next_range is [bounds[r-1], bounds[r]) */
		int nbounds = list_length(b->bounds);
		const char *key = quote_identifier(linitial(order->names));
		char *type = linitial(order->types);

		appendStringInfo(&sql, "%strue", where);
		if (b->next_range > 0)
			appendStringInfo(&sql, " AND %s %s $1::%s", key, (char *) linitial(order->ge_ops), type);
		if (b->next_range < nbounds)
			appendStringInfo(&sql, " AND %s %s $2::%s", key, (char *) linitial(order->lt_ops), type);
		*last = (b->next_range >= nbounds);
	}
	return sql.data;
}

/*
 * Whether the snapshot misses a transaction that already committed: its
 * commit record may be below the low watermark, outside the window, and
 * the chunk would read the row as it was before.
 */
static bool
snapshot_misses_commits(Snapshot snapshot)
{
	uint32 i;

	for (i = 0; i < snapshot->xcnt; i++)
		if (TransactionIdDidCommit(snapshot->xip[i]))
			return true;
	return false;
}

static ReplicantChunk *
new_chunk(ReplicantBackfill *b, MemoryContext parent)
{
	ReplicantChunk *chunk = replicant_chunk_create(parent, b->relid, REPLICANT_CHUNK_ROWS * 2);

	chunk->backfill = b;
	snprintf(chunk->token, sizeof(chunk->token), INT64_FORMAT ":" INT64_FORMAT ":%u",
			 b->id, b->chunks++, (uint32) pg_prng_uint32(&pg_global_prng_state));
	if (strcmp(b->mode, "ctid") == 0)
		chunk->position = b->next_block;
	else if (strcmp(b->mode, "bitmap") == 0)
		chunk->position = b->next_range;
	else
		chunk->position = b->rows_done;
	return chunk;
}

/* A copy of a list of strings in the current memory context. */
static List *
copy_strings(List *strings)
{
	List *copy = NIL;
	ListCell *lc;

	foreach(lc, strings)
		copy = lappend(copy, pstrdup(lfirst(lc)));
	return copy;
}

/* The cursor's parameters: keyset's last key, bitmap's range bounds. */
static int
chunk_args(ReplicantBackfill *b, Datum *args, Oid *types, char *nulls)
{
	ListCell *lc;
	int n = 0;

	if (strcmp(b->mode, "keyset") == 0)
	{
		foreach(lc, b->cursor_key)
		{
			args[n] = CStringGetTextDatum(lfirst(lc));
			types[n] = TEXTOID;
			nulls[n++] = ' ';
		}
	}
	else if (strcmp(b->mode, "bitmap") == 0)
	{
		types[0] = types[1] = TEXTOID;
		nulls[0] = nulls[1] = 'n';
		args[0] = args[1] = (Datum) 0;
		if (b->next_range > 0)
		{
			args[0] = CStringGetTextDatum(list_nth(b->bounds, b->next_range - 1));
			nulls[0] = ' ';
		}
		if (b->next_range < list_length(b->bounds))
		{
			args[1] = CStringGetTextDatum(list_nth(b->bounds, b->next_range));
			nulls[1] = ' ';
		}
		n = 2;
	}
	return n;
}

/* The keyset cursor after the chunk's last row, applied once it is delivered. */
static void
set_next_cursor(ReplicantChunk *chunk, ReplicantKeyOrder *order, HeapTuple row, TupleDesc desc)
{
	MemoryContext old = MemoryContextSwitchTo(chunk->context);
	ListCell *lc;

	list_free_deep(chunk->next_cursor_key);
	chunk->next_cursor_key = NIL;
	foreach(lc, order->names)
		chunk->next_cursor_key =
			lappend(chunk->next_cursor_key,
					SPI_getvalue(row, desc, SPI_fnumber(desc, lfirst(lc))));
	MemoryContextSwitchTo(old);
}

/* The cursor after a chunk that read no row (or reads by position): unchanged. */
static void
keep_cursor(ReplicantChunk *chunk)
{
	MemoryContext old = MemoryContextSwitchTo(chunk->context);

	chunk->next_cursor_key = copy_strings(chunk->backfill->cursor_key);
	MemoryContextSwitchTo(old);
}

/* The relation as the chunk's changes name it, kept with the chunk. */
static ReplicantRelation *
chunk_relation(ReplicantChunk *chunk, Relation rel)
{
	ReplicantRelation *relation = MemoryContextAlloc(chunk->context,
													 sizeof(ReplicantRelation));

	relation->schema = MemoryContextStrdup(chunk->context,
										   get_namespace_name(RelationGetNamespace(rel)));
	relation->table = MemoryContextStrdup(chunk->context, RelationGetRelationName(rel));
	return relation;
}

/*
 * What a chunk reads: the table, the relation its rows are delivered as
 * (itself, or its partition root) and their columns as select_list, the
 * row filter (NULL: every row) and the published columns (NULL: all).
 */
typedef struct ChunkSource
{
	Relation rel;
	Relation target;
	char *select_list;
	char *row_filter;
	Bitmapset *columns;
} ChunkSource;

/*
 * The chunk's cursor is opened, fetched from and closed as the table's
 * owner, restricted: planning and running its query runs code of the table
 * owner's (table_read.h).  Its rows are encoded as the pipeline's owner.
 */
static Portal
open_as_table_owner(Relation rel, const char *query, int nargs, Oid *types,
					Datum *args, const char *nulls)
{
	ReplicantTableOwnerScope scope;
	Portal portal;

	replicant_table_owner_enter(rel, &scope);
	portal = SPI_cursor_open_with_args(NULL, query, nargs, types, args,
									   nargs ? nulls : NULL, true, 0);
	replicant_table_owner_leave(&scope);
	return portal;
}

static void
fetch_as_table_owner(Relation rel, Portal portal)
{
	ReplicantTableOwnerScope scope;

	replicant_table_owner_enter(rel, &scope);
	SPI_cursor_fetch(portal, true, FETCH_ROWS);
	replicant_table_owner_leave(&scope);
}

static void
close_as_table_owner(Relation rel, Portal portal)
{
	ReplicantTableOwnerScope scope;

	replicant_table_owner_enter(rel, &scope);
	SPI_cursor_close(portal);
	replicant_table_owner_leave(&scope);
}

/*
 * Where a row of a table without an identity of columns lies: the ctid
 * the chunk's query selects last for such a table (take_chunk_filter).
 */
static ItemPointer
row_position(HeapTuple row, TupleDesc row_desc, const Bitmapset *identity)
{
	bool isnull;

	if (identity != NULL)
		return NULL;
	return (ItemPointer) DatumGetPointer(SPI_getbinval(row, row_desc, row_desc->natts, &isnull));
}

/*
 * Reads the chunk's rows of src through a cursor under the given snapshot.
 * A keyset chunk ends early once its rows reach batch_max_bytes (at least
 * one row), its cursor then being the last row taken.  Rows take the
 * names and columns of src's target: the table read, or the root it is
 * published as, and the table's key under the target's names; they carry
 * the published columns only.
 */
static void
read_rows(ReplicantChunk *chunk, ChunkSource *src, ReplicantKeyOrder *order,
		  const char *query, Snapshot snapshot, ReplicantPipeline *pipeline, bool *last)
{
	/* A keyset chunk's size, not a request's: each destination cuts its own. */
	int max_bytes = replicant_pipeline_first_destination(pipeline)->batch_max_bytes;
	bool read_ids = false;
	ReplicantBackfill *b = chunk->backfill;
	TupleDesc desc = RelationGetDescr(src->target);
	Bitmapset *key_columns;
	bool whole_row;
	Bitmapset *identity = replicant_row_key_identity_as(src->rel, src->target, &whole_row);
	bool keyset = strcmp(b->mode, "keyset") == 0;
	Datum args[INDEX_MAX_KEYS];
	Oid types[INDEX_MAX_KEYS];
	char nulls[INDEX_MAX_KEYS];
	int nargs = chunk_args(b, args, types, nulls);
	StringInfoData *changes;
	StringInfoData key;
	StringInfoData new_row;
	Datum *values = palloc(sizeof(Datum) * desc->natts);
	bool *isnull = palloc(sizeof(bool) * desc->natts);
	Portal portal;
	int64 bytes = 0;
	int64 nread = 0;
	bool full = false;
	MemoryContext row_context = AllocSetContextCreate(CurrentMemoryContext,
													  "replicant backfill row",
													  ALLOCSET_DEFAULT_SIZES);

	replicant_row_key_delivered(src->rel, src->target, src->columns, &key_columns, &whole_row);
	/* Each row in every format its pipeline's destinations take. */
	if (chunk->formats == NULL)
		chunk->formats = replicant_formats_of(pipeline->destinations, chunk->context, &chunk->nformats);
	changes = palloc(sizeof(StringInfoData) * chunk->nformats);
	for (int f = 0; f < chunk->nformats; f++)
	{
		initStringInfo(&changes[f]);
		read_ids |= chunk->formats[f]->read_ids;
	}
	initStringInfo(&key);
	initStringInfo(&new_row);
	chunk->relation = chunk_relation(chunk, src->target);

	PushActiveSnapshot(snapshot);
	portal = open_as_table_owner(src->rel, query, nargs, types, args, nulls);
	while (!full)
	{
		uint64 i;

		fetch_as_table_owner(src->rel, portal);
		if (SPI_processed == 0)
			break;
		for (i = 0; i < SPI_processed && !full; i++)
		{
			/* Detoasted values die with the row; add_row keeps a copy. */
			MemoryContext old = MemoryContextSwitchTo(row_context);
			ReplicantChange record;

			replicant_change_from_row(&record, chunk->relation, &key, &new_row, desc,
									  SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
									  values, isnull, key_columns, whole_row, src->columns);
			record.backfill_id = b->id;
			record.read_lsn = chunk->low_watermark;
			if (read_ids)
				replicant_change_set_read_id(&record, pipeline->event_id_key, desc, values, isnull,
											 identity, b->relid, src->rel->rd_rel->relfilenode,
											 row_position(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, identity));
			for (int f = 0; f < chunk->nformats; f++)
			{
				resetStringInfo(&changes[f]);
				chunk->formats[f]->change(&changes[f], pipeline->name, &record);
			}
			MemoryContextSwitchTo(old);
			MemoryContextReset(row_context);
			replicant_chunk_add_row(chunk, key.data, key.len, changes);
			bytes += changes[0].len;
			nread++;
			full = keyset && bytes >= max_bytes;
		}
		if (keyset)
			set_next_cursor(chunk, order, SPI_tuptable->vals[i - 1], SPI_tuptable->tupdesc);
		SPI_freetuptable(SPI_tuptable);
	}
	close_as_table_owner(src->rel, portal);
	PopActiveSnapshot();
	MemoryContextDelete(row_context);

	if (keyset)
	{
		*last = !full && nread < REPLICANT_CHUNK_ROWS;
		if (nread == 0)
			keep_cursor(chunk);
	}
}

/*
 * Starts the chunk's transaction, a transaction of replicant's, as the
 * pipeline's owner: the table is read as its own owner once the pipeline's
 * owner was found to read it whole, as the stream would.
 */
static void
begin_chunk(ReplicantCatalogAccess *access)
{
	/* Chunk reads take their own snapshot: no transaction snapshot first. */
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	replicant_catalog_begin(access);
	SetUserIdAndSecContext(access->saved_userid, access->saved_sec_context);
}

/*
 * Writes the chunk's low watermark and takes its snapshot after it, once
 * the chunk holds its table's lock: a snapshot taken before could predate
 * a rewrite (ALTER TABLE ... TYPE) that held the lock meanwhile, and would
 * see none of the rewritten heap's rows, which all carry the rewrite's xid.
 * Returns NULL when the snapshot misses a committed transaction: the chunk
 * is tried again once the proc array has caught up.
 */
static Snapshot
snapshot_after_low_watermark(ReplicantPipeline *pipeline, ReplicantBackfill *b,
							 ReplicantChunk *chunk)
{
	Snapshot snapshot;

	/* Before the chunk's snapshot exists: changes after it open the window. */
	chunk->low_watermark = replicant_chunk_write_watermark(chunk, false);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	if (snapshot_misses_commits(snapshot))
	{
		/* Not visible yet: try again once the proc array has caught up. */
		if (!b->deferred)
			ereport(LOG,
					(errmsg("replicant pipeline \"%s\" defers a backfill chunk of table \"%s\"",
							pipeline->name, b->relname),
					 errdetail("A committed transaction is not visible to new snapshots yet.")));
		b->deferred = true;
		UnregisterSnapshot(snapshot);
		b->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), GAP_RETRY_MS);
		return NULL;
	}
	b->deferred = false;
	replicant_chunk_set_snapshot(chunk, snapshot);
	return snapshot;
}

static void
close_chunk_source(ChunkSource *src)
{
	if (src->rel == NULL)
		return;
	if (src->target != NULL && src->target != src->rel)
		table_close(src->target, AccessShareLock);
	table_close(src->rel, AccessShareLock);
	src->rel = src->target = NULL;
}

/*
 * What the publications publish of src->rel now, from the catalog as it is
 * (refreshed): opens the relation its rows are delivered as into
 * src->target, sets *filter and *fingerprint (the relation and the filter:
 * replicant_pubfilter_fingerprint) and returns the filter's conflict.
 */
static char *
read_chunk_filter(ReplicantPipeline *pipeline, ChunkSource *src, ReplicantPubFilter **filter,
				  char **fingerprint)
{
	char *reason;

	replicant_publication_catalog_refresh();
	src->target = replicant_partition_root_open_for_read(src->rel, pipeline->publications,
														 AccessShareLock);
	reason = replicant_publication_read_filter(src->rel, src->target, pipeline->publications,
											   filter);
	*fingerprint = psprintf("%u %s", RelationGetRelid(src->target),
							replicant_pubfilter_fingerprint(*filter));
	return reason;
}

/*
 * The filter the chunk's snapshot is taken under: read before the snapshot
 * (take_chunk_filter compares it with the one after), with a count of the
 * publication changes seen then.
 */
static char *
filter_before_snapshot(ReplicantPipeline *pipeline, ChunkSource *src, uint64 *changes)
{
	ReplicantPubFilter *filter;
	char *fingerprint;

	(void) read_chunk_filter(pipeline, src, &filter, &fingerprint);
	*changes = replicant_publication_changes(false);
	replicant_pubfilter_free(filter);
	if (src->target != src->rel)
		table_close(src->target, NoLock);
	src->target = NULL;
	return fingerprint;
}

/*
 * What the chunk reads of src->rel, as the publications publish it: the
 * relation its rows are delivered as, its row filter and columns.  Read
 * before the chunk's snapshot (before) and again after it: the snapshot's
 * rows are read under a filter that held from before the snapshot to
 * after it (docs/internals.md, section 2).  Sets *changed, reading nothing,
 * when the two differ or a publication change was seen in between
 * (changes).  Sets *unpublished, reading nothing, when no publication of
 * the pipeline publishes the table now, whatever its owner may read: the
 * stream skips it too.  Else returns a value-free reason when the
 * pipeline's owner may not read it whole.
 */
static char *
take_chunk_filter(ReplicantPipeline *pipeline, ChunkSource *src, const char *before,
				  uint64 changes, bool *changed, bool *unpublished)
{
	ReplicantPubFilter *filter;
	char *fingerprint;
	char *reason;
	bool whole_row;

	reason = read_chunk_filter(pipeline, src, &filter, &fingerprint);
	*changed = strcmp(before, fingerprint) != 0 || changes != replicant_publication_changes(false);
	*unpublished = reason == NULL && !*changed && !replicant_pubfilter_publishes(filter);
	if (*changed)
		reason = NULL;
	if (reason == NULL && !*unpublished && !*changed)
		reason = replicant_table_read_denied(src->rel, pipeline->owner);
	if (reason == NULL && !*unpublished && !*changed)
	{
		src->select_list = replicant_partition_root_select_list(src->rel, src->target);
		/* Where a row without an identity of columns lies names its reads (change.h). */
		if (replicant_row_key_identity_as(src->rel, src->target, &whole_row) == NULL)
			src->select_list = psprintf("%s, ctid", src->select_list);
		src->row_filter = replicant_pubfilter_read_sql(filter, src->target);
		src->columns = bms_copy(filter->columns);
	}
	replicant_pubfilter_free(filter);
	return reason;
}

/*
 * Reads the chunk's rows of src under snapshot, and notes where the next
 * chunk starts.
 */
static void
read_chunk_rows(ReplicantPipeline *pipeline, ReplicantBackfill *b,
				ReplicantChunk *chunk, ChunkSource *src, Snapshot snapshot)
{
	Relation rel = src->rel;
	ReplicantKeyOrder *order = NULL;
	char *query;
	bool last;
	int64 nblocks;

	if (strcmp(b->mode, "ctid") == 0 && rel->rd_rel->relfilenode != b->relfilenode)
	{
		/* Rewritten (VACUUM FULL, CLUSTER, TRUNCATE): block positions are stale. */
		ereport(LOG,
				(errmsg("table \"%s\" was rewritten during its backfill; reading it again",
						RelationGetRelationName(rel))));
		b->relfilenode = rel->rd_rel->relfilenode;
		b->next_block = 0;
		chunk->position = 0;
	}
	/* The file in its webhook-ids: a rewrite's rows at the same blocks are others. */
	if (strcmp(b->mode, "ctid") == 0)
		chunk->relfilenode = b->relfilenode;
	nblocks = RelationGetNumberOfBlocks(rel);
	if (strcmp(b->mode, "ctid") != 0)
		order = replicant_key_order(rel);
	query = chunk_query(b, rel, src->select_list, order, nblocks, src->row_filter, &last);
	read_rows(chunk, src, order, query, snapshot, pipeline, &last);

	if (strcmp(b->mode, "keyset") != 0)
		keep_cursor(chunk);
	chunk->next_block = b->next_block + CHUNK_BLOCKS;
	chunk->last = last;
}

/*
 * Writes the chunk's high watermark, ends its transaction and flushes WAL
 * up to the watermark: decoding reads only flushed WAL.
 */
static void
close_chunk(ReplicantChunk *chunk, ReplicantCatalogAccess *access)
{
	XLogRecPtr high = replicant_chunk_write_watermark(chunk, true);

	replicant_catalog_end(access);
	XLogFlush(high);
}

/*
 * The table stopped being published (ALTER PUBLICATION ... DROP TABLE, a
 * publication dropped or replaced, a partition detached from the root it
 * was published through): the rest of it is not read, unless it is
 * published again (replicant_backfill_replan_skipped).
 */
static void
skip_unpublished(ReplicantPipeline *pipeline, ReplicantBackfill *b)
{
	b->skipped = true;
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" skips the rest of its backfill of table \"%s\"",
					pipeline->name, b->relname),
			 errdetail("None of the pipeline's publications publishes the table any more.")));
}

/*
 * The publications changed while the chunk took its snapshot: it is read
 * again at once under a new one.  Returns a value-free halt reason when
 * they changed during each of FILTER_TRIES tries in a row.
 */
static char *
filter_changed(ReplicantPipeline *pipeline, ReplicantBackfill *b)
{
	if (++b->filter_changes < FILTER_TRIES)
		return NULL;
	b->filter_changes = 0;
	return psprintf("the publications of table \"%s\" changed during each of %d tries to read a backfill chunk",
					b->relname, FILTER_TRIES);
}

/* Ends a chunk that reads nothing: halted, deferred, or to be read again. */
static ReplicantChunk *
abandon_chunk(ReplicantChunk *chunk, ChunkSource *src, Snapshot snapshot,
			  ReplicantCatalogAccess *access)
{
	if (snapshot)
		UnregisterSnapshot(snapshot);
	close_chunk_source(src);
	replicant_catalog_end(access);
	replicant_chunk_free(chunk);
	return NULL;
}

/*
 * In this order: the table's lock, the low watermark, the snapshot, then
 * what the publications publish of the table (take_chunk_filter) and
 * whether the pipeline's owner may read it, then the rows.
 */
ReplicantChunk *
replicant_backfill_read_chunk(ReplicantPipeline *pipeline, ReplicantBackfill *b,
							  char **halt_reason)
{
	ReplicantCatalogAccess access;
	MemoryContext caller = CurrentMemoryContext;
	ReplicantChunk *chunk;
	ChunkSource src = {0};
	Snapshot snapshot;
	char *before = NULL;
	uint64 changes = 0;
	bool changed = false;
	bool unpublished = false;

	*halt_reason = NULL;
	chunk = new_chunk(b, caller);
	begin_chunk(&access);
	replicant_partition_lock_ancestors(b->relid, AccessShareLock);
	src.rel = try_table_open(b->relid, AccessShareLock);
	replicant_fault("backfill_chunk");
	if (src.rel != NULL)
		before = filter_before_snapshot(pipeline, &src, &changes);
	snapshot = snapshot_after_low_watermark(pipeline, b, chunk);
	if (snapshot == NULL)
		return abandon_chunk(chunk, &src, NULL, &access);
	replicant_fault("backfill_window");
	if (src.rel != NULL)
		*halt_reason = take_chunk_filter(pipeline, &src, before, changes, &changed, &unpublished);
	if (changed)
		*halt_reason = filter_changed(pipeline, b);
	else
		b->filter_changes = 0;
	if (*halt_reason || changed)
	{
		if (*halt_reason)
			*halt_reason = MemoryContextStrdup(caller, *halt_reason);
		return abandon_chunk(chunk, &src, snapshot, &access);
	}
	if (src.rel == NULL || unpublished)
	{
		/* Dropped, or no longer published: nothing more to read. */
		if (unpublished)
			skip_unpublished(pipeline, b);
		UnregisterSnapshot(snapshot);
		close_chunk_source(&src);
		chunk->last = true;
		chunk->relation = NULL;
		close_chunk(chunk, &access);
		return chunk;
	}
	read_chunk_rows(pipeline, b, chunk, &src, snapshot);
	UnregisterSnapshot(snapshot);
	close_chunk_source(&src);
	close_chunk(chunk, &access);
	MemoryContextSwitchTo(caller);
	return chunk;
}

void
replicant_backfill_advance(ReplicantChunk *chunk, int delivered)
{
	ReplicantBackfill *b = chunk->backfill;

	/* Only a chunk with rows, or the last, sends a request (deliver_chunk). */
	b->first_sent = b->first_sent || delivered > 0 || chunk->last;
	b->rows_done += delivered;
	if (strcmp(b->mode, "ctid") == 0)
		b->next_block = chunk->next_block;
	else if (strcmp(b->mode, "bitmap") == 0)
		b->next_range++;
	else
	{
		/* The backfill outlives the chunk: copy the cursor where it lives. */
		MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(b));
		List *cursor = copy_strings(chunk->next_cursor_key);

		list_free_deep(b->cursor_key);
		b->cursor_key = cursor;
		MemoryContextSwitchTo(old);
	}
}
