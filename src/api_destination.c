/*
 * api_destination.c
 *		SQL-callable management functions of a pipeline's destinations:
 *		add_destination, drop_destination and the resync of one; and the
 *		checks and statements
 *		on destination rows that api.c, api_run.c and status.c share.
 *
 * Each validates everything before it changes anything, then stops the
 * pipeline's worker where it leaves nothing to re-deliver
 * (replicant_api_xact_stop_worker_and_wait), checks again under the
 * pipeline row's lock, and changes the rows; the next worker starts once
 * the caller commits.  Messages never echo a sink URL or a secret.
 *
 * Rules kept with other files: docs/internals.md §1 (a new destination's
 * checkpoint is at or above the floor, so the floor stays), §4 (one content
 * per commit_lsn: the worker stops first), §9 (privileges).
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "api_destination.h"
#include "api_xact.h"
#include "backfill_plan.h"
#include "catalog.h"
#include "destination_resync.h"
#include "format.h"
#include "pipeline_checks.h"
#include "publication_rules.h"
#include "redact.h"
#include "shmem.h"
#include "sink_nats_url.h"

PG_FUNCTION_INFO_V1(replicant_add_destination);
PG_FUNCTION_INFO_V1(replicant_drop_destination);

char *
replicant_api_destination_text(int32 pipeline_id, const char *destination, const char *column)
{
	Oid argtypes[2] = {INT4OID, TEXTOID};
	Datum args[2] = {Int32GetDatum(pipeline_id), destination ? CStringGetTextDatum(destination) : (Datum) 0};
	const char *from;
	int nargs = 1;

	if (!replicant_destinations_exist())
		from = "replicant.pipelines WHERE id OPERATOR(pg_catalog.=) $1";
	else if (destination == NULL)
		from = "replicant.destinations WHERE pipeline_id OPERATOR(pg_catalog.=) $1";
	else
	{
		from = "replicant.destinations WHERE pipeline_id OPERATOR(pg_catalog.=) $1"
			   " AND name OPERATOR(pg_catalog.=) $2";
		nargs = 2;
	}
	if (SPI_execute_with_args(psprintf("SELECT %s FROM %s", column, from),
							  nargs, argtypes, args, NULL, true, 2) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the options of pipeline %d", pipeline_id);
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

List *
replicant_api_destination_formats(int32 pipeline_id, const char *destination)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	List *formats = NIL;

	if (destination != NULL || !replicant_destinations_exist())
		return list_make1(replicant_api_destination_text(pipeline_id, destination, "format"));
	if (SPI_execute_with_args("SELECT DISTINCT format FROM replicant.destinations"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.destinations");
	for (uint64 i = 0; i < SPI_processed; i++)
		formats = lappend(formats, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
	return formats;
}

void
replicant_api_destination_check_format(const char *url, const char *format)
{
	if (replicant_nats_url(url) && strcmp(format, "replicant") != 0 &&
		strcmp(format, "cloudevents") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("format \"%s\" cannot be delivered to NATS", format),
				 errhint("NATS destinations take format \"replicant\" or \"cloudevents\".")));
}

int32
replicant_api_destination_lookup(const ReplicantPipelineRef *ref, const char *destination, bool *halted)
{
	Oid argtypes[2] = {INT4OID, TEXTOID};
	Datum args[2] = {Int32GetDatum(ref->id), CStringGetTextDatum(destination)};
	bool isnull;

	if (SPI_execute_with_args("SELECT id, halt_reason IS NOT NULL FROM replicant.destinations"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
							  2, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.destinations");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("destination \"%s\" of pipeline \"%s\" does not exist", destination, ref->name),
				 errhint("replicant.destination_status lists each pipeline's destinations.")));
	if (halted)
		*halted = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

char *
replicant_api_destination_halted(int32 pipeline_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};

	if (!replicant_destinations_exist())
		return NULL;
	if (SPI_execute_with_args("SELECT name FROM replicant.destinations"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND halt_reason IS NOT NULL"
							  "   AND NOT slot_released"
							  " ORDER BY id LIMIT 1",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.destinations");
	return SPI_processed == 0 ? NULL : SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

void
replicant_api_destination_check_resumable(const ReplicantPipelineRef *ref, const char *destination,
										  int32 destination_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(destination_id)};
	bool isnull;

	if (SPI_execute_with_args("SELECT slot_released FROM replicant.destinations WHERE id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read replicant.destinations");
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("destination \"%s\" of pipeline \"%s\" gave its hold on the replication slot up", destination,
						ref->name),
				 errdetail("It fell more than its max_retained_wal behind; the changes it missed are no longer kept."),
				 errhint("Resync it: replicant.resync_pipeline('%s', '%s') reads every table again for it.", ref->name,
						 destination)));
}

int32
replicant_api_destination_backfillable(const ReplicantPipelineRef *ref, const char *destination)
{
	int32 destination_id = replicant_api_destination_lookup(ref, destination, NULL);
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(destination_id)};

	replicant_api_destination_check_resumable(ref, destination, destination_id);
	if (SPI_execute_with_args("SELECT 1 FROM replicant.destinations"
							  " WHERE id OPERATOR(pg_catalog.=) $1 AND resync_reason IS NOT NULL",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.destinations");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("destination \"%s\" of pipeline \"%s\" is resyncing", destination, ref->name),
				 errdetail("Its resync reads every published table for it."),
				 errhint("Wait for the resync to end (replicant.destination_status).")));
	return destination_id;
}

/* The sink URL of each destination of the pipeline but "except" (NULL: none). */
static List *
other_urls(int32 pipeline_id, const char *except)
{
	Oid argtypes[2] = {INT4OID, TEXTOID};
	Datum args[2] = {Int32GetDatum(pipeline_id), except ? CStringGetTextDatum(except) : (Datum) 0};
	char nulls[2] = {' ', except ? ' ' : 'n'};
	List *urls = NIL;

	if (SPI_execute_with_args("SELECT sink_url FROM replicant.destinations"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1"
							  "   AND name IS DISTINCT FROM $2",
							  2, argtypes, args, nulls, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.destinations");
	for (uint64 i = 0; i < SPI_processed; i++)
		urls = lappend(urls, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
	return urls;
}

int
replicant_api_destination_count(int32 pipeline_id)
{
	return list_length(other_urls(pipeline_id, NULL));
}

void
replicant_api_destination_check_resyncs(const ReplicantPipelineRef *ref)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(ref->id)};
	SPITupleTable *rows;
	uint64 n;

	if (SPI_execute_with_args("SELECT id, name FROM replicant.destinations"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1 ORDER BY id",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.destinations");
	rows = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		bool isnull;
		int32 id = DatumGetInt32(SPI_getbinval(rows->vals[i], rows->tupdesc, 1, &isnull));
		char *refused = replicant_destination_resync_refusal(id, ref->owner, ref->publications);

		if (refused != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("destination \"%s\" of pipeline \"%s\" cannot resync: %s",
							SPI_getvalue(rows->vals[i], rows->tupdesc, 2), ref->name, refused)));
	}
}

void
replicant_api_destination_check_only(const ReplicantPipelineRef *ref, const ReplicantPipelineOptions *o)
{
	const char *option = replicant_pipeline_options_sink_option_given(o);
	int n;

	if (option == NULL || !replicant_destinations_exist())
		return;
	n = replicant_api_destination_count(ref->id);
	if (n > 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pipeline \"%s\" has %d destinations: alter_pipeline cannot change its %s",
						ref->name, n, option),
				 errhint("Change one destination's with replicant.alter_destination(pipeline, name, ...).")));
}

/*
 * Whether two NATS URLs may name one stream: the same stream name on
 * servers in common (host names compared without case), or one explicit
 * subject_prefix.  A host known by two names is caught only at run time,
 * by the stream and mark checks (sink_nats_stream.c).
 */
static bool
may_share_nats_stream(const char *a, const char *b)
{
	NatsUrl ua;
	NatsUrl ub;

	if (replicant_nats_parse_url(a, &ua) != NULL || replicant_nats_parse_url(b, &ub) != NULL)
		return false;
	if (ua.prefix[0] != '\0' && strcmp(ua.prefix, ub.prefix) == 0)
		return true;
	if (strcmp(ua.stream, ub.stream) != 0)
		return false;
	for (int i = 0; i < ua.nservers; i++)
		for (int j = 0; j < ub.nservers; j++)
			if (pg_strcasecmp(ua.servers[i], ub.servers[j]) == 0)
				return true;
	return false;
}

/*
 * Two NATS destinations of a pipeline cannot share a stream: each needs
 * one that takes its subjects alone (sink_nats_stream.c), and with one
 * prefix their marks would be each other's.  Destinations other than
 * "default" write ids and a default prefix of their own, so NATS goes
 * beside any other destination.
 */
void
replicant_api_destination_check_nats(const ReplicantPipelineRef *ref, const char *destination,
									 const char *url)
{
	ListCell *lc;

	if (!replicant_nats_url(url))
		return;
	foreach(lc, other_urls(ref->id, destination))
	{
		if (replicant_nats_url(lfirst(lc)) && may_share_nats_stream(lfirst(lc), url))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("pipeline \"%s\" has another destination on this NATS stream", ref->name),
					 errdetail("Each NATS destination needs a stream and a subject prefix of its own."),
					 errhint("Give each destination its own stream (subjects <prefix>.>).")));
	}
}

int32
replicant_api_destination_insert(int32 pipeline_id, const ReplicantPipelineOptions *o, int nargs,
								 ReplicantOptionsCall call)
{
	StringInfoData sql;
	StringInfoData params;
	Oid types[REPLICANT_NUM_OPTION_PARAMS];
	Datum values[REPLICANT_NUM_OPTION_PARAMS];
	char nulls[REPLICANT_NUM_OPTION_PARAMS];
	bool isnull;

	initStringInfo(&sql);
	initStringInfo(&params);
	appendStringInfoString(&sql, "INSERT INTO replicant.destinations (pipeline_id");
	appendStringInfoString(&params, "$1");
	replicant_pipeline_options_insert_sql(&sql, &params, nargs, call, REPLICANT_OPTIONS_DESTINATIONS);
	replicant_pipeline_options_params(o, INT4OID, Int32GetDatum(pipeline_id), InvalidOid, types, values, nulls);
	appendStringInfo(&sql, ") VALUES (%s) RETURNING id", params.data);
	if (SPI_execute_with_args(sql.data, REPLICANT_NUM_OPTION_PARAMS, types, values, nulls,
							  false, 0) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert into replicant.destinations");
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* Stopping a worker needs shared memory. */
static void
check_ready(void)
{
	if (!replicant_shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replicant is not loaded through \"shared_preload_libraries\"")));
}

/*
 * An added destination gets what commits after the call, and with
 * snapshot => 'incremental' a backfill of every table for it alone;
 * 'initial' needs a slot created with the snapshot.
 */
static void
check_added_snapshot(const char *snapshot)
{
	if (strcmp(snapshot, "initial") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("an added destination cannot take snapshot \"initial\""),
				 errdetail("An exported snapshot exists only where a replication slot is created."),
				 errhint("Use snapshot => 'incremental'.")));
}

/*
 * snapshot => 'incremental': a backfill of every table the publications
 * deliver, for the destination alone (the others have the rows), planned
 * as backfill() plans one (mode 'auto', read as the pipeline's owner).
 */
static void
plan_backfills(const ReplicantPipelineRef *ref, int32 destination_id)
{
	ListCell *lc;

	foreach(lc, replicant_publication_published_tables(ref->publications, true))
		(void) replicant_backfill_plan(ref->id, destination_id, ref->owner, lfirst_oid(lc), "auto");
}

/*
 * Reads of an initial snapshot or a resync go to one destination: none may
 * be added until they are done (as snapshot.c's snapshot_pending decides).
 */
static void
check_not_reading(const ReplicantPipelineRef *ref)
{
	Oid argtypes[2] = {INT4OID, TEXTOID};
	Datum args[2] = {Int32GetDatum(ref->id), CStringGetTextDatum(replicant_catalog_skipped_state())};
	bool isnull;

	if (SPI_execute_with_args("SELECT p.resync_reason IS NOT NULL"
							  "    OR (p.snapshot OPERATOR(pg_catalog.=) 'initial'"
							  "        AND (NOT EXISTS (SELECT FROM replicant.backfills b"
							  "                          WHERE b.pipeline_id OPERATOR(pg_catalog.=) p.id"
							  "                            AND b.kind OPERATOR(pg_catalog.=) 'initial')"
							  "             OR EXISTS (SELECT FROM replicant.backfills b"
							  "                         WHERE b.pipeline_id OPERATOR(pg_catalog.=) p.id"
							  "                           AND b.kind OPERATOR(pg_catalog.=) 'initial'"
							  "                           AND b.state OPERATOR(pg_catalog.<>) ALL (ARRAY['done', $2]))))"
							  "  FROM replicant.pipelines p WHERE p.id OPERATOR(pg_catalog.=) $1",
							  2, argtypes, args, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read pipeline %d", ref->id);
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pipeline \"%s\" is reading its tables for an initial snapshot or a resync", ref->name),
				 errhint("Add the destination once replicant.status shows it streaming.")));
}

/*
 * What add_destination checks against the rows (again under the pipeline
 * row's lock): a new name, room for one more, no NATS beside another, no
 * snapshot or resync reading.
 */
static void
check_addable(const ReplicantPipelineRef *ref, const char *destination, const char *url)
{
	Oid argtypes[2] = {INT4OID, TEXTOID};
	Datum args[2] = {Int32GetDatum(ref->id), CStringGetTextDatum(destination)};

	/* Not read-only: a fresh snapshot sees an adder we waited for. */
	if (SPI_execute_with_args("SELECT 1 FROM replicant.destinations"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
							  2, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.destinations");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("destination \"%s\" of pipeline \"%s\" already exists", destination, ref->name)));
	if (replicant_api_destination_count(ref->id) >= REPLICANT_MAX_DESTINATIONS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("pipeline \"%s\" cannot have more than %d destinations", ref->name,
						REPLICANT_MAX_DESTINATIONS),
				 errhint("Deliver to further sinks from another pipeline.")));
	replicant_api_destination_check_nats(ref, NULL, url);
	check_not_reading(ref);
}

/* The checks of add_destination's options against the catalogs, as create_pipeline's. */
static void
check_add_catalog(const ReplicantPipelineRef *ref, const ReplicantPipelineOptions *o)
{
	char *format = TextDatumGetCString(o->values[OPT_FORMAT]);
	List *tables = replicant_publication_published_tables(ref->publications, true);

	replicant_pipeline_options_check_headers(DatumGetJsonbP(o->values[OPT_HEADERS]));
	replicant_api_destination_check_format(TextDatumGetCString(o->values[OPT_SINK_URL]), format);
	if (replicant_format_lookup(format)->whole_rows)
		replicant_pipeline_checks_warn_toast_left_out(tables, format);
	replicant_pipeline_checks_targets_distinct(ref->publications, tables, format);
	replicant_pipeline_checks_create_tables(DatumGetBool(o->values[OPT_CREATE_TABLES]), format);
}

/*
 * The new destination's checkpoint: the WAL insert position L, taken once
 * no worker runs.  Every commit record written after it is the
 * destination's, none before: its commit_lsn is L - 1, since a commit
 * record may start at L itself, and a commit at or below the checkpoint's
 * is skipped (review rv-dest7).  The floor (the lowest end) stays where it
 * is, so the next worker's start-up check finds the slot where the floor
 * says.
 */
static void
insert_checkpoint(int32 pipeline_id, int32 destination_id)
{
	Oid argtypes[2] = {INT4OID, INT4OID};
	Datum args[2] = {Int32GetDatum(pipeline_id), Int32GetDatum(destination_id)};

	if (SPI_execute_with_args("INSERT INTO replicant.checkpoints"
							  "   (pipeline_id, destination_id, commit_lsn, end_lsn, updated_at)"
							  " SELECT $1, $2, l OPERATOR(pg_catalog.-) 1::pg_catalog.numeric, l, pg_catalog.now()"
							  "   FROM pg_catalog.pg_current_wal_insert_lsn() l",
							  2, argtypes, args, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not insert into replicant.checkpoints");
}

/*
 * add_destination(pipeline, name, sink_url, format, snapshot,
 *				   batch_max_bytes, batch_max_transactions, http_timeout_ms,
 *				   connect_timeout_ms, headers, secret, ca_file,
 *				   create_tables, max_retained_wal, on_slot_loss)
 *
 * The new destination receives every transaction whose commit record is
 * written after its worker stopped, in this call, and with snapshot =>
 * 'incremental' every table's rows; the others go on from their
 * checkpoints.
 */
Datum
replicant_add_destination(PG_FUNCTION_ARGS)
{
	char *name;
	char *destination;
	char *url;
	char *snapshot;
	int32 destination_id;
	ReplicantPipelineOptions o;
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;

	replicant_redact_statements();
	name = replicant_pipeline_options_required_text(fcinfo, 0, "pipeline name");
	replicant_pipeline_check_name(name);
	replicant_pipeline_options_parse(fcinfo, REPLICANT_ADD_DESTINATION, &o);
	destination = TextDatumGetCString(o.values[OPT_DESTINATION]);
	url = TextDatumGetCString(o.values[OPT_SINK_URL]);
	snapshot = TextDatumGetCString(o.values[OPT_SNAPSHOT]);
	check_added_snapshot(snapshot);
	check_ready();

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, false);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	check_addable(&ref, destination, url);
	check_add_catalog(&ref, &o);
	replicant_catalog_leave(&s);
	replicant_api_xact_stop_worker_and_wait(ref.id);

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	check_addable(&ref, destination, url);
	destination_id = replicant_api_destination_insert(ref.id, &o, PG_NARGS(),
													  REPLICANT_ADD_DESTINATION);
	insert_checkpoint(ref.id, destination_id);
	if (strcmp(snapshot, "incremental") == 0)
		plan_backfills(&ref, destination_id);
	replicant_catalog_bump_config(ref.id);
	replicant_catalog_leave(&s);

	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

/* A destination can be dropped unless it is the pipeline's last one. */
static void
check_droppable(const ReplicantPipelineRef *ref, const char *destination)
{
	(void) replicant_api_destination_lookup(ref, destination, NULL);
	if (replicant_api_destination_count(ref->id) == 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("destination \"%s\" is the last one of pipeline \"%s\"", destination, ref->name),
				 errhint("Drop the pipeline with replicant.drop_pipeline().")));
}

/*
 * drop_destination(pipeline, name): the destination and its checkpoint go;
 * the others go on from theirs.  The floor may rise: the next worker
 * confirms the slot to it, after this commits.
 */
Datum
replicant_drop_destination(PG_FUNCTION_ARGS)
{
	char *name = replicant_pipeline_options_required_text(fcinfo, 0, "pipeline name");
	char *destination = replicant_pipeline_options_required_text(fcinfo, 1, "destination name");
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;
	Oid argtypes[2] = {INT4OID, TEXTOID};
	Datum args[2];

	replicant_pipeline_check_name(name);
	replicant_check_name("destination", destination);
	check_ready();

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, false);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	check_droppable(&ref, destination);
	replicant_catalog_leave(&s);
	replicant_api_xact_stop_worker_and_wait(ref.id);

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	check_droppable(&ref, destination);
	args[0] = Int32GetDatum(ref.id);
	args[1] = CStringGetTextDatum(destination);
	if (SPI_execute_with_args("DELETE FROM replicant.destinations"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
							  2, argtypes, args, NULL, false, 0) != SPI_OK_DELETE ||
		SPI_processed != 1)
		elog(ERROR, "could not delete from replicant.destinations");
	/*
	 * A pipeline's resync whose new slot may be made (resync_destinations.c)
	 * starts over: with one destination left, it would otherwise resume an
	 * initial snapshot that was never planned, from that slot.
	 */
	if (SPI_execute_with_args("UPDATE replicant.pipelines SET resync_slot_dropped = false"
							  " WHERE id OPERATOR(pg_catalog.=) $1 AND resync_reason IS NOT NULL",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update replicant.pipelines");
	replicant_catalog_bump_config(ref.id);
	replicant_catalog_leave(&s);

	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

/*
 * What resync_pipeline(pipeline, destination) checks against the rows
 * (again under the pipeline row's lock): no snapshot or resync of the
 * pipeline reading, and no logical message its checkpoint still holds
 * for it that the jump to the insert position would skip.
 */
static void
check_resyncable(const ReplicantPipelineRef *ref, const char *destination, int32 destination_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(destination_id)};

	check_not_reading(ref);
	if (SPI_execute_with_args("SELECT 1 FROM replicant.destinations d, replicant.pipelines p"
							  " WHERE d.id OPERATOR(pg_catalog.=) $1 AND p.id OPERATOR(pg_catalog.=) d.pipeline_id"
							  "   AND p.messages AND NOT d.slot_released",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.destinations");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("destination \"%s\" of pipeline \"%s\" still holds logical messages in the replication slot",
						destination, ref->name),
				 errdetail("A resync of one destination streams from the current WAL position on; the messages before it would never reach it."),
				 errhint("Let it deliver what the slot holds for it first, or turn the pipeline's messages off with replicant.alter_pipeline(name, messages => false).")));
}

void
replicant_api_destination_resync(const char *name, const char *destination)
{
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;
	int32 destination_id;
	char *refused;

	check_ready();
	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, false);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	destination_id = replicant_api_destination_lookup(&ref, destination, NULL);
	check_resyncable(&ref, destination, destination_id);
	replicant_catalog_leave(&s);
	replicant_api_xact_stop_worker_and_wait(ref.id);

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	destination_id = replicant_api_destination_lookup(&ref, destination, NULL);
	check_resyncable(&ref, destination, destination_id);
	refused = replicant_destination_resync_begin(ref.id, destination_id, ref.owner, ref.publications, "requested",
												 REPLICANT_RESYNC_REQUESTED, InvalidXLogRecPtr);
	if (refused != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("destination \"%s\" of pipeline \"%s\" cannot resync: %s", destination, ref.name, refused)));
	replicant_catalog_bump_config(ref.id);
	replicant_catalog_leave(&s);
	replicant_api_xact_resume_at_commit(ref.id, destination_id);
	replicant_shmem_request_sync_at_commit();
}
