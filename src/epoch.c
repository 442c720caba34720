/*
 * epoch.c
 *		What decoding delivered before an alter_pipeline call.
 *
 * alter_pipeline stops the worker where nothing acknowledged is left
 * unrecorded, but a batch the sink has not acknowledged yet (it is down,
 * or answered too late) is decoded again by the next worker.  Decoded
 * with the new options, a transaction would come back with other content
 * under the commit_lsn the sink may already hold: a removed publication's
 * changes gone, messages missing or added.  So a call that changes the
 * publications, messages or message_prefixes first keeps the options it
 * replaces, with the WAL position of the call (replicant.pipeline_epochs):
 * decoding takes for each commit the options of its epoch, and only what
 * commits after the call gets the new ones, as an added publication counts
 * from the call on (publication_lsns).
 *
 * Rules kept with other files: docs/internals.md §4 (one content per
 * commit_lsn).
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/lsyscache.h"

#include "checkpoint_floor.h"
#include "epoch.h"

const ReplicantEpoch *
replicant_epoch_at(const List *epochs, XLogRecPtr lsn)
{
	ListCell *lc;

	foreach(lc, epochs)
	{
		const ReplicantEpoch *epoch = lfirst(lc);

		if (XLogRecPtrIsInvalid(epoch->until) || lsn < epoch->until)
			return epoch;
	}
	elog(ERROR, "no decoding options for LSN %X/%X", LSN_FORMAT_ARGS(lsn));
	return NULL; /* keep compiler quiet */
}

bool
replicant_epoch_any_messages(const List *epochs)
{
	ListCell *lc;

	foreach(lc, epochs)
		if (((const ReplicantEpoch *) lfirst(lc))->messages)
			return true;
	return false;
}

bool
replicant_epoch_kept(void)
{
	return OidIsValid(get_relname_relid("pipeline_epochs",
										get_namespace_oid("replicant", false)));
}

void
replicant_epoch_record(int32 pipeline_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};

	if (!replicant_epoch_kept())
		return;
	if (SPI_execute_with_args("INSERT INTO replicant.pipeline_epochs (pipeline_id, until_lsn,"
							  "   publications, publication_lsns, messages, message_prefixes)"
							  " SELECT id, pg_catalog.pg_current_wal_insert_lsn(), publications,"
							  "        publication_lsns, messages, message_prefixes"
							  "   FROM replicant.pipelines WHERE id OPERATOR(pg_catalog.=) $1"
							  " ON CONFLICT (pipeline_id, until_lsn) DO NOTHING",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_INSERT ||
		SPI_execute_with_args(psprintf("DELETE FROM replicant.pipeline_epochs e"
									   " USING %s c"
									   " WHERE e.pipeline_id OPERATOR(pg_catalog.=) $1"
									   "   AND e.until_lsn OPERATOR(pg_catalog.<=) c.commit_lsn",
									   replicant_checkpoint_floor_sql()),
							  1, argtypes, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not record the options pipeline %d had", pipeline_id);
}
