/*
 * event_log.c
 *		A pipeline's state changes as log lines a machine can read: one line
 *		each, a fixed prefix, key=value fields (README, "Monitoring").
 */
#include "postgres.h"

#include <stdarg.h>

#include "lib/stringinfo.h"

#include "event_log.h"

/* Appends value bare, or double-quoted with " and \ escaped. */
static void
append_value(StringInfo buf, const char *value)
{
	bool bare = value[0] != '\0';

	for (const char *p = value; *p && bare; p++)
		bare = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			   (*p >= '0' && *p <= '9') || strchr("_.:/-", *p) != NULL;
	if (bare)
	{
		appendStringInfoString(buf, value);
		return;
	}
	appendStringInfoChar(buf, '"');
	for (const char *p = value; *p; p++)
	{
		if (*p == '"' || *p == '\\')
			appendStringInfoChar(buf, '\\');
		/* One line: a line break would split the record. */
		appendStringInfoChar(buf, (*p == '\n' || *p == '\r') ? ' ' : *p);
	}
	appendStringInfoChar(buf, '"');
}

void
replicant_log_state(const char *pipeline, const char *event, ...)
{
	StringInfoData buf;
	va_list args;
	const char *key;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "replicant: event=");
	append_value(&buf, event);
	appendStringInfoString(&buf, " pipeline=");
	append_value(&buf, pipeline);
	va_start(args, event);
	while ((key = va_arg(args, const char *)) != NULL)
	{
		const char *value = va_arg(args, const char *);

		appendStringInfo(&buf, " %s=", key);
		append_value(&buf, value ? value : "");
	}
	va_end(args);
	ereport(LOG, (errmsg_internal("%s", buf.data), errhidestmt(true)));
	pfree(buf.data);
}
