/*
 * catalog.c
 *		Running queries on replicant's own tables with replicant's privileges:
 *		the one place that switches to the bootstrap superuser for them.
 *
 * Rules kept with other files: docs/internals.md §9 (privileges: who runs
 * what as whom).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid_d.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_namespace.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "catalog.h"

int
replicant_pin_search_path(void)
{
	int level = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

/* The schema of extension replicant, or InvalidOid when it is not installed. */
static Oid
extension_schema(void)
{
	Relation rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple tuple;
	Oid schema = InvalidOid;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("replicant"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		schema = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return schema;
}

void
replicant_catalog_check_schema(void)
{
	Oid schema = extension_schema();
	HeapTuple tuple;
	Oid owner;

	if (!OidIsValid(schema))
		return;
	if (get_namespace_oid("replicant", true) != schema)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("schema \"replicant\" is not the schema of extension \"replicant\""),
				 errdetail("The extension's schema was renamed; replicant runs no query on a schema of that name."),
				 errhint("Rename the extension's schema back to \"replicant\" (after dropping or renaming the schema that took its name).")));
	tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(schema));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for schema %u", schema);
	owner = ((Form_pg_namespace) GETSTRUCT(tuple))->nspowner;
	ReleaseSysCache(tuple);
	if (!superuser_arg(owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("schema \"replicant\" is owned by a role that is not a superuser"),
				 errdetail("The owner of the schema could replace replicant's tables with its own, whose code replicant would run as a superuser."),
				 errhint("Once you have checked every object in it, make a superuser its owner (ALTER SCHEMA replicant OWNER TO ...).")));
}

void
replicant_catalog_enter(ReplicantCatalogAccess *access)
{
	replicant_catalog_check_schema();
	access->saved_context = CurrentMemoryContext;
	access->guc_level = replicant_pin_search_path();
	GetUserIdAndSecContext(&access->saved_userid, &access->saved_sec_context);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   access->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/*
 * Undoes every setting made since replicant_catalog_enter, even a plain SET
 * (which AtEOXact_GUC(true, ...) would keep, as it keeps one made inside a
 * function with a SET clause): code run in between, a table owner's say,
 * must not leave the caller's session with a search_path of its choosing.
 */
void
replicant_catalog_leave(ReplicantCatalogAccess *access)
{
	SPI_finish();
	SetUserIdAndSecContext(access->saved_userid, access->saved_sec_context);
	AtEOXact_GUC(false, access->guc_level);
	MemoryContextSwitchTo(access->saved_context);
}

void
replicant_catalog_begin(ReplicantCatalogAccess *access)
{
	MemoryContext caller = CurrentMemoryContext;

	/* Workers run no statements of their own: keep now() current. */
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	replicant_catalog_enter(access);
	access->saved_context = caller;
	PushActiveSnapshot(GetTransactionSnapshot());
}

void
replicant_catalog_end(ReplicantCatalogAccess *access)
{
	PopActiveSnapshot();
	replicant_catalog_leave(access);
	CommitTransactionCommand();
	MemoryContextSwitchTo(access->saved_context);
}

const char *
replicant_catalog_skipped_state(void)
{
	static const char *state = NULL;
	bool isnull;
	Datum old_objects;

	if (state != NULL)
		return state;
	if (SPI_execute("SELECT extversion OPERATOR(pg_catalog.=) ANY ('{0.1.0,0.2.0}')"
					"  FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'replicant'",
					true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the version of extension \"replicant\"");
	old_objects = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull && DatumGetBool(old_objects))
		return "cancelled";
	/* From 0.3.0 on, for good: a version is never downgraded in place. */
	state = "skipped";
	return state;
}

bool
replicant_destinations_exist(void)
{
	return OidIsValid(get_relname_relid("destinations", get_namespace_oid("replicant", false)));
}

void
replicant_catalog_update_pipelines(const char *sql, int nargs, Oid *argtypes, Datum *args,
								   const char *nulls)
{
	if (SPI_execute_with_args(sql, nargs, argtypes, args, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update replicant.pipelines");
}

void
replicant_catalog_bump_config(int32 pipeline_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};

	replicant_catalog_update_pipelines("UPDATE replicant.pipelines SET config_version = config_version OPERATOR(pg_catalog.+) 1"
									   " WHERE id OPERATOR(pg_catalog.=) $1",
									   1, argtypes, args, NULL);
}
