/*
 * snapshot_plan.c
 *		The plan of an initial snapshot: one replicant.backfills row per
 *		published table, its heap cut into block-range shards in
 *		replicant.snapshot_shards.
 *
 * The pipeline worker plans the snapshot before it creates the slot, and
 * plans the tables published after that anew (snapshot.c); shard workers
 * (snapshot_shard.c) claim the plan's shards and record their progress in
 * it after every window, so that a resumed snapshot reads only what is
 * left.  Each table is stamped with its relfilenode at plan time: a window
 * that finds another starts the table's shards over
 * (replicant_snapshot_restart_table).
 *
 * Rules kept with other files: docs/internals.md §3 (the exported snapshot
 * and its shards).
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xlog.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "partition_root.h"
#include "publication_rules.h"
#include "snapshot_plan.h"
#include "table_read.h"

/* A shard's blocks, as text for the SQL that plans the shards. */
#define SHARD_BLOCKS_SQL CppAsString2(REPLICANT_WINDOW_BLOCKS *REPLICANT_SHARD_WINDOWS)

static SPIPlanPtr
prepare(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr plan = SPI_prepare(sql, nargs, argtypes);

	if (plan == NULL || SPI_keepplan(plan) != 0)
		elog(ERROR, "could not prepare \"%s\"", sql);
	return plan;
}

int64
replicant_snapshot_plan_int8(int row, int col)
{
	bool isnull;
	Datum d = SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, &isnull);

	return isnull ? -1 : DatumGetInt64(d);
}

/*
 * Runs a query on the pipeline's ($1) snapshot plan; $2 is the state of a
 * table that stopped being published, which is as finished as 'done'.
 */
void
replicant_snapshot_plan_read(const char *sql, int32 pipeline_id, bool read_only)
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

	replicant_snapshot_plan_read("SELECT b.id, b.relid FROM replicant.backfills b"
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

		ids[i] = replicant_snapshot_plan_int8(i, 1);
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
 * One backfill per table; shards of REPLICANT_SHARD_WINDOWS windows, the
 * last one open-ended so rows added behind the planned size are read too.
 * $1 is the pipeline, $2 its publications.
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
void
replicant_snapshot_plan(ReplicantPipeline *pipeline, bool replace)
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
bool
replicant_snapshot_unplanned_tables(ReplicantPipeline *pipeline, const List *planned)
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
List *
replicant_snapshot_planned_relids(ReplicantPipeline *pipeline)
{
	ReplicantCatalogAccess access;
	MemoryContext caller = CurrentMemoryContext;
	List *relids = NIL;
	uint64 i;

	replicant_catalog_begin(&access);
	replicant_snapshot_plan_read("SELECT relid FROM replicant.backfills"
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
 * Shards claimed, and their progress (shard workers)
 */

static SPIPlanPtr claim_plan = NULL;
static SPIPlanPtr progress_plan = NULL;
static SPIPlanPtr restart_plan = NULL;

/* Claims an unfinished shard of the pipeline; false when none is left. */
bool
replicant_snapshot_claim_shard(int32 pipeline_id, ReplicantShard *shard)
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

		shard->backfill_id = replicant_snapshot_plan_int8(0, 1);
		shard->shard = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		shard->relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
		shard->next_block = replicant_snapshot_plan_int8(0, 4);
		shard->hi_block = replicant_snapshot_plan_int8(0, 5);

		/*
		 * Past the record of the claim's update: each claim of the shard
		 * (a window is read once per claim) has its own, in the webhook-ids
		 * of its windows, durable before they are sent (the claim commits,
		 * replicant_checkpoint_make_durable flushes it).
		 */
		shard->claimed_at = GetXLogInsertRecPtr();
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
		 * table (replicant_snapshot_restart_table) commits while the claim
		 * waits for the shard's row, the claim gets the restarted row but
		 * still joins the old stamp.  Read with it, the shard would look
		 * rewritten and be left claimed, never read.
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
void
replicant_snapshot_record_progress(ReplicantShard *shard, bool done, int64 rows)
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
void
replicant_snapshot_restart_table(ReplicantShard *shard, Oid relfilenode)
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
void
replicant_snapshot_skip_table(ReplicantShard *shard)
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
