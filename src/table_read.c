/*
 * table_read.c
 *		What reading a published table as the pipeline's owner depends on,
 *		shared by the initial snapshot and backfills: whether the owner may
 *		read it whole, running its table owner's code only as that owner,
 *		how many rows it holds, and whether reading it in block order can
 *		miss what an update moved.
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
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/rls.h"

#include "catalog.h"
#include "table_read.h"

char *
replicant_table_read_denied(Relation rel, Oid role)
{
	if (pg_class_aclcheck(RelationGetRelid(rel), role, ACL_SELECT) != ACLCHECK_OK)
		return psprintf("pipeline owner has no SELECT privilege on table \"%s\"",
						RelationGetRelationName(rel));
	if (check_enable_rls(RelationGetRelid(rel), role, true) == RLS_ENABLED)
		return psprintf("table \"%s\" has row-level security that the pipeline owner does not bypass",
						RelationGetRelationName(rel));
	return NULL;
}

void
replicant_table_owner_enter(Relation rel, ReplicantTableOwnerScope *scope)
{
	GetUserIdAndSecContext(&scope->saved_userid, &scope->saved_sec_context);
	SetUserIdAndSecContext(rel->rd_rel->relowner,
						   scope->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION | SECURITY_NOFORCE_RLS);
	scope->guc_level = replicant_pin_search_path();
}

void
replicant_table_owner_leave(ReplicantTableOwnerScope *scope)
{
	/* Whatever the owner's code set, even with a plain SET, is undone. */
	AtEOXact_GUC(false, scope->guc_level);
	SetUserIdAndSecContext(scope->saved_userid, scope->saved_sec_context);
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
