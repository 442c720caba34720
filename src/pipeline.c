/*
 * pipeline.c
 *		Pipeline configuration: identifier rules, catalog access for workers,
 *		loading a pipeline and recording a halt.
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type_d.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"

#include "checkpoint_floor.h"
#include "destination.h"
#include "guc_pin.h"
#include "pipeline.h"
#include "replicant.h"
#include "waiver.h"

/*
 * Settings the worker's own transactions depend on, whatever the owner's
 * role or the database sets: under default_transaction_read_only = on every
 * checkpoint would fail and the same batch would be delivered forever.
 */
static const ReplicantSetting worker_settings[] = {
	{"default_transaction_read_only", "off"},
	{"default_transaction_isolation", "read committed"},
	{"statement_timeout", "0"},
	{"lock_timeout", "0"},
	{"idle_in_transaction_session_timeout", "0"},
	{"search_path", "pg_catalog, pg_temp"},
};

bool
replicant_pipeline_has_column(const char *column)
{
	Oid pipelines = get_relname_relid("pipelines",
									  get_namespace_oid("replicant", false));

	return get_attnum(pipelines, column) != InvalidAttrNumber;
}

void
replicant_pin_worker_settings(void)
{
	replicant_guc_pin(worker_settings, lengthof(worker_settings));
}

void
replicant_check_name(const char *what, const char *name)
{
	const char *p;

	if (name == NULL || name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("%s name must not be empty", what)));
	if (strlen(name) > REPLICANT_NAME_MAXLEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("%s name is too long", what),
				 errdetail("Names have at most %d characters.", REPLICANT_NAME_MAXLEN)));
	for (p = name; *p; p++)
	{
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("%s name contains an invalid character", what),
					 errhint("Names may contain only lower case letters, digits and underscores.")));
	}
}

void
replicant_pipeline_check_name(const char *name)
{
	replicant_check_name("pipeline", name);
}

void
replicant_pipeline_check_publication_name(const char *name)
{
	const char *p;

	if (name == NULL || name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("publication name must not be empty")));
	if (strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("publication name is too long")));
	for (p = name; *p; p++)
	{
		unsigned char c = (unsigned char) *p;

		/* Printable ASCII without quotes, backslashes or semicolons. */
		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\'' || c == '\\' || c == ';')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("publication name contains an invalid character")));
	}
}

char *
replicant_pipeline_new_slot_name(const char *name)
{
	char *prefix;
	int keep;

	if (!replicant_pipeline_has_column("slot_name"))
		return psprintf(REPLICANT_LEGACY_SLOT_PREFIX "%s", name);
	prefix = psprintf(REPLICANT_SLOT_PREFIX "%u_", MyDatabaseId);
	/* Up to 62 bytes as it is: a hashed name has 63, so none equals another. */
	if (strlen(prefix) + strlen(name) < NAMEDATALEN - 1)
		return psprintf("%s%s", prefix, name);
	/* At most 48 + 20 bytes: keep what fits beside "_<8 hex digits>". */
	keep = NAMEDATALEN - 1 - strlen(prefix) - 9;
	return psprintf("%s%.*s_%08x", prefix, keep, name,
					hash_bytes((const unsigned char *) name, strlen(name)));
}

const char *
replicant_pipeline_slot_name_sql(void)
{
	return replicant_pipeline_has_column("slot_name") ?
			   "p.slot_name::pg_catalog.text" :
			   "'" REPLICANT_LEGACY_SLOT_PREFIX "' OPERATOR(pg_catalog.||) p.name";
}

static char *
spi_text(HeapTuple tuple, TupleDesc desc, int col)
{
	bool isnull;
	Datum d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

ReplicantPipelineRef
replicant_pipeline_lookup(const char *name, bool lock)
{
	Oid argtypes[1] = {TEXTOID};
	Datum args[1] = {CStringGetTextDatum(name)};
	ReplicantPipelineRef ref;
	HeapTuple tuple;
	TupleDesc desc;
	bool isnull;

	if (SPI_execute_with_args(psprintf("SELECT id, owner, halt_reason IS NOT NULL, enabled, publications, %s"
									   "  FROM replicant.pipelines p WHERE name OPERATOR(pg_catalog.=) $1%s",
									   replicant_pipeline_slot_name_sql(), lock ? " FOR UPDATE" : ""),
							  1, argtypes, args, NULL, !lock, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("pipeline \"%s\" does not exist", name)));
	tuple = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	ref.id = DatumGetInt32(SPI_getbinval(tuple, desc, 1, &isnull));
	ref.owner = DatumGetObjectId(SPI_getbinval(tuple, desc, 2, &isnull));
	ref.halted = DatumGetBool(SPI_getbinval(tuple, desc, 3, &isnull));
	ref.enabled = DatumGetBool(SPI_getbinval(tuple, desc, 4, &isnull));
	ref.publications = DatumGetArrayTypePCopy(SPI_getbinval(tuple, desc, 5, &isnull));
	ref.slot_name = spi_text(tuple, desc, 6);
	ref.name = pstrdup(name);
	return ref;
}

void
replicant_pipeline_check_owner(const ReplicantPipelineRef *ref, Oid userid)
{
	if (!has_privs_of_role(userid, ref->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of pipeline \"%s\"", ref->name)));
}

static Datum
spi_datum(HeapTuple tuple, TupleDesc desc, int col, bool *isnull)
{
	return SPI_getbinval(tuple, desc, col, isnull);
}

/* A text[] as a List of char *, in CurrentMemoryContext. */
static List *
text_array_list(Datum array)
{
	Datum *elems;
	int nelems;
	int i;
	List *list = NIL;

	deconstruct_array(DatumGetArrayTypeP(array), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, NULL, &nelems);
	for (i = 0; i < nelems; i++)
		list = lappend(list, TextDatumGetCString(elems[i]));
	return list;
}

/* Where each publication counts from; missing entries (0.1.0's rows): always. */
static XLogRecPtr *
publication_lsns(Datum array, bool isnull, int npublications)
{
	XLogRecPtr *lsns = palloc0(sizeof(XLogRecPtr) * npublications);
	Datum *elems;
	bool *nulls;
	int nelems;
	int i;

	if (isnull)
		return lsns;
	deconstruct_array(DatumGetArrayTypeP(array), PG_LSNOID, sizeof(XLogRecPtr),
					  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &nulls, &nelems);
	for (i = 0; i < nelems && i < npublications; i++)
		lsns[i] = nulls[i] ? InvalidXLogRecPtr : DatumGetLSN(elems[i]);
	return lsns;
}

static XLogRecPtr
spi_lsn(HeapTuple tuple, TupleDesc desc, int col)
{
	bool isnull;
	Datum d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? InvalidXLogRecPtr : DatumGetLSN(d);
}

/*
 * Reads the pipeline's row and its checkpoint; false if it no longer exists.
 * Its sink options are its destination's (destination.c).
 */
static bool
read_pipeline_row(int32 id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(id)};

	if (SPI_execute_with_args(psprintf(
								  "SELECT p.name, p.owner, p.publications, p.snapshot,"
								  "       p.enabled, p.halt_reason, p.config_version,"
								  "       c.commit_lsn, c.end_lsn, p.snapshot_workers, p.messages,"
								  "       p.message_prefixes,"
								  /* 0.1.0's table has no failover column until ALTER EXTENSION UPDATE */
								  "       COALESCE((pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'failover')::pg_catalog.bool, false),"
								  "       %s, %s, %s,"
								  /* nor 0.2.0's the resync's state */
								  "       pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'resync_reason',"
								  "       (pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'resync_lost_from')::pg_catalog.pg_lsn,"
								  "       COALESCE((pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'resync_slot_dropped')::pg_catalog.bool, false),"
								  "       COALESCE((pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'resync_losses')::pg_catalog.int4, 0)"
								  "  FROM replicant.pipelines p"
								  "  LEFT JOIN %s c ON true"
								  " WHERE p.id OPERATOR(pg_catalog.=) $1",
								  replicant_pipeline_has_column("publication_lsns") ?
									  "p.publication_lsns" :
									  "NULL::pg_catalog.pg_lsn[]",
								  replicant_pipeline_slot_name_sql(),
								  replicant_pipeline_has_column("event_id_key") ?
									  "p.event_id_key" :
									  "NULL::pg_catalog.bytea",
								  replicant_checkpoint_floor_sql()),
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read pipeline %d", id);
	return SPI_processed > 0;
}

/*
 * The key of the pipeline's read ids; without the column (0.2.0's objects)
 * a random one of this process: ids then differ between processes, never
 * between retries of one request.
 */
static void
read_event_id_key(ReplicantPipeline *p, HeapTuple tuple, TupleDesc desc, int col)
{
	bool isnull;
	Datum d = spi_datum(tuple, desc, col, &isnull);
	bytea *key = isnull ? NULL : DatumGetByteaPP(d);

	if (key != NULL && VARSIZE_ANY_EXHDR(key) == REPLICANT_READ_ID_KEY_LEN)
		memcpy(p->event_id_key, VARDATA_ANY(key), REPLICANT_READ_ID_KEY_LEN);
	else if (!pg_strong_random(p->event_id_key, REPLICANT_READ_ID_KEY_LEN))
		elog(ERROR, "could not generate a random key");
}

/* The pipeline from read_pipeline_row's result, in CurrentMemoryContext. */
static ReplicantPipeline *
pipeline_from_row(int32 id, HeapTuple tuple, TupleDesc desc)
{
	ReplicantPipeline *p = palloc0(sizeof(ReplicantPipeline));
	bool isnull;
	Datum d;

	p->id = id;
	p->name = spi_text(tuple, desc, 1);
	p->owner = DatumGetObjectId(spi_datum(tuple, desc, 2, &isnull));
	p->publications = text_array_list(spi_datum(tuple, desc, 3, &isnull));
	p->snapshot = spi_text(tuple, desc, 4);
	p->enabled = DatumGetBool(spi_datum(tuple, desc, 5, &isnull));
	p->halt_reason = spi_text(tuple, desc, 6);
	p->config_version = DatumGetInt32(spi_datum(tuple, desc, 7, &isnull));
	p->checkpoint_commit_lsn = spi_lsn(tuple, desc, 8);
	p->checkpoint_end_lsn = spi_lsn(tuple, desc, 9);
	p->snapshot_workers = DatumGetInt32(spi_datum(tuple, desc, 10, &isnull));
	p->messages = DatumGetBool(spi_datum(tuple, desc, 11, &isnull));
	d = spi_datum(tuple, desc, 12, &isnull);
	p->message_prefixes = isnull ? NIL : text_array_list(d);
	p->failover = DatumGetBool(spi_datum(tuple, desc, 13, &isnull));
	d = spi_datum(tuple, desc, 14, &isnull);
	p->publication_lsns = publication_lsns(d, isnull, list_length(p->publications));
	p->slot_name = spi_text(tuple, desc, 15);
	read_event_id_key(p, tuple, desc, 16);
	p->resync_reason = spi_text(tuple, desc, 17);
	p->resync_lost_from = spi_lsn(tuple, desc, 18);
	p->resync_slot_dropped = DatumGetBool(spi_datum(tuple, desc, 19, &isnull));
	p->resync_losses = DatumGetInt32(spi_datum(tuple, desc, 20, &isnull));
	return p;
}

/* The options the pipeline had before alter_pipeline calls the checkpoint has not passed. */
static void
load_epochs(ReplicantPipeline *p, MemoryContext mcxt)
{
	Oid argtypes[2] = {INT4OID, PG_LSNOID};
	Datum args[2] = {Int32GetDatum(p->id), LSNGetDatum(p->checkpoint_commit_lsn)};
	ReplicantEpoch *current;
	MemoryContext old;
	bool kept = replicant_epoch_kept();
	uint64 i;

	if (kept &&
		SPI_execute_with_args("SELECT until_lsn, publications, publication_lsns, messages,"
							  "       message_prefixes"
							  "  FROM replicant.pipeline_epochs"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1"
							  "   AND until_lsn OPERATOR(pg_catalog.>) $2"
							  " ORDER BY until_lsn",
							  2, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the earlier options of pipeline %d", p->id);
	old = MemoryContextSwitchTo(mcxt);
	for (i = 0; kept && i < SPI_processed; i++)
	{
		HeapTuple tuple = SPI_tuptable->vals[i];
		TupleDesc desc = SPI_tuptable->tupdesc;
		ReplicantEpoch *epoch = palloc0(sizeof(ReplicantEpoch));
		bool isnull;
		Datum d;

		epoch->until = spi_lsn(tuple, desc, 1);
		epoch->publications = text_array_list(spi_datum(tuple, desc, 2, &isnull));
		d = spi_datum(tuple, desc, 3, &isnull);
		epoch->publication_lsns = publication_lsns(d, isnull, list_length(epoch->publications));
		epoch->messages = DatumGetBool(spi_datum(tuple, desc, 4, &isnull));
		d = spi_datum(tuple, desc, 5, &isnull);
		epoch->message_prefixes = isnull ? NIL : text_array_list(d);
		p->epochs = lappend(p->epochs, epoch);
	}
	current = palloc0(sizeof(ReplicantEpoch));
	current->publications = p->publications;
	current->publication_lsns = p->publication_lsns;
	current->messages = p->messages;
	current->message_prefixes = p->message_prefixes;
	p->epochs = lappend(p->epochs, current);
	MemoryContextSwitchTo(old);
}

/*
 * Waits for the lock on replicant.pipelines, then replaces the caller's
 * snapshot: ALTER EXTENSION UPDATE rewrites the table, and a snapshot taken
 * before the update committed sees no row in the new file (the pipeline
 * would look dropped), nor would columns looked up before the lock include
 * the ones it adds.  False: the table is gone (DROP EXTENSION).
 */
static bool
wait_for_pipelines(void)
{
	if (!OidIsValid(RangeVarGetRelidExtended(makeRangeVar("replicant", "pipelines", -1),
											 AccessShareLock, RVR_MISSING_OK, NULL, NULL)))
		return false;
	PopActiveSnapshot();
	PushActiveSnapshot(GetTransactionSnapshot());
	return true;
}

ReplicantPipeline *
replicant_pipeline_load(int32 id, MemoryContext mcxt)
{
	ReplicantPipeline *p;
	MemoryContext old;

	if (!wait_for_pipelines() || !read_pipeline_row(id))
		return NULL;
	old = MemoryContextSwitchTo(mcxt);
	p = pipeline_from_row(id, SPI_tuptable->vals[0], SPI_tuptable->tupdesc);
	MemoryContextSwitchTo(old);
	p->destinations = replicant_destination_load(id, p->name, mcxt);
	load_epochs(p, mcxt);
	p->waivers = replicant_waiver_load(id, p->checkpoint_commit_lsn, mcxt);
	return p;
}

ReplicantDestination *
replicant_pipeline_only_destination(const ReplicantPipeline *pipeline)
{
	Assert(list_length(pipeline->destinations) == 1);
	return linitial(pipeline->destinations);
}

ReplicantDestination *
replicant_pipeline_first_destination(const ReplicantPipeline *pipeline)
{
	return linitial(pipeline->destinations);
}

int64
replicant_pipeline_wal_budget(const ReplicantPipeline *pipeline)
{
	int64 budget = 0;
	ListCell *lc;

	foreach(lc, pipeline->destinations)
	{
		const ReplicantDestination *d = lfirst(lc);
		int64 own = d->slot_released ? 0 : d->max_retained_wal;

		if (own > 0 && (budget == 0 || own < budget))
			budget = own;
	}
	return budget;
}

bool
replicant_pipeline_lock_for_update(void)
{
	return OidIsValid(RangeVarGetRelidExtended(makeRangeVar("replicant", "pipelines", -1),
											   RowExclusiveLock, RVR_MISSING_OK, NULL, NULL));
}

bool
replicant_pipeline_record_halt(int32 id, const char *reason, XLogRecPtr lsn,
							   const char *cause)
{
	Oid argtypes[4] = {INT4OID, TEXTOID, PG_LSNOID, TEXTOID};
	Datum args[4];
	char nulls[4] = {' ', ' ', ' ', ' '};
	bool have_cause;

	if (!replicant_pipeline_lock_for_update())
		return false;
	/* 0.2.0's table has no cause: its resumes accept nothing while decoding */
	have_cause = replicant_pipeline_has_column("halt_cause");

	args[0] = Int32GetDatum(id);
	args[1] = CStringGetTextDatum(reason);
	args[2] = LSNGetDatum(lsn);
	nulls[2] = XLogRecPtrIsInvalid(lsn) ? 'n' : ' ';
	args[3] = cause ? CStringGetTextDatum(cause) : (Datum) 0;
	nulls[3] = cause ? ' ' : 'n';
	if (SPI_execute_with_args(have_cause ?
								  "UPDATE replicant.pipelines SET halt_reason = $2, halt_lsn = $3,"
								  " halt_cause = $4"
								  " WHERE id OPERATOR(pg_catalog.=) $1 AND enabled AND halt_reason IS NULL" :
								  "UPDATE replicant.pipelines SET halt_reason = $2, halt_lsn = $3"
								  " WHERE id OPERATOR(pg_catalog.=) $1 AND enabled AND halt_reason IS NULL",
							  have_cause ? 4 : 3, argtypes, args, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record halt of pipeline %d", id);
	return SPI_processed > 0;
}
