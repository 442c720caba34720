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
 * running a statement that calls replicant's functions.  The messages
 * themselves never carry values.
 */
#include "postgres.h"

#include "fmgr.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/elog.h"

#include "redact.h"

PG_FUNCTION_INFO_V1(replicant_redact_url);

static emit_log_hook_type prev_emit_log_hook = NULL;
static bool installed = false;

/* Case-insensitive search without allocating: this runs inside elog. */
static bool
mentions_replicant(const char *text)
{
	static const char needle[] = "replicant";
	const char *p;

	for (p = text; *p; p++)
	{
		if (pg_strncasecmp(p, needle, sizeof(needle) - 1) == 0)
			return true;
	}
	return false;
}

static void
replicant_emit_log(ErrorData *edata)
{
	if (debug_query_string != NULL && mentions_replicant(debug_query_string))
		edata->hide_stmt = true;
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

void
replicant_redact_init(void)
{
	if (installed)
		return;
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = replicant_emit_log;
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
