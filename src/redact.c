/*
 * redact.c
 *		Keeping secrets out of the server log and out of what views show.
 *
 * A call such as replicant.create_pipeline(..., secret => '...') carries
 * secrets in its statement text.  PostgreSQL logs that text as a STATEMENT
 * line after any message at or above log_min_error_statement (ERROR by
 * default), and it treats LOG as above ERROR there, so even the
 * "logical decoding found consistent point" LOG of slot creation would echo
 * it.  An emit_log_hook hides the statement of every message raised while
 * running a statement that mentions replicant or a *_pipeline function, or
 * for the rest of a transaction in which create_pipeline or alter_pipeline
 * ran (the call may not name them: EXECUTE, a wrapper function).  Data
 * errors raised there (a malformed headers literal, say) also lose their
 * detail and context, which PostgreSQL fills with the offending input, and
 * with log_parameter_max_length_on_error every message loses its context,
 * which then shows the bind parameters.
 *
 * The same statements' own log lines carry the text too: log_statement's
 * "statement: ..." (or "execute <name>: ..."), the "duration: ..." lines of
 * log_min_duration_statement, and auto_explain's plans, whose nested
 * statements show the values of their parameters.  Those are rewritten to
 * "statement hidden by replicant", keeping the duration, without detail
 * (the parameters of an extended-protocol call).  A statement that names
 * neither replicant nor a *_pipeline function (EXECUTE, a wrapper of
 * another name) is logged by log_statement before replicant runs, so that
 * one line cannot be covered; its later duration and plan lines are, by the
 * statement's hash.
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/elog.h"
#include "utils/guc.h"

#include "redact.h"

PG_FUNCTION_INFO_V1(replicant_redact_url);
PG_FUNCTION_INFO_V1(replicant_sink_url);

static emit_log_hook_type prev_emit_log_hook = NULL;
static bool installed = false;
static bool hide_in_xact = false;

/* The statement that last ran create_pipeline or alter_pipeline. */
static bool hidden_statement_valid = false;
static uint32 hidden_statement_hash;

/*
 * The formats of the server's and auto_explain's statement lines; "%s %s"
 * is log_statement's "execute <name>: ..." of the extended protocol.
 */
static const char *const statement_formats[] = {
	"statement: ", "duration: ", "%s %s%s%s: %s", NULL};

/* Case-insensitive search without allocating: this runs inside elog. */
static bool
mentions(const char *text, const char *needle)
{
	size_t len = strlen(needle);
	const char *p;

	for (p = text; *p; p++)
	{
		if (pg_strncasecmp(p, needle, len) == 0)
			return true;
	}
	return false;
}

static uint32
statement_hash(const char *text)
{
	return hash_bytes((const unsigned char *) text, strlen(text));
}

static bool
is_statement_line(const ErrorData *edata)
{
	const char *const *format;

	if (edata->message_id == NULL || edata->message == NULL)
		return false;
	for (format = statement_formats; *format; format++)
		if (strncmp(edata->message_id, *format, strlen(*format)) == 0)
			return true;
	return false;
}

/* Keeps "duration: 1.234 ms" of a line, hides the statement and plan. */
static void
hide_statement_line(ErrorData *edata)
{
	const char *ms = NULL;

	if (strncmp(edata->message_id, "duration: ", 10) == 0)
		ms = strstr(edata->message, " ms");
	if (ms)
		edata->message = psprintf("%.*s  statement hidden by replicant",
								  (int) (ms + 3 - edata->message), edata->message);
	else
		edata->message = pstrdup("statement hidden by replicant");
	edata->detail = NULL;
	edata->detail_log = NULL;
}

static void
replicant_emit_log(ErrorData *edata)
{
	if (hide_in_xact ||
		(debug_query_string != NULL &&
		 (mentions(debug_query_string, "replicant") ||
		  mentions(debug_query_string, "_pipeline") ||
		  (hidden_statement_valid &&
		   statement_hash(debug_query_string) == hidden_statement_hash))))
	{
		edata->hide_stmt = true;
		/* "unnamed portal with parameters: $1 = ...": the bind values. */
		if (log_parameter_max_length_on_error != 0)
			edata->context = NULL;
		if (is_statement_line(edata))
			hide_statement_line(edata);
		if (edata->elevel >= ERROR &&
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_DATA_EXCEPTION)
		{
			edata->detail = NULL;
			edata->detail_log = NULL;
			edata->context = NULL;
		}
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

static void
redact_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
		hide_in_xact = false;
}

void
replicant_redact_statements(void)
{
	hide_in_xact = true;
	if (debug_query_string != NULL)
	{
		hidden_statement_hash = statement_hash(debug_query_string);
		hidden_statement_valid = true;
	}
}

void
replicant_redact_init(void)
{
	if (installed)
		return;
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = replicant_emit_log;
	RegisterXactCallback(redact_xact_callback, NULL);
	installed = true;
}

char *
replicant_redacted_url(const char *url)
{
	const char *authority = strstr(url, "://");
	const char *end;
	const char *at = NULL;
	const char *p;

	if (authority == NULL)
		return pstrdup(url);
	authority += 3;
	end = authority + strcspn(authority, "/?#");
	for (p = authority; p < end; p++)
		if (*p == '@')
			at = p;
	if (at == NULL)
		return pstrdup(url);
	return psprintf("%.*s***%s", (int) (authority - url), url, at);
}

/* url's "scheme://host[:port]" alone: no user information, path or query. */
static char *
url_origin(const char *url)
{
	const char *authority = strstr(url, "://");
	const char *end;
	const char *p;

	if (authority == NULL)
		return pstrdup("***");
	authority += 3;
	end = authority + strcspn(authority, "/?#");
	for (p = authority; p < end; p++)
		if (*p == '@')
			authority = p + 1;
	return psprintf("%.*s://%.*s", (int) (strstr(url, "://") - url), url,
					(int) (end - authority), authority);
}

Datum
replicant_redact_url(PG_FUNCTION_ARGS)
{
	char *url = text_to_cstring(PG_GETARG_TEXT_PP(0));

	PG_RETURN_TEXT_P(cstring_to_text(replicant_redacted_url(url)));
}

/*
 * _sink_url(url, owner): replicant.status's sink_url for the reader.  Paths
 * and queries often hold tokens, so only the pipeline's owner (or a member
 * of the owner role, or a superuser) sees them; everyone else gets
 * scheme://host[:port].
 */
Datum
replicant_sink_url(PG_FUNCTION_ARGS)
{
	char *url = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Oid owner = PG_GETARG_OID(1);

	if (has_privs_of_role(GetUserId(), owner))
		PG_RETURN_TEXT_P(cstring_to_text(replicant_redacted_url(url)));
	PG_RETURN_TEXT_P(cstring_to_text(url_origin(url)));
}
