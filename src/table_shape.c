/*
 * table_shape.c
 *		Table shapes, the baseline of destructive schema changes.
 *
 * A table's shape is its replica identity, its key's columns and its live
 * columns, by name, after the OID of the table's row type ("<oid>/"): the
 * table's identity from its creation on, which every ALTER TABLE keeps and
 * a drop ends.  A table that got a dropped table's OID (the OID counter
 * wrapped around) has a row type of its own, so the dropped table's shape
 * is no baseline for it, however soon after the drop it came.  Shapes
 * saved before 0.3.0 have no row type: compared by columns alone.
 * Decoding compares each published table with the shape it saw last
 * (publication.c); for a table this process has not seen yet, with the
 * shape saved with the last checkpoint (replicant.table_shapes), so that a
 * column dropped while no worker was looking still halts the pipeline.
 * create_pipeline saves every published table's shape, so even a table
 * that has never been delivered has one.
 */
#include "postgres.h"

#include <ctype.h>

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "compat.h"
#include "table_shape.h"

typedef struct SavedShape
{
	Oid relid; /* hash key */
	char *shape;
} SavedShape;

static MemoryContext shape_context = NULL;
static HTAB *saved_shapes = NULL;
static SPIPlanPtr save_shape_plan = NULL;

char *
replicant_table_shape(Relation rel, const Bitmapset *key_columns)
{
	TupleDesc desc = RelationGetDescr(rel);
	StringInfoData buf;
	int i;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%u/%c:", rel->rd_rel->reltype, rel->rd_rel->relreplident);
	i = -1;
	while ((i = bms_next_member(key_columns, i)) >= 0)
		appendStringInfo(&buf, "%s,", NameStr(TupleDescAttr(desc, i - 1)->attname));
	appendStringInfoChar(&buf, '|');
	for (i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped &&
			!REPLICANT_ATT_IS_VIRTUAL(TupleDescAttr(desc, i)))
			appendStringInfo(&buf, "%s,", NameStr(TupleDescAttr(desc, i)->attname));
	return buf.data;
}

/*
 * The shape without its row type ("<replica identity>:<key columns>|<live
 * columns>"); *rowtype is InvalidOid when it has none.
 */
static const char *
shape_body(const char *shape, Oid *rowtype)
{
	char *end;
	unsigned long oid;

	*rowtype = InvalidOid;
	if (!isdigit((unsigned char) shape[0]))
		return shape;
	oid = strtoul(shape, &end, 10);
	if (*end != '/')
		return shape;
	*rowtype = (Oid) oid;
	return end + 1;
}

/* The first column of the old shape missing from the new one, or NULL. */
static char *
column_lost(const char *old_shape, const char *new_shape)
{
	const char *old_cols = strchr(old_shape, '|') + 1;
	const char *new_cols = strchr(new_shape, '|');
	char *copy = pstrdup(old_cols);
	char *col;
	char *save;

	for (col = strtok_r(copy, ",", &save); col; col = strtok_r(NULL, ",", &save))
	{
		char *needle = psprintf(",%s,", col);
		char *hay = psprintf(",%s", new_cols + 1);

		if (strstr(hay, needle) == NULL)
			return col;
	}
	return NULL;
}

/*
 * Whether the identity part of new_fp ("identity:key columns") only widens
 * old_fp's: DEFAULT or USING INDEX became FULL with the same key columns.
 * "key" stays what it was, and old rows now come whole, which every sink
 * and format takes (ClickHouse's deletes of the old key included).  A key
 * that changes (an index other than the primary key, or none: FULL then
 * keys by the whole row) is not a widening.
 */
static bool
identity_widened(const char *old_fp, const char *new_fp)
{
	const char *old_key = old_fp + 2;
	const char *new_key = new_fp + 2;
	size_t len = strchr(old_key, '|') - old_key;

	return (old_fp[0] == REPLICA_IDENTITY_DEFAULT || old_fp[0] == REPLICA_IDENTITY_INDEX) &&
		   new_fp[0] == REPLICA_IDENTITY_FULL && len > 0 &&
		   strchr(new_key, '|') - new_key == len && strncmp(old_key, new_key, len) == 0;
}

char *
replicant_table_shape_change(const char *baseline, const char *now, const char *relname)
{
	char *what = NULL;
	char *lost;
	size_t identity_len;
	Oid was;
	Oid is;

	if (strcmp(now, baseline) == 0)
		return NULL;
	baseline = shape_body(baseline, &was);
	now = shape_body(now, &is);
	/* Another table, of a dropped one's OID: its shape is its own. */
	if (OidIsValid(was) && OidIsValid(is) && was != is)
		return NULL;
	identity_len = strchr(now, '|') - now;
	if (strncmp(now, baseline, identity_len + 1) != 0 && !identity_widened(baseline, now))
		what = psprintf("the replica identity of table \"%s\" changed", relname);
	else if ((lost = column_lost(baseline, now)) != NULL)
		what = psprintf("column \"%s\" of table \"%s\" was dropped or renamed", lost, relname);
	/* Nothing to fix: the operator decides whether sinks take the new shape. */
	return what ? psprintf("%s; replicant.resume_pipeline() accepts the new shape", what) : NULL;
}

void
replicant_table_shape_load(int32 pipeline_id)
{
	HASHCTL ctl;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	uint64 i;

	shape_context = AllocSetContextCreate(CacheMemoryContext, "replicant table shapes",
										  ALLOCSET_DEFAULT_SIZES);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(SavedShape);
	ctl.hcxt = shape_context;
	saved_shapes = hash_create("replicant saved table shapes", 128, &ctl,
							   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	if (SPI_execute_with_args("SELECT relid, shape FROM replicant.table_shapes"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the table shapes of pipeline %d", pipeline_id);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple tuple = SPI_tuptable->vals[i];
		bool isnull;
		Oid relid = DatumGetObjectId(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 1, &isnull));
		SavedShape *saved = hash_search(saved_shapes, &relid, HASH_ENTER, NULL);

		saved->shape = MemoryContextStrdup(shape_context,
										   SPI_getvalue(tuple, SPI_tuptable->tupdesc, 2));
	}
}

const char *
replicant_table_shape_saved(Oid relid)
{
	SavedShape *saved;

	if (saved_shapes == NULL)
		return NULL;
	saved = hash_search(saved_shapes, &relid, HASH_FIND, NULL);
	return saved ? saved->shape : NULL;
}

/* Upserts one table's shape; the caller is connected to SPI. */
static void
store_shape(int32 pipeline_id, Oid relid, const char *shape)
{
	Datum args[3];

	if (save_shape_plan == NULL)
	{
		Oid argtypes[3] = {INT4OID, OIDOID, TEXTOID};
		SPIPlanPtr plan;

		plan = SPI_prepare("INSERT INTO replicant.table_shapes (pipeline_id, relid, shape)"
						   " VALUES ($1, $2, $3)"
						   " ON CONFLICT (pipeline_id, relid) DO UPDATE SET shape = excluded.shape",
						   3, argtypes);
		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "could not prepare table shape statement");
		save_shape_plan = plan;
	}
	args[0] = Int32GetDatum(pipeline_id);
	args[1] = ObjectIdGetDatum(relid);
	args[2] = CStringGetTextDatum(shape);
	if (SPI_execute_plan(save_shape_plan, args, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not save the table shapes of pipeline %d", pipeline_id);
}

void
replicant_table_shape_save(int32 pipeline_id, Oid relid, const char *shape)
{
	SavedShape *saved;

	if (saved_shapes == NULL)
	{
		store_shape(pipeline_id, relid, shape);
		return;
	}
	saved = hash_search(saved_shapes, &relid, HASH_FIND, NULL);
	if (saved && strcmp(saved->shape, shape) == 0)
		return;
	store_shape(pipeline_id, relid, shape);
	if (saved)
		pfree(saved->shape);
	else
		saved = hash_search(saved_shapes, &relid, HASH_ENTER, NULL);
	saved->shape = MemoryContextStrdup(shape_context, shape);
}

void
replicant_table_shape_forget(Oid relid)
{
	SavedShape *saved;

	if (saved_shapes == NULL)
		return;
	saved = hash_search(saved_shapes, &relid, HASH_FIND, NULL);
	if (saved == NULL)
		return;
	pfree(saved->shape);
	(void) hash_search(saved_shapes, &relid, HASH_REMOVE, NULL);
}
