/*
 * row_key.c
 *		What identifies a row: the replica identity inside replicant, and the
 *		"key" that leaves the server, which holds published columns only.
 *
 * The identity (the replica identity index's columns, under REPLICA
 * IDENTITY FULL the primary key, or the whole row without one) orders
 * backfill cursors and makes table shapes.  A change's "key" is the same
 * columns when the publications deliver all of them, and none (null)
 * otherwise: a column list that leaves out part of the identity must not
 * leak it through the key, and a part of it is no key.  PostgreSQL refuses
 * such a table's updates and deletes while a publication publishes them, so
 * only inserts, truncates and reads carry no key.  Under FULL without a
 * primary key the key is the delivered row, which may leave out generated
 * columns as the server version's pgoutput does: they follow from the
 * others.  Stream, snapshot and backfill key rows by these functions, so
 * that they key them alike.
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "utils/rel.h"
#include "utils/relcache.h"

#include "compat.h"
#include "row_key.h"

/* Converts a bitmap of attribute numbers offset as RelationGetIndexAttrBitmap's. */
static Bitmapset *
plain_attnums(Bitmapset *offset_attnums)
{
	Bitmapset *result = NULL;
	int x = -1;

	while ((x = bms_next_member(offset_attnums, x)) >= 0)
		result = bms_add_member(result, x + FirstLowInvalidHeapAttributeNumber);
	bms_free(offset_attnums);
	return result;
}

void
replicant_row_key_identity(Relation rel, Bitmapset **key_columns, bool *whole_row,
						   bool *identity_full)
{
	char identity = rel->rd_rel->relreplident;

	*key_columns = NULL;
	*whole_row = false;
	*identity_full = (identity == REPLICA_IDENTITY_FULL);
	if (identity == REPLICA_IDENTITY_NOTHING)
		return;
	if (identity == REPLICA_IDENTITY_FULL)
	{
		*key_columns =
			plain_attnums(RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_PRIMARY_KEY));
		*whole_row = (*key_columns == NULL);
		return;
	}
	*key_columns =
		plain_attnums(RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_IDENTITY_KEY));
}

/* Whether every column of the whole row but an undelivered generated one is in columns. */
static bool
whole_row_delivered(TupleDesc desc, const Bitmapset *columns)
{
	int i;

	for (i = 0; columns != NULL && i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || REPLICANT_ATT_IS_VIRTUAL(att) || att->attgenerated)
			continue;
		if (!bms_is_member(att->attnum, columns))
			return false;
	}
	return true;
}

void
replicant_row_key_delivered(Relation rel, const Bitmapset *columns,
							Bitmapset **key_columns, bool *whole_row)
{
	bool identity_full;

	replicant_row_key_identity(rel, key_columns, whole_row, &identity_full);
	if (*whole_row)
		*whole_row = whole_row_delivered(RelationGetDescr(rel), columns);
	else if (columns != NULL && !bms_is_subset(*key_columns, columns))
	{
		bms_free(*key_columns);
		*key_columns = NULL;
	}
}
