/*
 * partition_root.h
 *		publish_via_partition_root: under which relation a partition's rows
 *		are delivered, and their conversion to that relation's columns.
 */
#ifndef REPLICANT_PARTITION_ROOT_H
#define REPLICANT_PARTITION_ROOT_H

#include "access/htup.h"
#include "access/tupconvert.h"
#include "catalog/pg_publication.h"
#include "nodes/pg_list.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"

/*
 * The relation a published relation's changes are delivered as: itself, or
 * the topmost ancestor a publish_via_partition_root publication publishes
 * it through (the deepest such ancestor over all publications, as pgoutput
 * chooses).  Kept in a ReplicantRelInfo; desc and map live in the context
 * replicant_partition_root_open was given.
 */
typedef struct ReplicantPartitionRoot
{
	Oid relid;               /* InvalidOid: not decided yet */
	int level;               /* ancestor level of relid (0: itself) */
	TupleDesc desc;          /* relid's descriptor; NULL when rel itself */
	TupleDesc leaf_desc;     /* rel's, which map converts from */
	TupleConversionMap *map; /* rel's columns to desc's by name; NULL: same */
} ReplicantPartitionRoot;

/*
 * FROM the leaf tables behind what publications "p" publish: the table
 * pg_publication_tables lists, or each leaf partition of a partitioned
 * table it lists (under publish_via_partition_root it lists the root).
 * Leaves are read one by one, and what they read is delivered as the
 * relation the stream delivers their changes as.  Yields pg_namespace "n"
 * (of the listed table) and pg_class "c" (the leaf); the caller restricts
 * p.pubname.  The view's own source, pg_get_publication_tables(), is read
 * directly: joining the view's names back to pg_class cost a fresh
 * backend 30 ms of planning per query.
 */
#define REPLICANT_PUBLISHED_LEAVES \
	" FROM pg_catalog.pg_publication p" \
	"  CROSS JOIN LATERAL pg_catalog.pg_get_publication_tables(p.pubname) pt" \
	"  JOIN pg_catalog.pg_class listed ON listed.oid OPERATOR(pg_catalog.=) pt.relid" \
	"  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) listed.relnamespace" \
	"  LEFT JOIN LATERAL pg_catalog.pg_partition_tree(listed.oid) leaf ON leaf.isleaf" \
	"  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) coalesce(leaf.relid, listed.oid)"

/*
 * The relation pub publishes rel as (rel, or the topmost ancestor it
 * publishes via the root) and, if level is not NULL, that ancestor's level
 * (0: rel itself).  ancestors: rel's, or NIL.
 */
extern Oid replicant_partition_root_published_as(Publication *pub, Relation rel,
												 List *ancestors, int *level);

/* Takes pub, which publishes rel, into account (ancestors: rel's, or NIL). */
extern void replicant_partition_root_consider(ReplicantPartitionRoot *root,
											  Publication *pub, Relation rel,
											  List *ancestors);

/*
 * Whether pub delivers changes of rel, a partitioned table, as its own:
 * only through the root; otherwise its partitions' changes are delivered.
 */
extern bool replicant_partition_root_publishes_parent(Publication *pub, Relation rel);

/*
 * Opens the relation rel is delivered as (rel itself when it is not
 * published via an ancestor) and prepares root's descriptor and column map
 * in mcxt.
 * Close it with replicant_partition_root_close.
 */
extern Relation replicant_partition_root_open(ReplicantPartitionRoot *root, Relation rel,
											  MemoryContext mcxt);
extern void replicant_partition_root_close(Relation target, Relation rel);

/* Frees what root holds and forgets the decision. */
extern void replicant_partition_root_reset(ReplicantPartitionRoot *root);

/* The descriptor rel's changes are encoded with. */
extern TupleDesc replicant_partition_root_desc(ReplicantPartitionRoot *root, Relation rel);

/* tuple (of rel) in the delivered relation's columns; NULL stays NULL. */
extern HeapTuple replicant_partition_root_tuple(ReplicantPartitionRoot *root, HeapTuple tuple);

/*
 * Whether a TRUNCATE of rel is left out: a partition delivered as an
 * ancestor (pgoutput sends a truncate only for the relation it publishes
 * as, so truncating one partition alone does not reach subscribers).
 */
extern bool replicant_partition_root_skips_truncate(ReplicantPartitionRoot *root, Relation rel);

/*
 * Takes lockmode on relid's partition ancestors, the topmost first, as
 * PostgreSQL locks a partition tree (parents before children: ALTER
 * TABLE, find_all_inheritors).  Whoever opens a partition and then the
 * root it is published via (replicant_partition_root_open_for_read) calls
 * this before opening the partition, or it deadlocks with DDL on the root.
 */
extern void replicant_partition_lock_ancestors(Oid relid, LOCKMODE lockmode);

/*
 * Snapshot and backfill reads: opens (with lockmode) the relation the rows
 * of leaf are delivered as under the named publications: leaf itself, or
 * the partition root it is published via.
 */
extern Relation replicant_partition_root_open_for_read(Relation leaf, List *publication_names,
													   LOCKMODE lockmode);

/* The select list that reads leaf's rows in target's columns (by name). */
extern char *replicant_partition_root_select_list(Relation leaf, Relation target);

/*
 * The map that converts leaf's tuples, read from its heap, to target's
 * columns (by name); NULL when they line up already.
 */
extern TupleConversionMap *replicant_partition_root_read_map(Relation leaf, Relation target);

#endif /* REPLICANT_PARTITION_ROOT_H */
