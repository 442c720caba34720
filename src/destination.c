/*
 * destination.c
 *		A pipeline's destinations, loaded for its workers from
 *		replicant.destinations (one per pipeline in this version); under the
 *		SQL objects of 0.2.0 and before, the one named "default", whose
 *		options are columns of the pipeline's row.
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "destination.h"
#include "event_log.h"
#include "shmem.h"

static char *
spi_text(HeapTuple tuple, TupleDesc desc, int col)
{
	bool isnull;
	Datum d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

static XLogRecPtr
spi_lsn(HeapTuple tuple, TupleDesc desc, int col)
{
	bool isnull;
	Datum d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? InvalidXLogRecPtr : DatumGetLSN(d);
}

static Datum
spi_datum(HeapTuple tuple, TupleDesc desc, int col)
{
	bool isnull;

	return SPI_getbinval(tuple, desc, col, &isnull);
}

/*
 * The destinations' rows, oldest first: from replicant.destinations, or
 * the pipeline's own row under 0.2.0's objects and before (whose columns
 * came one version at a time).
 */
static const char *const destinations_sql =
	"SELECT d.name, d.sink_url, d.batch_max_bytes, d.batch_max_transactions,"
	"       d.http_timeout_ms, d.connect_timeout_ms, d.secret, d.secret_previous,"
	"       d.secret_previous_until, d.ca_file, d.format, d.create_tables,"
	"       COALESCE(d.max_retained_wal, 0), d.on_slot_loss, d.headers,"
	"       d.id, c.commit_lsn, c.end_lsn, d.halt_reason, d.slot_released,"
	"       d.resync_reason, d.resync_lost_from, d.resync_lost_to, d.resync_losses,"
	"       coalesce(d.resync_backfill_from, 0)"
	"  FROM replicant.destinations d"
	"  LEFT JOIN replicant.checkpoints c ON c.destination_id OPERATOR(pg_catalog.=) d.id"
	" WHERE d.pipeline_id OPERATOR(pg_catalog.=) $1 ORDER BY d.id";

static const char *const pipeline_row_sql =
	"SELECT '" REPLICANT_DEFAULT_DESTINATION "', p.sink_url, p.batch_max_bytes, p.batch_max_transactions,"
	"       p.http_timeout_ms, p.connect_timeout_ms, p.secret,"
	"       p.secret_previous, p.secret_previous_until, p.ca_file,"
	/* 0.1.0's table has no format column until ALTER EXTENSION UPDATE */
	"       COALESCE(pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'format', 'replicant'),"
	/* nor 0.2.0's a create_tables column */
	"       COALESCE((pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'create_tables')::pg_catalog.bool, false),"
	/* nor a max_retained_wal column */
	"       COALESCE((pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'max_retained_wal')::pg_catalog.int8, 0),"
	/* nor on_slot_loss */
	"       COALESCE(pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'on_slot_loss', 'halt'),"
	"       p.headers, 0, c.commit_lsn, c.end_lsn, NULL::pg_catalog.text, false,"
	"       NULL::pg_catalog.text, NULL::pg_catalog.pg_lsn, NULL::pg_catalog.pg_lsn, 0, 0::pg_catalog.int8"
	"  FROM replicant.pipelines p"
	"  LEFT JOIN replicant.checkpoints c ON c.pipeline_id OPERATOR(pg_catalog.=) p.id"
	" WHERE p.id OPERATOR(pg_catalog.=) $1";

/*
 * Headers were validated when set (an object of string values); here they
 * only need splitting, in C: a query would carry them as a parameter, which
 * auto_explain logs with a worker's plans.
 */
static void
read_headers(Datum headers, ReplicantDestination *d)
{
	JsonbIterator *it = JsonbIteratorInit(&DatumGetJsonbP(headers)->root);
	JsonbIteratorToken token;
	JsonbValue v;
	char *name = NULL;

	while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (token == WJB_KEY)
			name = pnstrdup(v.val.string.val, v.val.string.len);
		else if (token == WJB_VALUE && name != NULL)
		{
			if (v.type != jbvString)
				elog(ERROR, "a header of a destination of pipeline \"%s\" is not a string",
					 d->pipeline_name);
			d->header_names = lappend(d->header_names, name);
			d->header_values = lappend(d->header_values,
									   pnstrdup(v.val.string.val, v.val.string.len));
			name = NULL;
		}
	}
}

/* One destination from its row, in CurrentMemoryContext (headers aside). */
static ReplicantDestination *
destination_from_row(HeapTuple tuple, TupleDesc desc, const char *pipeline_name)
{
	ReplicantDestination *d = palloc0(sizeof(ReplicantDestination));
	bool isnull;
	Datum until;

	d->name = spi_text(tuple, desc, 1);
	d->pipeline_name = pstrdup(pipeline_name);
	d->sink_url = spi_text(tuple, desc, 2);
	d->batch_max_bytes = DatumGetInt32(spi_datum(tuple, desc, 3));
	d->batch_max_transactions = DatumGetInt32(spi_datum(tuple, desc, 4));
	d->http_timeout_ms = DatumGetInt32(spi_datum(tuple, desc, 5));
	d->connect_timeout_ms = DatumGetInt32(spi_datum(tuple, desc, 6));
	d->secret = spi_text(tuple, desc, 7);
	d->secret_previous = spi_text(tuple, desc, 8);
	until = SPI_getbinval(tuple, desc, 9, &isnull);
	d->secret_previous_until = isnull ? 0 : DatumGetTimestampTz(until);
	d->ca_file = spi_text(tuple, desc, 10);
	d->format = spi_text(tuple, desc, 11);
	d->create_tables = DatumGetBool(spi_datum(tuple, desc, 12));
	d->max_retained_wal = DatumGetInt64(spi_datum(tuple, desc, 13));
	d->on_slot_loss_resync = strcmp(spi_text(tuple, desc, 14), "resync") == 0;
	d->id = DatumGetInt32(spi_datum(tuple, desc, 16));
	d->checkpoint_commit_lsn = spi_lsn(tuple, desc, 17);
	d->checkpoint_end_lsn = spi_lsn(tuple, desc, 18);
	d->halt_reason = spi_text(tuple, desc, 19);
	d->slot_released = DatumGetBool(spi_datum(tuple, desc, 20));
	d->resync_reason = spi_text(tuple, desc, 21);
	d->resync_lost_from = spi_lsn(tuple, desc, 22);
	d->resync_lost_to = spi_lsn(tuple, desc, 23);
	d->resync_losses = DatumGetInt32(spi_datum(tuple, desc, 24));
	d->resync_backfill_from = DatumGetInt64(spi_datum(tuple, desc, 25));
	/* Never delivered to again, whatever clears its halt. */
	if (d->slot_released && d->halt_reason == NULL)
		d->halt_reason = pstrdup("replication slot given up for this destination");
	return d;
}

List *
replicant_destination_load(int32 pipeline_id, const char *pipeline_name, MemoryContext mcxt)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	SPITupleTable *rows;
	List *destinations = NIL;
	MemoryContext old;
	uint64 n;
	uint64 i;

	if (SPI_execute_with_args(replicant_destinations_exist() ? destinations_sql : pipeline_row_sql,
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT ||
		SPI_processed == 0)
		elog(ERROR, "could not read the destinations of pipeline %d", pipeline_id);
	rows = SPI_tuptable;
	n = SPI_processed;
	old = MemoryContextSwitchTo(mcxt);
	for (i = 0; i < n; i++)
	{
		ReplicantDestination *d = destination_from_row(rows->vals[i], rows->tupdesc, pipeline_name);
		bool isnull;
		Datum headers = SPI_getbinval(rows->vals[i], rows->tupdesc, 15, &isnull);

		if (!isnull)
			read_headers(headers, d);
		destinations = lappend(destinations, d);
	}
	MemoryContextSwitchTo(old);
	return destinations;
}

bool
replicant_destination_record_halt(const ReplicantDestination *destination, const char *reason,
								  XLogRecPtr lsn)
{
	ReplicantCatalogAccess access;
	Oid argtypes[3] = {INT4OID, TEXTOID, PG_LSNOID};
	Datum args[3];
	char nulls[3] = {' ', ' ', ' '};
	bool recorded;

	args[0] = Int32GetDatum(destination->id);
	args[1] = CStringGetTextDatum(reason);
	args[2] = LSNGetDatum(lsn);
	nulls[2] = XLogRecPtrIsInvalid(lsn) ? 'n' : ' ';
	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("UPDATE replicant.destinations SET halt_reason = $2, halt_lsn = $3"
							  " WHERE id OPERATOR(pg_catalog.=) $1 AND halt_reason IS NULL",
							  3, argtypes, args, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record halt of destination %d", destination->id);
	recorded = SPI_processed > 0;
	replicant_catalog_end(&access);
	return recorded;
}

void
replicant_destination_halted(const char *pipeline_name, const ReplicantDestination *destination,
							 ReplicantDestinationSlot *place, const char *reason, XLogRecPtr lsn)
{
	(void) replicant_destination_record_halt(destination, reason, lsn);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" destination \"%s\" halted: %s",
					pipeline_name, destination->name, reason),
			 errhint("Fix the cause, then call replicant.resume_pipeline('%s', '%s').",
					 pipeline_name, destination->name)));
	replicant_log_state(pipeline_name, "halted", "destination", destination->name, "reason", reason,
						REPLICANT_LOG_END);
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (place->state != REPLICANT_STATE_HALTED)
		place->metrics.halts++;
	place->state = REPLICANT_STATE_HALTED;
	strlcpy(place->last_error, reason, sizeof(place->last_error));
	LWLockRelease(replicant_shmem->lock);
}

const char *
replicant_destination_label(const ReplicantDestination *destination)
{
	return strcmp(destination->name, REPLICANT_DEFAULT_DESTINATION) == 0 ? NULL : destination->name;
}

bool
replicant_destination_resyncs_on_loss(const ReplicantDestination *destination)
{
	return destination->on_slot_loss_resync && destination->halt_reason == NULL && !destination->slot_released;
}

void
replicant_destination_record_release(int32 destination_id, const char *reason)
{
	Oid argtypes[2] = {INT4OID, TEXTOID};
	Datum args[2];

	args[0] = Int32GetDatum(destination_id);
	args[1] = CStringGetTextDatum(reason);
	if (SPI_execute_with_args("UPDATE replicant.destinations"
							  "   SET slot_released = true, halt_reason = coalesce(halt_reason, $2)"
							  " WHERE id OPERATOR(pg_catalog.=) $1",
							  2, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE ||
		SPI_processed != 1 ||
		/* its own backfills would be read for no one */
		SPI_execute_with_args("UPDATE replicant.backfills SET state = 'cancelled', finished_at = pg_catalog.now()"
							  " WHERE destination_id OPERATOR(pg_catalog.=) $1"
							  "   AND state OPERATOR(pg_catalog.=) ANY ('{planned,running,skipped}')",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record that destination %d gave its hold on the slot up", destination_id);
}

void
replicant_destination_log_release(const char *pipeline_name, const ReplicantDestination *destination,
								  const char *reason)
{
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" destination \"%s\" gives its hold on the replication slot up: %s",
					pipeline_name, destination->name, reason),
			 errhint("The changes it missed are no longer kept for it: replicant.resync_pipeline('%s', '%s') reads every table again for it.",
					 pipeline_name, destination->name)));
	replicant_log_state(pipeline_name, "slot_released", "destination", destination->name, "reason", reason,
						REPLICANT_LOG_END);
}

void
replicant_destination_release(const char *pipeline_name, const ReplicantDestination *destination,
							  ReplicantDestinationSlot *place, const char *reason)
{
	ReplicantCatalogAccess access;

	replicant_catalog_begin(&access);
	replicant_destination_record_release(destination->id, reason);
	replicant_catalog_end(&access);
	replicant_destination_log_release(pipeline_name, destination, reason);
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (place->state != REPLICANT_STATE_HALTED && destination->halt_reason == NULL)
		place->metrics.halts++;
	place->state = REPLICANT_STATE_HALTED;
	place->slot_released = true;
	strlcpy(place->last_error, destination->halt_reason ? destination->halt_reason : reason,
			sizeof(place->last_error));
	LWLockRelease(replicant_shmem->lock);
}

void
replicant_destination_mirror(ReplicantPipelineSlot *slot, List *destinations)
{
	int32 ids[REPLICANT_MAX_DESTINATIONS];
	char names[REPLICANT_MAX_DESTINATIONS][NAMEDATALEN];
	int n = 0;
	ListCell *lc;

	/* Under 0.2.0's objects (id 0) the one place stands for the pipeline's sink. */
	if (destinations == NIL || ((ReplicantDestination *) linitial(destinations))->id == 0)
		return;
	Assert(list_length(destinations) <= REPLICANT_MAX_DESTINATIONS);
	foreach(lc, destinations)
	{
		ReplicantDestination *d = lfirst(lc);

		ids[n] = d->id;
		strlcpy(names[n], d->name, NAMEDATALEN);
		n++;
	}
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	replicant_shmem_mirror_destinations(slot, n, ids, names);
	LWLockRelease(replicant_shmem->lock);
}
