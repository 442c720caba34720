/*
 * table_read.c
 *		What reading a published table as the pipeline's owner depends on,
 *		shared by the initial snapshot and backfills: whether the owner may
 *		read it whole, how many rows it holds, and whether reading it in
 *		block order can miss what an update moved.
 *
 * Rules kept with other files: docs/internals.md §9 (privileges: who runs
 * what as whom).
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "miscadmin.h"
#include "optimizer/plancat.h"
#include "storage/bufmgr.h"
#include "utils/acl.h"
#include "utils/rel.h"
#include "utils/rls.h"

#include "table_read.h"

char *
replicant_table_read_denied(Relation rel)
{
	if (pg_class_aclcheck(RelationGetRelid(rel), GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		return psprintf("pipeline owner has no SELECT privilege on table \"%s\"",
						RelationGetRelationName(rel));
	if (check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_ENABLED)
		return psprintf("table \"%s\" has row-level security that the pipeline owner does not bypass",
						RelationGetRelationName(rel));
	return NULL;
}

int64
replicant_table_estimate_rows(Relation rel)
{
	BlockNumber pages;
	double tuples;
	double allvisfrac;

	if (rel->rd_rel->reltuples >= 0)
		return (int64) rel->rd_rel->reltuples;
	/* The planner assumes ten pages for an empty table; it has none. */
	if (RelationGetNumberOfBlocks(rel) == 0)
		return 0;
	estimate_rel_size(rel, NULL, &pages, &tuples, &allvisfrac);
	return (int64) tuples;
}

bool
replicant_table_can_leave_toast_unchanged(Relation rel)
{
	TupleDesc desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && att->attlen == -1 && att->attstorage != TYPSTORAGE_PLAIN)
			return true;
	}
	return false;
}
