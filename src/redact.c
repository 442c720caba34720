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
 * detail and context, which PostgreSQL fills with the offending input.
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/elog.h"

#include "redact.h"

PG_FUNCTION_INFO_V1(replicant_redact_url);

static emit_log_hook_type prev_emit_log_hook = NULL;
static bool installed = false;
static bool hide_in_xact = false;

/* Case-insensitive search without allocating: this runs inside elog. */
static bool
mentions(const char *text, const char *needle)
{
	size_t		len = strlen(needle);
	const char *p;

	for (p = text; *p; p++)
	{
		if (pg_strncasecmp(p, needle, len) == 0)
			return true;
	}
	return false;
}

static void
replicant_emit_log(ErrorData *edata)
{
	if (hide_in_xact ||
		(debug_query_string != NULL &&
		 (mentions(debug_query_string, "replicant") ||
		  mentions(debug_query_string, "_pipeline"))))
	{
		edata->hide_stmt = true;
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

Datum
replicant_redact_url(PG_FUNCTION_ARGS)
{
	char	   *url = text_to_cstring(PG_GETARG_TEXT_PP(0));

	PG_RETURN_TEXT_P(cstring_to_text(replicant_redacted_url(url)));
}
