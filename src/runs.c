/*
 * runs.c
 *		A pipeline worker's runs without progress, counted across crash
 *		restarts.
 *
 * The launcher counts a worker's failed runs while its pipeline makes no
 * progress, and halts the pipeline after REPLICANT_MAX_RETRIES restarts
 * (launcher.c); but it counts in memory.  A worker that dies by a signal (a
 * segmentation fault, the OOM killer's SIGKILL) makes the postmaster
 * restart the whole server, launcher and shared memory included, so a
 * crash that comes back at the same place would restart the server for
 * ever.  So each run is also counted in replicant.worker_runs, committed
 * and flushed before the worker does anything else: the runs since the
 * pipeline last made progress, as the launcher counts them.  The count
 * starts over at 1 (the run itself) when the launcher saw the previous run
 * end with no failure of the pipeline's (a stop, a termination by another
 * process) and once the run makes durable progress (a checkpoint or slot
 * position past where it started, a snapshot window, a backfill chunk); at
 * 0 when the run ends on a shutdown or termination it answers, or the
 * pipeline is enabled or resumed.  A run that finds more than
 * REPLICANT_MAX_RETRIES runs before it without progress halts the
 * pipeline.
 *
 * The worker only ever updates its row, which create_pipeline (or the
 * update to 0.3.0) made: an insert would lock the pipeline's row, which
 * alter_pipeline holds while it waits for the worker to stop.  Under the
 * SQL objects of 0.1.0 and 0.2.0 (until ALTER EXTENSION UPDATE) there is
 * no such table and nothing is counted.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/lsyscache.h"

#include "catalog.h"
#include "runs.h"
#include "shmem.h"

/* This process set the count since it made progress: once is enough. */
static bool count_set = false;

static bool
runs_table_exists(void)
{
	Oid nsp = get_namespace_oid("replicant", true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid("worker_runs", nsp));
}

/* Makes the transaction just committed durable: a crash must not undo it. */
static void
flush_commit(void)
{
	if (!XLogRecPtrIsInvalid(XactLastCommitEnd))
		XLogFlush(XactLastCommitEnd);
}

char *
replicant_runs_begin(int32 pipeline_id, bool start_over)
{
	ReplicantCatalogAccess access;
	Oid argtypes[2] = {INT4OID, BOOLOID};
	Datum args[2] = {Int32GetDatum(pipeline_id), BoolGetDatum(start_over)};
	int runs = 0;

	replicant_catalog_begin(&access);
	if (runs_table_exists())
	{
		bool isnull;

		if (SPI_execute_with_args("UPDATE replicant.worker_runs SET without_progress ="
								  "       CASE WHEN $2 THEN 1"
								  "            ELSE without_progress OPERATOR(pg_catalog.+) 1 END"
								  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1"
								  " RETURNING without_progress",
								  2, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
			elog(ERROR, "could not count the run of pipeline %d", pipeline_id);
		if (SPI_processed == 1)
			runs = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	replicant_catalog_end(&access);
	flush_commit();
	if (runs <= REPLICANT_MAX_RETRIES + 1)
		return NULL;
	return psprintf("the pipeline worker ended %d times in a row without progress, the last time without an error it could report (killed by a signal, or the server restarted)",
					runs - 1);
}

/* Sets the count to runs unless it is below, once per process. */
static void
set_runs(int32 pipeline_id, int runs)
{
	ReplicantCatalogAccess access;
	Oid argtypes[2] = {INT4OID, INT4OID};
	Datum args[2] = {Int32GetDatum(pipeline_id), Int32GetDatum(runs)};

	if (count_set)
		return;
	count_set = true;
	replicant_catalog_begin(&access);
	if (runs_table_exists() &&
		SPI_execute_with_args("UPDATE replicant.worker_runs SET without_progress = $2"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1"
							  "   AND without_progress OPERATOR(pg_catalog.>) $2",
							  2, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not reset the run count of pipeline %d", pipeline_id);
	replicant_catalog_end(&access);
	flush_commit();
}

void
replicant_runs_progressed(int32 pipeline_id)
{
	set_runs(pipeline_id, 1);
}

void
replicant_runs_ended(int32 pipeline_id)
{
	/* After progress set it to 1, the run is over all the same. */
	count_set = false;
	set_runs(pipeline_id, 0);
}

void
replicant_runs_start_over(int32 pipeline_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};

	if (!runs_table_exists())
		return;
	if (SPI_execute_with_args("INSERT INTO replicant.worker_runs AS r (pipeline_id) VALUES ($1)"
							  " ON CONFLICT (pipeline_id) DO UPDATE SET without_progress = 0"
							  "  WHERE r.without_progress OPERATOR(pg_catalog.<>) 0",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not reset the run count of pipeline %d", pipeline_id);
}
