/*
 * api_definitions.c
 *		pipeline_definitions(): the calls that recreate the caller's
 *		pipelines and their destinations, secrets and header values left
 *		out unless asked for.
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/tuplestore.h"

#include "catalog.h"

PG_FUNCTION_INFO_V1(replicant_pipeline_definitions);

/*
 * The pipelines with their first destination's options, as "p": a
 * pipeline's row with its oldest destination's, or the row alone under
 * 0.2.0's objects and before, which holds them.
 */
static const char *const with_destinations_sql =
	"(SELECT q.name, q.owner, q.publications, q.snapshot, q.snapshot_workers, q.messages,"
	"        q.message_prefixes, q.failover, q.enabled, d.name AS destination, d.sink_url,"
	"        d.format, d.headers, d.secret, d.ca_file, d.batch_max_bytes,"
	"        d.batch_max_transactions, d.http_timeout_ms, d.connect_timeout_ms,"
	"        d.create_tables, d.max_retained_wal, d.on_slot_loss"
	"   FROM replicant.pipelines q JOIN replicant.destinations d"
	"     ON d.id OPERATOR(pg_catalog.=) (SELECT pg_catalog.min(o.id) FROM replicant.destinations o"
	"                                      WHERE o.pipeline_id OPERATOR(pg_catalog.=) q.id))";

/*
 * The comment at the end of a call that says what $1 (include_secrets)
 * left out of the options of "p": the secret, and the header values by
 * their names.
 */
static const char *const left_out_sql =
	"  CASE WHEN NOT $1 AND (p.secret IS NOT NULL"
	"                        OR p.headers OPERATOR(pg_catalog.<>) '{}'::jsonb)"
	"   THEN ' -- left out: ' OPERATOR(pg_catalog.||) pg_catalog.concat_ws(', ',"
	"     CASE WHEN p.secret IS NOT NULL THEN 'secret' END,"
	"     CASE WHEN p.headers OPERATOR(pg_catalog.<>) '{}'::jsonb"
	"      THEN 'headers ' OPERATOR(pg_catalog.||)"
	"           (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(k), ', ' ORDER BY k)"
	"              FROM pg_catalog.jsonb_object_keys(p.headers) k) END)"
	"   ELSE '' END";

/*
 * An add_destination call for each destination of a pipeline but its
 * oldest (create_pipeline's), oldest first; left_out_sql and the rest
 * follow.
 */
static const char *const add_destinations_sql =
	" UNION ALL"
	" SELECT p.pipeline, 2, p.id, pg_catalog.format("
	"  'SELECT replicant.add_destination(%L, %L, %L, format => %L, batch_max_bytes => %s,"
	" batch_max_transactions => %s, http_timeout_ms => %s, connect_timeout_ms => %s,"
	" headers => %L::jsonb, secret => %L, ca_file => %L%s%s%s);%s',"
	"  p.pipeline, p.name, p.sink_url, p.format, p.batch_max_bytes, p.batch_max_transactions,"
	"  p.http_timeout_ms, p.connect_timeout_ms,"
	"  CASE WHEN $1 THEN p.headers ELSE '{}'::jsonb END,"
	"  CASE WHEN $1 THEN p.secret END,"
	"  p.ca_file,"
	"  CASE WHEN p.create_tables THEN ', create_tables => true' ELSE '' END,"
	"  coalesce(', max_retained_wal => ' OPERATOR(pg_catalog.||) pg_catalog.quote_literal("
	"    (p.max_retained_wal OPERATOR(pg_catalog./) 1048576)::pg_catalog.text"
	"    OPERATOR(pg_catalog.||) 'MB'), ''),"
	"  CASE WHEN p.on_slot_loss OPERATOR(pg_catalog.=) 'resync'"
	"   THEN ', on_slot_loss => ''resync''' ELSE '' END,";

static const char *const add_destinations_from =
	")"
	"   FROM (SELECT q.name AS pipeline, q.owner, d.*"
	"           FROM replicant.pipelines q JOIN replicant.destinations d"
	"             ON d.pipeline_id OPERATOR(pg_catalog.=) q.id"
	"          WHERE d.id OPERATOR(pg_catalog.<>) (SELECT pg_catalog.min(o.id) FROM replicant.destinations o"
	"                                               WHERE o.pipeline_id OPERATOR(pg_catalog.=) q.id)) p"
	"  WHERE pg_catalog.pg_has_role($2, p.owner, 'USAGE')";

/*
 * The definitions query, around its source of pipelines: the
 * create_pipeline call of each, its further destinations' add_destination
 * calls, then disable_pipeline for a disabled one.
 * The options added by later versions are read through to_jsonb(p), which
 * has them only once their columns exist.
 */
static const char *const definitions_head =
	"SELECT d FROM ("
	" SELECT p.name, 1 AS step, 0 AS n, pg_catalog.format("
	"  'SELECT replicant.create_pipeline(%L, %L::text[], %L, snapshot => %L,"
	" batch_max_bytes => %s, batch_max_transactions => %s, http_timeout_ms => %s,"
	" connect_timeout_ms => %s, headers => %L::jsonb, secret => %L,"
	" snapshot_workers => %s, messages => %s, message_prefixes => %L::text[],"
	" ca_file => %L, failover => %s, format => %L%s%s%s);%s',"
	"  p.name, p.publications, p.sink_url, p.snapshot, p.batch_max_bytes,"
	"  p.batch_max_transactions, p.http_timeout_ms, p.connect_timeout_ms,"
	"  CASE WHEN $1 THEN p.headers ELSE '{}'::jsonb END,"
	"  CASE WHEN $1 THEN p.secret END,"
	"  p.snapshot_workers, p.messages::text, p.message_prefixes, p.ca_file, p.failover::text,"
	"  p.format,"
	/* 0.2.0's table has no create_tables until ALTER EXTENSION UPDATE */
	"  CASE WHEN (pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'create_tables')::pg_catalog.bool"
	"   THEN ', create_tables => true' ELSE '' END,"
	/* nor max_retained_wal, which is whole megabytes */
	"  coalesce(', max_retained_wal => ' OPERATOR(pg_catalog.||) pg_catalog.quote_literal("
	"    ((pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'max_retained_wal')::pg_catalog.int8"
	"     OPERATOR(pg_catalog./) 1048576)::pg_catalog.text OPERATOR(pg_catalog.||) 'MB'), '')"
	/* nor on_slot_loss */
	"  OPERATOR(pg_catalog.||) CASE WHEN pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'on_slot_loss'"
	"   OPERATOR(pg_catalog.=) 'resync' THEN ', on_slot_loss => ''resync''' ELSE '' END,"
	/* nor destinations: the one of a pipeline created before is "default" */
	"  CASE WHEN coalesce(pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'destination', 'default')"
	"        OPERATOR(pg_catalog.<>) 'default'"
	"   THEN ', destination => ' OPERATOR(pg_catalog.||)"
	"        pg_catalog.quote_literal(pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'destination')"
	"   ELSE '' END,";

/* After left_out_sql, the source of pipelines ("p") and the rest follow. */
static const char *const definitions_from =
	") AS d"
	"   FROM ";

static const char *const definitions_own =
	" p"
	"  WHERE pg_catalog.pg_has_role($2, p.owner, 'USAGE')";

static const char *const definitions_tail =
	" UNION ALL"
	" SELECT p.name, 3, 0, pg_catalog.format('SELECT replicant.disable_pipeline(%L);', p.name)"
	"   FROM replicant.pipelines p"
	"  WHERE NOT p.enabled AND pg_catalog.pg_has_role($2, p.owner, 'USAGE')"
	") q ORDER BY name, step, n";

/*
 * pipeline_definitions(include_secrets) RETURNS SETOF text
 *
 * The create_pipeline calls (with the oldest destination, by its name when
 * it is not "default"), add_destination calls for the others, and
 * disable_pipeline calls for disabled ones, that recreate the caller's
 * pipelines, for instance after pg_dump and
 * pg_restore, which copy none of replicant's state.  Secrets and header
 * values are left out unless asked for; a comment at the end of the call
 * says what was left out.
 */
Datum
replicant_pipeline_definitions(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool include_secrets = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	Oid argtypes[2] = {BOOLOID, OIDOID};
	Datum args[2];
	ReplicantCatalogAccess s;
	uint64 i;
	char *query;
	TupleDesc desc;
	Tuplestorestate *store;
	MemoryContext old;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		!(rsinfo->allowedModes & SFRM_Materialize))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	desc = CreateTemplateTupleDesc(1);
	TupleDescInitEntry(desc, (AttrNumber) 1, "pipeline_definitions", TEXTOID, -1, 0);
	store = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = store;
	rsinfo->setDesc = desc;
	MemoryContextSwitchTo(old);

	args[0] = BoolGetDatum(include_secrets);
	replicant_catalog_enter(&s);
	args[1] = ObjectIdGetDatum(s.saved_userid);
	query = psprintf("%s%s%s%s%s", definitions_head, left_out_sql, definitions_from,
					 replicant_destinations_exist() ? with_destinations_sql : "replicant.pipelines",
					 definitions_own);
	if (replicant_destinations_exist())
		query = psprintf("%s%s%s%s", query, add_destinations_sql, left_out_sql, add_destinations_from);
	if (SPI_execute_with_args(psprintf("%s%s", query, definitions_tail),
							  2, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	for (i = 0; i < SPI_processed; i++)
	{
		bool isnull;
		Datum value = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		tuplestore_putvalues(store, desc, &value, &isnull);
	}
	replicant_catalog_leave(&s);
	return (Datum) 0;
}
