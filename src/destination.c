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
#include "utils/timestamp.h"

#include "catalog.h"
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

/*
 * The destinations' rows, oldest first: from replicant.destinations, or
 * the pipeline's own row under 0.2.0's objects and before (whose columns
 * came one version at a time).
 */
static const char *const destinations_sql =
	"SELECT d.name, d.sink_url, d.batch_max_bytes, d.batch_max_transactions,"
	"       d.http_timeout_ms, d.connect_timeout_ms, d.secret, d.secret_previous,"
	"       d.secret_previous_until, d.ca_file, d.format, d.create_tables,"
	"       COALESCE(d.max_retained_wal, 0), d.on_slot_loss, d.headers"
	"  FROM replicant.destinations d WHERE d.pipeline_id OPERATOR(pg_catalog.=) $1 ORDER BY d.id";

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
	"       p.headers"
	"  FROM replicant.pipelines p WHERE p.id OPERATOR(pg_catalog.=) $1";

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
