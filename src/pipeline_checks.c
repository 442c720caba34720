/*
 * pipeline_checks.c
 *		What create_pipeline and alter_pipeline check against the catalogs
 *		before they change anything: the owner may log in, read every
 *		published table and receive messages; the tables suit the format.
 *
 * Rules kept with other files: docs/internals.md §9 (privileges).  The
 * messages name tables and roles, never a row's values.
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rls.h"
#include "utils/syscache.h"

#include "pipeline.h"
#include "pipeline_checks.h"
#include "publication_rules.h"
#include "sink_ddl.h"

void
replicant_pipeline_checks_owner_may_receive_messages(Oid owner)
{
	if (!has_rolreplication(owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg(REPLICANT_MESSAGES_NEED_REPLICATION),
				 errdetail("A pipeline with messages receives every message emitted in the database."),
				 errhint("Grant the pipeline owner REPLICATION, or leave messages off.")));
}

void
replicant_pipeline_checks_owner_can_login(Oid owner)
{
	HeapTuple tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(owner));
	bool can_login;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for role %u", owner);
	can_login = ((Form_pg_authid) GETSTRUCT(tuple))->rolcanlogin;
	ReleaseSysCache(tuple);
	if (!can_login)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" cannot own a pipeline because it cannot log in",
						GetUserNameFromId(owner, false)),
				 errdetail("Pipeline workers connect as the pipeline's owner.")));
}

/*
 * What the worker would halt on at the table's first change, refused now:
 * the owner must be able to read every published table, past row-level
 * security.
 */
void
replicant_pipeline_checks_owner_reads_tables(Oid owner, List *relids)
{
	ListCell *lc;

	foreach(lc, relids)
	{
		Oid relid = lfirst_oid(lc);

		if (pg_class_aclcheck(relid, owner, ACL_SELECT) != ACLCHECK_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("role \"%s\" cannot read published table \"%s\"",
							GetUserNameFromId(owner, false), get_rel_name(relid)),
					 errdetail("The pipeline's worker reads changes as its owner, the role creating it."),
					 errhint("Grant SELECT on the table to the role, or leave the table out of the publication.")));
		if (check_enable_rls(relid, owner, true) == RLS_ENABLED)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("table \"%s\" has row-level security that role \"%s\" does not bypass",
							get_rel_name(relid), GetUserNameFromId(owner, false)),
					 errdetail("A pipeline must deliver every row, so its owner must bypass row-level security.")));
	}
}

/* An oid[] of the list's OIDs. */
static ArrayType *
oid_array(List *oids)
{
	Datum *elems = palloc(sizeof(Datum) * Max(list_length(oids), 1));
	ListCell *lc;
	int n = 0;

	foreach(lc, oids)
		elems[n++] = ObjectIdGetDatum(lfirst_oid(lc));
	return construct_array(elems, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT);
}

/*
 * PostgreSQL refuses UPDATE and DELETE on a table published for them that
 * has no replica identity; say so now rather than when the application's
 * first update fails.
 */
void
replicant_pipeline_checks_warn_without_identity(ArrayType *pubs)
{
	Oid argtypes[1] = {TEXTARRAYOID};
	Datum args[1] = {PointerGetDatum(pubs)};
	bool isnull;
	Datum changing;
	List *relids;
	uint64 i;

	if (SPI_execute_with_args("SELECT pg_catalog.array_agg(p.pubname::pg_catalog.text)"
							  "  FROM pg_catalog.pg_publication p"
							  " WHERE p.pubname OPERATOR(pg_catalog.=) ANY ($1) AND (p.pubupdate OR p.pubdelete)",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	changing = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return;
	relids = replicant_publication_published_tables(DatumGetArrayTypeP(changing), false);
	if (relids == NIL)
		return;
	argtypes[0] = OIDARRAYOID;
	args[0] = PointerGetDatum(oid_array(relids));
	if (SPI_execute_with_args("SELECT n.nspname, c.relname"
							  "  FROM pg_catalog.pg_class c"
							  "  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
							  " WHERE c.oid OPERATOR(pg_catalog.=) ANY ($1)"
							  "   AND (c.relreplident OPERATOR(pg_catalog.=) 'n'"
							  "        OR (c.relreplident OPERATOR(pg_catalog.=) 'd' AND NOT EXISTS"
							  "            (SELECT FROM pg_catalog.pg_index i"
							  "              WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisprimary)))"
							  " ORDER BY 1, 2",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	for (i = 0; i < SPI_processed; i++)
		ereport(WARNING,
				(errmsg("table \"%s.%s\" is published for updates or deletes but has no replica identity",
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2)),
				 errdetail("PostgreSQL rejects UPDATE and DELETE on the table while it is so published."),
				 errhint("Add a primary key, or set REPLICA IDENTITY USING INDEX or FULL.")));
}

/*
 * A format that needs whole rows (format.h) halts on an update that leaves
 * a TOASTed column out unless the old row holds it: name such tables now.
 */
void
replicant_pipeline_checks_warn_toast_left_out(List *relids, const char *format)
{
	Oid argtypes[1] = {OIDARRAYOID};
	Datum args[1];
	uint64 i;

	if (relids == NIL)
		return;
	args[0] = PointerGetDatum(oid_array(relids));
	if (SPI_execute_with_args("SELECT n.nspname, c.relname"
							  "  FROM pg_catalog.pg_class c"
							  "  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
							  " WHERE c.oid OPERATOR(pg_catalog.=) ANY ($1)"
							  "   AND c.relreplident OPERATOR(pg_catalog.<>) 'f'"
							  "   AND EXISTS (SELECT FROM pg_catalog.pg_attribute a"
							  "                WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0"
							  "                  AND NOT a.attisdropped AND a.attstorage OPERATOR(pg_catalog.<>) 'p')"
							  " ORDER BY 1, 2",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	for (i = 0; i < SPI_processed; i++)
		ereport(WARNING,
				(errmsg("table \"%s.%s\" has columns that can be TOASTed but not REPLICA IDENTITY FULL",
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2)),
				 errdetail("Format \"%s\" writes whole rows: an update that leaves a TOASTed column unchanged will halt the pipeline.", format),
				 errhint("Run ALTER TABLE ... REPLICA IDENTITY FULL on the table before creating the pipeline; when its replica identity is its primary key, doing so later is safe too.")));
}

/*
 * Format 'clickhouse' names each target after its table, without the
 * schema: refuse two published tables of one name, which would mix their
 * rows in one target; and a delivered column named as one the format adds
 * (sink_ddl.c raises that error).
 */
void
replicant_pipeline_checks_targets_distinct(ArrayType *publications, List *relids, const char *format)
{
	Oid argtypes[1] = {OIDARRAYOID};
	Datum args[1];

	if (relids == NIL || strcmp(format, "clickhouse") != 0)
		return;
	(void) replicant_sink_ddl_tables(publications, false, CurrentMemoryContext);
	args[0] = PointerGetDatum(oid_array(relids));
	if (SPI_execute_with_args("SELECT n1.nspname, c1.relname, n2.nspname"
							  "  FROM pg_catalog.pg_class c1"
							  "  JOIN pg_catalog.pg_class c2 ON c2.relname OPERATOR(pg_catalog.=) c1.relname"
							  "   AND c2.oid OPERATOR(pg_catalog.>) c1.oid"
							  "  JOIN pg_catalog.pg_namespace n1 ON n1.oid OPERATOR(pg_catalog.=) c1.relnamespace"
							  "  JOIN pg_catalog.pg_namespace n2 ON n2.oid OPERATOR(pg_catalog.=) c2.relnamespace"
							  " WHERE c1.oid OPERATOR(pg_catalog.=) ANY ($1) AND c2.oid OPERATOR(pg_catalog.=) ANY ($1)"
							  " ORDER BY 1, 2, 3 LIMIT 1",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tables \"%s.%s\" and \"%s.%s\" would both go to ClickHouse table `%s`",
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2)),
				 errdetail("Format \"clickhouse\" names each target after its table, without the schema."),
				 errhint("Publish only one of them to this pipeline.")));
}

/*
 * create_tables => true: only format 'clickhouse' has targets to create
 * (sink_ddl.c).
 */
void
replicant_pipeline_checks_create_tables(bool create_tables, const char *format)
{
	if (create_tables && strcmp(format, "clickhouse") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("create_tables needs format \"clickhouse\""),
				 errdetail("Format \"%s\" has no target tables to create.", format)));
}
