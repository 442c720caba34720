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
 *
 * A partition published through its root is delivered under the root's
 * names, but what it logs, and what PostgreSQL checks against the root's
 * column list, is its own replica identity: its key is the partition's
 * identity under the root's column names.
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "utils/lsyscache.h"
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

/* target's attribute of the name of rel's attribute attnum (a partition's root has them all). */
static AttrNumber
target_attnum(Relation rel, Relation target, int attnum)
{
	TupleDesc desc = RelationGetDescr(target);
	const char *name = NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname);
	int i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->attnum;
	}
	elog(ERROR, "column \"%s\" of relation \"%s\" has no namesake in \"%s\"",
		 name, RelationGetRelationName(rel), RelationGetRelationName(target));
	return InvalidAttrNumber;
}

Bitmapset *
replicant_row_key_identity_as(Relation rel, Relation target, bool *whole_row)
{
	Bitmapset *own;
	Bitmapset *mapped = NULL;
	bool identity_full;
	int x = -1;

	replicant_row_key_identity(rel, &own, whole_row, &identity_full);
	if (RelationGetRelid(rel) == RelationGetRelid(target))
		return own;
	while ((x = bms_next_member(own, x)) >= 0)
		mapped = bms_add_member(mapped, target_attnum(rel, target, x));
	bms_free(own);
	return mapped;
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
replicant_row_key_delivered(Relation rel, Relation target, const Bitmapset *columns,
							Bitmapset **key_columns, bool *whole_row)
{
	*key_columns = replicant_row_key_identity_as(rel, target, whole_row);
	if (*whole_row)
		*whole_row = whole_row_delivered(RelationGetDescr(target), columns);
	else if (columns != NULL && !bms_is_subset(*key_columns, columns))
	{
		bms_free(*key_columns);
		*key_columns = NULL;
	}
}

Bitmapset *
replicant_row_key_logged(Relation rel, Relation target, const Bitmapset *columns)
{
	bool whole_row;
	Bitmapset *identity;

	if (rel->rd_rel->relreplident == REPLICA_IDENTITY_FULL)
		return NULL;
	identity = replicant_row_key_identity_as(rel, target, &whole_row);
	return columns ? bms_intersect(identity, columns) : identity;
}

void
replicant_row_key_of_target(Relation target, const Bitmapset *columns,
							Bitmapset **key_columns, bool *whole_row)
{
	List *relids;
	ListCell *lc;
	bool first = true;

	if (target->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
	{
		replicant_row_key_delivered(target, target, columns, key_columns, whole_row);
		return;
	}
	*key_columns = NULL;
	*whole_row = false;
	relids = find_all_inheritors(RelationGetRelid(target), AccessShareLock, NULL);
	foreach(lc, relids)
	{
		Relation leaf;
		Bitmapset *leaf_key;
		bool leaf_whole_row;

		if (get_rel_relkind(lfirst_oid(lc)) != RELKIND_RELATION)
			continue;
		leaf = table_open(lfirst_oid(lc), AccessShareLock);
		replicant_row_key_delivered(leaf, target, columns, &leaf_key, &leaf_whole_row);
		table_close(leaf, AccessShareLock);
		if (first)
		{
			*key_columns = leaf_key;
			*whole_row = leaf_whole_row;
			first = false;
		}
		else if (leaf_whole_row != *whole_row || !bms_equal(leaf_key, *key_columns))
		{
			/* Keyed differently: no one key identifies the target's rows. */
			*key_columns = NULL;
			*whole_row = false;
			return;
		}
	}
}
