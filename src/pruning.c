/*
 * pruning.c
 *		Forgetting the tables that were dropped: their entries in the
 *		decoder's relation cache and their saved shapes.
 *
 * A dropped table's cache entry (publication.c) and its row in
 * replicant.table_shapes would stay for good: memory and rows that grow with
 * every table ever decoded.  (A new table that gets a dropped one's OID
 * before the shape is forgotten is not held to it: a shape names its
 * table's row type, table_shape.c.)  The decoder lags the catalog, so
 * a table the catalog no longer has may still have changes to decode, which
 * the shape must check.  So a table is forgotten in two steps, each inside
 * a checkpoint's transaction: one finds it gone from the catalog, while WAL
 * is written up to some position, which its drop precedes; a later one,
 * whose checkpoint is past that position, forgets it.  Looked for at most
 * every PRUNE_EVERY_MS.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "publication.h"
#include "pruning.h"

#define PRUNE_EVERY_MS 10000

/* Tables found gone while WAL was inserted up to gone_seen_at. */
static List *gone_tables = NIL;
static XLogRecPtr gone_seen_at = InvalidXLogRecPtr;
static TimestampTz gone_looked_at = 0;

/* Datums of relids, as an oid[]. */
static Datum
oid_array(List *relids)
{
	Datum *datums = palloc(sizeof(Datum) * (list_length(relids) + 1));
	ListCell *lc;
	int n = 0;

	foreach(lc, relids)
		datums[n++] = ObjectIdGetDatum(lfirst_oid(lc));
	return PointerGetDatum(construct_array(datums, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
}

/*
 * The tables among the pipeline's saved shapes and the invalidated cache
 * entries that the catalog no longer has, in TopMemoryContext.
 */
static List *
find_gone_tables(int32 pipeline_id)
{
	Oid argtypes[2] = {INT4OID, OIDARRAYOID};
	Datum args[2] = {Int32GetDatum(pipeline_id),
					 oid_array(replicant_publication_invalid_relids())};
	List *gone = NIL;
	uint64 i;

	if (SPI_execute_with_args("SELECT t.relid FROM ("
							  "  SELECT relid FROM replicant.table_shapes"
							  "   WHERE pipeline_id OPERATOR(pg_catalog.=) $1"
							  "  UNION SELECT pg_catalog.unnest($2)) t (relid)"
							  " WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
							  "                    WHERE c.oid OPERATOR(pg_catalog.=) t.relid)",
							  2, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not look for dropped tables");
	for (i = 0; i < SPI_processed; i++)
	{
		bool isnull;
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		gone = lappend_oid(gone, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																SPI_tuptable->tupdesc, 1, &isnull)));
		MemoryContextSwitchTo(old);
	}
	return gone;
}

/* Forgets the tables found gone: cache entries, saved shapes, shape rows. */
static void
forget_gone_tables(int32 pipeline_id)
{
	Oid argtypes[2] = {INT4OID, OIDARRAYOID};
	Datum args[2];
	List *forgotten = NIL;
	ListCell *lc;

	foreach(lc, gone_tables)
		if (replicant_publication_forget(lfirst_oid(lc)))
			forgotten = lappend_oid(forgotten, lfirst_oid(lc));
	args[0] = Int32GetDatum(pipeline_id);
	args[1] = oid_array(forgotten);
	if (forgotten != NIL &&
		SPI_execute_with_args("DELETE FROM replicant.table_shapes"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1"
							  "   AND relid OPERATOR(pg_catalog.=) ANY ($2)",
							  2, argtypes, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not forget the shapes of dropped tables");
	list_free(gone_tables);
	gone_tables = NIL;
}

void
replicant_pruning_checkpoint(int32 pipeline_id, XLogRecPtr decoded_upto)
{
	TimestampTz now;

	if (gone_tables != NIL)
	{
		/* Decoding has passed their drops: no change of theirs is left. */
		if (decoded_upto >= gone_seen_at)
			forget_gone_tables(pipeline_id);
		return;
	}
	now = GetCurrentTimestamp();
	if (!TimestampDifferenceExceeds(gone_looked_at, now, PRUNE_EVERY_MS))
		return;
	gone_looked_at = now;
	gone_seen_at = GetXLogInsertRecPtr();
	gone_tables = find_gone_tables(pipeline_id);
}
