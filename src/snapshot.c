/*
 * snapshot.c
 *		Initial snapshots: the published tables' existing rows, read under
 *		the snapshot of the slot's consistent point, before streaming starts.
 *
 * The pipeline worker plans the snapshot (one replicant.backfills row per
 * table, its heap cut into block-range shards in replicant.snapshot_shards),
 * sends each table's "first" marker, then creates the slot in a REPEATABLE
 * READ transaction and exports that transaction's snapshot, which is the
 * slot's consistent point (as CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT
 * does for a walsender).  Shard workers import it, as pg_dump -j does, and
 * claim shards; each reads its shard in bounded windows of blocks with a
 * TID range scan of the heap (what ctid >= '(lo,0)' AND ctid < '(hi,0)'
 * plans to, without the executor), deforms each tuple in the columns it is
 * delivered in, applies the publications' row filter with the stream's
 * evaluator, encodes the row with the stream's encoder and POSTs the
 * batches, recording progress after every window.  When every shard is done the exporter commits, each table gets
 * its "last" marker, and the worker streams from the consistent point: no
 * change is missed and, uninterrupted, none is delivered twice.
 *
 * After a crash the slot already exists: the remaining shards are read under
 * a fresh snapshot and the stream still starts at the slot's original
 * point, so the sink converges (duplicates possible, loss never).  A table
 * read in part whose updates can leave TOASTed columns unchanged starts
 * over (restart_partly_read_tables says why).  Each
 * window checks the table's relfilenode against the one stamped at plan
 * time: after VACUUM FULL, CLUSTER or TRUNCATE the table's shards start over
 * instead of trusting stale block positions.
 *
 * Rules kept with other files: docs/internals.md §3 (the exported snapshot
 * and its shards).
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/tupconvert.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "optimizer/plancat.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/logical.h"
#include "replication/slot.h"
#include "replication/snapbuild.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"

#include "batch.h"
#include "catalog.h"
#include "checkpoint.h"
#include "compat.h"
#include "delivery.h"
#include "encoder.h"
#include "fault.h"
#include "format.h"
#include "partition_root.h"
#include "publication.h"
#include "pubfilter.h"
#include "row_key.h"
#include "replicant.h"
#include "runs.h"
#include "slot.h"
#include "snapshot.h"
#include "stop_signal.h"
#include "table_read.h"
#include "transport.h"

/*
 * Blocks read per transaction, and windows per shard claimed by one worker:
 * one, so that parallel workers end close together, since the last shard
 * claimed is all that one worker may still read while the others idle
 * (2 workers on bench/'s 2M-row table ended 37-100 ms apart with shards of
 * two windows, 9-38 ms with one).  The last shard is open-ended and read
 * window by window to the table's end.
 */
#define WINDOW_BLOCKS 1024
#define SHARD_WINDOWS 1
/* Rows encoded between two looks at the POST in flight (a power of 2). */
#define ROWS_PER_PUMP 128
/* A shard's blocks, as text for the SQL that plans the shards. */
#define SHARD_BLOCKS_SQL CppAsString2(WINDOW_BLOCKS *SHARD_WINDOWS)

typedef struct ShardArgs
{
	Oid dboid;
	Oid owner;
	int32 pipeline_id;
	int32 slot_index;
	uint32 generation;
	int32 worker; /* its number, < REPLICANT_MAX_SNAPSHOT_WORKERS */
	char snapshot_name[64];
} ShardArgs;

/* One claimed shard. */
typedef struct Shard
{
	int64 backfill_id;
	int32 shard;
	Oid relid;
	char relname[NAMEDATALEN]; /* for messages, "" if dropped */
	Oid relfilenode;
	int64 next_block;
	int64 hi_block; /* -1: to the end of the table */
} Shard;

/*
 * In a shard worker: its pipeline's slot and its number among the
 * pipeline's shard workers (-1 in the pipeline worker).
 */
static ReplicantPipelineSlot *ShardSlot = NULL;
static int ShardNumber = -1;

static SPIPlanPtr
prepare(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr plan = SPI_prepare(sql, nargs, argtypes);

	if (plan == NULL || SPI_keepplan(plan) != 0)
		elog(ERROR, "could not prepare \"%s\"", sql);
	return plan;
}

static int64
spi_int8(int row, int col)
{
	bool isnull;
	Datum d = SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, &isnull);

	return isnull ? -1 : DatumGetInt64(d);
}

/*
 * Runs a query on the pipeline's ($1) snapshot plan; $2 is the state of a
 * table that stopped being published, which is as finished as 'done'.
 */
static void
read_plan(const char *sql, int32 pipeline_id, bool read_only)
{
	Oid argtypes[2] = {INT4OID, TEXTOID};
	Datum args[2] = {Int32GetDatum(pipeline_id),
					 CStringGetTextDatum(replicant_catalog_skipped_state())};

	if (SPI_execute_with_args(sql, 2, argtypes, args, NULL, read_only, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the snapshot plan");
}

/*
 * Planning (pipeline worker, before the slot exists)
 */

/*
 * Estimates the rows of planned tables never vacuumed or analysed (their
 * reltuples is -1) from their size, as the planner does.  Needs SPI, in the
 * transaction that planned them (not read-only: it must see the plan).
 */
static void
estimate_unanalysed(int32 pipeline_id)
{
	Oid update_types[2] = {INT8OID, INT8OID};
	Datum args[2];
	int64 *ids;
	Oid *relids;
	uint64 n;
	uint64 i;

	read_plan("SELECT b.id, b.relid FROM replicant.backfills b"
			  "  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) b.relid"
			  " WHERE b.pipeline_id = $1 AND b.kind = 'initial'"
			  "   AND c.reltuples OPERATOR(pg_catalog.<) 0::pg_catalog.float4",
			  pipeline_id, false);
	n = SPI_processed;
	ids = palloc(sizeof(int64) * (n + 1));
	relids = palloc(sizeof(Oid) * (n + 1));
	for (i = 0; i < n; i++)
	{
		bool isnull;

		ids[i] = spi_int8(i, 1);
		relids[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
	}
	for (i = 0; i < n; i++)
	{
		Relation rel = try_table_open(relids[i], AccessShareLock);

		if (rel == NULL)
			continue;
		args[0] = Int64GetDatum(replicant_table_estimate_rows(rel));
		args[1] = Int64GetDatum(ids[i]);
		table_close(rel, AccessShareLock);
		if (SPI_execute_with_args("UPDATE replicant.backfills SET rows_estimate = $1::bigint WHERE id = $2",
								  2, update_types, args, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not plan the snapshot");
	}
}

/*
 * One backfill per table; shards of SHARD_WINDOWS windows, the last one
 * open-ended so rows added behind the planned size are read too.  $1 is
 * the pipeline, $2 its publications.
 */
static void
write_plan(Oid *argtypes, Datum *args)
{
	if (SPI_execute_with_args("WITH tables AS ("
							  "  SELECT c.oid AS relid, c.relfilenode, greatest(c.reltuples, 0)::bigint AS estimate,"
							  "         pg_relation_size(c.oid) / current_setting('block_size')::bigint AS blocks" REPLICANT_PUBLISHED_LEAVES
							  "   WHERE p.pubname = ANY ($2) AND n.nspname <> 'replicant' AND c.relkind = 'r'"
							  "   GROUP BY c.oid),"
							  " planned AS ("
							  "  INSERT INTO replicant.backfills (pipeline_id, relid, kind, mode, rows_estimate, relfilenode)"
							  "  SELECT $1, relid, 'initial', 'ctid', estimate, relfilenode FROM tables"
							  "   WHERE NOT EXISTS (SELECT 1 FROM replicant.backfills b"
							  "                      WHERE b.pipeline_id = $1 AND b.kind = 'initial'"
							  "                        AND b.relid = tables.relid)"
							  "   ORDER BY relid"
							  "  RETURNING id, relid)"
							  " INSERT INTO replicant.snapshot_shards (backfill_id, shard, lo_block, hi_block, next_block)"
							  " SELECT p.id, s.n, s.n * " SHARD_BLOCKS_SQL ","
							  "        CASE WHEN s.n = s.last THEN NULL ELSE (s.n + 1) * " SHARD_BLOCKS_SQL " END,"
							  "        s.n * " SHARD_BLOCKS_SQL
							  "   FROM planned p JOIN tables t USING (relid),"
							  "        LATERAL (SELECT g AS n, t.blocks / " SHARD_BLOCKS_SQL " AS last"
							  "                   FROM generate_series(0, t.blocks / " SHARD_BLOCKS_SQL ") g) s",
							  2, argtypes, args, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not plan the snapshot");
}

/*
 * Plans the tables not planned yet: one backfill row per published table
 * and its shards; with replace, all of them anew.  Every published table
 * can be read as pgoutput publishes it (row filters, column lists and
 * partition roots are applied when its windows are read).
 */
static void
plan_snapshot(ReplicantPipeline *pipeline, bool replace)
{
	ReplicantCatalogAccess access;
	Oid argtypes[2] = {INT4OID, TEXTARRAYOID};
	Datum args[2];
	Datum *pubs;
	ListCell *lc;
	int i = 0;
	int ntables;

	pubs = palloc(sizeof(Datum) * list_length(pipeline->publications));
	foreach(lc, pipeline->publications)
		pubs[i++] = CStringGetTextDatum(lfirst(lc));
	args[0] = Int32GetDatum(pipeline->id);
	args[1] = PointerGetDatum(construct_array(pubs, i, TEXTOID, -1, false, TYPALIGN_INT));

	replicant_catalog_begin(&access);
	if (replace &&
		SPI_execute_with_args("DELETE FROM replicant.backfills"
							  " WHERE pipeline_id = $1 AND kind = 'initial'",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not clear the snapshot plan");
	ntables = list_length(replicant_publication_published_tables(DatumGetArrayTypeP(args[1]),
																 true));
	write_plan(argtypes, args);
	estimate_unanalysed(pipeline->id);
	replicant_catalog_end(&access);

	ereport(LOG,
			(errmsg_plural("replicant pipeline \"%s\" planned an initial snapshot of %d table",
						   "replicant pipeline \"%s\" planned an initial snapshot of %d tables",
						   ntables, pipeline->name, ntables)));
}

/*
 * Whether the publications deliver a table the plan lacks, as the current
 * snapshot sees them: one added between planning and the slot's creation
 * would otherwise be streamed from the slot's point with its older rows
 * never read.  Runs as the owner; reads only the catalog, under the
 * transaction's (exported) snapshot.
 */
static bool
unplanned_tables(ReplicantPipeline *pipeline, const List *planned)
{
	Datum *pubs;
	ArrayType *publications;
	ListCell *lc;
	int i = 0;
	bool missing = false;

	pubs = palloc(sizeof(Datum) * list_length(pipeline->publications));
	foreach(lc, pipeline->publications)
		pubs[i++] = CStringGetTextDatum(lfirst(lc));
	publications = construct_array(pubs, i, TEXTOID, -1, false, TYPALIGN_INT);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	foreach(lc, replicant_publication_published_tables(publications, true))
		missing = missing || !list_member_oid(planned, lfirst_oid(lc));
	PopActiveSnapshot();
	SPI_finish();
	return missing;
}

/* The tables of the pipeline's initial snapshot plan. */
static List *
planned_relids(ReplicantPipeline *pipeline)
{
	ReplicantCatalogAccess access;
	MemoryContext caller = CurrentMemoryContext;
	List *relids = NIL;
	uint64 i;

	replicant_catalog_begin(&access);
	read_plan("SELECT relid FROM replicant.backfills"
			  " WHERE pipeline_id = $1 AND kind = 'initial'",
			  pipeline->id, true);
	for (i = 0; i < SPI_processed; i++)
	{
		bool isnull;
		MemoryContext old = MemoryContextSwitchTo(caller);

		relids = lappend_oid(relids,
							 DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc, 1, &isnull)));
		MemoryContextSwitchTo(old);
	}
	replicant_catalog_end(&access);
	return relids;
}

/*
 * Snapshot batches
 */

/*
 * The names a planned table's rows are delivered under, in mcxt: its
 * root's when published via the partition root; table is NULL once the
 * table was dropped.
 */
static void
delivered_names(ReplicantRelation *relation, Oid relid, List *publications,
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
	MemoryContextSwitchTo(old);
	if (target != rel)
		table_close(target, AccessShareLock);
	table_close(rel, AccessShareLock);
}

static void
start_snapshot_body(StringInfo out, ReplicantPipeline *pipeline,
					const ReplicantRelation *relation,
					int64 backfill_id, bool first, bool last)
{
	resetStringInfo(out);
	replicant_format_of(pipeline)->snapshot_begin(out, pipeline->name, relation,
												  backfill_id, first, last);
}

/* Halts, naming relation, on anything but a 2xx; counts a delivered body. */
static void
note_snapshot_answer(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
					 const ReplicantSinkResult *result, int64 nrows, int bytes,
					 const ReplicantRelation *relation)
{
	if (result->outcome != REPLICANT_SINK_OK)
		replicant_delivery_refused(slot, pipeline, result, "snapshot batch",
								   psprintf(" (table \"%s\")", relation->table));

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->batches_delivered++;
	slot->changes_delivered += nrows;
	slot->bytes_delivered += bytes;
	/* backfill_status counts them before the window's progress is recorded */
	if (ShardNumber >= 0)
		slot->window_progress[ShardNumber].rows += nrows;
	slot->last_delivery_at = GetCurrentTimestamp();
	if (slot->state == REPLICANT_STATE_RETRYING)
		slot->state = REPLICANT_STATE_SNAPSHOTTING;
	/* Not over why another shard worker halted or disabled the pipeline. */
	if (slot->runnable)
		slot->last_error[0] = '\0';
	LWLockRelease(replicant_shmem->lock);
}

/* POSTs a snapshot body of relation; halts, naming it, on anything but a 2xx. */
static void
post_snapshot_body(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
				   ReplicantTransport *sink, StringInfo out, const char *webhook_id,
				   int64 nrows, const ReplicantRelation *relation)
{
	ReplicantMemoryBody state;
	ReplicantBody body;
	ReplicantSinkResult result;

	replicant_format_of(pipeline)->snapshot_end(out);
	replicant_body_from_buffer(&body, &state, out);
	replicant_delivery_post(slot, sink, webhook_id, &body, &result);
	note_snapshot_answer(slot, pipeline, &result, nrows, out->len, relation);
}

/*
 * Sends the "first" (or "last") marker of every initial backfill that has
 * not had it: an empty snapshot batch a sink can use to prepare (or finish)
 * the table.  "last" also marks the backfill done.
 */
static void
send_markers(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
			 ReplicantTransport *sink, bool last)
{
	ReplicantCatalogAccess access;
	Oid argtypes[2] = {INT4OID, INT8OID};
	Datum args[2];
	int64 *ids;
	ReplicantRelation *relations;
	uint64 n;
	uint64 i;
	StringInfoData out;
	MemoryContext caller = CurrentMemoryContext; /* outlives the SPI connection */

	args[0] = Int32GetDatum(pipeline->id);
	replicant_catalog_begin(&access);
	read_plan(last ?
				  "SELECT id, relid FROM replicant.backfills"
				  " WHERE pipeline_id = $1 AND kind = 'initial' AND state NOT IN ('done', $2) ORDER BY id" :
				  "SELECT id, relid FROM replicant.backfills"
				  " WHERE pipeline_id = $1 AND kind = 'initial' AND NOT first_sent ORDER BY id",
			  pipeline->id, true);
	n = SPI_processed;
	ids = MemoryContextAlloc(caller, sizeof(int64) * (n + 1));
	relations = MemoryContextAlloc(caller, sizeof(ReplicantRelation) * (n + 1));
	for (i = 0; i < n; i++)
	{
		bool isnull;
		Oid relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
												   SPI_tuptable->tupdesc, 2, &isnull));

		ids[i] = spi_int8(i, 1);
		/* A table dropped since planning has nothing left to deliver. */
		delivered_names(&relations[i], relid, pipeline->publications, caller);
	}
	replicant_catalog_end(&access);

	initStringInfo(&out);
	for (i = 0; i < n; i++)
	{
		char *webhook_id;

		if (relations[i].table != NULL)
		{
			start_snapshot_body(&out, pipeline, &relations[i], ids[i], !last, last);
			webhook_id = psprintf("%s-b" INT64_FORMAT "-%s", pipeline->name, ids[i],
								  last ? "last" : "first");
			post_snapshot_body(slot, pipeline, sink, &out, webhook_id, 0, &relations[i]);
		}

		args[1] = Int64GetDatum(ids[i]);
		replicant_catalog_begin(&access);
		if (SPI_execute_with_args(last ?
									  "UPDATE replicant.backfills SET state = 'done', finished_at = now(),"
									  " started_at = coalesce(started_at, now()) WHERE id = $2" :
									  "UPDATE replicant.backfills SET first_sent = true WHERE id = $2",
								  2, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not record snapshot progress");
		replicant_catalog_end(&access);
		replicant_shmem_note_progress(slot);
	}
}

/*
 * The exported snapshot (pipeline worker)
 */

/*
 * Creates the slot and exports the snapshot of its consistent point.  The
 * REPEATABLE READ transaction this starts must stay open until every shard
 * worker has imported the snapshot; it writes nothing.
 */
static char *
create_slot_and_export(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline)
{
	LogicalDecodingContext *ctx;
	Snapshot snap;
	char *name;
	MemoryContext caller = CurrentMemoryContext;

	CheckLogicalDecodingRequirements();
	/* Waiting would not free one: say so rather than fail in a loop. */
	if (replicant_slot_free_count() == 0)
		replicant_delivery_halt(slot, pipeline,
								psprintf("cannot create replication slot \"%s\": all replication slots are in use (max_replication_slots = %d)",
										 pipeline->slot_name,
										 max_replication_slots));
	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;

	ctx = replicant_slot_create(pipeline->slot_name,
								pipeline->failover, true);

	/* SnapBuildInitialSnapshot refuses once any catalog access set our xmin. */
	InvalidateCatalogSnapshot();
	snap = SnapBuildInitialSnapshot(ctx->snapshot_builder);
	RestoreTransactionSnapshot(snap, MyProc);
	name = ExportSnapshot(GetTransactionSnapshot());

	FreeDecodingContext(ctx);
	/* Streaming checks that nothing moved the slot from here (slot_position.h). */
	pipeline->slot_created_at = MyReplicationSlot->data.confirmed_flush;
	/* From here the transaction's xmin protects the rows, the slot the WAL. */
	ReplicationSlotPersist();
	ReplicationSlotRelease();

	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" created its slot and exported snapshot \"%s\"",
					pipeline->name, name)));
	return MemoryContextStrdup(caller, name);
}

/*
 * Starts over the tables read in part whose updates can leave TOASTed
 * columns unchanged.  Under a fresh snapshot, a row that an update moved
 * into the part already read would be read nowhere, and the stream's update
 * would bring it without those columns.  Read whole under the fresh
 * snapshot, every row is read where it is; the stream, replayed from the
 * slot's point, brings each up to date.
 */
static void
restart_partly_read_tables(ReplicantPipeline *pipeline)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline->id)};
	Datum *restart;
	int n = 0;

	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("SELECT s.backfill_id, b.relid FROM replicant.snapshot_shards s"
							  "  JOIN replicant.backfills b ON b.id OPERATOR(pg_catalog.=) s.backfill_id"
							  " WHERE b.pipeline_id OPERATOR(pg_catalog.=) $1"
							  " GROUP BY s.backfill_id, b.relid"
							  " HAVING pg_catalog.bool_or(s.done OR s.next_block OPERATOR(pg_catalog.>) s.lo_block)"
							  "    AND NOT pg_catalog.bool_and(s.done)",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the tables read in part");
	restart = palloc(Max(SPI_processed, 1) * sizeof(Datum));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool isnull;
		Oid relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
												   SPI_tuptable->tupdesc, 2, &isnull));
		/* A table dropped meanwhile is left to the shard that finds it gone. */
		Relation rel = try_relation_open(relid, AccessShareLock);

		if (rel == NULL)
			continue;
		if (replicant_table_can_leave_toast_unchanged(rel))
			restart[n++] = Int64GetDatum(spi_int8(i, 1));
		relation_close(rel, AccessShareLock);
	}
	if (n > 0)
	{
		Oid restart_types[1] = {INT8ARRAYOID};
		Datum restart_args[1] = {PointerGetDatum(construct_array(restart, n, INT8OID, sizeof(int64),
																 FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))};

		if (SPI_execute_with_args("WITH b AS (UPDATE replicant.backfills SET rows_done = 0"
								  "             WHERE id OPERATOR(pg_catalog.=) ANY ($1) RETURNING id)"
								  " UPDATE replicant.snapshot_shards s SET next_block = lo_block,"
								  "        done = false, claimed = false"
								  "   FROM b WHERE s.backfill_id OPERATOR(pg_catalog.=) b.id",
								  1, restart_types, restart_args, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not restart the tables read in part");
	}
	replicant_catalog_end(&access);
	if (n > 0)
		ereport(LOG,
				(errmsg_plural("replicant pipeline \"%s\" reads %d table read in part again from its start",
							   "replicant pipeline \"%s\" reads %d tables read in part again from their start",
							   n, pipeline->name, n)));
}

/*
 * Exports a fresh snapshot to resume an interrupted snapshot with, after
 * starting over the tables that cannot be resumed under it.
 */
static char *
export_fresh_snapshot(ReplicantPipeline *pipeline)
{
	MemoryContext caller = CurrentMemoryContext;
	char *name;

	restart_partly_read_tables(pipeline);
	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;
	name = ExportSnapshot(GetTransactionSnapshot());
	return MemoryContextStrdup(caller, name);
}

static int64
count_unfinished_shards(int32 pipeline_id, bool reset_claims)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	int64 n;

	replicant_catalog_begin(&access);
	if (reset_claims &&
		SPI_execute_with_args("UPDATE replicant.snapshot_shards s SET claimed = false"
							  "  FROM replicant.backfills b"
							  " WHERE b.id = s.backfill_id AND b.pipeline_id = $1 AND NOT s.done",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not reset snapshot shards");
	if (SPI_execute_with_args("SELECT count(*) FROM replicant.snapshot_shards s"
							  "  JOIN replicant.backfills b ON b.id = s.backfill_id"
							  " WHERE b.pipeline_id = $1 AND b.kind = 'initial' AND NOT s.done",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read snapshot shards");
	n = spi_int8(0, 1);
	replicant_catalog_end(&access);
	return n;
}

/* Whether the pipeline still has an initial snapshot (or part of one) to take. */
static bool
snapshot_pending(ReplicantPipeline *pipeline, bool *planned)
{
	ReplicantCatalogAccess access;
	int64 total;
	int64 open;

	if (strcmp(pipeline->snapshot, "initial") != 0)
		return false;
	replicant_catalog_begin(&access);
	read_plan("SELECT count(*), count(*) FILTER (WHERE state NOT IN ('done', $2))"
			  "  FROM replicant.backfills WHERE pipeline_id = $1 AND kind = 'initial'",
			  pipeline->id, true);
	total = spi_int8(0, 1);
	open = spi_int8(0, 2);
	replicant_catalog_end(&access);

	*planned = total > 0;
	return total == 0 || open > 0;
}

static BackgroundWorkerHandle *
launch_shard_worker(ReplicantPipeline *pipeline, int slot_index,
					ReplicantPipelineSlot *slot, const char *snapshot_name, int number)
{
	BackgroundWorker worker = {0};
	BackgroundWorkerHandle *handle;
	ShardArgs args = {0};

	args.dboid = MyDatabaseId;
	args.owner = pipeline->owner;
	args.pipeline_id = pipeline->id;
	args.slot_index = slot_index;
	args.generation = slot->generation;
	args.worker = number;
	strlcpy(args.snapshot_name, snapshot_name, sizeof(args.snapshot_name));

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	worker.bgw_notify_pid = MyProcPid;
	strlcpy(worker.bgw_library_name, "replicant", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "replicant_shard_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "replicant snapshot %s", pipeline->name);
	strlcpy(worker.bgw_type, "replicant snapshot", BGW_MAXLEN);
	memcpy(worker.bgw_extra, &args, sizeof(args));
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return NULL;
	return handle;
}

static BackgroundWorkerHandle **shard_handles = NULL;
static int nshard_handles = 0;

/* Shard workers must not outlive the worker that holds their snapshot. */
static void
terminate_shard_workers(int code, Datum arg)
{
	int i;

	for (i = 0; i < nshard_handles; i++)
		if (shard_handles[i] != NULL)
			TerminateBackgroundWorker(shard_handles[i]);
}

/*
 * Runs snapshot_workers shard workers until they have all exited.  Returns
 * false when one failed (its shard stays claimed until a resume).  A clean
 * exit does not prove every shard done: a worker the postmaster could not
 * start (fork failed) or that a stop ended quietly read nothing, so the
 * caller asks the catalog once the exporting transaction ended (inside it,
 * this process sees the catalog as of the old snapshot).
 */
static bool
run_shard_workers(ReplicantPipelineSlot *slot, int slot_index,
				  ReplicantPipeline *pipeline, const char *snapshot_name)
{
	int i;
	int running;

	pg_atomic_write_u32(&slot->shard_failures, 0);
	if (shard_handles == NULL)
	{
		nshard_handles = Min(pipeline->snapshot_workers, REPLICANT_MAX_SNAPSHOT_WORKERS);
		shard_handles = MemoryContextAllocZero(TopMemoryContext,
											   sizeof(BackgroundWorkerHandle *) * nshard_handles);
		before_shmem_exit(terminate_shard_workers, (Datum) 0);
	}

	for (i = 0; i < nshard_handles; i++)
		shard_handles[i] = launch_shard_worker(pipeline, slot_index, slot, snapshot_name, i);
	if (shard_handles[0] == NULL)
		replicant_delivery_halt(slot, pipeline,
								"could not start snapshot workers: out of background worker slots");

	do
	{
		bool stopped;
		pid_t pid;

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		running = 0;
		for (i = 0; i < nshard_handles; i++)
		{
			if (shard_handles[i] != NULL &&
				GetBackgroundWorkerPid(shard_handles[i], &pid) == BGWH_STOPPED)
			{
				pfree(shard_handles[i]);
				shard_handles[i] = NULL;
			}
			running += (shard_handles[i] != NULL);
		}

		/*
		 * A shard worker that halted or disabled the pipeline left its shard
		 * unread: the snapshot must not finish.  It records why in the
		 * catalog, then in shared memory, then stops; so looking after the
		 * count, a worker counted as stopped is never missed.
		 */
		LWLockAcquire(replicant_shmem->lock, LW_SHARED);
		stopped = (slot->state == REPLICANT_STATE_HALTED || !slot->runnable);
		LWLockRelease(replicant_shmem->lock);
		if (stopped)
			proc_exit(0);
	} while (running > 0);

	return pg_atomic_read_u32(&slot->shard_failures) == 0;
}

/*
 * Sends the planned tables' "first" markers and frees every unfinished
 * shard for claiming.  Returns the planned tables.
 */
static List *
prepare_shards(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
			   ReplicantTransport *sink)
{
	send_markers(slot, pipeline, sink, false);
	(void) count_unfinished_shards(pipeline->id, true);
	return planned_relids(pipeline);
}

/*
 * Exits for the launcher to restart the pipeline worker (with backoff, a
 * bounded number of times), which resumes the snapshot.  A shard worker
 * that failed on an error left why in the slot; one that another process
 * terminated or cancelled makes the run no failure of the pipeline's.
 */
REPLICANT_NORETURN static void
restart_snapshot(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
				 const char *why, const char *failure)
{
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" restarts its snapshot after %s",
					pipeline->name, why)));
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (slot->shard_interrupted)
		slot->interrupted = true;
	else if (slot->failure[0] == '\0')
		strlcpy(slot->failure, failure, sizeof(slot->failure));
	LWLockRelease(replicant_shmem->lock);
	proc_exit(1);
}

/*
 * Runs shard workers until every shard is read; exits for a restart when
 * one failed.  The exporting transaction is still open on return.
 */
static void
read_all_shards(ReplicantPipelineSlot *slot, int slot_index,
				ReplicantPipeline *pipeline, const char *snapshot_name)
{
	pg_atomic_write_u32(&slot->snapshot_stale, 0);
	for (;;)
	{
		if (!run_shard_workers(slot, slot_index, pipeline, snapshot_name))
			restart_snapshot(slot, pipeline, "a snapshot worker failed",
							 "a snapshot worker exited abnormally");
		if (pg_atomic_exchange_u32(&slot->snapshot_stale, 0) == 0)
			break;

		/*
		 * A table was rewritten after the snapshot: read what is left under
		 * a newer one, which sees the new heap.  The stream still starts at
		 * the slot's point, so the sink converges.
		 */
		CommitTransactionCommand();
		(void) count_unfinished_shards(pipeline->id, true);
		snapshot_name = export_fresh_snapshot(pipeline);
	}
}

void
replicant_snapshot_initial(ReplicantPipelineSlot *slot, int slot_index,
						   ReplicantPipeline *pipeline)
{
	bool planned_before;
	List *planned;
	char *snapshot_name;
	ReplicantTransport *sink;
	ReplicantSlotOwner slot_owner;

	if (!snapshot_pending(pipeline, &planned_before))
		return;
	replicant_shmem_set_state(slot, REPLICANT_STATE_SNAPSHOTTING);

	sink = replicant_delivery_sink(pipeline);

	slot_owner = replicant_slot_owner(pipeline->slot_name);
	if (slot_owner == REPLICANT_SLOT_FOREIGN)
		replicant_delivery_halt(slot, pipeline, replicant_slot_foreign_reason(pipeline->slot_name));
	if (slot_owner == REPLICANT_SLOT_MISSING)
	{
		/*
		 * Nothing was read under an earlier plan without the slot: the
		 * transaction that created it would have persisted it first.
		 */
		plan_snapshot(pipeline, true);
		planned = prepare_shards(slot, pipeline, sink);
		snapshot_name = create_slot_and_export(slot, pipeline);
	}
	else
	{
		planned = prepare_shards(slot, pipeline, sink);
		snapshot_name = export_fresh_snapshot(pipeline);
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" resumes its initial snapshot under a fresh snapshot",
						pipeline->name),
				 errdetail("Streaming replays changes from the slot's original consistent point.")));
	}

	/*
	 * A table published after planning (before the slot's creation, or
	 * before this resume) is planned now and read, with what is left, under
	 * a newer snapshot: the stream starts at the slot's point, so the sink
	 * converges as after an interrupted snapshot.
	 */
	while (unplanned_tables(pipeline, planned))
	{
		CommitTransactionCommand();
		plan_snapshot(pipeline, false);
		planned = prepare_shards(slot, pipeline, sink);
		snapshot_name = export_fresh_snapshot(pipeline);
	}

	read_all_shards(slot, slot_index, pipeline, snapshot_name);

	/* Every shard is read: the exported snapshot is no longer needed. */
	CommitTransactionCommand();

	/*
	 * Unless a shard worker was never started (the postmaster could not
	 * fork it), or ended on a stop without a word: the catalog says.
	 */
	if (count_unfinished_shards(pipeline->id, false) > 0)
		restart_snapshot(slot, pipeline, "a snapshot worker ended with its shards unread",
						 "a snapshot worker ended with its shards unread");
	send_markers(slot, pipeline, sink, true);
	replicant_transport_close(sink);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" finished its initial snapshot", pipeline->name)));
}

/*
 * Shard workers
 */

static SPIPlanPtr claim_plan = NULL;
static SPIPlanPtr progress_plan = NULL;
static SPIPlanPtr restart_plan = NULL;

/* Claims an unfinished shard of the pipeline; false when none is left. */
static bool
claim_shard(int32 pipeline_id, Shard *shard)
{
	ReplicantCatalogAccess access;
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	bool found;

	replicant_catalog_begin(&access);
	if (claim_plan == NULL)
	{
		Oid argtypes[1] = {INT4OID};

		claim_plan = prepare("UPDATE replicant.snapshot_shards s SET claimed = true"
							 "  FROM replicant.backfills b"
							 " WHERE b.id = s.backfill_id"
							 "   AND (s.backfill_id, s.shard) = ("
							 "       SELECT s2.backfill_id, s2.shard FROM replicant.snapshot_shards s2"
							 "         JOIN replicant.backfills b2 ON b2.id = s2.backfill_id"
							 "        WHERE b2.pipeline_id = $1 AND b2.kind = 'initial'"
							 "          AND NOT s2.done AND NOT s2.claimed"
							 "        ORDER BY s2.backfill_id, s2.shard"
							 "        LIMIT 1 FOR UPDATE OF s2 SKIP LOCKED)"
							 " RETURNING s.backfill_id, s.shard, b.relid,"
							 "           s.next_block, coalesce(s.hi_block, -1)",
							 1, argtypes);
	}
	if (SPI_execute_plan(claim_plan, args, NULL, false, 1) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not claim a snapshot shard");
	found = SPI_processed > 0;
	if (found)
	{
		bool isnull;
		Oid argtypes[1] = {INT8OID};
		Datum id[1];

		shard->backfill_id = spi_int8(0, 1);
		shard->shard = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		shard->relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
		shard->next_block = spi_int8(0, 4);
		shard->hi_block = spi_int8(0, 5);
		strlcpy(shard->relname, get_rel_name(shard->relid) ? get_rel_name(shard->relid) : "",
				NAMEDATALEN);

		/* Reading the table begins now, before its first window is delivered. */
		id[0] = Int64GetDatum(shard->backfill_id);
		if (SPI_execute_with_args("UPDATE replicant.backfills SET state = 'running', started_at = now()"
								  " WHERE id = $1 AND started_at IS NULL",
								  1, argtypes, id, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not record snapshot progress");

		/*
		 * The stamp, read by a statement of its own: when a restart of the
		 * table (restart_table) commits while the claim waits for the
		 * shard's row, the claim gets the restarted row but still joins the
		 * old stamp.  Read with it, the shard would look rewritten and be
		 * left claimed, never read.
		 */
		if (SPI_execute_with_args("SELECT relfilenode FROM replicant.backfills"
								  " WHERE id OPERATOR(pg_catalog.=) $1",
								  1, argtypes, id, NULL, false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "could not read snapshot progress");
		shard->relfilenode = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	replicant_catalog_end(&access);
	return found;
}

/*
 * Records that the shard's blocks before next_block are delivered (and
 * whether the shard is done), unless the table was rewritten meanwhile.
 */
static void
record_progress(Shard *shard, bool done, int64 rows)
{
	ReplicantCatalogAccess access;
	Datum args[7];

	args[0] = Int64GetDatum(shard->backfill_id);
	args[1] = Int32GetDatum(shard->shard);
	args[2] = Int64GetDatum(shard->next_block);
	args[3] = BoolGetDatum(done);
	args[4] = Int64GetDatum(rows);
	args[5] = ObjectIdGetDatum(shard->relfilenode);

	replicant_catalog_begin(&access);
	args[6] = CStringGetTextDatum(replicant_catalog_skipped_state());
	if (progress_plan == NULL)
	{
		Oid argtypes[7] = {INT8OID, INT4OID, INT8OID, BOOLOID, INT8OID, OIDOID, TEXTOID};

		/* A table another shard found unpublished stays skipped. */
		progress_plan = prepare("WITH b AS ("
								"  UPDATE replicant.backfills SET rows_done = rows_done + $5,"
								"         state = 'running', started_at = coalesce(started_at, now())"
								"   WHERE id = $1 AND relfilenode = $6 AND state <> $7 RETURNING id)"
								" UPDATE replicant.snapshot_shards s SET next_block = $3, done = $4,"
								"        claimed = NOT $4"
								"   FROM b WHERE s.backfill_id = b.id AND s.shard = $2",
								7, argtypes);
	}
	if (SPI_execute_plan(progress_plan, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record snapshot progress");
	replicant_catalog_end(&access);
}

/* The table was rewritten: start all of its shards over, stamped anew. */
static void
restart_table(Shard *shard, Oid relfilenode)
{
	ReplicantCatalogAccess access;
	Datum args[2] = {Int64GetDatum(shard->backfill_id), ObjectIdGetDatum(relfilenode)};

	replicant_catalog_begin(&access);
	if (restart_plan == NULL)
	{
		Oid argtypes[2] = {INT8OID, OIDOID};

		restart_plan = prepare("WITH b AS ("
							   "  UPDATE replicant.backfills SET relfilenode = $2, rows_done = 0"
							   "   WHERE id = $1 AND relfilenode <> $2 RETURNING id)"
							   " UPDATE replicant.snapshot_shards s SET next_block = lo_block,"
							   "        done = false, claimed = false"
							   "   FROM b WHERE s.backfill_id = b.id",
							   2, argtypes);
	}
	if (SPI_execute_plan(restart_plan, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not restart a rewritten table");
	replicant_catalog_end(&access);
}

/*
 * The table stopped being published: none of its shards is read any more,
 * and backfill_status says so.
 */
static void
skip_table(Shard *shard)
{
	ReplicantCatalogAccess access;
	Oid argtypes[2] = {INT8OID, TEXTOID};
	Datum args[2];

	replicant_catalog_begin(&access);
	args[0] = Int64GetDatum(shard->backfill_id);
	args[1] = CStringGetTextDatum(replicant_catalog_skipped_state());
	if (SPI_execute_with_args("WITH b AS ("
							  "  UPDATE replicant.backfills SET state = $2, finished_at = now(),"
							  "         started_at = coalesce(started_at, now())"
							  "   WHERE id = $1 RETURNING id)"
							  " UPDATE replicant.snapshot_shards s SET done = true, claimed = false"
							  "   FROM b WHERE s.backfill_id = b.id",
							  2, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record snapshot progress");
	replicant_catalog_end(&access);
}

/*
 * Names the window the shard worker reads in its slot's window progress
 * (shard NULL: none), from which on note_snapshot_answer counts the rows the
 * sink acknowledged.
 */
static void
note_window(const Shard *shard)
{
	ReplicantWindowProgress *progress = &ShardSlot->window_progress[ShardNumber];

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	progress->backfill_id = shard ? shard->backfill_id : 0;
	progress->shard = shard ? shard->shard : 0;
	progress->window_block = shard ? shard->next_block : 0;
	progress->rows = 0;
	LWLockRelease(replicant_shmem->lock);
}

/* What a window read found. */
typedef enum WindowResult
{
	WINDOW_READ,       /* rows of the window delivered */
	WINDOW_PAST_END,   /* the window starts beyond the table */
	WINDOW_REWRITTEN,  /* relfilenode changed: start the table over */
	WINDOW_STALE,      /* rewritten after the snapshot, which sees none of it */
	WINDOW_GONE,       /* the table was dropped */
	WINDOW_UNPUBLISHED /* no publication of the pipeline publishes it now */
} WindowResult;

/* Whether the active snapshot sees a row of rel's heap. */
static bool
snapshot_sees_a_row(Relation rel)
{
	TableScanDesc scan = table_beginscan(rel, GetActiveSnapshot(), 0, NULL);
	TupleTableSlot *tuple = table_slot_create(rel, NULL);
	bool found = table_scan_getnextslot(scan, ForwardScanDirection, tuple);

	ExecDropSingleTupleTableSlot(tuple);
	table_endscan(scan);
	return found;
}

/*
 * Whether the active snapshot is blind to rel's current heap: the rewrite
 * that gave rel its relfilenode committed after the snapshot (which still
 * sees the old pg_class row), and wrote the rows anew under its own xid
 * (ALTER TABLE ... TYPE), so that the snapshot sees none of them.  VACUUM
 * FULL and CLUSTER keep the rows' xmin, and the snapshot sees its rows in
 * the new heap as it did in the old one.
 */
static bool
snapshot_blind_to(Relation rel)
{
	Oid argtypes[1] = {OIDOID};
	Datum args[1] = {ObjectIdGetDatum(RelationGetRelid(rel))};
	bool blind;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("SELECT relfilenode FROM pg_catalog.pg_class"
							  " WHERE oid OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read pg_class");
	blind = SPI_processed == 0 ||
			strtoul(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), NULL, 10) !=
				rel->rd_rel->relfilenode;
	SPI_finish();
	/* Rewritten later: blind if the new heap has rows and it sees none. */
	return blind && RelationGetNumberOfBlocks(rel) > 0 && !snapshot_sees_a_row(rel);
}

/* Ends the window's transaction, back in the window's memory context. */
static void
end_window(Relation rel, MemoryContext window_context)
{
	if (rel != NULL)
		table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(window_context);
}

/*
 * Set while importing the exported snapshot: an error then means that its
 * exporter, the pipeline worker, is gone or going (replicant_shard_main).
 */
static bool importing = false;

/*
 * Starts the window's transaction under the imported snapshot and opens the
 * shard's table into *relp.  Returns WINDOW_READ when it has blocks left to
 * read; otherwise the transaction is over and the result says why not.
 */
static WindowResult
begin_window(const char *snapshot_name, Shard *shard, Relation *relp,
			 Oid *new_relfilenode)
{
	MemoryContext window_context = CurrentMemoryContext;
	Relation rel;

	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;
	importing = true;
	replicant_fault("snapshot_import");
	ImportSnapshot(snapshot_name);
	importing = false;
	PushActiveSnapshot(GetTransactionSnapshot());
	MemoryContextSwitchTo(window_context);

	replicant_partition_lock_ancestors(shard->relid, AccessShareLock);
	rel = try_table_open(shard->relid, AccessShareLock);
	if (rel == NULL)
	{
		end_window(NULL, window_context);
		return WINDOW_GONE;
	}
	if (rel->rd_rel->relfilenode != shard->relfilenode)
	{
		bool stale = snapshot_blind_to(rel);

		*new_relfilenode = rel->rd_rel->relfilenode;
		end_window(rel, window_context);
		return stale ? WINDOW_STALE : WINDOW_REWRITTEN;
	}
	if (shard->next_block >= RelationGetNumberOfBlocks(rel))
	{
		end_window(rel, window_context);
		return WINDOW_PAST_END;
	}
	*relp = rel;
	return WINDOW_READ;
}

/* A window's snapshot body in flight: POSTed while the next one fills. */
typedef struct SnapshotPost
{
	StringInfoData out;
	ReplicantMemoryBody state;
	ReplicantBody body;
	char *webhook_id;
	int64 nrows;
	bool in_flight;
} SnapshotPost;

/*
 * The snapshot batch a window is filling, and the one before it while its
 * POST is in flight: at most two batches' buffers.  A batch is sent only
 * after the one before it was acknowledged, and the window's progress is
 * recorded only after its last one was.
 */
typedef struct WindowBatch
{
	ReplicantPipelineSlot *slot;
	ReplicantPipeline *pipeline;
	ReplicantTransport *sink;
	Shard *shard;
	const ReplicantRelation *relation; /* the table read */
	StringInfoData out;                /* the body filling */
	int64 in_body;                     /* rows in it */
	int batch_no;                      /* batches of the window sent before it */
	SnapshotPost sending;
	MemoryContext context; /* the window's */
} WindowBatch;

/*
 * The shard worker's two batch bodies, kept from window to window: grown
 * once to a batch's size, not again for every window (copies and page
 * faults in each).
 */
static StringInfoData window_bodies[2];

/* Lends the window the two bodies, the first time sized for a full batch. */
static void
take_window_bodies(WindowBatch *batch)
{
	if (window_bodies[0].data == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		int i;

		for (i = 0; i < lengthof(window_bodies); i++)
		{
			initStringInfo(&window_bodies[i]);
			enlargeStringInfo(&window_bodies[i], batch->pipeline->batch_max_bytes);
		}
		MemoryContextSwitchTo(old);
	}
	batch->out = window_bodies[0];
	batch->sending.out = window_bodies[1];
}

/*
 * Takes them back, wherever the window left them (and however grown).  A
 * window that failed never returns them: the worker halts or exits.
 */
static void
return_window_bodies(WindowBatch *batch)
{
	window_bodies[0] = batch->out;
	window_bodies[1] = batch->sending.out;
}

/* Waits for the batch in flight, if any, to be acknowledged (or halts). */
static void
finish_window_batch(WindowBatch *batch)
{
	SnapshotPost *post = &batch->sending;
	ReplicantSinkResult result;

	if (!post->in_flight)
		return;
	replicant_delivery_post_finish(batch->slot, batch->sink, post->webhook_id,
								   &post->body, &result);
	post->in_flight = false;
	note_snapshot_answer(batch->slot, batch->pipeline, &result, post->nrows,
						 post->out.len, batch->relation);
}

/*
 * Starts POSTing the filled batch, once the one before it is acknowledged;
 * its webhook-id names the window (the table's file and first block) and
 * the batch's number.  The buffers
 * trade places: the next batch fills the one the last POST used.
 */
static void
send_window_batch(WindowBatch *batch)
{
	SnapshotPost *post = &batch->sending;
	StringInfoData filled = batch->out;

	finish_window_batch(batch);
	batch->out = post->out;
	post->out = filled;
	post->webhook_id = replicant_format_read_webhook_id(batch->pipeline->name,
														batch->shard->backfill_id,
														batch->shard->relfilenode,
														batch->shard->next_block,
														batch->batch_no++);
	post->nrows = batch->in_body;
	replicant_format_of(batch->pipeline)->snapshot_end(&post->out);
	replicant_body_from_buffer(&post->body, &post->state, &post->out);
	replicant_delivery_post_start(batch->sink, post->webhook_id, &post->body);
	post->in_flight = true;
	batch->in_body = 0;
}

/*
 * Encodes the row straight into the batch.  When that took the batch over
 * batch_max_bytes, the batch is sent without it and the next one starts
 * with it: the only copy of an encoded row.  Runs in the row's memory
 * context, and sends in the window's.
 */
static void
add_window_row(WindowBatch *batch, const ReplicantChange *record, StringInfo spill)
{
	const ReplicantFormat *format = replicant_format_of(batch->pipeline);
	int before = batch->out.len;
	int start;

	if (batch->in_body > 0)
		appendStringInfoString(&batch->out, format->separator);
	start = batch->out.len;
	format->change(&batch->out, batch->pipeline->name, record);
	if (before + (batch->out.len - start) + format->snapshot_end_len >
			batch->pipeline->batch_max_bytes &&
		batch->in_body > 0)
	{
		MemoryContext row_context = MemoryContextSwitchTo(batch->context);

		resetStringInfo(spill);
		appendBinaryStringInfo(spill, batch->out.data + start, batch->out.len - start);
		batch->out.len = before;
		batch->out.data[before] = '\0';
		send_window_batch(batch);
		start_snapshot_body(&batch->out, batch->pipeline, batch->relation,
							batch->shard->backfill_id, false, false);
		appendBinaryStringInfo(&batch->out, spill->data, spill->len);
		MemoryContextSwitchTo(row_context);
	}
	batch->in_body++;
}

/*
 * What a window reads its rows with: a TID range scan of the heap under the
 * imported snapshot, its tuples deformed in the columns of the relation
 * they are delivered as, filtered as table synchronization filters them.
 */
typedef struct WindowReader
{
	Relation rel;               /* the heap read */
	Relation target;            /* what its rows are delivered as: rel, or
								 * the partition root */
	TupleConversionMap *map;    /* rel's columns to target's; NULL: same */
	ReplicantPubFilter *filter; /* row filter and published columns */
	Bitmapset *key_columns;
	bool whole_row;
	Bitmapset *identity; /* rel's, in target's columns; NULL: none */
	TableScanDesc scan;
	TupleTableSlot *heap_slot; /* rel's tuples, as the scan returns them */
	TupleTableSlot *row_slot;  /* converted to target's columns (map) */
} WindowReader;

/*
 * Opens the reader of blocks [shard's next block, hi) of rel; halts where
 * the stream would: the owner may not read rel whole (SELECT, or row-level
 * security it does not bypass: the heap read would bypass the policies), or
 * the publications disagree on the published columns.  Returns false,
 * having opened nothing, when no publication of the pipeline publishes rel
 * now (whatever the owner may read): it has no row filter nor columns to
 * read it with.
 */
static bool
open_window_reader(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
				   Relation rel, Shard *shard, int64 hi, WindowReader *reader)
{
	char *refused;
	ItemPointerData mintid;
	ItemPointerData maxtid;
	bool whole_row;

	reader->rel = rel;
	reader->target = replicant_partition_root_open_for_read(rel, pipeline->publications,
															AccessShareLock);
	refused = replicant_publication_read_filter(rel, reader->target, pipeline->publications,
												&reader->filter);
	if (refused == NULL && !replicant_pubfilter_publishes(reader->filter))
	{
		replicant_pubfilter_free(reader->filter);
		if (reader->target != rel)
			table_close(reader->target, AccessShareLock);
		return false;
	}
	if (refused == NULL)
		refused = replicant_table_read_denied(rel, pipeline->owner);
	if (refused)
		replicant_delivery_halt(slot, pipeline, refused);
	if (rel->rd_tableam->scan_set_tidrange == NULL)
		replicant_delivery_halt(slot, pipeline,
								psprintf("table \"%s\" cannot be read in block ranges: its access method has no TID range scans",
										 RelationGetRelationName(rel)));
	replicant_row_key_delivered(rel, reader->target, reader->filter->columns,
								&reader->key_columns, &reader->whole_row);
	reader->identity = replicant_row_key_identity_as(rel, reader->target, &whole_row);
	reader->map = replicant_partition_root_read_map(rel, reader->target);
	reader->heap_slot = table_slot_create(rel, NULL);
	reader->row_slot = reader->map ?
						   MakeSingleTupleTableSlot(RelationGetDescr(reader->target),
													&TTSOpsVirtual) :
						   reader->heap_slot;

	/* ctid >= '(lo,0)' AND ctid < '(hi,0)' */
	ItemPointerSet(&mintid, (BlockNumber) shard->next_block, FirstOffsetNumber);
	ItemPointerSet(&maxtid, (BlockNumber) (hi - 1), MaxOffsetNumber);
	reader->scan = table_beginscan_tidrange(rel, GetActiveSnapshot(), &mintid, &maxtid);
	return true;
}

/*
 * The next row the window delivers, deformed in target's columns, or NULL
 * at the end of the window.  The values point into the heap's buffer: they
 * are good until the next call.
 */
static TupleTableSlot *
next_window_row(WindowReader *reader)
{
	while (table_scan_getnextslot_tidrange(reader->scan, ForwardScanDirection,
										   reader->heap_slot))
	{
		TupleTableSlot *row = reader->heap_slot;

		CHECK_FOR_INTERRUPTS();
		if (reader->map)
			row = execute_attr_map_slot(reader->map->attrMap, row, reader->row_slot);
		if (!replicant_pubfilter_read_row(reader->filter, row))
			continue;
		slot_getallattrs(row);
		return row;
	}
	return NULL;
}

static void
close_window_reader(WindowReader *reader)
{
	table_endscan(reader->scan);
	if (reader->row_slot != reader->heap_slot)
		ExecDropSingleTupleTableSlot(reader->row_slot);
	ExecDropSingleTupleTableSlot(reader->heap_slot);
	if (reader->map)
		free_conversion_map(reader->map);
	replicant_pubfilter_free(reader->filter);
	if (reader->target != reader->rel)
		table_close(reader->target, AccessShareLock);
}

/*
 * Reads blocks [lo, hi) of the shard's table under the imported snapshot and
 * delivers them in batches of at most batch_max_bytes.
 */
static WindowResult
read_window(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
			ReplicantTransport *sink, const char *snapshot_name, Shard *shard,
			int64 hi, int64 *rows, Oid *new_relfilenode)
{
	Relation rel;
	WindowReader reader;
	TupleTableSlot *row;
	TupleDesc desc;
	ReplicantRelation relation;
	StringInfoData spill;
	StringInfoData key;
	StringInfoData new_row;
	MemoryContext window_context = CurrentMemoryContext;
	WindowBatch batch = {.slot = slot, .pipeline = pipeline, .sink = sink, .shard = shard, .context = window_context};
	MemoryContext row_context;
	WindowResult opened;
	/* the stream delivers nothing before the snapshot is done */
	XLogRecPtr consistent_point =
		replicant_slot_confirmed_flush(pipeline->slot_name);

	*rows = 0;
	opened = begin_window(snapshot_name, shard, &rel, new_relfilenode);
	if (opened != WINDOW_READ)
		return opened;
	replicant_fault("snapshot_read");
	note_window(shard);

	if (!open_window_reader(slot, pipeline, rel, shard, hi, &reader))
	{
		end_window(rel, window_context);
		return WINDOW_UNPUBLISHED;
	}
	desc = RelationGetDescr(reader.target);
	relation.schema = get_namespace_name(RelationGetNamespace(reader.target));
	relation.table = pstrdup(RelationGetRelationName(reader.target));
	batch.relation = &relation;

	initStringInfo(&spill);
	initStringInfo(&key);
	initStringInfo(&new_row);
	take_window_bodies(&batch);
	start_snapshot_body(&batch.out, pipeline, &relation, shard->backfill_id, false, false);
	row_context = AllocSetContextCreate(window_context, "replicant snapshot row",
										ALLOCSET_DEFAULT_SIZES);
	while ((row = next_window_row(&reader)) != NULL)
	{
		/* Detoasted values die with the row. */
		MemoryContext old = MemoryContextSwitchTo(row_context);
		ReplicantChange record;

		replicant_change_from_values(&record, &relation, &key, &new_row, desc,
									 row->tts_values, row->tts_isnull,
									 reader.key_columns, reader.whole_row,
									 reader.filter->columns);
		record.backfill_id = shard->backfill_id;
		record.read_lsn = consistent_point;
		if (replicant_format_of(pipeline)->read_ids)
			replicant_change_set_read_id(&record, pipeline->event_id_key, desc,
										 row->tts_values, row->tts_isnull, reader.identity,
										 RelationGetRelid(rel), rel->rd_rel->relfilenode,
										 &reader.heap_slot->tts_tid);
		add_window_row(&batch, &record, &spill);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_context);
		/* moves the batch in flight on, outside libcurl, between rows */
		if ((++(*rows) & (ROWS_PER_PUMP - 1)) == 0)
			replicant_transport_pump(sink);
	}
	close_window_reader(&reader);
	end_window(rel, window_context);

	if (batch.in_body > 0)
		send_window_batch(&batch);
	finish_window_batch(&batch);
	return_window_bodies(&batch);
	return WINDOW_READ;
}

/*
 * Tells the pipeline worker that a shard may have been left claimed; the
 * window it read is read again, and counted, by whoever claims it next.
 */
static void
shard_exit(int code, Datum arg)
{
	/* (Not when an error came while holding the lock: that would hang.) */
	if (!LWLockHeldByMe(replicant_shmem->lock))
		note_window(NULL);
	if (code != 0)
		pg_atomic_fetch_add_u32(&ShardSlot->shard_failures, 1);
}

/*
 * Reads a claimed shard window by window, recording progress after each,
 * until it is done, its table starts over, or the snapshot turned stale.
 */
static void
read_shard(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
		   ReplicantTransport *sink, const char *snapshot_name, Shard *shard,
		   MemoryContext window_context)
{
	for (;;)
	{
		int64 hi;
		int64 rows = 0;
		Oid relfilenode = InvalidOid;
		WindowResult r;
		bool done;

		CHECK_FOR_INTERRUPTS();
		if (pg_atomic_read_u32(&slot->snapshot_stale) != 0)
			break;
		replicant_delivery_reload_config();
		MemoryContextSwitchTo(window_context);
		hi = shard->next_block + WINDOW_BLOCKS;
		if (shard->hi_block >= 0)
			hi = Min(hi, shard->hi_block);

		r = read_window(slot, pipeline, sink, snapshot_name, shard,
						hi, &rows, &relfilenode);
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(window_context);
		replicant_fault("snapshot_window");

		if (r == WINDOW_STALE || r == WINDOW_REWRITTEN)
			note_window(NULL); /* its rows count again from 0 */
		if (r == WINDOW_STALE)
		{
			ereport(LOG,
					(errmsg("table \"%s\" was rewritten after the snapshot was taken; reading it again under a fresh snapshot",
							shard->relname)));
			/* Before the restart, so that no one claims it under this snapshot. */
			pg_atomic_write_u32(&slot->snapshot_stale, 1);
			restart_table(shard, relfilenode);
			break;
		}
		if (r == WINDOW_UNPUBLISHED)
		{
			ereport(LOG,
					(errmsg("replicant pipeline \"%s\" skips the rest of its snapshot of table \"%s\"",
							pipeline->name, shard->relname),
					 errdetail("None of the pipeline's publications publishes the table any more.")));
			skip_table(shard);
			break;
		}
		if (r == WINDOW_REWRITTEN)
		{
			ereport(LOG,
					(errmsg("table \"%s\" was rewritten during the snapshot; reading it again",
							shard->relname)));
			restart_table(shard, relfilenode);
			break;
		}
		done = (r != WINDOW_READ) || (shard->hi_block >= 0 && hi >= shard->hi_block);
		if (r == WINDOW_READ)
			shard->next_block = hi;
		record_progress(shard, done, rows);
		replicant_shmem_note_progress(slot);
		replicant_runs_progressed(pipeline->id);
		replicant_fault("snapshot_progress");
		if (done)
			break;
	}
}

/*
 * Acts on the error that ended a shard worker's run, never the message,
 * which could quote a value: halts the pipeline, naming the table and the
 * error class, or exits for the pipeline worker to restart the snapshot
 * when the error is transient (replicant_delivery_fail).  A worker that
 * could not import the snapshot, or whose pipeline was stopped meanwhile,
 * exits without a word: its exporter, the pipeline worker, is gone or
 * going, and a halt or disable that stopped it stands.
 */
REPLICANT_NORETURN static void
shard_failed(ReplicantPipelineSlot *slot, uint32 generation,
			 ReplicantPipeline *pipeline, Shard *shard)
{
	ErrorData *edata = CopyErrorData();
	bool stopped;

	FlushErrorState();
	AbortOutOfAnyTransaction();
	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	stopped = slot->generation != generation || !slot->runnable ||
			  slot->state == REPLICANT_STATE_HALTED;
	LWLockRelease(replicant_shmem->lock);
	if (importing || stopped)
	{
		ereport(LOG,
				(errmsg("replicant snapshot worker of pipeline \"%s\" exits: %s",
						pipeline->name,
						importing ? "it could not import the exported snapshot" :
									"the pipeline was stopped")));
		/* Not 0: the shard it claimed is not done. */
		proc_exit(1);
	}
	replicant_delivery_fail(slot, pipeline, edata,
							replicant_delivery_failure(REPLICANT_PHASE_SNAPSHOT_READ,
													   shard->relname, edata->sqlerrcode));
}

void
replicant_shard_main(Datum main_arg)
{
	ShardArgs args;
	ReplicantPipelineSlot *slot;
	ReplicantPipeline *pipeline;
	ReplicantCatalogAccess access;
	ReplicantTransport *sink;
	Shard *shard;
	MemoryContext window_context;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	slot = &replicant_shmem->slots[args.slot_index];
	replicant_stop_signal_init(slot, args.generation, "replicant snapshot worker of pipeline", DEBUG1, true);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	if (slot->generation != args.generation)
		proc_exit(0);
	ShardSlot = slot;
	ShardNumber = args.worker;
	before_shmem_exit(shard_exit, (Datum) 0);
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.owner, 0);
	replicant_encoder_pin_settings();
	replicant_pin_worker_settings();

	/*
	 * Commit progress asynchronously: the WAL writer flushes it while the
	 * next window is read, and whatever the worker committed is flushed
	 * before its next request leaves (replicant_delivery_post_start) and
	 * before it exits, so nothing is sent, nor the snapshot finished, ahead
	 * of the progress that came before.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	replicant_catalog_begin(&access);
	pipeline = replicant_pipeline_load(args.pipeline_id, TopMemoryContext);
	replicant_catalog_end(&access);
	if (pipeline == NULL)
		proc_exit(0);
	pgstat_report_appname(psprintf("replicant snapshot %s", pipeline->name));

	MemoryContextSwitchTo(TopMemoryContext);
	sink = replicant_delivery_sink(pipeline);

	window_context = AllocSetContextCreate(TopMemoryContext, "replicant snapshot window",
										   ALLOCSET_DEFAULT_SIZES);
	shard = palloc0(sizeof(Shard));
	replicant_stop_signal_arm();
	PG_TRY();
	{
		/*
		 * Once a table turned out rewritten after the snapshot, nothing
		 * more is read under it: the pipeline worker takes a fresh one
		 * (claims are reset then).
		 */
		while (claim_shard(pipeline->id, shard) &&
			   pg_atomic_read_u32(&slot->snapshot_stale) == 0)
			read_shard(slot, pipeline, sink, args.snapshot_name, shard, window_context);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(TopMemoryContext);
		replicant_transport_cancel(sink);
		replicant_stop_signal_exit_if_asked();
		shard_failed(slot, args.generation, pipeline, shard);
	}
	PG_END_TRY();
	replicant_transport_close(sink);
	replicant_checkpoint_make_durable();
	proc_exit(0);
}
