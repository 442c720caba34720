/*
 * sink_ddl.c
 *		replicant.sink_ddl(pipeline): the CREATE TABLE statement of the
 *		ClickHouse table each published table goes to with format
 *		'clickhouse' (format_clickhouse.c says how rows are written).
 *
 * A table with a replica-identity key becomes a ReplacingMergeTree(_version)
 * ordered by the key (every column under REPLICA IDENTITY FULL without a
 * primary key); read it with FINAL WHERE _deleted = 0.  A table
 * without one can only publish inserts: a MergeTree ordered by nothing,
 * insert-only.  Only the columns the publications deliver (column lists)
 * get a target column.  Types map to what ClickHouse's JSONEachRow input reads the
 * encoder's JSON into, from 18.16 on; see README for the list.
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/table.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

#include "catalog.h"
#include "pipeline.h"
#include "publication.h"
#include "pubfilter.h"
#include "row_key.h"

PG_FUNCTION_INFO_V1(replicant_sink_ddl);

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
	appendStringInfo(out, "  %s %s,\n", quote_identifier(NameStr(att->attname)), type);
}

/* `name`, as format_clickhouse.c names targets. */
static void
append_target(StringInfo out, const char *name)
{
	const char *p;

	appendStringInfoChar(out, '`');
	for (p = name; *p; p++)
	{
		if (*p == '`' || *p == '\\')
			appendStringInfoChar(out, '\\');
		appendStringInfoChar(out, *p);
	}
	appendStringInfoChar(out, '`');
}

/*
 * The target of relid: the columns its publications (names) deliver, the
 * key columns among them.
 */
static char *
table_ddl(Oid relid, List *names)
{
	Relation rel = table_open(relid, AccessShareLock);
	TupleDesc desc = RelationGetDescr(rel);
	Bitmapset *key_columns;
	bool whole_row;
	StringInfoData out;
	StringInfoData order;
	ReplicantPubFilter *filter;
	Bitmapset *columns;
	int i;

	(void) replicant_publication_read_filter(rel, rel, names, &filter);
	columns = filter->columns;
	/* the stream's key: published columns only */
	replicant_row_key_delivered(rel, columns, &key_columns, &whole_row);
	initStringInfo(&out);
	initStringInfo(&order);
	appendStringInfoString(&out, "CREATE TABLE ");
	append_target(&out, RelationGetRelationName(rel));
	appendStringInfoString(&out, " (\n");
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		bool key;

		if (att->attisdropped || att->attgenerated ||
			(columns != NULL && !bms_is_member(att->attnum, columns)))
			continue;
		key = whole_row || bms_is_member(att->attnum, key_columns);
		append_column(&out, att, key);
		if (key)
			appendStringInfo(&order, "%s%s", order.len ? ", " : "",
							 quote_identifier(NameStr(att->attname)));
	}
	appendStringInfoString(&out, "  _version UInt64,\n  _deleted UInt8\n)");
	if (order.len > 0)
		appendStringInfo(&out, " ENGINE = ReplacingMergeTree(_version) ORDER BY (%s)", order.data);
	else
		appendStringInfoString(&out, " ENGINE = MergeTree ORDER BY tuple()");
	replicant_pubfilter_free(filter);
	table_close(rel, AccessShareLock);
	return out.data;
}

/* sink_ddl(pipeline): one CREATE TABLE per published table, in OID order. */
Datum
replicant_sink_ddl(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char *name;
	ReplicantCatalogAccess s;
	ReplicantPipelineRef ref;
	List *relids;
	ListCell *lc;
	List *names = NIL;
	Datum *elems;
	int nelems;
	int i;

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
	relids = replicant_publication_published_tables(ref.publications, true);
	deconstruct_array(ref.publications, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &nelems);
	for (i = 0; i < nelems; i++)
		names = lappend(names, TextDatumGetCString(elems[i]));
	foreach(lc, relids)
	{
		Datum value = CStringGetTextDatum(table_ddl(lfirst_oid(lc), names));
		bool isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}
	replicant_catalog_leave(&s);
	PG_RETURN_VOID();
}
