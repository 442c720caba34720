/*
 * api.c
 *		SQL-callable management functions: create, alter, enable, disable,
 *		resume and drop pipelines.
 *
 * Every function validates all of its input before it changes anything,
 * and changes nothing when it fails.  The pipeline's slot is created in the
 * caller's statement, so changes committed after create_pipeline() returns
 * are never missed; it stays ephemeral (dropped on error) until the
 * transaction commits.  Changes reach the workers through the launcher,
 * which is asked to re-read this database only once the caller commits.
 */
#include "postgres.h"

#include <curl/curl.h>

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "common/hashfn.h"
#include "storage/lmgr.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_authid_d.h"
#include "catalog/pg_publication.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "replication/logical.h"
#include "replication/slot.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rls.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"
#include "utils/varlena.h"
#include "utils/wait_event.h"

#include "backfill.h"
#include "compat.h"
#include "decoder.h"
#include "redact.h"
#include "pipeline.h"
#include "partition_root.h"
#include "publication.h"
#include "replicant.h"
#include "shmem.h"
#include "signing.h"

PG_FUNCTION_INFO_V1(replicant_create_pipeline);
PG_FUNCTION_INFO_V1(replicant_alter_pipeline);
PG_FUNCTION_INFO_V1(replicant_enable_pipeline);
PG_FUNCTION_INFO_V1(replicant_disable_pipeline);
PG_FUNCTION_INFO_V1(replicant_resume_pipeline);
PG_FUNCTION_INFO_V1(replicant_drop_pipeline);
PG_FUNCTION_INFO_V1(replicant_backfill);
PG_FUNCTION_INFO_V1(replicant_cancel_backfill);
PG_FUNCTION_INFO_V1(replicant_pipeline_definitions);

#define MAX_URL_LENGTH 2048
#define MAX_HEADERS 32
#define MAX_HEADER_VALUE_LENGTH 8192

/* Headers replicant sets itself. */
static const char *const reserved_headers[] = {
	"content-type", "content-length", "content-encoding", "transfer-encoding",
	"host", "connection", "expect", "user-agent", "keep-alive",
	"webhook-id", "webhook-timestamp", "webhook-signature", NULL
};

/* What a slot created in this transaction still needs at commit. */
static bool slot_created_in_xact = false;
static bool xact_callback_registered = false;
static bool resync_on_abort = false;

/* Pipelines resumed in this transaction (in TopMemoryContext). */
static List *resumed_at_commit = NIL;

/*
 * A resumed pipeline's shared state still shows the halt until a new
 * worker attaches: clear it the moment the resume commits, so that no
 * reader (replicant.status, await_delivered) sees the pipeline halted
 * after resume_pipeline returned.
 */
static void
clear_resumed_halts(void)
{
	ListCell   *lc;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	foreach(lc, resumed_at_commit)
	{
		ReplicantPipelineSlot *slot = replicant_shmem_find(MyDatabaseId, lfirst_int(lc));

		if (slot && slot->state == REPLICANT_STATE_HALTED)
		{
			slot->state = REPLICANT_STATE_STARTING;
			slot->last_error[0] = '\0';
		}
	}
	LWLockRelease(replicant_shmem->lock);
}

/*
 * Makes the slot permanent just before commit, and lets go of it only once
 * the pipeline row is visible, so the sync worker never mistakes it for an
 * orphan.  On error the server releases the ephemeral slot, which drops it.
 */
static void
api_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (slot_created_in_xact)
				ReplicationSlotPersist();
			break;
		case XACT_EVENT_COMMIT:
			if (slot_created_in_xact && MyReplicationSlot != NULL)
				ReplicationSlotRelease();
			slot_created_in_xact = false;
			resync_on_abort = false;
			if (resumed_at_commit != NIL)
				clear_resumed_halts();
			list_free(resumed_at_commit);
			resumed_at_commit = NIL;
			break;
		case XACT_EVENT_ABORT:
			list_free(resumed_at_commit);
			resumed_at_commit = NIL;
			slot_created_in_xact = false;
			if (resync_on_abort)
				replicant_shmem_request_sync(MyDatabaseId);
			resync_on_abort = false;
			break;
		default:
			break;
	}
}

static void
register_xact_callback(void)
{
	if (!xact_callback_registered)
		RegisterXactCallback(api_xact_callback, NULL);
	xact_callback_registered = true;
}

/*
 * Server prerequisites
 */
static bool
output_plugin_allowed(void)
{
	const char *setting = GetConfigOption("output_plugin_libraries", true, false);
	List	   *names;
	ListCell   *lc;

	if (setting == NULL)
		return true;			/* servers before 15.19 load any plugin */
	if (!SplitIdentifierString(pstrdup(setting), ',', &names))
		return false;
	foreach(lc, names)
		if (strcmp(lfirst(lc), "replicant") == 0)
			return true;
	return false;
}

static void
check_prerequisites(void)
{
	if (!replicant_shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replicant is not loaded through \"shared_preload_libraries\""),
				 errhint("Add \"replicant\" to \"shared_preload_libraries\" and restart the server.")));
	if (wal_level < WAL_LEVEL_LOGICAL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replicant requires \"wal_level\" to be \"logical\""),
				 errhint("Set \"wal_level = logical\" and restart the server.")));
	if (!output_plugin_allowed())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("\"output_plugin_libraries\" does not list \"replicant\""),
				 errhint("Add \"replicant\" to \"output_plugin_libraries\", for example \"output_plugin_libraries = 'pgoutput, test_decoding, replicant'\", and reload the configuration.")));
}

/*
 * Catalog access as the bootstrap superuser: callers may have been granted
 * the functions without being able to read the secrets table.  The search
 * path is pinned (replicant_pin_search_path), so nothing of the caller's
 * resolves in the queries; reading a user table switches to the pipeline's
 * owner (replicant_backfill_plan).
 */
typedef struct ApiSpi
{
	Oid			saved_userid;
	int			saved_sec_context;
	int			guc_level;
} ApiSpi;

static void
api_spi_begin(ApiSpi *s)
{
	GetUserIdAndSecContext(&s->saved_userid, &s->saved_sec_context);
	s->guc_level = replicant_pin_search_path();
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   s->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

static void
api_spi_end(ApiSpi *s)
{
	SPI_finish();
	SetUserIdAndSecContext(s->saved_userid, s->saved_sec_context);
	AtEOXact_GUC(true, s->guc_level);
}

/*
 * Input validation
 */
static char *
required_text(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname)));
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

static void
check_range(const char *option, int value, int min, int max)
{
	if (value < min || value > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %d and %d", option, min, max)));
}

/* An option argument: NULL is refused unless null_ok (alter_pipeline). */
static bool
int_option(FunctionCallInfo fcinfo, int argno, const char *option,
		   int min, int max, bool null_ok, int *value)
{
	if (PG_ARGISNULL(argno))
	{
		if (!null_ok)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", option)));
		return false;
	}
	*value = PG_GETARG_INT32(argno);
	check_range(option, *value, min, max);
	return true;
}

/*
 * Accepts http and https URLs with a host and without user information.
 * Messages never echo the URL: it may hold a token.
 */
static void
check_sink_url(const char *url)
{
	CURLU	   *parsed;
	char	   *part = NULL;
	const char *p;
	CURLUcode	rc;

	if (strlen(url) > MAX_URL_LENGTH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink URL is too long"),
				 errdetail("Sink URLs have at most %d characters.", MAX_URL_LENGTH)));
	for (p = url; *p; p++)
		if ((unsigned char) *p <= 0x20 || (unsigned char) *p >= 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sink URL contains a space, control or non-ASCII character"),
					 errhint("Percent-encode such characters.")));
	if (pg_strncasecmp(url, "http://", 7) != 0 && pg_strncasecmp(url, "https://", 8) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink URL must start with \"http://\" or \"https://\"")));

	parsed = curl_url();
	if (parsed == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	rc = curl_url_set(parsed, CURLUPART_URL, url, 0);
	if (rc == CURLUE_OK)
	{
		if (curl_url_get(parsed, CURLUPART_USER, &part, 0) == CURLUE_OK ||
			curl_url_get(parsed, CURLUPART_PASSWORD, &part, 0) == CURLUE_OK)
		{
			curl_free(part);
			curl_url_cleanup(parsed);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sink URL must not contain credentials"),
					 errhint("Pass them as a header instead, for example headers => '{\"Authorization\": \"Bearer ...\"}'.")));
		}
	}
	curl_url_cleanup(parsed);
	if (rc != CURLUE_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink URL is not a valid URL")));
}

static bool
is_token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Headers: a JSON object of string values, with safe names and values. */
static void
check_headers(Jsonb *headers)
{
	Oid			argtypes[1] = {JSONBOID};
	Datum		args[1] = {JsonbPGetDatum(headers)};
	uint64		i;

	if (SPI_execute_with_args("SELECT pg_catalog.jsonb_typeof($1)", 1, argtypes, args,
							  NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not inspect headers");
	if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "object") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("headers must be a JSON object")));

	if (SPI_execute_with_args("SELECT key, value OPERATOR(pg_catalog.#>>) '{}',"
							  " pg_catalog.jsonb_typeof(value) FROM pg_catalog.jsonb_each($1)",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not inspect headers");
	if (SPI_processed > MAX_HEADERS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at most %d headers may be set", MAX_HEADERS)));
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *name = SPI_getvalue(tuple, desc, 1);
		char	   *value = SPI_getvalue(tuple, desc, 2);
		char	   *type = SPI_getvalue(tuple, desc, 3);
		const char *const *reserved;
		const char *p;

		if (name[0] == '\0' || strlen(name) > 64)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header names must have between 1 and 64 characters")));
		for (p = name; *p; p++)
			if (!is_token_char(*p))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("header name contains a character not allowed in HTTP header names")));
		for (reserved = reserved_headers; *reserved; reserved++)
			if (pg_strcasecmp(name, *reserved) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("header \"%s\" is set by replicant and cannot be configured", *reserved)));
		if (strcmp(type, "string") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header \"%s\" must have a string value", name)));
		if (strlen(value) > MAX_HEADER_VALUE_LENGTH)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("value of header \"%s\" is too long", name)));
		for (p = value; *p; p++)
			if ((unsigned char) *p < 0x20 || (unsigned char) *p == 0x7f)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("value of header \"%s\" contains a control character", name),
						 errdetail("Header values must not contain line breaks or other control characters.")));
	}
}

/* The publications argument: text or text[], non-empty, existing, distinct. */
static ArrayType *
check_publications(FunctionCallInfo fcinfo, int argno)
{
	Oid			argtype = get_fn_expr_argtype(fcinfo->flinfo, argno);
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	List	   *seen = NIL;
	int			i;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("publication must not be null")));
	if (argtype == TEXTOID)
	{
		Datum		one = PG_GETARG_DATUM(argno);

		return construct_array(&one, 1, TEXTOID, -1, false, TYPALIGN_INT);
	}

	deconstruct_array(PG_GETARG_ARRAYTYPE_P(argno), TEXTOID, -1, false,
					  TYPALIGN_INT, &elems, &nulls, &nelems);
	if (nelems == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at least one publication is required")));
	for (i = 0; i < nelems; i++)
	{
		char	   *name;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("publication names must not be null")));
		name = TextDatumGetCString(elems[i]);
		if (list_member(seen, makeString(name)))
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("publication \"%s\" is listed more than once", name)));
		seen = lappend(seen, makeString(name));
	}
	return PG_GETARG_ARRAYTYPE_P(argno);
}

static void
check_publications_exist(ArrayType *pubs)
{
	Datum	   *elems;
	int			nelems;
	int			i;

	deconstruct_array(pubs, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &nelems);
	for (i = 0; i < nelems; i++)
	{
		char	   *name = TextDatumGetCString(elems[i]);

		replicant_pipeline_check_publication_name(name);
		if (!OidIsValid(get_publication_oid(name, true)))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("publication \"%s\" does not exist", name)));
	}
}

/* A CA bundle path: absolute, a plain file name; read by the worker. */
static char *
check_ca_file(FunctionCallInfo fcinfo, int argno)
{
	char	   *path;
	const char *p;

	if (PG_ARGISNULL(argno))
		return NULL;
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers can set ca_file"),
				 errdetail("Workers read the file with the server's privileges.")));
	path = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (path[0] != '/' || strlen(path) >= MAXPGPATH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ca_file must be an absolute path")));
	for (p = path; *p; p++)
		if ((unsigned char) *p < 0x20)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ca_file contains a control character")));
	return path;
}

/* failover => true needs failover slots (PostgreSQL 17 and later). */
static bool
check_failover(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("failover must not be null")));
	if (PG_GETARG_BOOL(argno) && !REPLICANT_HAVE_FAILOVER_SLOTS)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("failover slots are not supported by this server"),
				 errdetail("Failover slots need PostgreSQL 17 or later."),
				 errhint("Create the pipeline without failover; after a promotion, recreate it with a snapshot.")));
	return PG_GETARG_BOOL(argno);
}

/*
 * message_prefixes: NULL (every prefix but replicant's own) or non-empty
 * prefixes; replicant's internal prefixes cannot be asked for.  An empty
 * array is accepted only where NULL means "unchanged" (empty_ok), and there
 * stands for every prefix.
 */
static ArrayType *
check_message_prefixes(FunctionCallInfo fcinfo, int argno, bool empty_ok)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;

	if (PG_ARGISNULL(argno))
		return NULL;
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(argno), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	if (n == 0 && !empty_ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("message_prefixes must not be empty"),
				 errhint("Pass NULL to deliver messages of every prefix.")));
	for (i = 0; i < n; i++)
	{
		char	   *prefix;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("message prefixes must not be null")));
		prefix = TextDatumGetCString(elems[i]);
		if (prefix[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("message prefixes must not be empty")));
		if (strncmp(prefix, "replicant.", 10) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("message prefix \"%s\" is reserved for replicant's own use", prefix)));
	}
	return PG_GETARG_ARRAYTYPE_P(argno);
}

static void
check_owner_may_receive_messages(Oid owner)
{
	if (!has_rolreplication(owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg(REPLICANT_MESSAGES_NEED_REPLICATION),
				 errdetail("A pipeline with messages receives every message emitted in the database."),
				 errhint("Grant the pipeline owner REPLICATION, or leave messages off.")));
}

static void
check_owner_can_login(Oid owner)
{
	HeapTuple	tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(owner));
	bool		can_login;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for role %u", owner);
	can_login = ((Form_pg_authid) GETSTRUCT(tuple))->rolcanlogin;
	ReleaseSysCache(tuple);
	if (!can_login)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" cannot own a pipeline because it cannot log in",
						GetUserNameFromId(owner, false)),
				 errdetail("Pipeline workers connect as the pipeline's owner.")));
}

/*
 * A pipeline as a management function sees it; read_pipeline() finds it.
 */
typedef struct PipelineRef
{
	int32		id;
	Oid			owner;
	char	   *name;
	bool		halted;
	bool		enabled;
} PipelineRef;

/*
 * Looks a pipeline up for a management function; it must exist.  With lock,
 * the row is locked FOR UPDATE; without, as for waiting on the worker, which may need to update the row (a halt) before it can exit.
 */
static PipelineRef
read_pipeline(const char *name, bool lock)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1] = {CStringGetTextDatum(name)};
	PipelineRef ref;
	bool		isnull;

	if (SPI_execute_with_args(lock ?
							  "SELECT id, owner, halt_reason IS NOT NULL, enabled"
							  "  FROM replicant.pipelines WHERE name OPERATOR(pg_catalog.=) $1 FOR UPDATE" :
							  "SELECT id, owner, halt_reason IS NOT NULL, enabled"
							  "  FROM replicant.pipelines WHERE name OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, !lock, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("pipeline \"%s\" does not exist", name)));
	ref.id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	ref.owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	ref.halted = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	ref.enabled = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	ref.name = pstrdup(name);
	return ref;
}

static void
check_is_owner(const PipelineRef *ref, ApiSpi *s)
{
	if (!has_privs_of_role(s->saved_userid, ref->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of pipeline \"%s\"", ref->name)));
}

static void
run_update(const char *sql, int nargs, Oid *argtypes, Datum *args, const char *nulls)
{
	if (SPI_execute_with_args(sql, nargs, argtypes, args, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update replicant.pipelines");
}

/* Creates the pipeline's logical slot, ephemeral until commit. */
static void
create_slot(const char *slot_name, bool failover)
{
	LogicalDecodingContext *ctx;

	if (MyReplicationSlot != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("only one pipeline can be created per transaction")));
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("cannot create a pipeline in a transaction that has performed writes")));

	CheckLogicalDecodingRequirements();
	register_xact_callback();
	REPLICANT_SLOT_CREATE(slot_name, RS_EPHEMERAL, failover);
	slot_created_in_xact = true;

	ctx = replicant_decoder_init_slot(false);
	FreeDecodingContext(ctx);
}

/*
 * Background workers that are not pipeline workers (the launcher, parallel
 * and logical replication workers, snapshot and sync workers): every
 * pg_stat_activity row but the server's own processes and client backends.
 */
static int64
other_background_workers(void)
{
	bool		isnull;

	if (SPI_execute("SELECT count(*) FROM pg_catalog.pg_stat_activity"
					" WHERE backend_type OPERATOR(pg_catalog.<>) ALL (ARRAY["
					"   'client backend', 'autovacuum launcher', 'autovacuum worker',"
					"   'background writer', 'checkpointer', 'walwriter', 'walsender',"
					"   'walreceiver', 'startup', 'archiver', 'logger', 'standalone backend',"
					"   'walsummarizer', 'slotsync worker', 'io worker', 'replicant pipeline'])",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not count background workers");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* Pipelines of other databases that want a worker. */
static int
runnable_pipelines_elsewhere(void)
{
	int			n = 0;
	int			i;

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (i = 0; i < replicant_max_pipelines; i++)
		n += (replicant_shmem->slots[i].in_use && replicant_shmem->slots[i].runnable &&
			  replicant_shmem->slots[i].dboid != MyDatabaseId) ? 1 : 0;
	LWLockRelease(replicant_shmem->lock);
	return n;
}

/*
 * Refuses a pipeline that could not run: its worker (and an initial
 * snapshot's shard workers) need background worker slots, and one more must
 * stay free for the sync worker that starts and stops workers; its slot
 * needs a free replication slot.  Otherwise it would sit in "starting".
 */
static void
check_free_slots(bool initial_snapshot, int snapshot_workers)
{
	int64		needed;
	bool		isnull;

	if (replicant_decoder_free_slots() == 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("no free replication slot for a new pipeline"),
				 errdetail("All %d replication slots are in use.", max_replication_slots),
				 errhint("Free one or increase \"%s\".", "max_replication_slots")));

	if (SPI_execute("SELECT count(*) FROM replicant.pipelines"
					" WHERE enabled AND halt_reason IS NULL", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	needed = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
										 &isnull));
	needed += runnable_pipelines_elsewhere() + other_background_workers();
	needed += 1 + (initial_snapshot ? snapshot_workers : 0) + 1;
	if (needed > max_worker_processes)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("not enough free background worker slots for a new pipeline"),
				 errdetail("The pipeline needs %d of the %d slots, of which %d are taken or promised to other workers and one must stay free.",
						   1 + (initial_snapshot ? snapshot_workers : 0), max_worker_processes,
						   (int) (needed - 2 - (initial_snapshot ? snapshot_workers : 0))),
				 errhint("You might need to increase \"%s\".", "max_worker_processes")));
}

/*
 * Makes concurrent create_pipeline calls of one name wait for each other,
 * so that the second sees the first one's row and not its slot.
 */
static void
lock_pipeline_name(const char *name)
{
	Oid			pipelines = get_relname_relid("pipelines", get_namespace_oid("replicant", false));

	LockDatabaseObject(pipelines,
					   DatumGetUInt32(hash_any((const unsigned char *) name, strlen(name))),
					   0, ExclusiveLock);
}

static int
count_pipelines_in_shmem(void)
{
	int			n = 0;
	int			i;

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (i = 0; i < replicant_max_pipelines; i++)
		n += replicant_shmem->slots[i].in_use ? 1 : 0;
	LWLockRelease(replicant_shmem->lock);
	return n;
}

/*
 * The tables the publications deliver: their leaf partitions, not parents,
 * also those of a root published via the partition root.
 */
static List *
published_tables(ArrayType *pubs)
{
	Oid			argtypes[1] = {TEXTARRAYOID};
	Datum		args[1] = {PointerGetDatum(pubs)};
	List	   *relids = NIL;
	uint64		i;

	if (SPI_execute_with_args("SELECT DISTINCT c.oid FROM pg_catalog.pg_publication_tables pt"
							  REPLICANT_PUBLISHED_LEAVES_JOIN
							  " WHERE pt.pubname OPERATOR(pg_catalog.=) ANY ($1)"
							  "   AND n.nspname OPERATOR(pg_catalog.<>) 'replicant'"
							  "   AND c.relkind OPERATOR(pg_catalog.=) 'r'"
							  " ORDER BY c.oid",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		relids = lappend_oid(relids, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																	SPI_tuptable->tupdesc, 1, &isnull)));
	}
	return relids;
}

/*
 * What the worker would halt on at the table's first change, refused now:
 * the owner must be able to read every published table, past row-level
 * security.
 */
static void
check_owner_reads_tables(Oid owner, List *relids)
{
	ListCell   *lc;

	foreach(lc, relids)
	{
		Oid			relid = lfirst_oid(lc);

		if (pg_class_aclcheck(relid, owner, ACL_SELECT) != ACLCHECK_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("role \"%s\" cannot read published table \"%s\"",
							GetUserNameFromId(owner, false), get_rel_name(relid)),
					 errdetail("The pipeline's worker reads changes as its owner, the role creating it."),
					 errhint("Grant SELECT on the table to the role, or leave the table out of the publication.")));
		if (check_enable_rls(relid, owner, true) == RLS_ENABLED)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("table \"%s\" has row-level security that role \"%s\" does not bypass",
							get_rel_name(relid), GetUserNameFromId(owner, false)),
					 errdetail("A pipeline must deliver every row, so its owner must bypass row-level security.")));
	}
}

/*
 * PostgreSQL refuses UPDATE and DELETE on a table published for them that
 * has no replica identity; say so now rather than when the application's
 * first update fails.
 */
static void
warn_tables_without_identity(ArrayType *pubs)
{
	Oid			argtypes[1] = {TEXTARRAYOID};
	Datum		args[1] = {PointerGetDatum(pubs)};
	uint64		i;

	if (SPI_execute_with_args("SELECT DISTINCT n.nspname, c.relname"
							  "  FROM pg_catalog.pg_publication p"
							  "  JOIN pg_catalog.pg_publication_tables pt ON pt.pubname OPERATOR(pg_catalog.=) p.pubname"
							  "  JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) pt.schemaname"
							  "  JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid"
							  "                            AND c.relname OPERATOR(pg_catalog.=) pt.tablename"
							  " WHERE p.pubname OPERATOR(pg_catalog.=) ANY ($1) AND (p.pubupdate OR p.pubdelete)"
							  "   AND (c.relreplident OPERATOR(pg_catalog.=) 'n'"
							  "        OR (c.relreplident OPERATOR(pg_catalog.=) 'd' AND NOT EXISTS"
							  "            (SELECT FROM pg_catalog.pg_index i"
							  "              WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisprimary)))"
							  " ORDER BY 1, 2",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	for (i = 0; i < SPI_processed; i++)
		ereport(WARNING,
				(errmsg("table \"%s.%s\" is published for updates or deletes but has no replica identity",
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2)),
				 errdetail("PostgreSQL rejects UPDATE and DELETE on the table while it is so published."),
				 errhint("Add a primary key, or set REPLICA IDENTITY USING INDEX or FULL.")));
}

/*
 * Saves the shape of every published table as the pipeline starts, so that
 * a destructive change made before the table's first streamed change halts
 * the pipeline too (publication.c compares later versions with it).
 */
static void
save_table_shapes(int32 pipeline_id, List *relids)
{
	ListCell   *lc;

	foreach(lc, relids)
	{
		Relation	rel = table_open(lfirst_oid(lc), AccessShareLock);

		replicant_publication_save_table_shape(pipeline_id, rel);
		table_close(rel, AccessShareLock);
	}
}

/*
 * create_pipeline(name, publication, sink_url, snapshot, batch_max_bytes,
 *				   batch_max_transactions, http_timeout_ms, connect_timeout_ms,
 *				   headers, secret, snapshot_workers, messages, message_prefixes,
 *				   ca_file, failover)
 */
Datum
replicant_create_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	ArrayType  *pubs;
	char	   *sink_url;
	char	   *snapshot;
	int			batch_max_bytes;
	int			batch_max_transactions;
	int			http_timeout_ms;
	int			connect_timeout_ms;
	Jsonb	   *headers;
	char	   *secret = NULL;
	int			snapshot_workers;
	Oid			owner = GetUserId();
	ApiSpi		s;
	bool		messages;
	ArrayType  *prefixes;
	char	   *ca_file;
	bool		failover;
	Oid			argtypes[15] = {TEXTOID, OIDOID, TEXTARRAYOID, TEXTOID, TEXTOID,
	INT4OID, INT4OID, INT4OID, INT4OID, JSONBOID, TEXTOID, INT4OID, BOOLOID, TEXTARRAYOID, TEXTOID};
	Datum		args[15];
	char		nulls[15];
	bool		isnull;
	int32		pipeline_id;
	List	   *tables;

	replicant_redact_statements();
	PreventInTransactionBlock(true, "replicant.create_pipeline()");
	check_prerequisites();

	name = required_text(fcinfo, 0, "pipeline name");
	replicant_pipeline_check_name(name);
	pubs = check_publications(fcinfo, 1);
	sink_url = required_text(fcinfo, 2, "sink_url");
	check_sink_url(sink_url);
	snapshot = required_text(fcinfo, 3, "snapshot");
	if (strcmp(snapshot, "none") != 0 && strcmp(snapshot, "initial") != 0 &&
		strcmp(snapshot, "incremental") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("snapshot must be \"none\", \"initial\" or \"incremental\"")));
	int_option(fcinfo, 4, "batch_max_bytes", 1024, 1024 * 1024 * 1024, false, &batch_max_bytes);
	int_option(fcinfo, 5, "batch_max_transactions", 1, 1000000, false, &batch_max_transactions);
	int_option(fcinfo, 6, "http_timeout_ms", 100, 3600000, false, &http_timeout_ms);
	int_option(fcinfo, 7, "connect_timeout_ms", 100, 600000, false, &connect_timeout_ms);
	if (PG_ARGISNULL(8))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("headers must not be null"),
				 errhint("Pass '{}' for no extra headers.")));
	headers = PG_GETARG_JSONB_P(8);
	if (!PG_ARGISNULL(9))
	{
		secret = text_to_cstring(PG_GETARG_TEXT_PP(9));
		replicant_signing_check_secret(secret);
	}
	int_option(fcinfo, 10, "snapshot_workers", 1, 16, false, &snapshot_workers);
	if (PG_ARGISNULL(11))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("messages must not be null")));
	messages = PG_GETARG_BOOL(11);
	prefixes = check_message_prefixes(fcinfo, 12, false);
	ca_file = check_ca_file(fcinfo, 13);
	/* 0.1.0's SQL function, before ALTER EXTENSION UPDATE, has no failover. */
	failover = PG_NARGS() > 14 && check_failover(fcinfo, 14);
	check_owner_can_login(owner);
	if (messages)
		check_owner_may_receive_messages(owner);
	if (count_pipelines_in_shmem() >= replicant_max_pipelines)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("cannot create more than %d pipelines", replicant_max_pipelines),
				 errhint("You might need to increase \"%s\".", "replicant.max_pipelines")));

	api_spi_begin(&s);
	check_headers(headers);
	check_publications_exist(pubs);
	tables = published_tables(pubs);
	check_owner_reads_tables(owner, tables);
	warn_tables_without_identity(pubs);
	lock_pipeline_name(name);
	args[0] = CStringGetTextDatum(name);
	/* Not read-only: a fresh snapshot sees a creator we waited for. */
	if (SPI_execute_with_args("SELECT 1 FROM replicant.pipelines WHERE name OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("pipeline \"%s\" already exists", name)));
	check_free_slots(strcmp(snapshot, "initial") == 0, snapshot_workers);

	/*
	 * Everything is valid: only now create the slot, then the row.  An
	 * initial snapshot needs the slot's consistent point and the snapshot
	 * its tables are read under to be one, so its worker creates the slot.
	 */
	if (strcmp(snapshot, "initial") != 0)
		create_slot(replicant_pipeline_slot_name(name), failover);

	args[1] = ObjectIdGetDatum(owner);
	args[2] = PointerGetDatum(pubs);
	args[3] = CStringGetTextDatum(sink_url);
	args[4] = CStringGetTextDatum(snapshot);
	args[5] = Int32GetDatum(batch_max_bytes);
	args[6] = Int32GetDatum(batch_max_transactions);
	args[7] = Int32GetDatum(http_timeout_ms);
	args[8] = Int32GetDatum(connect_timeout_ms);
	args[9] = JsonbPGetDatum(headers);
	args[10] = secret ? CStringGetTextDatum(secret) : (Datum) 0;
	args[11] = Int32GetDatum(snapshot_workers);
	args[12] = BoolGetDatum(messages);
	args[13] = prefixes ? PointerGetDatum(prefixes) : (Datum) 0;
	memset(nulls, ' ', sizeof(nulls));
	nulls[10] = secret ? ' ' : 'n';
	nulls[13] = prefixes ? ' ' : 'n';
	args[14] = ca_file ? CStringGetTextDatum(ca_file) : (Datum) 0;
	nulls[14] = ca_file ? ' ' : 'n';
	if (SPI_execute_with_args("INSERT INTO replicant.pipelines"
							  " (name, owner, publications, sink_url, snapshot,"
							  "  batch_max_bytes, batch_max_transactions,"
							  "  http_timeout_ms, connect_timeout_ms, headers, secret,"
							  "  snapshot_workers, messages, message_prefixes, ca_file)"
							  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
							  " RETURNING id",
							  15, argtypes, args, nulls, false, 0) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert into replicant.pipelines");
	pipeline_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
	if (failover)
	{
		/* Only 0.2.0's table has the column, and only its function the argument. */
		Oid			idtype[1] = {INT4OID};
		Datum		id[1] = {Int32GetDatum(pipeline_id)};

		run_update("UPDATE replicant.pipelines SET failover = true"
				   " WHERE id OPERATOR(pg_catalog.=) $1",
				   1, idtype, id, NULL);
	}
	save_table_shapes(pipeline_id, tables);
	if (strcmp(snapshot, "incremental") == 0)
	{
		ListCell   *lc;

		/* An incremental backfill of every table the publications deliver. */
		foreach(lc, tables)
			(void) replicant_backfill_plan(pipeline_id, owner, lfirst_oid(lc), "auto");
	}
	api_spi_end(&s);

	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

/*
 * Asks the pipeline's worker to stop where it leaves nothing to re-deliver
 * (everything acknowledged checkpointed, nothing in flight) and waits until
 * it has exited, so that whatever commits after the caller returns is
 * handled by a worker that reads the caller's changes.  Until the sync at
 * commit (or at abort) restores runnable, the launcher starts no other.  A
 * worker reading an initial snapshot, whose progress is durable per shard,
 * is terminated instead.
 */
static void
stop_worker_and_wait(int32 pipeline_id)
{
	resync_on_abort = true;
	register_xact_callback();
	for (;;)
	{
		ReplicantPipelineSlot *slot;
		pid_t		pid = 0;
		bool		snapshotting = false;

		LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
		slot = replicant_shmem_find(MyDatabaseId, pipeline_id);
		if (slot)
		{
			slot->runnable = false;
			pid = slot->pid;
			if (pid != 0)
			{
				slot->stop_requested = true;
				snapshotting = (slot->state == REPLICANT_STATE_SNAPSHOTTING);
				if (slot->latch)
					SetLatch(slot->latch);
			}
		}
		LWLockRelease(replicant_shmem->lock);
		if (pid == 0)
			break;
		if (snapshotting)
			kill(pid, SIGTERM);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * alter_pipeline(name, publication, sink_url, batch_max_bytes,
 *				  batch_max_transactions, http_timeout_ms, connect_timeout_ms,
 *				  headers, secret, clear_secret, messages, message_prefixes,
 *				  secret_previous_until)
 *
 * NULL leaves an option unchanged; message_prefixes => '{}' goes back to
 * every prefix.  The old worker is stopped before this
 * returns; the next one starts once the caller commits, reads the new
 * configuration (config_version changes) and resumes from the checkpoint.
 */
Datum
replicant_alter_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	ArrayType  *pubs = NULL;
	char	   *sink_url = NULL;
	int			values[4] = {0};
	bool		given[4];
	Jsonb	   *headers = NULL;
	char	   *secret = NULL;
	bool		clear_secret;
	ArrayType  *prefixes;
	PipelineRef ref;
	ApiSpi		s;
	char	   *ca_file;
	Oid			argtypes[14] = {INT4OID, TEXTARRAYOID, TEXTOID, INT4OID, INT4OID,
	INT4OID, INT4OID, JSONBOID, TEXTOID, BOOLOID, BOOLOID, TEXTARRAYOID, TIMESTAMPTZOID, TEXTOID};
	Datum		args[14];
	char		nulls[14];

	replicant_redact_statements();
	name = required_text(fcinfo, 0, "pipeline name");
	replicant_pipeline_check_name(name);
	if (!PG_ARGISNULL(1))
		pubs = check_publications(fcinfo, 1);
	if (!PG_ARGISNULL(2))
	{
		sink_url = text_to_cstring(PG_GETARG_TEXT_PP(2));
		check_sink_url(sink_url);
	}
	given[0] = int_option(fcinfo, 3, "batch_max_bytes", 1024, 1024 * 1024 * 1024, true, &values[0]);
	given[1] = int_option(fcinfo, 4, "batch_max_transactions", 1, 1000000, true, &values[1]);
	given[2] = int_option(fcinfo, 5, "http_timeout_ms", 100, 3600000, true, &values[2]);
	given[3] = int_option(fcinfo, 6, "connect_timeout_ms", 100, 600000, true, &values[3]);
	if (!PG_ARGISNULL(7))
		headers = PG_GETARG_JSONB_P(7);
	if (!PG_ARGISNULL(8))
	{
		secret = text_to_cstring(PG_GETARG_TEXT_PP(8));
		replicant_signing_check_secret(secret);
	}
	clear_secret = !PG_ARGISNULL(9) && PG_GETARG_BOOL(9);
	if (clear_secret && secret != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot set and clear the signing secret at once")));
	prefixes = check_message_prefixes(fcinfo, 11, true);
	ca_file = check_ca_file(fcinfo, 13);
	if (!PG_ARGISNULL(12))
	{
		TimestampTz until = PG_GETARG_TIMESTAMPTZ(12);

		if (secret == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("secret_previous_until needs a new secret"),
					 errhint("It keeps the current secret valid until then, beside the new one.")));
		if (until <= GetCurrentTimestamp() ||
			until > TimestampTzPlusMilliseconds(GetCurrentTimestamp(), (int64) 30 * 24 * 3600 * 1000))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("secret_previous_until must be in the next 30 days")));
	}

	api_spi_begin(&s);
	ref = read_pipeline(name, false);
	check_is_owner(&ref, &s);
	if (!PG_ARGISNULL(10) && PG_GETARG_BOOL(10))
		check_owner_may_receive_messages(ref.owner);
	if (headers)
		check_headers(headers);
	if (pubs)
		check_publications_exist(pubs);
	api_spi_end(&s);
	stop_worker_and_wait(ref.id);

	api_spi_begin(&s);
	ref = read_pipeline(name, true);
	check_is_owner(&ref, &s);

	memset(nulls, ' ', sizeof(nulls));
	args[0] = Int32GetDatum(ref.id);
	args[1] = pubs ? PointerGetDatum(pubs) : (Datum) 0;
	nulls[1] = pubs ? ' ' : 'n';
	args[2] = sink_url ? CStringGetTextDatum(sink_url) : (Datum) 0;
	nulls[2] = sink_url ? ' ' : 'n';
	for (int i = 0; i < 4; i++)
	{
		args[3 + i] = Int32GetDatum(values[i]);
		nulls[3 + i] = given[i] ? ' ' : 'n';
	}
	args[7] = headers ? JsonbPGetDatum(headers) : (Datum) 0;
	nulls[7] = headers ? ' ' : 'n';
	args[8] = secret ? CStringGetTextDatum(secret) : (Datum) 0;
	nulls[8] = secret ? ' ' : 'n';
	args[9] = BoolGetDatum(clear_secret);
	args[10] = PG_ARGISNULL(10) ? (Datum) 0 : PG_GETARG_DATUM(10);
	nulls[10] = PG_ARGISNULL(10) ? 'n' : ' ';
	args[11] = prefixes ? PointerGetDatum(prefixes) : (Datum) 0;
	nulls[11] = prefixes ? ' ' : 'n';
	args[12] = PG_ARGISNULL(12) ? (Datum) 0 : PG_GETARG_DATUM(12);
	nulls[12] = PG_ARGISNULL(12) ? 'n' : ' ';
	args[13] = ca_file ? CStringGetTextDatum(ca_file) : (Datum) 0;
	nulls[13] = ca_file ? ' ' : 'n';
	/* An added publication applies to what commits from now on (0.2.0). */
	if (pubs != NULL && replicant_pipeline_has_column("publication_lsns"))
		run_update("UPDATE replicant.pipelines SET publication_lsns ="
				   "   (SELECT pg_catalog.array_agg(CASE WHEN u.name OPERATOR(pg_catalog.=) ANY (publications)"
				   "             THEN coalesce(publication_lsns[pg_catalog.array_position(publications, u.name)],"
				   "                           '0/0'::pg_catalog.pg_lsn)"
				   "             ELSE pg_catalog.pg_current_wal_insert_lsn() END ORDER BY u.n)"
				   "      FROM pg_catalog.unnest($2) WITH ORDINALITY AS u(name, n))"
				   " WHERE id OPERATOR(pg_catalog.=) $1",
				   2, argtypes, args, nulls);
	run_update("UPDATE replicant.pipelines SET"
			   " publications = coalesce($2, publications),"
			   " sink_url = coalesce($3, sink_url),"
			   " batch_max_bytes = coalesce($4, batch_max_bytes),"
			   " batch_max_transactions = coalesce($5, batch_max_transactions),"
			   " http_timeout_ms = coalesce($6, http_timeout_ms),"
			   " connect_timeout_ms = coalesce($7, connect_timeout_ms),"
			   " headers = coalesce($8, headers),"
			   " secret_previous = CASE WHEN $13 IS NOT NULL THEN secret END,"
			   " secret_previous_until = $13,"
			   " secret = CASE WHEN $10 THEN NULL ELSE coalesce($9, secret) END,"
			   " messages = coalesce($11, messages),"
			   " message_prefixes = CASE WHEN $12 IS NULL THEN message_prefixes"
			   "   WHEN pg_catalog.cardinality($12) OPERATOR(pg_catalog.=) 0 THEN NULL ELSE $12 END,"
			   " ca_file = coalesce($14, ca_file),"
			   " config_version = config_version OPERATOR(pg_catalog.+) 1"
			   " WHERE id OPERATOR(pg_catalog.=) $1",
			   14, argtypes, args, nulls);
	api_spi_end(&s);

	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

static void
set_state(FunctionCallInfo fcinfo, const char *assignment)
{
	char	   *name = required_text(fcinfo, 0, "pipeline name");
	PipelineRef ref;
	ApiSpi		s;
	Oid			argtypes[1] = {INT4OID};
	Datum		args[1];

	replicant_pipeline_check_name(name);
	api_spi_begin(&s);
	ref = read_pipeline(name, true);
	check_is_owner(&ref, &s);
	if (strncmp(assignment, "halt_reason = NULL", 18) == 0)
	{
		MemoryContext old;

		if (!ref.halted)
			ereport(NOTICE,
					(errmsg("pipeline \"%s\" is not halted", name)));
		register_xact_callback();
		old = MemoryContextSwitchTo(TopMemoryContext);
		resumed_at_commit = lappend_int(resumed_at_commit, ref.id);
		MemoryContextSwitchTo(old);
	}
	args[0] = Int32GetDatum(ref.id);
	run_update(psprintf("UPDATE replicant.pipelines SET %s WHERE id OPERATOR(pg_catalog.=) $1", assignment),
			   1, argtypes, args, NULL);
	api_spi_end(&s);
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

Datum
replicant_resume_pipeline(PG_FUNCTION_ARGS)
{
	set_state(fcinfo, "halt_reason = NULL, resumed_lsn = pg_catalog.pg_current_wal_lsn(), halt_lsn = NULL");
	PG_RETURN_VOID();
}

/* Stops the pipeline's worker so its slot can be dropped. */
static void
stop_worker(int32 pipeline_id)
{
	ReplicantPipelineSlot *slot;
	pid_t		pid = 0;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot = replicant_shmem_find(MyDatabaseId, pipeline_id);
	if (slot)
	{
		/* Keeps the launcher from restarting it; an abort re-syncs. */
		slot->runnable = false;
		pid = slot->pid;
	}
	LWLockRelease(replicant_shmem->lock);
	resync_on_abort = true;
	register_xact_callback();
	if (pid != 0)
		kill(pid, SIGTERM);
}

/* drop_pipeline(name): stops the worker, drops the slot and all state. */
Datum
replicant_drop_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name = required_text(fcinfo, 0, "pipeline name");
	char	   *slot_name;
	PipelineRef ref;
	ApiSpi		s;
	Oid			argtypes[1] = {INT4OID};
	Datum		args[1];
	bool		slot_exists;

	/* Dropping a slot cannot be rolled back. */
	PreventInTransactionBlock(true, "replicant.drop_pipeline()");
	replicant_pipeline_check_name(name);
	if (!replicant_shmem_ready())
		check_prerequisites();

	api_spi_begin(&s);
	ref = read_pipeline(name, true);
	check_is_owner(&ref, &s);
	args[0] = Int32GetDatum(ref.id);
	if (SPI_execute_with_args("DELETE FROM replicant.pipelines WHERE id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not delete from replicant.pipelines");
	api_spi_end(&s);

	stop_worker(ref.id);
	slot_name = replicant_pipeline_slot_name(name);
	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot_exists = SearchNamedReplicationSlot(slot_name, false) != NULL;
	LWLockRelease(ReplicationSlotControlLock);
	if (slot_exists)
		ReplicationSlotDrop(slot_name, false);	/* waits for the worker to let go */

	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

/* Makes the pipeline's worker restart, picking up new or cancelled backfills. */
static void
bump_config(int32 pipeline_id)
{
	Oid			argtypes[1] = {INT4OID};
	Datum		args[1] = {Int32GetDatum(pipeline_id)};

	run_update("UPDATE replicant.pipelines SET config_version = config_version OPERATOR(pg_catalog.+) 1"
			   " WHERE id OPERATOR(pg_catalog.=) $1",
			   1, argtypes, args, NULL);
}

/*
 * backfill(pipeline, relation, mode): reads a published table's rows into a
 * streaming pipeline, beside the stream.  Returns the backfill's id.
 */
Datum
replicant_backfill(PG_FUNCTION_ARGS)
{
	char	   *name = required_text(fcinfo, 0, "pipeline name");
	Oid			relid;
	char	   *mode;
	PipelineRef ref;
	ApiSpi		s;
	Oid			argtypes[3] = {TEXTOID, OIDOID, INT4OID};
	Datum		args[3];
	int64		id;

	replicant_pipeline_check_name(name);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("relation must not be null")));
	relid = PG_GETARG_OID(1);
	mode = required_text(fcinfo, 2, "mode");
	if (strcmp(mode, "auto") != 0 && strcmp(mode, "keyset") != 0 &&
		strcmp(mode, "bitmap") != 0 && strcmp(mode, "ctid") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("mode must be \"auto\", \"keyset\", \"bitmap\" or \"ctid\"")));

	api_spi_begin(&s);
	ref = read_pipeline(name, true);
	check_is_owner(&ref, &s);

	/* Only what the pipeline's publications deliver can be backfilled. */
	args[0] = CStringGetTextDatum(name);
	args[1] = ObjectIdGetDatum(relid);
	if (SPI_execute_with_args("SELECT 1 FROM replicant.pipelines p, pg_catalog.pg_publication_tables pt"
							  REPLICANT_PUBLISHED_LEAVES_JOIN
							  " WHERE p.name OPERATOR(pg_catalog.=) $1"
							  "   AND pt.pubname OPERATOR(pg_catalog.=) ANY (p.publications)"
							  "   AND c.oid OPERATOR(pg_catalog.=) $2"
							  "   AND c.relkind OPERATOR(pg_catalog.=) 'r'"
							  "   AND n.nspname OPERATOR(pg_catalog.<>) 'replicant'",
							  2, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read publications");
	if (SPI_processed == 0 && get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot backfill partitioned table \"%s\"", get_rel_name(relid)),
				 errdetail("Backfills read one table at a time."),
				 errhint("Backfill its partitions; under publish_via_partition_root their rows are delivered as the partitioned table's.")));
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" is not a table published by pipeline \"%s\"",
						get_rel_name(relid) ? get_rel_name(relid) : "?", name),
				 errhint("Add the table to one of the pipeline's publications first.")));

	args[2] = Int32GetDatum(ref.id);
	if (SPI_execute_with_args("SELECT 1 FROM replicant.backfills"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $3 AND relid OPERATOR(pg_catalog.=) $2"
							  "   AND state OPERATOR(pg_catalog.=) ANY ('{planned,running}')",
							  3, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("a backfill of this table is already in progress in pipeline \"%s\"", name),
				 errhint("Cancel it with replicant.cancel_backfill() first.")));

	id = replicant_backfill_plan(ref.id, ref.owner, relid, mode);
	bump_config(ref.id);
	api_spi_end(&s);
	replicant_shmem_request_sync_at_commit();
	PG_RETURN_INT64(id);
}

/* cancel_backfill(id): stops a planned or running backfill. */
Datum
replicant_cancel_backfill(PG_FUNCTION_ARGS)
{
	int64		id;
	ApiSpi		s;
	Oid			argtypes[1] = {INT8OID};
	Datum		args[1];
	char	   *state;
	PipelineRef ref;
	bool		isnull;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("backfill id must not be null")));
	id = PG_GETARG_INT64(0);
	args[0] = Int64GetDatum(id);

	api_spi_begin(&s);
	if (SPI_execute_with_args("SELECT p.name, b.state FROM replicant.backfills b"
							  "  JOIN replicant.pipelines p ON p.id OPERATOR(pg_catalog.=) b.pipeline_id"
							  " WHERE b.id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("backfill " INT64_FORMAT " does not exist", id)));
	ref = read_pipeline(TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0],
															SPI_tuptable->tupdesc, 1, &isnull)), true);
	check_is_owner(&ref, &s);
	if (SPI_execute_with_args("SELECT state FROM replicant.backfills WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (strcmp(state, "planned") != 0 && strcmp(state, "running") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("backfill " INT64_FORMAT " is already %s", id, state)));
	if (SPI_execute_with_args("UPDATE replicant.backfills SET state = 'cancelled', finished_at = pg_catalog.now()"
							  " WHERE id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not cancel the backfill");
	bump_config(ref.id);
	api_spi_end(&s);
	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

/*
 * pipeline_definitions(include_secrets) RETURNS SETOF text
 *
 * The create_pipeline calls (and disable_pipeline calls for disabled ones)
 * that recreate the caller's pipelines, for instance after pg_dump and
 * pg_restore, which copy none of replicant's state.  Secrets and header
 * values are left out unless asked for; a comment at the end of the call
 * says what was left out.
 */
Datum
replicant_pipeline_definitions(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		include_secrets = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	Oid			argtypes[2] = {BOOLOID, OIDOID};
	Datum		args[2];
	ApiSpi		s;
	uint64		i;
	TupleDesc	desc;
	Tuplestorestate *store;
	MemoryContext old;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		!(rsinfo->allowedModes & SFRM_Materialize))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	desc = CreateTemplateTupleDesc(1);
	TupleDescInitEntry(desc, (AttrNumber) 1, "pipeline_definitions", TEXTOID, -1, 0);
	store = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = store;
	rsinfo->setDesc = desc;
	MemoryContextSwitchTo(old);

	args[0] = BoolGetDatum(include_secrets);
	api_spi_begin(&s);
	args[1] = ObjectIdGetDatum(s.saved_userid);
	if (SPI_execute_with_args("SELECT d FROM ("
							  " SELECT p.name, 1 AS step, pg_catalog.format("
							  "  'SELECT replicant.create_pipeline(%L, %L::text[], %L, snapshot => %L,"
							  " batch_max_bytes => %s, batch_max_transactions => %s, http_timeout_ms => %s,"
							  " connect_timeout_ms => %s, headers => %L::jsonb, secret => %L,"
							  " snapshot_workers => %s, messages => %s, message_prefixes => %L::text[],"
							  " ca_file => %L, failover => %s);%s',"
							  "  p.name, p.publications, p.sink_url, p.snapshot, p.batch_max_bytes,"
							  "  p.batch_max_transactions, p.http_timeout_ms, p.connect_timeout_ms,"
							  "  CASE WHEN $1 THEN p.headers ELSE '{}'::jsonb END,"
							  "  CASE WHEN $1 THEN p.secret END,"
							  "  p.snapshot_workers, p.messages::text, p.message_prefixes, p.ca_file, p.failover::text,"
							  "  CASE WHEN NOT $1 AND (p.secret IS NOT NULL"
							  "                        OR p.headers OPERATOR(pg_catalog.<>) '{}'::jsonb)"
							  "   THEN ' -- left out: ' OPERATOR(pg_catalog.||) pg_catalog.concat_ws(', ',"
							  "     CASE WHEN p.secret IS NOT NULL THEN 'secret' END,"
							  "     CASE WHEN p.headers OPERATOR(pg_catalog.<>) '{}'::jsonb"
							  "      THEN 'headers ' OPERATOR(pg_catalog.||)"
							  "           (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(k), ', ' ORDER BY k)"
							  "              FROM pg_catalog.jsonb_object_keys(p.headers) k) END)"
							  "   ELSE '' END) AS d"
							  "   FROM replicant.pipelines p"
							  "  WHERE pg_catalog.pg_has_role($2, p.owner, 'USAGE')"
							  " UNION ALL"
							  " SELECT p.name, 2, pg_catalog.format('SELECT replicant.disable_pipeline(%L);', p.name)"
							  "   FROM replicant.pipelines p"
							  "  WHERE NOT p.enabled AND pg_catalog.pg_has_role($2, p.owner, 'USAGE')"
							  ") q ORDER BY name, step",
							  2, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		value = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		tuplestore_putvalues(store, desc, &value, &isnull);
	}
	api_spi_end(&s);
	return (Datum) 0;
}
