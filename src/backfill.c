/*
 * backfill.c
 *		Incremental backfills beside the live stream (the DBLog method).
 *
 * The pipeline worker reads a table chunk by chunk while it keeps
 * streaming.  Each chunk is bracketed by two non-transactional logical
 * decoding messages: the low watermark is written before the chunk's
 * snapshot is taken, the high one after the chunk was read.  When decoding
 * reaches the low watermark the chunk opens; every delivered change to the
 * table between the two watermarks drops the chunk row with the same key
 * (the stream's version is newer or as new); at the high watermark the rest
 * of the chunk is delivered, in stream order, so a stale read never
 * overwrites a newer change at the sink.  Progress is recorded after every
 * delivered chunk, so a crash resumes from the last one.
 *
 * WAL order is not visibility order: a backend writes its commit record
 * before it leaves the proc array, so a snapshot taken after the low
 * watermark can miss a transaction committed below it.  A chunk whose
 * snapshot misses a transaction the clog already shows committed is not
 * read (it is tried again shortly); a delivered transaction the snapshot
 * did not see collides with the chunk wherever it is in the stream.
 *
 * Without a key no chunk row can be told apart, so nothing but a TRUNCATE
 * drops one: such a table may arrive with duplicates, never with holes.  An
 * UPDATE that left TOASTed columns unchanged does not drop its row: the
 * row as read goes before the update, so a sink that never saw the row
 * still ends with every column.
 *
 * Read methods, chosen when the backfill is planned and never changed:
 * keyset (ORDER BY key, the last key as cursor), bitmap (key sub-ranges
 * without ORDER BY, boundaries computed at plan time) and ctid (bounded block
 * windows, a TID Range Scan; the only method for tables without a key).  A
 * ctid cursor is stamped with the table's relfilenode and starts over when
 * VACUUM FULL, CLUSTER or TRUNCATE rewrote the table.  Keyset and bitmap
 * compare and order the key with the operators of its index's operator
 * families, in the index's column order, whatever the search_path.
 */
#include "postgres.h"

#include <math.h>

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type_d.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "replication/message.h"
#include "storage/bufmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "backfill.h"
#include "catalog.h"
#include "compat.h"
#include "encoder.h"
#include "format.h"
#include "partition_root.h"
#include "publication.h"
#include "pubfilter.h"
#include "row_key.h"
#include "table_read.h"

/* Rows per keyset chunk; blocks per ctid chunk; rows per bitmap range. */
#define CHUNK_ROWS 2000
#define CHUNK_BLOCKS 32
/* Rows fetched from a chunk's cursor at a time. */
#define FETCH_ROWS 200
/* Wait before a chunk whose snapshot missed a commit is tried again. */
#define GAP_RETRY_MS 100
/* Blocks sampled for the physical order of a table without statistics. */
#define ORDER_SAMPLE_BLOCKS 200

/* |correlation| of the leading key column from which keyset reads in order. */
#define KEYSET_CORRELATION 0.8

/*
 * The key's columns as its index orders them, with the operators of the
 * index's operator families as SQL text (OPERATOR(schema.name)): a type's
 * operators found through the search_path (pinned to pg_catalog in the
 * worker) can be another type's, citext's "<" resolving to text's.
 */
typedef struct KeyOrder
{
	List *names;     /* column names */
	List *types;     /* their types, qualified */
	List *order_ops; /* ORDER BY ... USING, as the index orders */
	List *after_ops; /* "comes after" in that order */
	List *eq_ops;
	List *lt_ops; /* ascending, whatever the index */
	List *ge_ops;
} KeyOrder;

static char *
qualified_operator(Oid opno)
{
	HeapTuple tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(opno));
	Form_pg_operator op;
	char *sql;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for operator %u", opno);
	op = (Form_pg_operator) GETSTRUCT(tuple);
	sql = psprintf("OPERATOR(%s.%s)", quote_identifier(get_namespace_name(op->oprnamespace)),
				   NameStr(op->oprname));
	ReleaseSysCache(tuple);
	return sql;
}

/* The index the key comes from: the replica identity's, else the primary key. */
static Oid
key_index(Relation rel)
{
	Oid index = RelationGetReplicaIndex(rel);

	return OidIsValid(index) ? index : REPLICANT_PRIMARY_KEY_INDEX(rel);
}

static KeyOrder *
key_order(Relation rel)
{
	KeyOrder *order = palloc0(sizeof(KeyOrder));
	Oid indexoid = key_index(rel);
	Relation index;
	int i;

	if (!OidIsValid(indexoid))
		elog(ERROR, "table \"%s\" has no key index", RelationGetRelationName(rel));
	index = index_open(indexoid, AccessShareLock);
	for (i = 0; i < IndexRelationGetNumberOfKeyAttributes(index); i++)
	{
		AttrNumber attnum = index->rd_index->indkey.values[i];
		Oid family = index->rd_opfamily[i];
		Oid type = index->rd_opcintype[i];
		bool desc = (index->rd_indoption[i] & INDOPTION_DESC) != 0;
		Oid lt = get_opfamily_member(family, type, type, BTLessStrategyNumber);
		Oid gt = get_opfamily_member(family, type, type, BTGreaterStrategyNumber);
		Oid eq = get_opfamily_member(family, type, type, BTEqualStrategyNumber);
		Oid ge = get_opfamily_member(family, type, type, BTGreaterEqualStrategyNumber);

		if (attnum <= 0 || !OidIsValid(lt) || !OidIsValid(gt) || !OidIsValid(eq) || !OidIsValid(ge))
			elog(ERROR, "key index of table \"%s\" is not a btree index on columns",
				 RelationGetRelationName(rel));
		order->names = lappend(order->names,
							   pstrdup(NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname)));
		order->types = lappend(order->types,
							   format_type_be_qualified(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid));
		order->order_ops = lappend(order->order_ops, qualified_operator(desc ? gt : lt));
		order->after_ops = lappend(order->after_ops, qualified_operator(desc ? lt : gt));
		order->eq_ops = lappend(order->eq_ops, qualified_operator(eq));
		order->lt_ops = lappend(order->lt_ops, qualified_operator(lt));
		order->ge_ops = lappend(order->ge_ops, qualified_operator(ge));
	}
	index_close(index, AccessShareLock);
	return order;
}

/* "ORDER BY a USING op, b USING op" as the key index orders. */
static void
append_order_by(StringInfo sql, KeyOrder *order)
{
	ListCell *lc;
	ListCell *lo;

	appendStringInfoString(sql, " ORDER BY ");
	forboth(lc, order->names, lo, order->order_ops)
		appendStringInfo(sql, "%s%s USING %s", foreach_current_index(lc) ? ", " : "",
						 quote_identifier(lfirst(lc)), (char *) lfirst(lo));
}

/*
 * "The key comes after the cursor ($1, $2, ...)": one row comparison when
 * every column compares with the same operator, else spelled out column by
 * column.
 */
static void
append_after_cursor(StringInfo sql, KeyOrder *order)
{
	int n = list_length(order->names);
	bool same = true;
	int i;
	int j;

	for (i = 1; i < n; i++)
		same &= strcmp(list_nth(order->after_ops, i), linitial(order->after_ops)) == 0;
	if (same)
	{
		appendStringInfoString(sql, "ROW(");
		for (i = 0; i < n; i++)
			appendStringInfo(sql, "%s%s", i ? ", " : "",
							 quote_identifier(list_nth(order->names, i)));
		appendStringInfo(sql, ") %s ROW(", (char *) linitial(order->after_ops));
		for (i = 0; i < n; i++)
			appendStringInfo(sql, "%s$%d::%s", i ? ", " : "", i + 1,
							 (char *) list_nth(order->types, i));
		appendStringInfoChar(sql, ')');
		return;
	}
	appendStringInfoChar(sql, '(');
	for (i = 0; i < n; i++)
	{
		appendStringInfo(sql, "%s(", i ? " OR " : "");
		for (j = 0; j < i; j++)
			appendStringInfo(sql, "%s %s $%d::%s AND ",
							 quote_identifier(list_nth(order->names, j)),
							 (char *) list_nth(order->eq_ops, j), j + 1,
							 (char *) list_nth(order->types, j));
		appendStringInfo(sql, "%s %s $%d::%s)",
						 quote_identifier(list_nth(order->names, i)),
						 (char *) list_nth(order->after_ops, i), i + 1,
						 (char *) list_nth(order->types, i));
	}
	appendStringInfoChar(sql, ')');
}

/*
 * How well the table's physical order follows the key's, from the first
 * rows of evenly spread blocks (rank correlation, as pg_stats.correlation
 * is), for a table never analysed.  Needs SPI.
 */
static bool
sampled_correlation(Relation rel, KeyOrder *order, double *correlation)
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
	append_order_by(&sql, order);
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

char *
replicant_backfill_choose_mode(Oid relid, const char *requested)
{
	Relation rel = table_open(relid, AccessShareLock);
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
		KeyOrder *order = key_order(rel);

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
	table_close(rel, AccessShareLock);
	return mode;
}

/*
 * Boundaries of bitmap sub-ranges of about CHUNK_ROWS rows each of rel's
 * estimate rows, as a text[] in the order of the key's index.  Needs SPI.
 */
static Datum
bitmap_bounds(Relation rel, int64 estimate)
{
	KeyOrder *order = key_order(rel);
	const char *key = quote_identifier(linitial(order->names));
	const char *lt = linitial(order->lt_ops);
	int64 ranges = Max(1, estimate / CHUNK_ROWS);
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
	 * Rendered here, in the caller's session, and parsed by the worker:
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
 * Chooses the read method and measures the table (its rows, relfilenode
 * and, for bitmap, the ranges' bounds) as the pipeline's owner, as every
 * read of the table is.  That reads the table, so it runs code of the
 * owner's and of the table owner's (row-level security policies, the key
 * type's comparisons) in the caller's session: only as a security-
 * restricted operation, as CREATE INDEX runs an index's expressions.  Such
 * code creates no temporary objects, and every setting it changes is
 * undone on return; search_path is pinned meanwhile.  Needs SPI.
 */
static char *
plan_as_owner(Oid owner, Oid relid, const char *requested_mode, int64 *estimate,
			  Oid *relfilenode, Datum *bounds)
{
	Oid saved_userid;
	int saved_sec_context;
	int guc_level;
	Relation rel;
	char *mode;

	GetUserIdAndSecContext(&saved_userid, &saved_sec_context);
	SetUserIdAndSecContext(owner, saved_sec_context | SECURITY_LOCAL_USERID_CHANGE |
									  SECURITY_RESTRICTED_OPERATION);
	guc_level = replicant_pin_search_path();
	mode = replicant_backfill_choose_mode(relid, requested_mode);
	rel = table_open(relid, AccessShareLock);
	*estimate = replicant_table_estimate_rows(rel);
	*relfilenode = rel->rd_rel->relfilenode;
	*bounds = strcmp(mode, "bitmap") == 0 ? bitmap_bounds(rel, *estimate) : (Datum) 0;
	table_close(rel, AccessShareLock);
	AtEOXact_GUC(false, guc_level);
	SetUserIdAndSecContext(saved_userid, saved_sec_context);
	return mode;
}

int64
replicant_backfill_plan(int32 pipeline_id, Oid owner, Oid relid, const char *requested_mode)
{
	Oid types[6] = {INT4OID, OIDOID, TEXTOID, INT8OID, OIDOID, TEXTARRAYOID};
	Datum values[6];
	char nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	int64 estimate;
	Oid relfilenode;
	Datum bounds;
	char *mode;
	bool isnull;

	/* Only the plan's row is written with the caller's raised rights. */
	mode = plan_as_owner(owner, relid, requested_mode, &estimate, &relfilenode, &bounds);
	values[0] = Int32GetDatum(pipeline_id);
	values[1] = ObjectIdGetDatum(relid);
	values[2] = CStringGetTextDatum(mode);
	values[3] = Int64GetDatum(estimate);
	values[4] = ObjectIdGetDatum(relfilenode);
	values[5] = bounds;
	nulls[5] = bounds ? ' ' : 'n';
	if (SPI_execute_with_args("INSERT INTO replicant.backfills"
							  " (pipeline_id, relid, kind, mode, rows_estimate, relfilenode, bounds)"
							  " VALUES ($1, $2, 'incremental', $3, $4, $5, $6) RETURNING id",
							  6, types, values, nulls, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not plan the backfill");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

static List *
text_array_to_list(Datum d, bool isnull)
{
	Datum *elems;
	int n;
	int i;
	List *list = NIL;

	if (isnull)
		return NIL;
	deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	for (i = 0; i < n; i++)
		list = lappend(list, TextDatumGetCString(elems[i]));
	return list;
}

ReplicantBackfill *
replicant_backfill_next(int32 pipeline_id)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	ReplicantBackfill *b = NULL;
	MemoryContext caller = CurrentMemoryContext;

	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("SELECT id, relid, mode, relfilenode, cursor_key, next_block,"
							  "       bounds, next_range, first_sent, rows_done"
							  "  FROM replicant.backfills"
							  " WHERE pipeline_id = $1 AND kind = 'incremental'"
							  "   AND state IN ('planned', 'running')"
							  " ORDER BY id LIMIT 1",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed > 0)
	{
		HeapTuple t = SPI_tuptable->vals[0];
		TupleDesc d = SPI_tuptable->tupdesc;
		bool isnull;
		Datum v;
		char *relname;
		MemoryContext old = MemoryContextSwitchTo(caller);

		b = palloc0(sizeof(ReplicantBackfill));
		b->id = DatumGetInt64(SPI_getbinval(t, d, 1, &isnull));
		b->relid = DatumGetObjectId(SPI_getbinval(t, d, 2, &isnull));
		relname = get_rel_name(b->relid);
		strlcpy(b->relname, relname ? relname : "", NAMEDATALEN);
		b->mode = TextDatumGetCString(SPI_getbinval(t, d, 3, &isnull));
		b->relfilenode = DatumGetObjectId(SPI_getbinval(t, d, 4, &isnull));
		v = SPI_getbinval(t, d, 5, &isnull);
		b->cursor_key = text_array_to_list(v, isnull);
		b->next_block = DatumGetInt64(SPI_getbinval(t, d, 6, &isnull));
		v = SPI_getbinval(t, d, 7, &isnull);
		b->bounds = text_array_to_list(v, isnull);
		b->next_range = DatumGetInt32(SPI_getbinval(t, d, 8, &isnull));
		b->first_sent = DatumGetBool(SPI_getbinval(t, d, 9, &isnull));
		b->rows_done = DatumGetInt64(SPI_getbinval(t, d, 10, &isnull));
		MemoryContextSwitchTo(old);
	}
	replicant_catalog_end(&access);
	return b;
}

/*
 * Builds the chunk's SELECT of select_list from rel; parameters are the
 * cursor's key values.  Only rows that pass the publications' row filter
 * (row_filter, if not NULL).
 */
static char *
chunk_query(ReplicantBackfill *b, Relation rel, const char *select_list,
			KeyOrder *order, int64 nblocks, const char *row_filter, bool *last)
{
	StringInfoData sql;
	const char *where = row_filter ? " AND " : " WHERE ";

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s FROM ONLY %s", select_list,
					 quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												RelationGetRelationName(rel)));
	if (row_filter)
		appendStringInfo(&sql, " WHERE (%s)", row_filter);
	*last = false;
	if (strcmp(b->mode, "ctid") == 0)
	{
		appendStringInfo(&sql, "%sctid OPERATOR(pg_catalog.>=) '(" INT64_FORMAT ",0)'::pg_catalog.tid"
							   " AND ctid OPERATOR(pg_catalog.<) '(" INT64_FORMAT ",0)'::pg_catalog.tid",
						 where, b->next_block, b->next_block + CHUNK_BLOCKS);
		*last = (b->next_block + CHUNK_BLOCKS >= nblocks);
	}
	else if (strcmp(b->mode, "keyset") == 0)
	{
		if (b->cursor_key != NIL)
		{
			appendStringInfoString(&sql, where);
			append_after_cursor(&sql, order);
		}
		append_order_by(&sql, order);
		appendStringInfo(&sql, " LIMIT %d", CHUNK_ROWS);
	}
	else
	{
		/* bitmap: range next_range is [bounds[r-1], bounds[r]) */
		int nbounds = list_length(b->bounds);
		const char *key = quote_identifier(linitial(order->names));
		char *type = linitial(order->types);

		appendStringInfo(&sql, "%strue", where);
		if (b->next_range > 0)
			appendStringInfo(&sql, " AND %s %s $1::%s", key, (char *) linitial(order->ge_ops), type);
		if (b->next_range < nbounds)
			appendStringInfo(&sql, " AND %s %s $2::%s", key, (char *) linitial(order->lt_ops), type);
		*last = (b->next_range >= nbounds);
	}
	return sql.data;
}

/*
 * Whether the snapshot misses a transaction that already committed: its
 * commit record may be below the low watermark, outside the window, and
 * the chunk would read the row as it was before.
 */
static bool
snapshot_misses_commits(Snapshot snapshot)
{
	uint32 i;

	for (i = 0; i < snapshot->xcnt; i++)
		if (TransactionIdDidCommit(snapshot->xip[i]))
			return true;
	return false;
}

static ReplicantChunk *
new_chunk(ReplicantBackfill *b, MemoryContext parent)
{
	ReplicantChunk *chunk = replicant_chunk_create(parent, b->relid, CHUNK_ROWS * 2);

	chunk->backfill = b;
	snprintf(chunk->token, sizeof(chunk->token), INT64_FORMAT ":" INT64_FORMAT ":%u",
			 b->id, b->chunks++, (uint32) pg_prng_uint32(&pg_global_prng_state));
	if (strcmp(b->mode, "ctid") == 0)
		chunk->position = b->next_block;
	else if (strcmp(b->mode, "bitmap") == 0)
		chunk->position = b->next_range;
	else
		chunk->position = b->rows_done;
	return chunk;
}

/* A copy of a list of strings in the current memory context. */
static List *
copy_strings(List *strings)
{
	List *copy = NIL;
	ListCell *lc;

	foreach(lc, strings)
		copy = lappend(copy, pstrdup(lfirst(lc)));
	return copy;
}

/* The cursor's parameters: keyset's last key, bitmap's range bounds. */
static int
chunk_args(ReplicantBackfill *b, Datum *args, Oid *types, char *nulls)
{
	ListCell *lc;
	int n = 0;

	if (strcmp(b->mode, "keyset") == 0)
	{
		foreach(lc, b->cursor_key)
		{
			args[n] = CStringGetTextDatum(lfirst(lc));
			types[n] = TEXTOID;
			nulls[n++] = ' ';
		}
	}
	else if (strcmp(b->mode, "bitmap") == 0)
	{
		types[0] = types[1] = TEXTOID;
		nulls[0] = nulls[1] = 'n';
		args[0] = args[1] = (Datum) 0;
		if (b->next_range > 0)
		{
			args[0] = CStringGetTextDatum(list_nth(b->bounds, b->next_range - 1));
			nulls[0] = ' ';
		}
		if (b->next_range < list_length(b->bounds))
		{
			args[1] = CStringGetTextDatum(list_nth(b->bounds, b->next_range));
			nulls[1] = ' ';
		}
		n = 2;
	}
	return n;
}

/* The keyset cursor after the chunk's last row, applied once it is delivered. */
static void
set_next_cursor(ReplicantChunk *chunk, KeyOrder *order, HeapTuple row, TupleDesc desc)
{
	MemoryContext old = MemoryContextSwitchTo(chunk->context);
	ListCell *lc;

	list_free_deep(chunk->next_cursor_key);
	chunk->next_cursor_key = NIL;
	foreach(lc, order->names)
		chunk->next_cursor_key =
			lappend(chunk->next_cursor_key,
					SPI_getvalue(row, desc, SPI_fnumber(desc, lfirst(lc))));
	MemoryContextSwitchTo(old);
}

/* The cursor after a chunk that read no row (or reads by position): unchanged. */
static void
keep_cursor(ReplicantChunk *chunk)
{
	MemoryContext old = MemoryContextSwitchTo(chunk->context);

	chunk->next_cursor_key = copy_strings(chunk->backfill->cursor_key);
	MemoryContextSwitchTo(old);
}

/* The relation as the chunk's changes name it, kept with the chunk. */
static ReplicantRelation *
chunk_relation(ReplicantChunk *chunk, Relation rel)
{
	ReplicantRelation *relation = MemoryContextAlloc(chunk->context,
													 sizeof(ReplicantRelation));

	relation->schema = MemoryContextStrdup(chunk->context,
										   get_namespace_name(RelationGetNamespace(rel)));
	relation->table = MemoryContextStrdup(chunk->context, RelationGetRelationName(rel));
	return relation;
}

/*
 * Where a row of a table without an identity of columns lies: the ctid
 * the chunk's query selects last for such a table (open_chunk_source).
 */
static ItemPointer
row_position(HeapTuple row, TupleDesc row_desc, const Bitmapset *identity)
{
	bool isnull;

	if (identity != NULL)
		return NULL;
	return (ItemPointer) DatumGetPointer(SPI_getbinval(row, row_desc, row_desc->natts, &isnull));
}

/*
 * Reads the chunk's rows of leaf through a cursor under the given snapshot.
 * A keyset chunk ends early once its rows reach batch_max_bytes (at least
 * one row), its cursor then being the last row taken.  Rows take the names
 * and columns of rel: leaf, or the root it is published as, and leaf's key
 * under rel's names; they carry the published columns only (NULL: all).
 */
static void
read_rows(ReplicantChunk *chunk, Relation leaf, Relation rel, KeyOrder *order,
		  const char *query, Snapshot snapshot, ReplicantPipeline *pipeline,
		  const Bitmapset *columns, bool *last)
{
	const ReplicantFormat *format = replicant_format_of(pipeline);
	int max_bytes = pipeline->batch_max_bytes;
	ReplicantBackfill *b = chunk->backfill;
	TupleDesc desc = RelationGetDescr(rel);
	Bitmapset *key_columns;
	bool whole_row;
	Bitmapset *identity = replicant_row_key_identity_as(leaf, rel, &whole_row);
	bool keyset = strcmp(b->mode, "keyset") == 0;
	Datum args[INDEX_MAX_KEYS];
	Oid types[INDEX_MAX_KEYS];
	char nulls[INDEX_MAX_KEYS];
	int nargs = chunk_args(b, args, types, nulls);
	StringInfoData change;
	StringInfoData key;
	StringInfoData new_row;
	Datum *values = palloc(sizeof(Datum) * desc->natts);
	bool *isnull = palloc(sizeof(bool) * desc->natts);
	Portal portal;
	int64 bytes = 0;
	int64 nread = 0;
	bool full = false;
	MemoryContext row_context = AllocSetContextCreate(CurrentMemoryContext,
													  "replicant backfill row",
													  ALLOCSET_DEFAULT_SIZES);

	replicant_row_key_delivered(leaf, rel, columns, &key_columns, &whole_row);
	initStringInfo(&change);
	initStringInfo(&key);
	initStringInfo(&new_row);
	chunk->relation = chunk_relation(chunk, rel);

	PushActiveSnapshot(snapshot);
	portal = SPI_cursor_open_with_args(NULL, query, nargs, types, args,
									   nargs ? nulls : NULL, true, 0);
	while (!full)
	{
		uint64 i;

		SPI_cursor_fetch(portal, true, FETCH_ROWS);
		if (SPI_processed == 0)
			break;
		for (i = 0; i < SPI_processed && !full; i++)
		{
			/* Detoasted values die with the row; add_row keeps a copy. */
			MemoryContext old = MemoryContextSwitchTo(row_context);
			ReplicantChange record;

			replicant_change_from_row(&record, chunk->relation, &key, &new_row, desc,
									  SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
									  values, isnull, key_columns, whole_row, columns);
			record.backfill_id = b->id;
			record.read_lsn = chunk->low_watermark;
			if (format->read_ids)
				replicant_change_set_read_id(&record, pipeline->event_id_key, desc, values, isnull,
											 identity, b->relid,
											 row_position(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, identity));
			resetStringInfo(&change);
			format->change(&change, pipeline->name, &record);
			MemoryContextSwitchTo(old);
			MemoryContextReset(row_context);
			replicant_chunk_add_row(chunk, key.data, key.len, change.data, change.len);
			bytes += change.len;
			nread++;
			full = keyset && bytes >= max_bytes;
		}
		if (keyset)
			set_next_cursor(chunk, order, SPI_tuptable->vals[i - 1], SPI_tuptable->tupdesc);
		SPI_freetuptable(SPI_tuptable);
	}
	SPI_cursor_close(portal);
	PopActiveSnapshot();
	MemoryContextDelete(row_context);

	if (keyset)
	{
		*last = !full && nread < CHUNK_ROWS;
		if (nread == 0)
			keep_cursor(chunk);
	}
}

/*
 * Starts the chunk's transaction, a transaction of replicant's in which the
 * chunk reads as the pipeline's owner, as the stream would.
 */
static void
begin_chunk(ReplicantCatalogAccess *access)
{
	/* Chunk reads take their own snapshot: no transaction snapshot first. */
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	replicant_catalog_begin(access);
	SetUserIdAndSecContext(access->saved_userid, access->saved_sec_context);
}

/*
 * Writes the chunk's low watermark and takes its snapshot after it, once
 * the chunk holds its table's lock: a snapshot taken before could predate
 * a rewrite (ALTER TABLE ... TYPE) that held the lock meanwhile, and would
 * see none of the rewritten heap's rows, which all carry the rewrite's xid.
 * Returns NULL when the snapshot misses a committed transaction: the chunk
 * is tried again once the proc array has caught up.
 */
static Snapshot
snapshot_after_low_watermark(ReplicantPipeline *pipeline, ReplicantBackfill *b,
							 ReplicantChunk *chunk)
{
	Snapshot snapshot;

	/* Before the chunk's snapshot exists: changes after it open the window. */
	chunk->low_watermark = replicant_chunk_write_watermark(chunk, false);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	if (snapshot_misses_commits(snapshot))
	{
		/* Not visible yet: try again once the proc array has caught up. */
		if (!b->deferred)
			ereport(LOG,
					(errmsg("replicant pipeline \"%s\" defers a backfill chunk of table \"%s\"",
							pipeline->name, b->relname),
					 errdetail("A committed transaction is not visible to new snapshots yet.")));
		b->deferred = true;
		UnregisterSnapshot(snapshot);
		b->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), GAP_RETRY_MS);
		return NULL;
	}
	b->deferred = false;
	replicant_chunk_set_snapshot(chunk, snapshot);
	return snapshot;
}

/*
 * What a chunk reads: the table, the relation its rows are delivered as
 * (itself, or its partition root) and their columns as select_list, the
 * row filter (NULL: every row) and the published columns (NULL: all).
 */
typedef struct ChunkSource
{
	Relation rel;
	Relation target;
	char *select_list;
	char *row_filter;
	Bitmapset *columns;
	bool unpublished; /* rel is NULL: no publication publishes it now */
} ChunkSource;

static void
close_chunk_source(ChunkSource *src)
{
	if (src->rel == NULL)
		return;
	if (src->target != src->rel)
		table_close(src->target, AccessShareLock);
	table_close(src->rel, AccessShareLock);
	src->rel = src->target = NULL;
}

/*
 * Opens what the chunk reads (b's table; NULL when dropped or no longer
 * published) and checks that the owner may read it; returns a value-free
 * reason when not, having closed it again.  A table that is no longer
 * published is skipped whatever the owner may read, as the stream skips it.
 */
static char *
open_chunk_source(ReplicantPipeline *pipeline, ReplicantBackfill *b, ChunkSource *src)
{
	ReplicantPubFilter *filter;
	char *reason;
	bool whole_row;

	memset(src, 0, sizeof(ChunkSource));
	src->rel = try_table_open(b->relid, AccessShareLock);
	if (src->rel == NULL)
		return NULL;
	src->target = replicant_partition_root_open_for_read(src->rel, pipeline->publications,
														 AccessShareLock);
	reason = replicant_publication_read_filter(src->rel, src->target, pipeline->publications,
											   &filter);
	if (reason == NULL && !replicant_pubfilter_publishes(filter))
	{
		/* Its filter would be empty: nothing of it may be read. */
		replicant_pubfilter_free(filter);
		close_chunk_source(src);
		src->unpublished = true;
		return NULL;
	}
	if (reason == NULL)
		reason = replicant_table_read_denied(src->rel);
	if (reason)
	{
		replicant_pubfilter_free(filter);
		close_chunk_source(src);
		return reason;
	}
	src->select_list = replicant_partition_root_select_list(src->rel, src->target);
	/* Where a row without an identity of columns lies names its reads (change.h). */
	if (replicant_row_key_identity_as(src->rel, src->target, &whole_row) == NULL)
		src->select_list = psprintf("%s, ctid", src->select_list);
	src->row_filter = replicant_pubfilter_read_sql(filter, src->target);
	src->columns = bms_copy(filter->columns);
	replicant_pubfilter_free(filter);
	return NULL;
}

/*
 * Reads the chunk's rows of src under snapshot, and notes where the next
 * chunk starts.
 */
static void
read_chunk_rows(ReplicantPipeline *pipeline, ReplicantBackfill *b,
				ReplicantChunk *chunk, ChunkSource *src, Snapshot snapshot)
{
	Relation rel = src->rel;
	KeyOrder *order = NULL;
	char *query;
	bool last;
	int64 nblocks;

	if (strcmp(b->mode, "ctid") == 0 && rel->rd_rel->relfilenode != b->relfilenode)
	{
		/* Rewritten (VACUUM FULL, CLUSTER, TRUNCATE): block positions are stale. */
		ereport(LOG,
				(errmsg("table \"%s\" was rewritten during its backfill; reading it again",
						RelationGetRelationName(rel))));
		b->relfilenode = rel->rd_rel->relfilenode;
		b->next_block = 0;
		chunk->position = 0;
	}
	nblocks = RelationGetNumberOfBlocks(rel);
	if (strcmp(b->mode, "ctid") != 0)
		order = key_order(rel);
	query = chunk_query(b, rel, src->select_list, order, nblocks, src->row_filter, &last);
	read_rows(chunk, rel, src->target, order, query, snapshot, pipeline, src->columns, &last);

	if (strcmp(b->mode, "keyset") != 0)
		keep_cursor(chunk);
	chunk->next_block = b->next_block + CHUNK_BLOCKS;
	chunk->last = last;
}

/*
 * Writes the chunk's high watermark, ends its transaction and flushes WAL
 * up to the watermark: decoding reads only flushed WAL.
 */
static void
close_chunk(ReplicantChunk *chunk, ReplicantCatalogAccess *access)
{
	XLogRecPtr high = replicant_chunk_write_watermark(chunk, true);

	replicant_catalog_end(access);
	XLogFlush(high);
}

/*
 * The table stopped being published (ALTER PUBLICATION ... DROP TABLE, a
 * publication dropped or replaced, a partition detached from the root it
 * was published through): the rest of it is never read.
 */
static void
skip_unpublished(ReplicantPipeline *pipeline, ReplicantBackfill *b)
{
	b->skipped = true;
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" skips the rest of its backfill of table \"%s\"",
					pipeline->name, b->relname),
			 errdetail("None of the pipeline's publications publishes the table any more.")));
}

ReplicantChunk *
replicant_backfill_read_chunk(ReplicantPipeline *pipeline, ReplicantBackfill *b,
							  char **halt_reason)
{
	ReplicantCatalogAccess access;
	MemoryContext caller = CurrentMemoryContext;
	ReplicantChunk *chunk;
	ChunkSource src;
	Snapshot snapshot;

	*halt_reason = NULL;
	chunk = new_chunk(b, caller);
	begin_chunk(&access);
	*halt_reason = open_chunk_source(pipeline, b, &src);
	if (*halt_reason)
	{
		*halt_reason = MemoryContextStrdup(caller, *halt_reason);
		replicant_catalog_end(&access);
		replicant_chunk_free(chunk);
		return NULL;
	}
	snapshot = snapshot_after_low_watermark(pipeline, b, chunk);
	if (snapshot == NULL)
	{
		close_chunk_source(&src);
		replicant_catalog_end(&access);
		replicant_chunk_free(chunk);
		return NULL;
	}
	if (src.rel == NULL)
	{
		/* Dropped, or no longer published: nothing more to read. */
		if (src.unpublished)
			skip_unpublished(pipeline, b);
		UnregisterSnapshot(snapshot);
		chunk->last = true;
		chunk->relation = NULL;
		close_chunk(chunk, &access);
		return chunk;
	}
	read_chunk_rows(pipeline, b, chunk, &src, snapshot);
	UnregisterSnapshot(snapshot);
	close_chunk_source(&src);
	close_chunk(chunk, &access);
	MemoryContextSwitchTo(caller);
	return chunk;
}

void
replicant_backfill_record_chunk(ReplicantChunk *chunk, int delivered)
{
	ReplicantBackfill *b = chunk->backfill;
	ReplicantCatalogAccess access;
	Oid argtypes[8] = {INT8OID, TEXTARRAYOID, INT8OID, INT4OID, INT8OID, BOOLOID, OIDOID, TEXTOID};
	Datum args[8];
	char nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	ListCell *lc;
	Datum *keys;
	MemoryContext caller = CurrentMemoryContext;

	b->first_sent = true;
	b->rows_done += delivered;
	if (strcmp(b->mode, "ctid") == 0)
		b->next_block = chunk->next_block;
	else if (strcmp(b->mode, "bitmap") == 0)
		b->next_range++;
	else
	{
		/* The backfill outlives the chunk: copy the cursor where it lives. */
		MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(b));
		List *cursor = copy_strings(chunk->next_cursor_key);

		list_free_deep(b->cursor_key);
		b->cursor_key = cursor;
		MemoryContextSwitchTo(old);
	}

	keys = palloc(sizeof(Datum) * (list_length(b->cursor_key) + 1));
	foreach(lc, b->cursor_key)
		keys[foreach_current_index(lc)] = CStringGetTextDatum(lfirst(lc));
	args[0] = Int64GetDatum(b->id);
	args[1] = PointerGetDatum(construct_array(keys, list_length(b->cursor_key), TEXTOID, -1, false, TYPALIGN_INT));
	nulls[1] = b->cursor_key ? ' ' : 'n';
	args[2] = Int64GetDatum(b->next_block);
	args[3] = Int32GetDatum(b->next_range);
	args[4] = Int64GetDatum(delivered);
	args[5] = BoolGetDatum(chunk->last);
	args[6] = ObjectIdGetDatum(b->relfilenode);

	replicant_catalog_begin(&access);
	args[7] = CStringGetTextDatum(b->skipped ? replicant_catalog_skipped_state() : "done");
	if (SPI_execute_with_args("UPDATE replicant.backfills SET cursor_key = $2, next_block = $3,"
							  " next_range = $4, rows_done = rows_done + $5, first_sent = true,"
							  " relfilenode = $7, started_at = coalesce(started_at, now()),"
							  " state = CASE WHEN $6 THEN $8 ELSE 'running' END,"
							  " finished_at = CASE WHEN $6 THEN now() END"
							  " WHERE id = $1 AND state IN ('planned', 'running')",
							  8, argtypes, args, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record backfill progress");
	replicant_catalog_end(&access);
	MemoryContextSwitchTo(caller);
}
