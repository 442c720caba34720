/*
 * sink_ddl.h
 *		The CREATE TABLE statements of the ClickHouse tables that format
 *		'clickhouse' writes to: what replicant.sink_ddl() prints and what a
 *		pipeline with create_tables runs.
 */
#ifndef REPLICANT_SINK_DDL_H
#define REPLICANT_SINK_DDL_H

#include "nodes/pg_list.h"
#include "utils/array.h"
#include "utils/relcache.h"

#include "destination.h"
#include "pipeline.h"
#include "shmem.h"

/* One target: the relation rows are delivered as, and its statement. */
typedef struct ReplicantSinkTable
{
	Oid relid;   /* the delivered relation (a partition root, or the table) */
	char *table; /* its name, as the format names the target */
	char *ddl;   /* CREATE TABLE [IF NOT EXISTS] ... */
} ReplicantSinkTable;

/*
 * The targets of what the publications (a text[]) deliver, one per
 * delivered relation, in OID order, allocated in mcxt.  With
 * if_not_exists the statements say IF NOT EXISTS.  Raises an error when a
 * delivered column has the name of one the format adds (_version,
 * _deleted).  Needs an SPI connection.
 */
extern List *replicant_sink_ddl_tables(ArrayType *publications, bool if_not_exists,
									   MemoryContext mcxt);

/*
 * The names of the key columns of target, which the rows of leaf are
 * delivered as under the publications (names): what the stream's "key"
 * carries and the target's ORDER BY, in column order; NIL when it has none
 * (an insert-only target).  Runs in a transaction.
 */
extern List *replicant_sink_ddl_key_columns(Relation leaf, Relation target, List *names);

/*
 * create_tables => true: runs CREATE TABLE IF NOT EXISTS for each target of
 * the pipeline against the destination's sink, before anything is
 * delivered; an existing table is left as it is.  Retries what fails
 * without an answer as deliveries do, and the few ClickHouse error codes
 * that pass by themselves.  Any other refusal halts the pipeline (a 410
 * disables it) when the destination is its only live one (alone); else
 * returns the refusal's value-free reason, for the caller to halt the
 * destination alone.  NULL once every table exists.  Call in the pipeline
 * worker, outside a transaction.
 */
extern char *replicant_sink_ddl_create(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
									   const ReplicantDestination *destination, bool alone);

#endif /* REPLICANT_SINK_DDL_H */
