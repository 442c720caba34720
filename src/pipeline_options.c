/*
 * pipeline_options.c
 *		The options of create_pipeline, alter_pipeline, add_destination and
 *		alter_destination: each read and checked by its own function, as
 *		pipeline_options[] lists them, into the parameters of the INSERTs
 *		and UPDATEs that api.c and api_destination.c run.
 *
 * Messages never echo a sink URL, a header value or a secret.
 */
#include "postgres.h"

#include <curl/curl.h>

#include "catalog/pg_publication.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "format.h"
#include "headers.h"
#include "pipeline.h"
#include "pipeline_options.h"
#include "signing.h"
#include "sink_nats_url.h"
#include "slot_health.h"

#define MAX_URL_LENGTH 2048
#define MAX_HEADERS 32
#define MAX_HEADER_VALUE_LENGTH 8192

/*
 * Reads (and checks) a given option's argument argno into its value; o
 * holds the options before it.  NULL in the table: the argument as is.
 */
typedef Datum (*ParseOption)(FunctionCallInfo fcinfo, int argno, bool alter,
							 const ReplicantPipelineOptions *o);

/* Appends alter_pipeline's assignment for the option, its value being $n. */
typedef void (*AssignOption)(StringInfo sql, int n);

typedef struct PipelineOption
{
	const char *name;    /* the argument's name, in messages */
	const char *column;  /* NULL: none */
	bool sink;           /* its column is in replicant.destinations */
	Oid type;            /* as an SPI parameter */
	int min;             /* INT4OID: the accepted range */
	int max;             /* (inclusive) */
	int create_arg;      /* position in create_pipeline(); -1: none */
	int alter_arg;       /* position in alter_pipeline(); -1: none */
	int destination_arg; /* position in alter_destination(); -1: none */
	int add_arg;         /* position in add_destination(); -1: none */
	bool create_null_ok; /* create_pipeline takes NULL (alter always does) */
	ParseOption parse;   /* NULL: the argument as is */
	AssignOption assign; /* NULL: coalesce($n, column) */
} PipelineOption;

char *
replicant_pipeline_options_required_text(FunctionCallInfo fcinfo, int argno, const char *argname)
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
 * Accepts http and https URLs with a host and without user information,
 * and NATS URLs (sink_nats_url.c).
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
void
replicant_pipeline_options_check_headers(Jsonb *headers)
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

void
replicant_pipeline_options_check_publications_exist(ArrayType *pubs)
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
/* A text argument, detoasted. */
static Datum
text_arg(FunctionCallInfo fcinfo, int argno)
{
	return PointerGetDatum(PG_GETARG_TEXT_PP(argno));
}

static Datum
parse_publication(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	return PointerGetDatum(check_publications(fcinfo, argno));
}

static Datum
parse_sink_url(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	Datum value = text_arg(fcinfo, argno);

	check_sink_url(TextDatumGetCString(value));
	return value;
}

static Datum
parse_snapshot(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	Datum value = text_arg(fcinfo, argno);

	if (strcmp(TextDatumGetCString(value), "none") != 0 &&
		strcmp(TextDatumGetCString(value), "initial") != 0 &&
		strcmp(TextDatumGetCString(value), "incremental") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("snapshot must be \"none\", \"initial\" or \"incremental\"")));
	return value;
}

/* Checked inside catalog access (replicant_pipeline_options_check_headers). */
static Datum
parse_headers(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	return PointerGetDatum(PG_GETARG_JSONB_P(argno));
}

static Datum
parse_secret(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	Datum value = text_arg(fcinfo, argno);

	replicant_signing_check_secret(TextDatumGetCString(value));
	return value;
}

static Datum
parse_clear_secret(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	if (PG_GETARG_BOOL(argno) && o->given[OPT_SECRET])
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot set and clear the signing secret at once")));
	return PG_GETARG_DATUM(argno);
}

/* alter_pipeline: '{}' goes back to every prefix. */
static Datum
parse_message_prefixes(FunctionCallInfo fcinfo, int argno, bool alter,
					   const ReplicantPipelineOptions *o)
{
	check_message_prefixes(PG_GETARG_ARRAYTYPE_P(argno), alter);
	return PointerGetDatum(PG_GETARG_ARRAYTYPE_P(argno));
}

static Datum
parse_ca_file(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	Datum value = text_arg(fcinfo, argno);

	check_ca_file(TextDatumGetCString(value));
	return value;
}

static Datum
parse_failover(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	check_failover(PG_GETARG_BOOL(argno));
	return PG_GETARG_DATUM(argno);
}

static Datum
parse_format(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	Datum value = text_arg(fcinfo, argno);

	replicant_format_check_name(TextDatumGetCString(value));
	return value;
}

/* Text in SQL ('20GB'), bytes in the column; alter_pipeline: '-1' is none. */
static Datum
parse_max_retained_wal(FunctionCallInfo fcinfo, int argno, bool alter,
					   const ReplicantPipelineOptions *o)
{
	return Int64GetDatum(replicant_slot_health_parse_budget(text_to_cstring(PG_GETARG_TEXT_PP(argno)),
															alter));
}

/* 'halt' or 'resync' (resync.c) */
static Datum
parse_on_slot_loss(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	Datum value = text_arg(fcinfo, argno);
	char *policy = TextDatumGetCString(value);

	if (strcmp(policy, "halt") != 0 && strcmp(policy, "resync") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("on_slot_loss must be \"halt\" or \"resync\"")));
	return value;
}

/* alter_pipeline: secret_previous_until keeps the current secret beside a new one. */
static Datum
parse_secret_previous_until(FunctionCallInfo fcinfo, int argno, bool alter,
							const ReplicantPipelineOptions *o)
{
	TimestampTz until = PG_GETARG_TIMESTAMPTZ(argno);

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
	return PG_GETARG_DATUM(argno);
}

/* clear_secret => true clears it, else NULL keeps it. */
static void
assign_secret(StringInfo sql, int n)
{
	appendStringInfo(sql, " secret = CASE WHEN $%d THEN NULL ELSE coalesce($%d, secret) END,",
					 REPLICANT_OPTION_PARAM(OPT_CLEAR_SECRET), n);
}

/* '{}' goes back to every prefix (NULL in the column). */
static void
assign_message_prefixes(StringInfo sql, int n)
{
	appendStringInfo(sql, " message_prefixes = CASE WHEN $%d IS NULL THEN message_prefixes"
						  "   WHEN pg_catalog.cardinality($%d) OPERATOR(pg_catalog.=) 0 THEN NULL ELSE $%d END,",
					 n, n, n);
}

/* A negative budget ('-1') is none (NULL in the column). */
static void
assign_max_retained_wal(StringInfo sql, int n)
{
	appendStringInfo(sql, " max_retained_wal = CASE WHEN $%d IS NULL THEN max_retained_wal"
						  "   WHEN $%d OPERATOR(pg_catalog.<) 0 THEN NULL ELSE $%d END,",
					 n, n, n);
}

/* Keeps the secret being replaced until then; NULL ends the overlap. */
static void
assign_secret_previous_until(StringInfo sql, int n)
{
	appendStringInfo(sql, " secret_previous = CASE WHEN $%d IS NOT NULL THEN secret END,"
						  " secret_previous_until = $%d,",
					 n, n);
}

/* A destination's name follows a pipeline name's rules. */
static Datum
parse_destination(FunctionCallInfo fcinfo, int argno, bool alter, const ReplicantPipelineOptions *o)
{
	Datum value = text_arg(fcinfo, argno);

	replicant_check_name("destination", TextDatumGetCString(value));
	return value;
}

/* The defaults are the SQL functions' DEFAULT clauses. */
static const PipelineOption pipeline_options[NUM_PIPELINE_OPTIONS] = {
	[OPT_PUBLICATION] = {"publication", "publications", false, TEXTARRAYOID, 0, 0, 1, 1, -1, -1, false, parse_publication, NULL},
	[OPT_SINK_URL] = {"sink_url", "sink_url", true, TEXTOID, 0, 0, 2, 2, 2, 2, false, parse_sink_url, NULL},
	[OPT_SNAPSHOT] = {"snapshot", "snapshot", false, TEXTOID, 0, 0, 3, -1, -1, 4, false, parse_snapshot, NULL},
	[OPT_BATCH_MAX_BYTES] = {"batch_max_bytes", "batch_max_bytes", true, INT4OID, 1024, 1024 * 1024 * 1024, 4, 3, 3, 5, false, NULL, NULL},
	[OPT_BATCH_MAX_TRANSACTIONS] = {"batch_max_transactions", "batch_max_transactions", true, INT4OID, 1, 1000000, 5, 4, 4, 6, false, NULL, NULL},
	[OPT_HTTP_TIMEOUT_MS] = {"http_timeout_ms", "http_timeout_ms", true, INT4OID, 100, 3600000, 6, 5, 5, 7, false, NULL, NULL},
	[OPT_CONNECT_TIMEOUT_MS] = {"connect_timeout_ms", "connect_timeout_ms", true, INT4OID, 100, 600000, 7, 6, 6, 8, false, NULL, NULL},
	[OPT_HEADERS] = {"headers", "headers", true, JSONBOID, 0, 0, 8, 7, 7, 9, false, parse_headers, NULL},
	[OPT_SECRET] = {"secret", "secret", true, TEXTOID, 0, 0, 9, 8, 8, 10, true, parse_secret, assign_secret},
	[OPT_CLEAR_SECRET] = {"clear_secret", NULL, true, BOOLOID, 0, 0, -1, 9, 9, -1, false, parse_clear_secret, NULL},
	[OPT_SNAPSHOT_WORKERS] = {"snapshot_workers", "snapshot_workers", false, INT4OID, 1, 16, 10, -1, -1, -1, false, NULL, NULL},
	[OPT_MESSAGES] = {"messages", "messages", false, BOOLOID, 0, 0, 11, 10, -1, -1, false, NULL, NULL},
	[OPT_MESSAGE_PREFIXES] = {"message_prefixes", "message_prefixes", false, TEXTARRAYOID, 0, 0, 12, 11, -1, -1, true, parse_message_prefixes, assign_message_prefixes},
	[OPT_CA_FILE] = {"ca_file", "ca_file", true, TEXTOID, 0, 0, 13, 13, 11, 11, true, parse_ca_file, NULL},
	/* 0.1.0's SQL function, before ALTER EXTENSION UPDATE, has no failover. */
	[OPT_FAILOVER] = {"failover", "failover", false, BOOLOID, 0, 0, 14, -1, -1, -1, false, parse_failover, NULL},
	/* Nor has either function format. */
	[OPT_FORMAT] = {"format", "format", true, TEXTOID, 0, 0, 15, 14, 12, 3, false, parse_format, NULL},
	/* 0.3.0's: created disabled; format clickhouse creates missing targets. */
	[OPT_ENABLED] = {"enabled", "enabled", false, BOOLOID, 0, 0, 16, -1, -1, -1, false, NULL, NULL},
	[OPT_CREATE_TABLES] = {"create_tables", "create_tables", true, BOOLOID, 0, 0, 17, 15, 13, 12, false, NULL, NULL},
	[OPT_MAX_RETAINED_WAL] = {"max_retained_wal", "max_retained_wal", true, INT8OID, 0, 0, 18, 16, 14, 13, true, parse_max_retained_wal, assign_max_retained_wal},
	[OPT_ON_SLOT_LOSS] = {"on_slot_loss", "on_slot_loss", true, TEXTOID, 0, 0, 19, 17, 15, 14, false, parse_on_slot_loss, NULL},
	/* The name of the pipeline's destination (issue 34). */
	[OPT_DESTINATION] = {"destination", "name", true, TEXTOID, 0, 0, 20, -1, -1, 1, false, parse_destination, NULL},
	[OPT_SECRET_PREVIOUS_UNTIL] = {"secret_previous_until", "secret_previous_until", true, TIMESTAMPTZOID, 0, 0, -1, 12, 10, -1, true, parse_secret_previous_until, assign_secret_previous_until},
};

static int
option_arg(const PipelineOption *opt, ReplicantOptionsCall call)
{
	switch (call)
	{
		case REPLICANT_CREATE_PIPELINE:
			return opt->create_arg;
		case REPLICANT_ALTER_PIPELINE:
			return opt->alter_arg;
		case REPLICANT_ALTER_DESTINATION:
			return opt->destination_arg;
		case REPLICANT_ADD_DESTINATION:
			return opt->add_arg;
	}
	return -1;
}

static bool
option_in_table(const PipelineOption *opt, ReplicantOptionsTable table)
{
	return opt->column != NULL &&
		   (table == REPLICANT_OPTIONS_BOTH || opt->sink == (table == REPLICANT_OPTIONS_DESTINATIONS));
}

void
replicant_pipeline_options_parse(FunctionCallInfo fcinfo, ReplicantOptionsCall call,
								 ReplicantPipelineOptions *o)
{
	bool alter = (call == REPLICANT_ALTER_PIPELINE || call == REPLICANT_ALTER_DESTINATION);
	int id;

	memset(o, 0, sizeof(*o));
	for (id = 0; id < NUM_PIPELINE_OPTIONS; id++)
	{
		const PipelineOption *opt = &pipeline_options[id];
		int argno = option_arg(opt, call);

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
		if (opt->type == INT4OID)
			check_range(opt->name, PG_GETARG_INT32(argno), opt->min, opt->max);
		o->values[id] = opt->parse ? opt->parse(fcinfo, argno, alter, o) : PG_GETARG_DATUM(argno);
		o->given[id] = true;
	}
}

void
replicant_pipeline_options_params(const ReplicantPipelineOptions *o, Oid pipeline_type,
								  Datum pipeline, Oid owner, Oid *types, Datum *values,
								  char *nulls)
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
		types[REPLICANT_OPTION_PARAM(id) - 1] = pipeline_options[id].type;
		values[REPLICANT_OPTION_PARAM(id) - 1] = o->values[id];
		nulls[REPLICANT_OPTION_PARAM(id) - 1] = o->given[id] ? ' ' : 'n';
	}
}

void
replicant_pipeline_options_insert_sql(StringInfo columns, StringInfo params, int nargs,
									  ReplicantOptionsCall call, ReplicantOptionsTable table)
{
	int id;

	for (id = 0; id < NUM_PIPELINE_OPTIONS; id++)
	{
		const PipelineOption *opt = &pipeline_options[id];
		int argno = option_arg(opt, call);

		if (argno < 0 || argno >= nargs || !option_in_table(opt, table))
			continue;
		appendStringInfo(columns, ", %s", opt->column);
		appendStringInfo(params, ", $%d", REPLICANT_OPTION_PARAM(id));
	}
}

void
replicant_pipeline_options_update_sql(StringInfo sql, int nargs, ReplicantOptionsCall call,
									  ReplicantOptionsTable table)
{
	int id;

	for (id = 0; id < NUM_PIPELINE_OPTIONS; id++)
	{
		const PipelineOption *opt = &pipeline_options[id];
		int argno = option_arg(opt, call);
		int n = REPLICANT_OPTION_PARAM(id);

		if (argno < 0 || argno >= nargs || !option_in_table(opt, table))
			continue;
		if (opt->assign)
			opt->assign(sql, n);
		else
			appendStringInfo(sql, " %s = coalesce($%d, %s),", opt->column, n, opt->column);
	}
}

const char *
replicant_pipeline_options_sink_option_given(const ReplicantPipelineOptions *o)
{
	int id;

	for (id = 0; id < NUM_PIPELINE_OPTIONS; id++)
	{
		/* clear_secret => false, its default, changes nothing */
		if (pipeline_options[id].sink && o->given[id] &&
			(id != OPT_CLEAR_SECRET || DatumGetBool(o->values[id])))
			return pipeline_options[id].name;
	}
	return NULL;
}
