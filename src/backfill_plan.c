/*
 * backfill_plan.c
 *		Planning incremental backfills: the read method (the router), the
 *		table's measures and bitmap ranges, read as the table's owner once
 *		the pipeline's owner was found to read the table whole; and planning
 *		again the tables whose backfill was skipped while no publication
 *		published them, once one does again.
 */
#include "postgres.h"

#include <math.h>

#include "access/table.h"
#include "catalog/pg_class_d.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "storage/bufmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "backfill_plan.h"
#include "catalog.h"
#include "chunk.h"
#include "encoder.h"
#include "key_order.h"
#include "partition_root.h"
#include "publication_rules.h"
#include "pubfilter.h"
#include "row_key.h"
#include "table_read.h"

/* Blocks sampled for the physical order of a table without statistics. */
#define ORDER_SAMPLE_BLOCKS 200

/* |correlation| of the leading key column from which keyset reads in order. */
#define KEYSET_CORRELATION 0.8

/*
 * How well the table's physical order follows the key's, from the first
 * rows of evenly spread blocks (rank correlation, as pg_stats.correlation
 * is), for a table never analysed.  Needs SPI.
 */
static bool
sampled_correlation(Relation rel, ReplicantKeyOrder *order, double *correlation)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(rel);
	StringInfoData tids;
	StringInfoData sql;
	Oid argtypes[1] = {TEXTOID};
	Datum args[1];
	bool isnull = true;
	BlockNumber i;
	BlockNumber step;

	if (nblocks == 0)
		return false;
	step = Max(1, nblocks / ORDER_SAMPLE_BLOCKS);
	initStringInfo(&tids);
	appendStringInfoChar(&tids, '{');
	for (i = 0; i < nblocks; i += step)
		appendStringInfo(&tids, "%s\"(%u,1)\",\"(%u,2)\",\"(%u,3)\"", i ? "," : "", i, i, i);
	appendStringInfoChar(&tids, '}');
	args[0] = CStringGetTextDatum(tids.data);

	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "SELECT pg_catalog.corr(a::pg_catalog.float8, b::pg_catalog.float8) FROM ("
					 " SELECT pg_catalog.row_number() OVER (ORDER BY ctid USING OPERATOR(pg_catalog.<)) AS a,"
					 "        pg_catalog.row_number() OVER (");
	replicant_key_order_by(&sql, order);
	appendStringInfo(&sql, ") AS b FROM ONLY %s"
						   "  WHERE ctid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.tid[])) s",
					 quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												RelationGetRelationName(rel)));
	if (SPI_execute_with_args(sql.data, 1, argtypes, args, NULL, true, 1) == SPI_OK_SELECT &&
		SPI_processed > 0)
	{
		Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			*correlation = DatumGetFloat8(d);
	}
	return !isnull;
}

/*
 * Block windows read a row where it is when its window comes.  An update
 * that moves a row into a block already read hides it from the backfill,
 * and the stream's update is all the sink gets of it: whole, unless it left
 * TOASTed columns unchanged.  So ctid is never chosen for a table with a key
 * whose updates can leave them out, and asked for, it warns.
 */
static void
warn_ctid_can_lose_toast(Relation rel)
{
	ereport(WARNING,
			(errmsg("mode \"ctid\" can deliver rows of table \"%s\" without their TOASTed columns",
					RelationGetRelationName(rel)),
			 errdetail("A row that an update leaving a TOASTed column unchanged moves into a block the backfill has already read is not read; the sink gets the update alone."),
			 errhint("Use mode \"keyset\" or \"auto\" if the table's rows are updated during the backfill.")));
}

/*
 * The router: the requested mode, checked against the table's key, or for
 * 'auto' the one its key and physical order suit (pg_stats, else a sample
 * of its blocks).  Needs SPI.
 */
static char *
choose_mode(Relation rel, const char *requested)
{
	Bitmapset *key_columns;
	bool whole_row;
	bool identity_full;
	char *mode;

	replicant_row_key_identity(rel, &key_columns, &whole_row, &identity_full);
	if (strcmp(requested, "ctid") == 0)
	{
		if (key_columns != NULL && replicant_table_can_leave_toast_unchanged(rel))
			warn_ctid_can_lose_toast(rel);
		mode = "ctid";
	}
	else if (key_columns == NULL)
	{
		if (strcmp(requested, "auto") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("table \"%s\" has no key, so it can only be read with mode \"ctid\"",
							RelationGetRelationName(rel))));
		mode = "ctid";
	}
	else if (strcmp(requested, "bitmap") == 0 && bms_num_members(key_columns) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("mode \"bitmap\" needs a single-column key"),
				 errhint("Use mode \"keyset\" or \"ctid\" for table \"%s\".",
						 RelationGetRelationName(rel))));
	else if (strcmp(requested, "auto") != 0)
		mode = pstrdup(requested);
	else if (replicant_table_can_leave_toast_unchanged(rel))
		mode = "keyset"; /* never ctid: warn_ctid_can_lose_toast says why */
	else
	{
		/*
		 * Keyset walks the index in order, which reads the heap sequentially
		 * only when it is in key order.  Otherwise block windows read it
		 * sequentially whatever the key (bench/backfill_modes.sh on a
		 * random-UUID table: ctid 125,000, keyset 108,000, bitmap 92,000
		 * rows/s).
		 */
		Oid argtypes[3] = {TEXTOID, TEXTOID, TEXTOID};
		Datum args[3];
		bool isnull = true;
		double correlation = 0;
		ReplicantKeyOrder *order = replicant_key_order(rel);

		args[0] = CStringGetTextDatum(get_namespace_name(RelationGetNamespace(rel)));
		args[1] = CStringGetTextDatum(RelationGetRelationName(rel));
		args[2] = CStringGetTextDatum(linitial(order->names));
		if (SPI_execute_with_args("SELECT correlation FROM pg_catalog.pg_stats"
								  " WHERE schemaname OPERATOR(pg_catalog.=) $1"
								  "   AND tablename OPERATOR(pg_catalog.=) $2"
								  "   AND attname OPERATOR(pg_catalog.=) $3",
								  3, argtypes, args, NULL, true, 1) == SPI_OK_SELECT &&
			SPI_processed > 0)
		{
			Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

			if (!isnull)
				correlation = DatumGetFloat4(d);
		}
		/* Never analysed: look at the physical order itself. */
		if (isnull)
			isnull = !sampled_correlation(rel, order, &correlation);
		if (!isnull && fabs(correlation) >= KEYSET_CORRELATION)
			mode = "keyset";
		else
			mode = "ctid";
	}
	return mode;
}

/*
 * Boundaries of bitmap sub-ranges of about REPLICANT_CHUNK_ROWS rows each of rel's
 * estimate rows, as a text[] in the order of the key's index.  Needs SPI.
 */
static Datum
bitmap_bounds(Relation rel, int64 estimate)
{
	ReplicantKeyOrder *order = replicant_key_order(rel);
	const char *key = quote_identifier(linitial(order->names));
	const char *lt = linitial(order->lt_ops);
	int64 ranges = Max(1, estimate / REPLICANT_CHUNK_ROWS);
	StringInfoData sql;
	Datum bounds;
	bool isnull;
	int pinned;

	initStringInfo(&sql);
	/* Sorted as the key's index sorts: as text, 10 would come before 9. */
	appendStringInfo(&sql,
					 "SELECT pg_catalog.array_agg(b::pg_catalog.text ORDER BY b USING %s)"
					 "  FROM (SELECT DISTINCT b FROM pg_catalog.unnest(("
					 "  SELECT pg_catalog.percentile_disc(ARRAY(SELECT g::pg_catalog.float8 OPERATOR(pg_catalog./) " INT64_FORMAT
					 "                              FROM pg_catalog.generate_series(1, " INT64_FORMAT ") g))"
					 "         WITHIN GROUP (ORDER BY %s USING %s) FROM ONLY %s)) b) d",
					 lt, ranges, ranges - 1, key, lt,
					 quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												RelationGetRelationName(rel)));
	/*
	 * Rendered here, in the caller's session (or the worker's, planning
	 * again a table published again), and parsed by the worker:
	 * both under the encoder's pinned settings (DateStyle, TimeZone,
	 * IntervalStyle, extra_float_digits...), which the worker keeps for its
	 * whole life, not under whatever the caller has set.
	 */
	pinned = replicant_encoder_pin_settings_local();
	if (SPI_execute(sql.data, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not plan bitmap ranges");
	bounds = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		bounds = PointerGetDatum(construct_empty_array(TEXTOID));
	bounds = PointerGetDatum(DatumGetArrayTypePCopy(bounds));
	AtEOXact_GUC(false, pinned);
	return bounds;
}

/*
 * Refuses a table the pipeline's owner may not read whole, before anything
 * reads it: the worker would halt on it, and no code of the table owner's
 * (a policy that applies to the pipeline's owner) may run for it.
 */
static void
check_owner_may_read(Relation rel, Oid owner)
{
	char *refused = replicant_table_read_denied(rel, owner);

	if (refused)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s", refused),
				 errdetail("A backfill reads every row of the table, as the pipeline's owner may.")));
}

/*
 * Chooses the read method and measures the table (its rows, relfilenode
 * and, for bitmap, the ranges' bounds), once the pipeline's owner was found
 * to read it whole.  That reads the table, which runs code of its owner's
 * (a partial index's predicate the planner folds, the key's comparisons):
 * as that owner, restricted (replicant_table_owner_enter), as the worker
 * reads it too.  Needs SPI.
 */
static char *
plan_as_table_owner(Oid owner, Oid relid, const char *requested_mode, int64 *estimate,
					Oid *relfilenode, Datum *bounds)
{
	Relation rel = table_open(relid, AccessShareLock);
	ReplicantTableOwnerScope scope;
	char *mode;

	check_owner_may_read(rel, owner);
	replicant_table_owner_enter(rel, &scope);
	mode = choose_mode(rel, requested_mode);
	*estimate = replicant_table_estimate_rows(rel);
	*relfilenode = rel->rd_rel->relfilenode;
	*bounds = strcmp(mode, "bitmap") == 0 ? bitmap_bounds(rel, *estimate) : (Datum) 0;
	replicant_table_owner_leave(&scope);
	table_close(rel, AccessShareLock);
	return mode;
}

int64
replicant_backfill_plan(int32 pipeline_id, int32 destination_id, Oid owner, Oid relid,
						const char *requested_mode)
{
	Oid types[7] = {INT4OID, OIDOID, TEXTOID, INT8OID, OIDOID, TEXTARRAYOID, INT4OID};
	Datum values[7];
	char nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int64 estimate;
	Oid relfilenode;
	Datum bounds;
	char *mode;
	bool isnull;
	bool with_destinations = replicant_destinations_exist();

	/* Only the plan's row is written with the caller's raised rights. */
	mode = plan_as_table_owner(owner, relid, requested_mode, &estimate, &relfilenode, &bounds);
	values[0] = Int32GetDatum(pipeline_id);
	values[1] = ObjectIdGetDatum(relid);
	values[2] = CStringGetTextDatum(mode);
	values[3] = Int64GetDatum(estimate);
	values[4] = ObjectIdGetDatum(relfilenode);
	values[5] = bounds;
	nulls[5] = bounds ? ' ' : 'n';
	values[6] = Int32GetDatum(destination_id);
	nulls[6] = destination_id != 0 ? ' ' : 'n';
	/* replicant.backfills.destination_id comes with 0.3.0's objects. */
	Assert(destination_id == 0 || with_destinations);
	if (SPI_execute_with_args(with_destinations ?
								  "INSERT INTO replicant.backfills"
								  " (pipeline_id, relid, kind, mode, rows_estimate, relfilenode, bounds,"
								  "  destination_id)"
								  " VALUES ($1, $2, 'incremental', $3, $4, $5, $6, $7) RETURNING id" :
								  "INSERT INTO replicant.backfills"
								  " (pipeline_id, relid, kind, mode, rows_estimate, relfilenode, bounds)"
								  " VALUES ($1, $2, 'incremental', $3, $4, $5, $6) RETURNING id",
							  with_destinations ? 7 : 6, types, values, nulls, false, 1) !=
		SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not plan the backfill");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Whether a publication of the pipeline publishes rel now, by the rule a
 * chunk or a snapshot window skips it by.  Publications that disagree on
 * its columns count as publishing it: reading it halts on that.
 */
static bool
published_now(ReplicantPipeline *pipeline, Relation rel)
{
	Relation target = replicant_partition_root_open_for_read(rel, pipeline->publications,
															 AccessShareLock);
	ReplicantPubFilter *filter;
	char *conflict = replicant_publication_read_filter(rel, target, pipeline->publications,
													   &filter);
	bool published = conflict != NULL || replicant_pubfilter_publishes(filter);

	replicant_pubfilter_free(filter);
	if (target != rel)
		table_close(target, AccessShareLock);
	return published;
}

/* A skipped backfill's table, and whom it was for. */
typedef struct SkippedTable
{
	Oid relid;
	int32 destination_id; /* 0: every destination */
} SkippedTable;

/*
 * The skipped backfills and initial snapshots of the pipeline that no later
 * backfill of their table for the same destinations replaced (one for a
 * single destination does not replace one for all), oldest first, in the
 * SPI connection's memory.  Needs SPI.
 */
static List *
skipped_tables(int32 pipeline_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	List *skipped = NIL;
	uint64 i;

	if (SPI_execute_with_args("SELECT b.relid, coalesce(b.destination_id, 0) FROM replicant.backfills b"
							  " WHERE b.pipeline_id OPERATOR(pg_catalog.=) $1"
							  "   AND b.state OPERATOR(pg_catalog.=) 'skipped'"
							  "   AND NOT EXISTS (SELECT 1 FROM replicant.backfills l"
							  "                    WHERE l.pipeline_id OPERATOR(pg_catalog.=) b.pipeline_id"
							  "                      AND l.relid OPERATOR(pg_catalog.=) b.relid"
							  "                      AND l.id OPERATOR(pg_catalog.>) b.id"
							  "                      AND (l.destination_id IS NULL OR"
							  "                           l.destination_id OPERATOR(pg_catalog.=) b.destination_id))"
							  " ORDER BY b.id",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	for (i = 0; i < SPI_processed; i++)
	{
		SkippedTable *table = palloc(sizeof(SkippedTable));
		bool isnull;

		table->relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
													  SPI_tuptable->tupdesc, 1, &isnull));
		table->destination_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc, 2, &isnull));
		skipped = lappend(skipped, table);
	}
	return skipped;
}

/*
 * Plans a backfill of the table again, from its start and for the same
 * destinations, when a publication publishes it again (setting *planned);
 * returns whether it is still
 * skipped.  Sets *refused (in mcxt) when the pipeline's owner may not read
 * the table it would plan.
 */
static bool
replan_if_published(ReplicantPipeline *pipeline, const SkippedTable *table, bool *planned,
					char **refused, MemoryContext mcxt)
{
	Oid relid = table->relid;
	Relation rel;
	char *name;

	replicant_partition_lock_ancestors(relid, AccessShareLock);
	rel = get_rel_relkind(relid) == RELKIND_RELATION ? try_table_open(relid, AccessShareLock) :
													   NULL;

	/* Dropped since: nothing of it is published, nothing is missing. */
	if (rel == NULL)
		return false;
	if (!published_now(pipeline, rel))
	{
		table_close(rel, AccessShareLock);
		return true;
	}
	name = pstrdup(RelationGetRelationName(rel));
	*refused = replicant_table_read_denied(rel, pipeline->owner);
	table_close(rel, AccessShareLock);
	if (*refused)
	{
		*refused = MemoryContextStrdup(mcxt, *refused);
		return false;
	}
	(void) replicant_backfill_plan(pipeline->id, table->destination_id, pipeline->owner, relid, "auto");
	*planned = true;
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" backfills table \"%s\" again from its start",
					pipeline->name, name),
			 errdetail("Its last backfill or snapshot was skipped while no publication of the pipeline published it, and one publishes it again.")));
	return false;
}

bool
replicant_backfill_replan_skipped(ReplicantPipeline *pipeline, bool *planned,
								  char **halt_reason)
{
	ReplicantCatalogAccess access;
	MemoryContext caller = CurrentMemoryContext;
	bool skipped = false;
	ListCell *lc;

	*planned = false;
	*halt_reason = NULL;
	replicant_catalog_begin(&access);
	/*
	 * Under the SQL objects of 0.1.0 and 0.2.0 a skip is recorded as
	 * 'cancelled', which cannot be told from the operator's cancel.
	 */
	if (strcmp(replicant_catalog_skipped_state(), "skipped") == 0)
	{
		foreach(lc, skipped_tables(pipeline->id))
		{
			skipped |= replan_if_published(pipeline, lfirst(lc), planned, halt_reason, caller);
			if (*halt_reason)
				break;
		}
	}
	replicant_catalog_end(&access);
	return skipped;
}
