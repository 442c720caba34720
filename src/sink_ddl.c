/*
 * sink_ddl.c
 *		The CREATE TABLE statement of the ClickHouse table each published
 *		table goes to with format 'clickhouse' (format_clickhouse.c says how
 *		rows are written): replicant.sink_ddl(pipeline),
 *		replicant.sink_ddl(publication text[]), and what a pipeline with
 *		create_tables runs before it delivers anything (worker.c).
 *
 * A target is what the stream writes, decided by the functions the stream
 * and the snapshot decide it with: the relation a table's rows are
 * delivered as (its partition root under publish_via_partition_root,
 * partition_root.h), named as the format names it; a column for every
 * column of that relation that a row ("new", the published columns:
 * column lists, and generated columns as the server's pgoutput publishes
 * them) or a key ("key", the replica identity, publication.h) carries.
 * A relation with a replica-identity key becomes a
 * ReplacingMergeTree(_version) ordered by the key (every column under
 * REPLICA IDENTITY FULL without a primary key); read it with FINAL WHERE
 * _deleted = 0.  One without can only publish inserts: a MergeTree ordered
 * by nothing, insert-only.  Types map to what ClickHouse's JSONEachRow
 * input reads the encoder's JSON into, from 18.16 on; see README for the
 * list.  Every identifier is back-quoted and escaped as the format quotes
 * its targets, so no name can end it.  A delivered column named _version or
 * _deleted, which the format adds, is an error.
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_publication.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"

#include "catalog.h"
#include "compat.h"
#include "delivery_set.h"
#include "format_clickhouse.h"
#include "partition_root.h"
#include "pipeline.h"
#include "publication_rules.h"
#include "pubfilter.h"
#include "row_key.h"
#include "sink_ddl.h"

PG_FUNCTION_INFO_V1(replicant_sink_ddl);
PG_FUNCTION_INFO_V1(replicant_sink_ddl_publications);

/* The ClickHouse type a column of type typid (an array's element) maps to. */
static const char *
scalar_type(Oid typid, int32 typmod)
{
	switch (typid)
	{
		case INT2OID:
			return "Int16";
		case INT4OID:
			return "Int32";
		case INT8OID:
			return "Int64";
		case FLOAT4OID:
			return "Float32";
		case FLOAT8OID:
			return "Float64";
		case BOOLOID:
			return "UInt8";
		case UUIDOID:
			return "UUID";
		case DATEOID:
			return "Date";
		case NUMERICOID:
			/* numeric(p, s) up to 38 digits is exact; wider ones are too wide */
			if (typmod >= (int32) VARHDRSZ &&
				((typmod - VARHDRSZ) >> 16) <= 38)
				return psprintf("Decimal(%d, %d)", (typmod - VARHDRSZ) >> 16,
								(typmod - VARHDRSZ) & 0xffff);
			return "Decimal(38, 10)";
		default:
			/* text, varchar, bytea (\x...), times, json: their JSON strings */
			return "String";
	}
}

/*
 * Raises an error if the delivered column att of target has the name of a
 * column the format adds: the CREATE TABLE would be refused, or a row
 * would carry the name twice.
 */
static void
check_column_name(Relation target, Form_pg_attribute att)
{
	if (strcmp(NameStr(att->attname), REPLICANT_CLICKHOUSE_VERSION_COLUMN) == 0 ||
		strcmp(NameStr(att->attname), REPLICANT_CLICKHOUSE_DELETED_COLUMN) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_COLUMN),
				 errmsg("column \"%s\" of table \"%s.%s\" has a name that format \"clickhouse\" reserves",
						NameStr(att->attname),
						get_namespace_name(RelationGetNamespace(target)),
						RelationGetRelationName(target)),
				 errdetail("Format \"clickhouse\" adds the columns \"%s\" and \"%s\" to every target table.",
						   REPLICANT_CLICKHOUSE_VERSION_COLUMN, REPLICANT_CLICKHOUSE_DELETED_COLUMN),
				 errhint("Leave the column out of the publication with a column list, or rename it.")));
}

static void
append_column(StringInfo out, Form_pg_attribute att, bool key)
{
	Oid element = get_element_type(att->atttypid);
	const char *type;

	if (OidIsValid(element))
		type = psprintf("Array(%s)", scalar_type(element, att->atttypmod));
	else if (key || att->attnotnull)
		type = scalar_type(att->atttypid, att->atttypmod);
	else
		type = psprintf("Nullable(%s)", scalar_type(att->atttypid, att->atttypmod));
	appendStringInfoString(out, "  ");
	replicant_clickhouse_append_identifier(out, NameStr(att->attname));
	appendStringInfo(out, " %s,\n", type);
}

/* Whether att is a column of the target: published (columns NULL: all). */
static bool
is_delivered(Form_pg_attribute att, const Bitmapset *columns)
{
	return !att->attisdropped && !REPLICANT_ATT_IS_VIRTUAL(att) &&
		   (columns == NULL || bms_is_member(att->attnum, columns));
}

/*
 * The statement of target, which the rows of leaf are delivered as under
 * the publications (names): the columns they deliver (filter, over
 * target's columns) and its key, as output_plugin.c and change.c encode a
 * change's "new" and "key" (a whole-row key: every live column); a
 * partition root's key is its leaves' identity under its names, none when
 * they are keyed differently.
 */
static char *
target_ddl(Relation leaf, Relation target, List *names, bool if_not_exists)
{
	TupleDesc desc = RelationGetDescr(target);
	Bitmapset *key_columns;
	bool whole_row;
	ReplicantPubFilter *filter;
	StringInfoData out;
	StringInfoData order;
	int i;

	(void) replicant_publication_read_filter(leaf, target, names, &filter);
	/* the stream's key: published columns only, the same for every leaf of a root */
	replicant_row_key_of_target(target, filter->columns, &key_columns, &whole_row);
	initStringInfo(&out);
	initStringInfo(&order);
	appendStringInfoString(&out, if_not_exists ? "CREATE TABLE IF NOT EXISTS " : "CREATE TABLE ");
	replicant_clickhouse_append_identifier(&out, RelationGetRelationName(target));
	appendStringInfoString(&out, " (\n");
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		bool key;

		if (!is_delivered(att, filter->columns))
			continue;
		check_column_name(target, att);
		key = whole_row || bms_is_member(att->attnum, key_columns);
		append_column(&out, att, key);
		if (key)
		{
			if (order.len > 0)
				appendStringInfoString(&order, ", ");
			replicant_clickhouse_append_identifier(&order, NameStr(att->attname));
		}
	}
	appendStringInfoString(&out, "  _version UInt64,\n  _deleted UInt8\n)");
	if (order.len > 0)
		appendStringInfo(&out, " ENGINE = ReplacingMergeTree(_version) ORDER BY (%s)", order.data);
	else
		appendStringInfoString(&out, " ENGINE = MergeTree ORDER BY tuple()");
	replicant_pubfilter_free(filter);
	return out.data;
}

List *
replicant_sink_ddl_key_columns(Relation leaf, Relation target, List *names)
{
	TupleDesc desc = RelationGetDescr(target);
	Bitmapset *key_columns;
	bool whole_row;
	ReplicantPubFilter *filter;
	List *key = NIL;
	int i;

	(void) replicant_publication_read_filter(leaf, target, names, &filter);
	/* as target_ddl orders the target */
	replicant_row_key_of_target(target, filter->columns, &key_columns, &whole_row);
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (is_delivered(att, filter->columns) &&
			(whole_row || bms_is_member(att->attnum, key_columns)))
			key = lappend(key, pstrdup(NameStr(att->attname)));
	}
	replicant_pubfilter_free(filter);
	return key;
}

static int
compare_targets(const ListCell *a, const ListCell *b)
{
	Oid x = ((ReplicantSinkTable *) lfirst(a))->relid;
	Oid y = ((ReplicantSinkTable *) lfirst(b))->relid;

	return (x > y) - (x < y);
}

/* Whether targets has one for relid already (several leaves, one root). */
static bool
has_target(List *targets, Oid relid)
{
	ListCell *lc;

	foreach(lc, targets)
		if (((ReplicantSinkTable *) lfirst(lc))->relid == relid)
			return true;
	return false;
}

List *
replicant_sink_ddl_tables(ArrayType *publications, bool if_not_exists, MemoryContext mcxt)
{
	List *relids = replicant_publication_published_tables(publications, true);
	List *names = NIL;
	List *targets = NIL;
	Datum *elems;
	int nelems;
	int i;
	ListCell *lc;

	deconstruct_array(publications, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &nelems);
	for (i = 0; i < nelems; i++)
		names = lappend(names, TextDatumGetCString(elems[i]));
	foreach(lc, relids)
	{
		Relation leaf;
		Relation target;

		replicant_partition_lock_ancestors(lfirst_oid(lc), AccessShareLock);
		leaf = table_open(lfirst_oid(lc), AccessShareLock);
		target = replicant_partition_root_open_for_read(leaf, names, AccessShareLock);

		if (!has_target(targets, RelationGetRelid(target)))
		{
			char *ddl = target_ddl(leaf, target, names, if_not_exists);
			MemoryContext old = MemoryContextSwitchTo(mcxt);
			ReplicantSinkTable *t = palloc(sizeof(ReplicantSinkTable));

			t->relid = RelationGetRelid(target);
			t->table = pstrdup(RelationGetRelationName(target));
			t->ddl = pstrdup(ddl);
			targets = lappend(targets, t);
			MemoryContextSwitchTo(old);
		}
		if (target != leaf)
			table_close(target, AccessShareLock);
		table_close(leaf, AccessShareLock);
	}
	list_sort(targets, compare_targets);
	return targets;
}

/* Returns each target's statement as a row of the SRF. */
static void
return_targets(FunctionCallInfo fcinfo, List *targets)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell *lc;

	foreach(lc, targets)
	{
		Datum value = CStringGetTextDatum(((ReplicantSinkTable *) lfirst(lc))->ddl);
		bool isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}
}

/* sink_ddl(pipeline): the targets of the pipeline's publications. */
Datum
replicant_sink_ddl(PG_FUNCTION_ARGS)
{
	char *name;
	ReplicantCatalogAccess s;
	ReplicantPipelineRef ref;
	List *targets;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline name must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	replicant_pipeline_check_name(name);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, false);
	if (!has_privs_of_role(s.saved_userid, ref.owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must have the privileges of the owner of pipeline \"%s\"", name)));
	targets = replicant_sink_ddl_tables(ref.publications, false, s.saved_context);
	replicant_catalog_leave(&s);
	return_targets(fcinfo, targets);
	PG_RETURN_VOID();
}

/*
 * sink_ddl(publication text[]): the targets of a pipeline on these
 * publications, before there is one.  Reads only the system catalogs,
 * with the caller's privileges.
 */
Datum
replicant_sink_ddl_publications(PG_FUNCTION_ARGS)
{
	ArrayType *publications;
	Datum *elems;
	bool *nulls;
	int nelems;
	int i;
	int level;
	MemoryContext caller = CurrentMemoryContext;
	List *targets;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("publication must not be null")));
	publications = PG_GETARG_ARRAYTYPE_P(0);
	deconstruct_array(publications, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &nelems);
	if (nelems == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at least one publication is required")));
	for (i = 0; i < nelems; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("publication names must not be null")));
		replicant_pipeline_check_publication_name(TextDatumGetCString(elems[i]));
		(void) GetPublicationByName(TextDatumGetCString(elems[i]), false);
	}
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	level = replicant_pin_search_path();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	targets = replicant_sink_ddl_tables(publications, false, caller);
	SPI_finish();
	AtEOXact_GUC(true, level);
	return_targets(fcinfo, targets);
	PG_RETURN_VOID();
}

/* The pipeline's publications as a text[]. */
static ArrayType *
publications_array(ReplicantPipeline *pipeline)
{
	Datum *elems = palloc(sizeof(Datum) * list_length(pipeline->publications));
	ListCell *lc;
	int n = 0;

	foreach(lc, pipeline->publications)
		elems[n++] = CStringGetTextDatum(lfirst(lc));
	return construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT);
}

char *
replicant_sink_ddl_create(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
						  const ReplicantDestination *destination, bool alone)
{
	MemoryContext caller = CurrentMemoryContext;
	List *targets;
	ReplicantTransport *sink;
	ReplicantDestinationSlot *place;
	ListCell *lc;
	int i = 0;

	/* As the owner, whom the worker runs as: only the system catalogs are read. */
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	targets = replicant_sink_ddl_tables(publications_array(pipeline), true, caller);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(caller);

	/* A refused CREATE TABLE is met again: halt on all but a few codes. */
	sink = replicant_delivery_sink(destination);
	replicant_transport_classify_codes(sink, replicant_clickhouse_ddl_code_is_final);
	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	place = replicant_shmem_destination(slot, destination->id);
	LWLockRelease(replicant_shmem->lock);
	foreach(lc, targets)
	{
		ReplicantSinkTable *target = lfirst(lc);
		StringInfoData statement;
		ReplicantMemoryBody state;
		ReplicantBody body;
		ReplicantSinkResult result;

		initStringInfo(&statement);
		appendStringInfoString(&statement, target->ddl);
		replicant_body_from_buffer(&body, &state, &statement);
		replicant_delivery_post(slot, place, sink, psprintf("%s-create-%d", pipeline->name, i++),
								&body, &result);
		if (result.outcome != REPLICANT_SINK_OK)
		{
			char *context = psprintf(" (table `%s`)", target->table);

			if (alone)
				replicant_delivery_refused(slot, pipeline, &result, "table creation", context);
			replicant_transport_close(sink);
			return replicant_delivery_refusal(&result, "table creation", context);
		}
		pfree(statement.data);
	}
	replicant_transport_close(sink);
	ereport(LOG,
			(errmsg_plural("replicant pipeline \"%s\" made sure its %d ClickHouse table exists (CREATE TABLE IF NOT EXISTS)",
						   "replicant pipeline \"%s\" made sure its %d ClickHouse tables exist (CREATE TABLE IF NOT EXISTS)",
						   list_length(targets), pipeline->name, list_length(targets))));
	return NULL;
}
