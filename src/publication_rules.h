/*
 * publication_rules.h
 *		Whether a publication delivers a relation, and with which row filters
 *		and column lists (PostgreSQL's pgoutput rules); nothing cached.
 */
#ifndef REPLICANT_PUBLICATION_RULES_H
#define REPLICANT_PUBLICATION_RULES_H

#include "catalog/pg_publication.h"
#include "nodes/pg_list.h"
#include "utils/array.h"
#include "utils/relcache.h"

struct ReplicantPubFilter;

/*
 * Whether pub delivers rel: FOR ALL TABLES, rel's schema, rel itself or (as
 * a partition) an ancestor listed.  rel_pubs and schema_pubs are rel's
 * (GetRelationPublications, GetSchemaPublications), ancestors its partition
 * ancestors (NIL when it is none).
 */
extern bool replicant_publication_publishes(Publication *pub, Relation rel, List *rel_pubs,
											List *schema_pubs, List *ancestors);

/*
 * Adds to filter the row filters and column lists of those of pubs that
 * publish rel as target (rel itself, or the root it is delivered as).
 */
extern void replicant_publication_add_filters(struct ReplicantPubFilter *filter, Relation rel,
											  Relation target, List *pubs, List *rel_pubs,
											  List *schema_pubs, List *ancestors);

/*
 * What a snapshot or backfill of rel, delivered as target (rel itself or
 * its partition root), reads under these publications (by name): *filter,
 * in a child of the current memory context, holds the row filter over
 * target's columns and the published columns (NULL: every live column);
 * free it with replicant_pubfilter_free.  Returns a value-free reason when
 * the server would refuse to synchronize the table, else NULL.  Runs in a
 * transaction, outside decoding.
 */
extern char *replicant_publication_read_filter(Relation rel, Relation target,
											   List *publication_names,
											   struct ReplicantPubFilter **filter);

/*
 * Makes the publications' catalog rows be read anew, under a catalog
 * snapshot taken after the caller's latest snapshot: cached ones, or the
 * catalog snapshot they were read under, may predate it (ALTER PUBLICATION
 * takes no lock that a reader's conflicts with).  Call before
 * replicant_partition_root_open_for_read and
 * replicant_publication_read_filter when what they say must be at least as
 * new as the data read.
 */
extern void replicant_publication_catalog_refresh(void);

/*
 * For a format that names targets without the schema: the schema of another
 * table of target's name, outside target's schema and skip_namespace, that
 * one of pubs delivers too (its rows would share the target), copied into
 * mcxt; else NULL.  Asked of the catalog, not of the changes seen so far,
 * so a pair holds whichever table changes.
 */
extern char *replicant_publication_target_taken(Relation rel, Relation target, List *pubs,
												Oid skip_namespace, MemoryContext mcxt);

/*
 * The relations pg_publication_tables lists for the publications (a text[]),
 * a partitioned table standing for its leaf partitions, in OID order, in
 * CurrentMemoryContext; needs an SPI connection.  With
 * delivered_only, only what a pipeline delivers: ordinary tables (leaf
 * partitions, not their parents) outside replicant's own schema.
 */
extern List *replicant_publication_published_tables(ArrayType *publications,
													bool delivered_only);

#endif /* REPLICANT_PUBLICATION_RULES_H */
