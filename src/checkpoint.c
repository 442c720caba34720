/*
 * checkpoint.c
 *		Committing the delivery checkpoint after the sink's 2xx.
 *
 * The row in replicant.checkpoints is the authority on what was delivered:
 * the slot's confirmed_flush only moves after it, and may lag it after a
 * crash, so the decoder skips every transaction whose commit_lsn is at or
 * below the checkpoint.  The plan is prepared once per worker.
 *
 * The commit does not wait for its WAL flush: the flush happens before the
 * next batch goes out, usually for free as other commits flush WAL too.
 * That halves the fsyncs of a busy pipeline and keeps the bound on
 * re-delivery: a crash can lose only the last checkpoint, re-delivering only
 * the last batch.
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "utils/guc.h"
#include "utils/pg_lsn.h"

#include "checkpoint.h"
#include "pipeline.h"

static SPIPlanPtr upsert_plan = NULL;
static XLogRecPtr unflushed_commit_end = InvalidXLogRecPtr;

void
replicant_checkpoint_commit(int32 pipeline_id, XLogRecPtr commit_lsn,
							XLogRecPtr end_lsn)
{
	ReplicantCatalogAccess access;
	Datum		args[3];

	replicant_catalog_begin(&access);
	if (upsert_plan == NULL)
	{
		Oid			argtypes[3] = {INT4OID, PG_LSNOID, PG_LSNOID};
		SPIPlanPtr	plan;

		plan = SPI_prepare("INSERT INTO replicant.checkpoints AS c"
						   "       (pipeline_id, commit_lsn, end_lsn, updated_at)"
						   " VALUES ($1, $2, $3, now())"
						   " ON CONFLICT (pipeline_id) DO UPDATE"
						   "   SET commit_lsn = excluded.commit_lsn,"
						   "       end_lsn = excluded.end_lsn,"
						   "       updated_at = excluded.updated_at",
						   3, argtypes);
		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "could not prepare checkpoint statement");
		upsert_plan = plan;
	}
	args[0] = Int32GetDatum(pipeline_id);
	args[1] = LSNGetDatum(commit_lsn);
	args[2] = LSNGetDatum(end_lsn);
	if (SPI_execute_plan(upsert_plan, args, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not write checkpoint of pipeline %d", pipeline_id);
	SetConfigOption("synchronous_commit", "off", PGC_USERSET, PGC_S_SESSION);
	replicant_catalog_end(&access);
	SetConfigOption("synchronous_commit", NULL, PGC_USERSET, PGC_S_SESSION);
	unflushed_commit_end = XactLastCommitEnd;
}

void
replicant_checkpoint_make_durable(void)
{
	if (XLogRecPtrIsInvalid(unflushed_commit_end))
		return;
	XLogFlush(unflushed_commit_end);
	unflushed_commit_end = InvalidXLogRecPtr;
}
