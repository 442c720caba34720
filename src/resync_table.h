/*
 * resync_table.h
 *		What a resync's markers say of one table: the names its rows are
 *		delivered under, its target's key columns, and whether its sink may
 *		sweep it (snapshot.c for a pipeline's resync, fanout_reads.c for a
 *		destination's).
 */
#ifndef REPLICANT_RESYNC_TABLE_H
#define REPLICANT_RESYNC_TABLE_H

#include "nodes/pg_list.h"
#include "utils/palloc.h"

#include "change.h"

/*
 * The names the rows of relid (a planned table) are delivered under, in
 * mcxt: its root's when published via the partition root; table is NULL
 * once the table was dropped.  With key, also the key columns of what it
 * is delivered as (sink_ddl.h), for a sweep.  In a transaction.
 */
extern void replicant_resync_delivered_names(ReplicantRelation *relation, List **key, Oid relid,
											 List *publications, MemoryContext mcxt);

/*
 * Whether a resync's sweep of the table delivered as relation may remove
 * rows: the publications publish both delete and truncate; and in
 * *published (unless NULL) whether one publishes it under that name at
 * all.  Needs SPI.
 */
extern bool replicant_resync_sweeps(const ReplicantRelation *relation, List *publications, bool *published);

#endif /* REPLICANT_RESYNC_TABLE_H */
