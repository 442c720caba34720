/*
 * api_run.c
 *		SQL management functions that start and stop what a pipeline
 *		delivers: enable, disable and resume it (or one of its
 *		destinations), plan and cancel backfills.
 *
 * Each takes effect once the caller commits: the launcher is asked to
 * re-read the database then, and a worker restarts on a new config_version.
 */
#include "postgres.h"

#include "catalog/pg_class.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "api_destination.h"
#include "api_xact.h"
#include "backfill_plan.h"
#include "catalog.h"
#include "pipeline.h"
#include "pipeline_options.h"
#include "publication_rules.h"
#include "runs.h"
#include "shmem.h"
#include "waiver.h"

PG_FUNCTION_INFO_V1(replicant_enable_pipeline);
PG_FUNCTION_INFO_V1(replicant_disable_pipeline);
PG_FUNCTION_INFO_V1(replicant_resume_pipeline);
PG_FUNCTION_INFO_V1(replicant_resync_pipeline);
PG_FUNCTION_INFO_V1(replicant_backfill);
PG_FUNCTION_INFO_V1(replicant_cancel_backfill);

static void
set_state(FunctionCallInfo fcinfo, const char *assignment)
{
	char *name = replicant_pipeline_options_required_text(fcinfo, 0, "pipeline name");
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;
	Oid argtypes[1] = {INT4OID};
	Datum args[1];

	replicant_pipeline_check_name(name);
	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	args[0] = Int32GetDatum(ref.id);
	replicant_catalog_update_pipelines(psprintf("UPDATE replicant.pipelines SET %s WHERE id OPERATOR(pg_catalog.=) $1", assignment),
									   1, argtypes, args, NULL);
	/* Enabled: a deliberate start owes nothing to past runs. */
	if (strncmp(assignment, "enabled = false", 15) != 0)
		replicant_runs_start_over(ref.id);
	replicant_catalog_leave(&s);
	replicant_shmem_request_sync_at_commit();
}

Datum
replicant_enable_pipeline(PG_FUNCTION_ARGS)
{
	set_state(fcinfo, "enabled = true");
	PG_RETURN_VOID();
}

Datum
replicant_disable_pipeline(PG_FUNCTION_ARGS)
{
	set_state(fcinfo, "enabled = false");
	PG_RETURN_VOID();
}

/*
 * Clears the halts of the pipeline's destinations (destination_id's, or
 * with 0 each one's); returns whether one was halted.
 */
static bool
clear_destination_halts(int32 pipeline_id, int32 destination_id)
{
	Oid argtypes[2] = {INT4OID, INT4OID};
	Datum args[2] = {Int32GetDatum(pipeline_id), Int32GetDatum(destination_id)};

	if (!replicant_destinations_exist())
		return false;
	if (SPI_execute_with_args("UPDATE replicant.destinations SET halt_reason = NULL, halt_lsn = NULL"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND halt_reason IS NOT NULL"
							  "   AND NOT slot_released"
							  "   AND ($2 OPERATOR(pg_catalog.=) 0 OR id OPERATOR(pg_catalog.=) $2)",
							  2, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update replicant.destinations");
	return SPI_processed > 0;
}

/*
 * The resume under the pipeline row's lock: the halts (the pipeline's and
 * every destination's, or destination_id's alone) cleared; a cleared
 * destination halt restarts the worker, whose successor brings the
 * destination back from its checkpoint while the others skip what they
 * have.
 */
static void
resume_locked(const ReplicantPipelineRef *ref, const char *destination, int32 destination_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(ref->id)};
	bool destination_halted = clear_destination_halts(ref->id, destination_id);

	if (destination != NULL && !destination_halted)
		ereport(NOTICE,
				(errmsg("destination \"%s\" of pipeline \"%s\" is not halted", destination, ref->name)));
	if (destination == NULL)
	{
		if (!ref->halted && !destination_halted)
			ereport(NOTICE,
					(errmsg("pipeline \"%s\" is not halted", ref->name)));
		/* exactly the halt's cause, for what committed up to now */
		replicant_waiver_grant(ref->id);
		replicant_catalog_update_pipelines("UPDATE replicant.pipelines"
										   "   SET halt_reason = NULL, resumed_lsn = pg_catalog.pg_current_wal_lsn(), halt_lsn = NULL"
										   " WHERE id OPERATOR(pg_catalog.=) $1",
										   1, argtypes, args, NULL);
	}
	if (destination_halted)
		replicant_catalog_update_pipelines("UPDATE replicant.pipelines SET config_version = config_version OPERATOR(pg_catalog.+) 1"
										   " WHERE id OPERATOR(pg_catalog.=) $1",
										   1, argtypes, args, NULL);
	replicant_api_xact_resume_at_commit(ref->id, destination_id);
	/* A deliberate start owes nothing to past runs. */
	replicant_runs_start_over(ref->id);
}

/*
 * resume_pipeline(name, destination): clears the pipeline's halt and each
 * destination's, or with a destination named, that destination's alone.
 * A worker delivering to the pipeline's other destinations is stopped where
 * it leaves nothing to re-deliver, and the next one starts at commit.
 */
Datum
replicant_resume_pipeline(PG_FUNCTION_ARGS)
{
	char *name = replicant_pipeline_options_required_text(fcinfo, 0, "pipeline name");
	char *destination = NULL;
	int32 destination_id = 0;
	bool destination_halted;
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;

	replicant_pipeline_check_name(name);
	/* 0.2.0's function has no destination argument */
	if (PG_NARGS() > 1 && !PG_ARGISNULL(1))
	{
		destination = text_to_cstring(PG_GETARG_TEXT_PP(1));
		replicant_check_name("destination", destination);
	}

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, false);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	if (destination != NULL)
	{
		destination_id = replicant_api_destination_lookup(&ref, destination, &destination_halted);
		replicant_api_destination_check_resumable(&ref, destination, destination_id);
	}
	else
		destination_halted = (replicant_api_destination_halted(ref.id) != NULL);
	replicant_catalog_leave(&s);
	if (destination_halted && replicant_shmem_ready())
		replicant_api_xact_stop_worker_and_wait(ref.id);

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	if (destination != NULL)
	{
		destination_id = replicant_api_destination_lookup(&ref, destination, NULL);
		replicant_api_destination_check_resumable(&ref, destination, destination_id);
	}
	resume_locked(&ref, destination, destination_id);
	replicant_catalog_leave(&s);
	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

/*
 * A resync drops the old slot: the logical messages it still holds are
 * never delivered (a resync reads tables, not messages).  After a loss that
 * is the loss's doing; on request, with a slot that still works, it would be
 * the resync's: refused for a pipeline that delivers messages, unless it is
 * halted or already resyncing.
 */
static void
refuse_dropping_messages(int32 pipeline_id, const char *name)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};

	if (SPI_execute_with_args("SELECT 1 FROM replicant.pipelines p, pg_catalog.pg_replication_slots s"
							  " WHERE p.id OPERATOR(pg_catalog.=) $1 AND p.messages"
							  "   AND p.halt_reason IS NULL AND p.resync_reason IS NULL"
							  "   AND s.slot_name OPERATOR(pg_catalog.=) p.slot_name"
							  "   AND s.wal_status IS DISTINCT FROM 'lost'"
							  "   AND (pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'invalidation_reason') IS NULL",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read pipeline \"%s\"", name);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pipeline \"%s\" delivers logical messages and its replication slot still works", name),
				 errdetail("A resync drops the slot, and the messages it still holds would never be delivered."),
				 errhint("Let the pipeline deliver what its slot holds first, or turn its messages off with replicant.alter_pipeline(name, messages => false).")));
}

/*
 * resync_pipeline(name, destination): the pipeline resyncs (resync.c) as
 * after a slot loss, whatever on_slot_loss says; a halt is cleared, since
 * the resync replaces the slot and what it held.  The worker starts again
 * for it (a new config_version).  A resync under way goes on.  With
 * several destinations each one then resyncs (resync_destinations.c).
 * With a destination named, that destination alone resyncs beside the
 * stream (api_destination.c).
 */
Datum
replicant_resync_pipeline(PG_FUNCTION_ARGS)
{
	char *name = replicant_pipeline_options_required_text(fcinfo, 0, "pipeline name");
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;
	Oid argtypes[1] = {INT4OID};
	Datum args[1];

	replicant_pipeline_check_name(name);
	if (!replicant_pipeline_has_column("resync_reason"))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("replicant.resync_pipeline() needs the SQL objects of replicant 0.3.0"),
				 errhint("Run ALTER EXTENSION replicant UPDATE.")));
	if (PG_NARGS() > 1 && !PG_ARGISNULL(1))
	{
		char *destination = text_to_cstring(PG_GETARG_TEXT_PP(1));

		replicant_check_name("destination", destination);
		replicant_api_destination_resync(name, destination);
		PG_RETURN_VOID();
	}
	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	args[0] = Int32GetDatum(ref.id);
	refuse_dropping_messages(ref.id, name);
	if (replicant_api_destination_count(ref.id) > 1)
		replicant_api_destination_check_resyncs(&ref);
	replicant_catalog_update_pipelines("UPDATE replicant.pipelines"
									   "   SET resync_slot_dropped = false,"
									   "       resync_reason = coalesce(resync_reason, 'requested'), resync_losses = 0,"
									   "       halt_reason = NULL, halt_lsn = NULL, halt_cause = NULL,"
									   "       config_version = config_version OPERATOR(pg_catalog.+) 1"
									   " WHERE id OPERATOR(pg_catalog.=) $1",
									   1, argtypes, args, NULL);
	replicant_runs_start_over(ref.id);
	replicant_catalog_leave(&s);
	replicant_api_xact_resume_at_commit(ref.id, 0);
	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

/*
 * backfill(pipeline, relation, mode, destination): reads a published
 * table's rows into a streaming pipeline, beside the stream, for every
 * destination or the one named.  Returns the backfill's id.
 */
Datum
replicant_backfill(PG_FUNCTION_ARGS)
{
	char *name = replicant_pipeline_options_required_text(fcinfo, 0, "pipeline name");
	Oid relid;
	char *mode;
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;
	Oid argtypes[2] = {OIDOID, INT4OID};
	Datum args[2];
	int32 destination_id = 0;
	int64 id;

	replicant_pipeline_check_name(name);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("relation must not be null")));
	relid = PG_GETARG_OID(1);
	mode = replicant_pipeline_options_required_text(fcinfo, 2, "mode");
	if (strcmp(mode, "auto") != 0 && strcmp(mode, "keyset") != 0 &&
		strcmp(mode, "bitmap") != 0 && strcmp(mode, "ctid") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("mode must be \"auto\", \"keyset\", \"bitmap\" or \"ctid\"")));

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	/* A server whose extension is still 0.2.0 passes three arguments. */
	if (PG_NARGS() > 3 && !PG_ARGISNULL(3))
	{
		char *destination = text_to_cstring(PG_GETARG_TEXT_PP(3));

		replicant_check_name("destination", destination);
		destination_id = replicant_api_destination_backfillable(&ref, destination);
	}

	/* Only what the pipeline's publications deliver can be backfilled. */
	if (!list_member_oid(replicant_publication_published_tables(ref.publications, true), relid) &&
		get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot backfill partitioned table \"%s\"", get_rel_name(relid)),
				 errdetail("Backfills read one table at a time."),
				 errhint("Backfill its partitions; under publish_via_partition_root their rows are delivered as the partitioned table's.")));
	if (!list_member_oid(replicant_publication_published_tables(ref.publications, true), relid))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" is not a table published by pipeline \"%s\"",
						get_rel_name(relid) ? get_rel_name(relid) : "?", name),
				 errhint("Add the table to one of the pipeline's publications first.")));

	args[0] = ObjectIdGetDatum(relid);
	args[1] = Int32GetDatum(ref.id);
	if (SPI_execute_with_args("SELECT 1 FROM replicant.backfills"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $2 AND relid OPERATOR(pg_catalog.=) $1"
							  "   AND state OPERATOR(pg_catalog.=) ANY ('{planned,running}')",
							  2, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("a backfill of this table is already in progress in pipeline \"%s\"", name),
				 errhint("Wait for it, or cancel it with replicant.cancel_backfill() first (a read of a destination's resync cannot be cancelled).")));

	id = replicant_backfill_plan(ref.id, destination_id, ref.owner, relid, mode);
	replicant_catalog_bump_config(ref.id);
	replicant_catalog_leave(&s);
	replicant_shmem_request_sync_at_commit();
	PG_RETURN_INT64(id);
}

/* cancel_backfill(id): stops a planned or running backfill. */
/*
 * A read of a destination's resync cannot be cancelled alone: the resync
 * would end without the table, its rows of the gap never read again.
 */
static void
refuse_cancelling_resync_read(int64 id)
{
	Oid argtypes[1] = {INT8OID};
	Datum args[1] = {Int64GetDatum(id)};

	if (!replicant_destinations_exist())
		return;
	if (SPI_execute_with_args("SELECT d.name FROM replicant.backfills b"
							  "  JOIN replicant.destinations d ON d.id OPERATOR(pg_catalog.=) b.destination_id"
							  " WHERE b.id OPERATOR(pg_catalog.=) $1 AND d.resync_reason IS NOT NULL"
							  "   AND b.id OPERATOR(pg_catalog.>=) d.resync_backfill_from",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("backfill " INT64_FORMAT " reads a table for the resync of destination \"%s\"", id,
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
				 errdetail("Without it the resync would end with the table's rows not read again."),
				 errhint("Let the resync finish, or drop the destination.")));
}

Datum
replicant_cancel_backfill(PG_FUNCTION_ARGS)
{
	int64 id;
	ReplicantCatalogAccess s;
	Oid argtypes[1] = {INT8OID};
	Datum args[1];
	char *state;
	ReplicantPipelineRef ref;
	bool isnull;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("backfill id must not be null")));
	id = PG_GETARG_INT64(0);
	args[0] = Int64GetDatum(id);

	replicant_catalog_enter(&s);
	if (SPI_execute_with_args("SELECT p.name, b.state FROM replicant.backfills b"
							  "  JOIN replicant.pipelines p ON p.id OPERATOR(pg_catalog.=) b.pipeline_id"
							  " WHERE b.id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("backfill " INT64_FORMAT " does not exist", id)));
	ref = replicant_pipeline_lookup(TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0],
																	  SPI_tuptable->tupdesc, 1, &isnull)),
									true);
	replicant_pipeline_check_owner(&ref, s.saved_userid);
	if (SPI_execute_with_args("SELECT state FROM replicant.backfills WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (strcmp(state, "planned") != 0 && strcmp(state, "running") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("backfill " INT64_FORMAT " is already %s", id, state)));
	refuse_cancelling_resync_read(id);
	if (SPI_execute_with_args("UPDATE replicant.backfills SET state = 'cancelled', finished_at = pg_catalog.now()"
							  " WHERE id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not cancel the backfill");
	replicant_catalog_bump_config(ref.id);
	replicant_catalog_leave(&s);
	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}
