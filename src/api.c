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
 *
 * Rules kept with other files: docs/internals.md §4 (one content per
 * commit_lsn: stop_worker_and_wait), §9 (privileges).
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
#include "utils/wait_event.h"

#include "backfill_plan.h"
#include "catalog.h"
#include "compat.h"
#include "fault.h"
#include "format.h"
#include "sink_nats_url.h"
#include "headers.h"
#include "redact.h"
#include "pipeline.h"
#include "partition_root.h"
#include "plugin_gate.h"
#include "publication.h"
#include "replicant.h"
#include "runs.h"
#include "shmem.h"
#include "sink_ddl.h"
#include "signing.h"
#include "slot.h"
#include "slot_health.h"
#include "slot_position.h"
#include "waiver.h"

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

/* What a slot created in this transaction still needs at commit. */
static bool slot_created_in_xact = false;
static bool xact_callback_registered = false;
static bool resync_on_abort = false;
/* The pipelines drop_pipeline drops in this transaction (in TopMemoryContext). */
static List *dropping_pipelines = NIL;

static void clear_dropping(void);

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
	ListCell *lc;

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
			list_free(dropping_pipelines);
			dropping_pipelines = NIL;
			if (resumed_at_commit != NIL)
				clear_resumed_halts();
			list_free(resumed_at_commit);
			resumed_at_commit = NIL;
			break;
		case XACT_EVENT_ABORT:
			list_free(resumed_at_commit);
			resumed_at_commit = NIL;
			slot_created_in_xact = false;
			if (dropping_pipelines != NIL)
				clear_dropping();
			list_free(dropping_pipelines);
			dropping_pipelines = NIL;
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
	if (!replicant_plugin_gate_server_allows())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("\"output_plugin_libraries\" does not list \"replicant\""),
				 errhint("Add \"replicant\" to \"output_plugin_libraries\", for example \"output_plugin_libraries = 'pgoutput, test_decoding, replicant'\", and reload the configuration.")));
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

/*
 * Accepts http and https URLs with a host and without user information.
 * Messages never echo the URL: it may hold a token.
 */
static void
check_sink_url(const char *url)
{
	CURLU *parsed;
	char *part = NULL;
	const char *p;
	CURLUcode rc;

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
	if (replicant_nats_url(url))
	{
		replicant_nats_check_url(url);
		return;
	}
	if (pg_strncasecmp(url, "http://", 7) != 0 && pg_strncasecmp(url, "https://", 8) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink URL must start with \"http://\", \"https://\", \"nats://\" or \"tls://\"")));

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

/* Headers: a JSON object of string values, with safe names and values. */
static void
check_headers(Jsonb *headers)
{
	Oid argtypes[1] = {JSONBOID};
	Datum args[1] = {JsonbPGetDatum(headers)};
	uint64 i;

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
		HeapTuple tuple = SPI_tuptable->vals[i];
		TupleDesc desc = SPI_tuptable->tupdesc;
		char *name = SPI_getvalue(tuple, desc, 1);
		char *value = SPI_getvalue(tuple, desc, 2);
		char *type = SPI_getvalue(tuple, desc, 3);
		const char *reserved;

		if (name[0] == '\0' || strlen(name) > 64)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header names must have between 1 and 64 characters")));
		if (!replicant_header_name_ok(name))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header name contains a character not allowed in HTTP header names")));
		reserved = replicant_header_reserved(name);
		if (reserved != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header \"%s\" is set by replicant and cannot be configured", reserved)));
		if (strcmp(type, "string") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header \"%s\" must have a string value", name)));
		if (strlen(value) > MAX_HEADER_VALUE_LENGTH)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("value of header \"%s\" is too long", name)));
		if (!replicant_header_value_ok(value))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("value of header \"%s\" contains a control character", name),
					 errdetail("Header values must not contain line breaks or other control characters.")));
	}
}

/* Element i of a deconstructed text[] argument, which must not be null. */
static char *
text_element(Datum *elems, bool *nulls, int i, const char *what)
{
	if (nulls[i])
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	return TextDatumGetCString(elems[i]);
}

/* The publications argument: text or text[], non-empty, distinct. */
static ArrayType *
check_publications(FunctionCallInfo fcinfo, int argno)
{
	Oid argtype = get_fn_expr_argtype(fcinfo->flinfo, argno);
	Datum *elems;
	bool *nulls;
	int nelems;
	List *seen = NIL;
	int i;

	if (argtype == TEXTOID)
	{
		Datum one = PG_GETARG_DATUM(argno);

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
		char *name = text_element(elems, nulls, i, "publication names");

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
	Datum *elems;
	int nelems;
	int i;

	deconstruct_array(pubs, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &nelems);
	for (i = 0; i < nelems; i++)
	{
		char *name = TextDatumGetCString(elems[i]);

		replicant_pipeline_check_publication_name(name);
		if (!OidIsValid(get_publication_oid(name, true)))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("publication \"%s\" does not exist", name)));
	}
}

/* A CA bundle path: absolute, a plain file name; read by the worker. */
static void
check_ca_file(const char *path)
{
	const char *p;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers can set ca_file"),
				 errdetail("Workers read the file with the server's privileges.")));
	if (path[0] != '/' || strlen(path) >= MAXPGPATH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ca_file must be an absolute path")));
	for (p = path; *p; p++)
		if ((unsigned char) *p < 0x20)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ca_file contains a control character")));
}

/* failover => true needs failover slots (PostgreSQL 17 and later). */
static void
check_failover(bool failover)
{
	if (failover && !REPLICANT_HAVE_FAILOVER_SLOTS)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("failover slots are not supported by this server"),
				 errdetail("Failover slots need PostgreSQL 17 or later."),
				 errhint("Create the pipeline without failover; after a promotion, recreate it with a snapshot.")));
}

/*
 * message_prefixes: NULL (every prefix but replicant's own) or non-empty
 * prefixes; replicant's internal prefixes cannot be asked for.  An empty
 * array is accepted only where NULL means "unchanged" (empty_ok), and there
 * stands for every prefix.
 */
static void
check_message_prefixes(ArrayType *prefixes, bool empty_ok)
{
	Datum *elems;
	bool *nulls;
	int n;
	int i;

	deconstruct_array(prefixes, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	if (n == 0 && !empty_ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("message_prefixes must not be empty"),
				 errhint("Pass NULL to deliver messages of every prefix.")));
	for (i = 0; i < n; i++)
	{
		char *prefix = text_element(elems, nulls, i, "message prefixes");

		if (prefix[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("message prefixes must not be empty")));
		if (strncmp(prefix, "replicant.", 10) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("message prefix \"%s\" is reserved for replicant's own use", prefix)));
	}
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
	HeapTuple tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(owner));
	bool can_login;

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
 * The options of create_pipeline and alter_pipeline, in the order they are
 * validated: their argument order, but that alter_pipeline checks
 * secret_previous_until, which needs the new secret, last.  Option id is
 * parameter $(OPTION_PARAM_BASE + id) of the INSERT and UPDATE below.  The
 * defaults are the SQL functions' DEFAULT clauses.
 */
typedef enum PipelineOptionId
{
	OPT_PUBLICATION,
	OPT_SINK_URL,
	OPT_SNAPSHOT,
	OPT_BATCH_MAX_BYTES,
	OPT_BATCH_MAX_TRANSACTIONS,
	OPT_HTTP_TIMEOUT_MS,
	OPT_CONNECT_TIMEOUT_MS,
	OPT_HEADERS,
	OPT_SECRET,
	OPT_CLEAR_SECRET,
	OPT_SNAPSHOT_WORKERS,
	OPT_MESSAGES,
	OPT_MESSAGE_PREFIXES,
	OPT_CA_FILE,
	OPT_FAILOVER,
	OPT_FORMAT,
	OPT_ENABLED,
	OPT_CREATE_TABLES,
	OPT_MAX_RETAINED_WAL,
	OPT_SECRET_PREVIOUS_UNTIL,
	NUM_PIPELINE_OPTIONS
} PipelineOptionId;

typedef struct PipelineOption
{
	const char *name;    /* the argument's name, in messages */
	const char *column;  /* in replicant.pipelines; NULL: none */
	Oid type;            /* as an SPI parameter */
	int min;             /* INT4OID: the accepted range */
	int max;             /* (inclusive) */
	int create_arg;      /* position in create_pipeline(); -1: none */
	int alter_arg;       /* position in alter_pipeline(); -1: none */
	bool create_null_ok; /* create_pipeline takes NULL (alter always does) */
} PipelineOption;

static const PipelineOption pipeline_options[NUM_PIPELINE_OPTIONS] = {
	[OPT_PUBLICATION] = {"publication", "publications", TEXTARRAYOID, 0, 0, 1, 1, false},
	[OPT_SINK_URL] = {"sink_url", "sink_url", TEXTOID, 0, 0, 2, 2, false},
	[OPT_SNAPSHOT] = {"snapshot", "snapshot", TEXTOID, 0, 0, 3, -1, false},
	[OPT_BATCH_MAX_BYTES] = {"batch_max_bytes", "batch_max_bytes", INT4OID, 1024, 1024 * 1024 * 1024, 4, 3, false},
	[OPT_BATCH_MAX_TRANSACTIONS] = {"batch_max_transactions", "batch_max_transactions", INT4OID, 1, 1000000, 5, 4, false},
	[OPT_HTTP_TIMEOUT_MS] = {"http_timeout_ms", "http_timeout_ms", INT4OID, 100, 3600000, 6, 5, false},
	[OPT_CONNECT_TIMEOUT_MS] = {"connect_timeout_ms", "connect_timeout_ms", INT4OID, 100, 600000, 7, 6, false},
	[OPT_HEADERS] = {"headers", "headers", JSONBOID, 0, 0, 8, 7, false},
	[OPT_SECRET] = {"secret", "secret", TEXTOID, 0, 0, 9, 8, true},
	[OPT_CLEAR_SECRET] = {"clear_secret", NULL, BOOLOID, 0, 0, -1, 9, false},
	[OPT_SNAPSHOT_WORKERS] = {"snapshot_workers", "snapshot_workers", INT4OID, 1, 16, 10, -1, false},
	[OPT_MESSAGES] = {"messages", "messages", BOOLOID, 0, 0, 11, 10, false},
	[OPT_MESSAGE_PREFIXES] = {"message_prefixes", "message_prefixes", TEXTARRAYOID, 0, 0, 12, 11, true},
	[OPT_CA_FILE] = {"ca_file", "ca_file", TEXTOID, 0, 0, 13, 13, true},
	/* 0.1.0's SQL function, before ALTER EXTENSION UPDATE, has no failover. */
	[OPT_FAILOVER] = {"failover", "failover", BOOLOID, 0, 0, 14, -1, false},
	/* Nor has either function format. */
	[OPT_FORMAT] = {"format", "format", TEXTOID, 0, 0, 15, 14, false},
	/* 0.3.0's: created disabled; format clickhouse creates missing targets. */
	[OPT_ENABLED] = {"enabled", "enabled", BOOLOID, 0, 0, 16, -1, false},
	[OPT_CREATE_TABLES] = {"create_tables", "create_tables", BOOLOID, 0, 0, 17, 15, false},
	/* text in SQL ('20GB'), bytes in the column; alter_pipeline: '-1' is none */
	[OPT_MAX_RETAINED_WAL] = {"max_retained_wal", "max_retained_wal", INT8OID, 0, 0, 18, 16, true},
	[OPT_SECRET_PREVIOUS_UNTIL] = {"secret_previous_until", "secret_previous_until", TIMESTAMPTZOID, 0, 0, -1, 12, true},
};

/* $1 is the pipeline (its name, or its id), $2 its owner. */
#define OPTION_PARAM_BASE 3
#define NUM_OPTION_PARAMS (OPTION_PARAM_BASE - 1 + NUM_PIPELINE_OPTIONS)

/* One call's options; an option not given (NULL to alter) is null. */
typedef struct PipelineOptions
{
	Datum values[NUM_PIPELINE_OPTIONS];
	bool given[NUM_PIPELINE_OPTIONS];
} PipelineOptions;

/* alter_pipeline: secret_previous_until keeps the current secret beside a new one. */
static void
check_secret_previous_until(TimestampTz until, const PipelineOptions *o)
{
	if (!o->given[OPT_SECRET])
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

/* The checks of one given option that need no catalog access; returns its value. */
static Datum
check_option(PipelineOptionId id, FunctionCallInfo fcinfo, int argno, bool alter,
			 const PipelineOptions *o)
{
	const PipelineOption *opt = &pipeline_options[id];
	Datum value = PG_GETARG_DATUM(argno);

	if (opt->type == INT4OID)
		check_range(opt->name, DatumGetInt32(value), opt->min, opt->max);
	else if (opt->type == TEXTOID)
		value = PointerGetDatum(PG_GETARG_TEXT_PP(argno));
	switch (id)
	{
		case OPT_PUBLICATION:
			return PointerGetDatum(check_publications(fcinfo, argno));
		case OPT_SINK_URL:
			check_sink_url(TextDatumGetCString(value));
			break;
		case OPT_SNAPSHOT:
			if (strcmp(TextDatumGetCString(value), "none") != 0 &&
				strcmp(TextDatumGetCString(value), "initial") != 0 &&
				strcmp(TextDatumGetCString(value), "incremental") != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("snapshot must be \"none\", \"initial\" or \"incremental\"")));
			break;
		case OPT_HEADERS:
			/* checked inside catalog access (check_headers) */
			return PointerGetDatum(PG_GETARG_JSONB_P(argno));
		case OPT_SECRET:
			replicant_signing_check_secret(TextDatumGetCString(value));
			break;
		case OPT_CLEAR_SECRET:
			if (DatumGetBool(value) && o->given[OPT_SECRET])
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("cannot set and clear the signing secret at once")));
			break;
		case OPT_MESSAGE_PREFIXES:
			/* alter_pipeline: '{}' goes back to every prefix */
			check_message_prefixes(PG_GETARG_ARRAYTYPE_P(argno), alter);
			return PointerGetDatum(PG_GETARG_ARRAYTYPE_P(argno));
		case OPT_CA_FILE:
			check_ca_file(TextDatumGetCString(value));
			break;
		case OPT_FAILOVER:
			check_failover(DatumGetBool(value));
			break;
		case OPT_FORMAT:
			replicant_format_check_name(TextDatumGetCString(value));
			break;
		case OPT_SECRET_PREVIOUS_UNTIL:
			check_secret_previous_until(DatumGetTimestampTz(value), o);
			break;
		case OPT_MAX_RETAINED_WAL:
			return Int64GetDatum(replicant_slot_health_parse_budget(
				text_to_cstring(PG_GETARG_TEXT_PP(argno)), alter));
		default:
			break;
	}
	return value;
}

/*
 * Reads and checks the options of a create_pipeline (every option not
 * create_null_ok is required) or alter_pipeline (NULL leaves it unchanged)
 * call.  Refuses the first invalid option, in pipeline_options' order.
 */
static void
parse_options(FunctionCallInfo fcinfo, bool alter, PipelineOptions *o)
{
	int id;

	memset(o, 0, sizeof(*o));
	for (id = 0; id < NUM_PIPELINE_OPTIONS; id++)
	{
		const PipelineOption *opt = &pipeline_options[id];
		int argno = alter ? opt->alter_arg : opt->create_arg;

		if (argno < 0 || argno >= PG_NARGS())
			continue;
		if (PG_ARGISNULL(argno))
		{
			if (!alter && !opt->create_null_ok)
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("%s must not be null", opt->name),
						 id == OPT_HEADERS ? errhint("Pass '{}' for no extra headers.") : 0));
			continue;
		}
		o->values[id] = check_option(id, fcinfo, argno, alter, o);
		o->given[id] = true;
	}
}

/*
 * The SPI parameters of a statement on replicant.pipelines: $1 the
 * pipeline, $2 its owner, then every option (null when not given).
 */
static void
option_params(const PipelineOptions *o, Oid pipeline_type, Datum pipeline, Oid owner,
			  Oid *types, Datum *values, char *nulls)
{
	int id;

	types[0] = pipeline_type;
	values[0] = pipeline;
	nulls[0] = ' ';
	types[1] = OIDOID;
	values[1] = ObjectIdGetDatum(owner);
	nulls[1] = ' ';
	for (id = 0; id < NUM_PIPELINE_OPTIONS; id++)
	{
		types[OPTION_PARAM_BASE - 1 + id] = pipeline_options[id].type;
		values[OPTION_PARAM_BASE - 1 + id] = o->values[id];
		nulls[OPTION_PARAM_BASE - 1 + id] = o->given[id] ? ' ' : 'n';
	}
}

static void
check_is_owner(const ReplicantPipelineRef *ref, const ReplicantCatalogAccess *s)
{
	replicant_pipeline_check_owner(ref, s->saved_userid);
}

static void
run_update(const char *sql, int nargs, Oid *argtypes, Datum *args, const char *nulls)
{
	if (SPI_execute_with_args(sql, nargs, argtypes, args, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update replicant.pipelines");
}

/* Creates the pipeline's logical slot, ephemeral until commit; returns its consistent point. */
static XLogRecPtr
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
	ctx = replicant_slot_create(slot_name, failover, false);
	slot_created_in_xact = true;
	FreeDecodingContext(ctx);
	return MyReplicationSlot->data.confirmed_flush;
}

/*
 * Background workers that are not pipeline workers (the launcher, parallel
 * and logical replication workers, snapshot and sync workers): every
 * pg_stat_activity row but the server's own processes and client backends.
 */
static int64
other_background_workers(void)
{
	bool isnull;

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

/*
 * Pipelines known to shared memory: all of them, or only those of other
 * databases that want a worker.
 */
static int
count_pipelines_in_shmem(bool runnable_elsewhere)
{
	int n = 0;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];

		if (slot->in_use &&
			(!runnable_elsewhere || (slot->runnable && slot->dboid != MyDatabaseId)))
			n++;
	}
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
	int64 needed;
	bool isnull;

	if (replicant_slot_free_count() == 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("no free replication slot for a new pipeline"),
				 errdetail("All %d replication slots are in use.", max_replication_slots),
				 errhint("Free one or increase \"%s\".", "max_replication_slots")));

	if (SPI_execute("SELECT count(*) FROM replicant.pipelines"
					" WHERE enabled AND halt_reason IS NULL",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	needed = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
										 &isnull));
	needed += count_pipelines_in_shmem(true) + other_background_workers();
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
	Oid pipelines = get_relname_relid("pipelines", get_namespace_oid("replicant", false));

	LockDatabaseObject(pipelines,
					   DatumGetUInt32(hash_any((const unsigned char *) name, strlen(name))),
					   0, ExclusiveLock);
}

/*
 * What the worker would halt on at the table's first change, refused now:
 * the owner must be able to read every published table, past row-level
 * security.
 */
static void
check_owner_reads_tables(Oid owner, List *relids)
{
	ListCell *lc;

	foreach(lc, relids)
	{
		Oid relid = lfirst_oid(lc);

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

/* An oid[] of the list's OIDs. */
static ArrayType *
oid_array(List *oids)
{
	Datum *elems = palloc(sizeof(Datum) * Max(list_length(oids), 1));
	ListCell *lc;
	int n = 0;

	foreach(lc, oids)
		elems[n++] = ObjectIdGetDatum(lfirst_oid(lc));
	return construct_array(elems, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT);
}

/*
 * PostgreSQL refuses UPDATE and DELETE on a table published for them that
 * has no replica identity; say so now rather than when the application's
 * first update fails.
 */
static void
warn_tables_without_identity(ArrayType *pubs)
{
	Oid argtypes[1] = {TEXTARRAYOID};
	Datum args[1] = {PointerGetDatum(pubs)};
	bool isnull;
	Datum changing;
	List *relids;
	uint64 i;

	if (SPI_execute_with_args("SELECT pg_catalog.array_agg(p.pubname::pg_catalog.text)"
							  "  FROM pg_catalog.pg_publication p"
							  " WHERE p.pubname OPERATOR(pg_catalog.=) ANY ($1) AND (p.pubupdate OR p.pubdelete)",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	changing = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return;
	relids = replicant_publication_published_tables(DatumGetArrayTypeP(changing), false);
	if (relids == NIL)
		return;
	argtypes[0] = OIDARRAYOID;
	args[0] = PointerGetDatum(oid_array(relids));
	if (SPI_execute_with_args("SELECT n.nspname, c.relname"
							  "  FROM pg_catalog.pg_class c"
							  "  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
							  " WHERE c.oid OPERATOR(pg_catalog.=) ANY ($1)"
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
 * A format that needs whole rows (format.h) halts on an update that leaves
 * a TOASTed column out unless the old row holds it: name such tables now.
 */
static void
warn_tables_leaving_toast_out(List *relids, const char *format)
{
	Oid argtypes[1] = {OIDARRAYOID};
	Datum args[1];
	uint64 i;

	if (relids == NIL)
		return;
	args[0] = PointerGetDatum(oid_array(relids));
	if (SPI_execute_with_args("SELECT n.nspname, c.relname"
							  "  FROM pg_catalog.pg_class c"
							  "  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
							  " WHERE c.oid OPERATOR(pg_catalog.=) ANY ($1)"
							  "   AND c.relreplident OPERATOR(pg_catalog.<>) 'f'"
							  "   AND EXISTS (SELECT FROM pg_catalog.pg_attribute a"
							  "                WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0"
							  "                  AND NOT a.attisdropped AND a.attstorage OPERATOR(pg_catalog.<>) 'p')"
							  " ORDER BY 1, 2",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	for (i = 0; i < SPI_processed; i++)
		ereport(WARNING,
				(errmsg("table \"%s.%s\" has columns that can be TOASTed but not REPLICA IDENTITY FULL",
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2)),
				 errdetail("Format \"%s\" writes whole rows: an update that leaves a TOASTed column unchanged will halt the pipeline.", format),
				 errhint("Run ALTER TABLE ... REPLICA IDENTITY FULL on the table before creating the pipeline; when its replica identity is its primary key, doing so later is safe too.")));
}

/*
 * Format 'clickhouse' names each target after its table, without the
 * schema: refuse two published tables of one name, which would mix their
 * rows in one target; and a delivered column named as one the format adds
 * (sink_ddl.c raises that error).
 */
static void
check_targets_distinct(ArrayType *publications, List *relids, const char *format)
{
	Oid argtypes[1] = {OIDARRAYOID};
	Datum args[1];

	if (relids == NIL || strcmp(format, "clickhouse") != 0)
		return;
	(void) replicant_sink_ddl_tables(publications, false, CurrentMemoryContext);
	args[0] = PointerGetDatum(oid_array(relids));
	if (SPI_execute_with_args("SELECT n1.nspname, c1.relname, n2.nspname"
							  "  FROM pg_catalog.pg_class c1"
							  "  JOIN pg_catalog.pg_class c2 ON c2.relname OPERATOR(pg_catalog.=) c1.relname"
							  "   AND c2.oid OPERATOR(pg_catalog.>) c1.oid"
							  "  JOIN pg_catalog.pg_namespace n1 ON n1.oid OPERATOR(pg_catalog.=) c1.relnamespace"
							  "  JOIN pg_catalog.pg_namespace n2 ON n2.oid OPERATOR(pg_catalog.=) c2.relnamespace"
							  " WHERE c1.oid OPERATOR(pg_catalog.=) ANY ($1) AND c2.oid OPERATOR(pg_catalog.=) ANY ($1)"
							  " ORDER BY 1, 2, 3 LIMIT 1",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list published tables");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tables \"%s.%s\" and \"%s.%s\" would both go to ClickHouse table `%s`",
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2)),
				 errdetail("Format \"clickhouse\" names each target after its table, without the schema."),
				 errhint("Publish only one of them to this pipeline.")));
}

/*
 * create_tables => true: only format 'clickhouse' has targets to create
 * (sink_ddl.c).
 */
static void
check_create_tables(bool create_tables, const char *format)
{
	if (create_tables && strcmp(format, "clickhouse") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("create_tables needs format \"clickhouse\""),
				 errdetail("Format \"%s\" has no target tables to create.", format)));
}

/* A text column (a constant name) of pipeline id. */
static char *
pipeline_text(int32 id, const char *column)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(id)};

	if (SPI_execute_with_args(psprintf("SELECT %s FROM replicant.pipelines WHERE id OPERATOR(pg_catalog.=) $1",
									   column),
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read replicant.pipelines");
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/* The format pipeline id delivers in. */
static char *
pipeline_format(int32 id)
{
	return pipeline_text(id, "format");
}

/* NATS destinations take format "replicant" only. */
static void
check_destination_format(const char *url, const char *format)
{
	if (replicant_nats_url(url) && strcmp(format, "replicant") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("format \"%s\" cannot be delivered to NATS", format),
				 errhint("NATS destinations take format \"replicant\".")));
}

/*
 * Saves the shape of every published table as the pipeline starts, so that
 * a destructive change made before the table's first streamed change halts
 * the pipeline too (publication.c compares later versions with it).
 */
static void
save_table_shapes(int32 pipeline_id, List *relids)
{
	ListCell *lc;

	foreach(lc, relids)
	{
		Relation rel = table_open(lfirst_oid(lc), AccessShareLock);

		replicant_publication_save_table_shape(pipeline_id, rel);
		table_close(rel, AccessShareLock);
	}
}

/* The checks of create_pipeline that need no catalog access. */
static void
check_create_owner(Oid owner, const PipelineOptions *o)
{
	check_owner_can_login(owner);
	if (DatumGetBool(o->values[OPT_MESSAGES]))
		check_owner_may_receive_messages(owner);
	if (count_pipelines_in_shmem(false) >= replicant_max_pipelines)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("cannot create more than %d pipelines", replicant_max_pipelines),
				 errhint("You might need to increase \"%s\".", "replicant.max_pipelines")));
}

/*
 * The checks of create_pipeline inside catalog access; returns the tables
 * the publications deliver.  Holds the name's lock from here to commit.
 */
static List *
check_create_catalog(const char *name, const char *slot_name, Oid owner,
					 const PipelineOptions *o)
{
	ArrayType *pubs = DatumGetArrayTypeP(o->values[OPT_PUBLICATION]);
	Oid argtypes[1] = {TEXTOID};
	Datum args[1] = {CStringGetTextDatum(name)};
	List *tables;

	check_headers(DatumGetJsonbP(o->values[OPT_HEADERS]));
	check_destination_format(TextDatumGetCString(o->values[OPT_SINK_URL]),
							 o->given[OPT_FORMAT] ? TextDatumGetCString(o->values[OPT_FORMAT]) : "replicant");
	check_publications_exist(pubs);
	tables = replicant_publication_published_tables(pubs, true);
	check_owner_reads_tables(owner, tables);
	warn_tables_without_identity(pubs);
	if (o->given[OPT_FORMAT] &&
		replicant_format_lookup(TextDatumGetCString(o->values[OPT_FORMAT]))->whole_rows)
		warn_tables_leaving_toast_out(tables, TextDatumGetCString(o->values[OPT_FORMAT]));
	if (o->given[OPT_FORMAT])
		check_targets_distinct(pubs, tables, TextDatumGetCString(o->values[OPT_FORMAT]));
	if (o->given[OPT_CREATE_TABLES])
		check_create_tables(DatumGetBool(o->values[OPT_CREATE_TABLES]),
							o->given[OPT_FORMAT] ? TextDatumGetCString(o->values[OPT_FORMAT]) : "replicant");
	lock_pipeline_name(name);
	/* Not read-only: a fresh snapshot sees a creator we waited for. */
	if (SPI_execute_with_args("SELECT 1 FROM replicant.pipelines WHERE name OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("pipeline \"%s\" already exists", name)));
	/* Not even a foreign one: an initial snapshot's worker would meet it. */
	if (replicant_slot_owner(slot_name) != REPLICANT_SLOT_MISSING)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("replication slot \"%s\" already exists", slot_name)));
	check_free_slots(strcmp(TextDatumGetCString(o->values[OPT_SNAPSHOT]), "initial") == 0,
					 DatumGetInt32(o->values[OPT_SNAPSHOT_WORKERS]));
	return tables;
}

/*
 * Inserts the pipeline's row: every option create_pipeline has (nargs
 * arguments: 0.1.0's function lacks failover) gets its column.
 */
static int32
insert_pipeline(const char *name, const char *slot_name, Oid owner, const PipelineOptions *o,
				int nargs)
{
	StringInfoData sql;
	StringInfoData params;
	Oid types[NUM_OPTION_PARAMS + 1];
	Datum values[NUM_OPTION_PARAMS + 1];
	char nulls[NUM_OPTION_PARAMS + 1];
	int nparams = NUM_OPTION_PARAMS;
	bool isnull;
	int id;

	initStringInfo(&sql);
	initStringInfo(&params);
	appendStringInfoString(&sql, "INSERT INTO replicant.pipelines (name, owner");
	appendStringInfoString(&params, "$1, $2");
	for (id = 0; id < NUM_PIPELINE_OPTIONS; id++)
	{
		const PipelineOption *opt = &pipeline_options[id];

		if (opt->create_arg < 0 || opt->create_arg >= nargs || opt->column == NULL)
			continue;
		appendStringInfo(&sql, ", %s", opt->column);
		appendStringInfo(&params, ", $%d", OPTION_PARAM_BASE + id);
	}
	option_params(o, TEXTOID, CStringGetTextDatum(name), owner, types, values, nulls);
	/* 0.1.0's and 0.2.0's rows have no slot_name: theirs is replicant_<name>. */
	if (replicant_pipeline_has_column("slot_name"))
	{
		types[nparams] = NAMEOID;
		values[nparams] = DirectFunctionCall1(namein, CStringGetDatum(slot_name));
		nulls[nparams++] = ' ';
		appendStringInfoString(&sql, ", slot_name");
		appendStringInfo(&params, ", $%d", nparams);
	}
	appendStringInfo(&sql, ") VALUES (%s) RETURNING id", params.data);

	if (SPI_execute_with_args(sql.data, nparams, types, values, nulls,
							  false, 0) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert into replicant.pipelines");
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * create_pipeline(name, publication, sink_url, snapshot, batch_max_bytes,
 *				   batch_max_transactions, http_timeout_ms, connect_timeout_ms,
 *				   headers, secret, snapshot_workers, messages, message_prefixes,
 *				   ca_file, failover, format, enabled, create_tables,
 *				   max_retained_wal)
 *
 * With enabled => false the pipeline is created disabled: its slot (unless
 * an initial snapshot's worker makes it) keeps what commits from the call
 * on, and nothing is delivered until enable_pipeline.
 */
Datum
replicant_create_pipeline(PG_FUNCTION_ARGS)
{
	char *name;
	char *slot_name;
	PipelineOptions o;
	Oid owner = GetUserId();
	ReplicantCatalogAccess s;
	char *snapshot;
	int32 pipeline_id;
	List *tables;
	XLogRecPtr slot_point = InvalidXLogRecPtr;

	replicant_redact_statements();
	PreventInTransactionBlock(true, "replicant.create_pipeline()");
	check_prerequisites();

	name = required_text(fcinfo, 0, "pipeline name");
	replicant_pipeline_check_name(name);
	parse_options(fcinfo, false, &o);
	snapshot = TextDatumGetCString(o.values[OPT_SNAPSHOT]);
	check_create_owner(owner, &o);

	replicant_catalog_enter(&s);
	slot_name = replicant_pipeline_new_slot_name(name);
	tables = check_create_catalog(name, slot_name, owner, &o);

	/*
	 * Everything is valid: only now create the slot, then the row.  An
	 * initial snapshot needs the slot's consistent point and the snapshot
	 * its tables are read under to be one, so its worker creates the slot.
	 */
	if (strcmp(snapshot, "initial") != 0)
		slot_point = create_slot(slot_name, o.given[OPT_FAILOVER] && DatumGetBool(o.values[OPT_FAILOVER]));
	pipeline_id = insert_pipeline(name, slot_name, owner, &o, PG_NARGS());
	replicant_runs_start_over(pipeline_id);
	/* What the worker finds beyond it, something else moved (slot_position.h). */
	if (!XLogRecPtrIsInvalid(slot_point))
		replicant_slot_position_create(pipeline_id, slot_point);
	save_table_shapes(pipeline_id, tables);
	if (strcmp(snapshot, "incremental") == 0)
	{
		ListCell *lc;

		/* An incremental backfill of every table the publications deliver. */
		foreach(lc, tables)
			(void) replicant_backfill_plan(pipeline_id, owner, lfirst_oid(lc), "auto");
	}
	replicant_catalog_leave(&s);

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
		pid_t pid = 0;
		bool snapshotting = false;

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
 * The assignment alter_pipeline makes for an option: coalesce($n, column)
 * keeps what NULL leaves unchanged.
 */
static void
append_assignment(StringInfo sql, PipelineOptionId id)
{
	const PipelineOption *opt = &pipeline_options[id];
	int n = OPTION_PARAM_BASE + id;

	switch (id)
	{
		case OPT_SECRET:
			appendStringInfo(sql, " secret = CASE WHEN $%d THEN NULL ELSE coalesce($%d, secret) END,",
							 OPTION_PARAM_BASE + OPT_CLEAR_SECRET, n);
			break;
		case OPT_MESSAGE_PREFIXES:
			appendStringInfo(sql, " message_prefixes = CASE WHEN $%d IS NULL THEN message_prefixes"
								  "   WHEN pg_catalog.cardinality($%d) OPERATOR(pg_catalog.=) 0 THEN NULL ELSE $%d END,",
							 n, n, n);
			break;
		case OPT_MAX_RETAINED_WAL:
			appendStringInfo(sql, " max_retained_wal = CASE WHEN $%d IS NULL THEN max_retained_wal"
								  "   WHEN $%d OPERATOR(pg_catalog.<) 0 THEN NULL ELSE $%d END,",
							 n, n, n);
			break;
		case OPT_SECRET_PREVIOUS_UNTIL:
			appendStringInfo(sql, " secret_previous = CASE WHEN $%d IS NOT NULL THEN secret END,"
								  " secret_previous_until = $%d,",
							 n, n);
			break;
		default:
			appendStringInfo(sql, " %s = coalesce($%d, %s),", opt->column, n, opt->column);
			break;
	}
}

/*
 * Applies alter_pipeline's options to the (locked) row: those the function
 * has (nargs arguments: 0.1.0's lacks format, and its table the column).
 */
static void
update_pipeline(const ReplicantPipelineRef *ref, const PipelineOptions *o, int nargs)
{
	StringInfoData sql;
	Oid types[NUM_OPTION_PARAMS];
	Datum values[NUM_OPTION_PARAMS];
	char nulls[NUM_OPTION_PARAMS];
	int id;

	option_params(o, INT4OID, Int32GetDatum(ref->id), ref->owner, types, values, nulls);
	/* What decoding delivers changes for what commits from now on only. */
	if (o->given[OPT_PUBLICATION] || o->given[OPT_MESSAGES] || o->given[OPT_MESSAGE_PREFIXES])
		replicant_epoch_record(ref->id);
	/* An added publication applies to what commits from now on (0.2.0). */
	if (o->given[OPT_PUBLICATION] && replicant_pipeline_has_column("publication_lsns"))
		run_update(psprintf("UPDATE replicant.pipelines SET publication_lsns ="
							"   (SELECT pg_catalog.array_agg(CASE WHEN u.name OPERATOR(pg_catalog.=) ANY (publications)"
							"             THEN coalesce(publication_lsns[pg_catalog.array_position(publications, u.name)],"
							"                           '0/0'::pg_catalog.pg_lsn)"
							"             ELSE pg_catalog.pg_current_wal_insert_lsn() END ORDER BY u.n)"
							"      FROM pg_catalog.unnest($%d) WITH ORDINALITY AS u(name, n))"
							" WHERE id OPERATOR(pg_catalog.=) $1",
							OPTION_PARAM_BASE + OPT_PUBLICATION),
				   NUM_OPTION_PARAMS, types, values, nulls);

	initStringInfo(&sql);
	appendStringInfoString(&sql, "UPDATE replicant.pipelines SET");
	for (id = 0; id < NUM_PIPELINE_OPTIONS; id++)
	{
		const PipelineOption *opt = &pipeline_options[id];

		if (opt->alter_arg >= 0 && opt->alter_arg < nargs && opt->column != NULL)
			append_assignment(&sql, id);
	}
	appendStringInfoString(&sql, " config_version = config_version OPERATOR(pg_catalog.+) 1"
								 " WHERE id OPERATOR(pg_catalog.=) $1");
	run_update(sql.data, NUM_OPTION_PARAMS, types, values, nulls);
}

/*
 * alter_pipeline(name, publication, sink_url, batch_max_bytes,
 *				  batch_max_transactions, http_timeout_ms, connect_timeout_ms,
 *				  headers, secret, clear_secret, messages, message_prefixes,
 *				  secret_previous_until, ca_file, format, create_tables,
 *				  max_retained_wal)
 *
 * NULL leaves an option unchanged; message_prefixes => '{}' goes back to
 * every prefix, max_retained_wal => '-1' to no budget.  The old worker is stopped before this
 * returns; the next one starts once the caller commits, reads the new
 * configuration (config_version changes) and resumes from the checkpoint.
 */
Datum
replicant_alter_pipeline(PG_FUNCTION_ARGS)
{
	char *name;
	PipelineOptions o;
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;

	replicant_redact_statements();
	name = required_text(fcinfo, 0, "pipeline name");
	replicant_pipeline_check_name(name);
	parse_options(fcinfo, true, &o);

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, false);
	check_is_owner(&ref, &s);
	if (o.given[OPT_MESSAGES] && DatumGetBool(o.values[OPT_MESSAGES]))
		check_owner_may_receive_messages(ref.owner);
	if (o.given[OPT_HEADERS])
		check_headers(DatumGetJsonbP(o.values[OPT_HEADERS]));
	if (o.given[OPT_SINK_URL] || o.given[OPT_FORMAT])
		check_destination_format(o.given[OPT_SINK_URL] ? TextDatumGetCString(o.values[OPT_SINK_URL]) :
														 pipeline_text(ref.id, "sink_url"),
								 o.given[OPT_FORMAT] ? TextDatumGetCString(o.values[OPT_FORMAT]) :
													   pipeline_format(ref.id));
	if (o.given[OPT_PUBLICATION])
		check_publications_exist(DatumGetArrayTypeP(o.values[OPT_PUBLICATION]));
	if (o.given[OPT_FORMAT] &&
		replicant_format_lookup(TextDatumGetCString(o.values[OPT_FORMAT]))->whole_rows)
		warn_tables_leaving_toast_out(replicant_publication_published_tables(o.given[OPT_PUBLICATION] ?
																				 DatumGetArrayTypeP(o.values[OPT_PUBLICATION]) :
																				 ref.publications,
																			 true),
									  TextDatumGetCString(o.values[OPT_FORMAT]));
	if (o.given[OPT_CREATE_TABLES])
		check_create_tables(DatumGetBool(o.values[OPT_CREATE_TABLES]),
							o.given[OPT_FORMAT] ? TextDatumGetCString(o.values[OPT_FORMAT]) :
												  pipeline_format(ref.id));
	if (o.given[OPT_FORMAT] || o.given[OPT_PUBLICATION])
	{
		ArrayType *pubs = o.given[OPT_PUBLICATION] ? DatumGetArrayTypeP(o.values[OPT_PUBLICATION]) :
													 ref.publications;

		check_targets_distinct(pubs, replicant_publication_published_tables(pubs, true),
							   o.given[OPT_FORMAT] ? TextDatumGetCString(o.values[OPT_FORMAT]) :
													 pipeline_format(ref.id));
	}
	replicant_catalog_leave(&s);
	stop_worker_and_wait(ref.id);

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	check_is_owner(&ref, &s);
	update_pipeline(&ref, &o, PG_NARGS());
	replicant_catalog_leave(&s);

	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

static void
set_state(FunctionCallInfo fcinfo, const char *assignment)
{
	char *name = required_text(fcinfo, 0, "pipeline name");
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;
	Oid argtypes[1] = {INT4OID};
	Datum args[1];

	replicant_pipeline_check_name(name);
	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
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
		/* exactly the halt's cause, for what committed up to now */
		replicant_waiver_grant(ref.id);
	}
	args[0] = Int32GetDatum(ref.id);
	run_update(psprintf("UPDATE replicant.pipelines SET %s WHERE id OPERATOR(pg_catalog.=) $1", assignment),
			   1, argtypes, args, NULL);
	/* Enabled or resumed: a deliberate start owes nothing to past runs. */
	if (strncmp(assignment, "enabled = false", 15) != 0)
		replicant_runs_start_over(ref.id);
	replicant_catalog_leave(&s);
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

/*
 * Stops the pipeline's worker so its slot can be dropped.  Until this
 * transaction ends the slot stays marked dropping: a sync that read the
 * row before the delete commits cannot make it runnable again, and neither
 * the launcher nor the worker starts it.  An abort clears the mark and
 * re-syncs.
 */
static void
stop_worker(int32 pipeline_id)
{
	ReplicantPipelineSlot *slot;
	pid_t pid = 0;
	MemoryContext old;

	register_xact_callback();
	old = MemoryContextSwitchTo(TopMemoryContext);
	dropping_pipelines = lappend_int(dropping_pipelines, pipeline_id);
	MemoryContextSwitchTo(old);
	resync_on_abort = true;
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot = replicant_shmem_find(MyDatabaseId, pipeline_id);
	if (slot)
	{
		slot->runnable = false;
		slot->dropping = true;
		pid = slot->pid;
	}
	LWLockRelease(replicant_shmem->lock);
	if (pid != 0)
		kill(pid, SIGTERM);
}

/* drop_pipeline failed: the pipelines it was dropping may run again. */
static void
clear_dropping(void)
{
	ReplicantPipelineSlot *slot;
	ListCell *lc;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	foreach(lc, dropping_pipelines)
	{
		slot = replicant_shmem_find(MyDatabaseId, lfirst_int(lc));
		if (slot)
			slot->dropping = false;
	}
	LWLockRelease(replicant_shmem->lock);
}

/* drop_pipeline(name): stops the worker, drops the slot and all state. */
Datum
replicant_drop_pipeline(PG_FUNCTION_ARGS)
{
	char *name = required_text(fcinfo, 0, "pipeline name");
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;
	Oid argtypes[1] = {INT4OID};
	Datum args[1];
	char *slot_name;

	/* Dropping a slot cannot be rolled back. */
	PreventInTransactionBlock(true, "replicant.drop_pipeline()");
	replicant_pipeline_check_name(name);
	if (!replicant_shmem_ready())
		check_prerequisites();

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	check_is_owner(&ref, &s);
	args[0] = Int32GetDatum(ref.id);
	if (SPI_execute_with_args("DELETE FROM replicant.pipelines WHERE id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not delete from replicant.pipelines");
	/* What the lookup allocated goes with SPI's memory at the leave. */
	slot_name = MemoryContextStrdup(s.saved_context, ref.slot_name);
	replicant_catalog_leave(&s);

	stop_worker(ref.id);
	replicant_fault("drop_pipeline");
	if (replicant_slot_drop(slot_name, false) == REPLICANT_SLOT_FOREIGN)
		ereport(WARNING,
				(errmsg("replication slot \"%s\" was left in place", slot_name),
				 errdetail("It belongs to another database or output plugin, not to pipeline \"%s\".", name)));

	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}

/* Makes the pipeline's worker restart, picking up new or cancelled backfills. */
static void
bump_config(int32 pipeline_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};

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
	char *name = required_text(fcinfo, 0, "pipeline name");
	Oid relid;
	char *mode;
	ReplicantPipelineRef ref;
	ReplicantCatalogAccess s;
	Oid argtypes[2] = {OIDOID, INT4OID};
	Datum args[2];
	int64 id;

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

	replicant_catalog_enter(&s);
	ref = replicant_pipeline_lookup(name, true);
	check_is_owner(&ref, &s);

	/* Only what the pipeline's publications deliver can be backfilled. */
	if (!list_member_oid(replicant_publication_published_tables(ref.publications, true), relid) &&
		get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot backfill partitioned table \"%s\"", get_rel_name(relid)),
				 errdetail("Backfills read one table at a time."),
				 errhint("Backfill its partitions; under publish_via_partition_root their rows are delivered as the partitioned table's.")));
	if (!list_member_oid(replicant_publication_published_tables(ref.publications, true), relid))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" is not a table published by pipeline \"%s\"",
						get_rel_name(relid) ? get_rel_name(relid) : "?", name),
				 errhint("Add the table to one of the pipeline's publications first.")));

	args[0] = ObjectIdGetDatum(relid);
	args[1] = Int32GetDatum(ref.id);
	if (SPI_execute_with_args("SELECT 1 FROM replicant.backfills"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $2 AND relid OPERATOR(pg_catalog.=) $1"
							  "   AND state OPERATOR(pg_catalog.=) ANY ('{planned,running}')",
							  2, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("a backfill of this table is already in progress in pipeline \"%s\"", name),
				 errhint("Cancel it with replicant.cancel_backfill() first.")));

	id = replicant_backfill_plan(ref.id, ref.owner, relid, mode);
	bump_config(ref.id);
	replicant_catalog_leave(&s);
	replicant_shmem_request_sync_at_commit();
	PG_RETURN_INT64(id);
}

/* cancel_backfill(id): stops a planned or running backfill. */
Datum
replicant_cancel_backfill(PG_FUNCTION_ARGS)
{
	int64 id;
	ReplicantCatalogAccess s;
	Oid argtypes[1] = {INT8OID};
	Datum args[1];
	char *state;
	ReplicantPipelineRef ref;
	bool isnull;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("backfill id must not be null")));
	id = PG_GETARG_INT64(0);
	args[0] = Int64GetDatum(id);

	replicant_catalog_enter(&s);
	if (SPI_execute_with_args("SELECT p.name, b.state FROM replicant.backfills b"
							  "  JOIN replicant.pipelines p ON p.id OPERATOR(pg_catalog.=) b.pipeline_id"
							  " WHERE b.id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read backfills");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("backfill " INT64_FORMAT " does not exist", id)));
	ref = replicant_pipeline_lookup(TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0],
																	  SPI_tuptable->tupdesc, 1, &isnull)),
									true);
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
	replicant_catalog_leave(&s);
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
	bool include_secrets = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	Oid argtypes[2] = {BOOLOID, OIDOID};
	Datum args[2];
	ReplicantCatalogAccess s;
	uint64 i;
	TupleDesc desc;
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
	replicant_catalog_enter(&s);
	args[1] = ObjectIdGetDatum(s.saved_userid);
	if (SPI_execute_with_args("SELECT d FROM ("
							  " SELECT p.name, 1 AS step, pg_catalog.format("
							  "  'SELECT replicant.create_pipeline(%L, %L::text[], %L, snapshot => %L,"
							  " batch_max_bytes => %s, batch_max_transactions => %s, http_timeout_ms => %s,"
							  " connect_timeout_ms => %s, headers => %L::jsonb, secret => %L,"
							  " snapshot_workers => %s, messages => %s, message_prefixes => %L::text[],"
							  " ca_file => %L, failover => %s, format => %L%s%s);%s',"
							  "  p.name, p.publications, p.sink_url, p.snapshot, p.batch_max_bytes,"
							  "  p.batch_max_transactions, p.http_timeout_ms, p.connect_timeout_ms,"
							  "  CASE WHEN $1 THEN p.headers ELSE '{}'::jsonb END,"
							  "  CASE WHEN $1 THEN p.secret END,"
							  "  p.snapshot_workers, p.messages::text, p.message_prefixes, p.ca_file, p.failover::text,"
							  "  p.format,"
							  /* 0.2.0's table has no create_tables until ALTER EXTENSION UPDATE */
							  "  CASE WHEN (pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'create_tables')::pg_catalog.bool"
							  "   THEN ', create_tables => true' ELSE '' END,"
							  /* nor max_retained_wal, which is whole megabytes */
							  "  ', max_retained_wal => ' OPERATOR(pg_catalog.||) pg_catalog.quote_literal("
							  "    ((pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'max_retained_wal')::pg_catalog.int8"
							  "     OPERATOR(pg_catalog./) 1048576)::pg_catalog.text OPERATOR(pg_catalog.||) 'MB'),"
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
		bool isnull;
		Datum value = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		tuplestore_putvalues(store, desc, &value, &isnull);
	}
	replicant_catalog_leave(&s);
	return (Datum) 0;
}
