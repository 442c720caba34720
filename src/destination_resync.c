/*
 * destination_resync.c
 *		A destination resyncs alone, beside the stream of the others.
 *
 * The pipeline's resync (resync.c) drops the slot and reads every table
 * under a new one's exported snapshot, the stream stopped.  A destination
 * cannot: the slot is the others'.  So it does what an added destination
 * with snapshot => 'incremental' does (api_destination.c): it streams
 * again from the WAL insert position, and every table is backfilled for
 * it alone by the watermark protocol (docs/internals.md §2).  What a
 * resync adds is the sweep: the first and last markers of those backfills
 * carry the resync, the first one sent on its own before the table's first
 * chunk opens its window, the last one after its last chunk's rows.  A
 * row the sink holds that was neither read nor changed by the stream after
 * the first is gone at the source: every row alive at the last was read
 * by a chunk, or changed by a commit the stream delivers after the window
 * the chunk dropped it in, and that window opened after the first.
 *
 * In the ClickHouse format the sweep is by version: chunk reads carry
 * their low watermark, above lost_to, and so do the commits streamed to
 * the destination from its checkpoint on (lost_to is that checkpoint's
 * commit), but for a resync begun again, whose checkpoint stays below: a
 * row such a commit wrote and that is still alive is read again above it.
 *
 * Rules kept with other files: docs/internals.md §2 (the watermark
 * protocol), §10 (the resync), §11 (several destinations).
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/table.h"
#include "access/timeline.h"
#include "access/xlog.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/pg_lsn.h"
#include "utils/rel.h"

#include "backfill_plan.h"
#include "catalog.h"
#include "destination_resync.h"
#include "event_log.h"
#include "partition_root.h"
#include "publication_rules.h"
#include "resync.h"
#include "table_read.h"

/*
 * The tables the publications deliver, or NIL with *refused set when owner
 * may not read one of them whole: nothing is planned then.
 */
static List *
tables_to_read(ArrayType *publications, Oid owner, char **refused)
{
	List *tables = replicant_publication_published_tables(publications, true);
	ListCell *lc;

	*refused = NULL;
	foreach(lc, tables)
	{
		Oid relid = lfirst_oid(lc);
		Relation rel;

		replicant_partition_lock_ancestors(relid, AccessShareLock);
		rel = try_table_open(relid, AccessShareLock);
		if (rel == NULL)
			continue;
		*refused = replicant_table_read_denied(rel, owner);
		table_close(rel, AccessShareLock);
		if (*refused != NULL)
			return NIL;
	}
	return tables;
}

/*
 * A promoted standby writes WAL again from where its timeline began, and
 * the old primary may have delivered commits above that: a sink holding
 * them would take the new ones for re-deliveries, since a resync beside
 * the stream keeps its watermark (docs/sink-protocol.md, "Resync").  So a
 * destination whose checkpoint (none: 0) is below this timeline's start
 * cannot resync: NULL, or why.
 */
static char *
timeline_refusal(int32 destination_id)
{
	TimeLineID tli = GetWALInsertionTimeLine();
	XLogRecPtr began;
	XLogRecPtr end = InvalidXLogRecPtr;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(destination_id)};
	bool isnull;

	if (tli == 1)
		return NULL;
	began = ((TimeLineHistoryEntry *) linitial(readTimeLineHistory(tli)))->begin;
	if (SPI_execute_with_args("SELECT end_lsn FROM replicant.checkpoints WHERE destination_id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the checkpoint of destination %d", destination_id);
	if (SPI_processed == 1)
	{
		Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		end = isnull ? InvalidXLogRecPtr : DatumGetLSN(d);
	}
	if (end >= began)
		return NULL;
	return psprintf("its checkpoint %X/%X is below %X/%X, where this server's timeline %u began (a promoted standby): "
					"its sink may hold commits of the old primary above that, and would take the new ones for "
					"re-deliveries (drop the destination and add it again, its sink emptied)",
					LSN_FORMAT_ARGS(end), LSN_FORMAT_ARGS(began), tli);
}

char *
replicant_destination_resync_refusal(int32 destination_id, Oid owner, ArrayType *publications)
{
	char *refused;

	(void) tables_to_read(publications, owner, &refused);
	return refused != NULL ? refused : timeline_refusal(destination_id);
}

char *
replicant_destination_resync_begin(int32 pipeline_id, int32 destination_id, Oid owner,
								   ArrayType *publications, const char *reason, ReplicantResyncStart start,
								   XLogRecPtr from)
{
	Oid argtypes[5] = {INT4OID, TEXTOID, INT4OID, INT4OID, PG_LSNOID};
	Datum args[5];
	char nulls[5] = "    ";
	char *refused;
	List *tables = tables_to_read(publications, owner, &refused);
	ListCell *lc;

	if (refused == NULL)
		refused = timeline_refusal(destination_id);
	if (refused != NULL)
		return refused;
	args[0] = Int32GetDatum(destination_id);
	args[1] = CStringGetTextDatum(reason);
	/* resync_losses: -1 starts it over, 0 keeps it, 1 counts this one */
	args[2] = Int32GetDatum(start == REPLICANT_RESYNC_ON_LOSS ? 1 : start == REPLICANT_RESYNC_AGAIN ? 0 :
																									  -1);
	args[3] = Int32GetDatum(pipeline_id);
	args[4] = LSNGetDatum(from);
	nulls[4] = XLogRecPtrIsInvalid(from) ? 'n' : ' ';
	/*
	 * Its checkpoint becomes from, else the insert position, L (commit
	 * L - 1, as an added destination's): every commit record written after
	 * it streams to it, the reads cover the ones before.  Begun again, its
	 * checkpoint stays where its stream is (no message decoded since is
	 * skipped) and only lost_to moves to L - 1: the rows read before have
	 * lower ClickHouse versions, and are swept unless read again.  lost_from
	 * is what its sink had acknowledged before the first of resyncs in a
	 * row.
	 */
	/* A skipped one stays: its table is read for it once published again. */
	if (SPI_execute_with_args("UPDATE replicant.backfills SET state = 'cancelled', finished_at = pg_catalog.now()"
							  " WHERE destination_id OPERATOR(pg_catalog.=) $1"
							  "   AND state OPERATOR(pg_catalog.=) ANY ('{planned,running}')",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE ||
		SPI_execute_with_args("UPDATE replicant.destinations d"
							  "   SET resync_reason = coalesce(d.resync_reason, $2),"
							  "       resync_lost_from = CASE WHEN d.resync_reason IS NULL"
							  "                               THEN (SELECT nullif(c.commit_lsn, '0/0'::pg_catalog.pg_lsn)"
							  "                                       FROM replicant.checkpoints c"
							  "                                      WHERE c.destination_id OPERATOR(pg_catalog.=) d.id)"
							  "                               ELSE d.resync_lost_from END,"
							  "       resync_lost_to = w.l OPERATOR(pg_catalog.-) 1::pg_catalog.numeric,"
							  "       resync_losses = CASE WHEN $3 OPERATOR(pg_catalog.<) 0 THEN 0"
							  "                            ELSE d.resync_losses OPERATOR(pg_catalog.+) $3 END,"
							  "       slot_released = false, halt_reason = NULL, halt_lsn = NULL,"
							  "       resync_backfill_from = (SELECT coalesce(pg_catalog.max(id), 0) OPERATOR(pg_catalog.+) 1"
							  "                                 FROM replicant.backfills)"
							  "  FROM (SELECT coalesce($5, pg_catalog.pg_current_wal_insert_lsn()) AS l) w"
							  " WHERE d.id OPERATOR(pg_catalog.=) $1",
							  5, argtypes, args, nulls, false, 0) != SPI_OK_UPDATE ||
		SPI_processed != 1)
		elog(ERROR, "could not record the resync of destination %d", destination_id);
	if (start != REPLICANT_RESYNC_AGAIN &&
		(SPI_execute_with_args("INSERT INTO replicant.checkpoints"
							   "   (pipeline_id, destination_id, commit_lsn, end_lsn, updated_at)"
							   " SELECT $4, d.id, d.resync_lost_to,"
							   "        d.resync_lost_to OPERATOR(pg_catalog.+) 1::pg_catalog.numeric, pg_catalog.now()"
							   "   FROM replicant.destinations d WHERE d.id OPERATOR(pg_catalog.=) $1"
							   " ON CONFLICT (destination_id) DO UPDATE"
							   "    SET commit_lsn = excluded.commit_lsn, end_lsn = excluded.end_lsn,"
							   "        updated_at = excluded.updated_at",
							   4, argtypes, args, NULL, false, 0) != SPI_OK_INSERT ||
		 SPI_processed != 1))
		elog(ERROR, "could not record the resync of destination %d", destination_id);
	foreach(lc, tables)
		(void) replicant_backfill_plan(pipeline_id, destination_id, owner, lfirst_oid(lc), "auto");
	return NULL;
}

char *
replicant_destination_resync_begin_in(const ReplicantPipeline *pipeline, const ReplicantDestination *destination,
									  const char *reason, ReplicantResyncStart start, XLogRecPtr from)
{
	Datum *names = palloc(sizeof(Datum) * (list_length(pipeline->publications) + 1));
	ListCell *lc;

	foreach(lc, pipeline->publications)
		names[foreach_current_index(lc)] = CStringGetTextDatum(lfirst(lc));
	return replicant_destination_resync_begin(pipeline->id, destination->id, pipeline->owner,
											  construct_array(names, list_length(pipeline->publications), TEXTOID,
															  -1, false, TYPALIGN_INT),
											  reason, start, from);
}

/*
 * resync_begin for destination, from its pipeline's worker; returns NULL or
 * why its tables cannot be read.
 */
static char *
begin_in_worker(const ReplicantPipeline *pipeline, const ReplicantDestination *destination, const char *reason,
				ReplicantResyncStart start)
{
	ReplicantCatalogAccess access;
	char *refused;

	/*
	 * Planning reads the tables: not through catalog entries decoding
	 * loaded under historic snapshots (the worker exits right after).
	 */
	InvalidateSystemCaches();
	replicant_catalog_begin(&access);
	refused = replicant_destination_resync_begin_in(pipeline, destination, reason, start, InvalidXLogRecPtr);
	replicant_catalog_end(&access);
	return refused;
}

char *
replicant_destination_resync_on_loss(const ReplicantPipeline *pipeline, const ReplicantDestination *destination,
									 const char *reason)
{
	char *refused;

	if (destination->resync_losses >= REPLICANT_RESYNC_MAX_LOSSES)
		return psprintf("%s; it resynced %d times in a row without reading every table (on_slot_loss => 'resync')",
						reason, destination->resync_losses);
	refused = begin_in_worker(pipeline, destination, reason, REPLICANT_RESYNC_ON_LOSS);
	if (refused != NULL)
		return psprintf("%s; it cannot resync: %s", reason, refused);
	replicant_log_state(pipeline->name, "resync_began", "destination", destination->name, "reason", reason,
						REPLICANT_LOG_END);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" destination \"%s\" resyncs alone: %s",
					pipeline->name, destination->name, reason),
			 errdetail("It streams again from the current WAL position, and every published table is read again for it.")));
	return NULL;
}

char *
replicant_destination_resync_again(const ReplicantPipeline *pipeline, const ReplicantDestination *destination)
{
	char *refused = begin_in_worker(pipeline, destination, destination->resync_reason, REPLICANT_RESYNC_AGAIN);

	if (refused == NULL)
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" destination \"%s\" starts its resync over: a table was published again during it",
						pipeline->name, destination->name)));
	return refused;
}

bool
replicant_destination_resync_marked(const ReplicantDestination *destination)
{
	ReplicantCatalogAccess access;
	Oid argtypes[2] = {INT4OID, INT8OID};
	Datum args[2] = {Int32GetDatum(destination->id), Int64GetDatum(destination->resync_backfill_from)};
	bool marked;

	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("SELECT 1 FROM replicant.backfills"
							  " WHERE destination_id OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.>=) $2"
							  "   AND first_sent",
							  2, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the backfills of destination %d", destination->id);
	marked = SPI_processed > 0;
	replicant_catalog_end(&access);
	return marked;
}

List *
replicant_destination_resync_reads(const ReplicantDestination *destination, bool first)
{
	ReplicantCatalogAccess access;
	Oid argtypes[2] = {INT4OID, INT8OID};
	Datum args[2] = {Int32GetDatum(destination->id), Int64GetDatum(destination->resync_backfill_from)};
	List *reads = NIL;
	MemoryContext caller = CurrentMemoryContext;

	replicant_catalog_begin(&access);
	if (SPI_execute_with_args(first ?
								  "SELECT id, relid FROM replicant.backfills"
								  " WHERE destination_id OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.>=) $2"
								  "   AND state OPERATOR(pg_catalog.=) ANY ('{planned,running}') AND NOT first_sent"
								  " ORDER BY id" :
								  "SELECT id, relid FROM replicant.backfills"
								  " WHERE destination_id OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.>=) $2"
								  "   AND state OPERATOR(pg_catalog.=) 'done'"
								  "   AND NOT EXISTS (SELECT FROM replicant.backfills o"
								  "                    WHERE o.destination_id OPERATOR(pg_catalog.=) $1"
								  "                      AND o.state OPERATOR(pg_catalog.=) ANY ('{planned,running}'))"
								  " ORDER BY id",
							  2, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the backfills of destination %d", destination->id);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(caller);
		ReplicantResyncRead *read = palloc(sizeof(ReplicantResyncRead));
		bool isnull;

		read->backfill_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		read->relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		reads = lappend(reads, read);
		MemoryContextSwitchTo(old);
	}
	replicant_catalog_end(&access);
	return reads;
}

bool
replicant_destination_resync_end(const ReplicantPipeline *pipeline, ReplicantDestination *destination)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(destination->id)};
	bool ended;

	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("UPDATE replicant.destinations d"
							  "   SET resync_reason = NULL, resync_lost_from = NULL, resync_lost_to = NULL,"
							  "       resync_losses = 0, resync_backfill_from = NULL"
							  " WHERE d.id OPERATOR(pg_catalog.=) $1 AND d.resync_reason IS NOT NULL"
							  "   AND NOT EXISTS (SELECT FROM replicant.backfills b"
							  "                    WHERE b.destination_id OPERATOR(pg_catalog.=) d.id"
							  "                      AND b.state OPERATOR(pg_catalog.=) ANY ('{planned,running}'))",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the end of the resync of destination %d", destination->id);
	ended = SPI_processed > 0;
	replicant_catalog_end(&access);
	if (!ended)
		return false;
	destination->resync_reason = NULL;
	destination->resync_losses = 0;
	replicant_log_state(pipeline->name, "resync_ended", "destination", destination->name, REPLICANT_LOG_END);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" destination \"%s\" finished its resync: every table published was read for it",
					pipeline->name, destination->name)));
	return true;
}
