/*
 * publication_rules.c
 *		Whether a publication delivers a relation, and with which row filters
 *		and column lists: PostgreSQL's pgoutput rules, kept apart from the
 *		state that uses them.
 *
 * Nothing here caches: decoding asks through publication.c's relation
 * cache, under the historic snapshot of the change being decoded;
 * snapshots, backfills and the SQL functions ask under the current catalog.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_publication.h"
#include "catalog/pg_publication_namespace.h"
#include "catalog/pg_publication_rel.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/catcache.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "partition_root.h"
#include "publication_rules.h"
#include "pubfilter.h"

/* FOR ALL TABLES, or rel's schema: no row filter, no column list. */
static bool
whole_table(Publication *pub, List *schema_pubs)
{
	return pub->alltables || list_member_oid(schema_pubs, pub->oid);
}

bool
replicant_publication_publishes(Publication *pub, Relation rel, List *rel_pubs,
								List *schema_pubs, List *ancestors)
{
	if (whole_table(pub, schema_pubs) || list_member_oid(rel_pubs, pub->oid))
		return true;
	return ancestors != NIL &&
		   OidIsValid(GetTopMostAncestorInPublication(pub->oid, ancestors, NULL));
}

/*
 * Adds to filter the row filters and column lists of those of pubs that
 * publish rel as target (rel itself, or the root it is delivered as): as
 * pgoutput, only the publications through which the relation is published
 * as what it is delivered as count.  They come from target's FOR TABLE
 * entry, unless a publication has the whole table anyway: FOR ALL TABLES,
 * or TABLES IN SCHEMA of target's schema.  pgoutput asks for the schema of
 * the relation it publishes as (pgoutput_row_filter_init), not rel's: a
 * partition in a schema the publication has whole, published through a
 * root in another schema that it lists with a filter, gets the root's
 * filter.  rel_pubs and schema_pubs are rel's.
 */
void
replicant_publication_add_filters(ReplicantPubFilter *filter, Relation rel, Relation target,
								  List *pubs, List *rel_pubs, List *schema_pubs, List *ancestors)
{
	Oid target_relid = RelationGetRelid(target);
	List *target_schema_pubs = schema_pubs;
	ListCell *lc;

	if (RelationGetNamespace(target) != RelationGetNamespace(rel))
		target_schema_pubs = GetSchemaPublications(RelationGetNamespace(target));

	foreach(lc, pubs)
	{
		Publication *pub = lfirst(lc);

		if (!replicant_partition_root_publishes_parent(pub, rel) ||
			!replicant_publication_publishes(pub, rel, rel_pubs, schema_pubs, ancestors) ||
			replicant_partition_root_published_as(pub, rel, ancestors, NULL) != target_relid)
			continue;
		replicant_pubfilter_add(filter, target,
								whole_table(pub, target_schema_pubs) ? InvalidOid : target_relid,
								pub);
	}
}

char *
replicant_publication_read_filter(Relation rel, Relation target, List *names,
								  ReplicantPubFilter **filter)
{
	Oid relid = RelationGetRelid(rel);
	List *pubs = NIL;
	List *ancestors = NIL;
	ListCell *lc;

	*filter = replicant_pubfilter_create(CurrentMemoryContext);
	if (rel->rd_rel->relispartition)
		ancestors = get_partition_ancestors(relid);
	foreach(lc, names)
	{
		Publication *pub = GetPublicationByName(lfirst(lc), true);

		if (pub)
			pubs = lappend(pubs, pub);
	}
	replicant_publication_add_filters(*filter, rel, target, pubs, GetRelationPublications(relid),
									  GetSchemaPublications(RelationGetNamespace(rel)), ancestors);
	return (*filter)->conflict;
}

void
replicant_publication_catalog_refresh(void)
{
	AcceptInvalidationMessages();
	CatalogCacheFlushCatalog(PublicationRelationId);
	CatalogCacheFlushCatalog(PublicationRelRelationId);
	CatalogCacheFlushCatalog(PublicationNamespaceRelationId);
	InvalidateCatalogSnapshot();
}

/* Whether one of pubs delivers rel. */
static bool
any_publishes(List *pubs, Relation rel)
{
	Oid relid = RelationGetRelid(rel);
	List *rel_pubs = GetRelationPublications(relid);
	List *schema_pubs = GetSchemaPublications(RelationGetNamespace(rel));
	List *ancestors = rel->rd_rel->relispartition ? get_partition_ancestors(relid) : NIL;
	ListCell *lc;

	foreach(lc, pubs)
	{
		Publication *pub = lfirst(lc);

		if (replicant_partition_root_publishes_parent(pub, rel) &&
			replicant_publication_publishes(pub, rel, rel_pubs, schema_pubs, ancestors))
			return true;
	}
	return false;
}

char *
replicant_publication_target_taken(Relation rel, Relation target, List *pubs,
								   Oid skip_namespace, MemoryContext mcxt)
{
	Relation classrel = table_open(RelationRelationId, AccessShareLock);
	const char *name = RelationGetRelationName(target);
	NameData key_name;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple tuple;
	char *reason = NULL;

	namestrcpy(&key_name, name);
	ScanKeyInit(&key, Anum_pg_class_relname, BTEqualStrategyNumber, F_NAMEEQ,
				NameGetDatum(&key_name));
	scan = systable_beginscan(classrel, ClassNameNspIndexId, true, NULL, 1, &key);
	while (reason == NULL && HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_class other = (Form_pg_class) GETSTRUCT(tuple);
		Relation other_rel;

		if (other->relnamespace == RelationGetNamespace(target) ||
			other->relnamespace == skip_namespace || other->oid == RelationGetRelid(rel) ||
			(other->relkind != RELKIND_RELATION && other->relkind != RELKIND_PARTITIONED_TABLE))
			continue;
		other_rel = RelationIdGetRelation(other->oid);
		if (RelationIsValid(other_rel) && any_publishes(pubs, other_rel))
			reason = MemoryContextStrdup(mcxt, get_namespace_name(other->relnamespace));
		if (RelationIsValid(other_rel))
			RelationClose(other_rel);
	}
	systable_endscan(scan);
	table_close(classrel, AccessShareLock);
	return reason;
}

List *
replicant_publication_published_tables(ArrayType *publications, bool delivered_only)
{
	Oid argtypes[2] = {TEXTARRAYOID, BOOLOID};
	Datum args[2] = {PointerGetDatum(publications), BoolGetDatum(delivered_only)};
	List *relids = NIL;
	uint64 i;

	if (SPI_execute_with_args("SELECT DISTINCT c.oid" REPLICANT_PUBLISHED_LEAVES
							  " WHERE p.pubname OPERATOR(pg_catalog.=) ANY ($1)"
							  "   AND (NOT $2 OR (n.nspname OPERATOR(pg_catalog.<>) 'replicant'"
							  "                   AND c.relkind OPERATOR(pg_catalog.=) 'r'))"
							  " ORDER BY c.oid",
							  2, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	for (i = 0; i < SPI_processed; i++)
	{
		bool isnull;

		relids = lappend_oid(relids, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																	SPI_tuptable->tupdesc, 1, &isnull)));
	}
	return relids;
}
