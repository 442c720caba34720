/*
 * api.c
 *		SQL-callable management functions that make, change and remove a
 *		pipeline: create_pipeline, alter_pipeline, alter_destination and
 *		drop_pipeline (a pipeline's further destinations: api_destination.c).
 *
 * Every function validates all of its input before it changes anything,
 * and changes nothing when it fails: the options are read and checked by
 * pipeline_options.c, checked against the catalogs by pipeline_checks.c.
 * The pipeline's slot is created in the caller's statement, so changes
 * committed after create_pipeline() returns are never missed; it stays
 * ephemeral (dropped on error) until the transaction commits (api_xact.c).
 * Changes reach the workers through the launcher, which is asked to re-read
 * this database only once the caller commits.
 *
 * Rules kept with other files: docs/internals.md §4 (one content per
 * commit_lsn: replicant_api_xact_stop_worker_and_wait), §9 (privileges).
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type_d.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "api_destination.h"
#include "api_xact.h"
#include "backfill_plan.h"
#include "catalog.h"
#include "fault.h"
#include "format.h"
#include "pipeline.h"
#include "pipeline_checks.h"
#include "pipeline_options.h"
#include "plugin_gate.h"
#include "publication.h"
#include "publication_rules.h"
#include "redact.h"
#include "replicant.h"
#include "runs.h"
#include "shmem.h"
#include "slot.h"
#include "slot_position.h"

PG_FUNCTION_INFO_V1(replicant_create_pipeline);
PG_FUNCTION_INFO_V1(replicant_alter_pipeline);
PG_FUNCTION_INFO_V1(replicant_alter_destination);
PG_FUNCTION_INFO_V1(replicant_drop_pipeline);

/*
 * Server prerequisites
 */
static void
check_prerequisites(void)
{
	if (!replicant_shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replicant is not loaded through \"shared_preload_libraries\""),
				 errhint("Add \"replicant\" to \"shared_preload_libraries\" and restart the server.")));
	if (wal_level < WAL_LEVEL_LOGICAL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replicant requires \"wal_level\" to be \"logical\""),
				 errhint("Set \"wal_level = logical\" and restart the server.")));
	if (!replicant_plugin_gate_server_allows())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("\"output_plugin_libraries\" does not list \"replicant\""),
				 errhint("Add \"replicant\" to \"output_plugin_libraries\", for example \"output_plugin_libraries = 'pgoutput, test_decoding, replicant'\", and reload the configuration.")));
}

/*
 * Background workers that are not pipeline workers (the launcher, parallel
 * and logical replication workers, snapshot and sync workers): every
 * pg_stat_activity row but the server's own processes and client backends.
 */
static int64
other_background_workers(void)
{
	bool isnull;

	if (SPI_execute("SELECT count(*) FROM pg_catalog.pg_stat_activity"
					" WHERE backend_type OPERATOR(pg_catalog.<>) ALL (ARRAY["
					"   'client backend', 'autovacuum launcher', 'autovacuum worker',"
					"   'background writer', 'checkpointer', 'walwriter', 'walsender',"
					"   'walreceiver', 'startup', 'archiver', 'logger', 'standalone backend',"
					"   'walsummarizer', 'slotsync worker', 'io worker', 'replicant pipeline'])",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not count background workers");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Pipelines known to shared memory: all of them, or only those of other
 * databases that want a worker.
 */
static int
count_pipelines_in_shmem(bool runnable_elsewhere)
{
	int n = 0;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];

		if (slot->in_use &&
			(!runnable_elsewhere || (slot->runnable && slot->dboid != MyDatabaseId)))
			n++;
	}
	LWLockRelease(replicant_shmem->lock);
	return n;
}

/*
 * Refuses a pipeline that could not run: its worker (and an initial
 * snapshot's shard workers) need background worker slots, and one more must
 * stay free for the sync worker that starts and stops workers; its slot
 * needs a free replication slot.  Otherwise it would sit in "starting".
 */
static void
check_free_slots(bool initial_snapshot, int snapshot_workers)
{
	int64 needed;
	bool isnull;

	if (replicant_slot_free_count() == 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("no free replication slot for a new pipeline"),
				 errdetail("All %d replication slots are in use.", max_replication_slots),
				 errhint("Free one or increase \"%s\".", "max_replication_slots")));

	if (SPI_execute("SELECT count(*) FROM replicant.pipelines"
					" WHERE enabled AND halt_reason IS NULL",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	needed = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
										 &isnull));
	needed += count_pipelines_in_shmem(true) + other_background_workers();
	needed += 1 + (initial_snapshot ? snapshot_workers : 0) + 1;
	if (needed > max_worker_processes)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("not enough free background worker slots for a new pipeline"),
				 errdetail("The pipeline needs %d of the %d slots, of which %d are taken or promised to other workers and one must stay free.",
						   1 + (initial_snapshot ? snapshot_workers : 0), max_worker_processes,
						   (int) (needed - 2 - (initial_snapshot ? snapshot_workers : 0))),
				 errhint("You might need to increase \"%s\".", "max_worker_processes")));
}

/*
 * Makes concurrent create_pipeline calls of one name wait for each other,
 * so that the second sees the first one's row and not its slot.
 */
static void
lock_pipeline_name(const char *name)
{
	Oid pipelines = get_relname_relid("pipelines", get_namespace_oid("replicant", false));

	LockDatabaseObject(pipelines,
					   DatumGetUInt32(hash_any((const unsigned char *) name, strlen(name))),
					   0, ExclusiveLock);
}

/*
 * Saves the shape of every published table as the pipeline starts, so that
 * a destructive change made before the table's first streamed change halts
 * the pipeline too (publication.c compares later versions with it).
 */
static void
save_table_shapes(int32 pipeline_id, List *relids)
{
	ListCell *lc;

	foreach(lc, relids)
	{
		Relation rel = table_open(lfirst_oid(lc), AccessShareLock);

		replicant_publication_save_table_shape(pipeline_id, rel);
		table_close(rel, AccessShareLock);
	}
}

/* The checks of create_pipeline that need no catalog access. */
static void
check_create_owner(Oid owner, const ReplicantPipelineOptions *o)
{
	replicant_pipeline_checks_owner_can_login(owner);
	if (DatumGetBool(o->values[OPT_MESSAGES]))
		replicant_pipeline_checks_owner_may_receive_messages(owner);
	if (count_pipelines_in_shmem(false) >= replicant_max_pipelines)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("cannot create more than %d pipelines", replicant_max_pipelines),
				 errhint("You might need to increase \"%s\".", "replicant.max_pipelines")));
}

/*
 * The checks of create_pipeline inside catalog access; returns the tables
 * the publications deliver.  Holds the name's lock from here to commit.
 */
static List *
check_create_catalog(const char *name, const char *slot_name, Oid owner,
					 const ReplicantPipelineOptions *o)
{
	ArrayType *pubs = DatumGetArrayTypeP(o->values[OPT_PUBLICATION]);
	Oid argtypes[1] = {TEXTOID};
	Datum args[1] = {CStringGetTextDatum(name)};
	List *tables;

	replicant_pipeline_options_check_headers(DatumGetJsonbP(o->values[OPT_HEADERS]));
	replicant_api_destination_check_format(TextDatumGetCString(o->values[OPT_SINK_URL]),
										   o->given[OPT_FORMAT] ? TextDatumGetCString(o->values[OPT_FORMAT]) : "replicant");
	replicant_pipeline_options_check_publications_exist(pubs);
	tables = replicant_publication_published_tables(pubs, true);
	replicant_pipeline_checks_owner_reads_tables(owner, tables);
	replicant_pipeline_checks_warn_without_identity(pubs);
	if (o->given[OPT_FORMAT] &&
		replicant_format_lookup(TextDatumGetCString(o->values[OPT_FORMAT]))->whole_rows)
		replicant_pipeline_checks_warn_toast_left_out(tables, TextDatumGetCString(o->values[OPT_FORMAT]));
	if (o->given[OPT_FORMAT])
		replicant_pipeline_checks_targets_distinct(pubs, tables, TextDatumGetCString(o->values[OPT_FORMAT]));
	if (o->given[OPT_CREATE_TABLES])
		replicant_pipeline_checks_create_tables(DatumGetBool(o->values[OPT_CREATE_TABLES]),
												o->given[OPT_FORMAT] ? TextDatumGetCString(o->values[OPT_FORMAT]) : "replicant");
	lock_pipeline_name(name);
	/* Not read-only: a fresh snapshot sees a creator we waited for. */
	if (SPI_execute_with_args("SELECT 1 FROM replicant.pipelines WHERE name OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("pipeline \"%s\" already exists", name)));
	/* Not even a foreign one: an initial snapshot's worker would meet it. */
	if (replicant_slot_owner(slot_name) != REPLICANT_SLOT_MISSING)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("replication slot \"%s\" already exists", slot_name)));
	check_free_slots(strcmp(TextDatumGetCString(o->values[OPT_SNAPSHOT]), "initial") == 0,
					 DatumGetInt32(o->values[OPT_SNAPSHOT_WORKERS]));
	return tables;
}

/*
 * Inserts the pipeline's row and its destination's: every option
 * create_pipeline has (nargs arguments: 0.1.0's function lacks failover)
 * gets its column, in the pipeline's row under the SQL objects of 0.2.0
 * and before.
 */
static int32
insert_pipeline(const char *name, const char *slot_name, Oid owner, const ReplicantPipelineOptions *o,
				int nargs)
{
	StringInfoData sql;
	StringInfoData params;
	Oid types[REPLICANT_NUM_OPTION_PARAMS + 1];
	Datum values[REPLICANT_NUM_OPTION_PARAMS + 1];
	char nulls[REPLICANT_NUM_OPTION_PARAMS + 1];
	int nparams = REPLICANT_NUM_OPTION_PARAMS;
	bool isnull;
	bool destinations = replicant_destinations_exist();
	int32 id;

	initStringInfo(&sql);
	initStringInfo(&params);
	appendStringInfoString(&sql, "INSERT INTO replicant.pipelines (name, owner");
	appendStringInfoString(&params, "$1, $2");
	replicant_pipeline_options_insert_sql(&sql, &params, nargs, REPLICANT_CREATE_PIPELINE,
										  destinations ? REPLICANT_OPTIONS_PIPELINES : REPLICANT_OPTIONS_BOTH);
	replicant_pipeline_options_params(o, TEXTOID, CStringGetTextDatum(name), owner, types, values, nulls);
	/* 0.1.0's and 0.2.0's rows have no slot_name: theirs is replicant_<name>. */
	if (replicant_pipeline_has_column("slot_name"))
	{
		types[nparams] = NAMEOID;
		values[nparams] = DirectFunctionCall1(namein, CStringGetDatum(slot_name));
		nulls[nparams++] = ' ';
		appendStringInfoString(&sql, ", slot_name");
		appendStringInfo(&params, ", $%d", nparams);
	}
	appendStringInfo(&sql, ") VALUES (%s) RETURNING id", params.data);

	if (SPI_execute_with_args(sql.data, nparams, types, values, nulls,
							  false, 0) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert into replicant.pipelines");
	id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (destinations)
		(void) replicant_api_destination_insert(id, o, nargs, REPLICANT_CREATE_PIPELINE);
	return id;
}

/*
 * create_pipeline(name, publication, sink_url, snapshot, batch_max_bytes,
 *				   batch_max_transactions, http_timeout_ms, connect_timeout_ms,
 *				   headers, secret, snapshot_workers, messages, message_prefixes,
 *				   ca_file, failover, format, enabled, create_tables,
 *				   max_retained_wal, on_slot_loss, destination)
 *
 * With enabled => false the pipeline is created disabled: its slot (unless
 * an initial snapshot's worker makes it) keeps what commits from the call
 * on, and nothing is delivered until enable_pipeline.
 */
Datum
replicant_create_pipeline(PG_FUNCTION_ARGS)
{
	char *name;
	char *slot_name;
	ReplicantPipelineOptions o;
	Oid owner = GetUserId();
	ReplicantCatalogAccess s;
	char *snapshot;
	int32 pipeline_id;
	List *tables;
	XLogRecPtr slot_point = InvalidXLogRecPtr;

	replicant_redact_statements();
	PreventInTransactionBlock(true, "replicant.create_pipeline()");
	check_prerequisites();

	name = replicant_pipeline_options_required_text(fcinfo, 0, "pipeline name");
	replicant_pipeline_check_name(name);
	replicant_pipeline_options_parse(fcinfo, REPLICANT_CREATE_PIPELINE, &o);
	snapshot = TextDatumGetCString(o.values[OPT_SNAPSHOT]);
	check_create_owner(owner, &o);

	replicant_catalog_enter(&s);
	slot_name = replicant_pipeline_new_slot_name(name);
	tables = check_create_catalog(name, slot_name, owner, &o);

	/*
	 * Everything is valid: only now create the slot, then the row.  An
	 * initial snapshot needs the slot's consistent point and the snapshot
	 * its tables are read under to be one, so its worker creates the slot.
	 */
	if (strcmp(snapshot, "initial") != 0)
		slot_point = replicant_api_xact_create_slot(slot_name, o.given[OPT_FAILOVER] && DatumGetBool(o.values[OPT_FAILOVER]));
	pipeline_id = insert_pipeline(name, slot_name, owner, &o, PG_NARGS());
	replicant_runs_start_over(pipeline_id);
	/* What the worker finds beyond it, something else moved (slot_position.h). */
	if (!XLogRecPtrIsInvalid(slot_point))
		replicant_slot_position_create(pipeline_id, slot_point);
	save_table_shapes(pipeline_id, tables);
	if (strcmp(snapshot, "incremental") == 0)
	{
		ListCell *lc;

		/* An incremental backfill of every table the publications deliver. */
		foreach(lc, tables)
			(void) replicant_backfill_plan(pipeline_id, 0, owner, lfirst_oid(lc), "auto");
	}
	replicant_catalog_leave(&s);

	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

/* Drops the trailing comma of a list of assignments. */
static void
end_assignments(StringInfo sql)
{
	Assert(sql->len > 0 && sql->data[sql->len - 1] == ',');
	sql->data[--sql->len] = '\0';
}

/*
 * Applies the sink options of an alter_pipeline or alter_destination call
 * to the destination (destination NULL: the pipeline's only one).
 */
static void
update_destination(int32 pipeline_id, const char *destination, const ReplicantPipelineOptions *o,
				   int nargs, ReplicantOptionsCall call)
{
	StringInfoData sql;
	Oid types[REPLICANT_NUM_OPTION_PARAMS + 1];
	Datum values[REPLICANT_NUM_OPTION_PARAMS + 1];
	char nulls[REPLICANT_NUM_OPTION_PARAMS + 1];
	int nparams = REPLICANT_NUM_OPTION_PARAMS;

	replicant_pipeline_options_params(o, INT4OID, Int32GetDatum(pipeline_id), InvalidOid, types, values, nulls);
	initStringInfo(&sql);
	appendStringInfoString(&sql, "UPDATE replicant.destinations SET");
	replicant_pipeline_options_update_sql(&sql, nargs, call, REPLICANT_OPTIONS_DESTINATIONS);
	end_assignments(&sql);
	appendStringInfoString(&sql, " WHERE pipeline_id OPERATOR(pg_catalog.=) $1");
	if (destination != NULL)
	{
		types[nparams] = TEXTOID;
		values[nparams] = CStringGetTextDatum(destination);
		nulls[nparams++] = ' ';
		appendStringInfo(&sql, " AND name OPERATOR(pg_catalog.=) $%d", nparams);
	}
	if (SPI_execute_with_args(sql.data, nparams, types, values, nulls, false, 0) != SPI_OK_UPDATE ||
		SPI_processed != 1)
		elog(ERROR, "could not update the destination of pipeline %d", pipeline_id);
}

/*
 * Applies alter_pipeline's options to the (locked) row: those the function
 * has (nargs arguments: 0.1.0's lacks format, and its table the column);
 * the sink options to its only destination.
 */
static void
update_pipeline(const ReplicantPipelineRef *ref, const ReplicantPipelineOptions *o, int nargs)
{
	StringInfoData sql;
	Oid types[REPLICANT_NUM_OPTION_PARAMS];
	Datum values[REPLICANT_NUM_OPTION_PARAMS];
	char nulls[REPLICANT_NUM_OPTION_PARAMS];
	bool destinations = replicant_destinations_exist();

	replicant_pipeline_options_params(o, INT4OID, Int32GetDatum(ref->id), ref->owner, types, values, nulls);
	/* What decoding delivers changes for what commits from now on only. */
	if (o->given[OPT_PUBLICATION] || o->given[OPT_MESSAGES] || o->given[OPT_MESSAGE_PREFIXES])
		replicant_epoch_record(ref->id);
	/* An added publication applies to what commits from now on (0.2.0). */
	if (o->given[OPT_PUBLICATION] && replicant_pipeline_has_column("publication_lsns"))
		replicant_catalog_update_pipelines(psprintf("UPDATE replicant.pipelines SET publication_lsns ="
													"   (SELECT pg_catalog.array_agg(CASE WHEN u.name OPERATOR(pg_catalog.=) ANY (publications)"
													"             THEN coalesce(publication_lsns[pg_catalog.array_position(publications, u.name)],"
													"                           '0/0'::pg_catalog.pg_lsn)"
													"             ELSE pg_catalog.pg_current_wal_insert_lsn() END ORDER BY u.n)"
													"      FROM pg_catalog.unnest($%d) WITH ORDINALITY AS u(name, n))"
													" WHERE id OPERATOR(pg_catalog.=) $1",
													REPLICANT_OPTION_PARAM(OPT_PUBLICATION)),
										   REPLICANT_NUM_OPTION_PARAMS, types, values, nulls);

	initStringInfo(&sql);
	appendStringInfoString(&sql, "UPDATE replicant.pipelines SET");
	replicant_pipeline_options_update_sql(&sql, nargs, REPLICANT_ALTER_PIPELINE,
										  destinations ? REPLICANT_OPTIONS_PIPELINES : REPLICANT_OPTIONS_BOTH);
	appendStringInfoString(&sql, " config_version = config_version OPERATOR(pg_catalog.+) 1"
								 " WHERE id OPERATOR(pg_catalog.=) $1");
	replicant_catalog_update_pipelines(sql.data, REPLICANT_NUM_OPTION_PARAMS, types, values, nulls);
	if (destinations && replicant_pipeline_options_sink_option_given(o) != NULL)
		update_destination(ref->id, NULL, o, nargs, REPLICANT_ALTER_PIPELINE);
}

/*
 * The checks of alter_pipeline's and alter_destination's options against
 * the catalogs; destination names the one whose options change.
 */
static void
check_alter_catalog(const ReplicantPipelineRef *ref, const char *destination,
					const ReplicantPipelineOptions *o)
{
	ArrayType *pubs = o->given[OPT_PUBLICATION] ? DatumGetArrayTypeP(o->values[OPT_PUBLICATION]) :
												  ref->publications;
	char *format = NULL;
	List *formats = NIL;
	ListCell *lc;

	/* 0.1.0's table has no format column: read it only when a check needs it. */
	if (o->given[OPT_FORMAT])
		format = TextDatumGetCString(o->values[OPT_FORMAT]);
	else if (o->given[OPT_SINK_URL] || o->given[OPT_CREATE_TABLES])
		format = replicant_api_destination_text(ref->id, destination, "format");
	/* The formats the publications' tables will be delivered in. */
	if (o->given[OPT_FORMAT])
		formats = list_make1(format);
	else if (o->given[OPT_PUBLICATION])
		formats = replicant_api_destination_formats(ref->id, destination);

	if (o->given[OPT_MESSAGES] && DatumGetBool(o->values[OPT_MESSAGES]))
		replicant_pipeline_checks_owner_may_receive_messages(ref->owner);
	if (o->given[OPT_HEADERS])
		replicant_pipeline_options_check_headers(DatumGetJsonbP(o->values[OPT_HEADERS]));
	if (o->given[OPT_SINK_URL] || o->given[OPT_FORMAT])
		replicant_api_destination_check_format(o->given[OPT_SINK_URL] ? TextDatumGetCString(o->values[OPT_SINK_URL]) :
																		replicant_api_destination_text(ref->id, destination, "sink_url"),
											   format);
	if (o->given[OPT_PUBLICATION])
		replicant_pipeline_options_check_publications_exist(pubs);
	if (o->given[OPT_FORMAT] && replicant_format_lookup(format)->whole_rows)
		replicant_pipeline_checks_warn_toast_left_out(replicant_publication_published_tables(pubs, true),
													  format);
	if (o->given[OPT_CREATE_TABLES])
		replicant_pipeline_checks_create_tables(DatumGetBool(o->values[OPT_CREATE_TABLES]), format);
	foreach(lc, formats)
		replicant_pipeline_checks_targets_distinct(pubs, replicant_publication_published_tables(pubs, true),
												   lfirst(lc));
}

/*
 * The checks of alter_pipeline and alter_destination against the rows,
 * again under the pipeline row's lock: the destination exists; a sink
 * option of alter_pipeline needs a pipeline with one destination; a NATS
 * URL, a stream no other destination of the pipeline has.
 */
static void
check_alter_rows(const ReplicantPipelineRef *ref, const char *destination,
				 const ReplicantPipelineOptions *o)
{
	if (destination == NULL)
	{
		replicant_api_destination_check_only(ref, o);
		return;
	}
	(void) replicant_api_destination_lookup(ref, destination, NULL);
	if (o->given[OPT_SINK_URL])
		replicant_api_destination_check_nats(ref, destination, TextDatumGetCString(o->values[OPT_SINK_URL]));
}

/*
 * alter_pipeline and alter_destination: checks everything, stops the worker
 * where it leaves nothing to re-deliver, then applies the options.
 */
static void
alter(FunctionCallInfo fcinfo, ReplicantOptionsCall call)
{
	char *name;
	char *destination = NULL;
	ReplicantPipelineOptions o;
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;

	replicant_redact_statements();
	name = replicant_pipeline_options_required_text(fcinfo, 0, "pipeline name");
	replicant_pipeline_check_name(name);
	if (call == REPLICANT_ALTER_DESTINATION)
	{
		destination = replicant_pipeline_options_required_text(fcinfo, 1, "destination name");
		replicant_check_name("destination", destination);
	}
	replicant_pipeline_options_parse(fcinfo, call, &o);

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, false);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	check_alter_rows(&ref, destination, &o);
	check_alter_catalog(&ref, destination, &o);
	replicant_catalog_leave(&s);
	replicant_api_xact_stop_worker_and_wait(ref.id);

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	check_alter_rows(&ref, destination, &o);
	if (call == REPLICANT_ALTER_PIPELINE)
		update_pipeline(&ref, &o, PG_NARGS());
	else
	{
		Oid argtypes[1] = {INT4OID};
		Datum args[1] = {Int32GetDatum(ref.id)};

		update_destination(ref.id, destination, &o, PG_NARGS(), call);
		replicant_catalog_update_pipelines("UPDATE replicant.pipelines SET config_version = config_version OPERATOR(pg_catalog.+) 1"
										   " WHERE id OPERATOR(pg_catalog.=) $1",
										   1, argtypes, args, NULL);
	}
	replicant_catalog_leave(&s);

	replicant_shmem_request_sync_at_commit();
}

/*
 * alter_pipeline(name, publication, sink_url, batch_max_bytes,
 *				  batch_max_transactions, http_timeout_ms, connect_timeout_ms,
 *				  headers, secret, clear_secret, messages, message_prefixes,
 *				  secret_previous_until, ca_file, format, create_tables,
 *				  max_retained_wal, on_slot_loss)
 *
 * NULL leaves an option unchanged; message_prefixes => '{}' goes back to
 * every prefix, max_retained_wal => '-1' to no budget.  A sink option
 * changes the pipeline's destination, and is refused when it has several.  The
 * old worker is stopped before this returns; the next one starts once the
 * caller commits, reads the new configuration (config_version changes) and
 * resumes from the checkpoint.
 */
Datum
replicant_alter_pipeline(PG_FUNCTION_ARGS)
{
	alter(fcinfo, REPLICANT_ALTER_PIPELINE);
	PG_RETURN_VOID();
}

/*
 * alter_destination(pipeline, name, sink_url, batch_max_bytes,
 *					 batch_max_transactions, http_timeout_ms,
 *					 connect_timeout_ms, headers, secret, clear_secret,
 *					 secret_previous_until, ca_file, format, create_tables,
 *					 max_retained_wal, on_slot_loss)
 *
 * alter_pipeline's sink options, for the named destination.
 */
Datum
replicant_alter_destination(PG_FUNCTION_ARGS)
{
	alter(fcinfo, REPLICANT_ALTER_DESTINATION);
	PG_RETURN_VOID();
}

/* drop_pipeline(name): stops the worker, drops the slot and all state. */
Datum
replicant_drop_pipeline(PG_FUNCTION_ARGS)
{
	char *name = replicant_pipeline_options_required_text(fcinfo, 0, "pipeline name");
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;
	Oid argtypes[1] = {INT4OID};
	Datum args[1];
	char *slot_name;

	/* Dropping a slot cannot be rolled back. */
	PreventInTransactionBlock(true, "replicant.drop_pipeline()");
	replicant_pipeline_check_name(name);
	if (!replicant_shmem_ready())
		check_prerequisites();

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	args[0] = Int32GetDatum(ref.id);
	if (SPI_execute_with_args("DELETE FROM replicant.pipelines WHERE id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not delete from replicant.pipelines");
	/* What the lookup allocated goes with SPI's memory at the leave. */
	slot_name = MemoryContextStrdup(s.saved_context, ref.slot_name);
	replicant_catalog_leave(&s);

	replicant_api_xact_stop_worker_for_drop(ref.id);
	replicant_fault("drop_pipeline");
	if (replicant_slot_drop(slot_name, false) == REPLICANT_SLOT_FOREIGN)
		ereport(WARNING,
				(errmsg("replication slot \"%s\" was left in place", slot_name),
				 errdetail("It belongs to another database or output plugin, not to pipeline \"%s\".", name)));

	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}
