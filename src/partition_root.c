/*
 * partition_root.c
 *		publish_via_partition_root: partitions' rows under their root.
 *
 * PostgreSQL's pgoutput delivers a partition's changes as the topmost
 * ancestor that a publish_via_partition_root publication publishes it
 * through: the ancestor's schema and table name, its columns (a partition
 * may order them differently or have dropped ones: they are matched by
 * name) and its replica identity.  Over several publications the deepest
 * such ancestor wins.  A partitioned table is itself published only
 * through its root (it has no rows of its own, but it can be truncated),
 * and a TRUNCATE of a partition delivered as an ancestor is not sent at
 * all (PostgreSQL 15 to 18 alike).
 *
 * Snapshots and backfills read each leaf partition on its own (the shard
 * and chunk machinery works per heap) and deliver its rows as the stream
 * delivers its changes: under the same ancestor, in its columns.  Under
 * one snapshot, the leaves together hold exactly the root's rows.
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "partition_root.h"

Oid
replicant_partition_root_published_as(Publication *pub, Relation rel, List *ancestors,
									  int *level)
{
	Oid relid = RelationGetRelid(rel);
	int found = 0;

	if (pub->pubviaroot && ancestors != NIL)
	{
		if (pub->alltables)
		{
			relid = llast_oid(ancestors);
			found = list_length(ancestors);
		}
		else
		{
			Oid ancestor = GetTopMostAncestorInPublication(pub->oid, ancestors,
														   &found);

			if (OidIsValid(ancestor))
				relid = ancestor;
			else
				found = 0;
		}
	}
	if (level)
		*level = found;
	return relid;
}

void
replicant_partition_root_consider(ReplicantPartitionRoot *root, Publication *pub,
								  Relation rel, List *ancestors)
{
	int level;
	Oid relid = replicant_partition_root_published_as(pub, rel, ancestors, &level);

	if (!OidIsValid(root->relid) || level > root->level)
	{
		root->relid = relid;
		root->level = level;
	}
}

bool
replicant_partition_root_publishes_parent(Publication *pub, Relation rel)
{
	return rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE || pub->pubviaroot;
}

Relation
replicant_partition_root_open(ReplicantPartitionRoot *root, Relation rel,
							  MemoryContext mcxt)
{
	Relation target;
	MemoryContext old;

	if (!OidIsValid(root->relid) || root->relid == RelationGetRelid(rel))
		return rel;
	target = RelationIdGetRelation(root->relid);
	if (!RelationIsValid(target))
		elog(ERROR, "could not open relation with OID %u", root->relid);
	if (root->desc == NULL)
	{
		/* With defaults: a stored old row may lack columns added later. */
		old = MemoryContextSwitchTo(mcxt);
		root->desc = CreateTupleDescCopyConstr(RelationGetDescr(target));
		root->leaf_desc = CreateTupleDescCopyConstr(RelationGetDescr(rel));
		root->map = convert_tuples_by_name(root->leaf_desc, root->desc);
		MemoryContextSwitchTo(old);
	}
	return target;
}

void
replicant_partition_root_close(Relation target, Relation rel)
{
	if (target != rel)
		RelationClose(target);
}

void
replicant_partition_root_reset(ReplicantPartitionRoot *root)
{
	if (root->map)
		free_conversion_map(root->map);
	if (root->desc)
		FreeTupleDesc(root->desc);
	if (root->leaf_desc)
		FreeTupleDesc(root->leaf_desc);
	memset(root, 0, sizeof(ReplicantPartitionRoot));
}

TupleDesc
replicant_partition_root_desc(ReplicantPartitionRoot *root, Relation rel)
{
	return root->desc ? root->desc : RelationGetDescr(rel);
}

HeapTuple
replicant_partition_root_tuple(ReplicantPartitionRoot *root, HeapTuple tuple)
{
	if (tuple == NULL || root->map == NULL)
		return tuple;
	return execute_attr_map_tuple(tuple, root->map);
}

bool
replicant_partition_root_skips_truncate(ReplicantPartitionRoot *root, Relation rel)
{
	return rel->rd_rel->relispartition && OidIsValid(root->relid) &&
		   root->relid != RelationGetRelid(rel);
}

/* Whether pub publishes rel (listed, in a listed schema, or via an ancestor). */
static bool
publishes(Publication *pub, Relation rel, List *rel_pubs, List *schema_pubs,
		  List *ancestors)
{
	return pub->alltables ||
		   list_member_oid(rel_pubs, pub->oid) ||
		   list_member_oid(schema_pubs, pub->oid) ||
		   (ancestors != NIL &&
			OidIsValid(GetTopMostAncestorInPublication(pub->oid, ancestors, NULL)));
}

void
replicant_partition_lock_ancestors(Oid relid, LOCKMODE lockmode)
{
	List *ancestors;

	if (!get_rel_relispartition(relid))
		return;
	/* Parent first, topmost last: lock in reverse. */
	ancestors = get_partition_ancestors(relid);
	for (int i = list_length(ancestors) - 1; i >= 0; i--)
		LockRelationOid(list_nth_oid(ancestors, i), lockmode);
	list_free(ancestors);
}

Relation
replicant_partition_root_open_for_read(Relation leaf, List *publication_names,
									   LOCKMODE lockmode)
{
	ReplicantPartitionRoot root = {0};
	Oid relid = RelationGetRelid(leaf);
	List *ancestors;
	List *rel_pubs;
	List *schema_pubs;
	ListCell *lc;

	if (!leaf->rd_rel->relispartition)
		return leaf;

	ancestors = get_partition_ancestors(relid);
	rel_pubs = GetRelationPublications(relid);
	schema_pubs = GetSchemaPublications(RelationGetNamespace(leaf));
	foreach(lc, publication_names)
	{
		Publication *pub = GetPublicationByName(lfirst(lc), true);

		if (pub != NULL && publishes(pub, leaf, rel_pubs, schema_pubs, ancestors))
			replicant_partition_root_consider(&root, pub, leaf, ancestors);
	}
	if (!OidIsValid(root.relid) || root.relid == relid)
		return leaf;
	return table_open(root.relid, lockmode);
}

char *
replicant_partition_root_select_list(Relation leaf, Relation target)
{
	TupleDesc desc = RelationGetDescr(target);
	StringInfoData buf;
	int i;

	if (target == leaf)
		return "*";
	initStringInfo(&buf);
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		if (buf.len > 0)
			appendStringInfoString(&buf, ", ");
		appendStringInfoString(&buf, quote_identifier(NameStr(att->attname)));
	}
	return buf.data;
}

TupleConversionMap *
replicant_partition_root_read_map(Relation leaf, Relation target)
{
	if (target == leaf)
		return NULL;
	return convert_tuples_by_name(RelationGetDescr(leaf), RelationGetDescr(target));
}
