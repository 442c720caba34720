/*
 * backfill_progress.c
 *		The worker's side of replicant.backfills: the next backfill to read,
 *		and its progress recorded after each delivered chunk, so that a crash
 *		resumes from the last one (backfill.c reads the chunks).
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "backfill.h"
#include "backfill_progress.h"
#include "catalog.h"
#include "destination.h"

static List *
text_array_to_list(Datum d, bool isnull)
{
	Datum *elems;
	int n;
	int i;
	List *list = NIL;

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
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	ReplicantBackfill *b = NULL;
	MemoryContext caller = CurrentMemoryContext;

	replicant_catalog_begin(&access);
	/* replicant.backfills.destination_id comes with 0.3.0's objects. */
	if (SPI_execute_with_args(replicant_destinations_exist() ?
								  "SELECT id, relid, mode, relfilenode, cursor_key, next_block,"
								  "       bounds, next_range, first_sent, rows_done, destination_id"
								  "  FROM replicant.backfills"
								  " WHERE pipeline_id = $1 AND kind = 'incremental'"
								  "   AND state IN ('planned', 'running')"
								  " ORDER BY id LIMIT 1" :
								  "SELECT id, relid, mode, relfilenode, cursor_key, next_block,"
								  "       bounds, next_range, first_sent, rows_done, NULL::integer"
								  "  FROM replicant.backfills"
								  " WHERE pipeline_id = $1 AND kind = 'incremental'"
								  "   AND state IN ('planned', 'running')"
								  " ORDER BY id LIMIT 1",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed > 0)
	{
		HeapTuple t = SPI_tuptable->vals[0];
		TupleDesc d = SPI_tuptable->tupdesc;
		bool isnull;
		Datum v;
		char *relname;
		MemoryContext old = MemoryContextSwitchTo(caller);

		b = palloc0(sizeof(ReplicantBackfill));
		b->id = DatumGetInt64(SPI_getbinval(t, d, 1, &isnull));
		b->relid = DatumGetObjectId(SPI_getbinval(t, d, 2, &isnull));
		relname = get_rel_name(b->relid);
		strlcpy(b->relname, relname ? relname : "", NAMEDATALEN);
		b->mode = TextDatumGetCString(SPI_getbinval(t, d, 3, &isnull));
		b->relfilenode = DatumGetObjectId(SPI_getbinval(t, d, 4, &isnull));
		v = SPI_getbinval(t, d, 5, &isnull);
		b->cursor_key = text_array_to_list(v, isnull);
		b->next_block = DatumGetInt64(SPI_getbinval(t, d, 6, &isnull));
		v = SPI_getbinval(t, d, 7, &isnull);
		b->bounds = text_array_to_list(v, isnull);
		b->next_range = DatumGetInt32(SPI_getbinval(t, d, 8, &isnull));
		b->first_sent = DatumGetBool(SPI_getbinval(t, d, 9, &isnull));
		b->rows_done = DatumGetInt64(SPI_getbinval(t, d, 10, &isnull));
		v = SPI_getbinval(t, d, 11, &isnull);
		b->destination_id = isnull ? 0 : DatumGetInt32(v);
		MemoryContextSwitchTo(old);
	}
	replicant_catalog_end(&access);
	return b;
}

void
replicant_backfill_record_chunk(ReplicantChunk *chunk, int delivered)
{
	ReplicantBackfill *b = chunk->backfill;
	ReplicantCatalogAccess access;
	Oid argtypes[8] = {INT8OID, TEXTARRAYOID, INT8OID, INT4OID, INT8OID, BOOLOID, OIDOID, TEXTOID};
	Datum args[8];
	char nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	ListCell *lc;
	Datum *keys;
	MemoryContext caller = CurrentMemoryContext;

	replicant_backfill_advance(chunk, delivered);
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
	args[7] = CStringGetTextDatum(b->skipped ? replicant_catalog_skipped_state() : "done");
	if (SPI_execute_with_args("UPDATE replicant.backfills SET cursor_key = $2, next_block = $3,"
							  " next_range = $4, rows_done = rows_done + $5,"
							  " first_sent = first_sent OR $5 > 0 OR $6,"
							  " relfilenode = $7, started_at = coalesce(started_at, now()),"
							  " state = CASE WHEN $6 THEN $8 ELSE 'running' END,"
							  " finished_at = CASE WHEN $6 THEN now() END"
							  " WHERE id = $1 AND state IN ('planned', 'running')",
							  8, argtypes, args, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record backfill progress");
	replicant_catalog_end(&access);
	MemoryContextSwitchTo(caller);
}

void
replicant_backfill_record_first_sent(const int64 *ids, int n)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT8ARRAYOID};
	Datum *elems = palloc(sizeof(Datum) * (n + 1));
	Datum args[1];

	for (int i = 0; i < n; i++)
		elems[i] = Int64GetDatum(ids[i]);
	args[0] = PointerGetDatum(construct_array(elems, n, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("UPDATE replicant.backfills SET first_sent = true"
							  " WHERE id OPERATOR(pg_catalog.=) ANY ($1)",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the first markers of backfills");
	replicant_catalog_end(&access);
}
