/*
 * destination.c
 *		A pipeline's destinations, loaded for its workers: today the one
 *		named "default", whose options are columns of the pipeline's row.
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "destination.h"

static char *
spi_text(HeapTuple tuple, TupleDesc desc, int col)
{
	bool isnull;
	Datum d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

static Datum
spi_datum(HeapTuple tuple, TupleDesc desc, int col)
{
	bool isnull;

	return SPI_getbinval(tuple, desc, col, &isnull);
}

/* The default destination's options, in CurrentMemoryContext. */
static ReplicantDestination *
read_default(int32 pipeline_id, const char *pipeline_name)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	ReplicantDestination *d;
	HeapTuple tuple;
	TupleDesc desc;
	bool isnull;
	Datum until;
	MemoryContext caller = CurrentMemoryContext;

	if (SPI_execute_with_args(
			"SELECT p.sink_url, p.batch_max_bytes, p.batch_max_transactions,"
			"       p.http_timeout_ms, p.connect_timeout_ms, p.secret,"
			"       p.secret_previous, p.secret_previous_until, p.ca_file,"
			/* 0.1.0's table has no format column until ALTER EXTENSION UPDATE */
			"       COALESCE(pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'format', 'replicant'),"
			/* nor 0.2.0's a create_tables column */
			"       COALESCE((pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'create_tables')::pg_catalog.bool, false),"
			/* nor a max_retained_wal column */
			"       COALESCE((pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'max_retained_wal')::pg_catalog.int8, 0),"
			/* nor on_slot_loss */
			"       COALESCE(pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'on_slot_loss', 'halt')"
			"  FROM replicant.pipelines p WHERE p.id OPERATOR(pg_catalog.=) $1",
			1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the destination of pipeline %d", pipeline_id);
	tuple = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	MemoryContextSwitchTo(caller);

	d = palloc0(sizeof(ReplicantDestination));
	d->name = pstrdup(REPLICANT_DEFAULT_DESTINATION);
	d->pipeline_name = pstrdup(pipeline_name);
	d->sink_url = spi_text(tuple, desc, 1);
	d->batch_max_bytes = DatumGetInt32(spi_datum(tuple, desc, 2));
	d->batch_max_transactions = DatumGetInt32(spi_datum(tuple, desc, 3));
	d->http_timeout_ms = DatumGetInt32(spi_datum(tuple, desc, 4));
	d->connect_timeout_ms = DatumGetInt32(spi_datum(tuple, desc, 5));
	d->secret = spi_text(tuple, desc, 6);
	d->secret_previous = spi_text(tuple, desc, 7);
	until = SPI_getbinval(tuple, desc, 8, &isnull);
	d->secret_previous_until = isnull ? 0 : DatumGetTimestampTz(until);
	d->ca_file = spi_text(tuple, desc, 9);
	d->format = spi_text(tuple, desc, 10);
	d->create_tables = DatumGetBool(spi_datum(tuple, desc, 11));
	d->max_retained_wal = DatumGetInt64(spi_datum(tuple, desc, 12));
	d->on_slot_loss_resync = strcmp(spi_text(tuple, desc, 13), "resync") == 0;
	return d;
}

/* Headers were validated when set; here they only need splitting. */
static void
read_headers(int32 pipeline_id, ReplicantDestination *d)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	MemoryContext caller = CurrentMemoryContext;
	uint64 i;

	if (SPI_execute_with_args(
			"SELECT h.key, h.value"
			"  FROM replicant.pipelines p, pg_catalog.jsonb_each_text(p.headers) h"
			" WHERE p.id OPERATOR(pg_catalog.=) $1 ORDER BY h.key",
			1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read headers of pipeline %d", pipeline_id);
	MemoryContextSwitchTo(caller);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple tuple = SPI_tuptable->vals[i];
		TupleDesc desc = SPI_tuptable->tupdesc;

		d->header_names = lappend(d->header_names, spi_text(tuple, desc, 1));
		d->header_values = lappend(d->header_values, spi_text(tuple, desc, 2));
	}
}

List *
replicant_destination_load(int32 pipeline_id, const char *pipeline_name, MemoryContext mcxt)
{
	MemoryContext old = MemoryContextSwitchTo(mcxt);
	ReplicantDestination *d = read_default(pipeline_id, pipeline_name);
	List *destinations;

	read_headers(pipeline_id, d);
	destinations = list_make1(d);
	MemoryContextSwitchTo(old);
	return destinations;
}
