/*
 * resync_table.c
 *		What a resync's markers say of one table (resync_table.h).
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/table.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "partition_root.h"
#include "resync_table.h"
#include "sink_ddl.h"

/*
 * The names a planned table's rows are delivered under, in mcxt: its
 * root's when published via the partition root; table is NULL once the
 * table was dropped.  With key, also the key columns of what it is
 * delivered as (sink_ddl.h), for a resync's sweep.
 */
void
replicant_resync_delivered_names(ReplicantRelation *relation, List **key, Oid relid, List *publications,
								 MemoryContext mcxt)
{
	Relation rel;
	Relation target;
	MemoryContext old;

	replicant_partition_lock_ancestors(relid, AccessShareLock);
	rel = try_table_open(relid, AccessShareLock);
	relation->schema = relation->table = NULL;
	if (rel == NULL)
		return;
	target = replicant_partition_root_open_for_read(rel, publications, AccessShareLock);
	old = MemoryContextSwitchTo(mcxt);
	relation->schema = get_namespace_name(RelationGetNamespace(target));
	relation->table = pstrdup(RelationGetRelationName(target));
	if (key != NULL)
		*key = replicant_sink_ddl_key_columns(rel, target, publications);
	MemoryContextSwitchTo(old);
	if (target != rel)
		table_close(target, AccessShareLock);
	table_close(rel, AccessShareLock);
}

/*
 * Whether the publications delete what a resync's sweep would remove from
 * the table delivered as relation: rows deleted or truncated while no slot
 * kept the changes.  A sweep where they publish no delete or no truncate
 * would delete at the sink what they chose to keep there.
 */
bool
replicant_resync_sweeps(const ReplicantRelation *relation, List *publications, bool *published)
{
	Oid argtypes[3] = {TEXTARRAYOID, TEXTOID, TEXTOID};
	Datum args[3];
	Datum *pubs = palloc(sizeof(Datum) * list_length(publications));
	ListCell *lc;
	int n = 0;
	bool isnull;

	foreach(lc, publications)
		pubs[n++] = CStringGetTextDatum(lfirst(lc));
	args[0] = PointerGetDatum(construct_array(pubs, n, TEXTOID, -1, false, TYPALIGN_INT));
	args[1] = CStringGetTextDatum(relation->schema);
	args[2] = CStringGetTextDatum(relation->table);
	if (SPI_execute_with_args("SELECT coalesce(bool_or(p.pubdelete) AND bool_or(p.pubtruncate), false), count(*) > 0"
							  "  FROM pg_catalog.pg_publication p"
							  "  JOIN pg_catalog.pg_publication_tables t ON t.pubname OPERATOR(pg_catalog.=) p.pubname"
							  " WHERE p.pubname OPERATOR(pg_catalog.=) ANY ($1)"
							  "   AND t.schemaname OPERATOR(pg_catalog.=) $2 AND t.tablename OPERATOR(pg_catalog.=) $3",
							  3, argtypes, args, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the actions of the publications");
	if (published != NULL)
		*published = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}
